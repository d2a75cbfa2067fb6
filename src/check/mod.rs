//! Step 4: **checks** on the selected install that catch run-time failures
//! at build time: which library the run-time loader will really load,
//! whether the library exports the functions a crate needs, and what static
//! linking needs.

use std::path::{Path, PathBuf};

#[cfg(feature = "cc")]
pub(crate) mod compile;
pub(crate) mod cuda_headers;
pub mod ldso;
pub(crate) mod link;
pub mod loader;

pub use crate::problem::MissingSymbol;
pub use link::{LinkArg, Linking};
use loader::Loader;

use crate::context::Ctx;
use crate::inspect::elf::dynamic_symbols;
use crate::inspect::Candidate;
use crate::problem::{ErrorKind, Problem};
use crate::version::Version;

/// The required symbols `library` does not export.
pub(crate) fn missing_symbols(
    library: &Path,
    required: &[String],
) -> Result<Vec<MissingSymbol>, String> {
    if required.is_empty() {
        return Ok(Vec::new());
    }
    let have = dynamic_symbols(library)?;
    let mut missing = Vec::new();
    for s in required {
        if have.binary_search(s).is_err() {
            missing.push(MissingSymbol {
                name: s.clone(),
                introduced_in: crate::api::introduced_in(s),
            });
        }
    }
    Ok(missing)
}

/// A header older than the library it goes with: NCCL runs programs built
/// against older headers, so the install is used, but what came after the
/// header's version is not declared.
fn older_header(c: &Candidate) -> Option<String> {
    let (hv, lv) = (c.header_version.as_ref()?, c.library_version.as_ref()?);
    if (hv.major, hv.minor, hv.patch) >= (lv.major, lv.minor, lv.patch) {
        return None;
    }
    Some(format!(
        "the header {} is NCCL {hv}, older than the library {} (NCCL {lv}): programs built \
         against it run, but what NCCL added after {hv} is not declared. Use the header that \
         came with the library (NCCL_INCLUDE_DIR), if that is not what you meant.",
        c.header.as_deref().unwrap_or(Path::new("?")).display(),
        c.library_real
            .as_deref()
            .unwrap_or(Path::new("?"))
            .display(),
    ))
}

/// What the checks after selection add to the result.
pub(crate) struct Post {
    pub linking: Linking,
    pub cuda_include: Result<Vec<PathBuf>, String>,
    pub compiled: Option<CompileCheck>,
}

/// What the compile-and-run check found: `ncclGetVersion()` of the library
/// loaded, and `NCCL_VERSION_CODE` of the header compiled against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompileCheck {
    /// `ncclGetVersion()` of the library the program loaded.
    pub runtime_code: u32,
    /// `NCCL_VERSION_CODE` from the header it was compiled with.
    pub header_code: u32,
}

/// What the checks after selection are asked to do (from `Config`).
pub(crate) struct Options<'a> {
    /// `Config::loader_check`.
    pub loader: bool,
    /// `Config::statik`, when set.
    pub statik: Option<bool>,
    /// `Config::require_symbols`.
    pub symbols: &'a [String],
    /// `Config::compile_check`.
    pub compile_check: bool,
}

/// The checks after selection: static or shared, required symbols, the
/// run-time loader, the CUDA headers, and the compile check when asked.
pub(crate) fn after_selection(
    ctx: &Ctx,
    c: &Candidate,
    loader: &Loader,
    opts: &Options,
) -> Result<Post, ErrorKind> {
    let lib_dir = c.lib_dir.clone().unwrap_or_default();
    let linking = link::linking(ctx, c, opts.statik)?;
    let library_real = c.library_real.clone().unwrap_or_default();
    let version = match &c.library_version {
        Some(v) => v.clone(),
        None => Version::new(0, 0, 0, ""),
    };
    let missing = match missing_symbols(&library_real, opts.symbols) {
        Ok(missing) => missing,
        Err(why) => {
            return Err(ErrorKind::Explicit {
                variable: "require_symbols".into(),
                problem: Problem::BadLibrary {
                    file: library_real.clone(),
                    why,
                },
            })
        }
    };
    if !missing.is_empty() {
        return Err(ErrorKind::MissingSymbols {
            library: library_real,
            version,
            missing,
        });
    }
    if let Some(w) = older_header(c) {
        ctx.warn(w);
    }
    if opts.loader && !matches!(linking, Linking::Static { .. }) {
        let library = c.library.clone().unwrap_or_default();
        match loader::warning(loader, &library, &library_real, &version, &lib_dir) {
            Some((w, true)) => ctx.warn(w),
            Some((n, false)) => ctx.note(n),
            None => {}
        }
    }
    let cuda_include = cuda_headers::cuda_headers(ctx, c);
    #[cfg(feature = "cc")]
    let compiled = match opts.compile_check {
        true => compile::check(ctx, c, &linking, &cuda_include)?,
        false => None,
    };
    #[cfg(not(feature = "cc"))]
    let compiled = {
        let _ = opts.compile_check;
        None
    };
    Ok(Post {
        linking,
        cuda_include,
        compiled,
    })
}
