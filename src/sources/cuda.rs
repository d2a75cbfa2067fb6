//! A source: CUDA toolkit directories, where NCCL is often copied by hand:
//! `CUDA_HOME`, `CUDA_PATH`, `CUDA_ROOT`, `CUDA_TOOLKIT_ROOT_DIR`, then
//! `/usr/local/cuda`, `/usr/local/cuda-*` (newest first) and `/opt/cuda`. In
//! each, `include` + `lib64`/`lib`, then `targets/<arch>-linux/{include,lib}`.

use std::path::PathBuf;

use super::{versioned_entries, Ctx, Origin, Site, SourceKind};
use crate::version::CudaVersion;

/// The variables, in order.
pub(crate) const VARS: [&str; 4] = [
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_ROOT",
    "CUDA_TOOLKIT_ROOT_DIR",
];

/// CUDA toolkit roots in search order: the variables, then
/// `/usr/local/cuda`, `/usr/local/cuda-*` (newest first, or the one matching
/// `prefer` first), then `/opt/cuda`. With each, the variable that named it.
pub(crate) fn roots(ctx: &Ctx, prefer: Option<CudaVersion>) -> Vec<(PathBuf, Option<String>)> {
    let mut roots: Vec<(PathBuf, Option<String>)> = Vec::new();
    for name in VARS {
        if let Some((var, dir)) = ctx.var_path(name) {
            roots.push((dir, Some(var.setting())));
        }
    }
    let mut versioned = versioned_entries(&ctx.path("/usr/local"), "cuda-");
    if let Some(p) = prefer {
        let name = format!("cuda-{}.{}", p.major, p.minor);
        // The toolkit NCCL was built for first; the others keep their order.
        for i in 0..versioned.len() {
            if super::file_name_str(&versioned[i]) == Some(name.as_str()) {
                let d = versioned.remove(i);
                versioned.insert(0, d);
                break;
            }
        }
    }
    roots.push((ctx.path("/usr/local/cuda"), None));
    for d in versioned {
        roots.push((d, None));
    }
    roots.push((ctx.path("/opt/cuda"), None));
    roots
}

/// Looks for `file` in the CUDA roots' `subdirs` (and their
/// `targets/<arch>-linux/<subdir>`), then in `extra`. The file found, or
/// every place looked.
pub(crate) fn find_file(
    ctx: &Ctx,
    prefer: Option<CudaVersion>,
    file: &str,
    subdirs: &[&str],
    mut extra: Vec<PathBuf>,
) -> Result<PathBuf, Vec<PathBuf>> {
    let mut dirs = Vec::new();
    for (root, _) in roots(ctx, prefer) {
        for &sub in subdirs {
            dirs.push(root.join(sub));
        }
        for &t in ctx.target.cuda_targets {
            let last = if subdirs[0] == "include" {
                "include"
            } else {
                "lib"
            };
            dirs.push(root.join("targets").join(t).join(last));
        }
    }
    dirs.append(&mut extra);
    let mut looked = Vec::new();
    for d in dirs {
        let f = d.join(file);
        if f.is_file() {
            return Ok(f);
        }
        if !looked.contains(&d) {
            looked.push(d);
        }
    }
    Err(looked)
}

pub(crate) fn sites(ctx: &Ctx) -> Vec<Site> {
    let roots = roots(ctx, None);
    for (dir, set) in &roots {
        if let Some(set) = set {
            if !dir.is_dir() {
                ctx.warn(format!("{set}: no such directory."));
            }
        }
    }
    let mut out = Vec::new();
    for (root, variable) in roots {
        if !root.is_dir() {
            ctx.looked(SourceKind::Cuda, &root, "no such directory");
            continue;
        }
        let detail = match &variable {
            Some(v) => format!("CUDA toolkit {v}"),
            None => format!("CUDA toolkit {}", ctx.show(&root)),
        };
        let origin = Origin {
            source: SourceKind::Cuda,
            variable,
            package: None,
            detail,
        };
        let mut site = Site::new(
            origin.clone(),
            vec![root.join("include")],
            vec![root.join("lib64"), root.join("lib")],
        );
        site.root = Some(root.clone());
        out.push(site);
        for &t in ctx.target.cuda_targets {
            let dir = root.join("targets").join(t);
            if dir.is_dir() {
                let mut site = Site::new(
                    origin.clone(),
                    vec![dir.join("include")],
                    vec![dir.join("lib")],
                );
                site.root = Some(root.clone());
                out.push(site);
            }
        }
    }
    out
}
