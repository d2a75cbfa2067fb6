//! NCCL's log for one run: captured through `NCCL_DEBUG_FILE` (a file with
//! no name where the filesystem allows, else a private directory), read
//! back for the report (the WARN lines of a failure, the transport lines
//! for the verdict), and never left behind.

use std::path::PathBuf;

/// NCCL's log, captured through NCCL_DEBUG_FILE when the user had not set
/// NCCL_DEBUG: its WARN lines for failures, its INFO lines on the transport
/// for the verdict. With `--json`, a log the user asked for (NCCL_DEBUG set,
/// no NCCL_DEBUG_FILE) would go to stdout, NCCL's default, and break the
/// JSON: it is captured too and copied to stderr at the end (`echo`).
pub struct Capture {
    log: Option<Log>,
    echo: bool,
    /// The directories of runs that are gone (killed) removed at the start.
    swept: Vec<PathBuf>,
}

/// Where NCCL writes its log for this run.
enum Log {
    /// A file with no name in the temporary directory (`O_TMPFILE`), which
    /// NCCL opens as `/proc/self/fd/N`: nothing on disk to remove, even
    /// when the run is killed (mpirun follows SIGTERM with SIGKILL within
    /// a millisecond).
    Unnamed(std::fs::File),
    /// Where the temporary directory cannot hold a file with no name: a
    /// private directory with an owner record, removed at the end, or by a
    /// later run once this one is provably gone.
    Dir(PathBuf),
}

/// The names of the runs' log directories in the temporary directory.
const LOG_DIRS: &str = "nccl-find-smoke-";

impl Log {
    /// A file with no name in `tmp` (when `unnamed` and NCCL can open it
    /// by its `/proc` name), else a run directory.
    fn open(tmp: &std::path::Path, unnamed: bool) -> Option<Log> {
        if unnamed {
            if let Some(f) = unnamed_file(tmp) {
                return Some(Log::Unnamed(f));
            }
        }
        crate::rundir::make(tmp, LOG_DIRS).ok().map(Log::Dir)
    }

    /// What NCCL_DEBUG_FILE says.
    fn nccl_debug_file(&self) -> PathBuf {
        match self {
            Log::Unnamed(f) => proc_name(f),
            Log::Dir(d) => d.join("nccl.%h.%p.log"),
        }
    }
}

/// The name under which this process opens `f` again.
fn proc_name(f: &std::fs::File) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

/// A file with no name in `dir`, readable and writable by this user only,
/// that can be opened again by its `/proc` name (else NCCL, failing to
/// open it, would write to stdout).
fn unnamed_file(dir: &std::path::Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
        .ok()?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(proc_name(&f))
        .ok()?;
    Some(f)
}

impl Capture {
    /// Starts the capture, before NCCL is loaded (it sets `NCCL_DEBUG` and
    /// `NCCL_DEBUG_FILE` while the process has one thread). `json`: the
    /// report goes to stdout as JSON. The log directories killed runs left
    /// are removed first.
    pub fn start(json: bool) -> Capture {
        let tmp = std::env::temp_dir();
        let swept = crate::rundir::sweep(&tmp, LOG_DIRS);
        let users = std::env::var_os("NCCL_DEBUG").is_some();
        let echo = users && json && std::env::var_os("NCCL_DEBUG_FILE").is_none();
        if users && !echo {
            return Capture {
                log: None,
                echo,
                swept,
            };
        }
        // A file of this run's own that no one else can name, so NCCL's log
        // cannot follow a planted link, and nothing is left when the run is
        // killed; or a new private directory (0700, never one that was
        // there before) with an owner record.
        let Some(log) = Log::open(&tmp, true) else {
            return Capture {
                log: None,
                echo,
                swept,
            };
        };
        // Set before NCCL is loaded, while this process has one thread.
        if !users {
            std::env::set_var("NCCL_DEBUG", "INFO");
        }
        std::env::set_var("NCCL_DEBUG_FILE", log.nccl_debug_file());
        if let Log::Dir(d) = &log {
            let d = d.clone();
            nccl_rendezvous::cleanup::on_interrupt(move || {
                let _ = std::fs::remove_dir_all(&d);
            });
        }
        Capture {
            log: Some(log),
            echo,
            swept,
        }
    }

    /// What the start removed, in words (for a note).
    pub fn swept_note(&self) -> Option<String> {
        swept_words(&self.swept)
    }

    /// NCCL's last `n` WARN lines.
    pub fn last_warnings(&self, n: usize) -> Vec<String> {
        self.lines(n, |l| l.contains("WARN"))
    }

    /// NCCL's lines on the paths between ranks (`... via P2P/CUMEM/read`).
    pub fn transport_lines(&self) -> Vec<String> {
        self.lines(4096, |l| l.contains(" via "))
    }

