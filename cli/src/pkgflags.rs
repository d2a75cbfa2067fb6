//! pkg-config-style output: `--cflags`, `--libs`, `--env`.

use nccl_find::{Linking, Nccl};

/// `--cflags` and/or `--libs`, on one line. `--cflags` adds the CUDA include
/// dirs where found, since `nccl.h` includes `cuda_runtime.h`.
pub fn flags(n: &Nccl, cflags: bool, libs: bool) -> String {
    let mut out: Vec<String> = Vec::new();
    if cflags {
        out.extend(n.include_paths.iter().map(|d| format!("-I{}", d.display())));
        if let Ok(dirs) = &n.cuda_include_dirs {
            out.extend(dirs.iter().map(|d| format!("-I{}", d.display())));
        }
    }
    if libs {
        out.push(format!("-L{}", n.lib_dir.display()));
        match &n.linking {
            Linking::Dynamic => out.push("-lnccl".into()),
            Linking::DynamicVerbatim => out.push("-l:libnccl.so.2".into()),
            Linking::Static { cudart, .. } => {
                out.push("-lnccl_static".into());
                if let Some(d) = cudart.parent() {
                    out.push(format!("-L{}", d.display()));
                }
                out.extend(
                    ["-lcudart_static", "-lstdc++", "-lpthread", "-ldl", "-lrt"].map(String::from),
                );
            }
        }
    }
    out.join(" ")
}

/// `--env`: lines a POSIX shell can `eval`.
pub fn env(n: &Nccl) -> String {
    let home = n
        .root
        .clone()
        .or_else(|| n.lib_dir.parent().map(|p| p.to_path_buf()))
        .unwrap_or_default();
    let include = n.include_paths.first().cloned().unwrap_or_default();
    [
        ("NCCL_INCLUDE_DIR", include),
        ("NCCL_LIB_DIR", n.lib_dir.clone()),
        ("NCCL_HOME", home),
    ]
    .iter()
    .map(|(k, v)| format!("{k}={}", quote(&v.display().to_string())))
    .collect::<Vec<_>>()
    .join("\n")
}

/// Single-quotes a value for a POSIX shell when it needs it.
fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn quoting() {
        assert_eq!(
            super::quote("/opt/nccl_2.21.5-1+cuda12.4_x86_64"),
            "/opt/nccl_2.21.5-1+cuda12.4_x86_64"
        );
        assert_eq!(super::quote("/a b/it's"), "'/a b/it'\\''s'");
    }
}
