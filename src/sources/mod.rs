//! Step 1 of the probe: **sources**. Each source proposes *sites* (an
//! include directory and a library directory that belong together) and says
//! where it got them from. Sources never judge what they find; that is
//! [`crate::inspect`]'s job.
//!
//! `SOURCES` is the one table of sources: their order is the search
//! order, and the crate's documentation, the README and `nccl-find --print`
//! are made from it (a test checks the documents against it). Adding a
//! layout is one module with its `sites` function, one row in the table,
//! one fixture tree and one test.

use std::fmt;
use std::path::{Path, PathBuf};

pub(crate) use crate::context::{file_name_str, sorted_entries, versioned_entries, Ctx};
pub(crate) use crate::origin::{Origin, Package, SourceKind};
use crate::problem::{ErrorKind, Problem};

pub(crate) mod cuda;
pub(crate) mod explicit;
pub(crate) mod home;
pub(crate) mod pip;
pub mod pkgconfig;
pub(crate) mod prefix;
pub mod search_path;
pub(crate) mod spack;
pub mod system;

/// A place proposed by a source: an include dir and a library dir that
/// belong together. Directories are tried in order; the first holding the
/// file wins.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    pub origin: Origin,
    pub include_dirs: Vec<PathBuf>,
    pub lib_dirs: Vec<PathBuf>,
    /// Named by an NCCL variable: it wins outright, and any fault is fatal.
    pub explicit: bool,
    /// The install's root, where one makes sense (`NCCL_HOME`, a prefix).
    pub root: Option<PathBuf>,
    /// A fault the source already knows about (the directory does not
    /// exist, an unbuilt source checkout, …).
    pub fault: Option<Problem>,
}

impl Site {
    pub fn new(origin: Origin, include_dirs: Vec<PathBuf>, lib_dirs: Vec<PathBuf>) -> Site {
        Site {
            origin,
            include_dirs,
            lib_dirs,
            explicit: false,
            root: None,
            fault: None,
        }
    }

    /// The site of an install prefix: `include` + `lib`, `lib64`, with the
    /// prefix as its root.
    pub fn of_prefix(origin: Origin, prefix: &Path) -> Site {
        let mut site = Site::new(
            origin,
            vec![prefix.join("include")],
            vec![prefix.join("lib"), prefix.join("lib64")],
        );
        site.root = Some(prefix.to_path_buf());
        site
    }
}

/// One source: what it is called, what it looks at, and its search.
pub(crate) struct Source {
    /// Its identifier.
    pub kind: SourceKind,
    /// A fixed identifier, for tools (`--json`).
    pub id: &'static str,
    /// A short name, used in reports.
    pub name: &'static str,
    /// What it looks at, in one line (`nccl-find --print`).
    pub describe: &'static str,
    /// What it looks at, in full (Markdown: the search order's table in
    /// the crate's documentation and the README; a unit test holds them
    /// to it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub doc: &'static str,
    /// Its search: the sites it proposes, in its own order.
    pub search: fn(&Ctx) -> Result<Vec<Site>, ErrorKind>,
}

