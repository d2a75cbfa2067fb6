//! `nccl-find smoke` under Hydra's real `mpiexec`, with no flags but the
//! library: MPICH's and Intel MPI's, from PyPI (scripts/launchers installs
//! them and says where, in NCCL_FIND_MPICH_MPIEXEC and
//! NCCL_FIND_IMPI_MPIEXEC). The processes meet through the launcher's own
//! PMI-1 server, over the socket in PMI_FD. No GPU is needed
//! (`--rendezvous-only`; the unique id comes from a real libnccl.so.2 from
//! a wheel).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::scratch;
use common::{recorded, sh_record, skip_launcher, wheel_lib, without_launchers, TmpDir};

/// The launcher scripts/launchers installed, with its version; `None` (the
/// test skips) when it is not there, unless launchers are required.
fn mpiexec(var: &str) -> Option<(PathBuf, String)> {
    let path = match std::env::var_os(var) {
        Some(p) if Path::new(&p).is_file() => PathBuf::from(p),
        got => {
            let why = match got {
                Some(p) => format!("{var}={} is not a file", Path::new(&p).display()),
                None => format!("{var} is unset"),
            };
            skip_launcher(&format!(
                "{why} (eval \"$(scripts/launchers)\" installs it)"
            ));
            return None;
        }
    };
    let out = Command::new(&path).arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let version = text
        .lines()
        .find(|l| l.contains("Version"))
        .unwrap_or_else(|| panic!("{} --version: {text:?}", path.display()))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!("{var}: {} ({version})", path.display());
    Some((path, version))
}

/// Runs `mpiexec ARGS` in `dir`, `tmp` the job's TMPDIR (Hydra passes its
/// environment on to the ranks), with none of the other launchers'
/// variables around, killed (and the test failed) after two minutes.
fn run(
    mpiexec: &Path,
    dir: &Path,
    tmp: &TmpDir,
    args: &[std::ffi::OsString],
) -> (i32, String, String, Duration) {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "10", "120"]).arg(mpiexec).args(args);
    without_launchers(&mut cmd).env("TMPDIR", tmp.path());
    let start = Instant::now();
    let o: Output = cmd.current_dir(dir).stdin(Stdio::null()).output().unwrap();
    let took = start.elapsed();
    let code = o.status.code().unwrap_or(-1);
    assert_ne!(code, 124, "mpiexec ran for two minutes: {o:?}");
    (
        code,
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        took,
    )
}

/// The one line of `stdout` starting with `prefix`.
fn line<'a>(stdout: &'a str, prefix: &str) -> &'a str {
    let found: Vec<&str> = stdout.lines().filter(|l| l.starts_with(prefix)).collect();
    assert_eq!(found.len(), 1, "{prefix:?} in {stdout}");
    found[0]
}

/// Four processes meet through the launcher's PMI-1 server, with no flags
/// of ours: `mpiexec PLACE -n 4`. Each rank's local rank is what Hydra put
/// in its MPI_LOCALRANKID, which must be `locals` (as the wrapper saw it).
fn four_ranks_meet(var: &str, name: &str, place: &[&str], locals: [&str; 4]) {
    let Some(lib) = wheel_lib() else { return };
    let Some((mpiexec, _)) = mpiexec(var) else {
        return;
    };
    let dir = scratch(&format!("{name}-{var}"));
    let env = scratch(&format!("{name}-env-{var}"));
    let tmp = TmpDir::new(&format!("hydra-{name}-{var}"));
    let bin = env!("CARGO_BIN_EXE_nccl-find");
    let lib = lib.to_str().unwrap();
    // Each rank is nccl-find itself, exec'd once its TMPDIR is checked and
    // its PMI variables kept.
    let mut args: Vec<std::ffi::OsString> = place.iter().map(Into::into).collect();
    args.extend(["-n".into(), "4".into()]);
    args.extend(tmp.exec_checked(&sh_record(&env, "PMI_RANK", &["PMI_FD", "MPI_LOCALRANKID"])));
    args.extend(
        [
            bin,
            "smoke",
            "--lib",
            lib,
            "--rendezvous-only",
            "--timeout",
            "60",
        ]
        .map(Into::into),
    );
    let (code, out, err, _) = run(&mpiexec, &dir, &tmp, &args);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let mut ids = Vec::new();
    for (r, want_local) in locals.iter().enumerate() {
        let fd = recorded(&env, "PMI_FD", r);
        assert!(fd.parse::<u32>().is_ok_and(|fd| fd > 2), "PMI_FD {fd:?}");
        assert_eq!(
            line(&out, &format!("[rank {r}] note: exchange: ")),
            format!(
                "[rank {r}] note: exchange: pmi1 via mpiexec (Hydra), at PMI-1 on fd {fd} (from PMI_FD, \
                 PMI_RANK, PMI_SIZE, MPI_LOCALRANKID)"
            )
        );
        assert_eq!(
            line(&out, &format!("[rank {r}] NCCL ")),
            format!("[rank {r}] NCCL 2.21.5 from {lib}")
        );
        let local = recorded(&env, "MPI_LOCALRANKID", r);
        assert_eq!(local, *want_local, "MPI_LOCALRANKID of rank {r}");
        assert_eq!(
            line(&out, &format!("[rank {r}] note: local rank")),
            format!("[rank {r}] note: local rank {local}")
        );
        let met = line(&out, &format!("[rank {r}] note: rendezvous: "));
        let id = met
            .strip_prefix(&format!(
                "[rank {r}] note: rendezvous: nranks 4 first_rank {r} id "
            ))
            .unwrap_or_else(|| panic!("{met}"));
        assert_eq!(id.len(), 16, "{met}");
        ids.push(id.to_string());
        let ok = line(&out, &format!("[rank {r}] OK: "));
        let want = if r == 0 {
            "[rank 0] OK: 4 rank(s) met, no all-reduce run (--rendezvous-only), 3 other process(es) agree ("
                .to_string()
        } else {
            format!("[rank {r}] OK: 4 rank(s) met, no all-reduce run (--rendezvous-only) (")
        };
        assert!(ok.starts_with(&want) && ok.ends_with(" s)"), "{ok}");
    }
    assert!(ids.iter().all(|i| *i == ids[0]), "one unique id: {ids:?}");
    assert_eq!(out.lines().count(), 20, "{out}");
    // The launcher's exchange leaves nothing behind.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    tmp.assert_empty(&out);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&env).unwrap();
}

