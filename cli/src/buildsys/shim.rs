//! `nccl-find --loader-env`: for programs built without nccl-find in their
//! build script (cudarc's users among them). Makes a loader directory in the
//! user's cache, `$XDG_CACHE_HOME/nccl-find/loader/<hash of the library's
//! path>`, whose `libnccl.so`, `libnccl.so.2` and every other name cudarc
//! tries before `libnccl.so.1` link to the selected `libnccl.so.2`, and
//! prints the `LD_LIBRARY_PATH` that puts it first, for a shell's `eval`.
//!
//! The library makes it (`nccl_find::loader_dir::make_in_user_cache`), and
//! checks every directory on the way: a real directory (never a followed
//! link), owned by this user, and `nccl-find/`, `loader/` and the directory
//! itself writable by no one else (made `0700`). Here it is also made a
//! prefix (`lib`, `include`, `cuda/include`) for builds that want one.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nccl_find::Nccl;

/// Prints `LD_LIBRARY_PATH=...` and `export LD_LIBRARY_PATH`, or says why not.
pub fn loader_env(nccl: Option<&Nccl>, headline: Option<&str>) -> ExitCode {
    let Some(n) = nccl else {
        crate::style::complain(&crate::style::not_found(headline));
        return ExitCode::from(1);
    };
    match make(n, true) {
        Ok(dir) => {
            use std::os::unix::ffi::OsStrExt;
            let old = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
            // The bytes as they are: an entry that is not UTF-8 stays the
            // directory it names.
            let mut out = assignment(&dir, old.as_bytes());
            out.extend_from_slice(b"\nexport LD_LIBRARY_PATH\n");
            let _ = std::io::Write::write_all(&mut std::io::stdout(), &out);
            ExitCode::SUCCESS
        }
        Err(msg) => {
            crate::style::complain(&msg);
            ExitCode::from(1)
        }
    }
}

/// `LD_LIBRARY_PATH=<dir>:<old entries, dir itself left out>`, quoted for
/// a shell, byte for byte.
fn assignment(dir: &Path, old: &[u8]) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let dir = dir.as_os_str().as_bytes();
    let mut value = dir.to_vec();
    for p in old.split(|&b| b == b':') {
        if !p.is_empty() && p != dir {
            value.push(b':');
            value.extend_from_slice(p);
        }
    }
    let mut out = b"LD_LIBRARY_PATH=".to_vec();
    out.extend(crate::buildsys::pkgflags::quote(&value));
    out
}

/// Makes (or brings up to date) the loader directory for `n`'s library in
/// the user's cache, and returns it. Says which cache was passed over, if
/// one was; and, where `run` (the directory is for running programs, as
/// `--loader-env`'s is, not for linking), why the library's own directory
/// is no safe place to load from.
pub fn make(n: &Nccl, run: bool) -> Result<PathBuf, String> {
    if n.library_real.as_os_str().is_empty() {
        return Err(format!(
            "the selected NCCL in {} has no shared library (libnccl.so.2) to load",
            n.lib_dir.display()
        ));
    }
    let made =
        nccl_find::loader_dir::make_in_user_cache(&n.library_real).map_err(|e| e.to_string())?;
    for n in &made.notes {
        crate::style::complain(&format!("note: {n}"));
    }
    if run {
        for w in &made.warnings {
            crate::style::complain(&format!("warning: {w}"));
        }
    }
    Ok(made.dir)
}

/// The loader directory for `n`, made a prefix too: `lib` (a link to
/// itself, so `lib/libnccl.so` is there) and `include` (a link to the
/// install's include dir), for builds that take `NCCL_HOME/lib` and
/// `NCCL_HOME/include`.
pub fn make_prefix(n: &Nccl) -> Result<PathBuf, String> {
    let dir = make(n, false)?;
    let include = n.include_paths.first().ok_or_else(|| {
        format!(
            "the selected NCCL in {} has no include dir",
            n.lib_dir.display()
        )
    })?;
    link(&dir, "lib", Path::new("."))?;
    link(&dir, "include", include)?;
    Ok(dir)
}

