//! `nccl-find explain` on real failures: the corpus of public threads
//! (`tests/explain/corpus/NAME/`: the log, and beside it the thread's
//! address, the cause and fix the thread established, and the answer
//! asserted), the logs recorded on a GPU machine (`tests/explain/gpu/`),
//! every launcher's prefixes, and bad input of every kind.
//! `UPDATE_GOLDEN=1 cargo test --test explain` writes each case's answer
//! as it is now: review the diff.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::TmpDir;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/explain")
}

fn explain() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
    c.arg("explain").env_remove("NO_COLOR");
    c
}

/// The output's first and last lines, and the exit status.
fn answer(o: &Output) -> (i32, String, String) {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<&str> = out.lines().collect();
    (
        o.status.code().unwrap_or(-1),
        lines.first().copied().unwrap_or_default().to_string(),
        lines.last().copied().unwrap_or_default().to_string(),
    )
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&o.stdout));
    })
}

/// A case's fields (`key: value` lines of its file `case`).
fn fields(dir: &Path) -> std::collections::BTreeMap<String, String> {
    let text = std::fs::read_to_string(dir.join("case")).unwrap();
    text.lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The logs of a case: every file of its directory but `case`, in order.
fn logs(dir: &Path) -> Vec<String> {
    common::names(dir)
        .into_iter()
        .filter(|n| n != "case")
        .collect()
}

/// Runs the case `name` (`corpus/NAME` or `gpu/NAME`) and asserts the
/// answer it holds: the class, the first line, the last line, the exit
/// status; text and JSON agree.
fn check(name: &str) {
    let dir = corpus().join(name);
    let c = fields(&dir);
    let files = logs(&dir);
    let o = explain().args(&files).current_dir(&dir).output().unwrap();
    let (code, first, last) = answer(&o);
    let run = explain()
        .arg("--json")
        .args(&files)
        .current_dir(&dir)
        .output();
    let j = json(&run.unwrap());
    let class = j["class"].as_str().unwrap_or("none");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        // The answer as it is now, written over the one the case held.
        let text = std::fs::read_to_string(dir.join("case")).unwrap();
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with("expect-"))
            .map(String::from)
            .collect();
        lines.push(format!("expect-exit: {code}"));
        lines.push(format!("expect-class: {class}"));
        lines.push(format!("expect-first: {first}"));
        lines.push(format!("expect-last: {last}"));
        std::fs::write(dir.join("case"), lines.join("\n") + "\n").unwrap();
        return;
    }
    assert_eq!(first, c["expect-first"], "{name}");
    assert_eq!(last, c["expect-last"], "{name}");
    assert_eq!(code.to_string(), c["expect-exit"], "{name}");
    assert_eq!(class, c["expect-class"], "{name}");
    assert_eq!(j["headline"], first.as_str(), "{name}");
    assert_eq!(j["fix"], last.as_str(), "{name}");
    assert_eq!(j["exit"], code, "{name}");
    // Every case is explained as the thread, or the recording, says.
    if name.starts_with("gpu/") {
        assert_eq!(c["thread-class"], c["expect-class"], "{name}");
    }
}

