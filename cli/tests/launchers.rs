//! How `nccl-find smoke` reads the launcher that started it: the exchange
//! it names, where that came from, and what it says of a half-set
//! environment. (The real launchers are run in `launch_*.rs`.)

use std::process::{Child, Command, Stdio};

mod common;
use common::{free_port, text, wheel_lib, without_launchers};

fn spawn(lib: &std::path::Path, extra: &[&str], vars: &[(&str, &str)]) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
    c.args([
        "smoke",
        "--lib",
        lib.to_str().unwrap(),
        "--rendezvous-only",
        "--timeout",
        "60",
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

/// The smoke test's page (docs/smoke.md) has the table the code tries, row for row.
#[test]
fn the_docs_list_every_exchange_in_order() {
    let table = nccl_smoke::rendezvous::launch::table_markdown();
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/smoke.md"),
    )
    .unwrap();
    assert!(
        readme.contains(&table),
        "docs/smoke.md's table of exchanges must be this one, from nccl-smoke/src/rendezvous/launch.rs:\n{table}"
    );
}
