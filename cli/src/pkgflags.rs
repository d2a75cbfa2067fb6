//! pkg-config-style output: `--cflags`, `--libs`, `--env`. Paths are
//! written byte for byte (a path that is not UTF-8 stays the same path),
//! escaped for a shell: a backslash before every character a shell or a
//! glob would read, as pkg-config does, and single quotes for `--env`.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nccl_find::{Linking, Nccl};

/// The target triples NCCL is built for: Linux on x86_64, aarch64 (sbsa)
/// and ppc64le. Anything else is a usage error, not an empty answer.
pub fn check_target(triple: &str) -> Result<(), String> {
    let parts: Vec<&str> = triple.split('-').collect();
    if parts.len() < 3 || parts.iter().any(|p| p.is_empty()) {
        return Err(
            "not a target triple: write ARCH-VENDOR-OS[-ENV], e.g. x86_64-unknown-linux-gnu".into(),
        );
    }
    if !["x86_64", "aarch64", "powerpc64le"].contains(&parts[0]) {
        return Err(format!(
            "NCCL is not built for {}: use an x86_64, aarch64 or powerpc64le Linux triple",
            parts[0]
        ));
    }
    if !parts[1..].contains(&"linux") {
        return Err("NCCL is built for Linux only: use a *-linux-* triple".into());
    }
    Ok(())
}

/// A flag and a path, with pkg-config's backslash escapes. A line break
/// cannot be escaped that way (a shell drops backslash-newline): refused.
fn flag(prefix: &str, p: &Path) -> Result<Vec<u8>, String> {
    let bytes = p.as_os_str().as_bytes();
    if bytes.contains(&b'\n') {
        return Err(format!(
            "{:?} holds a line break and cannot be written as a compiler flag; use a path without one",
            p
        ));
    }
    let mut out = prefix.as_bytes().to_vec();
    for &b in bytes {
        if !(b.is_ascii_alphanumeric() || b >= 0x80 || b"/._-+,:@=%".contains(&b)) {
            out.push(b'\\');
        }
        out.push(b);
    }
    Ok(out)
}

/// `--cflags` and/or `--libs`, on one line. `--cflags` adds the CUDA include
/// dirs where found, since `nccl.h` includes `cuda_runtime.h`.
pub fn flags(n: &Nccl, cflags: bool, libs: bool) -> Result<Vec<u8>, String> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    if cflags {
        for d in &n.include_paths {
            out.push(flag("-I", d)?);
        }
        if let Ok(dirs) = &n.cuda_include_dirs {
            for d in dirs {
                out.push(flag("-I", d)?);
            }
        }
    }
    if libs {
        out.push(flag("-L", &n.lib_dir)?);
        match &n.linking {
            Linking::Dynamic => out.push(b"-lnccl".to_vec()),
            Linking::DynamicVerbatim => out.push(b"-l:libnccl.so.2".to_vec()),
            Linking::Static { cudart, .. } => {
                out.push(b"-lnccl_static".to_vec());
                if let Some(d) = cudart.parent() {
                    out.push(flag("-L", d)?);
                }
                out.extend(
                    ["-lcudart_static", "-lstdc++", "-lpthread", "-ldl", "-lrt"]
                        .map(|s| s.as_bytes().to_vec()),
                );
            }
        }
    }
    Ok(out.join(&b' '))
}

/// `--env`: lines a POSIX shell can `eval`, each path byte for byte.
pub fn env(n: &Nccl) -> Vec<u8> {
    let home = n
        .root
        .clone()
        .or_else(|| n.lib_dir.parent().map(|p| p.to_path_buf()))
        .unwrap_or_default();
    let include = n.include_paths.first().cloned().unwrap_or_default();
    let lines: Vec<Vec<u8>> = [
        ("NCCL_INCLUDE_DIR", include),
        ("NCCL_LIB_DIR", n.lib_dir.clone()),
        ("NCCL_HOME", home),
    ]
    .iter()
    .map(|(k, v)| {
        let mut l = format!("{k}=").into_bytes();
        l.extend(quote(v.as_os_str().as_bytes()));
        l
    })
    .collect();
    lines.join(&b'\n')
}

/// Single-quotes a value for a POSIX shell when it needs it (inside single
/// quotes every byte but the quote itself is taken as it is).
fn quote(s: &[u8]) -> Vec<u8> {
    let plain = !s.is_empty()
        && s.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"/._-+,:@%".contains(c));
    if plain {
        return s.to_vec();
    }
    let mut out = vec![b'\''];
    for &c in s {
        if c == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(c);
        }
    }
    out.push(b'\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn quoting() {
        assert_eq!(
            quote(b"/opt/nccl_2.21.5-1+cuda12.4_x86_64"),
            b"/opt/nccl_2.21.5-1+cuda12.4_x86_64"
        );
        assert_eq!(quote(b"/a b/it's"), b"'/a b/it'\\''s'");
        assert_eq!(quote(b"/a\xff"), b"'/a\xff'");
    }

    #[test]
    fn flags_are_escaped_as_pkg_config_does() {
        let p = Path::new(OsStr::from_bytes(b"/o p/$x*[1]\xff'\"\\/inc"));
        assert_eq!(
            flag("-I", p).unwrap(),
            b"-I/o\\ p/\\$x\\*\\[1\\]\xff\\'\\\"\\\\/inc"
        );
        assert!(flag("-I", Path::new("/a\nb"))
            .unwrap_err()
            .contains("holds a line break"));
    }

    #[test]
    fn targets_nccl_is_not_built_for_are_refused() {
        for ok in [
            "x86_64-unknown-linux-gnu",
            "aarch64-unknown-linux-gnu",
            "powerpc64le-unknown-linux-gnu",
        ] {
            assert_eq!(check_target(ok), Ok(()));
        }
        assert!(check_target("x86_64-apple-darwin")
            .unwrap_err()
            .contains("Linux only"));
        assert!(check_target("wasm32-unknown-unknown")
            .unwrap_err()
            .contains("not built for wasm32"));
        assert!(check_target("nonsense")
            .unwrap_err()
            .contains("not a target triple"));
    }
}
