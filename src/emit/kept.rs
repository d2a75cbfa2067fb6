//! The per-user copy of a loader directory, which outlives the build.
//!
//! A loader directory in `OUT_DIR` is gone once `target/` is: after
//! `cargo install` (which builds in a temporary target dir), or `cargo
//! clean`. So the binary also gets an rpath to a copy in the user's cache,
//! `$XDG_CACHE_HOME/nccl-find/loader-dirs/<key>` (else `~/.cache/…`), named
//! after the library file, and the loader falls back to it when the first
//! one is gone. The cache is checked as ssh checks `~/.ssh`: every directory
//! from `/` down is the user's or root's and writable by no one else; a
//! sticky directory such as `/tmp` is no exception, since an rpath to a copy
//! there outlives the copy, and anyone can make it again once it is gone.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use super::fnv1a_hex;
use super::loader_files::{check_loader_path, make_loader_dir};

/// Makes (or brings up to date) the user-cache copy of the loader directory
/// for `library`, and returns it; or says why there is none.
pub(crate) fn kept_dir(library: &Path) -> Result<PathBuf, String> {
    kept_dir_in(cache_base()?, library)
}

/// [`kept_dir`] under the cache directory `base`.
fn kept_dir_in(base: PathBuf, library: &Path) -> Result<PathBuf, String> {
    let uid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .map_err(|e| format!("cannot tell who this process runs as ({e})"))?;
    safe_ancestors(&base, uid)?;
    let mut dir = base;
    for part in ["nccl-find", "loader-dirs"] {
        dir.push(part);
        own_private_dir(&dir, uid)?;
    }
    let meta = std::fs::metadata(library).map_err(|e| format!("{}: {e}", library.display()))?;
    dir.push(key(library, &meta));
    check_loader_path(&dir, "the cached loader directory").map_err(|e| e.to_string())?;
    make_loader_dir(&dir, library, 0o700).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// `$XDG_CACHE_HOME`, else `$HOME/.cache`: absolute paths only.
fn cache_base() -> Result<PathBuf, String> {
    let absolute = |k: &str| {
        std::env::var_os(k)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    match (absolute("XDG_CACHE_HOME"), absolute("HOME")) {
        (Some(x), _) => Ok(x),
        (None, Some(h)) => Ok(h.join(".cache")),
        (None, None) => Err("neither XDG_CACHE_HOME nor HOME is an absolute path".into()),
    }
}

/// Every directory from `/` to `path` that exists must be a directory owned
/// by `uid` or root and writable by no one else (a sticky `/tmp` included),
/// and `path` must not lie in a temporary directory. Links on the way are
/// followed first.
pub fn safe_ancestors(path: &Path, uid: u32) -> Result<(), String> {
    let mut existing = path.to_path_buf();
    while !existing.exists() {
        if !existing.pop() {
            break;
        }
    }
    let real = std::fs::canonicalize(&existing)
        .map_err(|e| format!("cannot resolve {}: {e}", existing.display()))?;
    if let Some(why) = super::durable::lexical_risk(path) {
        return Err(why);
    }
    let mut at = PathBuf::new();
    for c in real.components() {
        at.push(c);
        if !matches!(c, Component::RootDir | Component::Normal(_)) {
            continue;
        }
        let m = std::fs::symlink_metadata(&at)
            .map_err(|e| format!("cannot read {}: {e}", at.display()))?;
        let mode = m.mode() & 0o7777;
        let why = if !m.is_dir() {
            Some("is not a directory".to_string())
        } else if m.uid() != uid && m.uid() != 0 {
            Some(format!(
                "belongs to user {}, not to you (user {uid}) or root",
                m.uid()
            ))
        } else if mode & 0o1022 != 0 {
            Some(format!("has mode {mode:o}: others can write in it"))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(format!("{} {why}", at.display()));
        }
    }
    Ok(())
}

/// A directory of this user's, made private if new; an existing one must be
/// a real directory of `uid`'s that no one else can write.
fn own_private_dir(dir: &Path, uid: u32) -> Result<(), String> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mode = m.mode() & 0o7777;
    if !m.is_dir() || m.uid() != uid || mode & 0o022 != 0 {
        return Err(format!(
            "{} is not a directory of yours that only you can write (mode {mode:o}, owner {})",
            dir.display(),
            m.uid()
        ));
    }
    Ok(())
}

/// The copy's name: FNV-1a of the library's real path, size and
/// modification time, so that another library, or the same path
/// reinstalled, gets another directory.
fn key(library: &Path, meta: &std::fs::Metadata) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut bytes = library.as_os_str().as_bytes().to_vec();
    bytes.extend_from_slice(&meta.size().to_le_bytes());
    bytes.extend_from_slice(&meta.mtime().to_le_bytes());
    bytes.extend_from_slice(&meta.mtime_nsec().to_le_bytes());
    fnv1a_hex(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A private scratch directory under `target/`, or `None` (said) when
    /// `target/` itself lies where any user may write, as in a clone in /tmp.
    fn scratch(tag: &str) -> Option<PathBuf> {
        let d = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target")
            .join(format!("nccl-find-kept-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        if let Err(why) = safe_ancestors(&d, std::fs::metadata("/proc/self").unwrap().uid()) {
            eprintln!("skipped: target/ is no private place here: {why}");
            let _ = std::fs::remove_dir_all(&d);
            return None;
        }
        Some(d)
    }

    fn library(d: &Path) -> PathBuf {
        let lib = d.join("libnccl.so.2.21.5");
        std::fs::write(&lib, b"not checked here").unwrap();
        lib
    }

    #[test]
    fn a_cache_others_can_write_in_is_refused_naming_the_directory() {
        let Some(d) = scratch("open") else {
            return;
        };
        let lib = library(&d);
        let cache = d.join("cache");
        std::fs::create_dir(&cache).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = kept_dir_in(cache.join("deeper"), &lib).unwrap_err();
        assert_eq!(
            e,
            format!("{} has mode 777: others can write in it", cache.display())
        );
        assert!(!cache.join("deeper").exists());
        // A link on the way is followed, and what it leads to is judged.
        let link = d.join("link");
        std::os::unix::fs::symlink(&cache, &link).unwrap();
        let e = kept_dir_in(link, &lib).unwrap_err();
        assert!(e.ends_with("has mode 777: others can write in it"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_cache_in_the_temporary_directory_is_refused() {
        let Some(d) = scratch("tmp") else {
            return;
        };
        let lib = library(&d);
        let cache = Path::new("/tmp").join(format!("nccl-find-kept-cache-{}", std::process::id()));
        let e = kept_dir_in(cache.clone(), &lib).unwrap_err();
        assert_eq!(
            e,
            format!(
                "{} lies in the temporary directory /tmp, which is cleaned, and where another user \
                 could re-create it once it is gone",
                cache.display()
            )
        );
        assert!(!cache.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_where_a_directory_belongs_is_refused() {
        let Some(d) = scratch("file") else {
            return;
        };
        let lib = library(&d);
        let cache = d.join("cache");
        std::fs::create_dir(&cache).unwrap();
        std::fs::write(cache.join("nccl-find"), b"").unwrap();
        let e = kept_dir_in(cache.clone(), &lib).unwrap_err();
        assert!(
            e.starts_with(&format!("cannot create {}/nccl-find", cache.display())),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_key_follows_the_file() {
        let Some(d) = scratch("key") else {
            return;
        };
        let lib = library(&d);
        let k1 = key(&lib, &std::fs::metadata(&lib).unwrap());
        assert_eq!(k1.len(), 16);
        assert_eq!(k1, key(&lib, &std::fs::metadata(&lib).unwrap()));
        std::fs::write(&lib, b"reinstalled, and longer").unwrap();
        assert_ne!(k1, key(&lib, &std::fs::metadata(&lib).unwrap()));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
