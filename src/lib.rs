//! # nccl-find
//!
//! Finds NVIDIA's NCCL at build time, checks it, picks one install, and says
//! why. Use it from a build script:
//!
//! ```no_run
//! // build.rs
//! // `None` on docs.rs (DOCS_RS set), where nothing is probed; on failure
//! // the whole message goes to stderr and the build script exits 1.
//! if let Some(nccl) = nccl_find::Config::new().atleast_version("2.18").probe_or_exit() {
//!     for dir in &nccl.include_paths {
//!         println!("cargo:include={}", dir.display());
//!     }
//! }
//! ```
//!
//! [`Config::probe`] returns `Err` with [`ErrorKind::DocsRs`] on docs.rs, so
//! a build script that uses it with `?` must treat that kind as success
//! (as [`Config::probe_or_exit`] does).
//!
//! The probe is a pipeline, one module each:
//! [`sources`] (where to look) → [`inspect`] (what is there) →
//! `select` (one winner, every loser with its reason) → [`emit`] (words).
//!
//! ## Search order
//!
//! 1. `NCCL_INCLUDE_DIR` + `NCCL_LIB_DIR`: both, or neither.
//! 2. `NCCL_HOME`, then `NCCL_ROOT`, then `NCCL_DIR`: an install root, with
//!    `include/` and `lib/`, `lib64/` or `lib/<multiarch>/`, or a source
//!    build's `build/include` and `build/lib`.
//! 3. `nccl.pc` on `PKG_CONFIG_PATH`, `PKG_CONFIG_LIBDIR` or pkg-config's defaults.
//! 4. pip wheels `nvidia-nccl-cu*`: `PYTHONPATH`, `VIRTUAL_ENV`, `CONDA_PREFIX`,
//!    the Pythons on `PATH`, pyenv, the user site, the system site-packages.
//! 5. `CONDA_PREFIX`, the NVIDIA HPC SDK's `comm_libs`, `EBROOTNCCL`.
//! 6. `CUDA_HOME`, `CUDA_PATH`, `CUDA_ROOT`, `CUDA_TOOLKIT_ROOT_DIR`,
//!    `/usr/local/cuda`, `/usr/local/cuda-*`, `/opt/cuda`.
//! 7. dpkg (`/usr/include` + `/usr/lib/<multiarch>`, named from the dpkg
//!    database), rpm (`/usr/lib64`), `/usr/lib`, `/usr/local`.
//! 8. `LIBRARY_PATH`, `LD_LIBRARY_PATH`, the loader cache.
//!
//! Sources 1–2 are *explicit*: they win outright, and if what they name
//! cannot be used, that is an error, never a silent fallback. Otherwise the
//! first usable install in this order wins.
//!
//! Every variable is read first with the target triple as prefix, as
//! openssl-sys does: `X86_64_UNKNOWN_LINUX_GNU_NCCL_HOME` before
//! `NCCL_HOME`. A bare `NCCL_VERSION` is never read: NVIDIA's CUDA images
//! set it in apt's format for their own use.
//!
//! ## Refusals
//!
//! NCCL 1 (a header with no version macros and NCCL 1's result codes, a
//! major version of 1, a `libnccl.so.1*`) is refused with a message naming
//! the file. So is a header whose version does not match the library beside
//! it (another major, or a library minor older than the header's).

#![deny(missing_docs)]
// Errors here are built at most a few times per probe, never in a loop that
// matters; keeping `Problem` unboxed keeps it easy to match on.
#![allow(clippy::result_large_err)]

mod env;
mod error;
mod files;
mod probe;
mod select;
mod target;
mod version;

pub mod api;
pub mod check;
pub mod emit;
pub mod inspect;
pub mod sources;

pub use check::{loader::Loader, Linking, MissingSymbol};
pub use emit::cargo::emit_rpath_from_dep;
pub use emit::loader_dir::{emit_loader_dir_from_dep, make_loader_dir, LoaderDir, LoaderDirError};
pub use env::EnvRead;
pub use error::{Error, ErrorKind};
pub use inspect::{Candidate, Problem, Status};
pub use probe::{CompileCheck, Config, Nccl, Report};
pub use sources::{Looked, MisleadingPc, Origin, Package, SourceKind};
pub use version::{CudaVersion, Version};