/// Two proxies on this host, as on two nodes: `-launcher fork` starts each
/// here (no ssh), one per name of this host, two ranks each. Ranks 2 and 3
/// are local ranks 0 and 1 of the second.
const TWO_PROXIES: [&str; 6] = [
    "-launcher",
    "fork",
    "-hosts",
    "localhost,127.0.0.1",
    "-ppn",
    "2",
];

/// One rank never takes part (it runs another program: here a wait until
/// rank 0's nccl-find has ended, then exit 0): rank 0 gives up at its
/// --timeout, naming the launcher and what to check. (A rank that exits
/// before the deadline is not asserted: Intel MPI's Hydra sometimes ends the
/// whole job at that exit, and sometimes not. A fixed sleep was not enough:
/// on a loaded machine rank 0 could still be starting when it ended, and
/// MPICH's Hydra then killed it before its verdict.)
fn a_rank_that_never_takes_part_ends_at_the_deadline(var: &str) {
    let Some(lib) = wheel_lib() else { return };
    let Some((mpiexec, _)) = mpiexec(var) else {
        return;
    };
    let dir = scratch(&format!("early-{var}"));
    let done = scratch(&format!("early-done-{var}"));
    let tmp = TmpDir::new(&format!("hydra-early-{var}"));
    let bin = env!("CARGO_BIN_EXE_nccl-find");
    let d = done.to_str().unwrap();
    assert!(!d.contains('\''), "{d}");
    let script = format!(
        r#"{} if [ "$PMI_RANK" = 1 ]; then
  n=0; while [ ! -e '{d}/done' ] && [ $n -lt 1000 ]; do sleep 0.1; n=$((n+1)); done; exit 0
fi
"$0" smoke --lib "$1" --rendezvous-only --timeout 5; s=$?; : >'{d}/done'; exit $s"#,
        tmp.sh_check()
    );
    let args: Vec<std::ffi::OsString> =
        ["-n", "2", "sh", "-c", &script, bin, lib.to_str().unwrap()]
            .map(Into::into)
            .into();
    let (code, out, err, took) = run(&mpiexec, &dir, &tmp, &args);
    let why = "mpiexec (Hydra): the PMI barrier did not complete by the deadline: not all 2 processes \
               reached it. A rank that exited early, failed to start, or runs another program never does \
               (PMI-1 cannot say which). Check every rank's output, or raise --timeout";
    let all = format!("exit {code} after {took:?}\nstdout:\n{out}\nstderr:\n{err}");
    assert_ne!(code, 0, "{all}");
    let failed: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("[rank 0] FAILED: "))
        .collect();
    assert_eq!(failed.len(), 1, "{all}");
    let failed = failed[0];
    assert!(
        failed.starts_with(&format!("[rank 0] FAILED: {why} (")) && failed.ends_with(" s)"),
        "{all}"
    );
    assert_eq!(
        err,
        format!("nccl-find smoke: {}\n", &failed["[rank 0] ".len()..]),
        "{all}"
    );
    assert!(!out.contains("[rank 1]"), "{all}");
    assert!(!out.contains(" OK: "), "{all}");
    // At least rank 0's five seconds; never the two-minute guard, nor rank
    // 1's hundred seconds.
    assert!(took >= Duration::from_secs(5), "{took:?}");
    assert!(took < Duration::from_secs(60), "{took:?}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    tmp.assert_empty(&out);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&done).unwrap();
}

#[test]
fn mpich_four_ranks_meet_through_pmi1() {
    four_ranks_meet("NCCL_FIND_MPICH_MPIEXEC", "meet", &[], ["0", "1", "2", "3"]);
}

#[test]
fn intel_mpi_four_ranks_meet_through_pmi1() {
    four_ranks_meet("NCCL_FIND_IMPI_MPIEXEC", "meet", &[], ["0", "1", "2", "3"]);
}

#[test]
fn mpich_four_ranks_on_two_proxies_take_their_local_ranks() {
    four_ranks_meet(
        "NCCL_FIND_MPICH_MPIEXEC",
        "proxies",
        &TWO_PROXIES,
        ["0", "1", "0", "1"],
    );
}

#[test]
fn intel_mpi_four_ranks_on_two_proxies_take_their_local_ranks() {
    four_ranks_meet(
        "NCCL_FIND_IMPI_MPIEXEC",
        "proxies",
        &TWO_PROXIES,
        ["0", "1", "0", "1"],
    );
}

#[test]
fn mpich_a_rank_that_never_takes_part_ends_at_the_deadline() {
    a_rank_that_never_takes_part_ends_at_the_deadline("NCCL_FIND_MPICH_MPIEXEC");
}

#[test]
fn intel_mpi_a_rank_that_never_takes_part_ends_at_the_deadline() {
    a_rank_that_never_takes_part_ends_at_the_deadline("NCCL_FIND_IMPI_MPIEXEC");
}
