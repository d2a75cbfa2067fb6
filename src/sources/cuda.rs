//! Source 6: CUDA toolkit directories, where NCCL is often copied by hand:
//! `CUDA_HOME`, `CUDA_PATH`, `CUDA_ROOT`, `CUDA_TOOLKIT_ROOT_DIR`, then
//! `/usr/local/cuda`, `/usr/local/cuda-*` (newest first) and `/opt/cuda`. In
//! each, `include` + `lib64`/`lib`, then `targets/<arch>-linux/{include,lib}`.

use std::path::PathBuf;

use super::{versioned_entries, Ctx, Origin, Site, SourceKind};

/// The variables, in order.
pub(crate) const VARS: [&str; 4] = [
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_ROOT",
    "CUDA_TOOLKIT_ROOT_DIR",
];

pub(crate) fn sites(ctx: &Ctx) -> Vec<Site> {
    let mut roots: Vec<(PathBuf, Option<String>)> = Vec::new();
    for name in VARS {
        if let Some((var, dir)) = ctx.var_path(name) {
            let set = format!("{}={}", var.name, var.value.to_string_lossy());
            if !dir.is_dir() {
                ctx.warn(format!("{set}: no such directory."));
            }
            roots.push((dir, Some(set)));
        }
    }
    roots.push((ctx.path("/usr/local/cuda"), None));
    roots.extend(
        versioned_entries(&ctx.path("/usr/local"), "cuda-")
            .into_iter()
            .map(|d| (d, None)),
    );
    roots.push((ctx.path("/opt/cuda"), None));

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
        for t in ctx.target.cuda_targets {
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