/// Every source, in search order. The first two are *explicit*: what they
/// name wins outright, and cannot fall back.
pub(crate) static SOURCES: &[Source] = &[
    Source {
        kind: SourceKind::ExplicitDirs,
        id: "explicit_dirs",
        name: "explicit dirs",
        describe: "NCCL_INCLUDE_DIR + NCCL_LIB_DIR (both, or neither)",
        doc: "`NCCL_INCLUDE_DIR` + `NCCL_LIB_DIR` (both, or neither: one alone is an error)",
        search: explicit::sites,
    },
    Source {
        kind: SourceKind::Home,
        id: "nccl_home",
        name: "NCCL_HOME",
        describe: "NCCL_HOME, then NCCL_ROOT, NCCL_DIR, NCCL_SOURCE_DIR",
        doc: "`NCCL_HOME`, then `NCCL_ROOT`, `NCCL_DIR`, `NCCL_SOURCE_DIR` (a source checkout): `include/` + `lib/`, `lib64/`, `lib/<multiarch>/`; or a source build's `build/include` + `build/lib` (a checkout never built is named so)",
        search: |ctx| Ok(home::sites(ctx)),
    },
    Source {
        kind: SourceKind::PkgConfig,
        id: "pkg_config",
        name: "pkg-config",
        describe: "nccl.pc on PKG_CONFIG_PATH / PKG_CONFIG_LIBDIR / the default pkg-config dirs",
        doc: "`nccl.pc` on `PKG_CONFIG_PATH`, then `PKG_CONFIG_LIBDIR` or the default dirs (`PKG_CONFIG_SYSROOT_DIR` honoured), each read as the `pkg-config` crate reads it (below); skipped when `NCCL_NO_PKG_CONFIG` is set. An `nccl.pc` whose directories hold no NCCL (some distro packages ship one with the build machine's `prefix=/usr/local`) is bypassed and named in a note (a warning where the tree it sits in holds an NCCL to name with `NCCL_HOME`, as a source build's does); `doctor` warns C and CMake users",
        search: |ctx| Ok(pkgconfig::sites(ctx)),
    },
    Source {
        kind: SourceKind::Pip,
        id: "pip",
        name: "pip",
        describe: "pip wheels nvidia-nccl-cu*: VIRTUAL_ENV, CONDA_PREFIX, the venv nccl-find is installed in, python on PATH, pyenv, user site, system site-packages",
        doc: "`nvidia-nccl-cu*` wheels in `PYTHONPATH`, `VIRTUAL_ENV`, `CONDA_PREFIX`, the environment the program is installed in (`nccl-find` from pip; `Config::python_prefix`), the Pythons on `PATH`, pyenv, the user site, system site/dist-packages",
        search: |ctx| Ok(pip::sites(ctx)),
    },
    Source {
        kind: SourceKind::Prefix,
        id: "prefix",
        name: "prefix",
        describe: "CONDA_PREFIX, NVIDIA HPC SDK comm_libs (NVHPC_ROOT, /opt/nvidia/hpc_sdk), EBROOTNCCL",
        doc: "`CONDA_PREFIX`, NVIDIA HPC SDK `comm_libs` (`NVHPC_ROOT`, `/opt/nvidia/hpc_sdk`), `EBROOTNCCL`",
        search: |ctx| Ok(prefix::sites(ctx)),
    },
    Source {
        kind: SourceKind::Spack,
        id: "spack",
        name: "Spack",
        describe: "SPACK_ROOT: the instance's nccl-* install prefixes under opt/spack",
        doc: "`SPACK_ROOT`: every `nccl-<version>-<hash>` prefix under `$SPACK_ROOT/opt/spack`, in Spack 1.0's layout (`<platform>-<target>/`) and the older one (`<platform>-<os>-<target>/<compiler>-<version>/`), newest first, named from its `.spack/spec.json`",
        search: |ctx| Ok(spack::sites(ctx)),
    },
    Source {
        kind: SourceKind::Cuda,
        id: "cuda_toolkit",
        name: "CUDA toolkit",
        describe: "CUDA_HOME, CUDA_PATH, CUDA_ROOT, CUDA_TOOLKIT_ROOT_DIR, /usr/local/cuda, /usr/local/cuda-*, /opt/cuda",
        doc: "`CUDA_HOME`, `CUDA_PATH`, `CUDA_ROOT`, `CUDA_TOOLKIT_ROOT_DIR`, `/usr/local/cuda`, `/usr/local/cuda-*` (newest first), `/opt/cuda`, with `targets/<arch>-linux`",
        search: |ctx| Ok(cuda::sites(ctx)),
    },
    Source {
        kind: SourceKind::System,
        id: "system",
        name: "system",
        describe: "dpkg (/usr/include, /usr/lib/<multiarch>, the dpkg database), rpm (/usr/lib64), /usr/local",
        doc: "dpkg (`/usr/include` + `/usr/lib/<multiarch>`, named and versioned from `/var/lib/dpkg/status` and `info/libnccl*.list`), rpm `/usr/lib64`, `/usr/lib`, `/usr/local`",
        search: |ctx| Ok(system::sites(ctx)),
    },
    Source {
        kind: SourceKind::SearchPath,
        id: "search_path",
        name: "search path",
        describe: "LIBRARY_PATH, LD_LIBRARY_PATH, the loader cache /etc/ld.so.cache",
        doc: "`LIBRARY_PATH`, `LD_LIBRARY_PATH`, the loader cache `/etc/ld.so.cache` (read as a file)",
        search: |ctx| Ok(search_path::sites(ctx)),
    },
];

