//! `nccl-find ras` against a stand-in for NCCL's RAS service that replays
//! what the real one (NCCL 2.28.9, `scripts/gpu-ras.sh`) answered about a
//! two-rank torch job: healthy, a rank behind, a rank killed, in text and
//! in JSON (`tests/ras/2.28.9/`). Then what a broken, slow, oversized or
//! hostile service gets, and why nothing answered.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The report of a recorded conversation (NCCL 2.28.9's): the server's
/// last block.
fn report(name: &str) -> Vec<u8> {
    server_blocks(&format!("2.28.9/{name}")).pop().unwrap()
}

/// What the server said in a recorded conversation (`tests/ras/NAME`),
/// block by block.
fn server_blocks(name: &str) -> Vec<Vec<u8>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/ras")
        .join(name);
    let data = std::fs::read(&path).unwrap();
    let mut blocks = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let end = at + data[at..].iter().position(|&b| b == b'\n').unwrap();
        let head = std::str::from_utf8(&data[at..end]).unwrap();
        let n: usize = head.rsplit(' ').next().unwrap().parse().unwrap();
        let body = data[end + 1..end + 1 + n].to_vec();
        at = end + 1 + n;
        if data.get(at) == Some(&b'\n') && !body.ends_with(b"\n") {
            at += 1;
        }
        if head.starts_with("--- server") {
            blocks.push(body);
        }
    }
    blocks
}

/// How the stand-in behaves.
#[derive(Clone)]
enum Serve {
    /// As NCCL does, with these reports, one per connection (the last
    /// again after them); `json`: it takes `SET FORMAT json` (2.28.7+).
    Nccl { reports: Vec<Vec<u8>>, json: bool },
    /// Sends these bytes as soon as a client connects, then closes.
    Raw(Vec<u8>),
    /// Takes the connection and never says a word.
    Silent,
    /// Answers each line with the next block a real NCCL sent in a
    /// recorded conversation, and `STATUS` with its report.
    Replay(Vec<Vec<u8>>),
}

/// A stand-in RAS service on a port of its own: its address.
fn serve(how: Serve) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let served = Arc::new(Mutex::new(0usize));
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let (how, served) = (how.clone(), served.clone());
            std::thread::spawn(move || conversation(s, how, served));
        }
    });
    addr
}

fn conversation(mut s: TcpStream, how: Serve, served: Arc<Mutex<usize>>) {
    let (reports, json) = match how {
        Serve::Raw(b) => {
            let _ = s.write_all(&b);
            return;
        }
        Serve::Silent => {
            std::thread::sleep(Duration::from_secs(60));
            return;
        }
        Serve::Replay(blocks) => return replay(s, blocks),
        Serve::Nccl { reports, json } => (reports, json),
    };
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    while r.read_line(&mut line).unwrap_or(0) > 0 {
        let cmd = line.trim_end().to_ascii_lowercase();
        let reply: Vec<u8> = if cmd.starts_with("client protocol ") {
            b"SERVER PROTOCOL 2\n".to_vec()
        } else if cmd.starts_with("timeout ") || (cmd == "set format json" && json) {
            b"OK\n".to_vec()
        } else if cmd == "status" || cmd == "verbose status" {
            let mut n = served.lock().unwrap();
            let body = reports[(*n).min(reports.len() - 1)].clone();
            *n += 1;
            let _ = s.write_all(&body);
            return;
        } else {
            format!("ERROR: Unknown command {}\n", line.trim_end()).into_bytes()
        };
        if s.write_all(&reply).is_err() {
            return;
        }
        line.clear();
    }
}

fn replay(mut s: TcpStream, blocks: Vec<Vec<u8>>) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    let mut next = blocks.iter();
    while r.read_line(&mut line).unwrap_or(0) > 0 {
        let status = line.trim_end().to_ascii_lowercase().ends_with("status");
        let block = match status {
            true => blocks.last(),
            false => next.next(),
        };
        if block.is_some_and(|b| s.write_all(b).is_err()) || status {
            return;
        }
        line.clear();
    }
}

/// A stand-in RAS service in a process of its own (`tests/ras/serve.py`)
/// that maps a `libnccl.so.2` of `version` and answers as that release
/// does; killed when dropped.
struct Job {
    child: std::process::Child,
    /// Where it listens.
    addr: String,
    record: std::path::PathBuf,
}

impl Job {
    /// NCCL `version`'s service, with these reports (one per `STATUS`, the
    /// last again after them).
    fn start(version: &str, reports: Vec<Vec<u8>>) -> Job {
        Job::start_with(version, reports, &[])
    }

    /// The same, its process given `env` (a launcher's variables).
    fn start_with(version: &str, reports: Vec<Vec<u8>>, env: &[(&str, &str)]) -> Job {
        Job::start_mapping(version, &[version], reports, env)
    }

