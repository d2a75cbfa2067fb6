//! Two hosts, emulated with two network namespaces joined by a veth pair
//! (addresses in 10.231.7.0/30, which exist only inside the namespaces this
//! test makes): rank 0 in one, rank 1 in the other, meeting over
//! `tcp://` with `--rendezvous-only`; and a wrong `NCCL_SOCKET_IFNAME`.
//! Needs root and `ip` (iproute2): skipped otherwise, unless
//! `NCCL_FIND_REQUIRE_NETNS=1` (scripts/test sets it) makes that a failure.

use std::process::{Command, Stdio};

mod common;
use common::{
    ip, namespaces_can_be_made, skip_launcher, skip_netns, text, wheel_lib, without_launchers,
    TmpDir,
};

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
    if !namespaces_can_be_made() {
        return;
    }
    let net = match make_net() {
        Ok(n) => n,
        Err(e) => return skip_netns(&format!("cannot make the test's namespaces ({e})")),
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

    // NCCL_SOCKET_IFNAME naming no interface of rank 1's namespace: every
    // rank stops before NCCL with the cause, which rank 0 found on rank
    // 1's card (both namespaces keep this host's name).
    let [o0, o1] = job(&net, &lib, &[("NCCL_SOCKET_IFNAME", "nosuchif0")]);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let cause = format!(
        "FAILED: {} rank 1: NCCL_SOCKET_IFNAME=nosuchif0 matches none of the interfaces NCCL lists (lo, {}), \
         so NCCL cannot start there: unset NCCL_SOCKET_IFNAME, or set it to an interface every node has",
        host.trim(),
        net.veth[1]
    );
    every(&[o0, o1], 1, &cause);
    drop(net);
}

/// Asserts every rank's exit status and last line (`[rank N] ` and `line`).
fn every(outs: &[(i32, String, String)], code: i32, line: &str) {
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(
            (o.0, verdict(&o.1)),
            (code, format!("[rank {r}] {line}")),
            "rank {r}: {o:#?}"
        );
    }
}

/// The three hosts' names, each set in a UTS namespace of its own.
const HOSTS: [&str; 3] = ["nf-a", "nf-b", "nf-c"];

/// Three hosts as namespaces `nf-h<i>-<pid>`, joined by a bridge in a
/// fourth (the switch). Each has `eth0` on 10.231.8.0/24, and what misleads
/// NCCL on real nodes: `dummy0`, made first so that NCCL's default rule
/// takes it, with an unrouted subnet of its own (10.99.<i>.1/24) and an
/// IPv6 address that goes nowhere (fd00:99:<i+1>::1/64); and `docker0`, a
/// bridge with the same 172.17.0.1/16 on every host (with one port, as a
/// container gives it, so that it runs). `dummy0` is one end of a veth pair
/// whose other end stays on the host: the kernels of CI machines may lack
/// the dummy driver. Removed when dropped.
struct Hosts {
    ns: Vec<String>,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// `ip -n NS ARGS…`.
fn ip_in(ns: &str, args: &[&str]) -> Result<(), String> {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    ip(&all)
}

/// A bridge `name` in `ns` with one port (a veth pair inside `ns`), up.
fn bridge(ns: &str, name: &str) -> Result<(), String> {
    ip_in(ns, &["link", "add", name, "type", "bridge"])?;
    ip_in(ns, &["link", "set", name, "up"])?;
    let (p, q) = (format!("{name}p"), format!("{name}q"));
    ip_in(ns, &["link", "add", &p, "type", "veth", "peer", "name", &q])?;
    ip_in(ns, &["link", "set", &q, "up"])?;
    ip_in(ns, &["link", "set", &p, "master", name])?;
    ip_in(ns, &["link", "set", &p, "up"])
}

fn make_hosts() -> Result<Hosts, String> {
    // Two tests of this file may make hosts at once, in one process.
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let pid = format!("{n}{}", std::process::id());
    let mut hosts = Hosts { ns: Vec::new() };
    let sw = format!("nf-sw-{pid}");
    ip(&["netns", "add", &sw])?;
    hosts.ns.push(sw.clone());
    bridge(&sw, "br0")?;
    for h in 0..3 {
        let ns = format!("nf-h{h}-{pid}");
        ip(&["netns", "add", &ns])?;
        hosts.ns.push(ns.clone());
        ip_in(&ns, &["link", "set", "lo", "up"])?;
        ip_in(
            &ns,
            &[
                "link", "add", "dummy0", "type", "veth", "peer", "name", "dm1",
            ],
        )?;
        ip_in(&ns, &["link", "set", "dm1", "up"])?;
        ip_in(&ns, &["link", "set", "dummy0", "up"])?;
        ip_in(
            &ns,
            &["addr", "add", &format!("10.99.{h}.1/24"), "dev", "dummy0"],
        )?;
        ip_in(
            &ns,
            &[
                "addr",
                "add",
                &format!("fd00:99:{}::1/64", h + 1),
                "dev",
                "dummy0",
                "nodad",
            ],
        )?;
        let (v, p) = (format!("nfv{h}{pid}"), format!("nfp{h}{pid}"));
        ip(&["link", "add", &v, "type", "veth", "peer", "name", &p])?;
        ip(&["link", "set", &v, "netns", &ns])?;
        ip(&["link", "set", &p, "netns", &sw])?;
        ip_in(&sw, &["link", "set", &p, "master", "br0"])?;
        ip_in(&sw, &["link", "set", &p, "up"])?;
        ip_in(&ns, &["link", "set", &v, "name", "eth0"])?;
        ip_in(&ns, &["link", "set", "eth0", "up"])?;
        ip_in(
            &ns,
            &[
                "addr",
                "add",
                &format!("10.231.8.{}/24", h + 1),
                "dev",
                "eth0",
            ],
        )?;
        bridge(&ns, "docker0")?;
        ip_in(&ns, &["addr", "add", "172.17.0.1/16", "dev", "docker0"])?;
    }
    Ok(hosts)
}

/// `nccl-find smoke --rendezvous-only` as rank `h` of 3, on host `h` (its
/// own namespace and host name), meeting at host 0's eth0; `lib`: `--lib`,
/// where given.
fn on_host(
    hosts: &Hosts,
    h: usize,
    tmp: &TmpDir,
    lib: Option<&std::path::Path>,
    vars: &[(&str, &str)],
) -> std::process::Child {
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        &hosts.ns[h + 1],
        "unshare",
        "--uts",
        "sh",
        "-c",
    ])
    .arg("hostname \"$0\" && exec \"$@\"")
    .args([HOSTS[h], env!("CARGO_BIN_EXE_nccl-find"), "smoke"]);
    if let Some(lib) = lib {
        c.args(["--lib", lib.to_str().unwrap()]);
    }
    c.args([
        "--rendezvous-only",
        "--rank",
        &h.to_string(),
        "--world-size",
        "3",
    ])
    .args([
        "--init",
        "tcp://10.231.8.1:29500",
        "--timeout",
        "60",
        "--token",
        "netns-3",
    ])
    .env_remove("NCCL_SOCKET_IFNAME")
    .env_remove("NCCL_HOME")
    .env("TMPDIR", tmp.path())
    .envs(vars.iter().copied())
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c.spawn().unwrap()
}

