//! `nccl-find smoke` under Slurm's real `srun`, with no flags: each task
//! finds its rank, the world and the exchange in srun's environment.
//!
//! The test starts its own Slurm, as root: a controller (`slurmctld -D`) and
//! two node daemons on this one host (`slurmd -D -N node01`, `-N node02`),
//! from a slurm.conf in a temp dir with no authentication (`auth/none`),
//! on ports free at the time, every state, spool, log and pid file in that
//! dir. They are child processes of the test, and a guard stops them (and
//! any step daemon or task they left) when the last test is done with
//! them, failed or not; then it asserts that none of them runs any more (a
//! failure of the test that let go last).
//!
//! The node names: a step on both nodes has `SLURM_STEP_NODELIST=node[01-02]`,
//! and the slurm row looks for task 0 at `node01`. The names are made up
//! (`NodeName` is not the host's name, only `NodeAddr=127.0.0.1` reaches
//! the nodes), as on clusters whose node names DNS does not know: the row
//! asks the real `scontrol show node` for `NodeAddr`, and says so.
//!
//! Runs: `srun -N 2 -n 4` (no PMI: the `slurm` row, our TCP rendezvous at
//! node01's address, on the port the job id gives, with rank 0's report of
//! the two nodes; again with `NCCL_FIND_SLURM_PORT` choosing the port), and `srun --mpi=pmix -n 4` and
//! `srun --mpi=pmi2 -n 4` on one node: the `pmix` and `pmi1` rows. Each
//! task's exchange line is asserted whole, and its local rank against
//! `SLURM_LOCALID` (a wrapper keeps the task's variables before it execs
//! nccl-find).
//!
//! Skips with a reason when not root, or srun, slurmd or slurmctld is
//! missing; fails instead when `NCCL_FIND_REQUIRE_LAUNCHERS=1`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

mod common;
use common::{
    alive, marked_processes, named, recorded, sh_record, skip_launcher, wheel_lib,
    without_launchers, TmpDir,
};

/// The longest wait for the daemons to come up, and for one srun.
const START: Duration = Duration::from_secs(180);
const RUN: Duration = Duration::from_secs(300);

/// The rendezvous timeout each task gets.
const RENDEZVOUS_S: &str = "90";

/// The variables of srun's that each task's wrapper keeps, in
/// `runs/NAME-env/VAR.TASK`.
const RECORDED: [&str; 4] = ["SLURM_LOCALID", "PMI_FD", "PMIX_NAMESPACE", "PMIX_VERSION"];

/// Skips with `why`, or fails where the launchers are required.
fn skip(why: &str) {
    skip_launcher(&format!("{why} (run scripts/launchers)"));
}

/// A program on PATH, or in the sbin folders root's PATH may lack.
fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

struct Tools {
    srun: PathBuf,
    sinfo: PathBuf,
    scancel: PathBuf,
    slurmd: PathBuf,
    slurmctld: PathBuf,
}

fn tools() -> Option<Tools> {
    if !root() {
        skip("Slurm's daemons are started as root, and this is not root");
        return None;
    }
    let srun = match std::env::var_os("NCCL_FIND_SRUN") {
        Some(s) if !s.is_empty() => Some(PathBuf::from(s)),
        _ => find("srun"),
    };
    let Some(srun) = srun.filter(|s| s.is_file()) else {
        skip("srun is missing (scripts/launchers installs Slurm)");
        return None;
    };
    let beside = |n: &str| {
        srun.parent()
            .map(|d| d.join(n))
            .filter(|p| p.is_file())
            .or_else(|| find(n))
    };
    let (Some(sinfo), Some(scancel)) = (beside("sinfo"), beside("scancel")) else {
        skip("sinfo or scancel is missing beside srun");
        return None;
    };
    let (Some(slurmd), Some(slurmctld)) = (find("slurmd"), find("slurmctld")) else {
        skip("slurmd or slurmctld is missing (scripts/launchers installs Slurm)");
        return None;
    };
    Some(Tools {
        srun,
        sinfo,
        scancel,
        slurmd,
        slurmctld,
    })
}

