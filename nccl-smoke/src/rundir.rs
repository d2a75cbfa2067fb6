//! A run's private directory (where `nccl-find smoke` has NCCL write its
//! log), and the sweep of those that killed runs left behind.
//!
//! A run removes its own directory as it ends, on SIGINT, SIGTERM and
//! SIGHUP too; a run killed with SIGKILL cannot. So each directory holds an
//! owner record (the pid, its start time, the boot, the pid namespace and
//! the host, as the file rendezvous writes), and a later run removes only a
//! directory whose record proves its process gone: this user's, mode 0700,
//! holding nothing but that record and NCCL's log files. Anything else (no
//! record, a live or unknown process, another user's, a link, other files)
//! is left alone.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nccl_rendezvous::fsafe;
use nccl_rendezvous::owner::{self, Writer};

/// The owner record's name inside a run's directory.
const OWNER: &str = "owner";

/// The most directories one sweep looks into.
const MAX_LOOKED: usize = 64;

/// The most entries a directory may hold and still be swept.
const MAX_ENTRIES: usize = 64;

/// The owner record's size bound.
const MAX_OWNER: u64 = 1024;

/// Makes `<parent>/<prefix><pid>-<nonce>` (0700, never one that was there
/// before) holding this process's owner record.
pub fn make(parent: &Path, prefix: &str) -> Result<PathBuf, String> {
    let dir = fsafe::private_dir(parent, prefix)?;
    let record = format!("{}\n", owner::line());
    if let Err(e) = fsafe::create_new(&dir.join(OWNER), record.as_bytes()) {
        let _ = std::fs::remove_dir(&dir);
        return Err(format!("cannot write {}: {e}", dir.join(OWNER).display()));
    }
    Ok(dir)
}

/// Removes the directories [`make`] made in `parent` (names starting with
/// `prefix`) whose process is provably gone, looking into at most
/// 64 of them; returns those removed.
pub fn sweep(parent: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    let mut looked = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_str().is_some_and(|n| n.starts_with(prefix)) {
            continue;
        }
        if looked == MAX_LOOKED {
            break;
        }
        looked += 1;
        let dir = e.path();
        if writer_gone(&dir) && empty_out(&dir) {
            removed.push(dir);
        }
    }
    removed
}

/// Whether `dir` is a run directory of this user's whose owner record
/// proves its process gone.
fn writer_gone(dir: &Path) -> bool {
    let Ok(m) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    let mine = fsafe::my_uid().is_some_and(|u| u == m.uid());
    if !m.file_type().is_dir() || !mine || m.permissions().mode() & 0o777 != 0o700 {
        return false;
    }
    match fsafe::read_small(&dir.join(OWNER), MAX_OWNER) {
        Ok(Some((b, _))) => matches!(
            owner::writer(String::from_utf8_lossy(&b).trim()),
            Writer::Gone(_)
        ),
        _ => false,
    }
}

/// Removes NCCL's log files, then the owner record, then `dir` itself; does
/// nothing where `dir` holds anything else, or too much.
fn empty_out(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut logs = Vec::new();
    for e in entries.take(MAX_ENTRIES + 1) {
        let Ok(e) = e else { return false };
        let name = e.file_name();
        let name = name.to_str().unwrap_or_default();
        let regular = std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.file_type().is_file());
        if !regular {
            return false;
        }
        if name.starts_with("nccl.") && name.ends_with(".log") {
            logs.push(e.path());
        } else if name != OWNER {
            return false;
        }
    }
    if logs.len() >= MAX_ENTRIES {
        return false;
    }
    // The record last: a sweep stopped half-way leaves a directory the
    // next one still knows.
    for f in logs {
        let _ = std::fs::remove_file(f);
    }
    let _ = std::fs::remove_file(dir.join(OWNER));
    std::fs::remove_dir(dir).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{names, scratch};

    /// A run directory whose owner record names a process that has exited.
    fn dead(parent: &Path, what: &str) -> PathBuf {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        let dir = parent.join(format!("run-{what}"));
        fsafe::make_private_dir(&dir).unwrap();
        let record = format!("{}\n", owner::line_for(pid, Some(1)));
        fsafe::create_new(&dir.join(OWNER), record.as_bytes()).unwrap();
        std::fs::write(dir.join(format!("nccl.host.{pid}.log")), "NCCL INFO x\n").unwrap();
        dir
    }

    #[test]
    fn only_the_directories_of_runs_provably_gone_are_removed() {
        let p = scratch("sweep");
        let gone = dead(&p, "gone");
        // Ours, alive: this process.
        let live = make(&p, "run-").unwrap();
        // No record; another file beside the logs; a link to a dead run's
        // directory; a record of another host; a mode other than 0700.
        fsafe::make_private_dir(&p.join("run-norecord")).unwrap();
        let extra = dead(&p, "extra");
        std::fs::write(extra.join("notes.txt"), "mine").unwrap();
        let target = dead(&p, "target");
        std::fs::rename(&target, p.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(p.join("elsewhere"), p.join("run-link")).unwrap();
        let other = p.join("run-otherhost");
        fsafe::make_private_dir(&other).unwrap();
        let line = owner::line_for(1, Some(1));
        let (head, _) = line.rsplit_once(' ').unwrap();
        fsafe::create_new(
            &other.join(OWNER),
            format!("{head} another-host\n").as_bytes(),
        )
        .unwrap();
        let open = dead(&p, "open");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Another user's (where this test may give one away).
        if fsafe::my_uid() == Some(0) {
            let theirs = dead(&p, "theirs");
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        } else {
            eprintln!("not root: no directory of another user's was made");
        }
        // A name of another prefix.
        let unrelated = dead(&p, "x");
        std::fs::rename(&unrelated, p.join("other-gone")).unwrap();

        assert_eq!(sweep(&p, "run-"), vec![gone.clone()]);
        assert!(!gone.exists());
        let live_name = live.file_name().unwrap().to_str().unwrap().to_string();
        let mut want = vec![
            "elsewhere",
            "run-theirs",
            "other-gone",
            "run-extra",
            "run-link",
            "run-norecord",
            "run-open",
            "run-otherhost",
            &live_name,
        ];
        if fsafe::my_uid() != Some(0) {
            want.retain(|n| *n != "run-theirs");
        }
        want.sort();
        assert_eq!(names(&p), want);
        // Nothing was taken from inside what was left.
        assert_eq!(names(&p.join("elsewhere")).len(), 2);
        let kept = names(&extra);
        assert_eq!(
            (kept.len(), &kept[1..]),
            (3, &["notes.txt".to_string(), "owner".into()][..])
        );
        std::fs::remove_dir_all(&p).unwrap();
    }
}
