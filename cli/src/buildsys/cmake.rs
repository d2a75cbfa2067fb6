//! `nccl-find --cmake-config DIR`: a CMake package for the selected install,
//! so that `find_package(NCCL CONFIG)` gives `NCCL::nccl`, as NCCL's own
//! `NCCLConfig.cmake` (from 2.29.7's CMake install) does, for installs that
//! have none: wheels, packages, older releases.

use std::io::Write;
use std::path::{Path, PathBuf};

use nccl_find::Nccl;

/// A path as a CMake quoted argument; refused where CMake cannot carry it
/// (not UTF-8, a line break, or a `;`, which splits a list). Where CMake
/// evaluates generator expressions in it (`genex`: include directories,
/// which targets evaluate), a `$<` is written `$<1:$><`, which evaluates
/// to itself: `/opt/a$<SEMICOLON>b` stays one directory.
fn quoted(p: &Path, genex: bool) -> Result<String, String> {
    let s = p
        .to_str()
        .ok_or_else(|| format!("{} is not UTF-8: CMake cannot name it", p.display()))?;
    if s.contains(['\n', '\r', ';']) {
        return Err(format!(
            "{} holds a line break or a `;`, which a CMake list cannot carry",
            nccl_find::internal::escape_os(s.as_ref())
        ));
    }
    let s = match genex {
        true => s.replace("$<", "$<1:$><"),
        false => s.to_string(),
    };
    let mut out = String::from("\"");
    for c in s.chars() {
        if matches!(c, '\\' | '"' | '$') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// The two files' text: `NCCLConfig.cmake` and `NCCLConfigVersion.cmake`.
fn texts(n: &Nccl) -> Result<(String, String), String> {
    // `NCCL::nccl` carries the CUDA include dirs `nccl.h` needs; without
    // them, no package: one would fail in the compiler.
    let mut inc = Vec::new();
    for d in crate::buildsys::pkgflags::include_dirs(n)? {
        inc.push(quoted(d, true)?);
    }
    let v = &n.library_version;
    let mut config = format!(
        "# NCCLConfig.cmake for NCCL {v} at {}, written by nccl-find {}.\n\
         # find_package(NCCL CONFIG) gives NCCL::nccl{}; NCCL_VERSION, NCCL_INCLUDE_DIRS,\n\
         # NCCL_LIBRARIES as NCCL's own NCCLConfig.cmake sets them.\n\
         set(NCCL_VERSION \"{v}\")\n\
         set(NCCL_INCLUDE_DIRS {})\n\
         if(NOT TARGET NCCL::nccl)\n  \
           add_library(NCCL::nccl SHARED IMPORTED)\n  \
           set_target_properties(NCCL::nccl PROPERTIES\n    \
             IMPORTED_LOCATION {}\n    \
             INTERFACE_INCLUDE_DIRECTORIES \"${{NCCL_INCLUDE_DIRS}}\")\n\
         endif()\n",
        nccl_find::internal::escape_os(n.lib_dir.as_os_str()),
        env!("CARGO_PKG_VERSION"),
        if n.static_library.is_some() {
            " (and NCCL::nccl_static)"
        } else {
            ""
        },
        inc.join(" "),
        quoted(&n.library, false)?,
    );
    if let Some(a) = &n.static_library {
        config.push_str(&format!(
            "if(NOT TARGET NCCL::nccl_static)\n  \
               add_library(NCCL::nccl_static STATIC IMPORTED)\n  \
               set_target_properties(NCCL::nccl_static PROPERTIES\n    \
                 IMPORTED_LOCATION {}\n    \
                 INTERFACE_INCLUDE_DIRECTORIES \"${{NCCL_INCLUDE_DIRS}}\")\n\
             endif()\n",
            quoted(a, false)?
        ));
    }
    config.push_str("set(NCCL_LIBRARIES NCCL::nccl)\nset(NCCL_FOUND TRUE)\n");
    // As NCCL's own: the same major version, and no older than asked.
    let version = format!(
        "# NCCLConfigVersion.cmake for NCCL {v}, written by nccl-find {}.\n\
         set(PACKAGE_VERSION \"{v}\")\n\
         if(PACKAGE_FIND_VERSION_MAJOR AND NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL \"{}\")\n  \
           set(PACKAGE_VERSION_COMPATIBLE FALSE)\n\
         elseif(PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION)\n  \
           set(PACKAGE_VERSION_COMPATIBLE FALSE)\n\
         else()\n  \
           set(PACKAGE_VERSION_COMPATIBLE TRUE)\n  \
           if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)\n    \
             set(PACKAGE_VERSION_EXACT TRUE)\n  \
           endif()\n\
         endif()\n",
        env!("CARGO_PKG_VERSION"),
        v.major
    );
    Ok((config, version))
}

/// Writes `text` to `path`, replacing what is there only by a rename: a new
/// file is created beside it (`O_EXCL`, `O_NOFOLLOW`), so that no link
/// planted there is followed.
/// A name no one can guess in advance: 16 hex digits from the kernel's
/// random source (a name another user planted beforehand cannot block the
/// write, and `O_EXCL` refuses one planted since).
fn unguessable() -> Result<String, String> {
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `DIR` takes CMake code, which `find_package` runs: it must not be a
/// link, and no other user may own or write it or a directory above it
/// (nor may it lie below `/tmp`), as for the cache.
fn check_dir(dir: &Path) -> Result<(), String> {
    let why = match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => Some(format!(
            "{} is a symbolic link, which another user may have planted",
            nccl_find::internal::escape_os(dir.as_os_str())
        )),
        _ => nccl_find::loader_dir::check_owned_path(dir)
            .err()
            .map(|e| e.to_string()),
    };
    match why {
        Some(why) => Err(format!(
            "{why}: find_package runs the CMake code written there, so no other user may change it. \
             Choose a directory of your own (./build/nccl, say)"
        )),
        None => Ok(()),
    }
}

fn put(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("cmake.{}.tmp", unguessable()?));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(&tmp)
        .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let done = f
        .write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = done {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", path.display()));
    }
    Ok(())
}

/// Writes the package into `dir` (made if need be, absolute); the two
/// files written.
pub fn write(n: &Nccl, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let (config, version) = texts(n)?;
    // Before anything is made under it, and again once it is there: what
    // was made (or found made meanwhile) must be this user's too.
    check_dir(dir)?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    check_dir(dir)?;
    let mut out = Vec::new();
    for (name, text) in [
        ("NCCLConfig.cmake", config),
        ("NCCLConfigVersion.cmake", version),
    ] {
        let p = dir.join(name);
        put(&p, &text)?;
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_as_cmake_reads_them() {
        assert_eq!(
            quoted(Path::new("/opt/a b/$x\"y\\z"), false).unwrap(),
            "\"/opt/a b/\\$x\\\"y\\\\z\""
        );
        assert!(quoted(Path::new("/opt/a;b"), true)
            .unwrap_err()
            .contains("`;`"));
        assert!(quoted(Path::new("/opt/a\nb"), true)
            .unwrap_err()
            .starts_with("/opt/a\\nb holds a line break"));
    }

    /// A generator expression in an include directory evaluates to itself
    /// (checked with the real CMake: `-isystem "/tmp/gx/a$<SEMICOLON>b"`,
    /// one directory); an imported location, which CMake does not
    /// evaluate, is written as it is.
    #[test]
    fn generator_expressions_in_paths_stay_text() {
        assert_eq!(
            quoted(Path::new("/opt/a$<SEMICOLON>b/include"), true).unwrap(),
            "\"/opt/a\\$<1:\\$><SEMICOLON>b/include\""
        );
        assert_eq!(
            quoted(Path::new("/opt/a$<SEMICOLON>b/lib/libnccl.so.2"), false).unwrap(),
            "\"/opt/a\\$<SEMICOLON>b/lib/libnccl.so.2\""
        );
    }
}
