//! Two hosts, emulated with two network namespaces joined by a veth pair
//! (addresses in 10.231.7.0/30, which exist only inside the namespaces this
//! test makes): rank 0 in one, rank 1 in the other, meeting over
//! `tcp://` with `--rendezvous-only`; and a wrong `NCCL_SOCKET_IFNAME`.
//! Needs root and `ip` (iproute2): skipped otherwise, unless
//! `NCCL_FIND_REQUIRE_NETNS=1` (scripts/test sets it) makes that a failure.

use std::process::{Command, Stdio};

mod common;
use common::{text, wheel_lib, TmpDir};

/// Says why the test cannot run here: a failure under
/// `NCCL_FIND_REQUIRE_NETNS=1`, else a skip.
fn skip(why: &str) {
    assert!(
        std::env::var("NCCL_FIND_REQUIRE_NETNS").as_deref() != Ok("1"),
        "NCCL_FIND_REQUIRE_NETNS=1, but {why}"
    );
    eprintln!("skipped: {why}");
}

fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

/// The namespaces and the veth pair this test made: removed when dropped,
/// whatever happened (removing a namespace removes the link in it).
struct Net {
    ns: [String; 2],
    veth: [String; 2],
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
        // Where a link never reached its namespace, it is still here.
        let _ = ip(&["link", "del", &self.veth[0]]);
    }
}

const ADDRS: [&str; 2] = ["10.231.7.1", "10.231.7.2"];

/// Makes the two namespaces, the veth pair between them and the addresses.
fn make_net() -> Result<Net, String> {
    let pid = std::process::id();
    let net = Net {
        ns: [format!("nf-test-a-{pid}"), format!("nf-test-b-{pid}")],
        veth: [format!("nfa{pid}"), format!("nfb{pid}")],
    };
    for ns in &net.ns {
        ip(&["netns", "add", ns])?;
    }
    ip(&[
        "link",
        "add",
        &net.veth[0],
        "type",
        "veth",
        "peer",
        "name",
        &net.veth[1],
    ])?;
    for ((ns, dev), addr) in net.ns.iter().zip(&net.veth).zip(ADDRS) {
        ip(&["link", "set", dev, "netns", ns])?;
        ip(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", dev])?;
        ip(&["-n", ns, "link", "set", dev, "up"])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
    }
    Ok(net)
}

/// `nccl-find smoke --rendezvous-only` as `rank` of 2 inside namespace `ns`,
/// `tmp` its TMPDIR.
fn rank_in(
    ns: &str,
    tmp: &TmpDir,
    lib: &std::path::Path,
    rank: usize,
    vars: &[(&str, &str)],
) -> std::process::Child {
    let init = format!("tcp://{}:29500", ADDRS[0]);
    let rank = rank.to_string();
    Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            env!("CARGO_BIN_EXE_nccl-find"),
            "smoke",
        ])
        .args(["--lib", lib.to_str().unwrap(), "--rendezvous-only"])
        .args(["--rank", &rank, "--world-size", "2", "--init", &init])
        .args(["--timeout", "60", "--token", "netns-test"])
        .env_remove("NCCL_SOCKET_IFNAME")
        .env("TMPDIR", tmp.path())
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Both ranks' outcomes, rank 0 first; asserts that they left nothing in
/// their TMPDIR (one for the job, as two hosts would each have their own:
/// what either leaves shows).
fn job(net: &Net, lib: &std::path::Path, vars1: &[(&str, &str)]) -> [(i32, String, String); 2] {
    let tmp = TmpDir::new("netns");
    let k0 = rank_in(&net.ns[0], &tmp, lib, 0, &[]);
    let k1 = rank_in(&net.ns[1], &tmp, lib, 1, vars1);
    let outs = [
        text(&k0.wait_with_output().unwrap()),
        text(&k1.wait_with_output().unwrap()),
    ];
    tmp.assert_empty(&format!("{outs:#?}"));
    outs
}

/// The verdict line (the last of stdout), without its wall time.
fn verdict(out: &str) -> String {
    let last = out.lines().last().unwrap_or("");
    match last.rsplit_once(" (") {
        Some((v, t)) if t.ends_with(" s)") => v.to_string(),
        _ => last.to_string(),
    }
}

#[test]
fn two_namespaces_meet_over_tcp_and_a_wrong_socket_ifname_is_named() {
    let Some(lib) = wheel_lib() else { return };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("network namespaces need root");
    }
    if let Err(e) = ip(&["netns", "list"]) {
        return skip(&format!("`ip netns` is not available ({e})"));
    }
    let net = match make_net() {
        Ok(n) => n,
        Err(e) => return skip(&format!("cannot make the test's namespaces ({e})")),
    };

    let [o0, o1] = job(&net, &lib, &[]);
    assert_eq!((o0.0, o1.0), (0, 0), "{o0:?} {o1:?}");
    assert_eq!(
        verdict(&o0.1),
        "[rank 0] OK: 2 rank(s) met, no all-reduce run (--rendezvous-only), 1 other process(es) agree",
        "{o0:?}"
    );
    assert_eq!(
        verdict(&o1.1),
        "[rank 1] OK: 2 rank(s) met, no all-reduce run (--rendezvous-only)",
        "{o1:?}"
    );
    assert!(
        o0.1.contains(&format!("[rank 0] note: rank 1 joined from {}:", ADDRS[1])),
        "{o0:?}"
    );

    // NCCL_SOCKET_IFNAME naming no interface of rank 1's namespace.
    let [o0, o1] = job(&net, &lib, &[("NCCL_SOCKET_IFNAME", "nosuchif0")]);
    assert_eq!((o0.0, o1.0), (0, 0), "{o0:?} {o1:?}");
    let note = format!(
        "[rank 1] note: NCCL_SOCKET_IFNAME=nosuchif0 leaves NCCL no network interface here (interfaces: {}), \
         so it cannot bootstrap. Name one that reaches the other nodes",
        net.veth[1]
    );
    assert!(o1.1.lines().any(|l| l == note), "{o1:?}");
    assert!(!o0.1.contains("NCCL_SOCKET_IFNAME"), "{o0:?}");
    drop(net);
}