    /// NCCL `version`'s service in a process that maps a `libnccl.so.2` of
    /// each of `mapped`.
    fn start_mapping(
        version: &str,
        mapped: &[&str],
        reports: Vec<Vec<u8>>,
        env: &[(&str, &str)],
    ) -> Job {
        let json = version >= "2.28.7";
        let libs: Vec<_> = mapped.iter().map(|v| common::fake_nccl(v)).collect();
        let lib = libs[0].clone();
        let joined = libs
            .iter()
            .map(|l| l.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        let dir = lib.parent().unwrap().to_path_buf();
        let record = dir.join("received");
        let mut c = Command::new("python3");
        c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ras/serve.py"))
            .arg(&joined)
            .arg(if json { "1" } else { "0" })
            .arg(&record)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped());
        for (i, r) in reports.iter().enumerate() {
            let f = dir.join(format!("report-{i}"));
            std::fs::write(&f, r).unwrap();
            c.arg(f);
        }
        let mut child = c.spawn().unwrap();
        let mut port = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut port)
            .unwrap();
        Job {
            child,
            addr: format!("127.0.0.1:{}", port.split_whitespace().next().unwrap()),
            record,
        }
    }

    /// `--host HOST --port PORT` for it.
    fn flags(&self) -> [&str; 4] {
        ["--host", host_of(&self.addr), "--port", port_of(&self.addr)]
    }

    /// Every line it received, `TIMEOUT N` as `TIMEOUT`.
    fn received(&self) -> Vec<String> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .map(|l| match l.starts_with("TIMEOUT ") {
                true => "TIMEOUT".to_string(),
                false => l.to_string(),
            })
            .collect()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// NCCL 2.28.9's service, with these recorded reports (asked for as
/// text with `--text --ask-anyway`: text reports are a hazard there).
fn nccl(reports: &[&str]) -> Job {
    Job::start("2.28.9", reports.iter().map(|r| report(r)).collect())
}

/// `nccl-find ras` asking `job`, for its text report where not `json`.
fn ask(job: &Job, json: bool, more: &[&str]) -> Output {
    let mut args = job.flags().to_vec();
    if !json {
        args.extend(["--text", "--ask-anyway"]);
    }
    args.extend(more);
    ras(&args)
}

/// `nccl-find ras ARGS` with none of the RAS variables around.
fn ras(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .arg("ras")
        .args(args)
        .env_remove("NCCL_RAS_ADDR")
        .env_remove("NCCL_RAS_ENABLE")
        .output()
        .unwrap()
}

/// The host and the port of `HOST:PORT`.
fn host_of(addr: &str) -> &str {
    addr.rsplit_once(':').unwrap().0
}

fn port_of(addr: &str) -> &str {
    addr.rsplit_once(':').unwrap().1
}

/// Exit status, and the last line of the stream that carries the answer
/// (stderr's after its `nccl-find: `, when something is wrong).
fn answer(o: &Output) -> (i32, String) {
    let (code, out, err) = common::text(o);
    if code == 0 {
        return (code, out.lines().last().unwrap_or("").to_string());
    }
    let last = err.lines().last().unwrap_or("");
    let line = last
        .strip_prefix("nccl-find: ")
        .unwrap_or_else(|| panic!("{err}"));
    (code, line.to_string())
}

const RANK1: &str = "rank 1 (process 857 on 192.0.2.2, GPU 0)";

#[test]
fn a_healthy_job_is_ok_from_json_and_from_text() {
    for json in [true, false] {
        let job = nccl(&["healthy-json.txt", "healthy-text.txt"][usize::from(!json)..][..1]);
        let addr = &job.addr;
        let o = ask(&job, json, &[]);
        assert_eq!(
            answer(&o),
            (
                0,
                format!(
                    "OK: 1 communicator(s), 2 rank(s), every rank answering, none behind, no errors \
                     (NCCL 2.28.9 at {addr})"
                )
            ),
            "{o:?}"
        );
        // What RAS cannot see, then the verdict.
        let (_, out, err) = common::text(&o);
        assert_eq!((out.lines().count(), err.as_str()), (2, ""), "{out}");
        assert!(out.starts_with("What RAS cannot see: a kernel stuck on the network"));
        assert!(out.contains("(NVIDIA/nccl#1730)"), "{out}");
        // Only what the table allows was asked: JSON's STATUS, or one
        // plain STATUS, never VERBOSE STATUS.
        let report = match json {
            true => vec!["SET FORMAT json", "STATUS"],
            false => vec!["STATUS"],
        };
        assert_eq!(
            job.received(),
            [vec!["CLIENT PROTOCOL 2", "TIMEOUT"], report].concat(),
            "{json}"
        );
    }
}

