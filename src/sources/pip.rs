//! A source: pip wheels `nvidia-nccl-cu11/12/13`, found by looking at
//! directories, never by starting Python. A wheel puts `nccl.h` in
//! `site-packages/nvidia/nccl/include` and only `libnccl.so.2` (no
//! `libnccl.so`) in `site-packages/nvidia/nccl/lib`.
//!
//! Site-packages are tried in this order: `PYTHONPATH` entries, the active
//! virtualenv (`VIRTUAL_ENV`), the conda env (`CONDA_PREFIX`), the
//! environment the program is installed in (`Config::python_prefix`), the
//! interpreters on `PATH`, pyenv's versions (`PYENV_ROOT`, else
//! `~/.pyenv`), the user site (`PYTHONUSERBASE`, else `~/.local`), and the
//! system's `dist-packages` / `site-packages`.

use std::path::{Path, PathBuf};

use super::{file_name_str, versioned_entries, Ctx, Origin, Package, Site, SourceKind};

/// Every site-packages that holds an NCCL wheel, in the order above; each
/// place looked at is recorded.
pub(crate) fn sites(ctx: &Ctx) -> Vec<Site> {
    let mut places = places(ctx);
    places.retain(|(sp, _)| sp.is_dir());
    let mut listed = Vec::with_capacity(places.len());
    for (sp, _) in &places {
        listed.push(sp.clone());
    }
    let first = crate::context::first_occurrences(&listed);
    let mut out = Vec::new();
    for ((sp, why), first) in places.into_iter().zip(first) {
        if !first {
            continue;
        }
        if let Some(site) = wheel_site(ctx, &sp, &why) {
            out.push(site);
        }
    }
    out
}

/// Adds `<prefix>`'s site-packages to `places`, each with why.
fn add(places: &mut Vec<(PathBuf, String)>, prefix: &Path, why: &str) {
    for dir in site_packages(prefix) {
        places.push((dir, why.to_string()));
    }
}

/// The site-packages to look in, each with why, in search order.
fn places(ctx: &Ctx) -> Vec<(PathBuf, String)> {
    let mut places: Vec<(PathBuf, String)> = Vec::new();
    // PYTHONPATH's own entries come first.
    if let Some((var, dirs)) = ctx.var_list("PYTHONPATH") {
        for dir in dirs {
            places.push((dir, var.name.clone()));
        }
    }
    for name in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some((var, prefix)) = ctx.var_path(name) {
            add(&mut places, &prefix, &var.name);
        }
    }
    if let Some(prefix) = &ctx.python_prefix {
        let prefix = ctx.path(prefix);
        let why = format!(
            "the environment this program is installed in, {}",
            ctx.show(&prefix)
        );
        add(&mut places, &prefix, &why);
    }
    for (prefix, why) in path_pythons(ctx) {
        add(&mut places, &prefix, &why);
    }
    let home = home_dir(ctx);
    if let Some(pyenv) = var_or_home(ctx, "PYENV_ROOT", home.as_deref(), ".pyenv") {
        for version in versioned_entries(&pyenv.join("versions"), "") {
            add(&mut places, &version, "pyenv");
        }
    }
    if let Some(base) = var_or_home(ctx, "PYTHONUSERBASE", home.as_deref(), ".local") {
        add(&mut places, &base, "user site");
    }
    for prefix in ["/usr/local", "/usr"] {
        add(&mut places, &ctx.path(prefix), "system");
    }
    places.push((
        ctx.path("/usr/lib/python3/dist-packages"),
        "system".to_string(),
    ));
    places
}

/// `HOME`, when it is set. Read as a locator, no rerun trigger: it only
/// says where pyenv and the user site are, and what they led to is
/// watched as files; a change of `HOME` alone (`sudo`, another shell) must
/// not rebuild everything above the -sys crate.
fn home_dir(ctx: &Ctx) -> Option<PathBuf> {
    let home = ctx.env.informing(|| ctx.env.raw("HOME"))?;
    Some(ctx.value_path("HOME", &home))
}

