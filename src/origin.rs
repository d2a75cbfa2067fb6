//! Where things come from: the words every layer uses to say which source
//! found an install ([`SourceKind`], [`Origin`]), which package owns it
//! ([`Package`]), and where the probe looked ([`Looked`]). The names and
//! descriptions of the sources, and their search order, are the table in
//! [`crate::sources`]. This module imports nothing from the crate.

use std::fmt;
use std::path::PathBuf;

/// Where a candidate install was found, in search order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum SourceKind {
    /// `NCCL_INCLUDE_DIR` + `NCCL_LIB_DIR`.
    ExplicitDirs,
    /// `NCCL_HOME`, `NCCL_ROOT` or `NCCL_DIR`.
    Home,
    /// An `nccl.pc` file found on the pkg-config search path.
    PkgConfig,
    /// A pip wheel `nvidia-nccl-cu*` in some site-packages.
    Pip,
    /// A conda environment, the NVIDIA HPC SDK, or an EasyBuild module.
    Prefix,
    /// An install prefix of a Spack instance (`SPACK_ROOT`).
    Spack,
    /// A CUDA toolkit directory.
    Cuda,
    /// The system directories: dpkg and rpm packages, `/usr/local`.
    System,
    /// `LIBRARY_PATH`, `LD_LIBRARY_PATH` and the loader cache.
    SearchPath,
}

/// Where an install came from: the source, the variable (if any), the
/// package (if any), in words.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Origin {
    /// Which source found it.
    pub source: SourceKind,
    /// The variable that named it, as `NAME=value`, if a variable did.
    pub variable: Option<String>,
    /// The package that owns it, if known.
    pub package: Option<Package>,
    /// A human description, e.g. `pip wheel in /venv/lib/python3.11/site-packages (VIRTUAL_ENV)`.
    pub detail: String,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)?;
        if let Some(p) = &self.package {
            write!(f, " [{p}]")?;
        }
        Ok(())
    }
}

/// A package that owns an install.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Package {
    /// Debian packages: the runtime one (`libnccl2`) and the development one
    /// (`libnccl-dev`), each with its version, when installed.
    Dpkg {
        /// `libnccl2`'s version, e.g. `2.28.3-1+cuda13.0`.
        runtime: Option<String>,
        /// `libnccl-dev`'s version.
        dev: Option<String>,
    },
    /// A pip distribution, e.g. `nvidia-nccl-cu12` `2.21.5`.
    Pip {
        /// The distribution name, e.g. `nvidia-nccl-cu12`.
        name: String,
        /// Its version.
        version: String,
    },
    /// A Spack install of the `nccl` package, e.g. `nccl@2.21.5-1`.
    Spack {
        /// Spack's version of the package, e.g. `2.21.5-1`.
        version: String,
        /// The install's hash (base32, as in its directory name); empty
        /// when unknown.
        hash: String,
    },
}

impl Package {
    /// The package as named fields for tools (`--json`): `manager`
    /// (`dpkg`, `pip`, …) and the manager's own fields.
    pub fn fields(&self) -> Vec<(&'static str, Option<String>)> {
        match self {
            Package::Dpkg { runtime, dev } => vec![
                ("manager", Some("dpkg".into())),
                ("libnccl2", runtime.clone()),
                ("libnccl-dev", dev.clone()),
            ],
            Package::Pip { name, version } => vec![
                ("manager", Some("pip".into())),
                ("name", Some(name.clone())),
                ("version", Some(version.clone())),
            ],
            Package::Spack { version, hash } => vec![
                ("manager", Some("spack".into())),
                ("name", Some("nccl".into())),
                ("version", Some(version.clone())),
                ("hash", (!hash.is_empty()).then(|| hash.clone())),
            ],
        }
    }
}

impl fmt::Display for Package {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Package::Dpkg { runtime, dev } => {
                let runtime = runtime.as_deref().unwrap_or("not installed");
                let dev = dev.as_deref().unwrap_or("not installed");
                write!(f, "dpkg libnccl2 {runtime}, libnccl-dev {dev}")
            }
            Package::Pip { name, version } => write!(f, "pip {name} {version}"),
            Package::Spack { version, hash } if hash.is_empty() => {
                write!(f, "spack nccl@{version}")
            }
            Package::Spack { version, hash } => write!(f, "spack nccl@{version}/{hash}"),
        }
    }
}

/// One place the probe looked, and what it found there.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Looked {
    /// The source that looked.
    pub source: SourceKind,
    /// The directory or file looked at.
    pub path: PathBuf,
    /// What was there, in words (`no such directory`, `no NCCL files`, …).
    pub outcome: String,
}

/// An `nccl.pc` whose directories hold no NCCL: distro packages have
/// shipped one whose `prefix` is the build machine's `/usr/local` while the
/// files are in `/usr`. `pkg-config --cflags --libs nccl` is wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MisleadingPc {
    /// The `.pc` file.
    pub file: PathBuf,
    /// Its `prefix=` value, as written.
    pub prefix: String,
    /// The `-I`/`-L` flags it gives, which point at no NCCL.
    pub flags: String,
    /// The tree the file sits in (`<tree>/lib/pkgconfig/nccl.pc`), where
    /// that tree holds an NCCL, as `pkg-config --define-prefix` finds it: a
    /// source build's `build/`. `NCCL_HOME=<tree>` uses it.
    pub tree: Option<PathBuf>,
}
