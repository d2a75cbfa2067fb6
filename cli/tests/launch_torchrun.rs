//! `nccl-find smoke --rendezvous-only` under the real torchrun, meeting
//! through the TCPStore its agent serves (the `torchrun-store` exchange):
//! `--standalone` and the static rendezvous with the newest torch, the old
//! protocol with torch 2.1.2's torchrun, bare TCPStore servers started from
//! python (a rank that never comes; a server in the other protocol than the
//! environment suggests), and a half-set environment.
//!
//! scripts/launchers installs torch and says where (`NCCL_FIND_TORCHRUN`,
//! `NCCL_FIND_TORCH_PYTHON`, `NCCL_FIND_TORCHRUN_OLD`,
//! `NCCL_FIND_TORCH_PYTHON_OLD`); under `NCCL_FIND_REQUIRE_LAUNCHERS` a
//! missing one is a failure, otherwise the test says why it skips.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{
    free_port, recorded, sh_record, skip_launcher, text, wheel_lib, without_launchers, TmpDir,
};

const BIN: &str = env!("CARGO_BIN_EXE_nccl-find");

/// How long any one launch may take before the test gives up on it: far
/// more than the few seconds it needs, for a loaded 2-core machine.
const LAUNCH_LIMIT: Duration = Duration::from_secs(300);

/// A program scripts/launchers installed, named by `var`. Set empty, it was
/// left out (torch 2.1.2, for a python it has no wheel for, and no python
/// 3.8 to 3.11 on PATH: scripts/launchers said so on its stderr). Missing
/// or left out, the test skips, or fails where launchers are required.
fn installed(var: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(p) if p.is_empty() => {
            skip_launcher(&format!(
                "{var} is empty: scripts/launchers left torch 2.1.2 out (its wheels are for python 3.8 to \
                 3.11 only, and it found none; its stderr says so)"
            ));
            None
        }
        Some(p) => {
            let p = PathBuf::from(p);
            assert!(p.is_file(), "{var}={} does not exist", p.display());
            Some(p)
        }
        None => {
            skip_launcher(&format!(
                "{var} is unset (eval \"$(scripts/launchers)\" installs torch and sets it)"
            ));
            None
        }
    }
}

/// A scratch directory, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!(
            "nccl-find-torchrun-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        Scratch(d)
    }

    /// The names in it, sorted.
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The variables of torchrun's that each worker's wrapper keeps, in
/// `env/NAME.RANK`, for the test to hold up against what the rank says.
const RECORDED: [&str; 4] = [
    "TORCHELASTIC_USE_AGENT_STORE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LOCAL_RANK",
];

/// Writes `run.sh`: torchrun starts it as each worker; it checks that the
/// worker's TMPDIR is `tmp`, keeps the worker's [`RECORDED`] variables in
/// `env/`, then runs nccl-find with the worker's arguments, its output in
/// `out.RANK` and `err.RANK`, its exit status in `status.RANK`.
fn wrapper(d: &Scratch, tmp: &TmpDir, before: &str) -> PathBuf {
    let w = d.0.join("run.sh");
    let dir = d.0.to_str().unwrap();
    assert!(!dir.contains('\'') && !BIN.contains('\''));
    std::fs::create_dir(d.0.join("env")).unwrap();
    std::fs::write(
        &w,
        format!(
            "#!/bin/sh\n{}\n{}\n{before}\n'{BIN}' \"$@\" >'{dir}'/out.\"$RANK\" 2>'{dir}'/err.\"$RANK\"\n\
             s=$?\necho $s >'{dir}'/status.\"$RANK\"\nexit $s\n",
            tmp.sh_check(),
            sh_record(&d.0.join("env"), "RANK", &RECORDED)
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o755)).unwrap();
    w
}