#[test]
fn a_rank_behind_is_named_once_two_looks_agree() {
    for (file, json) in [("behind-json.txt", true), ("behind-text.txt", false)] {
        let job = nccl(&[file]);
        let o = ask(&job, json, &[]);
        // Asked anyway for a text report, a hazard on 2.28.9: never twice.
        let line = match json {
            true => format!(
                "look at {RANK1} first: it is 1 AllReduce behind (launched 3, the others up to \
                 4), and the counts did not move in 2 s: the others wait for it. See where \
                 process 857 is (`py-spy dump --pid 857` for Python)"
            ),
            false => format!(
                "behind, once: {RANK1} is 1 AllReduce behind (launched 3, the others up to 4) at \
                 the one look taken; a second look, which would tell whether it moves, is a known \
                 hazard for NCCL 2.28.9's RAS service (NVIDIA/nccl#2346; above). See where process \
                 857 is (`py-spy dump --pid 857` for Python)"
            ),
        };
        assert_eq!(answer(&o), (1, line), "{file}: {o:?}");
        let statuses = job
            .received()
            .iter()
            .filter(|l| l.ends_with("STATUS"))
            .count();
        assert_eq!(statuses, if json { 2 } else { 1 }, "{file}");
    }
}

#[test]
fn a_rank_gone_between_the_two_looks_is_no_progress() {
    let job = nccl(&["behind-json.txt", "killed-json.txt"]);
    let o = ask(&job, true, &[]);
    let (code, line) = answer(&o);
    assert_eq!(code, 1);
    assert!(
        line.starts_with(&format!("look at {RANK1} first: NCCL has no data from it")),
        "{line}"
    );
}

#[test]
fn a_rank_behind_that_catches_up_is_a_job_that_moves() {
    let job = nccl(&["behind-json.txt", "healthy-json.txt"]);
    let addr = &job.addr;
    let o = ask(&job, true, &[]);
    assert_eq!(
        answer(&o),
        (
            0,
            format!(
                "OK: the job is moving: {RANK1} was behind at the first look, and the counts moved 2 s \
                 later (NCCL 2.28.9 at {addr})"
            )
        )
    );
}

#[test]
fn a_killed_rank_outranks_the_error_it_causes() {
    for (file, json) in [("killed-json.txt", true), ("killed-text.txt", false)] {
        let job = nccl(&[file]);
        let o = ask(&job, json, &[]);
        assert_eq!(
            answer(&o),
            (
                1,
                format!(
                    "look at {RANK1} first: NCCL has no data from it, so process 857 is gone or stuck, \
                     and the job cannot go on without it. Check whether it still runs, and why it \
                     ended (its output; `dmesg` for the out-of-memory killer) (1 other finding(s) \
                     above follow from it or come after it)"
                )
            ),
            "{file}: {o:?}"
        );
        let (_, out, _) = common::text(&o);
        assert!(
            out.ends_with(&format!(
                "  {RANK1}: missing: NCCL has no data from it (its process is gone or does not \
                 answer)\n  rank 0 (process 856 on 192.0.2.2, GPU 0): ncclRemoteError (remote \
                 process exited or there was a network error) (how a peer's failure looks from \
                 here)\n"
            )),
            "{file}: {out}"
        );
    }
}