/// A host's `--lib` (`None`: the probe's choice) and variables.
type Host<'a> = (Option<&'a std::path::Path>, &'a [(&'a str, &'a str)]);

/// The three ranks' outcomes, each host with its own `--lib` (`None`: the
/// probe's choice) and variables.
fn three(hosts: &Hosts, each: [Host<'_>; 3]) -> Vec<(i32, String, String)> {
    let tmp = TmpDir::new("netns3");
    let kids: Vec<_> = each
        .iter()
        .enumerate()
        .map(|(h, (lib, vars))| on_host(hosts, h, &tmp, *lib, vars))
        .collect();
    let outs = outcomes(kids);
    tmp.assert_empty(&format!("{outs:#?}"));
    outs
}

/// Rank 0's report of the nodes: its lines from `nodes:` to the first
/// that is not part of it (what was handed out, or that the job stopped).
fn nodes_report(out: &str) -> Vec<String> {
    out.lines()
        .skip_while(|l| !l.starts_with("[rank 0] nodes: "))
        .take_while(|l| {
            !l.starts_with("[rank 0] note: rendezvous:")
                && !l.starts_with("[rank 0] note: NCCL was not started")
        })
        // The pairs' figures vary from run to run: their shape is checked.
        .map(|l| match l.find(": median ") {
            Some(i) if l.contains("pairs: ") => {
                let (head, tail) = l.split_at(i);
                assert!(tail.contains("bit/s; slowest "), "{l}");
                format!("{head}: median …")
            }
            _ => l.to_string(),
        })
        .collect()
}

/// The pairs' line of a healthy ring of `n` hosts, figures left out.
fn pairs_line(n: usize) -> String {
    format!(
        "[rank 0]   pairs: {n} link(s) timed in one round, each node sending to the next for 300 ms on \
         the address NCCL will use: median …"
    )
}

/// The failed connections of the report, between the ring's hosts
/// (0 -> 1, 1 -> 2, 1 -> 0, 2 -> 0): to `dummy0` (IPv4 and IPv6, which no
/// other host routes; each a problem where NCCL takes it) and to `docker0`
/// (the same address on every host: this host's own refuses).
/// `on[r]` is the host of rank `r`.
fn failed_lines(nccl_takes_dummy0: bool, on: [usize; 3]) -> Vec<String> {
    let at =
        |f: usize, t: usize| format!("{} (rank {f}) -> {} (rank {t})", HOSTS[on[f]], HOSTS[on[t]]);
    let mut out = Vec::new();
    if nccl_takes_dummy0 {
        for (f, t) in [(0, 1), (1, 2), (1, 0), (2, 0)] {
            out.push(format!(
                "[rank 0] problem: {} dummy0 10.99.{}.1, which NCCL will use: network unreachable",
                at(f, t),
                on[t]
            ));
        }
    }
    let dummy0 = if nccl_takes_dummy0 { 4 } else { 8 };
    out.push(format!(
        "[rank 0]   not reached on the other interfaces: dummy0 {dummy0}x (network unreachable), docker0 4x \
         (refused) (each in --json)"
    ));
    out
}

#[test]
fn three_hosts_say_which_interface_reaches_every_one_and_which_host_differs() {
    let Some(lib) = wheel_lib() else { return };
    if !namespaces_can_be_made() {
        return;
    }
    let hosts = match make_hosts() {
        Ok(h) => h,
        Err(e) => return skip_netns(&format!("cannot make the test's namespaces ({e})")),
    };
    let l = Some(lib.as_path());

    // NCCL's default rule takes dummy0 everywhere: no host reaches another's.
    let outs = three(&hosts, [(l, &[]), (l, &[]), (l, &[])]);
    let report = nodes_report(&outs[0].1);
    assert!(
        report[0].starts_with(
            "[rank 0] nodes: 3 (nf-a, nf-b, nf-c), 3 rank(s); the same on every one: NCCL 2.21.5, "
        ) && report[0].contains("NCCL's interfaces dummy0,eth0"),
        "{report:#?}"
    );
    let mut want = vec!["[rank 0]   reach: 16 connection(s) tested between 3 hosts, as NCCL's bootstrap connects \
         (the last rank of each host to the next host and to rank 0): 4 to an address NCCL will use failed"
        .to_string()];
    want.extend(failed_lines(true, [0, 1, 2]));
    want.push("[rank 0]   proposed: NCCL_SOCKET_IFNAME=eth0 (it reached every host tried)".into());
    assert_eq!(report[1..], want[..], "{}", outs[0].1);
    // Every rank stops before NCCL with the cause and the proposal.
    every(
        &outs,
        1,
        "FAILED: nf-a (rank 0) cannot reach dummy0 10.99.1.1 of nf-b (rank 1), which NCCL will use (network \
         unreachable) (and 3 more connection(s) to NCCL's addresses), so NCCL would hang: use \
         NCCL_SOCKET_IFNAME=eth0, which reached every node",
    );

    // With the proposal everywhere, every host reaches every one it tries.
    let eth0: &[(&str, &str)] = &[("NCCL_SOCKET_IFNAME", "eth0")];
    let outs = three(&hosts, [(l, eth0), (l, eth0), (l, eth0)]);
    assert_eq!(
        outs.iter().map(|o| o.0).collect::<Vec<_>>(),
        [0, 0, 0],
        "{outs:#?}"
    );
    let report = nodes_report(&outs[0].1);
    let mut want = vec!["[rank 0]   reach: 16 connection(s) tested between 3 hosts, as NCCL's bootstrap connects \
         (the last rank of each host to the next host and to rank 0): every address NCCL will use was reached"
        .to_string()];
    want.extend(failed_lines(false, [0, 1, 2]));
    want.push(pairs_line(3));
    assert_eq!(report[1..], want[..], "{}", outs[0].1);

    // One host with another NCCL (its NCCL_HOME), one with another rule.
    let newer = lib
        .to_str()
        .unwrap()
        .replace("nvidia_nccl_cu12-2.21.5", "nvidia_nccl_cu12-2.32.3");
    let home = newer.trim_end_matches("/lib/libnccl.so.2").to_string();
    let outs = three(
        &hosts,
        [
            (l, eth0),
            (
                None,
                &[("NCCL_HOME", home.as_str()), ("NCCL_SOCKET_IFNAME", "eth0")],
            ),
            (l, &[]),
        ],
    );
    let report = nodes_report(&outs[0].1);
    for line in [
        "[rank 0] problem: nf-b: NCCL 2.32.3 (the 2 other nodes: 2.21.5)".to_string(),
        "[rank 0] problem: nf-c: NCCL_SOCKET_IFNAME unset (the 2 other nodes: eth0)".into(),
        "[rank 0]   nf-c: NCCL's interfaces dummy0,eth0,dm1 (the 2 other nodes: eth0)".into(),
    ] {
        assert!(report.contains(&line), "{line}\n{report:#?}");
    }
    // Another NCCL outranks the address nf-c's rule makes NCCL use.
    every(
        &outs,
        1,
        "FAILED: NCCL releases differ: nf-b: NCCL 2.32.3 (the 2 other nodes: 2.21.5), and NCCL refuses \
         ranks of another release (`Mismatched NCCL version detected`): load the same NCCL everywhere (the \
         same wheel, or --lib to the same file)",
    );
    drop(hosts);
}

/// Gives each host an `ib0` that leads nowhere: one end of a veth pair
/// whose other end sits alone, on no bridge, with an address of one subnet
/// (10.98.0.<h+1>/24) on every host. NCCL's rule takes ib* first.
fn add_dead_ib0(hosts: &Hosts) -> Result<(), String> {
    for (h, ns) in hosts.ns[1..].iter().enumerate() {
        ip_in(
            ns,
            &["link", "add", "ib0", "type", "veth", "peer", "name", "ib0p"],
        )?;
        ip_in(ns, &["link", "set", "ib0p", "up"])?;
        ip_in(ns, &["link", "set", "ib0", "up"])?;
        ip_in(
            ns,
            &[
                "addr",
                "add",
                &format!("10.98.0.{}/24", h + 1),
                "dev",
                "ib0",
            ],
        )?;
    }
    Ok(())
}

/// The hosts of the issue: NCCL's default interface (`ib0`) leads nowhere
/// and `eth0` joins them. Every rank stops before NCCL, its last line the
/// cause and the proposal; with the proposal, every rank meets.
#[test]
fn a_default_interface_that_leads_nowhere_stops_every_rank_with_the_proposal() {
    let Some(lib) = wheel_lib() else { return };
    if !namespaces_can_be_made() {
        return;
    }
    let hosts = match make_hosts().and_then(|h| add_dead_ib0(&h).map(|()| h)) {
        Ok(h) => h,
        Err(e) => return skip_netns(&format!("cannot make the test's namespaces ({e})")),
    };
    let l = Some(lib.as_path());
    let outs = three(&hosts, [(l, &[]), (l, &[]), (l, &[])]);
    every(
        &outs,
        1,
        "FAILED: nf-a (rank 0) cannot reach ib0 10.98.0.2 of nf-b (rank 1), which NCCL will use (timed out) \
         (and 3 more connection(s) to NCCL's addresses), so NCCL would hang: use NCCL_SOCKET_IFNAME=eth0, \
         which reached every node",
    );
    let eth0: &[(&str, &str)] = &[("NCCL_SOCKET_IFNAME", "eth0")];
    let outs = three(&hosts, [(l, eth0), (l, eth0), (l, eth0)]);
    assert_eq!(
        outs.iter().map(|o| (o.0, verdict(&o.1))).collect::<Vec<_>>(),
        [
            (
                0,
                "[rank 0] OK: 3 rank(s) met, no all-reduce run (--rendezvous-only), 2 other process(es) agree"
                    .to_string()
            ),
            (0, "[rank 1] OK: 3 rank(s) met, no all-reduce run (--rendezvous-only)".into()),
            (0, "[rank 2] OK: 3 rank(s) met, no all-reduce run (--rendezvous-only)".into()),
        ],
        "{outs:#?}"
    );
    drop(hosts);
}

/// `torchrun --nnodes=3` on host `h`: one agent a host, its c10d
/// rendezvous at host 0's eth0 (hosted there: `is_host`), one worker each,
/// running `nccl-find smoke --rendezvous-only` with the agent's store.
/// torch names the agents' hosts to each other: each host's /etc/hosts
/// (`names`, bound over it in a mount namespace of its own) knows the three.
fn agent_on(
    hosts: &Hosts,
    h: usize,
    tmp: &TmpDir,
    names: &std::path::Path,
    torchrun: &str,
    lib: &std::path::Path,
) -> std::process::Child {
    let mut c = Command::new("ip");
    let ns = &hosts.ns[h + 1];
    c.args([
        "netns", "exec", ns, "unshare", "--uts", "--mount", "sh", "-c",
    ])
    .arg("mount --bind \"$1\" /etc/hosts && hostname \"$0\" && shift && exec \"$@\"")
    .args([HOSTS[h], names.to_str().unwrap(), torchrun])
    .args(["--nnodes=3", "--nproc-per-node=1", "--max-restarts=0"])
    .args(["--rdzv-backend=c10d", "--rdzv-endpoint=10.231.8.1:29400"])
    .args([
        "--rdzv-id=netns-3",
        &format!("--rdzv-conf=is_host={}", h == 0),
    ])
    .args([
        "--no-python",
        env!("CARGO_BIN_EXE_nccl-find"),
        "smoke",
        "--rendezvous-only",
    ])
    .args(["--timeout", "90", "--lib", lib.to_str().unwrap()]);
    without_launchers(&mut c)
        .env_remove("NCCL_SOCKET_IFNAME")
        .env_remove("NCCL_HOME")
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().unwrap()
}

/// Each child's outcome, read at once: one that fills its pipe would stall
/// the others (torchrun's agents wait for each other to exit).
fn outcomes(kids: Vec<std::process::Child>) -> Vec<(i32, String, String)> {
    let readers: Vec<_> = kids
        .into_iter()
        .map(|k| std::thread::spawn(move || text(&k.wait_with_output().unwrap())))
        .collect();
    readers.into_iter().map(|r| r.join().unwrap()).collect()
}

#[test]
fn three_hosts_under_torchrun_c10d_say_the_same() {
    let Some(lib) = wheel_lib() else { return };
    let torchrun = match std::env::var("NCCL_FIND_TORCHRUN") {
        Ok(t) if !t.is_empty() => t,
        _ => return skip_launcher("NCCL_FIND_TORCHRUN is not set (scripts/launchers sets it)"),
    };
    if !namespaces_can_be_made() {
        return;
    }
    let hosts = match make_hosts() {
        Ok(h) => h,
        Err(e) => return skip_netns(&format!("cannot make the test's namespaces ({e})")),
    };
    let tmp = TmpDir::new("netns3-torchrun");
    let etc = TmpDir::new("netns3-hosts");
    let names = etc.path().join("hosts");
    let known = "127.0.0.1 localhost\n10.231.8.1 nf-a\n10.231.8.2 nf-b\n10.231.8.3 nf-c\n";
    std::fs::write(&names, known).unwrap();
    let agents = (0..3)
        .map(|h| agent_on(&hosts, h, &tmp, &names, &torchrun, &lib))
        .collect();
    let outs = outcomes(agents);
    // Rank 0 is the worker of the agent that hosts the store (host 0 joins
    // first there, but torch may order the agents as they came).
    let zero = outs
        .iter()
        .position(|o| o.1.contains("[rank 0] note: exchange: torchrun-store"))
        .unwrap_or_else(|| panic!("{outs:#?}"));
    let report = nodes_report(&outs[zero].1);
    // The hosts in rank order, as the report names them.
    let named = report[0]
        .strip_prefix("[rank 0] nodes: 3 (")
        .and_then(|r| r.split_once(')'))
        .map(|(h, _)| h.split(", ").collect::<Vec<_>>())
        .unwrap_or_default();
    let on: Vec<usize> = named
        .iter()
        .filter_map(|n| HOSTS.iter().position(|h| h == n))
        .collect();
    let on: [usize; 3] = on.try_into().unwrap_or_else(|_| panic!("{outs:#?}"));
    assert!(
        report[0].contains("NCCL's interfaces dummy0,eth0,dm1"),
        "{outs:#?}"
    );
    let mut want = vec!["[rank 0]   reach: 16 connection(s) tested between 3 hosts, as NCCL's bootstrap connects \
         (the last rank of each host to the next host and to rank 0): 4 to an address NCCL will use failed"
        .to_string()];
    want.extend(failed_lines(true, on));
    want.push("[rank 0]   proposed: NCCL_SOCKET_IFNAME=eth0 (it reached every host tried)".into());
    assert_eq!(report[1..], want[..], "{outs:#?}");
    // torchrun leaves its own directories where a worker failed (rank 0
    // does, on the problems it names): nothing else may be left.
    let ours: Vec<String> = tmp
        .left()
        .into_iter()
        .filter(|l| !l.starts_with("torchelastic_") && !l.starts_with("torchinductor_"))
        .collect();
    assert!(ours.is_empty(), "left behind: {ours:#?}");
    drop(hosts);
}

/// `n` hosts `nr<i>` in namespaces of their own, one `eth0` each
/// (10.233.0.<i+1>/24) on a bridge in a switch namespace. Removed when
/// dropped.
fn make_ring(n: usize) -> Result<Hosts, String> {
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = MADE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let pid = format!("{k}{}", std::process::id());
    let mut hosts = Hosts { ns: Vec::new() };
    let sw = format!("nr-sw-{pid}");
    ip(&["netns", "add", &sw])?;
    hosts.ns.push(sw.clone());
    ip_in(&sw, &["link", "add", "br0", "type", "bridge"])?;
    ip_in(&sw, &["link", "set", "br0", "up"])?;
    for h in 0..n {
        let ns = format!("nr-h{h}-{pid}");
        ip(&["netns", "add", &ns])?;
        hosts.ns.push(ns.clone());
        ip_in(&ns, &["link", "set", "lo", "up"])?;
        let (v, p) = (format!("nrv{h}{pid}"), format!("nrp{h}{pid}"));
        ip(&["link", "add", &v, "type", "veth", "peer", "name", &p])?;
        ip(&["link", "set", &v, "netns", &ns])?;
        ip(&["link", "set", &p, "netns", &sw])?;
        ip_in(&sw, &["link", "set", &p, "master", "br0"])?;
        ip_in(&sw, &["link", "set", &p, "up"])?;
        ip_in(&ns, &["link", "set", &v, "name", "eth0"])?;
        ip_in(&ns, &["link", "set", "eth0", "up"])?;
        let addr = format!("10.233.0.{}/24", h + 1);
        ip_in(&ns, &["addr", "add", &addr, "dev", "eth0"])?;
    }
    Ok(hosts)
}

/// The wheel's NCCL and `n` hosts on one switch ([`make_ring`]); `None`,
/// said, where either cannot be had.
fn ring_or_skip(n: usize) -> Option<(std::path::PathBuf, Hosts)> {
    let lib = wheel_lib()?;
    if !namespaces_can_be_made() {
        return None;
    }
    match make_ring(n) {
        Ok(h) => Some((lib, h)),
        Err(e) => {
            skip_netns(&format!("cannot make the test's namespaces ({e})"));
            None
        }
    }
}

/// Shapes `ns`'s sending to 20 Mbit/s (`tc tbf` on its `eth0`); `false`,
/// said, where this kernel has no `tbf`.
fn shape_20mbit(ns: &str) -> bool {
    let args = [
        "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "20mbit", "burst", "32kbit",
        "latency", "400ms",
    ];
    match tc_in(ns, &args) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("skipped: tc cannot shape a link here ({e})");
            false
        }
    }
}

