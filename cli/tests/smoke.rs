//! `nccl-find smoke` where there is no GPU (CI): rendezvous over TCP and a
//! file with several real processes on loopback, real NCCL unique ids from a
//! wheel's library, the failure paths, and the no-driver path. The GPU runs
//! are in scripts/gpu-smoke.sh.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{free_port, names, text, wheel_lib, without_launchers};

fn spawn(args: &[String], vars: &[(&str, &str)]) -> Child {
    without_launchers(&mut Command::new(env!("CARGO_BIN_EXE_nccl-find")))
        .arg("smoke")
        .args(args)
        .envs(vars.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn rank_args(lib: &Path, rank: usize, world: usize, init: &str, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = ["--lib", lib.to_str().unwrap(), "--rendezvous-only"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend([
        "--rank".into(),
        rank.to_string(),
        "--world-size".into(),
        world.to_string(),
        "--init".into(),
        init.into(),
    ]);
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// The id prefix and first rank each process reports.
fn handed_out(stdout: &str) -> (String, String, String) {
    let line = stdout
        .lines()
        .find(|l| l.contains("note: rendezvous:"))
        .unwrap_or_else(|| panic!("{stdout}"));
    let w: Vec<&str> = line.split_whitespace().collect();
    let at = |k: &str| w[w.iter().position(|x| *x == k).unwrap() + 1].to_string();
    (at("nranks"), at("first_rank"), at("id"))
}

#[test]
fn tcp_rendezvous_with_three_processes() {
    let Some(lib) = wheel_lib() else { return };
    let init = format!("tcp://127.0.0.1:{}", free_port());
    let kids: Vec<Child> = vec![
        spawn(&rank_args(&lib, 2, 3, &init, &["--timeout", "20"]), &[]),
        spawn(
            &rank_args(&lib, 1, 3, &init, &["--timeout", "20", "--gpus", "0,1"]),
            &[],
        ),
        spawn(&rank_args(&lib, 0, 3, &init, &["--timeout", "20"]), &[]),
    ];
    let outs: Vec<_> = kids
        .into_iter()
        .map(|k| text(&k.wait_with_output().unwrap()))
        .collect();
    for o in &outs {
        assert_eq!(o.0, 0, "{o:?}");
        assert!(o.1.contains("NCCL 2.21.5 from "), "{o:?}");
    }
    let got: Vec<_> = outs.iter().map(|o| handed_out(&o.1)).collect();
    // Rank 1 drives two GPUs, so rank 2's first NCCL rank is 3, of 4.
    assert_eq!((got[2].0.as_str(), got[2].1.as_str()), ("4", "0"));
    assert_eq!((got[1].0.as_str(), got[1].1.as_str()), ("4", "1"));
    assert_eq!((got[0].0.as_str(), got[0].1.as_str()), ("4", "3"));
    assert!(
        got.iter().all(|g| g.2 == got[0].2),
        "one unique id for all: {got:?}"
    );
    assert!(
        outs[2].1.contains("2 other process(es) agree"),
        "{:?}",
        outs[2]
    );
}

#[test]
fn file_rendezvous_and_torchrun_variables() {
    let Some(lib) = wheel_lib() else { return };
    let dir = std::env::temp_dir().join(format!("nccl-find-smoke-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let init = format!("file://{}", dir.join("rdv").display());
    let k1 = spawn(&rank_args(&lib, 1, 2, &init, &["--timeout", "20"]), &[]);
    let k0 = spawn(&rank_args(&lib, 0, 2, &init, &["--timeout", "20"]), &[]);
    let (o0, o1) = (
        text(&k0.wait_with_output().unwrap()),
        text(&k1.wait_with_output().unwrap()),
    );
    assert_eq!((o0.0, o1.0), (0, 0), "{o0:?} {o1:?}");
    assert_eq!(handed_out(&o0.1).2, handed_out(&o1.1).2);
    // Rank 0 cleans up the rendezvous files.
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "{:?}",
        std::fs::read_dir(&dir).unwrap().collect::<Vec<_>>()
    );
    std::fs::remove_dir_all(&dir).unwrap();

    // The launcher's variables instead of flags.
    let port = free_port().to_string();
    let base = [
        "--lib".to_string(),
        lib.display().to_string(),
        "--rendezvous-only".into(),
        "--timeout".into(),
        "20".into(),
    ];
    let env = |r: &'static str| {
        vec![
            ("RANK", r),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", port.as_str()),
        ]
    };
    let k1 = spawn(&base, &env("1"));
    let k0 = spawn(&base, &env("0"));
    let (o0, o1) = (
        text(&k0.wait_with_output().unwrap()),
        text(&k1.wait_with_output().unwrap()),
    );
    assert_eq!((o0.0, o1.0), (0, 0), "{o0:?} {o1:?}");
    // The exchange first, then the library.
    assert!(
        o1.1.starts_with("[rank 1] note: exchange: torchrun-tcp via MASTER_ADDR/MASTER_PORT"),
        "{o1:?}"
    );
    assert!(
        o1.1.lines()
            .nth(1)
            .unwrap()
            .starts_with("[rank 1] NCCL 2.21.5 from "),
        "{o1:?}"
    );
}

#[test]
fn a_token_mismatch_is_refused() {
    let Some(lib) = wheel_lib() else { return };
    let init = format!("tcp://127.0.0.1:{}", free_port());
    let k0 = spawn(
        &rank_args(&lib, 0, 2, &init, &["--timeout", "3", "--token", "job-a"]),
        &[],
    );
    let k1 = spawn(
        &rank_args(&lib, 1, 2, &init, &["--timeout", "3", "--token", "job-b"]),
        &[],
    );
    let (o0, o1) = (
        text(&k0.wait_with_output().unwrap()),
        text(&k1.wait_with_output().unwrap()),
    );
    assert_eq!(o1.0, 1);
    assert!(
        o1.2.contains("rank 0 refused rank 1: token mismatch: the peer's token is not this job's"),
        "{o1:?}"
    );
    // Neither token is ever sent back or logged.
    for o in [&o0, &o1] {
        assert!(!o.1.contains("job-a") && !o.2.contains("job-a"), "{o:?}");
    }
    assert_eq!(o0.0, 1);
    assert!(
        o0.1.contains("note: refused a peer from 127.0.0.1:"),
        "{o0:?}"
    );
    assert!(
        o0.2.contains("rank 1 never came to tcp://127.0.0.1:"),
        "{o0:?}"
    );
}

#[test]
fn a_rank_that_never_comes_ends_at_the_deadline() {
    let Some(lib) = wheel_lib() else { return };
    // Ranks 0 and 1 of 3 meet through `init`: every rank that came names
    // the one that did not (as `at`), not its own symptom (rank 1 reached
    // rank 0), within the deadline and its grace.
    let ranks_0_and_1 = |init: &str, at: &str| {
        let start = Instant::now();
        let k0 = spawn(&rank_args(&lib, 0, 3, init, &["--timeout", "2"]), &[]);
        let k1 = spawn(&rank_args(&lib, 1, 3, init, &["--timeout", "2"]), &[]);
        let (o0, o1) = (
            text(&k0.wait_with_output().unwrap()),
            text(&k1.wait_with_output().unwrap()),
        );
        let took = start.elapsed();
        let want = format!(
            "rank 2 never came to {at} (waited 2 s); ranks 0, 1 are here. Start it, with the same \
             rendezvous and token, check that it can reach {at}, or raise --timeout"
        );
        for (r, o) in [(0, &o0), (1, &o1)] {
            assert_eq!(
                (o.0, last(&o.1)),
                (1, format!("[rank {r}] FAILED: {want}")),
                "{o:?}"
            );
        }
        assert!(took < Duration::from_secs(20), "{took:?}");
    };
    let init = format!("tcp://127.0.0.1:{}", free_port());
    ranks_0_and_1(&init, &init);
    // The same through a file.
    let dir = std::env::temp_dir().join(format!("nccl-find-smoke-missing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let at = dir.join("rdv").display().to_string();
    ranks_0_and_1(&format!("file://{at}"), &at);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file rendezvous in a directory other users can write (sticky, as
/// /tmp): with the public default token, rank 0 (only) says so and names
/// --token; with NCCL_FIND_TOKEN or --token it says nothing. Both jobs
/// run.
#[test]
fn a_file_rendezvous_in_a_shared_directory_without_a_token_is_named() {
    use std::os::unix::fs::PermissionsExt;
    let Some(lib) = wheel_lib() else { return };
    let dir = std::env::temp_dir().join(format!("nccl-find-smoke-shared-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let init = format!("file://{}", dir.join("rdv").display());
    let said = format!(
        "[rank 0] note: the file rendezvous is in {}, a directory other users can write \
         (world-writable and sticky), and the job token is public (no --token or NCCL_FIND_TOKEN: \
         it is the default or the launcher's job id). Another user's files there are refused, but \
         they see this run's file names and can block it, and any process of this user's that uses \
         the same path joins this job. Pass --token (or set NCCL_FIND_TOKEN) to a secret every rank \
         shares, and meet in a directory only this user can write",
        dir.display()
    );
    let run = |extra: &[&str], vars: &[(&str, &str)]| {
        let mut a = vec!["--timeout", "20"];
        a.extend_from_slice(extra);
        let k1 = spawn(&rank_args(&lib, 1, 2, &init, &a), vars);
        let k0 = spawn(&rank_args(&lib, 0, 2, &init, &a), vars);
        let (o0, o1) = (
            text(&k0.wait_with_output().unwrap()),
            text(&k1.wait_with_output().unwrap()),
        );
        assert_eq!((o0.0, o1.0), (0, 0), "{o0:?} {o1:?}");
        let named = |o: &str| {
            o.lines()
                .filter(|l| l.contains("a directory other users can write"))
                .map(String::from)
                .collect::<Vec<_>>()
        };
        (named(&o0.1), named(&o1.1))
    };
    assert_eq!(run(&[], &[]), (vec![said], vec![]));
    assert_eq!(run(&[], &[("NCCL_FIND_TOKEN", "s3cret")]), (vec![], vec![]));
    assert_eq!(run(&["--token", "s3cret"], &[]), (vec![], vec![]));
    assert_eq!(names(&dir), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The last line of a report (stdout), without its wall time.
fn last(out: &str) -> String {
    let line = out.lines().last().unwrap_or("");
    match line.rsplit_once(" (") {
        Some((v, t)) if t.ends_with(" s)") => v.to_string(),
        _ => line.to_string(),
    }
}

/// A job of `world` ranks meeting over TCP with `--rendezvous-only`, rank
/// `r` loading `libs(r)` with `vars(r)` and `extra` flags: each rank's
/// exit status and last line.
fn ranks(
    world: usize,
    libs: &dyn Fn(usize) -> std::path::PathBuf,
    vars: &dyn Fn(usize) -> Vec<(&'static str, &'static str)>,
    extra: &[&str],
) -> Vec<(i32, String, String)> {
    let init = format!("tcp://127.0.0.1:{}", free_port());
    let mut flags = vec!["--timeout", "60"];
    flags.extend_from_slice(extra);
    let kids: Vec<Child> = (0..world)
        .map(|r| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
            without_launchers(&mut c)
                .arg("smoke")
                .args(rank_args(&libs(r), r, world, &init, &flags))
                .env_remove("NCCL_SOCKET_IFNAME")
                .envs(vars(r))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    kids.into_iter()
        .map(|k| {
            let o = text(&k.wait_with_output().unwrap());
            (o.0, last(&o.1), format!("{o:?}"))
        })
        .collect()
}

/// Each rank's exit status and last line, against one for all.
fn assert_every_rank(got: &[(i32, String, String)], code: i32, line: &str) {
    for (r, g) in got.iter().enumerate() {
        assert_eq!(
            (g.0, g.1.as_str()),
            (code, format!("[rank {r}] {line}").as_str()),
            "rank {r}: {}",
            g.2
        );
    }
}

/// This host's name, as the cards say it.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// A NCCL_SOCKET_IFNAME that leaves NCCL no interface, on every rank or
/// on one: every rank stops before NCCL with the cause, at once.
#[test]
fn a_socket_ifname_that_matches_nothing_stops_every_rank() {
    let Some(lib) = wheel_lib() else { return };
    let lib = |_| lib.clone();
    let ifaces = nccl_find_interfaces();
    let fix = "so NCCL cannot start there: unset NCCL_SOCKET_IFNAME, or set it to an interface every node has";
    let bad = |_| vec![("NCCL_SOCKET_IFNAME", "nosuch0")];
    let got = ranks(3, &lib, &bad, &[]);
    assert_every_rank(
        &got,
        1,
        &format!(
            "FAILED: {}: NCCL_SOCKET_IFNAME=nosuch0 matches none of the interfaces NCCL lists ({ifaces}), {fix}",
            host()
        ),
    );
    let one = |r| match r {
        1 => vec![("NCCL_SOCKET_IFNAME", "nosuch0")],
        _ => vec![],
    };
    let got = ranks(3, &lib, &one, &[]);
    assert_every_rank(
        &got,
        1,
        &format!(
            "FAILED: {} rank 1: NCCL_SOCKET_IFNAME=nosuch0 matches none of the interfaces NCCL lists ({ifaces}), {fix}",
            host()
        ),
    );
    // Run anyway: the cause is still every rank's last line (no NCCL call
    // here shows it wrong).
    let got = ranks(3, &lib, &one, &["--run-nccl-anyway"]);
    assert_every_rank(
        &got,
        1,
        &format!(
            "FAILED: {} rank 1: NCCL_SOCKET_IFNAME=nosuch0 matches none of the interfaces NCCL lists ({ifaces}), {fix}",
            host()
        ),
    );
    assert!(
        got[1].2.contains(
            "[rank 1] note: NCCL runs (--run-nccl-anyway), although the meeting showed: "
        ),
        "{}",
        got[1].2
    );
}

/// The interfaces other than lo that this machine has, as a card names
/// them (those `nccl-find doctor` lists).
fn nccl_find_interfaces() -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<String> = v["facts"]["interfaces"]
        .as_array()
        .unwrap_or_else(|| panic!("{v:#}"))
        .iter()
        .filter_map(|i| i["name"].as_str())
        .map(String::from)
        .collect();
    names.join(", ")
}

/// Another NCCL release on one rank: every rank stops before NCCL.
#[test]
fn another_nccl_on_one_rank_stops_every_rank() {
    let (Some(lib), Some(wheels)) = (wheel_lib(), common::wheels()) else {
        return;
    };
    let newer = wheels.join("nvidia_nccl_cu12-2.32.3/nvidia/nccl/lib/libnccl.so.2");
    let libs = |r| if r == 2 { newer.clone() } else { lib.clone() };
    let got = ranks(3, &libs, &|_| vec![], &[]);
    assert_every_rank(
        &got,
        1,
        &format!(
            "FAILED: NCCL releases differ: {} rank 2: NCCL 2.32.3 (the other rank(s) there: 2.21.5), and NCCL \
             refuses ranks of another release (`Mismatched NCCL version detected`): load the same NCCL \
             everywhere (the same wheel, or --lib to the same file)",
            host()
        ),
    );
}

#[test]
fn a_malformed_peer_is_refused_without_a_crash() {
    let Some(lib) = wheel_lib() else { return };
    let port = free_port();
    let init = format!("tcp://127.0.0.1:{port}");
    let k0 = spawn(&rank_args(&lib, 0, 2, &init, &["--timeout", "20"]), &[]);
    // Garbage first: an HTTP request, a frame that claims 1 GB, then a
    // hello of the protocol before this one (it sent the token in clear).
    let deadline = Instant::now() + Duration::from_secs(10);
    for garbage in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        &b"NCFS\x03\x01\xff\xff\xff\x7f"[..],
        &b"NCFS\x01\x01\x13\x00\x00\x00\x05\x00job-7\x03\x00\x00\x00\x04\x00\x00\x00\x02\x00\x00\x00"[..],
    ] {
        let mut s = loop {
            match std::net::TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => panic!("{e}"),
            }
        };
        s.write_all(garbage).unwrap();
        drop(s);
    }
    let k1 = spawn(&rank_args(&lib, 1, 2, &init, &["--timeout", "20"]), &[]);
    let (o0, o1) = (
        text(&k0.wait_with_output().unwrap()),
        text(&k1.wait_with_output().unwrap()),
    );
    assert_eq!((o0.0, o1.0), (0, 0), "{o0:?} {o1:?}");
    assert!(
        o0.1.contains("not an nccl-find rendezvous message (bad magic)"),
        "{o0:?}"
    );
    assert!(
        o0.1.contains("a 2147483647-byte message is too long"),
        "{o0:?}"
    );
    assert!(
        o0.1.contains("protocol version 1 (this nccl-find speaks 3)"),
        "{o0:?}"
    );
}

#[test]
fn a_port_in_use_says_so() {
    let Some(lib) = wheel_lib() else { return };
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let init = format!("tcp://127.0.0.1:{}", busy.local_addr().unwrap().port());
    let o = text(
        &spawn(&rank_args(&lib, 0, 2, &init, &["--timeout", "5"]), &[])
            .wait_with_output()
            .unwrap(),
    );
    assert_eq!(o.0, 1);
    assert!(o.2.contains("rank 0 cannot listen on 127.0.0.1:"), "{o:?}");
    assert!(o.2.contains("Another job may hold the port"), "{o:?}");
}

#[test]
fn without_a_driver_it_says_so_with_its_own_exit_code() {
    let Some(lib) = wheel_lib() else { return };
    let o = text(
        &spawn(&["--lib".into(), lib.display().to_string()], &[])
            .wait_with_output()
            .unwrap(),
    );
    // CI has no GPU: a clear message and exit 3, after naming the NCCL loaded.
    assert_eq!(o.0, 3, "{o:?}");
    assert!(
        o.1.starts_with(&format!("NCCL 2.21.5 from {}\n", lib.display())),
        "{o:?}"
    );
    assert!(
        o.2.contains("no NVIDIA driver: libcuda.so.1 cannot be used"),
        "{o:?}"
    );
    assert!(!o.2.contains("panicked"));
    // Without --lib, the probe's choice is loaded.
    let home = lib
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let o = text(
        &spawn(&[], &[("NCCL_HOME", &home)])
            .wait_with_output()
            .unwrap(),
    );
    assert_eq!(o.0, 3, "{o:?}");
    assert!(o.1.contains("NCCL 2.21.5 from "), "{o:?}");
    // --json says the same for tools.
    let o = text(
        &spawn(
            &["--lib".into(), lib.display().to_string(), "--json".into()],
            &[],
        )
        .wait_with_output()
        .unwrap(),
    );
    let v: serde_json::Value = serde_json::from_str(&o.1).unwrap();
    assert_eq!(
        (v["ok"].as_bool(), v["exit"].as_i64(), v["version"].as_str()),
        (Some(false), Some(3), Some("2.21.5"))
    );
}

#[test]
fn usage_errors() {
    let Some(lib) = wheel_lib() else { return };
    let l = lib.display().to_string();
    for (args, says) in [
        (
            vec!["--init", "tcp://127.0.0.1:1"],
            "--init needs --world-size (or WORLD_SIZE)",
        ),
        (
            vec!["--rank", "0", "--world-size", "2", "--init", "tcp://nohost"],
            "has no port",
        ),
        (vec!["--world-size", "2"], "no rank"),
        (
            vec!["--rank", "0", "--world-size", "2"],
            "need a rendezvous",
        ),
        (
            vec![
                "--rank",
                "2",
                "--world-size",
                "2",
                "--init",
                "tcp://127.0.0.1:1",
            ],
            "rank 2 is outside a world of 2",
        ),
        (
            vec!["--rendezvous-only"],
            "nccl-find smoke: --rendezvous-only meets other processes: run it under a launcher (torchrun, srun, mpirun), or pass --world-size N and --init tcp://HOST:PORT\n",
        ),
        (vec!["--sizes", "12Q"], "is not a size like"),
        (vec!["--dtypes", "f128"], "is not a datatype"),
        (vec!["--timeout=-1"], "is not a number of seconds"),
        (vec!["--timeout", "0"], "is not a number of seconds"),
        (
            vec!["--timeout", "1e-9"],
            "--timeout 0.000000001: at least 1 second",
        ),
        (
            vec!["--iters", "0"],
            "--iters 0: from 1 to 100000 timed calls per size and collective",
        ),
        (
            vec!["--iters", "100001"],
            "--iters 100001: from 1 to 100000 timed calls per size and collective",
        ),
    ] {
        let mut a = vec!["--lib".to_string(), l.clone()];
        a.extend(args.iter().map(|s| s.to_string()));
        let o = text(&spawn(&a, &[]).wait_with_output().unwrap());
        assert_eq!(o.0, 2, "{args:?}: {o:?}");
        assert!(o.2.contains(says), "{args:?}: {o:?}");
    }
    // A usage error comes before the search for NCCL, which finds none.
    let o = text(
        &spawn(
            &["--ops".into(), "bogus-op".into()],
            &[("NCCL_HOME", "/no/such/nccl")],
        )
        .wait_with_output()
        .unwrap(),
    );
    assert_eq!(o.0, 2, "{o:?}");
    assert!(
        o.2.starts_with("nccl-find smoke: \"bogus-op\" is not a collective"),
        "{o:?}"
    );
    let o = text(
        &spawn(&["--lib".into(), "/no/such/libnccl.so.2".into()], &[])
            .wait_with_output()
            .unwrap(),
    );
    assert_eq!(o.0, 2);
    assert_eq!(
        o.2,
        "nccl-find smoke: --lib /no/such/libnccl.so.2: no such file\n"
    );
}

/// SIGINT while waiting: exit 130 at once, every file this run wrote removed
/// (the rendezvous files and NCCL's log directory), no process left.
#[test]
fn sigint_cleans_up() {
    let Some(lib) = wheel_lib() else { return };
    for rank in [1usize, 0] {
        let dir =
            std::env::temp_dir().join(format!("nccl-find-smoke-int-{}-{rank}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let init = format!("file://{}", dir.join("rdv").display());
        let child = spawn(&rank_args(&lib, rank, 2, &init, &["--timeout", "60"]), &[]);
        let pid = child.id();
        // Wait until it is waiting (rank 0 has written the rendezvous file).
        let start = Instant::now();
        while rank == 0 && !dir.join("rdv").exists() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        let sent = Instant::now();
        assert!(Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap()
            .success());
        let o = text(&child.wait_with_output().unwrap());
        assert!(
            sent.elapsed() < Duration::from_secs(3),
            "{:?}",
            sent.elapsed()
        );
        assert_eq!(o.0, 130, "{o:?}");
        assert!(
            o.2.contains("interrupted (SIGINT); the files this run wrote were removed"),
            "{o:?}"
        );
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "rank {rank} left {left:?}");
        // NCCL's log directory (nccl-find-smoke-<pid>-<nonce>) is gone too.
        let prefix = format!("nccl-find-smoke-{pid}-");
        assert!(!std::fs::read_dir(std::env::temp_dir()).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(&prefix)));
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} is still there"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A peer that connects and then says nothing does not hold up the real
/// peer, which gets in at once.
#[test]
fn a_stalled_peer_does_not_block_the_job() {
    let Some(lib) = wheel_lib() else { return };
    let port = free_port();
    let init = format!("tcp://127.0.0.1:{port}");
    let k0 = spawn(&rank_args(&lib, 0, 2, &init, &["--timeout", "30"]), &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let stalled = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("{e}"),
        }
    };
    let started = Instant::now();
    let k1 = spawn(&rank_args(&lib, 1, 2, &init, &["--timeout", "30"]), &[]);
    let (o0, o1) = (
        text(&k0.wait_with_output().unwrap()),
        text(&k1.wait_with_output().unwrap()),
    );
    let took = started.elapsed();
    drop(stalled);
    assert_eq!((o0.0, o1.0), (0, 0), "{o0:?} {o1:?}");
    // Not after the stalled one's 5 s to say hello: at once.
    assert!(took < Duration::from_secs(4), "{took:?}");
}

/// A rendezvous directory this user may not write: a clear message at once.
#[test]
fn a_read_only_rendezvous_directory() {
    let Some(lib) = wheel_lib() else { return };
    let dir = std::env::temp_dir().join(format!("nccl-find-smoke-ro-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut perm = std::fs::metadata(&dir).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o555);
    std::fs::set_permissions(&dir, perm).unwrap();
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    // Root writes anywhere: run as nobody to see what a user sees.
    let mut cmd = if root {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_nccl-find"),
        ]);
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_nccl-find"))
    };
    // The library where that user can reach it (the cache may be under /root).
    let shared =
        std::env::temp_dir().join(format!("nccl-find-smoke-ro-lib-{}", std::process::id()));
    if std::fs::hard_link(&lib, &shared).is_err() {
        std::fs::copy(&lib, &shared).unwrap();
    }
    let init = format!("file://{}", dir.join("rdv").display());
    let o = text(
        &cmd.arg("smoke")
            .args(rank_args(&shared, 1, 2, &init, &["--timeout", "5"]))
            .output()
            .unwrap(),
    );
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&shared).unwrap();
    assert_eq!(o.0, 1, "{o:?}");
    assert!(o.2.contains("cannot write "), "{o:?}");
    assert!(o.2.contains("Permission denied"), "{o:?}");
    assert!(
        o.2.contains("The rendezvous file must be in a directory every rank can write"),
        "{o:?}"
    );
}

/// What a user sees when the rendezvous path is a FIFO or a link to
/// /dev/zero: exit 1 at once, the path named, no hang and no huge read.
#[test]
fn a_fifo_or_dev_zero_at_the_rendezvous_path_ends_with_a_message() {
    let Some(lib) = wheel_lib() else { return };
    let dir = std::env::temp_dir().join(format!("nccl-find-smoke-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let zero = dir.join("zero");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    for (rank, path, says) in [
        (1, &fifo, "is a FIFO (named pipe), not a regular file"),
        (1, &zero, "is a symbolic link, not a regular file"),
        (
            0,
            &fifo,
            "already exists and is not a rendezvous file of yours",
        ),
    ] {
        let init = format!("file://{}", path.display());
        let start = Instant::now();
        let o = text(
            &spawn(&rank_args(&lib, rank, 2, &init, &["--timeout", "5"]), &[])
                .wait_with_output()
                .unwrap(),
        );
        assert!(start.elapsed() < Duration::from_secs(5), "{o:?}");
        assert_eq!(o.0, 1, "{o:?}");
        assert!(o.2.contains(says), "{o:?}");
        assert!(o.2.contains(&path.display().to_string()), "{o:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `smoke --json | head -c 20`: the output stops quietly; the exit status
/// is still the test's (3: no GPU here).
#[test]
fn a_closed_pipe_does_not_crash_smoke() {
    use std::os::fd::FromRawFd;
    let Some(lib) = wheel_lib() else { return };
    let mut fds = [0; 2];
    // SAFETY: pipe() fills two descriptors, which are then owned here.
    let (r, w) = unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    drop(r);
    for extra in [&["--json"][..], &[]] {
        let o = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
            .args(["smoke", "--lib", lib.to_str().unwrap()])
            .args(extra)
            .stdout(Stdio::from(w.try_clone().unwrap()))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{extra:?}: {err}");
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
    }
}

#[test]
fn nccl_debug_with_json_keeps_stdout_json_and_the_log_on_stderr() {
    let Some(lib) = wheel_lib() else { return };
    // NCCL writes its log to stdout unless NCCL_DEBUG_FILE says otherwise;
    // with --json that log goes to stderr, after the run.
    let init = format!("tcp://127.0.0.1:{}", free_port());
    let o = text(
        &spawn(
            &rank_args(&lib, 0, 1, &init, &["--json", "--timeout", "20"]),
            &[("NCCL_DEBUG", "INFO")],
        )
        .wait_with_output()
        .unwrap(),
    );
    assert_eq!(o.0, 0, "{o:?}");
    let v: serde_json::Value = serde_json::from_str(&o.1).unwrap_or_else(|e| panic!("{e}: {o:?}"));
    assert_eq!(v["ok"], serde_json::Value::Bool(true), "{o:?}");
    assert!(!o.1.contains("NCCL INFO"), "{o:?}");
    assert!(o.2.contains("NCCL INFO Bootstrap"), "{o:?}");
    // Without --json the log stays where NCCL puts it: stdout.
    let init = format!("tcp://127.0.0.1:{}", free_port());
    let o = text(
        &spawn(
            &rank_args(&lib, 0, 1, &init, &["--timeout", "20"]),
            &[("NCCL_DEBUG", "INFO")],
        )
        .wait_with_output()
        .unwrap(),
    );
    assert_eq!(o.0, 0, "{o:?}");
    assert!(o.1.contains("NCCL INFO Bootstrap"), "{o:?}");
}

/// A fake rank 0 speaking our frames on `l`: it challenges the first peer
/// that connects, reads its hello, and refuses it with `reason`.
fn refuse_first_peer(l: &std::net::TcpListener, reason: &str) {
    use nccl_rendezvous::{decode_header, encode, Msg};
    use std::io::Read;
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&encode(&Msg::Challenge { nonce: [1; 16] }))
        .unwrap();
    let mut h = [0u8; 10];
    s.read_exact(&mut h).unwrap();
    let (_, len) = decode_header(&h).unwrap();
    s.read_exact(&mut vec![0u8; len]).unwrap();
    s.write_all(&encode(&Msg::Refused {
        reason: reason.into(),
    }))
    .unwrap();
}

#[test]
fn text_from_a_fake_rank_0_is_escaped_and_kept_on_one_line() {
    let Some(lib) = wheel_lib() else { return };
    // A fake rank 0 speaking our frames: it refuses with a reason that
    // would set the terminal's title and print a forged verdict line.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let init = format!("tcp://127.0.0.1:{port}");
    let k1 = spawn(&rank_args(&lib, 1, 2, &init, &["--timeout", "20"]), &[]);
    refuse_first_peer(&l, "\x1b]0;pwned\x07\nOK: fake");
    let o1 = text(&k1.wait_with_output().unwrap());
    assert_eq!(o1.0, 1, "{o1:?}");
    let want = "rank 0 refused rank 1: \\u{1b}]0;pwned\\u{7}\\u{a}OK: fake (";
    let out: Vec<&str> = o1.1.lines().collect();
    let err: Vec<&str> = o1.2.lines().collect();
    assert_eq!(out.len(), 3, "{o1:?}");
    assert!(
        out[0].starts_with("[rank 1] note: exchange: init via --init"),
        "{o1:?}"
    );
    assert!(
        out[2].starts_with(&format!("[rank 1] FAILED: {want}")),
        "{o1:?}"
    );
    assert_eq!(err.len(), 1, "{o1:?}");
    assert!(
        err[0].starts_with(&format!("nccl-find smoke: FAILED: {want}")),
        "{o1:?}"
    );
    for o in [&o1.1, &o1.2] {
        assert!(!o.contains(['\x1b', '\x07']), "{o:?}");
    }
}

/// With stdout and stderr one file (a terminal, or `2>&1`), a failure's
/// verdict is said once; and local text (a setting's value) is escaped as
/// peer text is.
#[test]
fn a_failed_verdict_is_said_once_to_one_file_and_local_text_is_escaped() {
    let Some(lib) = wheel_lib() else { return };
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let init = format!("tcp://127.0.0.1:{}", l.local_addr().unwrap().port());
    let log = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("smoke-once-{}.log", std::process::id()));
    let file = std::fs::File::create(&log).unwrap();
    let mut k1 = without_launchers(&mut Command::new(env!("CARGO_BIN_EXE_nccl-find")))
        .arg("smoke")
        .args(rank_args(&lib, 1, 2, &init, &["--timeout", "20"]))
        .env("NCCL_SOCKET_IFNAME", "eth\x1b[2J\u{202e}0")
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    refuse_first_peer(&l, "no");
    assert_eq!(k1.wait().unwrap().code(), Some(1));
    let out = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert_eq!(
        out.matches("FAILED: rank 0 refused rank 1: no").count(),
        1,
        "{out}"
    );
    assert!(
        out.contains("NCCL_SOCKET_IFNAME=eth\\u{1b}[2J\\u{202e}0"),
        "{out}"
    );
    assert!(!out.contains(['\x1b', '\u{202e}']), "{out:?}");
}

/// Rank 0 of a file rendezvous, waiting for its peer, with its NCCL log
/// directory under `dir/tmp`: its pid once the rendezvous file is there.
fn waiting_rank0(lib: &Path, dir: &Path) -> Child {
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let init = format!("file://{}", dir.join("rdv").display());
    let child = spawn(
        &rank_args(lib, 0, 2, &init, &["--timeout", "120"]),
        &[("TMPDIR", tmp.to_str().unwrap())],
    );
    let start = Instant::now();
    while !dir.join("rdv").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no rendezvous file"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

/// What is left in `dir` and `dir/tmp`, but `tmp` itself.
fn left_in(dir: &Path) -> Vec<String> {
    let mut left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .chain(std::fs::read_dir(dir.join("tmp")).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "tmp")
        .collect();
    left.sort();
    left
}

#[test]
fn sigterm_then_sigkill_50_ms_later_leaves_nothing_and_sighup_cleans_up() {
    let Some(lib) = wheel_lib() else { return };
    let dir = std::env::temp_dir().join(format!("nccl-find-smoke-term-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // As mpirun does on Ctrl-C: SIGTERM, and SIGKILL soon after.
    for round in 0..10 {
        let child = waiting_rank0(&lib, &dir);
        let pid = child.id() as libc::pid_t;
        // SAFETY: signals our own child, which has not been waited for.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: as above (it may have exited: then this is a zombie's pid,
        // still ours, and the signal does nothing).
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let o = child.wait_with_output().unwrap();
        assert_eq!(left_in(&dir), Vec::<String>::new(), "round {round}: {o:?}");
    }
    // SIGHUP (the terminal went away): cleaned up, exit 129.
    let child = waiting_rank0(&lib, &dir);
    // SAFETY: signals our own child, which has not been waited for.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGHUP) },
        0
    );
    let o = text(&child.wait_with_output().unwrap());
    assert_eq!(o.0, 129, "{o:?}");
    assert!(
        o.2.ends_with(
            "nccl-find smoke: interrupted (SIGHUP); the files this run wrote were removed\n"
        ),
        "{o:?}"
    );
    assert_eq!(left_in(&dir), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A run killed with SIGKILL cannot clean up after itself, and need not:
/// NCCL's log is a file with no name (never anything in TMPDIR), and the
/// next job at the same rendezvous path takes over the killed run's file
/// (its writer provably gone) and leaves nothing at its end.
#[test]
fn a_killed_run_leaves_nothing_in_tmpdir_and_the_next_job_takes_over_its_file() {
    let Some(lib) = wheel_lib() else { return };
    let dir = std::env::temp_dir().join(format!("nccl-find-smoke-killed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let init = format!("file://{}", dir.join("rdv").display());
    let rank = |r: usize, timeout: &str| {
        spawn(
            &rank_args(&lib, r, 2, &init, &["--timeout", timeout]),
            &[("TMPDIR", tmp.to_str().unwrap())],
        )
    };
    // Rank 0, waiting for its peer: once the rendezvous file names it.
    let mut killed = rank(0, "120");
    let start = Instant::now();
    while !std::fs::read_to_string(dir.join("rdv"))
        .is_ok_and(|t| t.contains(&format!("\n{} ", killed.id())))
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no rendezvous file"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Its NCCL log is open, in TMPDIR, under no name.
    let unnamed: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", killed.id()))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|l| l.to_string_lossy().into_owned())
        .filter(|l| l.starts_with(&format!("{}/#", tmp.display())))
        .collect();
    assert_eq!(unnamed.len(), 1, "{unnamed:?}");
    assert!(unnamed[0].ends_with(" (deleted)"), "{unnamed:?}");
    assert_eq!(names(&tmp), Vec::<String>::new());
    killed.kill().unwrap();
    killed.wait().unwrap();
    assert_eq!(names(&tmp), Vec::<String>::new());
    assert_eq!(names(&dir), ["rdv", "tmp"], "the killed run's file stays");
    // The next job at that path.
    let (k0, k1) = (rank(0, "60"), rank(1, "60"));
    let (o0, o1) = (
        text(&k0.wait_with_output().unwrap()),
        text(&k1.wait_with_output().unwrap()),
    );
    assert_eq!((o0.0, o1.0), (0, 0), "{o0:?}\n{o1:?}");
    assert_eq!(names(&tmp), Vec::<String>::new());
    assert_eq!(names(&dir), ["tmp"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--lib libnccl.so.2`, a bare name: the file in the current directory is
/// the one checked, and it is the one loaded (by absolute path), not
/// another on LD_LIBRARY_PATH that dlopen would find for a bare name.
#[test]
fn a_bare_lib_name_loads_the_file_that_was_checked() {
    let Some(lib) = wheel_lib() else { return };
    let other = lib
        .ancestors()
        .nth(5)
        .unwrap()
        .join("nvidia_nccl_cu13-2.28.9/nvidia/nccl/lib/libnccl.so.2");
    let here = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("bare-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&here);
    std::fs::create_dir_all(&here).unwrap();
    std::fs::copy(&other, here.join("libnccl.so.2")).unwrap();
    let out = without_launchers(&mut Command::new(env!("CARGO_BIN_EXE_nccl-find")))
        .current_dir(&here)
        .args(["smoke", "--lib", "libnccl.so.2"])
        .env("LD_LIBRARY_PATH", lib.parent().unwrap())
        .output()
        .unwrap();
    let o = text(&out);
    assert_eq!(o.0, 3, "{o:?}");
    assert!(
        o.1.starts_with(&format!(
            "NCCL 2.28.9 from {}\n",
            here.join("libnccl.so.2").display()
        )),
        "{o:?}"
    );
    std::fs::remove_dir_all(&here).unwrap();
}

/// One process where NCCL would find no interface is stopped before NCCL,
/// its last line the cause and the fix, once; `--run-nccl-anyway` starts
/// NCCL, and the cause still leads, what happened after it (here, no GPU).
#[test]
fn one_process_where_nccl_finds_no_interface_stops_before_nccl() {
    let Some(lib) = wheel_lib() else { return };
    let ifaces = nccl_find_interfaces();
    let run = |anyway: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
        without_launchers(&mut cmd)
            .args(["smoke", "--lib"])
            .arg(&lib)
            .args(if anyway {
                &["--run-nccl-anyway"][..]
            } else {
                &[][..]
            })
            .env("NCCL_SOCKET_IFNAME", "nosuch0");
        text(&cmd.output().unwrap())
    };
    let cause = format!(
        "FAILED: NCCL_SOCKET_IFNAME=nosuch0 matches none of the interfaces NCCL lists ({ifaces}), so NCCL \
         cannot start here: set NCCL_SOCKET_IFNAME to "
    );
    let (code, out, _) = run(false);
    let last = out.lines().last().unwrap_or("");
    assert_eq!(code, 1, "{out}");
    assert!(
        last.starts_with(&cause) && !last.contains("(then:"),
        "{out}"
    );
    assert!(out.contains("note: NCCL was not started"), "{out}");
    let (code, out, _) = run(true);
    let last = out.lines().last().unwrap_or("");
    assert!(
        last.starts_with(&cause) && last.contains("(then: ") && code != 0,
        "{code}: {out}"
    );
}

/// The report lists the NCCL settings in force, as the NCCL it loads will
/// read them: the environment, then `~/.nccl.conf` (`~` from `HOME` from
/// 2.30.3; before, the user database's home, where this test wrote
/// nothing), each from a file named; not nccl-find's own variables; in
/// `--json` too.
#[test]
fn the_report_lists_the_settings_nccl_runs_with() {
    let Some(w) = common::wheels() else { return };
    let lib = common::newest_wheel(&w, "nvidia_nccl_cu12").join("nvidia/nccl/lib/libnccl.so.2");
    let home = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("settings-home-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join(".nccl.conf"),
        "NCCL_IB_HCA=mlx5_1\nNCCL_SOCKET_IFNAME=eth9\n",
    )
    .unwrap();
    let run = |json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
        without_launchers(&mut cmd)
            .args(["smoke", "--lib"])
            .arg(&lib)
            .args(if json { &["--json"][..] } else { &[][..] })
            .env("HOME", &home)
            .env("NCCL_SOCKET_IFNAME", "lo")
            .env("NCCL_FIND_TOKEN", "not-a-setting")
            .env("NCCL_HOME", "/not/a/setting");
        cmd.output().unwrap()
    };
    let o = text(&run(false));
    let conf = home.join(".nccl.conf");
    assert!(
        o.1.starts_with(&format!(
            "settings: NCCL_IB_HCA=mlx5_1 ({}), NCCL_SOCKET_IFNAME=lo\n",
            conf.display()
        )),
        "{o:?}"
    );
    let v: serde_json::Value = serde_json::from_slice(&run(true).stdout).unwrap();
    assert_eq!(
        v["settings"],
        serde_json::json!([
            {"name": "NCCL_IB_HCA", "value": "mlx5_1", "source": conf.display().to_string()},
            {"name": "NCCL_SOCKET_IFNAME", "value": "lo", "source": "the environment"},
        ])
    );
    // NCCL 2.21.5 takes `~` from the user database: HOME's file is not its.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
    without_launchers(&mut cmd)
        .args(["smoke", "--json", "--lib"])
        .arg(wheel_lib().unwrap())
        .env("HOME", &home)
        .env("NCCL_SOCKET_IFNAME", "lo");
    let old = cmd.output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&old.stdout).unwrap();
    assert_eq!(
        v["settings"],
        serde_json::json!([{"name": "NCCL_SOCKET_IFNAME", "value": "lo", "source": "the environment"}])
    );
    std::fs::remove_dir_all(&home).unwrap();
}
