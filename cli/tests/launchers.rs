//! How `nccl-find smoke` reads the launcher that started it: the exchange
//! it names, where that came from, and what it says of a half-set
//! environment. (The real launchers are run in `launch_*.rs`.)

use std::process::{Child, Command, Stdio};

mod common;
use common::{free_port, text, wheel_lib, without_launchers};

fn spawn(lib: &std::path::Path, extra: &[&str], vars: &[(&str, &str)]) -> Child {
    spawn_for(lib, "60", extra, vars)
}

/// [`spawn`] with another `--timeout`.
fn spawn_for(lib: &std::path::Path, timeout: &str, extra: &[&str], vars: &[(&str, &str)]) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
    c.args([
        "smoke",
        "--lib",
        lib.to_str().unwrap(),
        "--rendezvous-only",
        "--timeout",
        timeout,
    ])
    .args(extra);
    without_launchers(&mut c);
    c.envs(vars.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn torchrun_without_an_agent_store_meets_over_our_tcp_and_says_so() {
    let Some(lib) = wheel_lib() else { return };
    let port = free_port().to_string();
    let vars = |r: &'static str, l: &'static str| {
        vec![
            ("TORCHELASTIC_USE_AGENT_STORE", "False"),
            ("TORCHELASTIC_RUN_ID", "6b1f0c2e"),
            ("TORCHELASTIC_RESTART_COUNT", "0"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", port.as_str()),
            ("RANK", r),
            ("LOCAL_RANK", l),
            ("WORLD_SIZE", "2"),
        ]
    };
    let k1 = spawn(&lib, &[], &vars("1", "1"));
    let k0 = spawn(&lib, &["--json"], &vars("0", "0"));
    let (o0, o1) = (
        text(&k0.wait_with_output().unwrap()),
        text(&k1.wait_with_output().unwrap()),
    );
    assert_eq!((o0.0, o1.0), (0, 0), "{o0:?}\n{o1:?}");
    let first = o1.1.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "[rank 1] note: exchange: torchrun-tcp via torchrun, at tcp://127.0.0.1:{port} (from \
             TORCHELASTIC_USE_AGENT_STORE, MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, \
             TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT)"
        )
    );
    assert!(o1.1.contains("[rank 1] note: local rank 1\n"), "{o1:?}");
    let v: serde_json::Value = serde_json::from_str(&o0.1).unwrap();
    assert_eq!(
        v["exchange"],
        serde_json::json!({
            "id": "torchrun-tcp", "launcher": "torchrun", "at": format!("tcp://127.0.0.1:{port}"),
            "from": ["TORCHELASTIC_USE_AGENT_STORE", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                     "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"],
            "token": "the launcher's job identity", "rank": 0, "world": 2, "local_rank": 0,
        })
    );
    assert_eq!(v["ok"], true);
}

#[test]
fn by_hand_without_a_token_the_open_port_is_named() {
    let Some(lib) = wheel_lib() else { return };
    let port = free_port().to_string();
    let vars = |r: &'static str| {
        vec![
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", port.as_str()),
            ("RANK", r),
            ("WORLD_SIZE", "2"),
        ]
    };
    let k1 = spawn(&lib, &[], &vars("1"));
    let k0 = spawn(&lib, &[], &vars("0"));
    let (o0, o1) = (
        text(&k0.wait_with_output().unwrap()),
        text(&k1.wait_with_output().unwrap()),
    );
    assert_eq!((o0.0, o1.0), (0, 0), "{o0:?}\n{o1:?}");
    assert_eq!(
        o0.1.lines().next().unwrap(),
        format!(
            "[rank 0] note: exchange: torchrun-tcp via MASTER_ADDR/MASTER_PORT, at tcp://127.0.0.1:{port} (from \
             MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE); no job token: the port is open to whoever can reach it \
             (pass --token or set NCCL_FIND_TOKEN)"
        )
    );
    // With a token, no such words.
    let vars = |r: &'static str| {
        vec![
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", port.as_str()),
            ("RANK", r),
            ("WORLD_SIZE", "2"),
            ("NCCL_FIND_TOKEN", "s3cret"),
        ]
    };
    let k1 = spawn(&lib, &[], &vars("1"));
    let k0 = spawn(&lib, &[], &vars("0"));
    let (o0, o1) = (
        text(&k0.wait_with_output().unwrap()),
        text(&k1.wait_with_output().unwrap()),
    );
    assert_eq!((o0.0, o1.0), (0, 0), "{o0:?}\n{o1:?}");
    assert!(
        !o0.1.contains("open to whoever") && !o0.1.contains("s3cret"),
        "{o0:?}"
    );
}

