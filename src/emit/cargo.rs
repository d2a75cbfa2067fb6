//! Cargo directives for build scripts: link flags, `rerun-if-*`, metadata
//! for dependents (`DEP_NCCL_*` when the -sys crate has `links = "nccl"`),
//! and a cfg per API level. The `cargo:` form works with every Cargo.

use std::path::{Path, PathBuf};

use crate::check::Linking;
use crate::env::EnvRead;
use crate::Nccl;

/// Prints directives, one per line.
pub fn print(lines: &[String]) {
    for l in lines {
        println!("{l}");
    }
}

/// `rerun-if-env-changed` for every variable read (cargo sets `TARGET` and
/// `HOST` itself).
pub fn rerun_env(env: &[EnvRead]) -> Vec<String> {
    env.iter()
        .filter(|r| r.name != "TARGET" && r.name != "HOST")
        .map(|r| format!("cargo:rerun-if-env-changed={}", r.name))
        .collect()
}

/// Everything a build script prints for this install.
pub fn directives(n: &Nccl) -> Vec<String> {
    let mut out = Vec::new();
    let lib_dir = n.lib_dir.display();
    out.push(format!("cargo:rustc-link-search=native={lib_dir}"));
    match &n.linking {
        Linking::Dynamic => out.push("cargo:rustc-link-lib=dylib=nccl".into()),
        Linking::DynamicVerbatim => {
            out.push("cargo:rustc-link-lib=dylib:+verbatim=libnccl.so.2".into())
        }
        Linking::Static { cudart, .. } => {
            out.push("cargo:rustc-link-lib=static=nccl_static".into());
            if let Some(dir) = cudart.parent() {
                out.push(format!("cargo:rustc-link-search=native={}", dir.display()));
            }
            out.push("cargo:rustc-link-lib=static=cudart_static".into());
            for l in ["stdc++", "pthread", "dl", "rt"] {
                out.push(format!("cargo:rustc-link-lib=dylib={l}"));
            }
        }
    }
    out.extend(rerun_env(&n.report.env));
    let headers: Vec<PathBuf> = n.include_paths.iter().map(|d| d.join("nccl.h")).collect();
    let mut files: Vec<&Path> = headers.iter().map(PathBuf::as_path).collect();
    files.push(&n.library);
    files.push(&n.library_real);
    if let Linking::Static { archive, cudart } = &n.linking {
        files.push(archive);
        files.push(cudart);
    }
    let mut seen = Vec::new();
    for f in files {
        if !seen.contains(&f) {
            seen.push(f);
            out.push(format!("cargo:rerun-if-changed={}", f.display()));
        }
    }
    if let Some(inc) = n.include_paths.first() {
        out.push(format!("cargo:include={}", inc.display()));
    }
    out.push(format!("cargo:lib_dir={lib_dir}"));
    let root = n.root.clone().unwrap_or_else(|| prefix(n));
    out.push(format!("cargo:root={}", root.display()));
    out.push(format!("cargo:version={}", n.version));
    out.push(format!("cargo:version_code={}", n.version.code));
    if let Some(c) = n.cuda_version {
        out.push(format!("cargo:cuda_version={c}"));
    }
    for (name, ..) in crate::api::LEVELS {
        out.push(format!("cargo:rustc-check-cfg=cfg({name})"));
    }
    for name in crate::api::cfgs_for(n.version.major, n.version.minor, n.version.patch) {
        out.push(format!("cargo:rustc-cfg={name}"));
    }
    for w in &n.report.warnings {
        out.push(format!("cargo:warning=nccl-find: {w}"));
    }
    out
}

/// For the **final binary's** build script: reads `DEP_NCCL_LIB_DIR` (set
/// by a `links = "nccl"` -sys crate that this package depends on directly)
/// and gives the binary an rpath to it, so that it loads the NCCL it was
/// linked against without `LD_LIBRARY_PATH`.
///
/// It must live there: a -sys crate's `rustc-link-arg` does not reach the
/// binaries of the crates that depend on it. Returns the directory, or
/// `None` (printing nothing but the rerun line) when the variable is unset.
pub fn emit_rpath_from_dep() -> Option<PathBuf> {
    println!("cargo:rerun-if-env-changed=DEP_NCCL_LIB_DIR");
    let dir = PathBuf::from(std::env::var_os("DEP_NCCL_LIB_DIR")?);
    println!("{}", rpath_directive(&dir));
    Some(dir)
}

/// The directive that gives a binary an rpath to `dir`.
pub fn rpath_directive(dir: &Path) -> String {
    format!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display())
}

/// The install prefix where no source named a root: the deepest directory
/// holding both the include dir and the library dir (`/usr` for
/// `/usr/include` + `/usr/lib/x86_64-linux-gnu`), else the library dir's
/// parent.
fn prefix(n: &Nccl) -> PathBuf {
    let lib = &n.lib_dir;
    let common = n.include_paths.first().map(|inc| {
        inc.components()
            .zip(lib.components())
            .take_while(|(a, b)| a == b)
            .map(|(a, _)| a)
            .collect::<PathBuf>()
    });
    match common {
        Some(c) if c.parent().is_some() => c,
        _ => lib.parent().map(Path::to_path_buf).unwrap_or_default(),
    }
}
