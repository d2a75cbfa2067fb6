//! `nccl-find smoke` under Open MPI's real `mpirun` with no rendezvous
//! flags: Debian's Open MPI 4.1 (with the system's PMIx, libpmix2), PyPI's
//! Open MPI 5 (with its own PMIx inside) and PyPI's Open MPI 4.1 (built
//! with its internal PMIx, which lives in its libopen-pal.so.40), each
//! giving its processes a PMIx server that the `pmix` exchange meets
//! through. scripts/launchers installs them (`NCCL_FIND_OMPI4_MPIRUN`,
//! `NCCL_FIND_OMPI5_MPIRUN`, `NCCL_FIND_OMPI41_MPIRUN`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::scratch;
use common::{
    marked_processes, named, names, recorded, sh_record, skip_launcher, unique, wheel_lib,
    without_launchers, TmpDir,
};

/// The launcher named by `var` (scripts/launchers sets it); `None`, and
/// why, where it is missing and not required.
fn launcher(var: &str) -> Option<PathBuf> {
    match std::env::var_os(var).map(PathBuf::from) {
        Some(p) if p.is_file() => Some(p),
        other => {
            let why = match other {
                Some(p) => format!("{var}={} is not a file", p.display()),
                None => format!("{var} is unset"),
            };
            skip_launcher(&format!("{why} (eval \"$(scripts/launchers)\" sets it)"));
            None
        }
    }
}

/// The wrapper each rank runs in: our command, its stdout, stderr and exit
/// status in files of its own (mpirun's forwarding would mix the ranks').
const WRAP: &str = "\"$0\" \"$@\" >\"$NCCL_FIND_TEST_OUT/out.$OMPI_COMM_WORLD_RANK\" \
                    2>\"$NCCL_FIND_TEST_OUT/err.$OMPI_COMM_WORLD_RANK\"; s=$?; \
                    echo $s >\"$NCCL_FIND_TEST_OUT/status.$OMPI_COMM_WORLD_RANK\"; exit $s";

/// `sh -c WRAP nccl-find smoke --lib LIB --rendezvous-only --timeout SECS`,
/// the wrapper first checking that the rank's TMPDIR is `tmp`.
fn ours(tmp: &TmpDir, lib: &Path, secs: &str) -> Vec<std::ffi::OsString> {
    ours_with(tmp, "", &[], lib, secs)
}

/// [`ours`], the wrapper running `before` (lines of sh) after its check,
/// with `pre` (`env NAME=VALUE`) before the command.
fn ours_with(
    tmp: &TmpDir,
    before: &str,
    pre: &[&str],
    lib: &Path,
    secs: &str,
) -> Vec<std::ffi::OsString> {
    let wrap = format!("{} {before} {WRAP}", tmp.sh_check());
    let mut v: Vec<std::ffi::OsString> = vec!["sh".into(), "-c".into(), wrap.into()];
    v.extend(pre.iter().map(Into::into));
    v.push(env!("CARGO_BIN_EXE_nccl-find").into());
    v.extend(["smoke".into(), "--lib".into(), lib.as_os_str().to_owned()]);
    v.extend(["--rendezvous-only".into(), "--timeout".into(), secs.into()]);
    v
}