/// Waits for `child` for at most [`LAUNCH_LIMIT`] (killing it then).
fn wait_bounded(mut child: Child, what: &str) -> Output {
    let t = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if t.elapsed() > LAUNCH_LIMIT {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{what} ran past {LAUNCH_LIMIT:?}: {}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A command with none of the launchers' variables of the test's own
/// environment.
fn bare(program: &Path) -> Command {
    let mut c = Command::new(program);
    without_launchers(&mut c);
    // torch warns on stderr that numpy is missing.
    c.env("PYTHONWARNINGS", "ignore");
    c
}

/// Runs torchrun with `args`, then `--no-python run.sh smoke …`, in `d`,
/// with `tmp` as the job's TMPDIR: torchrun's output. torchrun keeps its
/// workers' logs in `d/torchelastic` (by default it makes a directory in
/// TMPDIR and leaves it there).
fn torchrun(torchrun: &Path, d: &Scratch, tmp: &TmpDir, lib: &Path, args: &[String]) -> Output {
    torchrun_with(torchrun, d, tmp, lib, args, "")
}

/// [`torchrun`], each worker's wrapper running `before` (lines of sh)
/// before nccl-find.
fn torchrun_with(
    torchrun: &Path,
    d: &Scratch,
    tmp: &TmpDir,
    lib: &Path,
    args: &[String],
    before: &str,
) -> Output {
    let w = wrapper(d, tmp, before);
    let child = bare(torchrun)
        .current_dir(&d.0)
        .env("TMPDIR", tmp.path())
        .arg(format!("--log-dir={}", d.0.join("torchelastic").display()))
        .args(args)
        .arg("--no-python")
        .arg(&w)
        .args(["smoke", "--lib", lib.to_str().unwrap()])
        .args(["--rendezvous-only", "--timeout", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_bounded(child, "torchrun")
}

/// Each rank's exit status, stdout and stderr, as run.sh kept them.
fn ranks(d: &Scratch, world: usize) -> Vec<(String, String, String)> {
    let read = |n: String| std::fs::read_to_string(d.0.join(n)).unwrap_or_default();
    (0..world)
        .map(|r| {
            (
                read(format!("status.{r}")),
                read(format!("out.{r}")),
                read(format!("err.{r}")),
            )
        })
        .collect()
}

/// How rank 0 of a run admits the others.
#[derive(Clone, Copy, PartialEq)]
enum Admits {
    /// Through the agent's store: rank 0 says nothing of the others.
    Store,
    /// Rank 0 serves our TCP rendezvous, and says where each other rank
    /// joined from (this host: a loopback address).
    Tcp,
}

/// Checks a successful run of `world` ranks: every rank exits 0, says how
/// it meets (`exchange(rank, line)` checks its line), its local rank
/// (torchrun's `LOCAL_RANK`, as the wrapper saw it), gets the same unique
/// id and its place, and rank 0 hears that every other agrees. Nothing but
/// run.sh's own files and torchrun's logs is left in `d`, and nothing at
/// all in the job's TMPDIR, `tmp`.
fn expect_met(
    d: &Scratch,
    tmp: &TmpDir,
    world: usize,
    o: &Output,
    admits: Admits,
    exchange: &dyn Fn(usize, &str),
) {
    let all = format!(
        "torchrun: {}\n{}\nranks: {:#?}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
        ranks(d, world)
    );
    assert_eq!(o.status.code(), Some(0), "{all}");
    let mut ids = Vec::new();
    for (r, (status, out, err)) in ranks(d, world).into_iter().enumerate() {
        assert_eq!(
            (status.as_str(), err.as_str()),
            ("0\n", ""),
            "rank {r}: {all}"
        );
        // torch 2.1's torchrun sets NCCL_ASYNC_ERROR_HANDLING=1 for its
        // workers, which the report lists among the settings in force.
        let settings = format!("[rank {r}] settings: NCCL_ASYNC_ERROR_HANDLING=1");
        // A loaded machine may make the store slow to answer: that note
        // is true, and tested on its own (a_slow_store_is_named…).
        let slow = format!("[rank {r}] note: the agent's TCPStore at ");
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| *l != settings && !(l.starts_with(&slow) && l.contains(" was slow: ")))
            .collect();
        // Rank 0 of our TCP rendezvous: a line for each rank that joined.
        let joins = if admits == Admits::Tcp && r == 0 {
            world - 1
        } else {
            0
        };
        assert_eq!(lines.len(), 5 + joins, "rank {r}: {all}");
        let p = format!("[rank {r}] ");
        let line = |i: usize| {
            lines[i]
                .strip_prefix(&p)
                .unwrap_or_else(|| panic!("rank {r} line {i}: {all}"))
        };
        exchange(r, line(0));
        assert!(line(1).starts_with("NCCL 2.21.5 from "), "{all}");
        let local = recorded(&d.0.join("env"), "LOCAL_RANK", r);
        assert_eq!(line(2), format!("note: local rank {local}"), "{all}");
        let mut joined: Vec<usize> = (3..3 + joins)
            .map(|i| {
                let (k, from) = line(i)
                    .strip_prefix("note: rank ")
                    .and_then(|l| l.split_once(" joined from "))
                    .unwrap_or_else(|| panic!("rank 0 line {i}: {all}"));
                let port = from
                    .strip_prefix("127.0.0.1:")
                    .or_else(|| from.strip_prefix("[::1]:"))
                    .unwrap_or_else(|| panic!("rank 0 line {i}: {all}"));
                assert!(port.parse::<u16>().is_ok_and(|p| p > 0), "{all}");
                k.parse().unwrap()
            })
            .collect();
        joined.sort();
        assert_eq!(joined, (1..1 + joins).collect::<Vec<_>>(), "{all}");
        let line = |i: usize| line(i + joins);
        let w: Vec<&str> = line(3).split(' ').collect();
        assert_eq!(
            w[..7],
            [
                "note:",
                "rendezvous:",
                "nranks",
                &world.to_string(),
                "first_rank",
                &r.to_string(),
                "id"
            ],
            "{all}"
        );
        assert_eq!(w.len(), 8, "{all}");
        ids.push(w[7].to_string());
        let ok = format!("OK: {world} rank(s) met, no all-reduce run (--rendezvous-only)");
        let ok = if r == 0 {
            format!("{ok}, {} other process(es) agree (", world - 1)
        } else {
            format!("{ok} (")
        };
        assert!(line(4).starts_with(&ok), "{all}");
        assert!(line(4).ends_with(" s)"), "{all}");
    }
    assert!(ids.iter().all(|i| *i == ids[0] && i.len() == 16), "{ids:?}");
    let mut want = vec![
        "env".to_string(),
        "run.sh".to_string(),
        "torchelastic".to_string(),
    ];
    for r in 0..world {
        want.extend([
            format!("err.{r}"),
            format!("out.{r}"),
            format!("status.{r}"),
        ]);
    }
    want.sort();
    assert_eq!(d.names(), want);
    tmp.assert_empty(&all);
}

/// The variables every torchrun-store rank names, for a static launch,
/// then the one that gives the protocol away.
fn static_from(protocol: &str) -> String {
    format!(
        "(from TORCHELASTIC_USE_AGENT_STORE, MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, \
         TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT, {protocol})"
    )
}

#[test]
fn standalone_torchrun_meets_through_its_agent_store() {
    let (Some(lib), Some(tr)) = (wheel_lib(), installed("NCCL_FIND_TORCHRUN")) else {
        return;
    };
    let d = Scratch::new("standalone");
    let tmp = TmpDir::new("torchrun-standalone");
    let o = torchrun(
        &tr,
        &d,
        &tmp,
        &lib,
        &["--standalone".into(), "--nproc-per-node=4".into()],
    );
    let first = std::sync::Mutex::new(String::new());
    expect_met(&d, &tmp, 4, &o, Admits::Store, &|r, line| {
        // Where the agent serves and the run id are torch's choice: every
        // rank must name the same.
        let at = line
            .strip_prefix("note: exchange: torchrun-store via torchrun, at tcp://")
            .unwrap_or_else(|| panic!("{line}"));
        let (url, rest) = at.split_once(' ').unwrap();
        assert!(
            url.rsplit_once(':').unwrap().1.parse::<u16>().is_ok(),
            "{line}"
        );
        let rest = rest
            .strip_prefix("(the agent's TCPStore; keys under /nccl-find/")
            .unwrap_or_else(|| panic!("{line}"));
        let (run, rest) = rest.split_once('/').unwrap();
        // A uuid under --standalone.
        assert_eq!(run.len(), 36, "{line}");
        let from = rest
            .strip_prefix("0/) ")
            .unwrap_or_else(|| panic!("{line}"));
        assert_eq!(
            from,
            static_from("TORCH_NCCL_ASYNC_ERROR_HANDLING"),
            "{line}"
        );
        let mut f = first.lock().unwrap();
        if r == 0 {
            *f = line.to_string();
        }
        assert_eq!(*f, line, "rank {r} meets elsewhere than rank 0");
    });
}

/// torchrun starts a failed group again (`--max-restarts=1`): rank 1 fails
/// in the first attempt, a while after rank 0 has reached the store, which
/// outlives it; the second attempt meets under keys of its own restart
/// count, and every rank of it agrees.
#[test]
fn a_restarted_torchrun_group_meets_under_its_own_restart_count() {
    let (Some(lib), Some(tr)) = (wheel_lib(), installed("NCCL_FIND_TORCHRUN")) else {
        return;
    };
    let d = Scratch::new("restart");
    let tmp = TmpDir::new("torchrun-restart");
    let o = torchrun_with(
        &tr,
        &d,
        &tmp,
        &lib,
        &[
            "--standalone".into(),
            "--nproc-per-node=2".into(),
            "--max-restarts=1".into(),
        ],
        "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ]; then sleep 2; exit 3; fi",
    );
    let first = std::sync::Mutex::new(String::new());
    expect_met(&d, &tmp, 2, &o, Admits::Store, &|r, line| {
        let keys = line
            .split_once("(the agent's TCPStore; keys under /nccl-find/")
            .and_then(|(_, k)| k.split_once(") "))
            .map(|(k, _)| k)
            .unwrap_or_else(|| panic!("{line}"));
        let (run, restart) = keys.split_once('/').unwrap();
        assert_eq!((run.len(), restart), (36, "1/"), "{line}");
        let mut f = first.lock().unwrap();
        if r == 0 {
            *f = line.to_string();
        }
        assert_eq!(*f, line, "rank {r} meets elsewhere than rank 0");
    });
}

#[test]
fn static_torchrun_meets_through_its_agent_store() {
    // The newest torch names its variable TORCH_NCCL_ASYNC_ERROR_HANDLING.
    static_torchrun_meets(
        "NCCL_FIND_TORCHRUN",
        "static",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    );
}

#[test]
fn torch_2_1_torchrun_meets_in_the_old_protocol() {
    // torch 2.1 names its variable NCCL_ASYNC_ERROR_HANDLING: the old
    // protocol is tried first.
    static_torchrun_meets("NCCL_FIND_TORCHRUN_OLD", "old", "NCCL_ASYNC_ERROR_HANDLING");
}

/// Four processes under the torchrun that `launcher` names, with a static
/// `--master-addr/--master-port`, meet through its agent's store; `var` is
/// the torch variable the report names (it says which protocol was tried
/// first).
fn static_torchrun_meets(launcher: &str, name: &str, var: &str) {
    static_torchrun_meets_with(launcher, name, var, 4, "");
}

/// [`static_torchrun_meets`] with `nproc` workers, each running `before`
/// (lines of sh) before nccl-find.
fn static_torchrun_meets_with(launcher: &str, name: &str, var: &str, nproc: usize, before: &str) {
    let (Some(lib), Some(tr)) = (wheel_lib(), installed(launcher)) else {
        return;
    };
    let d = Scratch::new(name);
    let tmp = TmpDir::new(&format!("torchrun-{name}"));
    let port = free_port();
    let o = torchrun_with(
        &tr,
        &d,
        &tmp,
        &lib,
        &[
            "--master-addr=127.0.0.1".into(),
            format!("--master-port={port}"),
            "--nnodes=1".into(),
            "--node-rank=0".into(),
            format!("--nproc-per-node={nproc}"),
        ],
        before,
    );
    let want = format!(
        "note: exchange: torchrun-store via torchrun, at tcp://127.0.0.1:{port} (the agent's TCPStore; \
         keys under /nccl-find/none/0/) {}",
        static_from(var)
    );
    expect_met(&d, &tmp, nproc, &o, Admits::Store, &|_, line| {
        assert_eq!(line, want)
    });
}

/// torch 2.1's `--standalone` (the c10d rendezvous) gives its workers no
/// agent store (`TORCHELASTIC_USE_AGENT_STORE=False`, as the wrapper saw):
/// rank 0 serves our TCP rendezvous at the MASTER_ADDR and MASTER_PORT the
/// agent chose and gave every worker (as the wrapper saw them: this host's
/// name and a free port), and names each rank that joined.
#[test]
fn torch_2_1_standalone_meets_through_our_tcp_rendezvous() {
    let (Some(lib), Some(tr)) = (wheel_lib(), installed("NCCL_FIND_TORCHRUN_OLD")) else {
        return;
    };
    let d = Scratch::new("old-standalone");
    let tmp = TmpDir::new("torchrun-old-standalone");
    let o = torchrun(
        &tr,
        &d,
        &tmp,
        &lib,
        &["--standalone".into(), "--nproc-per-node=4".into()],
    );
    let env = d.0.join("env");
    expect_met(&d, &tmp, 4, &o, Admits::Tcp, &|r, line| {
        assert_eq!(
            recorded(&env, "TORCHELASTIC_USE_AGENT_STORE", r),
            "False",
            "rank {r}"
        );
        let (host, port) = (
            recorded(&env, "MASTER_ADDR", 0),
            recorded(&env, "MASTER_PORT", 0),
        );
        // The same place for every rank, and a real one.
        assert_eq!(
            (
                recorded(&env, "MASTER_ADDR", r),
                recorded(&env, "MASTER_PORT", r)
            ),
            (host.clone(), port.clone()),
            "rank {r}"
        );
        assert!(!host.is_empty(), "MASTER_ADDR {host:?}");
        assert!(
            port.parse::<u16>().is_ok_and(|p| p > 0),
            "MASTER_PORT {port:?}"
        );
        assert_eq!(
            line,
            format!(
                "note: exchange: torchrun-tcp via torchrun, at tcp://{host}:{port} (from \
                 TORCHELASTIC_USE_AGENT_STORE, MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, \
                 TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT)"
            ),
            "rank {r}"
        );
    });
}

/// A bare TCPStore server, started from torch's python; stopped when
/// dropped.
struct Store {
    child: Child,
    stdin: Option<ChildStdin>,
    port: u16,
}

impl Store {
    fn start(python: &Path) -> Store {
        let mut child = bare(python)
            .args([
                "-c",
                "import sys, torch.distributed as d\n\
                 s = d.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False)\n\
                 print(s.port, flush=True)\n\
                 sys.stdin.read()\n",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap().take(64))
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the store said {line:?}"));
        Store { child, stdin, port }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts nccl-find as `rank` of `world` the way torchrun's agent would,
/// against the store at `port`, with `tmp` as its TMPDIR, `protocol` (the
/// variable naming torch's version) and `extra` variables (set last: they
/// win).
#[allow(clippy::too_many_arguments)]
fn rank_of(
    tmp: &TmpDir,
    port: u16,
    lib: &Path,
    rank: usize,
    world: usize,
    protocol: &str,
    timeout: &str,
    extra: &[(&str, String)],
) -> Child {
    let mut c = bare(Path::new(BIN));
    c.args(["smoke", "--lib", lib.to_str().unwrap(), "--rendezvous-only"])
        .args(["--timeout", timeout])
        .env("TORCHELASTIC_USE_AGENT_STORE", "True")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("TORCHELASTIC_RUN_ID", "test-run")
        .env("TORCHELASTIC_RESTART_COUNT", "0")
        .env(protocol, "1")
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .envs(extra.iter().map(|(k, v)| (*k, v.as_str())))
        .spawn()
        .unwrap()
}

#[test]
fn a_rank_that_never_comes_is_named_at_the_deadline() {
    let (Some(lib), Some(py)) = (wheel_lib(), installed("NCCL_FIND_TORCH_PYTHON")) else {
        return;
    };
    let store = Store::start(&py);
    let tmp = TmpDir::new("torchrun-never");
    let t = Instant::now();
    // Ranks 0 and 2 of 3: rank 1 never comes.
    let kids: Vec<Child> = [0, 2]
        .iter()
        .map(|&r| {
            rank_of(
                &tmp,
                store.port,
                &lib,
                r,
                3,
                "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                "3",
                &[],
            )
        })
        .collect();
    let outs: Vec<_> = kids
        .into_iter()
        .map(|k| text(&wait_bounded(k, "nccl-find")))
        .collect();
    let took = t.elapsed();
    let why = format!(
        "torchrun (agent store): rank(s) 1 never reached barrier 0 in the store at tcp://127.0.0.1:{} \
         within 3 s (2 of 3 processes did). Check that torchrun started them all (--nnodes, \
         --nproc-per-node) and every rank's output, or raise --timeout (",
        store.port
    );
    for (o, r) in outs.iter().zip([0, 2]) {
        assert_eq!(o.0, 1, "{o:?}");
        let last = o.1.lines().last().unwrap_or_default();
        assert!(
            last.starts_with(&format!("[rank {r}] FAILED: {why}")),
            "{o:?}"
        );
        let err: Vec<&str> = o.2.lines().collect();
        assert_eq!(err.len(), 1, "{o:?}");
        assert!(
            err[0].starts_with(&format!("nccl-find smoke: FAILED: {why}")),
            "{o:?}"
        );
    }
    // By the deadline (3 s), with room for a loaded machine.
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(60),
        "{took:?}"
    );
    tmp.assert_empty(&format!("{outs:#?}"));
}

/// Two ranks against a bare store of `python`'s torch, told the other
/// protocol than the server's: both meet all the same.
fn meets_despite_the_wrong_hint(python: &Path, lib: &Path, protocol: &str) {
    let store = Store::start(python);
    let tmp = TmpDir::new("torchrun-hint");
    let kids: Vec<Child> = (0..2)
        .map(|r| rank_of(&tmp, store.port, lib, r, 2, protocol, "60", &[]))
        .collect();
    let outs: Vec<_> = kids
        .into_iter()
        .map(|k| text(&wait_bounded(k, "nccl-find")))
        .collect();
    let mut ids = Vec::new();
    for (r, o) in outs.iter().enumerate() {
        assert_eq!((o.0, o.2.as_str()), (0, ""), "{o:?}");
        let lines: Vec<&str> = o.1.lines().collect();
        assert_eq!(
            lines[0],
            format!(
                "[rank {r}] note: exchange: torchrun-store via torchrun, at tcp://127.0.0.1:{} (the agent's \
                 TCPStore; keys under /nccl-find/test-run/0/) {}",
                store.port,
                static_from(protocol)
            ),
            "{o:?}"
        );
        let rdv = lines
            .iter()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "[rank {r}] note: rendezvous: nranks 2 first_rank {r} id "
                ))
            })
            .unwrap_or_else(|| panic!("{o:?}"));
        ids.push(rdv.to_string());
    }
    assert_eq!(ids[0], ids[1]);
    assert!(
        outs[0].1.lines().last().unwrap().starts_with(
            "[rank 0] OK: 2 rank(s) met, no all-reduce run (--rendezvous-only), 1 other process(es) agree ("
        ),
        "{outs:?}"
    );
    tmp.assert_empty(&format!("{outs:#?}"));
}

#[test]
fn the_other_protocol_is_tried_when_the_environment_misleads() {
    let (Some(lib), Some(new), Some(old)) = (
        wheel_lib(),
        installed("NCCL_FIND_TORCH_PYTHON"),
        installed("NCCL_FIND_TORCH_PYTHON_OLD"),
    ) else {
        return;
    };
    // torch 2.1's server drops a connection in the new protocol at once;
    // the newest one stays silent to the old protocol (for a few seconds).
    meets_despite_the_wrong_hint(&old, &lib, "TORCH_NCCL_ASYNC_ERROR_HANDLING");
    meets_despite_the_wrong_hint(&new, &lib, "NCCL_ASYNC_ERROR_HANDLING");
}

#[test]
fn a_half_set_agent_store_environment_says_what_to_pass() {
    let Some(lib) = wheel_lib() else { return };
    let tmp = TmpDir::new("torchrun-half");
    let o = bare(Path::new(BIN))
        .args(["smoke", "--lib", lib.to_str().unwrap(), "--rendezvous-only"])
        .env("TMPDIR", tmp.path())
        .env("TORCHELASTIC_USE_AGENT_STORE", "True")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("RANK", "0")
        .env("WORLD_SIZE", "2")
        .output()
        .unwrap();
    assert_eq!(
        text(&o),
        (
            2,
            String::new(),
            "nccl-find smoke: torchrun (agent store): MASTER_PORT is not set, though \
             TORCHELASTIC_USE_AGENT_STORE, MASTER_ADDR are: the launcher's environment is half set. Start \
             every process with the launcher, or pass --rank, --world-size and --init tcp://HOST:PORT\n"
                .into()
        )
    );
    tmp.assert_empty("");
}

/// A TCP forwarder to `127.0.0.1:to` that counts the connections it takes
/// and holds each for `delay` before passing it on (a store that is slow
/// to accept, as one whose resolver is).
fn counting_proxy(
    to: u16,
    delay: Duration,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let n = count.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            n.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(delay);
            let Ok(s) = TcpStream::connect(("127.0.0.1", to)) else {
                continue;
            };
            let pipe = |mut a: TcpStream, mut b: TcpStream| {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut a, &mut b);
                    let _ = b.shutdown(std::net::Shutdown::Write);
                });
            };
            pipe(c.try_clone().unwrap(), s.try_clone().unwrap());
            pipe(s, c);
        }
    });
    (port, count)
}

