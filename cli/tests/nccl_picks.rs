//! The interface nccl-find says NCCL will use is the one NCCL itself takes:
//! each case is a network namespace of its own, and in it the real
//! `libnccl.so.2` of several releases makes a unique id with
//! `NCCL_DEBUG=INFO` (its `Bootstrap: Using <interface>:` line, or its
//! failure), while `nccl-find doctor` judges the same namespace, settings
//! and release, and the smoke test's card (one rank meeting itself) says
//! which interface NCCL takes there. The cases: an interface with no address, one that is up
//! without a carrier, one that is down, one with only an IPv6 link-local
//! address, loopback alone, Docker's and libvirt's bridges, `ib*`, a value
//! of one character, a value from `/etc/nccl.conf`, `lo`, and a value that
//! names nothing. Needs root, `ip` and `unshare`, python3 (for ctypes) and
//! the wheels scripts/test caches.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::{ip, namespaces_can_be_made, skip_netns};

/// How an interface of a case is made.
#[derive(Clone, Copy)]
enum State {
    /// Up, with its peer up: running.
    Running,
    /// Up, its peer down: no carrier, not running.
    NoCarrier,
    /// Down.
    Down,
}

/// One interface: its name, its IPv4 address (with prefix), whether it
/// gets an IPv6 link-local address, and its state.
struct If(&'static str, Option<&'static str>, bool, State);

/// One case: its name, its interfaces (after `lo`, which every case has
/// up with 127.0.0.1), the settings in the environment, the line of
/// `/etc/nccl.conf`, and what NCCL takes by release: `(before 2.28.3,
/// 2.28.3 and newer)`, `none` where it finds nothing.
struct Case {
    name: &'static str,
    ifaces: &'static [If],
    env: &'static [(&'static str, &'static str)],
    conf: Option<&'static str>,
    want: (&'static str, &'static str),
}

const CASES: &[Case] = &[
    Case {
        name: "addressless",
        ifaces: &[
            If("ad0", None, false, State::Running),
            If("eth0", Some("10.77.0.2/24"), false, State::Running),
        ],
        env: &[],
        conf: None,
        want: ("eth0", "eth0"),
    },
    Case {
        name: "no-carrier",
        ifaces: &[
            If("eth0", Some("10.77.0.2/24"), false, State::NoCarrier),
            If("eth1", Some("10.77.1.2/24"), false, State::Running),
        ],
        env: &[],
        conf: None,
        want: ("eth0", "eth1"),
    },
    Case {
        name: "down",
        ifaces: &[
            If("eth0", Some("10.77.0.2/24"), false, State::Down),
            If("eth1", Some("10.77.1.2/24"), false, State::Running),
        ],
        env: &[],
        conf: None,
        want: ("eth0", "eth1"),
    },
    Case {
        name: "link-local",
        ifaces: &[If("eth0", None, true, State::Running)],
        env: &[],
        conf: None,
        want: ("eth0", "eth0"),
    },
    Case {
        name: "lo-alone",
        ifaces: &[If("eth0", Some("10.77.0.2/24"), false, State::Down)],
        env: &[],
        conf: None,
        want: ("eth0", "lo"),
    },
    Case {
        name: "docker",
        ifaces: &[If("docker0", Some("172.31.0.1/16"), false, State::Running)],
        env: &[],
        conf: None,
        want: ("docker0", "docker0"),
    },
    Case {
        name: "virbr",
        ifaces: &[
            If("virbr0", Some("192.168.122.1/24"), false, State::Running),
            If("eth0", Some("10.77.0.2/24"), false, State::Running),
        ],
        env: &[],
        conf: None,
        want: ("virbr0", "eth0"),
    },
    Case {
        name: "one-character",
        ifaces: &[
            If("eth0", Some("10.77.0.2/24"), false, State::Running),
            If("ib0", Some("10.78.0.2/24"), false, State::Running),
        ],
        env: &[("NCCL_SOCKET_IFNAME", "e")],
        conf: None,
        want: ("ib0", "ib0"),
    },
    Case {
        name: "conf-file",
        ifaces: &[
            If("eth0", Some("10.77.0.2/24"), false, State::Running),
            If("eth1", Some("10.77.1.2/24"), false, State::Running),
        ],
        env: &[],
        conf: Some("NCCL_SOCKET_IFNAME=eth1"),
        want: ("eth1", "eth1"),
    },
    Case {
        name: "lo",
        ifaces: &[If("eth0", Some("10.77.0.2/24"), false, State::Running)],
        env: &[("NCCL_SOCKET_IFNAME", "lo")],
        conf: None,
        want: ("lo", "lo"),
    },
    Case {
        name: "nothing",
        ifaces: &[If("eth0", Some("10.77.0.2/24"), false, State::Running)],
        env: &[("NCCL_SOCKET_IFNAME", "=eth")],
        conf: None,
        want: ("none", "none"),
    },
];