#[test]
fn a_half_set_launcher_environment_says_what_is_missing_and_what_to_pass() {
    let Some(lib) = wheel_lib() else { return };
    let o = text(
        &spawn(
            &lib,
            &[],
            &[
                ("MASTER_ADDR", "10.0.0.1"),
                ("MASTER_PORT", "29500"),
                ("WORLD_SIZE", "4"),
            ],
        )
        .wait_with_output()
        .unwrap(),
    );
    assert_eq!(
        o,
        (
            2,
            String::new(),
            "nccl-find smoke: torchrun (no agent store), or MASTER_ADDR and MASTER_PORT set by hand: RANK is not \
             set, though MASTER_ADDR, MASTER_PORT are: the launcher's environment is half set. Start every process \
             with the launcher, or pass --rank, --world-size and --init tcp://HOST:PORT\n"
                .to_string()
        )
    );
    // Everything passed by flag: the half-set environment does not matter.
    let port = free_port().to_string();
    let init = format!("tcp://127.0.0.1:{port}");
    let o = text(
        &spawn(
            &lib,
            &["--rank", "0", "--world-size", "1", "--init", &init],
            &[("MASTER_ADDR", "x"), ("MASTER_PORT", "1")],
        )
        .wait_with_output()
        .unwrap(),
    );
    assert_eq!(o.0, 0, "{o:?}");
    assert!(
        o.1.starts_with(&format!(
            "[rank 0] note: exchange: init via --init, at {init}; no job token"
        )),
        "{o:?}"
    );
    // A launcher with no row of its own, and no rendezvous given.
    let o = text(
        &spawn(
            &lib,
            &[],
            &[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")],
        )
        .wait_with_output()
        .unwrap(),
    );
    assert_eq!(
        o,
        (
            2,
            String::new(),
            "nccl-find smoke: several processes need a rendezvous, and no launcher this command knows started this \
             one (1 of 2, from OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE): pass --init tcp://HOST:PORT or \
             file:///shared/path, or set MASTER_ADDR and MASTER_PORT\n"
                .to_string()
        )
    );
}

/// A launcher's server, or rank 0 of our rendezvous at a launcher's
/// address, that never answers (nothing listens there; a socket takes the
/// connection and stays silent): each rank ends by `--timeout`, exit 1,
/// with a line that names the launcher, what did not answer, and what to
/// pass instead.
#[test]
fn a_server_or_rank_0_that_never_answers_ends_by_the_timeout_naming_the_launcher() {
    let Some(lib) = wheel_lib() else { return };
    // Takes every connection and never says a word.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let quiet = silent.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for c in silent.incoming() {
            kept.push(c);
        }
    });
    let closed = free_port().to_string();
    let store = |port: &str, rank: &'static str| {
        vec![
            ("TORCHELASTIC_USE_AGENT_STORE", "True".to_string()),
            ("TORCHELASTIC_RUN_ID", "r1".into()),
            ("TORCHELASTIC_RESTART_COUNT", "0".into()),
            ("MASTER_ADDR", "127.0.0.1".into()),
            ("MASTER_PORT", port.into()),
            ("RANK", rank.into()),
            ("LOCAL_RANK", "0".into()),
            ("WORLD_SIZE", "2".into()),
        ]
    };
    let pmix = |port: &str| {
        let uri = format!("prterun.test;tcp4://127.0.0.1:{port}");
        vec![
            ("PMIX_NAMESPACE", "ns-test".to_string()),
            ("PMIX_RANK", "1".into()),
            ("OMPI_COMM_WORLD_SIZE", "2".into()),
            ("PMIX_SERVER_URI41", uri.clone()),
            ("PMIX_SERVER_URI4", uri),
            ("PMIX_VERSION", "4.2.2".into()),
        ]
    };
    let instead = "Or pass --rank, --world-size and --init tcp://HOST:PORT to meet without the launcher's server";
    let mut cases = vec![
        (
            store(&quiet, "0"),
            format!(
                "[rank 0] FAILED: torchrun (agent store): cannot reach the agent's TCPStore at \
                 tcp://127.0.0.1:{quiet}: in the protocol of torch >= 2.2: the server did not answer in time. \
                 Is this process started by torchrun, and is its agent still running? {instead}"
            ),
        ),
        (
            store(&closed, "1"),
            format!(
                "[rank 1] FAILED: torchrun (agent store): cannot reach the agent's TCPStore at \
                 tcp://127.0.0.1:{closed}: nothing listens there (Connection refused (os error 111)). Is this \
                 process started by torchrun, and is its agent still running? {instead}"
            ),
        ),
        (
            vec![
                ("TORCHELASTIC_USE_AGENT_STORE", "False".to_string()),
                ("TORCHELASTIC_RUN_ID", "r2".into()),
                ("TORCHELASTIC_RESTART_COUNT", "0".into()),
                ("MASTER_ADDR", "127.0.0.1".into()),
                ("MASTER_PORT", closed.clone()),
                ("RANK", "1".into()),
                ("WORLD_SIZE", "2".into()),
            ],
            format!(
                "[rank 1] FAILED: rank 1 could not reach rank 0 at tcp://127.0.0.1:{closed} within 3 s \
                 (Connection refused (os error 111)). Is rank 0 running, and is that address reachable from \
                 here? The address is MASTER_ADDR and MASTER_PORT, set by torchrun (its --master-addr and \
                 --master-port choose them)."
            ),
        ),
        (
            vec![
                ("SLURM_PROCID", "1".to_string()),
                ("SLURM_NTASKS", "2".into()),
                ("SLURM_STEP_NODELIST", "127.0.0.1".into()),
                ("SLURM_JOB_ID", "77".into()),
                ("SLURM_STEP_ID", "0".into()),
                ("NCCL_FIND_SLURM_PORT", closed.clone()),
            ],
            format!(
                "[rank 1] FAILED: rank 1 could not reach rank 0 at tcp://127.0.0.1:{closed} within 3 s \
                 (Connection refused (os error 111)). Is rank 0 running, and is that address reachable from \
                 here? The address is the first node of SLURM_STEP_NODELIST and NCCL_FIND_SLURM_PORT (set it \
                 to another port free on that node)."
            ),
        ),
    ];
    // PMIx: the system's libpmix, which Debian's Open MPI brings (the
    // test command installs it).
    let with_pmix = std::env::var_os("NCCL_FIND_OMPI4_MPIRUN").is_some();
    if with_pmix {
        cases.push((
            pmix(&closed),
            format!(
                "[rank 1] FAILED: mpirun (Open MPI): PMIx_Init failed: -25 (\"UNREACHABLE\"): the PMIx server \
                 that PMIX_SERVER_URI* names did not take this process. Is it started by the launcher, and is \
                 the launcher still running? {instead}"
            ),
        ));
        // Where the line names the library, it is the one the report's
        // exchange line names.
        cases.push((pmix(&quiet), "{at}".into()));
    } else {
        assert!(
            std::env::var_os("NCCL_FIND_REQUIRE_LAUNCHERS").is_none(),
            "NCCL_FIND_OMPI4_MPIRUN is unset; run scripts/test"
        );
        eprintln!("skipped the PMIx cases: no Open MPI 4 (and its libpmix) here; scripts/test installs it");
    }
    let started = std::time::Instant::now();
    let running: Vec<_> = cases
        .iter()
        .map(|(vars, _)| {
            let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
            spawn_for(&lib, "3", &[], &vars)
        })
        .collect();
    for ((_, want), child) in cases.iter().zip(running) {
        let (code, out, err) = text(&child.wait_with_output().unwrap());
        let failed = out
            .lines()
            .find(|l| l.contains("] FAILED: "))
            .unwrap_or_default();
        let failed = failed.rsplit_once(" (").map_or(failed, |(l, _)| l);
        let want = match want.as_str() {
            "{at}" => {
                let at = out
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("[rank 1] note: exchange: pmix via mpirun (Open MPI), at ")
                    })
                    .and_then(|l| l.rsplit_once(" (from "))
                    .map(|(at, _)| at.to_string())
                    .unwrap_or_else(|| panic!("no exchange line: {out}"));
                format!(
                    "[rank 1] FAILED: mpirun (Open MPI): no answer from {at} within 3 s: is the launcher still \
                     running, and did it start this process? {instead}"
                )
            }
            w => w.to_string(),
        };
        assert_eq!((code, failed), (1, want.as_str()), "{out}\n{err}");
        assert_eq!(
            err,
            format!("nccl-find smoke: {}", &out[out.find("FAILED").unwrap()..])
        );
    }
    // All at once, each with a 3 s deadline (2 s of grace past it at most).
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// The smoke test's page (docs/smoke.md) has the table the code tries, row for row.
#[test]
fn the_docs_list_every_exchange_in_order() {
    let table = nccl_rendezvous::table_markdown();
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/smoke.md"),
    )
    .unwrap();
    assert!(
        readme.contains(&table),
        "docs/smoke.md's table of exchanges must be this one, from nccl-smoke/src/rendezvous/launch.rs:\n{table}"
    );
}