    fn lines(&self, n: usize, keep: impl Fn(&str) -> bool) -> Vec<String> {
        // Only NCCL's log files, regular ones, and the last 4 MiB of each.
        let texts: Vec<String> = match &self.log {
            None => return Vec::new(),
            Some(Log::Unnamed(f)) => tail_of(f, 4 << 20).into_iter().collect(),
            Some(Log::Dir(dir)) => std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .take(64)
                .filter_map(|e| tail(&e.ok()?.path(), 4 << 20))
                .collect(),
        };
        let mut lines: Vec<String> = texts
            .iter()
            .flat_map(|t| t.lines().filter(|l| keep(l)).map(String::from))
            .collect();
        let skip = lines.len().saturating_sub(n);
        lines.drain(..skip);
        lines
    }
}

/// The note on the run directories a start removed; `None`: none.
fn swept_words(swept: &[PathBuf]) -> Option<String> {
    let first = swept.first()?;
    Some(format!(
        "removed {} NCCL log director{} that killed runs left in {} ({}{})",
        swept.len(),
        if swept.len() == 1 { "y" } else { "ies" },
        first
            .parent()
            .map_or(String::new(), |p| p.display().to_string()),
        first.file_name().unwrap_or_default().to_string_lossy(),
        if swept.len() > 1 { ", …" } else { "" }
    ))
}

/// The last `max` bytes of a regular file (links not followed), as text.
fn tail(path: &std::path::Path, max: u64) -> Option<String> {
    if !std::fs::symlink_metadata(path).ok()?.file_type().is_file() {
        return None;
    }
    tail_of(&std::fs::File::open(path).ok()?, max)
}

/// The last `max` bytes of an open file, as text.
fn tail_of(f: &std::fs::File, max: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let len = f.metadata().ok()?.len();
    let mut r = f;
    r.seek(SeekFrom::Start(len.saturating_sub(max))).ok()?;
    let mut b = Vec::new();
    r.take(max).read_to_end(&mut b).ok()?;
    Some(String::from_utf8_lossy(&b).into_owned())
}

impl Capture {
    /// The log the user asked for, to copy to stderr at the end, where it
    /// would have gone to stdout and broken `--json`; none otherwise.
    pub fn echo_lines(&self) -> Vec<String> {
        if self.echo {
            self.lines(usize::MAX, |_| true)
        } else {
            Vec::new()
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(Log::Dir(d)) = &self.log {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{names, scratch};

    /// NCCL's log as NCCL writes it (by the name NCCL_DEBUG_FILE gives,
    /// `%h` and `%p` filled in), and the lines read back.
    fn written(log: &Log) -> Vec<String> {
        let name = log
            .nccl_debug_file()
            .to_string_lossy()
            .replace("%h.%p", "vm.7");
        std::fs::write(
            &name,
            "vm:7 NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/CUMEM\nvm:7 NCCL WARN x\n",
        )
        .unwrap();
        // A Capture over a copy of the log: dropping it would remove a
        // run directory this test still looks into.
        let c = Capture {
            log: Some(match log {
                Log::Unnamed(f) => Log::Unnamed(f.try_clone().unwrap()),
                Log::Dir(d) => Log::Dir(d.clone()),
            }),
            echo: false,
            swept: Vec::new(),
        };
        let lines = [c.transport_lines(), c.last_warnings(10)].concat();
        std::mem::forget(c);
        lines
    }

    #[test]
    fn nccls_log_has_no_name_where_the_filesystem_allows() {
        let d = scratch("unnamed");
        let log = Log::open(&d, true).unwrap();
        assert!(
            matches!(log, Log::Unnamed(_)),
            "ext4, tmpfs and the like take O_TMPFILE"
        );
        assert_eq!(
            written(&log),
            [
                "vm:7 NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/CUMEM",
                "vm:7 NCCL WARN x"
            ]
        );
        assert_eq!(names(&d), Vec::<String>::new());
        drop(log);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn elsewhere_a_run_directory_with_its_owner_record() {
        let d = scratch("dir");
        let log = Log::open(&d, false).unwrap();
        let Log::Dir(run) = &log else {
            panic!("not a directory")
        };
        let run = run.clone();
        assert!(run
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&format!("{LOG_DIRS}{}-", std::process::id())));
        assert_eq!(
            written(&log),
            [
                "vm:7 NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/CUMEM",
                "vm:7 NCCL WARN x"
            ]
        );
        assert_eq!(names(&run), ["nccl.vm.7.log", "owner"]);
        // A live run's directory is not swept; the end removes it.
        assert_eq!(crate::rundir::sweep(&d, LOG_DIRS), Vec::<PathBuf>::new());
        drop(Capture {
            log: Some(log),
            echo: false,
            swept: Vec::new(),
        });
        assert_eq!(names(&d), Vec::<String>::new());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_note_on_what_a_start_removed() {
        assert_eq!(swept_words(&[]), None);
        assert_eq!(
            swept_words(&[PathBuf::from("/tmp/nccl-find-smoke-9-ab")]).as_deref(),
            Some(
                "removed 1 NCCL log directory that killed runs left in /tmp (nccl-find-smoke-9-ab)"
            )
        );
        assert_eq!(
            swept_words(&[PathBuf::from("/t/a"), PathBuf::from("/t/b")]).as_deref(),
            Some("removed 2 NCCL log directories that killed runs left in /t (a, …)")
        );
    }
}
