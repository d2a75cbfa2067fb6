//! # nccl-find
//!
//! Finds NVIDIA's NCCL at build time, checks it, picks one install, and says
//! why. Use it from a build script:
//!
//! ```no_run
//! // build.rs of an `nccl-sys` crate (with `links = "nccl"` in Cargo.toml).
//! // The probe prints the link flags, the rerun triggers and the metadata
//! // (`DEP_NCCL_INCLUDE`, `DEP_NCCL_LIB_DIR`, …) itself. `None` on docs.rs
//! // (DOCS_RS set), where nothing is probed; on failure the whole message
//! // goes to stderr and the script exits 1.
//! if let Some(nccl) = nccl_find::Config::new().atleast_version("2.18").probe_or_exit() {
//!     // Use what was found, e.g. for bindgen: nccl.include_paths,
//!     // nccl.cuda_include_dirs, nccl.version.
//!     let _ = nccl.include_paths;
//! }
//! ```
//!
//! [`Config::probe`] returns `Err` on docs.rs ([`Error::is_docs_rs`]), so a
//! build script that uses it with `?` or `unwrap` must treat that as success
//! (as [`Config::probe_or_exit`] does).
//!
//! The probe is a pipeline: sources (where to look) → inspect (what is
//! there) → select (one winner, every loser with its reason) → check (how to
//! link, what the loader will load) → [`Report`] → emit (directives, words).
//! What a build script uses is at the crate's root; the words of the
//! report (sources, candidates, problems, the loader's verdict) are in
//! [`explain`].
//!
//! ## Search order
//!
//! | # | source | looks at |
//! |---|---|---|
//! | 1 | explicit dirs | `NCCL_INCLUDE_DIR` + `NCCL_LIB_DIR` (both, or neither: one alone is an error) |
//! | 2 | NCCL_HOME | `NCCL_HOME`, then `NCCL_ROOT`, `NCCL_DIR`, `NCCL_SOURCE_DIR` (a source checkout): `include/` + `lib/`, `lib64/`, `lib/<multiarch>/`; or a source build's `build/include` + `build/lib` (a checkout never built is named so) |
//! | 3 | pkg-config | `nccl.pc` on `PKG_CONFIG_PATH`, then `PKG_CONFIG_LIBDIR` or the default dirs (`PKG_CONFIG_SYSROOT_DIR` honoured), each read as the `pkg-config` crate reads it (below); skipped when `NCCL_NO_PKG_CONFIG` is set. An `nccl.pc` whose directories hold no NCCL (some distro packages ship one with the build machine's `prefix=/usr/local`) is bypassed and named in a note (a warning where the tree it sits in holds an NCCL to name with `NCCL_HOME`, as a source build's does); `doctor` warns C and CMake users |
//! | 4 | pip | `nvidia-nccl-cu*` wheels in `PYTHONPATH`, `VIRTUAL_ENV`, `CONDA_PREFIX`, the environment the program is installed in (`nccl-find` from pip; `Config::python_prefix`), the Pythons on `PATH`, pyenv, the user site, system site/dist-packages |
//! | 5 | prefix | `CONDA_PREFIX`, NVIDIA HPC SDK `comm_libs` (`NVHPC_ROOT`, `/opt/nvidia/hpc_sdk`), `EBROOTNCCL` |
//! | 6 | Spack | `SPACK_ROOT`: every `nccl-<version>-<hash>` prefix under `$SPACK_ROOT/opt/spack`, in Spack 1.0's layout (`<platform>-<target>/`) and the older one (`<platform>-<os>-<target>/<compiler>-<version>/`), newest first, named from its `.spack/spec.json` |
//! | 7 | CUDA toolkit | `CUDA_HOME`, `CUDA_PATH`, `CUDA_ROOT`, `CUDA_TOOLKIT_ROOT_DIR`, `/usr/local/cuda`, `/usr/local/cuda-*` (newest first), `/opt/cuda`, with `targets/<arch>-linux` |
//! | 8 | system | dpkg (`/usr/include` + `/usr/lib/<multiarch>`, named and versioned from `/var/lib/dpkg/status` and `info/libnccl*.list`), rpm `/usr/lib64`, `/usr/lib`, `/usr/local` |
//! | 9 | search path | `LIBRARY_PATH`, `LD_LIBRARY_PATH`, the loader cache `/etc/ld.so.cache` (read as a file) |
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
//! ## API levels
//!
//! In a build script the probe also declares and sets one cfg per NCCL API
//! level at or below the header's version, so that a crate can gate calls to
//! newer functions (`#[cfg(nccl_2_18)]` around `ncclCommSplit`). The levels:
//! `nccl_2_0`, `nccl_2_2`, `nccl_2_3_4`, `nccl_2_4`, `nccl_2_7`, `nccl_2_10`, `nccl_2_11`, `nccl_2_13`, `nccl_2_14`, `nccl_2_17_1`, `nccl_2_18`, `nccl_2_19`, `nccl_2_22_3`, `nccl_2_23`, `nccl_2_24`, `nccl_2_27`, `nccl_2_28_3`, `nccl_2_28_7`, `nccl_2_29_2`, `nccl_2_29_7`, `nccl_2_30_3`, `nccl_2_30_4`, `nccl_2_30_7`, `nccl_2_31_2`, `nccl_2_32_3`.
//!
//! ## Refusals
//!
//! NCCL 1 (a header with no version macros and NCCL 1's result codes, a
//! major version of 1, a `libnccl.so.1*`) is refused with a message naming
//! the file. So is a header whose version does not match the library beside
//! it (another major, or a library minor older than the header's).

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Errors here are built at most a few times per probe, never in a loop that
// matters; keeping `Problem` unboxed keeps it easy to match on.
#![allow(clippy::result_large_err)]
// Every downstream build script compiles this crate, in a debug build where
// machine code for std's iterator adaptors is emitted anew for each closure
// they are given. Plain loops are used instead, so clippy's advice to turn
// them back into adaptors is declined here.
#![allow(clippy::manual_find, clippy::manual_flatten, clippy::manual_filter_map)]