/// Whether this process's effective user is root (/proc/self/status's
/// `Uid:` line: real, effective, saved, filesystem).
fn root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// Two consecutive free ports (the node daemons take a range), and one
/// more for the controller.
fn free_ports() -> (u16, u16) {
    let bind = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p));
    for _ in 0..200 {
        let a = bind(0).unwrap();
        let p = a.local_addr().unwrap().port();
        if p >= u16::MAX - 1 {
            continue;
        }
        let Ok(b) = bind(p + 1) else { continue };
        let c = bind(0).unwrap();
        let ctl = c.local_addr().unwrap().port();
        if ctl != p && ctl != p + 1 {
            drop((a, b, c));
            return (ctl, p);
        }
    }
    panic!("no two consecutive free ports on 127.0.0.1");
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// A command with no launcher's or job's variables from the test's own
/// environment, and this cluster's slurm.conf.
fn clean(program: &Path, conf: &Path) -> Command {
    let mut c = Command::new(program);
    without_launchers(&mut c).env("SLURM_CONF", conf);
    c
}

/// Runs `c` to its end or `limit`, killing it then. Exit code, stdout,
/// stderr.
fn run_for(mut c: Command, limit: Duration) -> (Option<i32>, String, String) {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{c:?}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let end = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (status, o.join().unwrap(), e.join().unwrap())
}

fn tail(path: &Path) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Our Slurm: a controller and two node daemons.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<Child>,
    scancel: PathBuf,
}