/// Runs `mpirun` (as root too, more ranks than cores) with `args`, the
/// ranks' files going to `d`, and `tmp` the TMPDIR of the whole job (mpirun
/// passes its environment on to the ranks; its own session directory goes
/// there too, and it removes it): its exit status, and what it said itself.
fn mpirun_in(
    mpirun: &Path,
    d: &Path,
    tmp: &TmpDir,
    args: &[std::ffi::OsString],
) -> (Option<i32>, String) {
    let out = without_launchers(&mut Command::new(mpirun))
        .args(["--allow-run-as-root", "--oversubscribe"])
        .args(args)
        .env("NCCL_FIND_TEST_OUT", d)
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = format!(
        "mpirun's stdout: {}\nmpirun's stderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), said)
}

fn read(d: &Path, what: &str, rank: usize) -> String {
    std::fs::read_to_string(d.join(format!("{what}.{rank}")))
        .unwrap_or_else(|e| panic!("{what}.{rank}: {e}"))
}

/// The launcher's version line, checked to be Open MPI `major`.
fn version(mpirun: &Path, major: &str) -> String {
    let out = Command::new(mpirun).arg("--version").output().unwrap();
    let v = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    eprintln!("{}: {v}", mpirun.display());
    // "mpirun (Open MPI) 5.0.11"; Debian's mpirun.openmpi: "mpirun.openmpi
    // (OpenRTE) 4.1.4".
    let number = v.split_whitespace().last().unwrap_or_default();
    assert!(
        (v.contains("(Open MPI) ") || v.contains("(OpenRTE) "))
            && number.starts_with(&format!("{major}.")),
        "{v}"
    );
    v
}

/// The text between `start` and the next `end` in `s`.
fn between<'a>(s: &'a str, start: &str, end: &str) -> &'a str {
    let i = s
        .find(start)
        .unwrap_or_else(|| panic!("no {start:?} in {s:?}"))
        + start.len();
    let j = s[i..]
        .find(end)
        .unwrap_or_else(|| panic!("no {end:?} after {start:?} in {s:?}"))
        + i;
    &s[i..j]
}