macro_rules! cases {
    ($every:ident in $dir:literal: $($test:ident => $name:literal),* $(,)?) => {
        $(#[test] fn $test() { check(&format!("{}/{}", $dir, $name)); })*

        /// Every case in the directory has its test.
        #[test]
        fn $every() {
            let mut named = vec![$($name),*];
            named.sort();
            assert_eq!(common::names(&corpus().join($dir)), named);
        }
    };
}

cases! {
    every_case_of_the_corpus_is_a_test in "corpus":
    accelerate_223 => "accelerate-223",
    aws_ofi_nccl_663 => "aws-ofi-nccl-663",
    awsome_distributed_ai_292 => "awsome-distributed-ai-292",
    d_fine_289 => "d-fine-289",
    lm_evaluation_harness_1404 => "lm-evaluation-harness-1404",
    lmdeploy_1108 => "lmdeploy-1108",
    marin_7018 => "marin-7018",
    nccl_1235 => "nccl-1235",
    nccl_1267 => "nccl-1267",
    nccl_1488 => "nccl-1488",
    nccl_1634 => "nccl-1634",
    nccl_1784 => "nccl-1784",
    nccl_2076 => "nccl-2076",
    nccl_2079 => "nccl-2079",
    nccl_295 => "nccl-295",
    nccl_342 => "nccl-342",
    nccl_352 => "nccl-352",
    nccl_426 => "nccl-426",
    nccl_525 => "nccl-525",
    nccl_626 => "nccl-626",
    nccl_667 => "nccl-667",
    nccl_697 => "nccl-697",
    nccl_795 => "nccl-795",
    nccl_969 => "nccl-969",
    nccl_976 => "nccl-976",
    nccl_tests_14 => "nccl-tests-14",
    open_r1_multimodal_7 => "open-r1-multimodal-7",
    pytorch_119932 => "pytorch-119932",
    pytorch_177472 => "pytorch-177472",
    pytorch_68893 => "pytorch-68893",
    pytorch_81628 => "pytorch-81628",
    returnn_1802 => "returnn-1802",
    sglang_3820 => "sglang-3820",
    speechbrain_2401 => "speechbrain-2401",
    tensorrt_llm_1670 => "tensorrt-llm-1670",
    torchtitan_1224 => "torchtitan-1224",
    xgboost_5963 => "xgboost-5963",
}

cases! {
    every_recording_is_a_test in "gpu":
    gpu_bad_ifname => "bad-ifname",
    gpu_dup_gpu => "dup-gpu",
    gpu_nowhere_info => "nowhere-info",
    gpu_nowhere_warn => "nowhere-warn",
    gpu_ok => "ok",
    gpu_ras_off => "ras-off",
    gpu_shm => "shm",
}

/// The corpus's score: the cases whose class is the one the thread
/// established. A change that names fewer turns this red.
#[test]
fn the_corpus_score_holds() {
    let names = common::names(&corpus().join("corpus"));
    let mut hits = 0;
    let mut classes = std::collections::BTreeSet::new();
    for n in &names {
        let c = fields(&corpus().join("corpus").join(n));
        classes.insert(c["thread-class"].clone());
        hits += usize::from(c["thread-class"] == c["expect-class"]);
    }
    eprintln!(
        "corpus: {hits} of {} cases named, {} classes",
        names.len(),
        classes.len()
    );
    assert!(
        names.len() >= 30 && classes.len() >= 12,
        "{} cases, {} classes",
        names.len(),
        classes.len()
    );
    assert!(hits >= 34, "{hits} of {}", names.len());
}

/// Writes `text` to a file `name` in `dir`.
fn write(dir: &Path, name: &str, text: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Two ranks' files, one with the cause and one with its echo: the cause
/// is named on its rank and host, the echo counted, whichever file comes
/// first.
#[test]
fn the_cause_outranks_its_echoes_across_files() {
    let t = TmpDir::new("explain-files");
    let r0 = write(
        t.path(),
        "slurm-7-0.out",
        b"node1:10:10 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n\
          node1:10:20 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer node2<5>\n\
          [rank0]: torch.distributed.DistBackendError: NCCL error in: x.cpp:1, remote process exited or there was a network error, NCCL version 2.28.9\n",
    );
    let r1 = write(
        t.path(),
        "slurm-7-1.out",
        b"node2:11:11 [0] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 0 busId 2000 - Init COMPLETE\n\
          node2:11:30 [0] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n",
    );
    for order in [[&r0, &r1], [&r1, &r0]] {
        let o = explain().args(order).output().unwrap();
        let (code, first, last) = answer(&o);
        assert_eq!(code, 1);
        assert_eq!(
            first,
            "Cause: rank 1 on node2: the GPU ran out of memory in NCCL (out of memory)."
        );
        assert!(
            last.starts_with("Fix: create the process group before the model"),
            "{last}"
        );
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("slurm-7-1.out:2: node2:11:30"), "{text}");
        assert!(
            text.contains(
                "Echoes: 2 more lines on rank 0 (nccl-error, remote-error) follow from it."
            ),
            "{text}"
        );
    }
}

/// One file with every rank's lines, under each launcher's prefixes: the
/// ranks are read from the prefixes.
#[test]
fn every_launchers_prefixes_name_the_rank() {
    let t = TmpDir::new("explain-prefixes");
    let warn = "node3:5:6 [0] init.cc:943 NCCL WARN Duplicate GPU detected : rank 3 and rank 2 both on CUDA device 60";
    for (prefix, who) in [
        ("[rank3]:", "rank 3 on node3"),
        ("3: ", "rank 3 on node3"),
        ("[1,3]<stderr>:", "rank 3 on node3"),
        ("[default3]:", "node3"),
        ("", "node3"),
    ] {
        let log = format!(
            "{prefix}node1:1:1 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.1<0>\n{prefix}{warn}\n"
        );
        let p = write(t.path(), "all.log", log.as_bytes());
        let o = explain().arg(&p).output().unwrap();
        let (code, first, _) = answer(&o);
        assert_eq!(code, 1, "{prefix}");
        assert_eq!(
            first,
            format!("Cause: {who}: two ranks use one GPU (rank 3 and rank 2 on CUDA device 60)."),
            "{prefix:?}"
        );
    }
}

/// Where the lines say when, the first cause in time is named, in
/// whichever file it is.
#[test]
fn the_first_cause_in_time_is_named() {
    let t = TmpDir::new("explain-time");
    let a = write(
        t.path(),
        "a.log",
        b"[2026-11-29 10:00:05] node1:1:1 [0] misc/shmutils.cc:80 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9637888), error: No space left on device (28)\n",
    );
    let b = write(
        t.path(),
        "b.log",
        b"[2026-11-29 10:00:01] node2:2:2 [0] transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid argument'\n",
    );
    let o = explain().args([&a, &b]).output().unwrap();
    let (_, first, _) = answer(&o);
    assert_eq!(
        first,
        "Cause: node2: NVLink SHARP (NVLS) multicast failed (invalid argument)."
    );
}

/// A job that ended well: exit 0, and the last line says so.
#[test]
fn a_job_that_ended_well_exits_0() {
    let t = TmpDir::new("explain-ok");
    let p = write(
        t.path(),
        "ok.log",
        b"NCCL version 2.28.9+cuda13.0\n\
          node1:1:1 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.1<0>\n\
          node1:1:1 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x2 - Init COMPLETE\n\
          step 100 loss 0.1\n",
    );
    let o = explain().arg(&p).output().unwrap();
    let (code, first, last) = answer(&o);
    assert_eq!(code, 0);
    assert_eq!(
        first,
        "No failure: the logs show no failure (NCCL 2.28.9+cuda13.0, 1 rank)."
    );
    assert_eq!(
        last,
        "Nothing to fix: if the job hung with no line at all, rerun it with NCCL_DEBUG=INFO, or nccl-find smoke under the same launcher."
    );
}

/// A hang that PyTorch's watchdog saw on three of four ranks: the fourth
/// is named as the one behind, and the logs are said to show no cause.
#[test]
fn a_hang_names_the_rank_behind() {
    let t = TmpDir::new("explain-hang");
    let mut log = String::from("NCCL version 2.28.9+cuda13.0\n");
    for r in 0..4 {
        log.push_str(&format!(
            "[rank{r}]:node1:{r}:{r} [{r}] NCCL INFO comm 0x1 rank {r} nranks 4 cudaDev {r} busId 1000 - Init COMPLETE\n"
        ));
    }
    for r in [0, 1, 3] {
        log.push_str(&format!("[rank{r}]:[E1129 10:10:0{r}.5 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=60000) ran for 60012 milliseconds before timing out.\n"));
    }
    let p = write(t.path(), "job.log", log.as_bytes());
    let o = explain().arg(&p).output().unwrap();
    let (code, first, last) = answer(&o);
    assert_eq!(code, 1);
    assert_eq!(
        first,
        "No cause in these logs: ranks 0, 1 and 3: collectives timed out (ALLREDUCE, collective 7): ranks 0, 1 and 3 timed out in collective 7; rank 2 did not: the rank that stopped calling collectives is among them."
    );
    assert!(
        last.starts_with("Fix: find what rank 2 was doing"),
        "{last}"
    );
}

/// `--here` names this host's interface on the peer's subnet, or its
/// default route's, in the fix; without it, the fix is the logs' alone.
#[test]
fn here_adds_this_hosts_interface_to_the_fix() {
    let t = TmpDir::new("explain-here");
    let p = write(
        t.path(),
        "r1.log",
        b"node2:1:1 [0] NCCL INFO Bootstrap: Using ib0:10.99.0.2<0>\n\
          node2:1:1 [0] misc/socket.cc:484 NCCL WARN socketPollConnect: connect to 127.0.0.1<4242> returned Connection timed out, exceeded error retry count after 35 attempts\n",
    );
    let (_, first, last) = answer(&explain().arg(&p).output().unwrap());
    assert_eq!(
        first,
        "Cause: node2: ib0 (10.99.0.2) does not reach 127.0.0.1 (Connection timed out)."
    );
    assert!(
        last.starts_with(
            "Fix: set NCCL_SOCKET_IFNAME to an interface on the network between the nodes; "
        ),
        "{last}"
    );
    let (_, _, here) = answer(&explain().arg("--here").arg(&p).output().unwrap());
    // This machine's default route, as the kernel lists it.
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    let default = routes
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|c| c.get(1) == Some(&"00000000"))
        .map(|c| c[0].to_string());
    match default {
        Some(d) if d != "ib0" => assert!(
            here.starts_with(&format!(
                "Fix: set NCCL_SOCKET_IFNAME to an interface on the network between the nodes: on this node NCCL_SOCKET_IFNAME={d} (its default route leaves through {d}); "
            )),
            "{here}"
        ),
        _ => eprintln!("no default route here: --here's words depend on the interfaces ({here})"),
    }
}