impl Cluster {
    fn start(t: &Tools) -> Cluster {
        let dir = std::env::temp_dir().join(format!("nccl-find-slurm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in ["state", "spool-node01", "spool-node02", "runs"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let conf = dir.join("slurm.conf");
        let mut cluster = Cluster {
            dir: dir.clone(),
            conf: conf.clone(),
            daemons: Vec::new(),
            scancel: t.scancel.clone(),
        };
        let (ctl_port, node_port) = free_ports();
        let host = hostname();
        let d = dir.display();
        let text = format!(
            "# nccl-find's launch_slurm test: one host, two emulated nodes, no authentication.\n\
             ClusterName=nccl-find\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctl_port}\n\
             SlurmdPort={node_port}\n\
             AuthType=auth/none\n\
             CredType=cred/none\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             SelectType=select/cons_tres\n\
             MpiDefault=none\n\
             SlurmdParameters=config_overrides\n\
             ReturnToService=2\n\
             KillWait=5\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool-%n\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd-%n.log\n\
             PlugStackConfig={d}/plugstack.conf\n\
             NodeName=node[01-02] NodeHostname={host} NodeAddr=127.0.0.1 Port={node_port}-{} CPUs=4 State=UNKNOWN\n\
             PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
            node_port + 1
        );
        std::fs::write(&conf, text).unwrap();
        std::fs::write(dir.join("plugstack.conf"), "").unwrap();
        let daemon = |program: &Path, args: &[&str], log: &str| {
            let log = std::fs::File::create(dir.join(log)).unwrap();
            clean(program, &conf)
                .args(args)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("{}: {e}", program.display()))
        };
        cluster
            .daemons
            .push(daemon(&t.slurmctld, &["-D", "-i"], "slurmctld.out"));
        for n in ["node01", "node02"] {
            cluster.daemons.push(daemon(
                &t.slurmd,
                &["-D", "-N", n],
                &format!("slurmd-{n}.out"),
            ));
        }
        // Both nodes idle, or a daemon that ended, or the deadline.
        let end = Instant::now() + START;
        loop {
            for (i, c) in cluster.daemons.iter_mut().enumerate() {
                if let Ok(Some(s)) = c.try_wait() {
                    panic!(
                        "Slurm daemon {i} ended at start ({s}):\n{}\n{}\n{}",
                        tail(&dir.join("slurmctld.log")),
                        tail(&dir.join("slurmd-node01.log")),
                        tail(&dir.join("slurmd-node02.log"))
                    );
                }
            }
            let (code, out, err) = run_for(
                {
                    let mut c = clean(&t.sinfo, &conf);
                    c.args(["-h", "-N", "-o", "%N %t"]);
                    c
                },
                Duration::from_secs(30),
            );
            let last = format!("{code:?} {out}{err}");
            if code == Some(0) && out.lines().filter(|l| l.ends_with(" idle")).count() == 2 {
                break;
            }
            assert!(
                Instant::now() < end,
                "the nodes never came up idle in {START:?}: sinfo said {last}\n{}\n{}",
                tail(&dir.join("slurmctld.log")),
                tail(&dir.join("slurmd-node01.log"))
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        cluster
    }
}

impl Cluster {
    /// Stops what this cluster started and takes out what it added; says
    /// what was still there after that (nothing, when all went well).
    fn stop(&mut self) -> Vec<String> {
        // Cancel what runs, then stop the daemons: SIGTERM, then SIGKILL.
        let mut c = clean(&self.scancel, &self.conf);
        c.args(["--user", "root", "--full"]);
        let _ = run_for(c, Duration::from_secs(20));
        for d in &self.daemons {
            let _ = Command::new("kill")
                .args(["-TERM", &d.id().to_string()])
                .status();
        }
        let end = Instant::now() + Duration::from_secs(60);
        for d in &mut self.daemons {
            while d.try_wait().ok().flatten().is_none() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = d.kill();
            let _ = d.wait();
        }
        let mut left = Vec::new();
        let running: Vec<u32> = self
            .daemons
            .iter()
            .map(|d| d.id())
            .filter(|p| alive(*p))
            .collect();
        if !running.is_empty() {
            left.push(format!("daemons still run: {:?}", named(&running)));
        }
        // Step daemons and tasks are not our children, but carry our
        // SLURM_CONF: none may outlive the daemons (a step daemon is given
        // a while to end). Those that do are killed, each by its id.
        let mark = format!("SLURM_CONF={}", self.conf.display());
        let end = Instant::now() + Duration::from_secs(60);
        let mut stray = marked_processes(&mark);
        while !stray.is_empty() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(200));
            stray = marked_processes(&mark);
        }
        if !stray.is_empty() {
            left.push(format!(
                "still running a minute after the daemons stopped, with {mark}: {:?}",
                named(&stray)
            ));
            for pid in stray {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        left
    }
}

impl Drop for Cluster {
    /// Stops the cluster, and fails the test that let go of it last if
    /// anything it started still runs (only says so where that test fails
    /// already).
    fn drop(&mut self) {
        let left = self.stop();
        if left.is_empty() {
            return;
        }
        if std::thread::panicking() {
            eprintln!("the Slurm cluster left: {left:#?}");
        } else {
            panic!("the Slurm cluster left: {left:#?}");
        }
    }
}

/// The one cluster the tests of this file share: started by the first,
/// stopped when the last lets go.
static CLUSTER: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());

fn cluster(t: &Tools) -> Arc<Cluster> {
    let mut held = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = held.upgrade() {
        return c;
    }
    let c = Arc::new(Cluster::start(t));
    *held = Arc::downgrade(&c);
    c
}

/// What each task printed, the job's id, where each task ran, and its
/// [`RECORDED`] variables.
struct Ran {
    job: u64,
    /// Per task: stdout, stderr.
    tasks: Vec<(String, String)>,
    /// Per task: its node's index in the step (srun's `%n`).
    nodes: Vec<String>,
    /// Where the wrapper kept each task's [`RECORDED`] variables.
    env: PathBuf,
}

/// Runs `srun ARGS nccl-find smoke --rendezvous-only` with 4 tasks (and
/// `vars` in srun's environment, which the tasks get), each task's wrapper
/// checking first that its TMPDIR is the job's own (srun passes its
/// environment on) and keeping its [`RECORDED`] variables; asserts srun's
/// exit 0 (every task's exit 0), one output file per task, and that nothing
/// was left in the job's TMPDIR.
fn srun(
    t: &Tools,
    c: &Cluster,
    name: &str,
    args: &[&str],
    vars: &[(&str, &str)],
    lib: &Path,
) -> Ran {
    let out = c.dir.join("runs").join(name);
    std::fs::create_dir_all(&out).unwrap();
    let env = c.dir.join("runs").join(format!("{name}-env"));
    std::fs::create_dir_all(&env).unwrap();
    let tmp = TmpDir::new(&format!("slurm-{name}"));
    let mut cmd = clean(&t.srun, &c.conf);
    cmd.envs(vars.iter().copied())
        .env("TMPDIR", tmp.path())
        .args(args)
        .args(["-n", "4", "--job-name", name, "--kill-on-bad-exit=1"])
        .arg(format!("--output={}/%j.%t.%n.out", out.display()))
        .arg(format!("--error={}/%j.%t.%n.err", out.display()))
        .args(tmp.exec_checked(&sh_record(&env, "SLURM_PROCID", &RECORDED)))
        .arg(env!("CARGO_BIN_EXE_nccl-find"))
        .args([
            "smoke",
            "--rendezvous-only",
            "--timeout",
            RENDEZVOUS_S,
            "--lib",
        ])
        .arg(lib);
    let (code, so, se) = run_for(cmd, RUN);
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let read = |n: &str| std::fs::read_to_string(out.join(n)).unwrap_or_default();
    let all: Vec<String> = names
        .iter()
        .map(|n| format!("--- {n}\n{}", read(n)))
        .collect();
    assert_eq!(
        code,
        Some(0),
        "srun {args:?} ended {code:?}\nstdout {so}\nstderr {se}\n{}\n{}\n{}",
        all.join("\n"),
        tail(&c.dir.join("slurmd-node01.log")),
        tail(&c.dir.join("slurmctld.log"))
    );
    let job: u64 = names
        .first()
        .and_then(|n| n.split('.').next())
        .and_then(|j| j.parse().ok())
        .unwrap_or_else(|| panic!("no output files: {names:?}"));
    // JOB.TASK.NODE.out and .err, for each task.
    let mut nodes = Vec::new();
    let mut tasks = Vec::new();
    for r in 0..4 {
        let at = format!("{job}.{r}.");
        let mine: Vec<&String> = names.iter().filter(|n| n.starts_with(&at)).collect();
        assert_eq!(
            mine.len(),
            2,
            "one stdout and one stderr for task {r}: {names:?}"
        );
        let node = mine[0][at.len()..].trim_end_matches(".err").to_string();
        assert_eq!(*mine[1], format!("{at}{node}.out"), "{names:?}");
        tasks.push((
            read(&format!("{at}{node}.out")),
            read(&format!("{at}{node}.err")),
        ));
        nodes.push(node);
    }
    assert_eq!(names.len(), 8, "{names:?}");
    tmp.assert_empty(&all.join("\n"));
    Ran {
        job,
        tasks,
        nodes,
        env,
    }
}

/// Asserts each task's first line is the exchange line (`exchange` checks
/// it), its local rank (`SLURM_LOCALID`'s value, which is its place among
/// the tasks of its node), that all four had one unique id, and every
/// verdict.
fn assert_met(ran: &Ran, exchange: &dyn Fn(usize, &str)) {
    let mut ids = Vec::new();
    for (r, (out, err)) in ran.tasks.iter().enumerate() {
        assert!(err.is_empty(), "task {r} wrote to stderr: {out}{err}");
        let lines: Vec<&str> = out.lines().collect();
        exchange(r, lines.first().copied().unwrap_or_default());
        let local = recorded(&ran.env, "SLURM_LOCALID", r);
        let before = ran.nodes[..r]
            .iter()
            .filter(|n| **n == ran.nodes[r])
            .count();
        assert_eq!(
            local,
            before.to_string(),
            "task {r} on node {:?}",
            ran.nodes
        );
        let said = format!("[rank {r}] note: local rank {local}");
        assert_eq!(
            lines.iter().filter(|l| **l == said).count(),
            1,
            "task {r}: {said:?} once in {out}"
        );
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.starts_with(&format!("[rank {r}] note: local rank ")))
                .count(),
            1,
            "task {r}: {out}"
        );
        let hand = lines
            .iter()
            .find(|l| {
                l.starts_with(&format!(
                    "[rank {r}] note: rendezvous: nranks 4 first_rank {r} id "
                ))
            })
            .unwrap_or_else(|| panic!("task {r}: {out}{err}"));
        ids.push(hand.rsplit(' ').next().unwrap_or_default().to_string());
        let last = lines.last().copied().unwrap_or_default();
        let verdict = if r == 0 {
            "[rank 0] OK: 4 rank(s) met, no all-reduce run (--rendezvous-only), 3 other process(es) agree ("
                .to_string()
        } else {
            format!("[rank {r}] OK: 4 rank(s) met, no all-reduce run (--rendezvous-only) (")
        };
        assert!(last.starts_with(&verdict), "task {r}: {out}{err}");
    }
    assert!(
        ids[0].len() >= 8 && ids.iter().all(|i| *i == ids[0]),
        "one unique id for all: {ids:?}"
    );
}

