//! A source: install prefixes that are not NCCL's own variables: the conda
//! env (`CONDA_PREFIX`), the NVIDIA HPC SDK's `comm_libs` (`NVHPC_ROOT`,
//! then `/opt/nvidia/hpc_sdk/<platform>/<version>`, newest first; in each,
//! `comm_libs/nccl` then `comm_libs/<cuda>/nccl`, newest CUDA first), and an
//! EasyBuild module (`EBROOTNCCL`).

use std::path::Path;

use super::{versioned_entries, Ctx, Origin, Site, SourceKind};

pub(crate) fn sites(ctx: &Ctx) -> Vec<Site> {
    let mut out = Vec::new();
    if let Some((var, prefix)) = ctx.var_path("CONDA_PREFIX") {
        let set = var.setting();
        let detail = format!("conda env {set}");
        push_prefix(ctx, &mut out, &prefix, Some(set), detail);
    }
    let mut hpc_roots = Vec::new();
    if let Some((_, root)) = ctx.var_path("NVHPC_ROOT") {
        hpc_roots.push(root);
    }
    if let Some(platform) = ctx.target.hpc_sdk {
        let platform_dir = ctx.path("/opt/nvidia/hpc_sdk").join(platform);
        for root in versioned_entries(&platform_dir, "") {
            hpc_roots.push(root);
        }
    }
    for root in hpc_roots {
        let comm = root.join("comm_libs");
        if !comm.is_dir() {
            ctx.looked(SourceKind::Prefix, &comm, "no such directory");
            continue;
        }
        let mut dirs = vec![comm.join("nccl")];
        for cuda in versioned_entries(&comm, "") {
            dirs.push(cuda.join("nccl"));
        }
        for dir in dirs {
            if dir.is_dir() {
                let detail = format!("NVIDIA HPC SDK {}", ctx.show(&dir));
                push_prefix(ctx, &mut out, &dir, None, detail);
            }
        }
    }
    if let Some((var, root)) = ctx.var_path("EBROOTNCCL") {
        let set = var.setting();
        let detail = format!("EasyBuild module {set}");
        push_prefix(ctx, &mut out, &root, Some(set), detail);
    }
    out
}

fn push_prefix(ctx: &Ctx, out: &mut Vec<Site>, prefix: &Path, var: Option<String>, detail: String) {
    if !prefix.is_dir() {
        if let Some(var) = &var {
            ctx.warn(format!(
                "{var} points at {}, which is not a directory.",
                ctx.show(prefix)
            ));
        }
        ctx.looked(SourceKind::Prefix, prefix, "no such directory");
        return;
    }
    ctx.looked(SourceKind::Prefix, prefix, detail.clone());
    let origin = Origin {
        source: SourceKind::Prefix,
        variable: var,
        package: None,
        detail,
    };
    out.push(Site::of_prefix(origin, prefix));
}