/// Runs 4 processes under `mpirun` with no flags of ours but the library,
/// each writing to its own files (mpirun's forwarding would mix them), and
/// checks every one: the exchange line (`pmix`, through one of
/// `expect_lib`), its local rank (OMPI_COMM_WORLD_LOCAL_RANK's value, as
/// the wrapper saw it: on a 2-core machine Open MPI 5 gives ranks 0 to 3
/// local ranks 0, 2, 1, 3, Open MPI 4 the rank), one unique id, first ranks
/// 0..3, every verdict.
fn four_ranks_meet(mpirun: &Path, major: &str, expect_lib: &[PathBuf]) {
    let Some(lib) = wheel_lib() else { return };
    version(mpirun, major);
    let d = scratch(major);
    let env = scratch(&format!("{major}-env"));
    let tmp = TmpDir::new(&format!("openmpi-{major}"));
    let mut args: Vec<std::ffi::OsString> = vec!["-np".into(), "4".into()];
    let record = sh_record(
        &env,
        "OMPI_COMM_WORLD_RANK",
        &["OMPI_COMM_WORLD_LOCAL_RANK"],
    );
    args.extend(ours_with(&tmp, &record, &[], &lib, "60"));
    let (status, launcher_said) = mpirun_in(mpirun, &d, &tmp, &args);
    assert_eq!(status, Some(0), "{launcher_said}");
    assert_eq!(
        names(&d),
        [
            "err.0", "err.1", "err.2", "err.3", "out.0", "out.1", "out.2", "out.3", "status.0",
            "status.1", "status.2", "status.3"
        ],
        "{launcher_said}"
    );
    let mut ids = Vec::new();
    let mut namespaces = Vec::new();
    let mut files = Vec::new();
    let mut locals = Vec::new();
    for r in 0..4 {
        let stdout = read(&d, "out", r);
        let stderr = read(&d, "err", r);
        assert_eq!(stderr, "", "rank {r}");
        assert_eq!(read(&d, "status", r), "0\n", "rank {r}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 5, "rank {r}: {stdout}");
        let p = format!("[rank {r}] ");
        // The exchange line: pmix, its namespace, the library loaded.
        let ex = lines[0];
        assert!(
            ex.starts_with(&format!(
                "{p}note: exchange: pmix via mpirun (Open MPI), at PMIx namespace \""
            )),
            "{ex}"
        );
        assert!(
            ex.ends_with(
                " (from PMIX_NAMESPACE, PMIX_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK)"
            ),
            "{ex}"
        );
        namespaces.push(between(ex, "PMIx namespace \"", "\"").to_string());
        let server = between(ex, "(server PMIx \"", "\")");
        assert!(!server.is_empty(), "{ex}");
        files.push(PathBuf::from(between(ex, "through \"", "\"")));
        let client = between(ex, "\", \"", "\" (from");
        assert!(!client.is_empty(), "{ex}");
        if r == 0 {
            eprintln!("PMIx server {server}, client {client}");
        }
        assert_eq!(
            lines[1],
            format!("{p}NCCL 2.21.5 from {}", lib.display()),
            "rank {r}"
        );
        let local = recorded(&env, "OMPI_COMM_WORLD_LOCAL_RANK", r);
        assert_eq!(lines[2], format!("{p}note: local rank {local}"), "rank {r}");
        locals.push(local);
        let id = lines[3]
            .strip_prefix(&format!("{p}note: rendezvous: nranks 4 first_rank {r} id "))
            .unwrap_or_else(|| panic!("rank {r}: {}", lines[3]));
        assert_eq!(id.len(), 16, "{id}");
        ids.push(id.to_string());
        let verdict = if r == 0 {
            format!(
                "{p}OK: 4 rank(s) met, no all-reduce run (--rendezvous-only), 3 other process(es) agree ("
            )
        } else {
            format!("{p}OK: 4 rank(s) met, no all-reduce run (--rendezvous-only) (")
        };
        assert!(lines[4].starts_with(&verdict), "rank {r}: {}", lines[4]);
        assert!(lines[4].ends_with(" s)"), "rank {r}: {}", lines[4]);
    }
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    assert!(
        namespaces
            .iter()
            .all(|n| *n == namespaces[0] && !n.is_empty()),
        "{namespaces:?}"
    );
    assert!(files.iter().all(|f| *f == files[0]), "{files:?}");
    let loaded = std::fs::canonicalize(&files[0]).unwrap();
    let expected: Vec<PathBuf> = expect_lib
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    assert!(
        expected.contains(&loaded),
        "loaded {} , expected one of {expected:?}",
        loaded.display()
    );
    // Each local rank once.
    locals.sort();
    assert_eq!(locals, ["0", "1", "2", "3"]);
    tmp.assert_empty(&launcher_said);
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::remove_dir_all(&env).unwrap();
}

#[test]
fn open_mpi_5_from_pypi_meets_through_its_own_pmix() {
    let Some(mpirun) = launcher("NCCL_FIND_OMPI5_MPIRUN") else {
        return;
    };
    // The wheel's install: bin/mpirun, and its PMIx in lib/openmpi (the
    // file its libmpi loads, through its RUNPATH $ORIGIN/openmpi).
    let prefix = mpirun.parent().unwrap().parent().unwrap();
    four_ranks_meet(&mpirun, "5", &[prefix.join("lib/openmpi/libpmix.so.2")]);
}

/// Open MPI 4.1 built with its internal PMIx (PyPI's wheel) has no
/// libpmix.so.2: the PMIx client is inside its libopen-pal.so.40, and that
/// is the one loaded, before the system's libpmix (the server's own PMIx
/// version, 3.2).
#[test]
fn open_mpi_4_from_pypi_meets_through_the_pmix_inside_its_libopen_pal() {
    let Some(mpirun) = launcher("NCCL_FIND_OMPI41_MPIRUN") else {
        return;
    };
    let prefix = mpirun.parent().unwrap().parent().unwrap();
    for own in [
        "lib/libpmix.so.2",
        "lib/openmpi/libpmix.so.2",
        "lib64/libpmix.so.2",
    ] {
        assert!(
            !prefix.join(own).exists(),
            "{own}: not an internal-PMIx build"
        );
    }
    four_ranks_meet(&mpirun, "4", &[prefix.join("lib/libopen-pal.so.40")]);
}

#[test]
fn debians_open_mpi_4_meets_through_the_systems_pmix() {
    let Some(mpirun) = launcher("NCCL_FIND_OMPI4_MPIRUN") else {
        return;
    };
    // Debian's libpmix2: /usr/lib/<multiarch>/libpmix.so.2, found by the
    // loader's search.
    let mut system = vec![PathBuf::from("/usr/lib/libpmix.so.2")];
    for e in std::fs::read_dir("/usr/lib").unwrap().flatten() {
        system.push(e.path().join("libpmix.so.2"));
    }
    four_ranks_meet(&mpirun, "4", &system);
}

/// Rank 1 of 2 never runs nccl-find (mpirun starts `sleep` in its place):
/// rank 0 waits in PMIx_Fence, fails at its deadline (5 s, and the 2 s a
/// backend has to say what timed out) with the words that say so, and
/// mpirun ends the job.
fn a_rank_that_never_comes(mpirun: &Path, major: &str) {
    let Some(lib) = wheel_lib() else { return };
    version(mpirun, major);
    let d = scratch(&format!("{major}-never"));
    let tmp = TmpDir::new(&format!("openmpi-{major}-never"));
    let mut args: Vec<std::ffi::OsString> = vec!["-np".into(), "1".into()];
    args.extend(ours(&tmp, &lib, "5"));
    args.extend([":", "-np", "1", "sleep", "300"].map(Into::into));
    let t = std::time::Instant::now();
    let (status, launcher_said) = mpirun_in(mpirun, &d, &tmp, &args);
    let took = t.elapsed();
    assert!(matches!(status, Some(s) if s != 0), "{launcher_said}");
    assert!(took < std::time::Duration::from_secs(200), "{took:?}");
    assert_eq!(names(&d), ["err.0", "out.0", "status.0"], "{launcher_said}");
    assert_eq!(read(&d, "status", 0), "1\n");
    let stdout = read(&d, "out", 0);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines[0].starts_with(
            "[rank 0] note: exchange: pmix via mpirun (Open MPI), at PMIx namespace \""
        ),
        "{stdout}"
    );
    let at = between(lines[0], ", at ", " (from PMIX_NAMESPACE");
    let failed = format!(
        "FAILED: mpirun (Open MPI): the processes did not all meet through {at} within 5 s: a rank never \
         came (it failed to start, or was started outside this job), or the launcher's server stopped \
         answering. Check every rank's output, or raise --timeout ("
    );
    assert!(
        lines[3].starts_with(&format!("[rank 0] {failed}")),
        "{stdout}"
    );
    let stderr = read(&d, "err", 0);
    assert!(
        stderr.starts_with(&format!("nccl-find smoke: {failed}")) && stderr.lines().count() == 1,
        "{stderr}"
    );
    tmp.assert_empty(&launcher_said);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn open_mpi_5_a_rank_that_never_comes_ends_at_the_deadline() {
    if let Some(mpirun) = launcher("NCCL_FIND_OMPI5_MPIRUN") {
        a_rank_that_never_comes(&mpirun, "5");
    }
}

#[test]
fn open_mpi_4_a_rank_that_never_comes_ends_at_the_deadline() {
    if let Some(mpirun) = launcher("NCCL_FIND_OMPI4_MPIRUN") {
        a_rank_that_never_comes(&mpirun, "4");
    }
}

/// One process, whose OMPI_COMM_WORLD_SIZE says 2: the PMIx server's
/// `pmix.job.size` (read from the real server, PMIx 4 and 5) says 1, and
/// the process fails at once, saying both.
fn a_world_size_the_server_denies(mpirun: &Path, major: &str) {
    let Some(lib) = wheel_lib() else { return };
    version(mpirun, major);
    let d = scratch(&format!("{major}-size"));
    let tmp = TmpDir::new(&format!("openmpi-{major}-size"));
    let mut args: Vec<std::ffi::OsString> = vec!["-np".into(), "1".into()];
    args.extend(ours_with(
        &tmp,
        "",
        &["env", "OMPI_COMM_WORLD_SIZE=2"],
        &lib,
        "60",
    ));
    let (status, launcher_said) = mpirun_in(mpirun, &d, &tmp, &args);
    assert!(matches!(status, Some(s) if s != 0), "{launcher_said}");
    assert_eq!(names(&d), ["err.0", "out.0", "status.0"], "{launcher_said}");
    assert_eq!(read(&d, "status", 0), "1\n");
    let failed =
        "FAILED: mpirun (Open MPI): the PMIx server says the job has 1 process(es), but the \
                  launcher's variables say 2. Or pass --rank, --world-size and --init tcp://HOST:PORT to meet \
                  without the launcher's server (";
    let stdout = read(&d, "out", 0);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines[0].starts_with(
            "[rank 0] note: exchange: pmix via mpirun (Open MPI), at PMIx namespace \""
        ),
        "{stdout}"
    );
    assert!(
        lines[3].starts_with(&format!("[rank 0] {failed}")),
        "{stdout}"
    );
    let stderr = read(&d, "err", 0);
    assert!(
        stderr.starts_with(&format!("nccl-find smoke: {failed}")) && stderr.lines().count() == 1,
        "{stderr}"
    );
    tmp.assert_empty(&launcher_said);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn open_mpi_5_a_world_size_the_server_denies_is_refused() {
    if let Some(mpirun) = launcher("NCCL_FIND_OMPI5_MPIRUN") {
        a_world_size_the_server_denies(&mpirun, "5");
    }
}

#[test]
fn open_mpi_4_a_world_size_the_server_denies_is_refused() {
    if let Some(mpirun) = launcher("NCCL_FIND_OMPI4_MPIRUN") {
        a_world_size_the_server_denies(&mpirun, "4");
    }
}

/// Ctrl-C at `mpirun` while its ranks wait in the rendezvous: ranks 0 and 1
/// run nccl-find (exec'd by their wrapper, so each is the rank's process
/// that mpirun signals), rank 2 a `sleep`, so the two wait in PMIx_Fence
/// (for 120 s, their --timeout). A second after both have said their local
/// rank (the last line before the rendezvous; each has made its NCCL log
/// directory by then), the test sends SIGINT to mpirun's process group, as
/// a terminal's Ctrl-C does (Open MPI puts each rank in a group of its own:
/// mpirun gets it, and sends each rank SIGCONT, then, 250 ms (Open MPI 5)
/// or 1 s (4) later, SIGTERM and at once SIGKILL: strace shows them 0.2 to
/// 0.5 ms apart). Within a minute mpirun must end (exit 1), every process
/// of the job be gone, and the job's TMPDIR (mpirun's session directory,
/// the ranks' NCCL logs) be empty; a rank says nothing but that it was
/// interrupted.
fn ctrl_c_while_the_ranks_wait(mpirun: &Path, major: &str) {
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};
    let Some(lib) = wheel_lib() else { return };
    version(mpirun, major);
    let d = scratch(&format!("{major}-sigint"));
    let tmp = TmpDir::new(&format!("openmpi-{major}-sigint"));
    // Every process of the job inherits it: how the test finds them.
    let mark = ("NCCL_FIND_TEST_JOB", unique("openmpi-sigint"));
    let wrap = format!(
        "{} exec \"$0\" \"$@\" >\"$NCCL_FIND_TEST_OUT/out.$OMPI_COMM_WORLD_RANK\" \
         2>\"$NCCL_FIND_TEST_OUT/err.$OMPI_COMM_WORLD_RANK\"",
        tmp.sh_check()
    );
    let file = |n: &str| std::fs::File::create(d.join(n)).unwrap();
    let mut child = without_launchers(&mut Command::new(mpirun))
        .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .args(["sh", "-c", &wrap, env!("CARGO_BIN_EXE_nccl-find"), "smoke"])
        .arg("--lib")
        .arg(&lib)
        .args(["--rendezvous-only", "--timeout", "120"])
        .args([":", "-np", "1", "sleep", "300"])
        .env("NCCL_FIND_TEST_OUT", &d)
        .env("TMPDIR", tmp.path())
        .env(mark.0, &mark.1)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(file("mpirun.out"))
        .stderr(file("mpirun.err"))
        .spawn()
        .unwrap();
    let mark = format!("{}={}", mark.0, mark.1);
    let read_or_empty = |n: &str| std::fs::read_to_string(d.join(n)).unwrap_or_default();
    let said = |tmp: &TmpDir| {
        format!(
            "ranks: {:?} {:?} {:?} {:?}\nmpirun: {}{}\nTMPDIR: {:?}",
            read_or_empty("out.0"),
            read_or_empty("err.0"),
            read_or_empty("out.1"),
            read_or_empty("err.1"),
            read_or_empty("mpirun.out"),
            read_or_empty("mpirun.err"),
            tmp.left()
        )
    };
    // Both ranks at the rendezvous: each has said its local rank, the last
    // thing it says before it.
    let end = Instant::now() + Duration::from_secs(120);
    loop {
        let waiting = (0..2).all(|r| {
            read_or_empty(&format!("out.{r}"))
                .lines()
                .nth(2)
                .is_some_and(|l| l.starts_with(&format!("[rank {r}] note: local rank ")))
        });
        if waiting {
            break;
        }
        if let Some(s) = child.try_wait().unwrap() {
            panic!("mpirun ended ({s}) before its ranks waited\n{}", said(&tmp));
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("the ranks never waited in the rendezvous\n{}", said(&tmp));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Well inside the wait (its deadline is 120 s away).
    std::thread::sleep(Duration::from_secs(1));
    assert!(child.try_wait().unwrap().is_none(), "{}", said(&tmp));
    eprintln!(
        "Open MPI {major}: SIGINT with the job's TMPDIR holding {:?}",
        tmp.left()
    );
    let pgid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on the process group of the mpirun this test started.
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGINT) }, 0);
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mpirun still ran a minute after SIGINT\n{}", said(&tmp));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mpirun_took = t.elapsed();
    let mut left = marked_processes(&mark);
    while !left.is_empty() && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
        left = marked_processes(&mark);
    }
    if !left.is_empty() {
        let named = named(&left);
        for pid in &left {
            // SAFETY: kill(2) on a process of the job this test started.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
        panic!(
            "still running a minute after SIGINT: {named:?}\n{}",
            said(&tmp)
        );
    }
    eprintln!(
        "Open MPI {major}: mpirun ended {mpirun_took:?} after SIGINT, every process of the job {:?} after",
        t.elapsed()
    );
    assert_eq!(status.code(), Some(1), "{status}\n{}", said(&tmp));
    assert_eq!(
        names(&d),
        [
            "err.0",
            "err.1",
            "mpirun.err",
            "mpirun.out",
            "out.0",
            "out.1"
        ],
        "{}",
        said(&tmp)
    );
    for r in 0..2 {
        // Three lines, the last the local rank: no verdict, as it was
        // interrupted.
        let out = read(&d, "out", r);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{}", said(&tmp));
        assert!(
            lines[0].starts_with(&format!(
                "[rank {r}] note: exchange: pmix via mpirun (Open MPI), at PMIx namespace \""
            )),
            "{}",
            said(&tmp)
        );
        // What the handler says, unless mpirun's SIGKILL came first (it
        // follows its SIGTERM within a millisecond); nothing else.
        let err = read(&d, "err", r);
        assert!(
            err.is_empty()
                || err
                    == "nccl-find smoke: interrupted (SIGTERM); the files this run wrote were removed\n",
            "rank {r}\n{}",
            said(&tmp)
        );
    }
    tmp.assert_empty(&said(&tmp));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn open_mpi_5_ctrl_c_while_the_ranks_wait_leaves_nothing() {
    if let Some(mpirun) = launcher("NCCL_FIND_OMPI5_MPIRUN") {
        ctrl_c_while_the_ranks_wait(&mpirun, "5");
    }
}

#[test]
fn open_mpi_4_ctrl_c_while_the_ranks_wait_leaves_nothing() {
    if let Some(mpirun) = launcher("NCCL_FIND_OMPI4_MPIRUN") {
        ctrl_c_while_the_ranks_wait(&mpirun, "4");
    }
}
