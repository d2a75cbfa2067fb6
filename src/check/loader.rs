//! Which `libnccl.so.2` the dynamic loader will load at run time, worked
//! out from files as glibc's `ld.so` does for a program without `DT_RPATH`:
//! `LD_LIBRARY_PATH`, then the program's `RUNPATH`, then the loader cache,
//! then the default directories. Nothing is run.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::context::Ctx;
use crate::inspect::elf::{parse_version_text, read_elf};
use crate::inspect::library::version_from_name;
use crate::version::Version;

/// One `libnccl.so.2` the loader can see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visible {
    /// The path the loader opens.
    pub path: PathBuf,
    /// That file with links resolved.
    pub real: PathBuf,
    /// How the loader gets there: `LD_LIBRARY_PATH`, `RUNPATH`, `loader cache`, `default dir`.
    pub via: String,
    /// Its version, where it says.
    pub version: Option<Version>,
}

/// What the loader would do for `libnccl.so.2`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Loader {
    /// The file it would load: the first one visible.
    pub pick: Option<Visible>,
    /// Every distinct file it could see, in its search order.
    pub visible: Vec<Visible>,
    /// Whether `LD_LIBRARY_PATH` was taken into account (not when cross-compiling).
    pub used_ld_library_path: bool,
}

const SONAME: &str = "libnccl.so.2";

pub(crate) fn resolve(ctx: &Ctx, runpath: &[PathBuf], cross: bool) -> Loader {
    let mut places: Vec<(PathBuf, String)> = Vec::new();
    if !cross {
        if let Some((var, dirs)) = ctx.var_list("LD_LIBRARY_PATH") {
            places.extend(dirs.into_iter().map(|d| (d.join(SONAME), var.name.clone())));
        }
    }
    places.extend(
        runpath
            .iter()
            .map(|d| (d.join(SONAME), "RUNPATH".to_string())),
    );
    for (name, path) in ctx.ld_cache() {
        if name == SONAME {
            places.push((ctx.path(path), "loader cache".to_string()));
        }
    }
    let mut defaults = Vec::new();
    if let Some(ma) = ctx.target.multiarch {
        defaults.push(format!("/lib/{ma}"));
        defaults.push(format!("/usr/lib/{ma}"));
    }
    defaults.extend(["/lib64", "/usr/lib64", "/lib", "/usr/lib"].map(String::from));
    places.extend(
        defaults
            .iter()
            .map(|d| (ctx.path(d).join(SONAME), "default dir".to_string())),
    );

    let mut seen = HashSet::new();
    let mut visible = Vec::new();
    for (path, via) in places {
        let Ok(real) = ctx.canonical(&path) else {
            continue;
        };
        if !seen.insert(real.clone()) {
            continue;
        }
        let version = version_of(&real);
        visible.push(Visible {
            path,
            real,
            via,
            version,
        });
    }
    Loader {
        pick: visible.first().cloned(),
        visible,
        used_ld_library_path: !cross,
    }
}

fn version_of(real: &Path) -> Option<Version> {
    read_elf(real)
        .ok()
        .and_then(|e| e.version_text)
        .and_then(|t| parse_version_text(&t))
        .map(|(v, _)| v)
        .or_else(|| version_from_name(real))
}

/// The warning for a library that will not be the one loaded, if any.
pub(crate) fn warning(
    loader: &Loader,
    library: &Path,
    real: &Path,
    version: &Version,
    lib_dir: &Path,
) -> Option<String> {
    let fix = format!(
        "Put {} first on LD_LIBRARY_PATH, or give the final binary an rpath (nccl_find::emit_rpath_from_dep in its build script).",
        lib_dir.display()
    );
    match &loader.pick {
        None => Some(format!(
            "at run time the loader will find no libnccl.so.2 (it looks in LD_LIBRARY_PATH, the loader cache and \
             the default dirs), so a program linked against {} will not start. {fix}",
            library.display()
        )),
        Some(p) if p.real == real => None,
        Some(p) => {
            let theirs = p.version.as_ref().map_or("of unknown version".to_string(), |v| format!("NCCL {v}"));
            let same = p.version.as_ref().is_some_and(|v| v == version);
            Some(format!(
                "at run time the loader picks {} ({theirs}, via {}), not the linked {} (NCCL {version}){}. {fix}",
                p.path.display(),
                p.via,
                library.display(),
                if same {
                    ""
                } else {
                    ": expect `undefined symbol` errors for anything newer than that library"
                }
            ))
        }
    }
}