/// `n` hosts ([`ring_or_skip`]) with host `h`'s sending shaped to 20 Mbit/s
/// ([`shape_20mbit`]); `None`, said, where either cannot be had.
fn shaped_ring(n: usize, h: usize) -> Option<(std::path::PathBuf, Hosts)> {
    let (lib, hosts) = ring_or_skip(n)?;
    shape_20mbit(&hosts.ns[h + 1]).then_some((lib, hosts))
}

/// `tc ARGS…` in `ns`.
fn tc_in(ns: &str, args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "tc"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("tc: {e}"))?;
    match o.status.success() {
        true => Ok(()),
        false => Err(format!(
            "tc {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        )),
    }
}

/// Every host of `hosts` (but the switch) runs one rank of
/// `smoke --rendezvous-only`, meeting at host 0; each rank's outcome.
fn ring_job(hosts: &Hosts, lib: &std::path::Path, extra: &[&str]) -> Vec<(i32, String, String)> {
    ring_job_with(hosts, lib, extra, &[])
}

/// [`ring_job`], with variables for some hosts: (host, name, value).
fn ring_job_with(
    hosts: &Hosts,
    lib: &std::path::Path,
    extra: &[&str],
    vars: &[(usize, &str, &str)],
) -> Vec<(i32, String, String)> {
    let tmp = TmpDir::new("netns-ring");
    let n = hosts.ns.len() - 1;
    let kids: Vec<_> = (0..n)
        .map(|h| {
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &hosts.ns[h + 1],
                    "unshare",
                    "--uts",
                    "sh",
                    "-c",
                ])
                .arg("hostname \"$0\" && exec \"$@\"")
                .arg(format!("nr{h}"))
                .arg(env!("CARGO_BIN_EXE_nccl-find"))
                .args(["smoke", "--lib", lib.to_str().unwrap(), "--rendezvous-only"])
                .args(["--rank", &h.to_string(), "--world-size", &n.to_string()])
                .args(["--init", "tcp://10.233.0.1:29511", "--timeout", "60"])
                .args(["--token", "netns-ring"])
                .args(extra)
                .env_remove("NCCL_HOME")
                .env("NCCL_SOCKET_IFNAME", "eth0")
                .env("TMPDIR", tmp.path())
                .envs(vars.iter().filter(|v| v.0 == h).map(|v| (v.1, v.2)))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs = outcomes(kids);
    tmp.assert_empty(&format!("{outs:#?}"));
    outs
}

/// Each rank's last line, without its prefix and the time at its end.
fn last_lines(outs: &[(i32, String, String)]) -> Vec<String> {
    outs.iter()
        .map(|o| {
            let l = o.1.lines().last().unwrap_or("");
            let l = l.split_once("] ").map_or(l, |x| x.1);
            l.rsplit_once(" (").map_or(l, |x| x.0).to_string()
        })
        .collect()
}

/// The figures of a line (`19.1 Mbit/s`) as `R`: they vary from run to run.
fn no_figures(line: &str) -> String {
    let words: Vec<&str> = line.split(' ').collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let unit = words.get(i + 1).is_some_and(|u| u.contains("bit/s"));
        out.push(if unit && w.parse::<f64>().is_ok() {
            "R"
        } else {
            w
        });
    }
    out.join(" ")
}

