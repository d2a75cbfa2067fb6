//! A source: pip wheels `nvidia-nccl-cu11/12/13`, found by looking at
//! directories, never by starting Python. A wheel puts `nccl.h` in
//! `site-packages/nvidia/nccl/include` and only `libnccl.so.2` (no
//! `libnccl.so`) in `site-packages/nvidia/nccl/lib`.
//!
//! Site-packages are tried in this order: `PYTHONPATH` entries, the active
//! virtualenv (`VIRTUAL_ENV`), the conda env (`CONDA_PREFIX`), the
//! interpreters on `PATH` (not in a build script), pyenv's versions (`PYENV_ROOT`, else
//! `~/.pyenv`), the user site (`PYTHONUSERBASE`, else `~/.local`), and the
//! system's `dist-packages` / `site-packages`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::{versioned_entries, Ctx, Origin, Package, Site, SourceKind};

pub(crate) fn sites(ctx: &Ctx) -> Vec<Site> {
    let mut places: Vec<(PathBuf, String)> = Vec::new();
    if let Some((var, dirs)) = ctx.var_list("PYTHONPATH") {
        places.extend(dirs.into_iter().map(|d| (d, var.name.clone())));
    }
    for name in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some((var, prefix)) = ctx.var_path(name) {
            places.extend(
                site_packages(&prefix)
                    .into_iter()
                    .map(|d| (d, var.name.clone())),
            );
        }
    }
    // Not in a build script: a PATH search there would rerun it (and
    // rebuild everything above it) whenever PATH changes, as between an IDE
    // and a terminal. The command searches PATH and says what to set.
    let path = if ctx.build_script {
        None
    } else {
        ctx.var_list("PATH")
    };
    if let Some((var, dirs)) = path {
        for bin in dirs {
            let has_python = ["python3", "python"].iter().any(|p| bin.join(p).exists());
            if has_python && bin.file_name().is_some_and(|n| n == "bin") {
                if let Some(prefix) = bin.parent() {
                    let why = format!("python in {} ({})", ctx.show(&bin), var.name);
                    places.extend(site_packages(prefix).into_iter().map(|d| (d, why.clone())));
                }
            }
        }
    }
    let home = ctx.env.raw("HOME").map(|h| ctx.value_path("HOME", &h));
    let pyenv = ctx
        .var_path("PYENV_ROOT")
        .map(|(_, p)| p)
        .or_else(|| home.as_ref().map(|h| h.join(".pyenv")));
    if let Some(pyenv) = pyenv {
        for version in versioned_entries(&pyenv.join("versions"), "") {
            places.extend(
                site_packages(&version)
                    .into_iter()
                    .map(|d| (d, "pyenv".to_string())),
            );
        }
    }
    let user_base = ctx
        .var_path("PYTHONUSERBASE")
        .map(|(_, p)| p)
        .or_else(|| home.as_ref().map(|h| h.join(".local")));
    if let Some(base) = user_base {
        places.extend(
            site_packages(&base)
                .into_iter()
                .map(|d| (d, "user site".to_string())),
        );
    }
    for prefix in ["/usr/local", "/usr"] {
        places.extend(
            site_packages(&ctx.path(prefix))
                .into_iter()
                .map(|d| (d, "system".to_string())),
        );
    }
    places.push((
        ctx.path("/usr/lib/python3/dist-packages"),
        "system".to_string(),
    ));

    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (sp, why) in places {
        if !sp.is_dir() {
            continue;
        }
        let key = std::fs::canonicalize(&sp).unwrap_or_else(|_| sp.clone());
        if !seen.insert(key) {
            continue;
        }
        let nccl = sp.join("nvidia/nccl");
        if !nccl.is_dir() {
            ctx.looked(SourceKind::Pip, &sp, format!("no nvidia/nccl ({why})"));
            continue;
        }
        ctx.looked(SourceKind::Pip, &nccl, format!("wheel ({why})"));
        let dists = distributions(&sp);
        if dists.len() > 1 {
            let names: Vec<String> = dists.iter().map(|p| p.to_string()).collect();
            ctx.warn(format!(
                "{} holds several NCCL wheels ({}); they share nvidia/nccl, so the files are those of \
                 whichever was installed last. Uninstall all but one.",
                ctx.show(&sp),
                names.join(", ")
            ));
        }
        let origin = Origin {
            source: SourceKind::Pip,
            variable: None,
            package: dists.into_iter().next(),
            detail: format!("pip wheel in {} ({why})", ctx.show(&sp)),
        };
        let mut site = Site::new(origin, vec![nccl.join("include")], vec![nccl.join("lib")]);
        site.root = Some(nccl);
        out.push(site);
    }
    out
}

/// `<prefix>/lib/python3.*/{site,dist}-packages`, newest Python first.
pub(crate) fn site_packages(prefix: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        for py in versioned_entries(&prefix.join(lib), "python3") {
            for sp in ["site-packages", "dist-packages"] {
                out.push(py.join(sp));
            }
        }
    }
    out
}

/// The `nvidia_nccl_cu*-<version>.dist-info` directories in a site-packages.
fn distributions(sp: &Path) -> Vec<Package> {
    super::sorted_entries(sp)
        .iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            let stem = name.strip_suffix(".dist-info")?;
            let (dist, version) = stem.split_once('-')?;
            let cuda = dist.strip_prefix("nvidia_nccl_cu")?;
            Some(Package::Pip {
                name: format!("nvidia-nccl-cu{cuda}"),
                version: version.to_string(),
            })
        })
        .collect()
}