/// Asserts the slurm row's exchange line, for step 0 of `job`: node01,
/// and the port the job id gives.
fn slurm_line(job: u64) -> impl Fn(usize, &str) {
    let port = 20000 + (job * 7891) % 12768;
    move |rank, line| {
        assert_eq!(
            line,
            format!(
                "[rank {rank}] note: exchange: slurm via srun, at tcp://127.0.0.1:{port} (from SLURM_PROCID, \
                 SLURM_NTASKS, SLURM_STEP_NODELIST, SLURM_JOB_ID, SLURM_STEP_ID, SLURM_LOCALID, \
                 scontrol show node, SLURM_SRUN_COMM_PORT)"
            )
        )
    }
}

#[test]
fn srun_with_no_pmi_meets_at_the_first_node() {
    let Some(lib) = wheel_lib() else { return };
    let Some(t) = tools() else { return };
    let c = cluster(&t);
    let ran = srun(&t, &c, "none", &["-N", "2"], &[], &lib);
    // Task 0 on the step's first node, some on its second: the node list
    // was node[01-02] (and task 0 checks that it runs on node01, the first).
    assert_eq!(ran.nodes[0], "0", "{:?}", ran.nodes);
    assert!(ran.nodes.iter().any(|n| n == "1"), "{:?}", ran.nodes);
    assert!(
        ran.nodes.iter().all(|n| n == "0" || n == "1"),
        "{:?}",
        ran.nodes
    );
    // So a local rank is not the rank: task 0 and the first task on node02
    // are both local rank 0 (assert_met holds each to SLURM_LOCALID).
    let first_on_1 = ran.nodes.iter().position(|n| n == "1").unwrap();
    assert_eq!(recorded(&ran.env, "SLURM_LOCALID", first_on_1), "0");
    assert_met(&ran, &slurm_line(ran.job));
    // Rank 0 reports the two nodes by their Slurm names, with the facts of
    // each node's first task, and tests the one boundary between them
    // (and back to rank 0), every address NCCL will use reached.
    let out = &ran.tasks[0].0;
    let nodes: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("[rank 0] nodes: "))
        .take_while(|l| !l.starts_with("[rank 0] note: rendezvous: "))
        .collect();
    assert_eq!(nodes.len(), 3, "{out}");
    assert!(
        nodes[0].starts_with("[rank 0] nodes: 2 (node01, node02), 4 rank(s); the same on every one: NCCL 2.21.5, NCCL build 2.21.5+cuda12.4, driver "),
        "{out}"
    );
    // The one boundary timed both ways, in one round (a healthy job).
    assert!(
        nodes[2].starts_with("[rank 0]   pairs: 2 link(s) timed in one round, "),
        "{out}"
    );
    assert!(
        nodes[1].starts_with("[rank 0]   reach: ")
            && nodes[1].contains(" connection(s) tested between 2 hosts, ")
            && nodes[1].ends_with(": every address NCCL will use was reached"),
        "{out}"
    );
}

