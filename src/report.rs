//! The probe's results: [`Report`], everything it saw, and [`Nccl`], the
//! install it selected with how to link it.

use std::path::{Path, PathBuf};

use crate::check::loader::Loader;
use crate::check::{CompileCheck, Linking, Post};
use crate::context::under_root;
use crate::env::EnvRead;
use crate::inspect::Candidate;
use crate::origin::{Looked, MisleadingPc, Origin};
use crate::version::{CudaVersion, Version};

/// Everything one probe saw.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The target triple probed for.
    pub target: String,
    /// The filesystem root (`/` unless a test or sysroot set another).
    pub root: PathBuf,
    /// The version requirement, e.g. `>=2.18.0`.
    pub requirement: Option<String>,
    /// Every install found, in search order, the selected one included.
    pub candidates: Vec<Candidate>,
    /// The index of the selected install in `candidates`.
    pub selected: Option<usize>,
    /// Every place looked at, with what was there.
    pub looked: Vec<Looked>,
    /// Every variable read.
    pub env: Vec<EnvRead>,
    /// Things the user can and should act on, though they stopped nothing.
    /// A build script prints each as a `cargo:warning`.
    pub warnings: Vec<String>,
    /// Things nccl-find already worked around (an install skipped, an
    /// `nccl.pc` with a wrong `prefix=` bypassed): `nccl-find --print` and
    /// `--json` show them, a build script does not print them.
    pub notes: Vec<String>,
    /// `nccl.pc` files whose directories hold no NCCL (a wrong `prefix=`).
    pub misleading_pc: Vec<MisleadingPc>,
    /// Which `libnccl.so.2` the run-time loader would load.
    pub loader: Loader,
    /// Whether the target differs from the host (`TARGET` ≠ `HOST`).
    pub cross: bool,
    /// Where an install that would rank above the answer would appear
    /// (an activated environment's site-packages with no NCCL wheel yet):
    /// a build script's `rerun-if-changed`, so that a wheel installed
    /// there later is found.
    pub watched: Vec<PathBuf>,
}

impl Report {
    /// The report of a probe that has not looked anywhere yet.
    pub(crate) fn empty(target: &str) -> Report {
        Report {
            target: target.to_string(),
            root: PathBuf::from("/"),
            requirement: None,
            candidates: Vec::new(),
            selected: None,
            looked: Vec::new(),
            env: Vec::new(),
            warnings: Vec::new(),
            notes: Vec::new(),
            misleading_pc: Vec::new(),
            loader: Loader::default(),
            cross: false,
            watched: Vec::new(),
        }
    }

    /// The selected install.
    pub fn selected(&self) -> Option<&Candidate> {
        self.selected.and_then(|i| self.candidates.get(i))
    }

    /// Every install except the selected one.
    pub fn others(&self) -> impl Iterator<Item = &Candidate> {
        let sel = self.selected;
        self.candidates
            .iter()
            .enumerate()
            .filter(move |(i, _)| Some(*i) != sel)
            .map(|(_, c)| c)
    }

    /// A path with the root taken off, for display: `/usr/include`.
    pub fn logical<'a>(&self, path: &'a Path) -> std::borrow::Cow<'a, Path> {
        under_root(&self.root, path)
    }
}

/// The NCCL install that was selected.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Nccl {
    /// Directories to put on the include path (the one holding `nccl.h`).
    pub include_paths: Vec<PathBuf>,
    /// The directory holding the shared library.
    pub lib_dir: PathBuf,
    /// The shared library a linker would use: `libnccl.so`, else `libnccl.so.2`.
    pub library: PathBuf,
    /// That file with every symbolic link resolved.
    pub library_real: PathBuf,
    /// Whether `libnccl.so` exists. When it does not (pip wheels, runtime
    /// packages), link with `dylib:+verbatim=libnccl.so.2`.
    pub has_dev_link: bool,
    /// The library's soname, e.g. `libnccl.so.2`.
    pub soname: Option<String>,
    /// `libnccl_static.a`, where present.
    pub static_library: Option<PathBuf>,
    /// The header's version: the API you compile against.
    pub version: Version,
    /// The library's version: what you link.
    pub library_version: Version,
    /// The CUDA version the library was built for, where it says.
    pub cuda_version: Option<CudaVersion>,
    /// Where it came from: source, variable, package.
    pub origin: Origin,
    /// The install root, where there is one.
    pub root: Option<PathBuf>,
    /// How it is linked: `-lnccl`, `libnccl.so.2` by name, or static.
    pub linking: Linking,
    /// The include dirs that `nccl.h`'s `#include <cuda_runtime.h>` needs
    /// (for bindgen and C compilers, not for linking): the CUDA toolkit's,
    /// or the `nvidia-cuda-runtime-cu*` and `nvidia-cuda-nvcc-cu*` wheels'
    /// beside a wheel's NCCL, or `/usr/include`. `Err` says what is missing
    /// and where it looked.
    pub cuda_include_dirs: Result<Vec<PathBuf>, String>,
    /// What the compile-and-run check found, when it ran (feature `cc`).
    pub compile_check: Option<CompileCheck>,
    /// The install's CMake package (`NCCLConfig.cmake`), where present.
    pub cmake_config: Option<PathBuf>,
    /// The device API's header, `nccl_device.h`, where present.
    pub device_header: Option<PathBuf>,
    /// The device API's bitcode (`libnccl_device.bc`, `.ltoir`), where present.
    pub device_bitcode: Vec<PathBuf>,
    /// Everything the probe saw, the other installs included.
    pub report: Report,
}

impl Nccl {
    pub(crate) fn from_report(report: Report, post: Post) -> Nccl {
        let c = report.selected().expect("a selected candidate").clone();
        let mut include_paths = Vec::new();
        if let Some(inc) = c.include_dir() {
            include_paths.push(inc.to_path_buf());
        }
        Nccl {
            include_paths,
            lib_dir: c.lib_dir.clone().unwrap_or_default(),
            library: c.library.clone().unwrap_or_default(),
            library_real: c.library_real.clone().unwrap_or_default(),
            has_dev_link: c.has_dev_link,
            soname: c.soname.clone(),
            static_library: c.static_library.clone(),
            version: c
                .header_version
                .clone()
                .expect("selected installs have a header version"),
            library_version: c
                .library_version
                .clone()
                .expect("selected installs have a library version"),
            cuda_version: c.cuda_version,
            origin: c.origin.clone(),
            root: c.root.clone(),
            linking: post.linking,
            cuda_include_dirs: post.cuda_include,
            compile_check: post.compiled,
            cmake_config: c.cmake_config.clone(),
            device_header: c.device_header.clone(),
            device_bitcode: c.device_bitcode.clone(),
            report,
        }
    }

    /// Every other install found, each with why it lost or was rejected.
    pub fn others(&self) -> impl Iterator<Item = &Candidate> {
        self.report.others()
    }
}