#[test]
fn json_gives_the_verdict_and_every_ranks_facts() {
    let job = nccl(&["killed-json.txt"]);
    let o = ask(&job, true, &["--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "look");
    assert_eq!(v["exit"], 1);
    assert_eq!(v["mended"], true);
    assert_eq!(v["format"], "json");
    assert_eq!(v["nccl_version"], "2.28.9");
    assert_eq!(
        v["look_at"],
        serde_json::json!({"rank": 1, "pid": 857, "host": "192.0.2.2", "gpu": 0,
            "communicator": "0x26140adec988a11a", "kind": "missing", "considered_dead": false})
    );
    let ranks = &v["communicators"][0]["ranks"];
    assert_eq!(ranks[0]["async_error"], 6);
    assert_eq!(ranks[0]["collective_counts"]["AllReduce"], 4);
    assert_eq!(ranks[1]["missing"], true);
    assert_eq!(v["message"], answer(&ask(&job, true, &[])).1);
    // Healthy, in text: the same keys, no communicators' detail.
    let job = nccl(&["healthy-text.txt"]);
    let v: serde_json::Value =
        serde_json::from_slice(&ask(&job, false, &["--json"]).stdout).unwrap();
    assert_eq!(
        (
            &v["verdict"],
            &v["exit"],
            &v["format"],
            &v["look_at"],
            &v["ranks_count"]
        ),
        (
            &"healthy".into(),
            &0.into(),
            &"text".into(),
            &serde_json::Value::Null,
            &2.into()
        )
    );
}

/// A process that has a file named `libnccl.so.2` mapped, as a job's
/// process has NCCL, with `env` set; killed when dropped.
struct FakeJob(std::process::Child);

impl FakeJob {
    fn start(env: &[(&str, &str)]) -> FakeJob {
        let dir = common::scratch("ras-job");
        let lib = dir.join("libnccl.so.2");
        std::fs::write(&lib, vec![0u8; 4096]).unwrap();
        let mut c = Command::new("python3");
        c.args(["-c", "import mmap,sys,time\nf=open(sys.argv[1],'rb')\nm=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\nprint('ready',flush=True)\ntime.sleep(120)"])
            .arg(&lib)
            .env_remove("NCCL_RAS_ADDR")
            .env_remove("NCCL_RAS_ENABLE")
            .stdout(std::process::Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        let mut ready = [0u8; 6];
        child.stdout.take().unwrap().read_exact(&mut ready).unwrap();
        FakeJob(child)
    }
}

impl Drop for FakeJob {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn when_nothing_answers_the_job_says_why() {
    let port = common::free_port();
    let addr = format!("127.0.0.1:{port}");
    let refused = format!("nothing listens at {addr} ({addr}: connection refused)");
    let job = FakeJob::start(&[("NCCL_RAS_ENABLE", "0")]);
    assert_eq!(
        answer(&ras(&["--host", host_of(&addr), "--port", port_of(&addr)])),
        (
            2,
            format!(
                "cannot ask NCCL about the job: process {} (python3) runs NCCL with NCCL_RAS_ENABLE=0, so \
                 no RAS service answers: start the job without it to ask NCCL about it ({refused})",
                job.0.id()
            )
        )
    );
    drop(job);
    let job = FakeJob::start(&[("NCCL_RAS_ADDR", "127.0.0.1:1")]);
    assert_eq!(
        answer(&ras(&["--host", host_of(&addr), "--port", port_of(&addr)])),
        (
            2,
            format!(
                "cannot ask NCCL about the job: process {} (python3) moved NCCL's RAS service to \
                 NCCL_RAS_ADDR=127.0.0.1:1: ask there, `nccl-find ras --host 127.0.0.1 --port 1` ({refused})",
                job.0.id()
            )
        )
    );
}

/// The exit status and last line, and how long it took.
fn timed(args: &[&str]) -> ((i32, String), Duration) {
    let t = Instant::now();
    let o = ras(args);
    (answer(&o), t.elapsed())
}

#[test]
fn a_slow_broken_or_hostile_service_ends_in_time_with_a_clear_error() {
    // Silent: the whole wait ends by --timeout.
    let addr = serve(Serve::Silent);
    let ((code, line), took) = timed(&[
        "--host",
        host_of(&addr),
        "--port",
        port_of(&addr),
        "--timeout",
        "2",
    ]);
    assert_eq!(
        (code, line),
        (
            2,
            format!(
                "cannot ask NCCL about the job: NCCL's RAS service did not answer in time: no whole \
                 answer to `CLIENT PROTOCOL 2` in time. Its node may be overloaded, or the address \
                 ({addr}) leads elsewhere; give it longer with --timeout"
            )
        )
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    // Another protocol.
    let addr = serve(Serve::Raw(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec()));
    assert_eq!(
        timed(&["--host", host_of(&addr), "--port", port_of(&addr)]).0,
        (
            2,
            format!(
                "cannot ask NCCL about the job: {addr} answered \"HTTP/1.1 400 Bad Request\" to `CLIENT \
                 PROTOCOL 2`, not `SERVER PROTOCOL …`: it is not NCCL's RAS service"
            )
        )
    );
    // A line that never ends.
    let addr = serve(Serve::Raw(vec![b'x'; 1 << 20]));
    assert_eq!(
        timed(&["--host", host_of(&addr), "--port", port_of(&addr)]).0,
        (
            2,
            "cannot ask NCCL about the job: the reply to `CLIENT PROTOCOL 2` ran past 4096 bytes \
             without a line break: not NCCL's RAS service"
                .to_string()
        )
    );
    // A report too large for any job.
    let addr = serve(Serve::Nccl {
        reports: vec![vec![b' '; (64 << 20) + 1]],
        json: true,
    });
    assert_eq!(
        timed(&["--host", host_of(&addr), "--port", port_of(&addr)]).0,
        (2, format!("cannot ask NCCL about the job: {addr}'s report ran past 64 MiB: not one NCCL would send"))
    );
    // A report that is neither JSON nor text.
    let addr = serve(Serve::Nccl {
        reports: vec![b"{\"communicators\": [".to_vec()],
        json: true,
    });
    let (code, line) = timed(&["--host", host_of(&addr), "--port", port_of(&addr)]).0;
    assert_eq!(code, 2);
    let port = addr.rsplit(':').next().unwrap();
    assert!(
        line.starts_with(&format!(
            "cannot ask NCCL about the job: the RAS service at {addr} answered, but its JSON report \
             does not parse ("
        )) && line.ends_with(&format!(
            "): see its answer with `nc 127.0.0.1 {port}`"
        )),
        "{line}"
    );
    // Its text report is not asked for instead: text reports have crashed
    // every release that has JSON (NVIDIA/nccl#2346).
}

#[test]
fn what_the_service_says_reaches_the_terminal_escaped() {
    let evil = String::from_utf8(report("killed-json.txt"))
        .unwrap()
        .replace("192.0.2.2", "\\u001b[2J\\u001b]0;pwned\\u0007\\n9.9.9.9");
    let addr = serve(Serve::Nccl {
        reports: vec![evil.into_bytes()],
        json: true,
    });
    let o = ras(&["--host", host_of(&addr), "--port", port_of(&addr)]);
    let (code, out, err) = common::text(&o);
    assert_eq!(code, 1);
    for s in [&out, &err] {
        assert!(!s.contains('\u{1b}') && !s.contains('\u{7}'), "{s:?}");
    }
    assert!(err.lines().last().unwrap().starts_with(
        "nccl-find: look at rank 1 (process 857 on \\u{1b}[2J\\u{1b}]0;pwned\\u{7}\\u{a}9.9.9.9, GPU 0) first:"
    ), "{err}");
}

/// Every recorded conversation whose questions are ours (the handshake,
/// `TIMEOUT`, `SET FORMAT json`, `STATUS`), replayed answer by answer:
/// NCCL 2.28.9's in JSON, 2.28.3's, which refuses JSON, in text. Each gets
/// the verdict `nccl-find ras` gave on the GPU machine.
#[test]
fn every_recorded_conversation_gets_the_verdict_the_real_job_got() {
    let behind = "it is 1 AllReduce behind (launched 3";
    let gone = "NCCL has no data";
    let cases = [
        ("2.28.9/healthy-json.txt", None, "JSON"),
        (
            "2.28.9/behind-json.txt",
            Some(("rank 1 (process 857", behind)),
            "JSON",
        ),
        (
            "2.28.9/killed-json.txt",
            Some(("rank 1 (process 857", gone)),
            "JSON",
        ),
        ("2.28.3/healthy.txt", None, "text"),
        (
            "2.28.3/behind.txt",
            Some(("rank 1 (process 508", behind)),
            "text",
        ),
        (
            "2.28.3/killed.txt",
            Some(("rank 1 (process 508", gone)),
            "text",
        ),
    ];
    for (file, named, format) in cases {
        let version = &file[..6];
        let job = Job::start(version, vec![server_blocks(file).pop().unwrap()]);
        let addr = &job.addr;
        // 2.28.3 has only text reports, and every one is a hazard there:
        // not asked, then asked anyway, once.
        let text = version == "2.28.3";
        if text {
            let (code, line) = answer(&ras(&job.flags()));
            assert_eq!(code, 2, "{line}");
            assert!(
                line.starts_with(
                    "not asked, to keep the job alive: NCCL 2.28.3's RAS service has crashed jobs \
                     at every question it takes (NVIDIA/nccl#1762, NVIDIA/nccl#2346; above)"
                ),
                "{line}"
            );
            assert_eq!(job.received(), ["CLIENT PROTOCOL 2", "TIMEOUT"]);
        }
        let o = match text {
            true => ras(&[&job.flags()[..], &["--ask-anyway"]].concat()),
            false => ras(&job.flags()),
        };
        let (code, line) = answer(&o);
        match named {
            None => assert_eq!(
                (code, line),
                (
                    0,
                    format!(
                        "OK: 1 communicator(s), 2 rank(s), every rank answering, none behind, no \
                         errors (NCCL {version} at {addr})"
                    )
                ),
                "{file}"
            ),
            Some((who, what)) if text && what == behind => assert!(
                code == 1
                    && line.starts_with(&format!(
                        "behind, once: {who} on 192.0.2.2, GPU 0) is 1 AllReduce behind"
                    )),
                "{file}: {code} {line}"
            ),
            Some((who, what)) => assert!(
                code == 1
                    && line
                        .starts_with(&format!("look at {who} on 192.0.2.2, GPU 0) first: {what}")),
                "{file}: {code} {line}"
            ),
        }
        // What was asked: what the release survives, and once where a
        // second look is a hazard.
        let one = match text {
            true => vec!["CLIENT PROTOCOL 2", "TIMEOUT", "STATUS"],
            false => vec!["CLIENT PROTOCOL 2", "TIMEOUT", "SET FORMAT json", "STATUS"],
        };
        let looks = match named {
            Some((_, w)) if w == behind && !text => 2,
            _ => 1,
        };
        let before = if text { 2 } else { 0 };
        assert_eq!(job.received()[before..], one.repeat(looks), "{file}");
        // A rank to look at: the verdict first, then what the service said.
        let (_, out, _) = common::text(&o);
        let lines: Vec<&str> = out.lines().collect();
        if let Some((who, _)) = named {
            assert!(
                lines[0].starts_with(&format!("LOOK AT {who} on 192.0.2.2, GPU 0): ")),
                "{out}"
            );
            assert_eq!(
                lines[1],
                format!(
                    "NCCL's RAS service at {addr} (NCCL {version}, {format} report): 1 \
                     communicator(s), 2 rank(s)"
                ),
                "{file}"
            );
        }
    }
    // Where the release cannot be read (this test's own process serves,
    // and maps no NCCL), `SET FORMAT json`'s answer tells JSON releases
    // from the ones before: those are not asked.
    let addr = serve(Serve::Replay(server_blocks("2.28.3/healthy.txt")));
    let (code, line) = answer(&ras(&["--host", host_of(&addr), "--port", port_of(&addr)]));
    assert_eq!(code, 2);
    assert!(
        line.starts_with(
            "not asked, to keep the job alive: an NCCL from 2.24.3, before 2.28.7's RAS service \
             has crashed jobs at every question it takes (NVIDIA/nccl#1669, \
             NVIDIA/nccl#1718, NVIDIA/nccl#1762, NVIDIA/nccl#2346; above)"
        ),
        "{line}"
    );
}

/// Each release of the table of hazards, served as that release answers
/// (its `libnccl.so.2` mapped in the serving process): what was sent, and
/// what was not.
#[test]
fn each_release_is_asked_only_what_it_survives() {
    const HELLO: [&str; 2] = ["CLIENT PROTOCOL 2", "TIMEOUT"];
    let text = |name: &str| server_blocks(&format!("2.28.3/{name}")).pop().unwrap();
    let json = |name: &str| report(name);
    struct Case {
        version: &'static str,
        reports: Vec<Vec<u8>>,
        flags: &'static [&'static str],
        code: i32,
        starts: &'static str,
        sent: Vec<&'static str>,
    }
    let withheld = "not asked, to keep the job alive: NCCL";
    let cases = [
        // Every report crashes 2.24.3 to 2.26.x during communicator init,
        // and polling crashes them (#1669, #1718).
        Case {
            version: "2.24.3",
            reports: vec![text("healthy.txt")],
            flags: &[],
            code: 2,
            starts: withheld,
            sent: HELLO.to_vec(),
        },
        Case {
            version: "2.24.3",
            reports: vec![text("healthy.txt")],
            flags: &["--ask-anyway"],
            code: 0,
            starts: "OK: 1 communicator(s)",
            sent: [&HELLO[..], &["STATUS"]].concat(),
        },
        // Asked anyway and behind: never a second look.
        Case {
            version: "2.26.5",
            reports: vec![text("behind.txt")],
            flags: &["--ask-anyway"],
            code: 1,
            starts: "behind, once: rank 1",
            sent: [&HELLO[..], &["STATUS"]].concat(),
        },
        // 2.27.x and 2.28.3: text only, and text reports crash them (#2346);
        // VERBOSE STATUS too (#1762).
        Case {
            version: "2.27.7",
            reports: vec![text("healthy.txt")],
            flags: &[],
            code: 2,
            starts: withheld,
            sent: HELLO.to_vec(),
        },
        // JSON from 2.28.7: asked, and twice where a rank is behind.
        Case {
            version: "2.28.7",
            reports: vec![json("healthy-json.txt")],
            flags: &[],
            code: 0,
            starts: "OK: 1 communicator(s)",
            sent: [&HELLO[..], &["SET FORMAT json", "STATUS"]].concat(),
        },
        Case {
            version: "2.30.7",
            reports: vec![json("behind-json.txt")],
            flags: &[],
            code: 1,
            starts: "look at rank 1",
            sent: [&HELLO[..], &["SET FORMAT json", "STATUS"]]
                .concat()
                .repeat(2),
        },
        // --text where JSON is: a text report is the hazard.
        Case {
            version: "2.28.7",
            reports: vec![json("healthy-json.txt")],
            flags: &["--text"],
            code: 2,
            starts: withheld,
            sent: HELLO.to_vec(),
        },
    ];
    for c in cases {
        let job = Job::start(c.version, c.reports);
        let o = ras(&[&job.flags()[..], c.flags].concat());
        let (code, line) = answer(&o);
        let what = format!("{} {:?}", c.version, c.flags);
        assert_eq!(code, c.code, "{what}: {line}");
        assert!(line.starts_with(c.starts), "{what}: {line}");
        assert_eq!(job.received(), c.sent, "{what}");
    }
}

/// A rank on this host is named as its launcher named it, read from its
/// own process: a pod and its node, with the line that cordons the node;
/// torchrun's local rank. (Slurm's: `launch_slurm.rs`, under real Slurm.)
#[test]
fn a_rank_here_is_named_in_its_launchers_words() {
    let gone = String::from_utf8(report("killed-json.txt"))
        .unwrap()
        .replace("192.0.2.2", "127.0.0.1")
        .replace("\"pid\": 857", "\"pid\": {PID}")
        .into_bytes();
    let cases: [(&[(&str, &str)], &str); 2] = [
        (
            &[
                ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
                ("HOSTNAME", "train-worker-1"),
                ("NODE_NAME", "gpu-node-3"),
            ],
            ". It runs on Kubernetes pod train-worker-1 on node gpu-node-3; take the node out: \
             `kubectl cordon gpu-node-3`",
        ),
        (
            &[("TORCHELASTIC_RUN_ID", "none"), ("LOCAL_RANK", "1")],
            ". It runs on torchrun local rank 1 on 127.0.0.1",
        ),
    ];
    for (env, end) in cases {
        let job = Job::start_with("2.28.9", vec![gone.clone()], env);
        let o = ras(&job.flags());
        let (code, line) = answer(&o);
        assert_eq!(code, 1, "{line}");
        assert!(line.ends_with(end), "{env:?}: {line}");
    }
    // A rank on another host of a pod's job: the line that finds its node.
    let job = Job::start_with(
        "2.28.9",
        vec![report("killed-json.txt")],
        &[("KUBERNETES_SERVICE_HOST", "10.96.0.1")],
    );
    let (_, line) = answer(&ras(&job.flags()));
    assert!(
        line.ends_with(
            ". It runs on Kubernetes pod at 192.0.2.2; take the node out: `kubectl cordon \
             \"$(kubectl get pods -A --field-selector status.podIP=192.0.2.2 -o \
             jsonpath='{.items[0].spec.nodeName}')\"`"
        ),
        "{line}"
    );
}

/// A job that preloads the image's NCCL (2.28.3) maps torch's too (2.28.9),
/// as on the GPU machine: either may serve, so `SET FORMAT json` decides,
/// and its `ERROR` leaves 2.28.3, whose text reports are not asked for.
#[test]
fn a_process_that_maps_two_releases_is_asked_as_the_riskier() {
    let job = Job::start_mapping(
        "2.28.3",
        &["2.28.3", "2.28.9"],
        vec![server_blocks("2.28.3/healthy.txt").pop().unwrap()],
        &[],
    );
    let o = ras(&[&job.flags()[..], &["--json"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "not asked", "{v}");
    assert_eq!(v["releases"], "an NCCL from 2.28.3, before 2.28.7");
    assert_eq!(v["sent"], serde_json::json!(["SET FORMAT json"]));
    let mut versions: Vec<&str> = v["server"]["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["nccl_version"].as_str().unwrap())
        .collect();
    versions.sort();
    assert_eq!(versions, ["2.28.3", "2.28.9"]);
    assert_eq!(
        job.received(),
        ["CLIENT PROTOCOL 2", "TIMEOUT", "SET FORMAT json"]
    );
}

/// A service whose release cannot be read (this test's own process, which
/// maps no NCCL) is asked the least risky way, and the output says so.
#[test]
fn an_unread_release_is_said_with_what_was_asked() {
    let addr = serve(Serve::Nccl {
        reports: vec![report("healthy-json.txt")],
        json: true,
    });
    let o = ras(&["--host", host_of(&addr), "--port", port_of(&addr)]);
    let (code, out, _) = common::text(&o);
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with(&format!(
            "note: the release of NCCL's RAS service at {addr} could not be read (process "
        )) && lines[0].ends_with(
            "maps no libnccl.so (an NCCL linked in statically, or none)); asked what every \
             release that answers so survives: SET FORMAT json, then STATUS"
        ),
        "{out}"
    );
    assert!(lines[2].starts_with("OK: "), "{out}");
}

/// Reports built to make the command work hard: a broken JSON report of
/// 8 MiB of blank lines is mended in linear time; a report whose ranks
/// each launched other collectives (ranks × names) gives output and memory
/// bounded by the ranks, the rest counted; sizes past a C int are not
/// believed, and no sum wraps.
#[test]
fn hostile_reports_cost_time_and_memory_in_proportion_to_their_size() {
    // Not JSON even mended, and every line blank: the quadratic mend took
    // 30 s for 200,000 lines.
    let mut blank = b"{\"communicators\": [".to_vec();
    blank.extend(std::iter::repeat_n(b'\n', 8 << 20));
    let addr = serve(Serve::Nccl {
        reports: vec![blank],
        json: true,
    });
    let ((code, line), took) = timed(&["--host", host_of(&addr), "--port", port_of(&addr)]);
    assert_eq!(code, 2, "{line}");
    assert!(line.contains("its JSON report does not parse"), "{line}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    // 3,000 ranks, each 64 collective names of its own, each behind.
    let mut ranks = Vec::new();
    for r in 0..3000 {
        let counts: Vec<String> = (0..64)
            .map(|k| format!("\"op{}\": {}", (r * 7 + k) % 500, r % 3))
            .collect();
        ranks.push(format!(
            "{{\"rank\": {r}, \"host\": \"10.0.0.1\", \"pid\": {r}, \"cuda_dev\": 0, \"status\": {{\"init_state\": 0, \"async_error\": 0}}, \"collective_counts\": {{{}}}}}",
            counts.join(", ")
        ));
    }
    let big = format!(
        "{{\"nccl_version\": \"2.28.9\", \"communicators\": [{{\"hash\": \"0x1\", \"size\": 18446744073709551615, \"ranks\": [{}], \"missing_ranks\": []}}, {{\"hash\": \"0x2\", \"size\": 18446744073709551615, \"ranks\": [], \"missing_ranks\": []}}]}}",
        ranks.join(", ")
    );
    let addr = serve(Serve::Nccl {
        reports: vec![big.into_bytes()],
        json: true,
    });
    let t = Instant::now();
    let o = ras(&["--host", host_of(&addr), "--port", port_of(&addr)]);
    let took = t.elapsed();
    let (code, out, err) = common::text(&o);
    assert_eq!(code, 1, "{err}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    // 50 findings printed, the rest counted; one a rank at most.
    assert!(out.len() < 64 << 10, "{} bytes", out.len());
    assert!(out.contains("\n  … and "), "{out}");
    // Sizes no C int holds: the ranks listed are counted instead.
    assert!(out.contains("2 communicator(s), 3000 rank(s)"), "{out}");
    let v: serde_json::Value = serde_json::from_slice(
        &ras(&["--host", host_of(&addr), "--port", port_of(&addr), "--json"]).stdout,
    )
    .unwrap();
    let findings = v["findings"].as_array().unwrap().len() as u64;
    assert!(findings <= 3000, "{findings}");
    assert_eq!(v["ranks_count"], 3000);
}

/// The second look is said as it was: the pause it really took, and a
/// second look that got no answer, not "did not move in 2 s".
#[test]
fn the_second_look_is_said_as_it_was() {
    // A short --timeout: the pause is half of what was left, under 2 s.
    let job = nccl(&["behind-json.txt"]);
    let (code, line) = answer(&ras(&[&job.flags()[..], &["--timeout", "1"]].concat()));
    assert_eq!(code, 1, "{line}");
    let at = line.find("and the counts did not move in 0.").expect(&line);
    assert!(
        line[at..].starts_with("and the counts did not move in 0.")
            && line[at + 33..].starts_with(|c: char| c.is_ascii_digit())
            && line[at + 34..].starts_with(" s: "),
        "{line}"
    );
    // The second report is no report at all.
    let addr = serve(Serve::Nccl {
        reports: vec![report("behind-json.txt"), Vec::new()],
        json: true,
    });
    let (code, line) = answer(&ras(&["--host", host_of(&addr), "--port", port_of(&addr)]));
    assert_eq!(code, 1, "{line}");
    assert!(
        line.contains(
            "AllReduce behind (launched 3, the others up to 4), and a second look got no answer ("
        ),
        "{line}"
    );
    assert!(!line.contains("did not move"), "{line}");
}

/// What a service says is escaped once, not twice, where it is quoted.
#[test]
fn a_services_words_are_escaped_once() {
    let addr = serve(Serve::Raw(b"\x1b[2J\n".to_vec()));
    let (code, line) = answer(&ras(&["--host", host_of(&addr), "--port", port_of(&addr)]));
    assert_eq!(code, 2, "{line}");
    assert!(
        line.contains(&format!(
            "{addr} answered \"\\u{{1b}}[2J\" to `CLIENT PROTOCOL 2`"
        )),
        "{line}"
    );
    assert!(!line.contains("\\\\u"), "{line}");
}