/// Every worker is a client of the store of its own, as torch's own
/// workers are; a store that is slow to take a connection (here, held
/// 1.5 s each, one at a time, as a store whose resolver is slow) is named
/// in every rank's report, with its likely cause.
#[test]
fn every_worker_is_a_client_and_a_slow_store_is_named() {
    let (Some(lib), Some(py)) = (wheel_lib(), installed("NCCL_FIND_TORCH_PYTHON")) else {
        return;
    };
    let store = Store::start(&py);
    let tmp = TmpDir::new("torchrun-slow");
    let (port, count) = counting_proxy(store.port, Duration::from_millis(1500));
    let kids: Vec<Child> = (0..3)
        .map(|r| {
            rank_of(
                &tmp,
                port,
                &lib,
                r,
                3,
                "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                "120",
                &[],
            )
        })
        .collect();
    let outs: Vec<_> = kids
        .into_iter()
        .map(|k| text(&wait_bounded(k, "nccl-find")))
        .collect();
    let slow = format!("note: the agent's TCPStore at tcp://127.0.0.1:{port} was slow: ");
    let cause = " s for its slowest answer. torch's store looks up the name of every client it accepts, one \
                 at a time, so a slow resolver makes every worker of the job wait as long, torch's own too: \
                 `nccl-find doctor` times that lookup on each node; an /etc/hosts entry for each node's \
                 address, or a resolver that answers, mends it";
    for (r, o) in outs.iter().enumerate() {
        assert_eq!((o.0, o.2.as_str()), (0, ""), "{outs:#?}");
        let note =
            o.1.lines()
                .find_map(|l| l.strip_prefix(&format!("[rank {r}] {slow}")))
                .unwrap_or_else(|| panic!("{outs:#?}"));
        let (took, rest) = note
            .split_once(" s to take this process's connection, ")
            .unwrap();
        let took: f64 = took.parse().unwrap();
        assert!(took >= 1.5, "{note}");
        let (_, tail) = rest.split_at(rest.find(' ').unwrap());
        assert_eq!(tail, cause, "{note}");
    }
    // One connection per process, none shared.
    assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 3);
    tmp.assert_empty(&format!("{outs:#?}"));
}

/// A worker that runs the smoke test twice (a pre-flight script, or one
/// run per dtype) meets under keys of its own each time: the second run
/// is not taken for another program using the first one's keys.
#[test]
fn a_second_run_in_one_worker_meets_under_keys_of_its_own() {
    static_torchrun_meets_with(
        "NCCL_FIND_TORCHRUN",
        "twice",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        3,
        &format!("'{BIN}' \"$@\" >/dev/null 2>&1 || exit 9"),
    );
}
