//! How the selected install is linked: shared by `-lnccl`, shared by file
//! name where there is no `libnccl.so`, or static with the static CUDA
//! runtime; and the one translation of that into linker arguments, which
//! the cargo directives, the compile check and the CLI's `--libs` all use.

use std::path::{Path, PathBuf};

use crate::context::Ctx;
use crate::inspect::Candidate;
use crate::origin::Package;
use crate::problem::ErrorKind;

/// How the selected install is linked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Linking {
    /// `-lnccl` against `libnccl.so`.
    Dynamic,
    /// `libnccl.so.2` by file name (`dylib:+verbatim`), where there is no `libnccl.so`.
    DynamicVerbatim,
    /// `libnccl_static.a` with the static CUDA runtime.
    Static {
        /// `libnccl_static.a`.
        archive: PathBuf,
        /// `libcudart_static.a`.
        cudart: PathBuf,
    },
}

/// The shared libraries the static CUDA runtime needs beside it.
pub const STATIC_SYSTEM_LIBS: [&str; 4] = ["stdc++", "pthread", "dl", "rt"];

/// One linker input, independent of how a tool spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkArg<'a> {
    /// A directory to search (`-L`, `rustc-link-search=native=`).
    SearchDir(&'a Path),
    /// A shared library by name (`-lnccl`, `rustc-link-lib=dylib=nccl`).
    Shared(&'static str),
    /// A shared library by file name (`-l:libnccl.so.2`,
    /// `rustc-link-lib=dylib:+verbatim=libnccl.so.2`).
    SharedFile(&'static str),
    /// A static library: its name (`-lnccl_static`,
    /// `rustc-link-lib=static=nccl_static`) and its file, in a directory
    /// given by a `SearchDir` before it.
    Static {
        /// The library's name, without `lib` and `.a`.
        name: &'static str,
        /// The archive.
        file: &'a Path,
    },
}

impl Linking {
    /// A fixed identifier for tools (`--json`): `dynamic`, `verbatim` or
    /// `static`.
    pub fn id(&self) -> &'static str {
        match self {
            Linking::Dynamic => "dynamic",
            Linking::DynamicVerbatim => "verbatim",
            Linking::Static { .. } => "static",
        }
    }

    /// The linker inputs for this install, in order: the library's
    /// directory, the library, and for static linking the static CUDA
    /// runtime's directory, the runtime, and the system libraries it needs.
    /// The one translation of [`Linking`] into linker arguments: the cargo
    /// directives, the compile check and the CLI's `--libs` spell it.
    pub fn args<'a>(&'a self, lib_dir: &'a Path) -> Vec<LinkArg<'a>> {
        let mut out = vec![LinkArg::SearchDir(lib_dir)];
        match self {
            Linking::Dynamic => out.push(LinkArg::Shared("nccl")),
            Linking::DynamicVerbatim => out.push(LinkArg::SharedFile("libnccl.so.2")),
            Linking::Static { archive, cudart } => {
                out.push(LinkArg::Static {
                    name: "nccl_static",
                    file: archive,
                });
                if let Some(dir) = cudart.parent() {
                    out.push(LinkArg::SearchDir(dir));
                }
                out.push(LinkArg::Static {
                    name: "cudart_static",
                    file: cudart,
                });
                for l in STATIC_SYSTEM_LIBS {
                    out.push(LinkArg::Shared(l));
                }
            }
        }
        out
    }
}

/// Chooses static or shared linking for the selected install (`asked`:
/// `Config::statik`), and for static linking finds `libcudart_static.a`.
pub(crate) fn linking(ctx: &Ctx, c: &Candidate, asked: Option<bool>) -> Result<Linking, ErrorKind> {
    let lib_dir = c.lib_dir.clone().unwrap_or_default();
    if wants_static(ctx, c, asked)? {
        let Some(archive) = c.static_library.clone() else {
            return Err(ErrorKind::StaticMissing {
                lib_dir: lib_dir.clone(),
                hint: static_hint(c),
            });
        };
        let mut extra = Vec::new();
        if let Some(ma) = ctx.target.multiarch {
            extra.push(ctx.path("/usr/lib").join(ma));
        }
        if let Some((_, p)) = ctx.var_path("CONDA_PREFIX") {
            extra.push(p.join("lib"));
        }
        let found = crate::sources::cuda::find_file(
            ctx,
            c.cuda_version,
            "libcudart_static.a",
            &["lib64", "lib"],
            extra,
        );
        let cudart = match found {
            Ok(cudart) => cudart,
            Err(looked) => {
                return Err(ErrorKind::CudartStaticMissing {
                    looked,
                    cuda: c.cuda_version,
                })
            }
        };
        Ok(Linking::Static { archive, cudart })
    } else if c.has_dev_link {
        Ok(Linking::Dynamic)
    } else {
        Ok(Linking::DynamicVerbatim)
    }
}

/// What to do about a missing `libnccl_static.a`, by where the install came from.
fn static_hint(c: &Candidate) -> String {
    match &c.origin.package {
        _ if is_wheel(c) => "pip wheels ship no static library; use the NVIDIA tarball, \
                 libnccl-dev, or a source build (make src.staticlib)"
            .into(),
        Some(Package::Dpkg { dev: None, .. }) => {
            "install libnccl-dev, which has libnccl_static.a".into()
        }
        _ => "point NCCL_HOME at an install with lib/libnccl_static.a (tarball, libnccl-dev, \
                  libnccl-static, or a source build), or link the shared library (NCCL_STATIC=0)"
            .into(),
    }
}

/// Static or shared, in the order the `pkg-config` crate uses:
/// `Config::statik`, `NCCL_STATIC` (1 or 0), `NCCL_DYNAMIC`, then
/// `PKG_CONFIG_ALL_STATIC` (`PKG_CONFIG_ALL_DYNAMIC` asks for the
/// default, shared). The global
/// `PKG_CONFIG_ALL_STATIC` asks for static NCCL only where there is a
/// `libnccl_static.a`; elsewhere it links shared and says so.
fn wants_static(ctx: &Ctx, c: &Candidate, asked: Option<bool>) -> Result<bool, ErrorKind> {
    if let Some(s) = asked {
        return Ok(s);
    }
    if let Some(v) = ctx.var("NCCL_STATIC") {
        return match v.value.to_string_lossy().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(ErrorKind::BadValue {
                variable: v.setting(),
                expected: "1 (static) or 0 (shared)",
            }),
        };
    }
    if ctx.var("NCCL_DYNAMIC").is_some() {
        return Ok(false);
    }
    if ctx
        .env
        .raw("PKG_CONFIG_ALL_STATIC")
        .is_some_and(|v| !v.is_empty())
    {
        if c.static_library.is_some() {
            return Ok(true);
        }
        ctx.warn(
            "PKG_CONFIG_ALL_STATIC is set, but this install has no libnccl_static.a: NCCL is linked \
             shared. Set NCCL_STATIC=1 to make that an error, or NCCL_DYNAMIC=1 to silence this."
                .into(),
        );
        return Ok(false);
    }
    // Shared is the default, so PKG_CONFIG_ALL_DYNAMIC changes nothing
    // and is not read (reading it would only add a rerun trigger).
    Ok(false)
}

/// A pip wheel's files, found through any source.
fn is_wheel(c: &Candidate) -> bool {
    let in_wheel_dir = match &c.lib_dir {
        Some(d) => d.ends_with("nvidia/nccl/lib"),
        None => false,
    };
    matches!(c.origin.package, Some(Package::Pip { .. })) || in_wheel_dir
}