/// The directory the variable `name` names, else `<home>/<in_home>`.
fn var_or_home(ctx: &Ctx, name: &str, home: Option<&Path>, in_home: &str) -> Option<PathBuf> {
    match (ctx.var_path(name), home) {
        (Some((_, dir)), _) => Some(dir),
        (None, Some(home)) => Some(home.join(in_home)),
        (None, None) => None,
    }
}

/// The prefixes of the interpreters on `PATH` (`<prefix>/bin/python3`),
/// with why: a venv reached only through `PATH`, as Docker images set it
/// up. `PATH` is read as a locator, no rerun trigger: what it led to is
/// watched as files, and an IDE and a terminal whose `PATH`s differ must
/// not rerun the build script (and rebuild everything above it) on each
/// switch.
fn path_pythons(ctx: &Ctx) -> Vec<(PathBuf, String)> {
    let path = ctx.env.informing(|| ctx.var_list("PATH"));
    let Some((var, dirs)) = path else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for bin in &dirs {
        let has_python = bin.join("python3").exists() || bin.join("python").exists();
        if !has_python || file_name_str(bin) != Some("bin") {
            continue;
        }
        if let Some(prefix) = bin.parent() {
            let why = format!("python in {} ({})", ctx.show(bin), var.name);
            out.push((prefix.to_path_buf(), why));
        }
    }
    out
}

/// The site of one site-packages, when it holds `nvidia/nccl`, named by
/// its wheel's dist-info (with a warning when several wheels share it).
fn wheel_site(ctx: &Ctx, sp: &Path, why: &str) -> Option<Site> {
    let nccl = sp.join("nvidia/nccl");
    if !nccl.is_dir() {
        ctx.looked(SourceKind::Pip, sp, format!("no nvidia/nccl ({why})"));
        // An activated environment is where `pip install nvidia-nccl-cu12`
        // puts the wheel: a build script reruns when it comes (cargo reads
        // a directory's newest entry; `nvidia/` alone where it is there).
        if ctx.build_script && (why.ends_with("VIRTUAL_ENV") || why.ends_with("CONDA_PREFIX")) {
            let nvidia = sp.join("nvidia");
            let dir = if nvidia.is_dir() {
                nvidia
            } else {
                sp.to_path_buf()
            };
            ctx.watched.borrow_mut().push(dir);
        }
        return None;
    }
    ctx.looked(SourceKind::Pip, &nccl, format!("wheel ({why})"));
    let mut dists = distributions(sp);
    if dists.len() > 1 {
        let mut names: Vec<String> = Vec::new();
        for dist in &dists {
            names.push(dist.to_string());
        }
        ctx.warn(format!(
            "{} holds several NCCL wheels ({}); they share nvidia/nccl, so the files are those of \
             whichever was installed last. Uninstall all but one.",
            ctx.show(sp),
            names.join(", ")
        ));
    }
    let first = if dists.is_empty() {
        None
    } else {
        Some(dists.swap_remove(0))
    };
    let origin = Origin {
        source: SourceKind::Pip,
        variable: None,
        package: first,
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
    let mut out = Vec::new();
    for p in super::sorted_entries(sp) {
        if let Some(package) = distribution(&p) {
            out.push(package);
        }
    }
    out
}

/// The package a `nvidia_nccl_cu*-<version>.dist-info` directory names.
fn distribution(p: &Path) -> Option<Package> {
    let name = file_name_str(p)?;
    let stem = name.strip_suffix(".dist-info")?;
    let (dist, version) = stem.split_once('-')?;
    let cuda = dist.strip_prefix("nvidia_nccl_cu")?;
    Some(Package::Pip {
        name: format!("nvidia-nccl-cu{cuda}"),
        version: version.to_string(),
    })
}