#[test]
fn nccl_find_slurm_port_chooses_the_port() {
    let Some(lib) = wheel_lib() else { return };
    let Some(t) = tools() else { return };
    let c = cluster(&t);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let ran = srun(
        &t,
        &c,
        "port",
        &["-N", "2"],
        &[("NCCL_FIND_SLURM_PORT", &port)],
        &lib,
    );
    assert_met(&ran, &|r, line| {
        assert_eq!(
            line,
            format!(
                "[rank {r}] note: exchange: slurm via srun, at tcp://127.0.0.1:{port} (from SLURM_PROCID, \
                 SLURM_NTASKS, SLURM_STEP_NODELIST, SLURM_JOB_ID, SLURM_STEP_ID, SLURM_LOCALID, \
                 NCCL_FIND_SLURM_PORT, scontrol show node, SLURM_SRUN_COMM_PORT)"
            )
        )
    });
}

/// `srun --mpi=X -n 4` on one node.
fn srun_with_pmi(mpi: &str) -> Option<(Ran, Arc<Cluster>)> {
    let lib = wheel_lib()?;
    let t = tools()?;
    let c = cluster(&t);
    let mpi_arg = format!("--mpi={mpi}");
    let ran = srun(
        &t,
        &c,
        mpi,
        &["-N", "1", "-w", "node01", &mpi_arg],
        &[],
        &lib,
    );
    assert!(ran.nodes.iter().all(|n| n == "0"), "{:?}", ran.nodes);
    Some((ran, c))
}