/// Five hosts on one switch, as a real job's nodes would be: one node's
/// sending shaped to 20 Mbit/s (`tc`), then one link alone (from one node
/// to the next, the others untouched). Two rounds of pairs tell the bad
/// node from the bad link; every rank ends with the same verdict; rank 0
/// says which nodes to leave out. Healthy, the check ends OK.
#[test]
fn pairs_of_nodes_name_a_slow_node_and_tell_it_from_a_slow_link() {
    // Node 2 sends slowly, to every node.
    let Some((lib, hosts)) = shaped_ring(5, 2) else {
        return;
    };
    let outs = ring_job(&hosts, &lib, &["--json"]);
    let reports: Vec<serde_json::Value> = outs
        .iter()
        .map(|o| serde_json::from_str(&o.1).unwrap_or_else(|e| panic!("{e}: {outs:#?}")))
        .collect();
    for (r, j) in reports.iter().enumerate() {
        assert_eq!(outs[r].0, 1, "{outs:#?}");
        // The time at its end, and the node of round two (any that did
        // well), vary.
        let v = no_figures(j["verdict"].as_str().unwrap());
        let v = v.rsplit_once(" (").map_or(v.as_str(), |x| x.0);
        let (head, tail) = v.split_once(" to nr3 and R Mbit/s to nr").expect(v);
        assert_eq!(
            head, "FAILED: nr2 (eth0 10.233.0.3) sends slowly: R Mbit/s",
            "rank {r}"
        );
        assert!(
            ["0", "1", "4"].iter().any(|k| tail
                == format!("{k}, against the median link's R Gbit/s: leave nr2 out of the job")),
            "rank {r}: {v}"
        );
    }
    let leave = &reports[0]["leave_out"];
    assert_eq!(leave["bad"], serde_json::json!(["nr2"]), "{leave}");
    assert_eq!(
        leave["good"],
        serde_json::json!(["nr0", "nr1", "nr3", "nr4"])
    );
    let pairs = reports[0]["nodes"]["pairs"].as_array().unwrap();
    // Node 2's slow sending also slows what it receives (its
    // acknowledgements wait behind its data): one suspect link or two,
    // each timed again with three transfers.
    let rounds: Vec<u64> = pairs.iter().map(|p| p["round"].as_u64().unwrap()).collect();
    assert_eq!(rounds[..5], [1, 1, 1, 1, 1], "{pairs:#?}");
    assert!([3, 6].contains(&rounds[5..].len()), "{pairs:#?}");
    assert!(rounds[5..].iter().all(|r| *r == 2), "{pairs:#?}");

    // The text report: rank 0 names the node and the line that leaves it
    // out; every rank's last line is the verdict.
    let outs = ring_job(&hosts, &lib, &["--best", "3"]);
    let lines = last_lines(&outs);
    assert!(
        lines.iter().all(|l| no_figures(l) == no_figures(&lines[0])),
        "{outs:#?}"
    );
    let rank0: Vec<&str> = outs[0].1.lines().collect();
    let n = rank0.len();
    assert_eq!(
        rank0[n - 4],
        "[rank 0] leave out nr2 (4 good node(s) left: nr0,nr1,nr3,nr4)",
        "{}",
        outs[0].1
    );
    assert!(
        rank0[n - 3].starts_with("[rank 0] best 3 node(s): "),
        "{}",
        outs[0].1
    );
    assert!(!rank0[n - 3].contains("nr2"), "{}", outs[0].1);

    // Only the link from node 1 to node 2 is slow: nodes 1 and 2 do well
    // with others, and the link is slow again.
    tc_in(&hosts.ns[3], &["qdisc", "del", "dev", "eth0", "root"]).unwrap();
    let ns1 = &hosts.ns[2];
    tc_in(
        ns1,
        &[
            "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "10",
        ],
    )
    .unwrap();
    for (class, rate) in [("1:10", "10gbit"), ("1:30", "20mbit")] {
        let c = [
            "class", "add", "dev", "eth0", "parent", "1:", "classid", class, "htb", "rate", rate,
        ];
        tc_in(ns1, &c).unwrap();
    }
    let filter = [
        "filter",
        "add",
        "dev",
        "eth0",
        "parent",
        "1:",
        "protocol",
        "ip",
        "u32",
        "match",
        "ip",
        "dst",
        "10.233.0.3/32",
        "flowid",
        "1:30",
    ];
    tc_in(ns1, &filter).unwrap();
    let outs = ring_job(&hosts, &lib, &[]);
    for (r, l) in last_lines(&outs).iter().enumerate() {
        assert_eq!(outs[r].0, 1, "{outs:#?}");
        assert_eq!(
            no_figures(l),
            "FAILED: the link nr1 (eth0 10.233.0.2) -> nr2 (eth0 10.233.0.3) is slow: R Mbit/s, while each \
             end did well with other nodes, against the median link's R Gbit/s: check that link (its cables, \
             switch ports and routes): fix that link, or leave one of its ends out",
            "rank {r}: {outs:#?}"
        );
    }
    assert!(!outs[0].1.contains("leave out"), "{}", outs[0].1);

    // Healthy: OK, the pairs in one round.
    tc_in(ns1, &["qdisc", "del", "dev", "eth0", "root"]).unwrap();
    let outs = ring_job(&hosts, &lib, &[]);
    assert!(outs.iter().all(|o| o.0 == 0), "{outs:#?}");
    assert!(
        outs[0]
            .1
            .contains("[rank 0]   pairs: 5 link(s) timed in one round, "),
        "{}",
        outs[0].1
    );
    drop(hosts);
}