// The layers, lowest first; a module imports only from layers below its
// own (ARCHITECTURE.md; tests/architecture.rs checks it).
mod env;
mod files;
mod ldcache;
mod lines;
mod req;
mod target;
mod version;

mod changes;
mod origin;

mod context;

mod problem;

mod error;
mod probe;
mod report;
mod select;

mod api;
mod check;
mod emit;
mod inspect;
mod sources;

pub use check::Linking;
pub use emit::cargo::emit_rpath_from_dep;
#[cfg(feature = "loader-dir")]
#[cfg_attr(docsrs, doc(cfg(feature = "loader-dir")))]
pub use emit::loader_dir::emit_loader_dir_from_dep;
pub use error::Error;
pub use probe::Config;
pub use problem::ErrorKind;
pub use report::{Nccl, Report};
pub use version::{CudaVersion, Version};

/// The words of the [`Report`]: where each install came from, what it is,
/// why one was not chosen, and what the run-time loader will load; and the
/// catalog of NCCL's API behind them, read from the releases
/// ([`introduced_in`](explain::introduced_in),
/// [`known_releases`](explain::known_releases)), with what NCCL does
/// differently from one release to the next ([`Change`](explain::Change)). A build script that only
/// links needs none of them; one that explains its choice, or matches on a
/// [`Problem`](explain::Problem), does.
pub mod explain {
    pub use crate::api::{introduced_in, known_releases};
    pub use crate::changes::Change;
    pub use crate::check::loader::{Loader, Verdict, Visible};
    pub use crate::check::{CompileCheck, LinkArg, MissingSymbol};
    pub use crate::env::EnvRead;
    pub use crate::inspect::{Candidate, Status};
    pub use crate::origin::{Looked, MisleadingPc, Origin, Package, SourceKind};
    pub use crate::problem::Problem;
}

/// The private loader directory (feature `loader-dir`): a directory of
/// links that makes the run-time loader load the selected NCCL, for builds
/// whose programs run where no rpath can point
/// ([`emit_loader_dir_from_dep`] makes and emits it), or in the user's
/// cache for programs built without nccl-find
/// ([`make_in_user_cache`](loader_dir::make_in_user_cache)).
#[cfg(feature = "loader-dir")]
#[cfg_attr(docsrs, doc(cfg(feature = "loader-dir")))]
pub mod loader_dir {
    pub use crate::emit::kept::{check_owned_path, make_in_user_cache};
    pub use crate::emit::loader_dir::{make_loader_dir, LoaderDir, LoaderDirError};
}

/// Not part of the API, and not covered by semver: what this repository's
/// command (`nccl-find`), tests and fuzz targets use of the pipeline's
/// insides (the parsers, the report's words, the directives' pieces). Any
/// release may change it.
#[doc(hidden)]
pub mod internal {
    pub use crate::check::ldso::{LoaderFacts, Process, Via};
    #[cfg(feature = "command")]
    pub use crate::emit::text::report;
    pub use crate::files::read_bounded;
    pub use crate::inspect::elf::{dynamic_symbols, read_elf};
    #[cfg(feature = "command")]
    pub use crate::inspect::elf::{imports, rodata_names};
    pub use crate::lines::escape_os;
}

/// What the fuzz targets (`fuzz/`, built with `--cfg fuzzing`) call: the
/// parsers of outside bytes. Absent from every other build.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzz {
    pub use crate::inspect::elf::{dynamic_symbols_bytes, parse_version_text, read_elf_bytes};
    pub use crate::inspect::header::parse_header;
    pub use crate::ldcache::parse_ld_cache;
    pub use crate::sources::pkgconfig::parse_pc;
    pub use crate::sources::spack::spack_spec_json;
    pub use crate::sources::system::parse_dpkg_status;
}