/// Nothing to read: exit 2, each input's reason, the fix last.
#[test]
fn nothing_readable_exits_2() {
    let t = TmpDir::new("explain-none");
    let dir = t.path().join("logs");
    std::fs::create_dir(&dir).unwrap();
    let gz = write(
        t.path(),
        "x.gz",
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03",
    );
    let empty = write(t.path(), "empty.log", b"");
    let o = explain()
        .arg(&dir)
        .arg(&gz)
        .arg(&empty)
        .arg(t.path().join("missing.log"))
        .output()
        .unwrap();
    let (code, first, last) = answer(&o);
    assert_eq!(code, 2);
    assert!(first.starts_with("Nothing could be read: "), "{first}");
    assert!(
        first.contains("logs: a directory: name its files (dir/*.out)"),
        "{first}"
    );
    assert!(
        first.contains("x.gz: gzip-compressed: zcat it | nccl-find explain -"),
        "{first}"
    );
    assert!(first.contains("empty.log: empty"), "{first}");
    assert!(
        first.contains("missing.log: cannot be read (No such file or directory"),
        "{first}"
    );
    assert_eq!(
        last,
        "Fix: name the job's log files (nccl-find explain slurm-*.out), or pipe them in (… | nccl-find explain -)."
    );
    let j = json(&explain().arg("--json").arg(&dir).output().unwrap());
    assert_eq!(
        (j["verdict"].as_str(), j["exit"].as_i64()),
        (Some("unreadable"), Some(2))
    );
}