/// A case's namespace, removed when dropped (with every link in it).
struct Ns(String);

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.0]);
    }
}

/// Makes the namespace of `case`.
fn make(case: &Case) -> Result<Ns, String> {
    let ns = Ns(format!("nf-pick-{}-{}", case.name, std::process::id()));
    ip(&["netns", "add", &ns.0])?;
    let n = |args: &[&str]| {
        let mut all = vec!["-n", ns.0.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    };
    n(&["link", "set", "lo", "up"])?;
    for (k, If(name, v4, v6, state)) in case.ifaces.iter().enumerate() {
        let peer = format!("p{k}");
        n(&["link", "add", name, "type", "veth", "peer", "name", &peer])?;
        // No address but those given: a link-local one made at once (no
        // duplicate detection, during which it could not be bound).
        n(&["link", "set", &peer, "addrgenmode", "none"])?;
        n(&["link", "set", name, "addrgenmode", "none"])?;
        if *v6 {
            let ll = format!("fe80::77:{}/64", k + 2);
            n(&["addr", "add", &ll, "dev", name, "nodad"])?;
        }
        if let Some(a) = v4 {
            n(&["addr", "add", a, "dev", name])?;
        }
        if !matches!(state, State::Down) {
            n(&["link", "set", name, "up"])?;
        }
        if matches!(state, State::Running) {
            n(&["link", "set", &peer, "up"])?;
        }
    }
    // The kernel marks a link running (carrier on, operstate up) a moment
    // after both ends are up: NCCL from 2.28.3 skips one not yet running,
    // so every case waits until its running links are.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for If(name, _, _, state) in case.ifaces {
        if !matches!(state, State::Running) {
            continue;
        }
        loop {
            let o = Command::new("ip")
                .args(["-n", &ns.0, "-o", "link", "show", name])
                .output()
                .map_err(|e| e.to_string())?;
            let line = String::from_utf8_lossy(&o.stdout).into_owned();
            if line.contains("LOWER_UP") && line.contains("state UP") {
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(format!("{name} did not come up in 30 s: {line}"));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    Ok(ns)
}

/// `cmd` in namespace `ns`, with `/etc/nccl.conf` holding `conf` (an
/// overlay on `/etc` in a mount namespace of its own: the host's `/etc`
/// is never written), the probe's and NCCL's variables cleared and `env`
/// set.
fn in_ns(ns: &str, upper: &Path, env: &[(&str, &str)], cmd: &[&str]) -> (String, String, i32) {
    let work = upper.with_extension("work");
    std::fs::create_dir_all(&work).unwrap();
    let script = format!(
        "mount --make-rprivate / && mount -t overlay overlay -o lowerdir=/etc,upperdir={},workdir={} /etc && exec \"$@\"",
        upper.display(),
        work.display()
    );
    let mut c = Command::new("ip");
    c.args([
        "netns", "exec", ns, "unshare", "-m", "sh", "-c", &script, "sh",
    ])
    .args(cmd)
    .stdin(Stdio::null());
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("NCCL_") || k == "VIRTUAL_ENV" || k == "CONDA_PREFIX" {
            c.env_remove(&k);
        }
    }
    c.envs(env.iter().copied());
    let o = c.output().unwrap();
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.status.code().unwrap_or(-1),
    )
}

/// The interface NCCL's bootstrap takes: its `Bootstrap: Using <if>:`
/// line (`Bootstrap : Using` before 2.28), or `none` where
/// `ncclGetUniqueId` fails.
fn nccls_pick(out: &str) -> String {
    if out.contains("rc 0") {
        for l in out.lines() {
            if let Some(at) = l.find("Using ").filter(|_| l.contains("Bootstrap")) {
                let rest = &l[at + "Using ".len()..];
                return rest.split(':').next().unwrap_or("").to_string();
            }
        }
        return format!("(no Bootstrap line in {out:?})");
    }
    "none".into()
}

/// The last `n` lines of `text`.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The interface doctor says NCCL would use, or `none`.
fn doctors_pick(json: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    for f in v["findings"].as_array().unwrap() {
        let text = f["text"].as_str().unwrap_or("");
        if let Some(rest) = text.strip_prefix("NCCL would use ") {
            return rest.split(' ').next().unwrap_or("").to_string();
        }
        if text.starts_with("NCCL would find no interface") {
            return "none".into();
        }
    }
    format!("(no pick in {json})")
}

/// The interface the smoke test's card (one rank meeting itself over
/// loopback) says NCCL takes, or `none` where it says NCCL finds none.
fn cards_pick(json: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let facts = &v["nodes"]["ranks"][0]["facts"];
    if facts["no_iface"].is_string() {
        return "none".into();
    }
    match facts["ifaces"].as_str() {
        Some(list) => list.split(',').next().unwrap_or("").to_string(),
        None => format!("(no card in {json})"),
    }
}

/// The NCCL wheels to judge: before and after 2.28.3's change, and the
/// newest.
fn releases(w: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for dir in [
        w.join("nvidia_nccl_cu12-2.21.5"),
        w.join("nvidia_nccl_cu13-2.28.9"),
        common::newest_wheel(w, "nvidia_nccl_cu12"),
    ] {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let version = name.rsplit('-').next().unwrap().to_string();
        out.push((version, dir.join("nvidia/nccl")));
    }
    out
}

/// Calls `ncclGetUniqueId` and writes its result to stderr in one write:
/// NCCL's own threads print to stdout meanwhile, and a `print` there was
/// cut in two by one of their lines (`rc` … ` 0`) in a loaded CI run.
const UNIQUE_ID: &str = "import ctypes, os, sys\n\
    l = ctypes.CDLL(sys.argv[1])\n\
    b = ctypes.create_string_buffer(128)\n\
    os.write(2, b'rc %d\\n' % l.ncclGetUniqueId(b))\n";

#[test]
fn the_interface_doctor_names_is_the_one_nccl_takes() {
    let Some(w) = common::wheels() else { return };
    if !namespaces_can_be_made() {
        return;
    }
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("picks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let nccl_find = env!("CARGO_BIN_EXE_nccl-find");
    let mut rows = Vec::new();
    let mut said = Vec::new();
    for case in CASES {
        let ns = match make(case) {
            Ok(ns) => ns,
            Err(e) => {
                return skip_netns(&format!("cannot make the namespace of {}: {e}", case.name))
            }
        };
        let upper = base.join(case.name);
        std::fs::create_dir_all(&upper).unwrap();
        if let Some(line) = case.conf {
            std::fs::write(upper.join("nccl.conf"), format!("{line}\n")).unwrap();
        }
        for (version, home) in releases(&w) {
            let lib = home.join("lib/libnccl.so.2");
            let mut env = case.env.to_vec();
            env.extend([("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "ALL")]);
            let (out, err, _) = in_ns(
                &ns.0,
                &upper,
                &env,
                &["python3", "-c", UNIQUE_ID, &lib.to_string_lossy()],
            );
            let nccl = nccls_pick(&format!("{out}{err}"));
            if nccl == "none" {
                said.push(format!(
                    "{} {version}: NCCL said:\n{}",
                    case.name,
                    last_lines(&format!("{out}{err}"), 8)
                ));
            }
            let mut env = case.env.to_vec();
            let home = home.to_string_lossy().into_owned();
            env.push(("NCCL_HOME", &home));
            let (json, err, _) = in_ns(
                &ns.0,
                &upper,
                &env,
                &[nccl_find, "doctor", "--json", "--root", "/"],
            );
            let ours = doctors_pick(&format!("{json}{err}"));
            let init = format!("tcp://127.0.0.1:{}", 29600 + rows.len());
            let smoke = [
                nccl_find,
                "smoke",
                "--rendezvous-only",
                "--json",
                "--rank",
                "0",
                "--world-size",
                "1",
            ];
            let lib = lib.to_string_lossy().into_owned();
            let (json, err, _) = in_ns(
                &ns.0,
                &upper,
                case.env,
                &[&smoke[..], &["--init", &init, "--lib", &lib]].concat(),
            );
            let card = cards_pick(&format!("{json}{err}"));
            let new = !matches!(version.as_str(), "2.21.5");
            let want = if new { case.want.1 } else { case.want.0 };
            rows.push(format!(
                "{:<14} {version:<7} nccl {nccl:<8} doctor {ours:<8} card {card:<8} want {want}",
                case.name
            ));
        }
        drop(ns);
    }
    let _ = std::fs::remove_dir_all(&base);
    let table = rows.join("\n");
    eprintln!("{table}");
    for row in &rows {
        let cells: Vec<&str> = row.split_whitespace().collect();
        // name, release, then "nccl", "doctor", "card", "want", each with its pick
        assert!(
            cells.len() == 10 && [5, 7, 9].iter().all(|i| cells[*i] == cells[3]),
            "NCCL and nccl-find disagree, or differ from what the case wants:\n{table}\n{}",
            said.join("\n")
        );
    }
}
