//! What the end-to-end tests of `nccl-find smoke` share: the wheel's
//! library, a finished process's output, a free port, a job's own
//! `TMPDIR` (and the check that nothing was left in it). Each test file
//! uses some of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

#[path = "../../../tests/common/shared.rs"]
mod shared;
#[allow(unused_imports)]
pub use shared::{scratch, STEERING};

/// The path scripts/test puts in the variable `var` (the wheel cache, the
/// venv of the pip-installed command); `None` (with a line saying why)
/// where it is unset, unless the test command requires it.
pub fn required_path(var: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(v) => Some(PathBuf::from(v)),
        None => {
            assert!(
                std::env::var_os("NCCL_FIND_REQUIRE_WHEELS").is_none(),
                "{var} is unset; run scripts/test"
            );
            eprintln!("skipped: {var} is unset (scripts/test sets it)");
            None
        }
    }
}

/// The cache of real NCCL wheels scripts/test keeps (`NCCL_FIND_WHEELS`).
pub fn wheels() -> Option<PathBuf> {
    required_path("NCCL_FIND_WHEELS")
}

/// The cu12 2.21.5 wheel's `libnccl.so.2` that scripts/test caches.
pub fn wheel_lib() -> Option<PathBuf> {
    Some(wheels()?.join("nvidia_nccl_cu12-2.21.5/nvidia/nccl/lib/libnccl.so.2"))
}

/// The newest release of `series` (`nvidia_nccl_cu12`) in the wheel cache:
/// its directory.
pub fn newest_wheel(w: &Path, series: &str) -> PathBuf {
    let mut found: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(w)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let v = name.strip_prefix(series)?.strip_prefix('-')?;
            Some((
                v.split('.').map(|x| x.parse().unwrap_or(0)).collect(),
                e.path(),
            ))
        })
        .collect();
    found.sort();
    found.pop().expect("a wheel of the series").1
}

/// Exit status, stdout and stderr of a finished process.
pub fn text(o: &Output) -> (i32, String, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Removes from `c`'s environment every variable of a launcher that the
/// test's own environment holds (a CI runner under Slurm or torchrun,
/// say), so that only what the test sets reaches the command: torchrun's,
/// Open MPI's, PMI's and PMIx's, Slurm's, Hydra's local ranks, torch's
/// dialect hints and our own token and Slurm port.
pub fn without_launchers(c: &mut Command) -> &mut Command {
    const PREFIXES: [&str; 9] = [
        "SLURM",
        "PMI",
        "OMPI_",
        "TORCHELASTIC",
        "NCCL_FIND_SLURM",
        "JOB_",
        "JOBSET_",
        "LWS_",
        "KUBERNETES_",
    ];
    const NAMES: [&str; 12] = [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "MPI_LOCALRANKID",
        "MPI_LOCALNRANKS",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_FIND_TOKEN",
        "CUDA_VISIBLE_DEVICES",
    ];
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if PREFIXES.iter().any(|p| k.starts_with(p)) || NAMES.contains(&&*k) {
            c.env_remove(&*k);
        }
    }
    c
}

/// The names of the entries of `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A `libnccl.so.2` whose `NCCL version` text says `version` (`2.26.2`,
/// six characters): a fixture library's, its text rewritten, in a scratch
/// directory of its own.
pub fn fake_nccl(version: &str) -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture = here.join("../fixtures/trees/dpkg/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3");
    let mut b = std::fs::read(fixture).unwrap();
    let mark = b"NCCL version 2.28.3";
    let at = b.windows(mark.len()).position(|w| w == mark).unwrap() + 13;
    assert_eq!(version.len(), 6, "{version}");
    b[at..at + 6].copy_from_slice(version.as_bytes());
    let dir = scratch(&unique(&format!("nccl-{version}")));
    let lib = dir.join("libnccl.so.2");
    std::fs::write(&lib, b).unwrap();
    lib
}

/// A name no other scratch thing has: `what`, this process's id and the
/// clock.
pub fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{what}-{}-{nanos}", std::process::id())
}

/// A fresh, empty directory that a job gets as its `TMPDIR`, and nothing
/// else does: each rank's NCCL log directory (`nccl-find-smoke-PID-…`), and
/// anything else the run or its launcher writes to the temp dir, lands
/// there, so that [`TmpDir::assert_empty`] is the test's "nothing left
/// behind". Removed when dropped.
pub struct TmpDir(PathBuf);

