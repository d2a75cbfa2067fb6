//! The loader directories in the user's cache, which outlive the build.
//!
//! A loader directory in `OUT_DIR` is gone once `target/` is: after
//! `cargo install` (which builds in a temporary target dir), or `cargo
//! clean`. So the binary also gets an rpath to a copy in the user's cache,
//! `$XDG_CACHE_HOME/nccl-find/loader-dirs/<key>` (else `~/.cache/…`), named
//! after the library file, and the loader falls back to it when the first
//! one is gone ([`kept_dir`]). `nccl-find --loader-env` makes its own in
//! the same cache, `nccl-find/loader/<hash of the library's path>`
//! ([`make_in_user_cache`]).
//!
//! The cache is checked as ssh checks `~/.ssh`: every directory from `/`
//! down is the user's or root's and writable by no one else; a sticky
//! directory such as `/tmp` is no exception, since an rpath to a copy there
//! outlives the copy, and anyone can make it again once it is gone.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use super::loader_files::{check_loader_path, make_loader_dir, LoaderDir, LoaderDirError};

/// Makes (or brings up to date) the user-cache copy of the loader directory
/// for `library`, and returns it; or says why there is none.
pub(crate) fn kept_dir(library: &Path) -> Result<PathBuf, String> {
    let Some((base, _)) = cache_homes().into_iter().next() else {
        return Err("neither XDG_CACHE_HOME nor HOME is an absolute path".into());
    };
    kept_dir_in(base, library)
}

/// [`kept_dir`] under the cache directory `base`.
fn kept_dir_in(base: PathBuf, library: &Path) -> Result<PathBuf, String> {
    let uid = my_uid()?;
    safe_ancestors(&base, uid)?;
    let mut dir = base;
    for part in ["nccl-find", "loader-dirs"] {
        dir.push(part);
        private_dir(&dir, uid, false)?;
    }
    let meta = std::fs::metadata(library).map_err(|e| format!("{}: {e}", library.display()))?;
    dir.push(key(library, &meta));
    check_loader_path(&dir, "the cached loader directory").map_err(|e| e.to_string())?;
    make_loader_dir(&dir, library, 0o700).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// Makes (or brings up to date) a loader directory for `library` in this
/// user's cache, `$XDG_CACHE_HOME/nccl-find/loader/<hash>` (else
/// `$HOME/.cache/nccl-find/loader/<hash>`), the hash that of the library's
/// real path: the directory `nccl-find --loader-env` puts first on
/// `LD_LIBRARY_PATH`, for programs built without nccl-find in their build
/// script. `loader/` and the directory itself are private (`0700`).
///
/// The cache must stay this user's ([`check_owned_path`]); where
/// `XDG_CACHE_HOME` does not, `$HOME/.cache` is used, and
/// [`LoaderDir::notes`] says so. [`LoaderDir::warnings`] says when the
/// library's own directory is no safe place to load from (others can write
/// in it, or it is temporary). Where no cache stays the user's, nothing is
/// made, and the error says what to set.
pub fn make_in_user_cache(library: &Path) -> Result<LoaderDir, LoaderDirError> {
    let uid = my_uid().map_err(LoaderDirError::new)?;
    let mut notes = Vec::new();
    let cache = safe_cache(uid, &mut notes).map_err(LoaderDirError::new)?;
    let real = std::fs::canonicalize(library).unwrap_or_else(|_| library.to_path_buf());
    let loader = cache.join("nccl-find").join("loader");
    private_dir(&cache.join("nccl-find"), uid, false).map_err(LoaderDirError::new)?;
    private_dir(&loader, uid, true).map_err(LoaderDirError::new)?;
    let dir = loader.join(fnv1a_hex(real.as_os_str().as_encoded_bytes()));
    let mut made = make_loader_dir(&dir, &real, 0o700)?;
    private_dir(&dir, uid, true).map_err(LoaderDirError::new)?;
    let home = made.library.parent().unwrap_or(Path::new("/"));
    if let Some(why) = super::durable::rpath_risk(home) {
        made.warnings.push(format!(
            "the selected library's directory is no safe place to load from: {why}. \
             Install NCCL in a directory of your own outside /tmp"
        ));
    }
    made.notes = notes;
    Ok(made)
}

/// Whether what lies under `path` stays this user's: every directory from
/// `/` to it that exists (links followed) is this user's or root's and
/// writable by no one else (a sticky `/tmp` included), and it lies in no
/// temporary directory. Otherwise another user could change what a program
/// loads from there, or make the directory again once it is gone. The
/// caches above are checked so; so is any directory whose files a program
/// will load (`nccl-find --cmake-config` checks its `DIR`).
pub fn check_owned_path(path: &Path) -> Result<(), LoaderDirError> {
    my_uid()
        .and_then(|uid| safe_ancestors(path, uid))
        .map_err(LoaderDirError::new)
}

/// The user this process runs as: the owner of `/proc/self`.
fn my_uid() -> Result<u32, String> {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .map_err(|e| format!("cannot tell who this process runs as ({e})"))
}

/// The caches to use, in order: `XDG_CACHE_HOME` when it is an absolute
/// path, then `$HOME/.cache`; each with the variable it came from.
fn cache_homes() -> Vec<(PathBuf, &'static str)> {
    let mut out = Vec::new();
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from) {
        if x.is_absolute() {
            out.push((x, "XDG_CACHE_HOME"));
        }
    }
    if let Some(h) = std::env::var_os("HOME").map(PathBuf::from) {
        if h.is_absolute() {
            out.push((h.join(".cache"), "HOME"));
        }
    }
    out
}

