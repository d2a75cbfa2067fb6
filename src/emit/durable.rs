//! Whether a directory may be named in an rpath, or in an `LD_LIBRARY_PATH`
//! that nccl-find prints: only one that no other user can re-create once it
//! is gone. An rpath lives as long as the binary; a directory below `/tmp`
//! (or any world-writable or sticky directory), or inside cargo install's
//! temporary build directory, is deleted sooner or later, and then anyone
//! can make it again with a `libnccl.so.2` of their own in it, which the
//! binary would run as whoever starts it.

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Why `dir` must not be named in an rpath, if it must not: it lies inside
/// cargo install's temporary build directory, in the system's temporary
/// directory, or below a directory that every user may write in (mode
/// `o+w`, or sticky as `/tmp` is). Only the directories that exist are
/// looked at; links are resolved first, so the place judged is the real one.
pub fn rpath_risk(dir: &Path) -> Option<String> {
    if let Some(why) = lexical_risk(dir) {
        return Some(why);
    }
    let mut existing = dir.to_path_buf();
    while !existing.is_dir() {
        if !existing.pop() {
            return None;
        }
    }
    let real = std::fs::canonicalize(&existing).unwrap_or(existing);
    if real.as_path() != dir {
        if let Some(why) = lexical_risk(&real) {
            return Some(format!("{} (through links): {why}", dir.display()));
        }
    }
    let mut at = PathBuf::new();
    for c in real.components() {
        at.push(c);
        if !matches!(c, Component::RootDir | Component::Normal(_)) {
            continue;
        }
        let Ok(m) = std::fs::metadata(&at) else {
            continue;
        };
        let mode = m.mode() & 0o7777;
        if mode & 0o1002 != 0 {
            return Some(format!(
                "{} lies below {} (mode {mode:o}), where every user may create files, so anyone \
                 could re-create it once it is gone",
                dir.display(),
                at.display()
            ));
        }
    }
    None
}

/// The risks that show in the path's words alone, so that they hold for a
/// path on another machine too (a sysroot's target).
pub fn lexical_risk(dir: &Path) -> Option<String> {
    let mut at = PathBuf::new();
    for c in dir.components() {
        at.push(c);
        if let Component::Normal(name) = c {
            let name = name.to_string_lossy();
            if name.starts_with("cargo-install") {
                return Some(format!(
                    "{} is inside {}, the temporary build directory of `cargo install`, which is \
                     deleted when the install ends",
                    dir.display(),
                    at.display()
                ));
            }
        }
    }
    for tmp in temporary_dirs() {
        if dir.starts_with(&tmp) && tmp.parent().is_some() {
            return Some(format!(
                "{} lies in the temporary directory {}, which is cleaned, and where another user \
                 could re-create it once it is gone",
                dir.display(),
                tmp.display()
            ));
        }
    }
    None
}

/// The system's temporary directories: `TMPDIR` (absolute), `/tmp`,
/// `/var/tmp` and `/dev/shm`.
fn temporary_dirs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(t) = std::env::var_os("TMPDIR") {
        let t = PathBuf::from(t);
        if t.is_absolute() {
            out.push(t);
        }
    }
    for d in ["/tmp", "/var/tmp", "/dev/shm"] {
        out.push(PathBuf::from(d));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn temporary_and_shared_places_are_named() {
        let why = rpath_risk(Path::new("/tmp/cargo-installAbC123/release/build/x/out")).unwrap();
        assert_eq!(
            why,
            "/tmp/cargo-installAbC123/release/build/x/out is inside /tmp/cargo-installAbC123, the \
             temporary build directory of `cargo install`, which is deleted when the install ends"
        );
        let why = rpath_risk(Path::new("/tmp/venv/lib")).unwrap();
        assert!(
            why.starts_with("/tmp/venv/lib lies in the temporary directory /tmp, which is cleaned"),
            "{why}"
        );
        assert_eq!(
            rpath_risk(Path::new("/var/tmp/x")).map(|w| w.contains("/var/tmp")),
            Some(true)
        );
        // /tmp itself is no parent of /tmpfoo.
        assert!(lexical_risk(Path::new("/tmpfoo/lib")).is_none());
        assert_eq!(rpath_risk(Path::new("/usr/lib/x86_64-linux-gnu")), None);
        assert_eq!(rpath_risk(Path::new("/opt/does/not/exist")), None);
    }

    #[test]
    fn a_directory_every_user_may_write_in_is_named() {
        let base = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target")
            .join(format!("durable-{}", std::process::id()));
        let open = base.join("open");
        let lib = open.join("nccl/lib");
        std::fs::create_dir_all(&lib).unwrap();
        if let Some(why) = rpath_risk(&base) {
            eprintln!("skipped: the repository's own target dir is no durable place: {why}");
            std::fs::remove_dir_all(&base).unwrap();
            return;
        }
        assert_eq!(rpath_risk(&lib), None);
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let why = rpath_risk(&lib).unwrap();
        assert_eq!(
            why,
            format!(
                "{} lies below {} (mode 1777), where every user may create files, so anyone could \
                 re-create it once it is gone",
                lib.display(),
                std::fs::canonicalize(&open).unwrap().display()
            )
        );
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o757)).unwrap();
        assert!(rpath_risk(&lib).unwrap().contains("(mode 757)"));
        // Group-writable is a site's own choice (an admins' group): allowed.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert_eq!(rpath_risk(&lib), None);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