/// Four hosts, node 2's sending shaped: the link into it is slow too
/// (its acknowledgements wait behind its data), so round one leaves no
/// link clean at both ends, but node 0 is clean: round two pairs node 2
/// with it and names node 2, not two links that "cannot be told".
#[test]
fn four_nodes_with_no_clean_link_left_still_name_the_node() {
    let Some((lib, hosts)) = shaped_ring(4, 2) else {
        return;
    };
    let outs = ring_job(&hosts, &lib, &[]);
    for (r, l) in last_lines(&outs).iter().enumerate() {
        assert_eq!(outs[r].0, 1, "{outs:#?}");
        let v = no_figures(l);
        assert!(
            v.starts_with(
                "FAILED: nr2 (eth0 10.233.0.3) sends slowly: R Mbit/s to nr3 and R Mbit/s to nr0, \
                 against the median link's "
            ) && v.ends_with(": leave nr2 out of the job"),
            "rank {r}: {outs:#?}"
        );
    }
    drop(hosts);
}

/// A Kubeflow MPIJob (mpi-operator v2beta1): a launcher pod and two
/// worker pods, the hostfile it mounts (`<job>-worker-<i>.<job>.<ns>.svc`
/// with its slots), the variables it gives the launcher, and the real
/// `mpirun` (Debian's Open MPI) or `mpiexec` (MPICH's Hydra) starting its
/// daemon in each worker over "ssh" (an agent that runs the command in the
/// worker's namespace, as sshd would). The ranks meet through the daemon's
/// PMIx or PMI-1 server, with no flags, and name their pods.
#[test]
fn mpijobs_meet_through_their_hostfile_and_mpirun() {
    let found = |var: &str| {
        let p = std::env::var_os(var)
            .map(std::path::PathBuf::from)
            .filter(|p| p.is_file());
        if p.is_none() {
            skip_launcher(&format!(
                "{var} is unset (eval \"$(scripts/launchers)\" sets it)"
            ));
        }
        p
    };
    let (Some(ompi), Some(mpich)) = (
        found("NCCL_FIND_OMPI4_MPIRUN"),
        found("NCCL_FIND_MPICH_MPIEXEC"),
    ) else {
        return;
    };
    let Some((lib, hosts)) = ring_or_skip(3) else {
        return;
    };
    let ompi_env = [
        ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
        ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
        ("OMPI_MCA_orte_set_default_slots", "1"),
    ];
    let hydra_env = [("HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10")];
    let kinds: [MpiJob; 2] = [
        MpiJob {
            mpirun: &ompi,
            hostfile_var: "OMPI_MCA_orte_default_hostfile",
            slots: " slots=1",
            agent_var: "OMPI_MCA_plm_rsh_agent",
            env: &ompi_env,
            rank_var: "OMPI_COMM_WORLD_RANK",
            exchange: "pmix via mpirun (Open MPI)",
        },
        MpiJob {
            mpirun: &mpich,
            hostfile_var: "HYDRA_HOST_FILE",
            slots: ":1",
            agent_var: "HYDRA_LAUNCHER_EXEC",
            env: &hydra_env,
            rank_var: "PMI_RANK",
            exchange: "pmi1 via mpiexec (Hydra)",
        },
    ];
    for k in kinds {
        let (code, ranks) = mpijob(&hosts, &lib, &k);
        let all = format!("{}: {ranks:#?}", k.exchange);
        assert_eq!(code, Some(0), "{all}");
        for (r, (status, o)) in ranks.iter().enumerate() {
            assert_eq!(status.trim(), "0", "{all}");
            let ex = format!("[rank {r}] note: exchange: {}", k.exchange);
            assert!(o.contains(&ex), "{all}");
            let last = o.lines().last().unwrap_or("");
            let ok = format!("[rank {r}] OK: 2 rank(s) met, no all-reduce run");
            assert!(last.starts_with(&ok), "{all}");
        }
        let named = "[rank 0] nodes: 2 (pi-worker-0, pi-worker-1), 2 rank(s)";
        assert!(ranks[0].1.contains(named), "{all}");
    }
    drop(hosts);
}