/// The first cache that stays this user's ([`safe_ancestors`]); a note
/// where an earlier one did not. Otherwise another user could swap the
/// library in, or make the directory again once it is gone, after this
/// run: then there is none, and the message says why.
fn safe_cache(uid: u32, notes: &mut Vec<String>) -> Result<PathBuf, String> {
    let mut why_not = Vec::new();
    for (cache, from) in cache_homes() {
        let checked = check_loader_path(&cache, "the cache directory")
            .map_err(|e| e.to_string())
            .and_then(|()| safe_ancestors(&cache, uid));
        match checked {
            Ok(()) => {
                if !why_not.is_empty() {
                    notes.push(format!(
                        "{}, so another user could swap the library in: using {} instead",
                        why_not.join("; "),
                        cache.display()
                    ));
                }
                return Ok(cache);
            }
            Err(why) => why_not.push(format!("{why} (the cache from {from})")),
        }
    }
    if why_not.is_empty() {
        why_not.push("neither XDG_CACHE_HOME nor HOME names an absolute directory".into());
    }
    Err(format!(
        "set XDG_CACHE_HOME to a directory of your own, outside /tmp, that no one else can write: {}",
        why_not.join("; ")
    ))
}

/// Every directory from `/` to `path` that exists must be a directory owned
/// by `uid` or root and writable by no one else (a sticky `/tmp` included),
/// and `path` must not lie in a temporary directory. Links on the way are
/// followed first.
fn safe_ancestors(path: &Path, uid: u32) -> Result<(), String> {
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

/// Creates `dir` (mode 0700, and what is missing above it) if it is
/// missing, then checks it: a real directory (never a followed link),
/// owned by `uid`, not writable by others (and, when `private`, not
/// readable by them either).
fn private_dir(dir: &Path, uid: u32, private: bool) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            format!(
                "cannot create {}: {e}. Set XDG_CACHE_HOME to a directory of yours",
                dir.display()
            )
        })?;
    let m = std::fs::symlink_metadata(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mode = m.mode() & 0o7777;
    let bad = if !m.file_type().is_dir() {
        Some("is not a directory (a link, or a file)".to_string())
    } else if m.uid() != uid {
        Some(format!(
            "belongs to user {}, not to you (user {uid})",
            m.uid()
        ))
    } else if mode & if private { 0o077 } else { 0o022 } != 0 {
        Some(format!("has mode {mode:o}, open to others"))
    } else {
        None
    };
    match bad {
        Some(why) => Err(format!(
            "{} {why}: remove it (nccl-find makes it again, private), or set XDG_CACHE_HOME elsewhere",
            dir.display()
        )),
        None => Ok(()),
    }
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

/// FNV-1a (64 bits) of `bytes`, as 16 hex digits: a short name that stays
/// the same from one release to the next.
fn fnv1a_hex(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
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
    fn the_hash_is_stable() {
        assert_eq!(fnv1a_hex(b""), "cbf29ce484222325");
        assert_ne!(fnv1a_hex(b"/a"), fnv1a_hex(b"/b"));
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