/// The table's row for a source.
fn row(kind: SourceKind) -> &'static Source {
    for s in SOURCES {
        if s.kind == kind {
            return s;
        }
    }
    panic!("every SourceKind has a row in SOURCES")
}

impl SourceKind {
    /// All sources, in search order.
    pub fn all() -> impl Iterator<Item = SourceKind> {
        SOURCES.iter().map(|s| s.kind)
    }

    /// A one-line description of what this source looks at.
    pub fn describe(self) -> &'static str {
        row(self).describe
    }

    /// A short name, used in reports.
    pub fn name(self) -> &'static str {
        row(self).name
    }

    /// A fixed identifier for tools, e.g. `pkg_config` (`--json`'s
    /// `source.kind`): it never changes once released.
    pub fn id(self) -> &'static str {
        row(self).id
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The search order as a Markdown table, as the crate's documentation and
/// the README give it (a test checks them against this).
#[cfg(test)]
fn search_order_markdown() -> String {
    let mut out = String::from("| # | source | looks at |\n|---|---|---|\n");
    let mut number = 0;
    for s in SOURCES {
        number += 1;
        out.push_str(&format!("| {number} | {} | {} |\n", s.name, s.doc));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_order_is_documented() {
        let table = search_order_markdown();
        let readme = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"),
        )
        .unwrap();
        let lib: String = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"),
        )
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| format!("{}\n", l.strip_prefix(' ').unwrap_or(l)))
        .collect();
        assert!(
            readme.contains(&table),
            "README.md's search order must be this table, from src/sources/mod.rs:\n{table}"
        );
        assert!(lib.contains(&table), "src/lib.rs's search order must be this table (as //! lines), from src/sources/mod.rs:\n{table}");
    }

    #[test]
    fn every_source_kind_has_exactly_one_row() {
        // Exhaustive (inside the crate): a new variant does not compile
        // here until it is listed, and then needs its row.
        let listed = |k: SourceKind| match k {
            SourceKind::ExplicitDirs
            | SourceKind::Home
            | SourceKind::PkgConfig
            | SourceKind::Pip
            | SourceKind::Prefix
            | SourceKind::Spack
            | SourceKind::Cuda
            | SourceKind::System
            | SourceKind::SearchPath => k,
        };
        let all = [
            SourceKind::ExplicitDirs,
            SourceKind::Home,
            SourceKind::PkgConfig,
            SourceKind::Pip,
            SourceKind::Prefix,
            SourceKind::Spack,
            SourceKind::Cuda,
            SourceKind::System,
            SourceKind::SearchPath,
        ];
        for k in all.map(listed) {
            assert_eq!(SOURCES.iter().filter(|s| s.kind == k).count(), 1, "{k:?}");
        }
        assert_eq!(SOURCES.len(), all.len());
        let mut ids: Vec<&str> = SOURCES.iter().map(|s| s.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), SOURCES.len(), "ids are unique");
        // The search order is the table's order.
        assert_eq!(SourceKind::all().collect::<Vec<_>>(), all);
    }
}
