//! A source: `NCCL_HOME`, then `NCCL_ROOT`, then `NCCL_DIR`, then
//! `NCCL_SOURCE_DIR` (a checkout of NCCL's sources, as NVIDIA's own Rust
//! bindings name it). The first one set wins; the others are reported as
//! shadowed. Each is an install root:
//! `<root>/{include,lib,lib64,lib/<multiarch>}`, or the source-build layout
//! `<root>/build/{include,lib}` (where `make src.build` puts a source build). A checkout that was never built
//! (only `src/nccl.h.in`) gets its own message.

use std::path::Path;

use super::{Ctx, Origin, Site, SourceKind};
use crate::problem::Problem;

/// The variables, in precedence order.
pub(crate) const VARS: [&str; 4] = ["NCCL_HOME", "NCCL_ROOT", "NCCL_DIR", "NCCL_SOURCE_DIR"];

pub(crate) fn sites(ctx: &Ctx) -> Vec<Site> {
    let mut out = Vec::new();
    for name in VARS {
        let Some((var, root)) = ctx.var_path(name) else {
            continue;
        };
        let variable = var.setting();
        let origin = Origin {
            source: SourceKind::Home,
            variable: Some(variable.clone()),
            package: None,
            detail: variable,
        };
        let mut site = layout(ctx, origin, &root);
        site.explicit = true;
        site.fault = match check_dir(ctx.root, &var.name, &root) {
            // `…/build` of a checkout not built yet: build it first.
            Some(Problem::Missing { .. })
                if root.file_name().is_some_and(|n| n == "build")
                    && root.parent().and_then(unbuilt_checkout).is_some() =>
            {
                root.parent().and_then(unbuilt_checkout)
            }
            Some(Problem::Missing { var: name, path })
                if !std::path::Path::new(&var.value).is_absolute()
                    && !var.value.to_string_lossy().starts_with('~') =>
            {
                Some(Problem::MissingRelative {
                    var: name,
                    given: crate::lines::escape_os(&var.value),
                    path,
                })
            }
            Some(problem) => Some(problem),
            None => unbuilt_checkout(&root)
                .or_else(|| inner_dir(&var.name, &root))
                .or_else(|| wheel_below(&var.name, &root, &site)),
        };
        ctx.looked(SourceKind::Home, &root, format!("named by {}", var.name));
        out.push(site);
    }
    out
}

/// The include and library dirs of an install root, with the source-build
/// layout used only when the root itself has no header.
pub(crate) fn layout(ctx: &Ctx, origin: Origin, root: &Path) -> Site {
    let build = root.join("build");
    let (base, mut libs) =
        if !root.join("include/nccl.h").exists() && build.join("include/nccl.h").exists() {
            (build.clone(), vec![build.join("lib")])
        } else {
            (
                root.to_path_buf(),
                vec![root.join("lib"), root.join("lib64")],
            )
        };
    if let Some(ma) = ctx.target.multiarch {
        libs.push(base.join("lib").join(ma));
    }
    let mut site = Site::new(origin, vec![base.join("include")], libs);
    site.root = Some(root.to_path_buf());
    site
}

/// An explicitly named directory must exist and be a directory.
pub(crate) fn check_dir(root: &Path, var: &str, dir: &Path) -> Option<Problem> {
    // Links are followed inside the root, as in a sysroot.
    let followed = match crate::files::resolve_in(root, dir, true) {
        Ok(real) => std::fs::metadata(real),
        Err(e) => Err(e),
    };
    match followed {
        Ok(m) if m.is_dir() => match std::fs::read_dir(dir) {
            Ok(_) => None,
            Err(e) => Some(Problem::Unreadable {
                path: dir.to_path_buf(),
                error: e.to_string(),
            }),
        },
        Ok(_) => Some(Problem::NotADirectory {
            var: var.to_string(),
            path: dir.to_path_buf(),
        }),
        // The name exists but cannot be followed: a dangling link or a loop.
        Err(e) if std::fs::symlink_metadata(dir).is_ok() => {
            Some(crate::problem::broken(root, dir, e))
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Some(Problem::Unreadable {
            path: dir.to_path_buf(),
            error: e.to_string(),
        }),
        Err(_) => Some(Problem::Missing {
            var: var.to_string(),
            path: dir.to_path_buf(),
        }),
    }
}

/// A root with no NCCL of its own but a pip wheel's below it: the
/// `site-packages` directory (`nvidia/nccl`), or a virtualenv or conda
/// prefix (`lib/python3.*/site-packages/nvidia/nccl`).
fn wheel_below(var: &str, root: &Path, site: &Site) -> Option<Problem> {
    let own = site.include_dirs.iter().any(|d| d.join("nccl.h").exists())
        || site
            .lib_dirs
            .iter()
            .any(|d| d.join("libnccl.so.2").exists());
    if own {
        return None;
    }
    let mut places = vec![root.join("nvidia/nccl")];
    for py in super::versioned_entries(&root.join("lib"), "python3") {
        places.push(py.join("site-packages/nvidia/nccl"));
    }
    let wheel = places
        .into_iter()
        .find(|w| w.join("lib/libnccl.so.2").exists())?;
    Some(Problem::WheelBelow {
        var: var.to_string(),
        path: root.to_path_buf(),
        wheel,
    })
}

/// `<root>/src/nccl.h.in` with no built header anywhere: a checkout of
/// NCCL's sources that was never built.
/// A root that is an install's `lib/` or `include/` (it holds
/// `libnccl.so*` or `nccl.h` itself, with no NCCL below it): the variable
/// names the prefix above it, which is said.
fn inner_dir(var: &str, root: &Path) -> Option<Problem> {
    if root.join("include/nccl.h").exists() || root.join("lib").is_dir() {
        return None;
    }
    let holds = |name: &str| {
        std::fs::read_dir(root).ok().is_some_and(|d| {
            d.flatten()
                .take(4096)
                .any(|e| e.file_name().to_string_lossy().starts_with(name))
        })
    };
    let what = match (holds("libnccl.so"), root.join("nccl.h").exists()) {
        (true, _) => "a library directory (it holds libnccl.so*)",
        (false, true) => "an include directory (it holds nccl.h)",
        _ => return None,
    };
    Some(Problem::InnerDir {
        var: var.to_string(),
        path: root.to_path_buf(),
        what,
        prefix: root.parent()?.to_path_buf(),
    })
}

fn unbuilt_checkout(root: &Path) -> Option<Problem> {
    let built = root.join("include/nccl.h").exists() || root.join("build/include/nccl.h").exists();
    let mut template = root.join("src/nccl.h.in");
    if !template.exists() {
        template = root.join("nccl.h.in");
        if !template.exists() {
            return None;
        }
    }
    if built {
        return None;
    }
    Some(Problem::UnbuiltSource { template })
}