/// How an MPIJob of one MPI starts its workers.
struct MpiJob<'a> {
    mpirun: &'a std::path::Path,
    /// The variable that names the hostfile, and the slots in its lines.
    hostfile_var: &'a str,
    slots: &'a str,
    /// The variable that names "ssh" (here the agent that stands for it).
    agent_var: &'a str,
    /// The other variables mpi-operator sets.
    env: &'a [(&'a str, &'a str)],
    /// Each rank's variable for its rank.
    rank_var: &'a str,
    exchange: &'a str,
}

/// Runs `smoke --rendezvous-only` as MPIJob `k` on hosts 1 and 2 (pods
/// pi-worker-0 and -1), its launcher on host 0: the launcher's exit
/// status, and each rank's exit status and output.
fn mpijob(
    hosts: &Hosts,
    lib: &std::path::Path,
    k: &MpiJob,
) -> (Option<i32>, Vec<(String, String)>) {
    let d = TmpDir::new("netns-mpijob");
    let at = |f: &str| d.path().join(f);
    let pods = ["pi-launcher", "pi-worker-0", "pi-worker-1"];
    let mut etc = String::from("127.0.0.1 localhost\n");
    let mut file = String::new();
    let mut cases = String::new();
    for (i, pod) in pods.iter().enumerate() {
        let fqdn = format!("{pod}.pi.default.svc");
        etc.push_str(&format!(
            "10.233.0.{} {fqdn}.cluster.local {fqdn} {pod}\n",
            i + 1
        ));
        if i > 0 {
            file.push_str(&format!("{fqdn}{}\n", k.slots));
            cases.push_str(&format!("  {pod}*) ns={} name={pod} ;;\n", hosts.ns[i + 1]));
        }
    }
    std::fs::write(at("hosts"), etc).unwrap();
    std::fs::write(at("hostfile"), file).unwrap();
    let hosts_file = at("hosts").display().to_string();
    let agent = format!(
        "#!/bin/sh\n# Stands for ssh: [-o OPTION | -x]... HOST COMMAND, in HOST's namespace.\n\
         while :; do case $1 in -o) shift 2 ;; -x) shift ;; *) break ;; esac; done\n\
         host=$1; shift\ncase $host in\n{cases}  *) exit 255 ;;\nesac\n\
         exec ip netns exec \"$ns\" unshare --uts --mount sh -c \
         'mount --bind \"$2\" /etc/hosts && hostname \"$0\" && exec sh -c \"$1\"' \"$name\" \"$*\" '{hosts_file}'\n"
    );
    std::fs::write(at("agent"), agent).unwrap();
    let mut perm = std::fs::metadata(at("agent")).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(at("agent"), perm).unwrap();
    let out = at("ranks");
    std::fs::create_dir(&out).unwrap();
    let rank = k.rank_var;
    let wrap = format!(
        "\"$0\" \"$@\" >\"$NCCL_FIND_TEST_OUT/out.${rank}\" 2>&1; s=$?; \
         echo $s >\"$NCCL_FIND_TEST_OUT/status.${rank}\"; exit $s"
    );
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        &hosts.ns[1],
        "unshare",
        "--uts",
        "--mount",
        "sh",
        "-c",
    ])
    .arg("mount --bind \"$1\" /etc/hosts && hostname \"$0\" && shift && exec \"$@\"")
    .args([pods[0], &hosts_file])
    .arg(k.mpirun)
    .args(
        ["--allow-run-as-root"]
            .iter()
            .filter(|_| k.rank_var.starts_with("OMPI")),
    )
    .args(["-n", "2", "sh", "-c", &wrap])
    .arg(env!("CARGO_BIN_EXE_nccl-find"))
    .args(["smoke", "--rendezvous-only", "--timeout", "60", "--lib"])
    .arg(lib);
    let job = without_launchers(&mut c)
        .env_remove("NCCL_SOCKET_IFNAME")
        .env_remove("NCCL_HOME")
        .env(k.hostfile_var, at("hostfile"))
        .env(k.agent_var, at("agent"))
        .envs(k.env.iter().copied())
        .env("NCCL_FIND_TEST_OUT", &out)
        .env("TMPDIR", d.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = |f: String| std::fs::read_to_string(out.join(f)).unwrap_or_default();
    let mut ranks: Vec<(String, String)> = (0..2)
        .map(|r| (said(format!("status.{r}")), said(format!("out.{r}"))))
        .collect();
    ranks[0]
        .1
        .insert_str(0, &String::from_utf8_lossy(&job.stderr));
    (job.status.code(), ranks)
}