/// The PMIx client library the loader finds (Debian's libpmix2, which
/// Slurm's mpi/pmix plugin serves with), as a task names it: the file
/// mapped (`ldconfig`'s `libpmix.so.2`, links resolved), and its version
/// (what `PMIx_Get_version` says, up to its " (").
fn system_pmix() -> (String, String) {
    // ldconfig lives in /sbin, which a user's PATH may not hold.
    let o = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .find_map(|exe| Command::new(exe).arg("-p").output().ok())
        .expect("ldconfig, on PATH or in /sbin");
    let listed = String::from_utf8_lossy(&o.stdout).into_owned();
    let path = listed
        .lines()
        .find(|l| l.trim_start().starts_with("libpmix.so.2 "))
        .and_then(|l| l.split_once("=> "))
        .map(|(_, p)| p.trim().to_string())
        .unwrap_or_else(|| panic!("no libpmix.so.2 in ldconfig -p: {listed}"));
    let file = std::fs::canonicalize(&path).unwrap();
    // SAFETY: loads the library (its initialisers run, as in any PMIx
    // client), and calls PMIx_Get_version, which takes nothing and returns
    // a static NUL-terminated string; the library stays loaded.
    let version = unsafe {
        let h = libc::dlopen(c"libpmix.so.2".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null(), "dlopen libpmix.so.2");
        let f = libc::dlsym(h, c"PMIx_Get_version".as_ptr());
        assert!(!f.is_null(), "no PMIx_Get_version");
        let f: extern "C" fn() -> *const libc::c_char = std::mem::transmute(f);
        std::ffi::CStr::from_ptr(f()).to_string_lossy().into_owned()
    };
    let version = version.split(" (").next().unwrap().to_string();
    (file.display().to_string(), version)
}

#[test]
fn srun_with_pmix_uses_the_pmix_row() {
    let Some((ran, _c)) = srun_with_pmi("pmix") else {
        return;
    };
    let (file, version) = system_pmix();
    assert_met(&ran, &|r, line| {
        // Slurm's namespace for step 0 of the job, and its server's version.
        let nspace = recorded(&ran.env, "PMIX_NAMESPACE", r);
        assert_eq!(nspace, format!("slurm.pmix.{}.0", ran.job));
        let server = recorded(&ran.env, "PMIX_VERSION", r);
        assert!(!server.is_empty(), "task {r}: PMIX_VERSION is unset");
        assert_eq!(
            line,
            format!(
                "[rank {r}] note: exchange: pmix via srun --mpi=pmix, at PMIx namespace \"{nspace}\" (server \
                 PMIx \"{server}\"), through \"{file}\", \"{version}\" (from PMIX_NAMESPACE, PMIX_RANK, \
                 SLURM_NTASKS, SLURM_LOCALID)"
            )
        );
    });
}