/// A `CUDA_HOME` for `n`: a directory whose `include/` holds the CUDA
/// headers `nccl.h` includes. A toolkit's (or pip's CUDA 13 layout, where
/// the runtime, crt and cccl wheels share `nvidia/cu13/include`) is the
/// parent of that one `include`. Where they lie in several (pip's CUDA 12
/// wheels: `cuda_runtime/include`, `cuda_nvcc/include`,
/// `cuda_cccl/include`), `cuda/include` in the private `prefix` directory
/// ([`make_prefix`]) holds a link to each of their entries, the first of a
/// name winning. None where `nccl.h` includes no CUDA header; why there is
/// none, where it does.
pub fn cuda_home(n: &Nccl, prefix: Option<&Path>) -> Result<Option<PathBuf>, String> {
    let dirs = n.cuda_include_dirs.as_ref().map_err(String::clone)?;
    if dirs.is_empty() {
        return Ok(None);
    }
    let parents: Vec<&Path> = dirs
        .iter()
        .filter(|d| d.file_name().is_some_and(|f| f == "include"))
        .filter_map(|d| d.parent())
        .collect();
    if let ([only], 1) = (parents.as_slice(), dirs.len()) {
        return Ok(Some(only.to_path_buf()));
    }
    let Some(prefix) = prefix else {
        return Err(format!(
            "the CUDA headers lie in {} directories ({}), and there is no private directory to join them in",
            dirs.len(),
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    let home = prefix.join("cuda");
    let include = home.join("include");
    subdir(&home)?;
    subdir(&include)?;
    let mut named: Vec<std::ffi::OsString> = Vec::new();
    for d in dirs {
        let entries =
            std::fs::read_dir(d).map_err(|e| format!("cannot read {}: {e}", d.display()))?;
        let mut names: Vec<std::ffi::OsString> = entries.flatten().map(|e| e.file_name()).collect();
        names.sort();
        for name in names {
            if named.contains(&name) {
                continue;
            }
            let Some(text) = name.to_str() else { continue };
            link(&include, text, &d.join(&name))?;
            named.push(name);
        }
    }
    Ok(Some(home))
}

/// `dir` made (mode 0700) in the private loader directory if it is
/// missing; refused unless it is a real directory (never a followed link).
fn subdir(dir: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_dir() => Ok(()),
        _ => Err(format!(
            "{} is not a directory that nccl-find made: remove it, and run again",
            dir.display()
        )),
    }
}

/// `dir/name` made a link to `target`: a new link renamed over the old one,
/// which must itself be a link (never a file or directory of someone else's).
fn link(dir: &Path, name: &str, target: &Path) -> Result<(), String> {
    let at = dir.join(name);
    match std::fs::symlink_metadata(&at) {
        Ok(m) if m.file_type().is_symlink() => {
            if std::fs::read_link(&at).ok().as_deref() == Some(target) {
                return Ok(());
            }
        }
        Ok(_) => {
            return Err(format!(
                "{} is not a link that nccl-find made: remove it, and run again",
                at.display()
            ))
        }
        Err(_) => {}
    }
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .and_then(|()| std::fs::rename(&tmp, &at))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("making the link {}: {e}", at.display())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignment_puts_the_dir_first_once_and_quotes() {
        let d = Path::new("/c/nccl-find/loader/ab");
        assert_eq!(
            assignment(d, b""),
            b"LD_LIBRARY_PATH=/c/nccl-find/loader/ab"
        );
        assert_eq!(
            assignment(d, b"/x:/c/nccl-find/loader/ab::/y z"),
            b"LD_LIBRARY_PATH='/c/nccl-find/loader/ab:/x:/y z'"
        );
        assert_eq!(
            assignment(d, b"/it's"),
            b"LD_LIBRARY_PATH='/c/nccl-find/loader/ab:/it'\\''s'"
        );
        // Bytes that are not UTF-8 stay as they are.
        assert_eq!(
            assignment(d, b"/opt/\xff/lib"),
            b"LD_LIBRARY_PATH='/c/nccl-find/loader/ab:/opt/\xff/lib'"
        );
    }
}