/// Hostile bytes: escapes, NULs, CRLF, a line of 20 MiB, a binary file,
/// all at once. Every file is read in bounded time and memory, the
/// cause still named, and nothing reaches the terminal unescaped.
#[test]
fn hostile_input_is_read_safely() {
    let t = TmpDir::new("explain-hostile");
    let mut log = Vec::new();
    log.extend_from_slice(b"\x1b[31mred\x1b[0m node1:1:1 [0] NCCL INFO x\r\n");
    log.extend_from_slice(b"\x00\x00\x00garbage\r\n");
    log.extend_from_slice(&vec![b'A'; 20 << 20]);
    log.extend_from_slice(b"Bootstrap : no socket interface found\r\n");
    log.extend_from_slice(b"node1:1:1 [0] bootstrap.cc:1 NCCL WARN Bootstrap : no socket interface found \x1b]0;pwned\x07\xe2\x80\xae\r\n");
    log.extend_from_slice(b"node1:1:1 [0] NCCL WARN truncated li");
    let p = write(t.path(), "hostile.log", &log);
    let bin = write(t.path(), "core", &[0u8, 1, 2, 3, 4, 5, 6, 7].repeat(4096));
    let started = std::time::Instant::now();
    let o = explain().arg(&p).arg(&bin).output().unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        !out.contains('\x1b') && !out.contains('\u{202e}') && !out.contains('\x07'),
        "{out:?}"
    );
    let (code, first, _) = answer(&o);
    assert_eq!(code, 1);
    assert_eq!(
        first,
        "Cause: node1: NCCL found no network interface to use."
    );
    assert!(out.contains("hostile.log:4: node1:1:1 [0] bootstrap.cc:1 NCCL WARN Bootstrap : no socket interface found \\u{1b}]0;pwned\\u{7}\\u{202e}"), "{out}");
    assert!(out.contains("/hostile.log: 1 line(s) longer than 1 MiB: their first MiB read; holds NUL bytes: read as text"), "{out}");
    assert!(out.contains("/core: binary, not a log: skipped"), "{out}");
}

/// Standard input, as a pipe from `kubectl logs`; and `-` among files.
#[test]
fn standard_input_is_read() {
    let mut c = explain()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(
            b"[rank0]: ImportError: /x/libtorch_cuda.so: undefined symbol: ncclCommRegister\n",
        )
        .unwrap();
    let o = c.wait_with_output().unwrap();
    let (code, first, _) = answer(&o);
    assert_eq!(code, 1);
    assert_eq!(
        first,
        "Cause: rank 0: the NCCL that loaded is older than the program needs: it lacks ncclCommRegister (it came in NCCL 2.19.1)."
    );
}

/// A large job's logs stream: 64 files of 1 MiB each, every line a
/// candidate's neighbour (docs/benchmarks.md has 512 ranks' and the
/// memory).
#[test]
fn many_large_files_stream() {
    let t = TmpDir::new("explain-large");
    let line = "node1:1234:1234 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n";
    let body = line.repeat((1 << 20) / line.len());
    let mut files = Vec::new();
    for r in 0..64 {
        let mut text = format!("node{r}:1:1 [0] NCCL INFO comm 0x1 rank {r} nranks 64 cudaDev 0 busId 1000 - Init COMPLETE\n");
        text.push_str(&body);
        files.push(write(t.path(), &format!("r{r}.log"), text.as_bytes()));
    }
    let o = explain().args(&files).output().unwrap();
    let (code, first, _) = answer(&o);
    assert_eq!(
        (code, first.as_str()),
        (0, "No failure: the logs show no failure.")
    );
}