#[test]
fn srun_with_pmi2_uses_the_pmi1_row() {
    let Some((ran, _c)) = srun_with_pmi("pmi2") else {
        return;
    };
    assert_met(&ran, &|r, line| {
        let fd = recorded(&ran.env, "PMI_FD", r);
        assert!(
            fd.parse::<u32>().is_ok_and(|fd| fd > 2),
            "task {r}: PMI_FD {fd:?}"
        );
        assert_eq!(
            line,
            format!(
                "[rank {r}] note: exchange: pmi1 via srun --mpi=pmi2, at PMI-1 on fd {fd} (from PMI_FD, \
                 PMI_RANK, PMI_SIZE, SLURM_LOCALID)"
            )
        );
    });
}

/// `nccl-find ras` names a rank by its Slurm node, job, step and task, and
/// gives the line that drains that node: a job step on node02 whose process
/// serves a stand-in RAS service (NCCL 2.28.9's, `tests/ras/serve.py`, its
/// `libnccl.so.2` mapped) reporting its own process as the rank gone.
#[test]
fn ras_names_a_ranks_slurm_node_and_the_line_that_drains_it() {
    use std::io::BufRead;
    let Some(t) = tools() else { return };
    let c = cluster(&t);
    let dir = common::scratch("slurm-ras");
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let report = std::fs::read(here.join("tests/ras/2.28.9/killed-json.txt")).unwrap();
    // The recorded conversation's report (its last block), rank 1 made
    // this step's own process on this host.
    let text = String::from_utf8(report).unwrap();
    let body = &text[text.rfind("--- server").unwrap()..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let body = body
        .replace("192.0.2.2", "127.0.0.1")
        .replace("\"pid\": 857", "\"pid\": {PID}");
    let file = dir.join("report");
    std::fs::write(&file, body).unwrap();
    let lib = common::fake_nccl("2.28.9");
    let mut cmd = clean(&t.srun, &c.conf);
    cmd.args([
        "-N",
        "1",
        "-n",
        "1",
        "-w",
        "node02",
        "--job-name",
        "ras",
        "python3",
    ])
    .arg(here.join("tests/ras/serve.py"))
    .arg(&lib)
    .arg("1")
    .arg(dir.join("received"))
    .arg(&file)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut step = cmd.spawn().unwrap();
    let mut first = String::new();
    std::io::BufReader::new(step.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let mut words = first.split_whitespace();
    let (port, job) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    assert!(!port.is_empty() && !job.is_empty(), "srun said {first:?}");
    let mut ras = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
    without_launchers(&mut ras).args(["ras", "--host", "127.0.0.1", "--port", port]);
    let (code, out, err) = run_for(ras, Duration::from_secs(60));
    let mut cancel = clean(&t.scancel, &c.conf);
    cancel.arg(job);
    let _ = run_for(cancel, Duration::from_secs(20));
    let _ = step.kill();
    let _ = step.wait();
    assert_eq!(code, Some(1), "{out}{err}");
    let last = err.lines().last().unwrap_or("");
    assert!(
        last.ends_with(&format!(
            ". It runs on Slurm node node02 (job {job}, step 0, task 0, local rank 0); take the \
             node out: `scontrol update nodename=node02 state=drain reason='nccl-find ras: rank 1 \
             missing'`, and keep the next run off it: `--exclude=node02`"
        )),
        "{out}{err}"
    );
    assert!(
        out.contains("\n  its node: Slurm node node02 (job "),
        "{out}"
    );
}