impl TmpDir {
    pub fn new(what: &str) -> TmpDir {
        let d = std::env::temp_dir().join(format!("nccl-find-tmpdir-{}", unique(what)));
        // A new directory: never one that was there before.
        std::fs::create_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        let s = d.to_str().expect("a temp dir named in UTF-8");
        assert!(!s.contains('\''), "{s}: a quote would break the sh lines");
        TmpDir(d)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A line of sh for a rank's wrapper to run first: ends the rank (exit
    /// 99, saying why on stderr) unless its `TMPDIR` is this directory. A
    /// launcher that gave its ranks a `TMPDIR` of its own would make
    /// [`TmpDir::assert_empty`] prove nothing.
    pub fn sh_check(&self) -> String {
        let d = self.0.display();
        format!(
            "if [ \"$TMPDIR\" != '{d}' ]; then echo \"nccl-find test: this rank's TMPDIR is '$TMPDIR', not \
             '{d}': the launcher did not pass it on\" >&2; exit 99; fi;"
        )
    }

    /// `sh -c SCRIPT`, to go before a rank's command and its arguments:
    /// runs `before` (lines of sh) after [`TmpDir::sh_check`], then execs the
    /// command, which is then the rank's process itself.
    pub fn exec_checked(&self, before: &str) -> Vec<std::ffi::OsString> {
        vec![
            "sh".into(),
            "-c".into(),
            format!("{} {before} exec \"$0\" \"$@\"", self.sh_check()).into(),
        ]
    }

    /// What is in it, every level down, each as `path (kind)`, sorted.
    pub fn left(&self) -> Vec<String> {
        fn walk(root: &Path, d: &Path, out: &mut Vec<String>) {
            let Ok(entries) = std::fs::read_dir(d) else {
                out.push(format!("{} (unreadable)", d.display()));
                return;
            };
            for e in entries.flatten() {
                let p = e.path();
                let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
                match std::fs::symlink_metadata(&p) {
                    Ok(m) if m.is_dir() => {
                        out.push(format!("{rel}/ (directory)"));
                        walk(root, &p, out);
                    }
                    Ok(m) if m.file_type().is_symlink() => out.push(format!("{rel} (link)")),
                    Ok(m) if m.is_file() => out.push(format!("{rel} (file, {} bytes)", m.len())),
                    Ok(_) => out.push(format!("{rel} (socket, fifo or device)")),
                    Err(e) => out.push(format!("{rel} ({e})")),
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.0, &self.0, &mut out);
        out.sort();
        out
    }

    /// Asserts that the job left nothing in its `TMPDIR` (and that the
    /// directory is still there); `context` (the job's output, say) goes in
    /// the failure's message.
    pub fn assert_empty(&self, context: &str) {
        assert!(
            self.0.is_dir(),
            "the job's TMPDIR {} is gone\n{context}",
            self.0.display()
        );
        let left = self.left();
        assert!(
            left.is_empty(),
            "left behind in the job's TMPDIR {}: {left:#?}\n{context}",
            self.0.display()
        );
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A line of sh for a rank's wrapper: writes the value of each of `vars`
/// in the rank's environment to `into/NAME.RANK` (RANK: the value of
/// `rank_var`), for the test to hold up against what the rank said
/// ([`recorded`]).
pub fn sh_record(into: &Path, rank_var: &str, vars: &[&str]) -> String {
    let d = into.to_str().expect("a dir named in UTF-8");
    assert!(!d.contains('\''), "{d}");
    vars.iter()
        .map(|v| format!("printf '%s' \"${v}\" >'{d}/{v}'.\"${rank_var}\";"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What [`sh_record`] wrote for `var` of `rank`.
pub fn recorded(into: &Path, var: &str, rank: usize) -> String {
    let f = into.join(format!("{var}.{rank}"));
    std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()))
}

/// Whether the test command requires every launcher
/// (`NCCL_FIND_REQUIRE_LAUNCHERS=1`, as scripts/test sets it): a launcher
/// that is missing is then a failure, not a skip.
pub fn launchers_required() -> bool {
    std::env::var_os("NCCL_FIND_REQUIRE_LAUNCHERS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Says why a launcher's test cannot run here: a line saying it skipped,
/// or, where launchers are required, a failure.
pub fn skip_launcher(why: &str) {
    assert!(
        !launchers_required(),
        "NCCL_FIND_REQUIRE_LAUNCHERS=1, but {why}"
    );
    eprintln!("skipped: {why}");
}

/// Processes (other than this one) whose environment holds `mark`, a whole
/// `NAME=VALUE`: what a job started with that variable left running. A
/// zombie has no environment left, and is not one.
pub fn marked_processes(mark: &str) -> Vec<u32> {
    use std::io::Read;
    let me = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let mut env = Vec::new();
        let Ok(f) = std::fs::File::open(p.path().join("environ")) else {
            continue;
        };
        if f.take(1 << 20).read_to_end(&mut env).is_err() {
            continue;
        }
        if env.split(|b| *b == 0).any(|v| v == mark.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

/// Each of `pids` with its command name, for a message.
pub fn named(pids: &[u32]) -> Vec<String> {
    pids.iter()
        .map(|p| {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            format!("{p} {}", comm.trim())
        })
        .collect()
}

/// Whether process `pid` still runs (a zombie does not).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "PID (COMM) STATE …": the state follows the last ')'.
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Says why the test cannot run here: a failure under
/// `NCCL_FIND_REQUIRE_NETNS=1`, else a skip.
pub fn skip_netns(why: &str) {
    assert!(
        std::env::var("NCCL_FIND_REQUIRE_NETNS").as_deref() != Ok("1"),
        "NCCL_FIND_REQUIRE_NETNS=1, but {why}"
    );
    eprintln!("skipped: {why}");
}

/// Whether this test may make namespaces (root, and `ip netns`); says why
/// not ([`skip`]) where it may not.
pub fn namespaces_can_be_made() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip_netns("network namespaces need root");
        return false;
    }
    if let Err(e) = ip(&["netns", "list"]) {
        skip_netns(&format!("`ip netns` is not available ({e})"));
        return false;
    }
    true
}

pub fn ip(args: &[&str]) -> Result<(), String> {
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