/// One pod of a Kubernetes job: host `h` of `hosts` with the pod's name,
/// its own `/etc/hosts` (the kubelet's line for the pod first; the others'
/// lines stand in for the cluster's DNS) and the variables Kubernetes sets,
/// running `smoke --rendezvous-only` with no flag that says how to meet.
fn pod_on(
    hosts: &Hosts,
    h: usize,
    name: &str,
    etc_hosts: &std::path::Path,
    vars: &[(&str, String)],
    lib: &std::path::Path,
    tmp: &TmpDir,
) -> std::process::Child {
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        &hosts.ns[h + 1],
        "unshare",
        "--uts",
        "--mount",
        "sh",
        "-c",
    ])
    .arg("mount --bind \"$1\" /etc/hosts && hostname \"$0\" && shift && exec \"$@\"")
    .args([
        name,
        etc_hosts.to_str().unwrap(),
        env!("CARGO_BIN_EXE_nccl-find"),
    ])
    .args(["smoke", "--rendezvous-only", "--timeout", "60"])
    .args(["--lib", lib.to_str().unwrap()]);
    without_launchers(&mut c)
        .env_remove("NCCL_HOME")
        .env("NCCL_SOCKET_IFNAME", "eth0")
        .env("KUBERNETES_SERVICE_HOST", "10.96.0.1")
        .env("HOSTNAME", name)
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().unwrap()
}

