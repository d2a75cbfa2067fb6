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

/// Every site-packages that holds an NCCL wheel, in the order above; each
/// place looked at is recorded.
pub(crate) fn sites(ctx: &Ctx) -> Vec<Site> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (sp, why) in places(ctx) {
        if !sp.is_dir() {
            continue;
        }
        let key = std::fs::canonicalize(&sp).unwrap_or_else(|_| sp.clone());
        if !seen.insert(key) {
            continue;
        }
        out.extend(wheel_site(ctx, &sp, &why));
    }
    out
}

/// The site-packages to look in, each with why, in search order.
fn places(ctx: &Ctx) -> Vec<(PathBuf, String)> {
    // PYTHONPATH's own entries come first.
    let mut places: Vec<(PathBuf, String)> = match ctx.var_list("PYTHONPATH") {
        Some((var, dirs)) => dirs.into_iter().map(|d| (d, var.name.clone())).collect(),
        None => Vec::new(),
    };
    let mut add = |prefix: &Path, why: &str| {
        places.extend(
            site_packages(prefix)
                .into_iter()
                .map(|d| (d, why.to_string())),
        );
    };
    for name in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some((var, prefix)) = ctx.var_path(name) {
            add(&prefix, &var.name);
        }
    }
    for (prefix, why) in path_pythons(ctx) {
        add(&prefix, &why);
    }
    let home = ctx.env.raw("HOME").map(|h| ctx.value_path("HOME", &h));
    let pyenv = ctx
        .var_path("PYENV_ROOT")
        .map(|(_, p)| p)
        .or_else(|| home.as_ref().map(|h| h.join(".pyenv")));
    if let Some(pyenv) = pyenv {
        for version in versioned_entries(&pyenv.join("versions"), "") {
            add(&version, "pyenv");
        }
    }
    let user_base = ctx
        .var_path("PYTHONUSERBASE")
        .map(|(_, p)| p)
        .or_else(|| home.as_ref().map(|h| h.join(".local")));
    if let Some(base) = user_base {
        add(&base, "user site");
    }
    for prefix in ["/usr/local", "/usr"] {
        add(&ctx.path(prefix), "system");
    }
    places.push((
        ctx.path("/usr/lib/python3/dist-packages"),
        "system".to_string(),
    ));
    places
}

/// The prefixes of the interpreters on `PATH` (`<prefix>/bin/python3`),
/// with why. Not in a build script: a PATH search there would rerun it (and
/// rebuild everything above it) whenever PATH changes, as between an IDE
/// and a terminal. The command searches PATH and says what to set.
fn path_pythons(ctx: &Ctx) -> Vec<(PathBuf, String)> {
    let path = if ctx.build_script {
        None
    } else {
        ctx.var_list("PATH")
    };
    let Some((var, dirs)) = path else {
        return Vec::new();
    };
    dirs.iter()
        .filter(|bin| {
            ["python3", "python"].iter().any(|p| bin.join(p).exists())
                && bin.file_name().is_some_and(|n| n == "bin")
        })
        .filter_map(|bin| {
            let prefix = bin.parent()?.to_path_buf();
            Some((
                prefix,
                format!("python in {} ({})", ctx.show(bin), var.name),
            ))
        })
        .collect()
}

/// The site of one site-packages, when it holds `nvidia/nccl`, named by
/// its wheel's dist-info (with a warning when several wheels share it).
fn wheel_site(ctx: &Ctx, sp: &Path, why: &str) -> Option<Site> {
    let nccl = sp.join("nvidia/nccl");
    if !nccl.is_dir() {
        ctx.looked(SourceKind::Pip, sp, format!("no nvidia/nccl ({why})"));
        return None;
    }
    ctx.looked(SourceKind::Pip, &nccl, format!("wheel ({why})"));
    let dists = distributions(sp);
    if dists.len() > 1 {
        let names: Vec<String> = dists.iter().map(|p| p.to_string()).collect();
        ctx.warn(format!(
            "{} holds several NCCL wheels ({}); they share nvidia/nccl, so the files are those of \
             whichever was installed last. Uninstall all but one.",
            ctx.show(sp),
            names.join(", ")
        ));
    }
    let origin = Origin {
        source: SourceKind::Pip,
        variable: None,
        package: dists.into_iter().next(),
        detail: format!("pip wheel in {} ({why})", ctx.show(sp)),
    };
    let mut site = Site::new(origin, vec![nccl.join("include")], vec![nccl.join("lib")]);
    site.root = Some(nccl);
    Some(site)
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