/// A job on Kubernetes meets from its own environment, with no flags: an
/// Indexed Job (rank 0 found by this pod's DNS name in /etc/hosts), a
/// JobSet, a LeaderWorkerSet group, and Kubeflow's PyTorchJob (which sets
/// torch's variables), three pods each in namespaces of their own.
#[test]
fn kubernetes_jobs_meet_with_no_flags() {
    let Some((lib, hosts)) = ring_or_skip(3) else {
        return;
    };
    let etc = TmpDir::new("netns-k8s-hosts");
    let domain = "train.ml.svc.cluster.local";
    type Pod = (String, Vec<(&'static str, String)>);
    let kinds: Vec<(&str, &str, Vec<Pod>)> = vec![
        (
            "Indexed Job",
            "kubernetes",
            (0..3)
                .map(|i| {
                    (
                        format!("train-{i}"),
                        vec![
                            ("JOB_COMPLETION_INDEX", i.to_string()),
                            ("WORLD_SIZE", "3".into()),
                        ],
                    )
                })
                .collect(),
        ),
        (
            "JobSet",
            "kubernetes",
            (0..3)
                .map(|i| {
                    (
                        format!("pt-workers-0-{i}"),
                        vec![
                            ("JOB_COMPLETION_INDEX", i.to_string()),
                            ("JOB_INDEX", "0".into()),
                            ("JOB_GLOBAL_INDEX", "0".into()),
                            ("GLOBAL_REPLICAS", "1".into()),
                            ("REPLICATED_JOB_NAME", "workers".into()),
                            ("REPLICATED_JOB_REPLICAS", "1".into()),
                            ("JOBSET_NAME", "pt".into()),
                            ("WORLD_SIZE", "3".into()),
                        ],
                    )
                })
                .collect(),
        ),
        (
            "LeaderWorkerSet",
            "kubernetes",
            (0..3)
                .map(|i| {
                    let name = if i == 0 {
                        "llm-0".to_string()
                    } else {
                        format!("llm-0-{i}")
                    };
                    (
                        name,
                        vec![
                            ("LWS_WORKER_INDEX", i.to_string()),
                            ("LWS_GROUP_SIZE", "3".into()),
                            ("LWS_LEADER_ADDRESS", format!("llm-0.{domain}")),
                            ("LWS_GROUP_INDEX", "0".into()),
                        ],
                    )
                })
                .collect(),
        ),
        (
            "PyTorchJob",
            "torchrun-tcp",
            (0..3)
                .map(|i| {
                    let name = match i {
                        0 => "pt-master-0".to_string(),
                        _ => format!("pt-worker-{}", i - 1),
                    };
                    (
                        name,
                        vec![
                            ("RANK", i.to_string()),
                            ("WORLD_SIZE", "3".into()),
                            ("MASTER_ADDR", "pt-master-0".into()),
                            ("MASTER_PORT", "23456".into()),
                            ("PET_NNODES", "3".into()),
                            ("PET_NPROC_PER_NODE", "1".into()),
                        ],
                    )
                })
                .collect(),
        ),
    ];
    for (kind, row, pods) in &kinds {
        let tmp = TmpDir::new("netns-k8s");
        let kids: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(h, (name, vars))| {
                // The pod's own line, as the kubelet writes it, then the
                // others' (the cluster's DNS).
                let ip = |k: usize| format!("10.233.0.{}", k + 1);
                let mut text =
                    format!("127.0.0.1\tlocalhost\n{}\t{name}.{domain}\t{name}\n", ip(h));
                for (k, (other, _)) in pods.iter().enumerate().filter(|(k, _)| *k != h) {
                    text.push_str(&format!("{}\t{other}.{domain}\t{other}\n", ip(k)));
                }
                let f = etc.path().join(format!("hosts-{h}"));
                std::fs::write(&f, text).unwrap();
                pod_on(&hosts, h, name, &f, vars, &lib, &tmp)
            })
            .collect();
        let outs = outcomes(kids);
        tmp.assert_empty(&format!("{outs:#?}"));
        for (r, o) in outs.iter().enumerate() {
            assert_eq!(o.0, 0, "{kind}, rank {r}: {outs:#?}");
            assert!(
                o.1.lines().next().is_some_and(
                    |l| l.starts_with(&format!("[rank {r}] note: exchange: {row} via "))
                ),
                "{kind}, rank {r}: {}",
                o.1
            );
        }
        assert!(
            outs[0].1.contains("[rank 0] nodes: 3 ("),
            "{kind}: {}",
            outs[0].1
        );
    }
    drop(hosts);
}

/// A network plugin (`libnccl-net.so`, a real shared library) on one
/// node's loader path only: a known silent hang (NVIDIA/nccl#1634). Every
/// rank stops before NCCL, naming the node and its plugin.
#[test]
fn a_plugin_on_one_node_only_stops_every_rank_before_nccl() {
    let Some((lib, hosts)) = ring_or_skip(3) else {
        return;
    };
    let dir = TmpDir::new("netns-plugin");
    // A network plugin as NCCL finds one: a library exporting
    // ncclNetPlugin_v8, whose constructor marks a file if anything loads it
    // (the check reads the library, never runs it).
    let marker = dir.path().join("loaded");
    let src = dir.path().join("plugin.c");
    std::fs::write(
        &src,
        format!(
            "#include <stdio.h>\nconst char ncclNetPlugin_v8[256] = \"nccl-find test\";\n\
             __attribute__((constructor)) static void mark(void) {{\n\
             FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"ran\", f); fclose(f); }}\n}}\n",
            marker.display()
        ),
    )
    .unwrap();
    let ok = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.path().join("libnccl-net.so"))
        .arg(&src)
        .status()
        .expect("cc is needed");
    assert!(ok.success());
    let path = dir.path().to_str().unwrap().to_string();
    let outs = ring_job_with(&hosts, &lib, &[], &[(1, "LD_LIBRARY_PATH", &path)]);
    let want = "FAILED: NCCL plugins differ: nr1: NCCL plugins net libnccl-net.so (interface v8) (the 2 other nodes: \
         none), and NCCL hangs or fails where some ranks load a plugin the others do not (NVIDIA/nccl#1634): put \
         the same plugins on every node's loader path, or take the odd one off it";
    for (r, l) in last_lines(&outs).iter().enumerate() {
        assert_eq!(outs[r].0, 1, "{outs:#?}");
        assert_eq!(*l, want, "rank {r}: {outs:#?}");
    }
    assert!(!marker.exists(), "the plugin's code ran");
    // Rank 0 never made NCCL's unique id: NCCL never started.
    assert!(!outs[0].1.contains("note: rendezvous:"), "{}", outs[0].1);
    drop(hosts);
}

/// Two nodes, one's sending shaped to 20 Mbit/s: two links make no
/// majority, so the floor judges them, and every rank stops before NCCL
/// naming the slower link with the other way's figure.
#[test]
fn two_nodes_with_a_slow_link_stop_before_nccl() {
    let Some((lib, hosts)) = shaped_ring(2, 1) else {
        return;
    };
    let outs = ring_job(&hosts, &lib, &[]);
    for (r, l) in last_lines(&outs).iter().enumerate() {
        assert_eq!(outs[r].0, 1, "{outs:#?}");
        let rest = l
            .strip_prefix("FAILED: nr1 (eth0 10.233.0.2) -> nr0 (eth0 10.233.0.1) is slow: ")
            .unwrap_or_else(|| panic!("rank {r}: {outs:#?}"));
        assert!(
            rest.ends_with(
                ", below the 1.0 Gbit/s a job of two nodes needs at the least; with no third node to pair \
                 them with, which end is at fault cannot be told: fix that link, or leave one of its ends out"
            ),
            "rank {r}: {l}"
        );
    }
    drop(hosts);
}
