//! Step 1 of the probe: **sources**. Each source proposes *sites* (an
//! include directory and a library directory that belong together) and says
//! where it got them from. Sources never judge what they find; that is
//! [`crate::inspect`]'s job.
//!
//! The order here is the search order, documented in the crate root and
//! printed by `nccl-find --print`.

use std::cell::RefCell;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::env::{Env, Var};
use crate::target::Target;

pub(crate) mod conda;
pub(crate) mod cuda;
pub(crate) mod explicit;
pub(crate) mod home;
pub(crate) mod pip;
pub mod pkgconfig;
pub mod search_path;
pub mod system;

pub use pkgconfig::MisleadingPc;

/// Where a candidate install was found, in search order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
    /// A CUDA toolkit directory.
    Cuda,
    /// The system directories: dpkg and rpm packages, `/usr/local`.
    System,
    /// `LIBRARY_PATH`, `LD_LIBRARY_PATH` and the loader cache.
    SearchPath,
}

impl SourceKind {
    /// All sources, in search order.
    pub const ALL: [SourceKind; 8] = [
        SourceKind::ExplicitDirs,
        SourceKind::Home,
        SourceKind::PkgConfig,
        SourceKind::Pip,
        SourceKind::Prefix,
        SourceKind::Cuda,
        SourceKind::System,
        SourceKind::SearchPath,
    ];

    /// A one-line description of what this source looks at.
    pub fn describe(self) -> &'static str {
        match self {
            SourceKind::ExplicitDirs => "NCCL_INCLUDE_DIR + NCCL_LIB_DIR (both, or neither)",
            SourceKind::Home => "NCCL_HOME, then NCCL_ROOT, then NCCL_DIR",
            SourceKind::PkgConfig => "nccl.pc on PKG_CONFIG_PATH / PKG_CONFIG_LIBDIR / the default pkg-config dirs",
            SourceKind::Pip => "pip wheels nvidia-nccl-cu*: VIRTUAL_ENV, CONDA_PREFIX, python on PATH, pyenv, user site, system site-packages",
            SourceKind::Prefix => "CONDA_PREFIX, NVIDIA HPC SDK comm_libs (NVHPC_ROOT, /opt/nvidia/hpc_sdk), EBROOTNCCL",
            SourceKind::Cuda => "CUDA_HOME, CUDA_PATH, CUDA_ROOT, CUDA_TOOLKIT_ROOT_DIR, /usr/local/cuda, /usr/local/cuda-*, /opt/cuda",
            SourceKind::System => "dpkg (/usr/include, /usr/lib/<multiarch>, the dpkg database), rpm (/usr/lib64), /usr/local",
            SourceKind::SearchPath => "LIBRARY_PATH, LD_LIBRARY_PATH, the loader cache /etc/ld.so.cache",
        }
    }

    /// A short name, used in reports.
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::ExplicitDirs => "explicit dirs",
            SourceKind::Home => "NCCL_HOME",
            SourceKind::PkgConfig => "pkg-config",
            SourceKind::Pip => "pip",
            SourceKind::Prefix => "prefix",
            SourceKind::Cuda => "CUDA toolkit",
            SourceKind::System => "system",
            SourceKind::SearchPath => "search path",
        }
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where an install came from: the source, the variable (if any), the
/// package (if any), in words.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

impl fmt::Display for Package {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Package::Dpkg { runtime, dev } => {
                let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "not installed".into());
                write!(
                    f,
                    "dpkg libnccl2 {}, libnccl-dev {}",
                    show(runtime),
                    show(dev)
                )
            }
            Package::Pip { name, version } => write!(f, "pip {name} {version}"),
        }
    }
}

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
    pub fault: Option<crate::inspect::Problem>,
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
}

/// One place the probe looked, and what it found there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Looked {
    /// The source that looked.
    pub source: SourceKind,
    /// The directory or file looked at.
    pub path: PathBuf,
    /// What was there, in words (`no such directory`, `no NCCL files`, …).
    pub outcome: String,
}

/// What every source gets: the environment, the filesystem root, the target,
/// and a log of where it looked.
pub(crate) struct Ctx<'a> {
    pub env: &'a Env,
    pub root: &'a Path,
    pub target: &'a Target,
    pub looked: RefCell<Vec<Looked>>,
    pub warnings: RefCell<Vec<String>>,
    pub misleading_pc: RefCell<Vec<pkgconfig::MisleadingPc>>,
    /// Running as a build script: searches that depend on `PATH` are left
    /// out, so that a `PATH` change never reruns the build script.
    pub build_script: bool,
    ld_cache: std::cell::OnceCell<Vec<(String, String)>>,
}

impl<'a> Ctx<'a> {
    pub fn new(env: &'a Env, root: &'a Path, target: &'a Target) -> Ctx<'a> {
        Ctx {
            env,
            root,
            target,
            looked: RefCell::default(),
            warnings: RefCell::default(),
            misleading_pc: RefCell::default(),
            build_script: false,
            ld_cache: std::cell::OnceCell::new(),
        }
    }

    /// The loader cache's entries (`/etc/ld.so.cache` under the root), read once.
    pub fn ld_cache(&self) -> &[(String, String)] {
        self.ld_cache.get_or_init(|| {
            match crate::files::read_bounded(&self.path("/etc/ld.so.cache"), 64 << 20) {
                Ok(data) => search_path::parse_ld_cache(&data),
                Err(_) => Vec::new(),
            }
        })
    }

    /// A variable, read with the target prefix first.
    pub fn var(&self, name: &str) -> Option<Var> {
        self.env.var(&self.target.env_prefix, name)
    }

    /// A variable holding a directory, resolved under the root. A relative
    /// value is taken from the current directory, with a warning, since
    /// build scripts run in their package's directory.
    pub fn var_path(&self, name: &str) -> Option<(Var, PathBuf)> {
        let var = self.var(name)?;
        let path = self.value_path(&var.name, &var.value);
        Some((var, path))
    }

    /// Turns a value from a variable into a path under the root.
    pub fn value_path(&self, name: &str, value: &OsString) -> PathBuf {
        let raw = PathBuf::from(value);
        let raw = match raw.strip_prefix("~") {
            Ok(rest) if value.to_string_lossy().starts_with("~/") || value == "~" => {
                match self.env.raw("HOME") {
                    Some(home) => PathBuf::from(home).join(rest),
                    None => raw.clone(),
                }
            }
            _ => raw,
        };
        if raw.is_absolute() {
            self.path(&raw)
        } else {
            let cwd = std::env::current_dir().unwrap_or_default();
            self.warn(format!(
                "{name}={} is a relative path; it was taken from the current directory {}. \
                 Build scripts run in their package's directory: use an absolute path.",
                value.to_string_lossy(),
                cwd.display()
            ));
            cwd.join(raw)
        }
    }

    /// A logical absolute path (`/usr/include`) under the root, with the
    /// links along it resolved inside the root (an absolute link in a
    /// sysroot points into the sysroot, never out of it).
    pub fn path(&self, logical: impl AsRef<Path>) -> PathBuf {
        let logical = logical.as_ref();
        let joined = match logical.strip_prefix("/") {
            Ok(rel) => self.root.join(rel),
            Err(_) => self.root.join(logical),
        };
        if self.root == Path::new("/") {
            return joined;
        }
        match crate::files::resolve_in(self.root, &joined, false) {
            Ok(p) if p.exists() => p,
            // A dangling link keeps its name, so that the error names it
            // (see `home::check_dir`); so does a loop.
            Ok(_)
                if std::fs::symlink_metadata(&joined).is_ok_and(|m| m.file_type().is_symlink()) =>
            {
                joined
            }
            Ok(p) => p,
            Err(_) => joined,
        }
    }

    /// A file's real path, every link resolved inside the root.
    pub fn canonical(&self, path: &Path) -> std::io::Result<PathBuf> {
        crate::files::resolve_in(self.root, path, true)
    }

    /// A path as seen inside the root, for messages: `<root>/usr/lib` → `/usr/lib`.
    pub fn show(&self, real: &Path) -> String {
        under_root(self.root, real).display().to_string()
    }

    /// Records a place looked at.
    pub fn looked(&self, source: SourceKind, path: &Path, outcome: impl Into<String>) {
        self.looked.borrow_mut().push(Looked {
            source,
            path: path.to_path_buf(),
            outcome: outcome.into(),
        });
    }

    /// Records a warning for the report.
    pub fn warn(&self, message: String) {
        let mut w = self.warnings.borrow_mut();
        if !w.contains(&message) {
            w.push(message);
        }
    }

    /// A variable holding a `:`-separated list of directories.
    pub fn var_list(&self, name: &str) -> Option<(Var, Vec<PathBuf>)> {
        self.list_of(self.var(name)?)
    }

    /// A pkg-config variable, looked up as the `pkg-config` crate does:
    /// `<NAME>_<target>`, `<NAME>_<target with underscores>`, then
    /// `HOST_<NAME>` (host == target) or `TARGET_<NAME>` (cross), then
    /// `<NAME>`. Empty values count as unset.
    pub fn pkg_config_var(&self, name: &str) -> Option<Var> {
        let triple = &self.target.triple;
        let mut names = vec![
            format!("{name}_{triple}"),
            format!("{name}_{}", triple.replace('-', "_")),
        ];
        if let Some(host) = self.env.raw("HOST") {
            let kind = if host == std::ffi::OsStr::new(triple) {
                "HOST"
            } else {
                "TARGET"
            };
            names.push(format!("{kind}_{name}"));
        }
        names.push(name.to_string());
        names.into_iter().find_map(|n| {
            self.env
                .raw(&n)
                .filter(|v| !v.is_empty())
                .map(|value| Var { name: n, value })
        })
    }

    /// [`Ctx::pkg_config_var`] as a list of directories.
    pub fn pkg_config_list(&self, name: &str) -> Option<(Var, Vec<PathBuf>)> {
        self.list_of(self.pkg_config_var(name)?)
    }

    fn list_of(&self, var: Var) -> Option<(Var, Vec<PathBuf>)> {
        let dirs = std::env::split_paths(&var.value)
            .filter(|p| !p.as_os_str().is_empty())
            .map(|p| self.value_path(&var.name, &p.into_os_string()))
            .collect();
        Some((var, dirs))
    }
}

/// A real path as seen inside `root`: `<root>/usr/lib` → `/usr/lib`. Paths
/// outside the root, and every path when the root is `/`, stay as they are.
pub(crate) fn under_root<'a>(root: &Path, real: &'a Path) -> std::borrow::Cow<'a, Path> {
    if root == Path::new("/") {
        return real.into();
    }
    match real.strip_prefix(root) {
        Ok(rel) => Path::new("/").join(rel).into(),
        Err(_) => real.into(),
    }
}

/// The directory's entries, sorted by name, so that results never depend on
/// the order the filesystem lists them in. Unreadable or missing: empty.
pub(crate) fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

/// Entries of `dir` whose names start with `prefix`, sorted with the highest
/// version first (`python3.12` before `python3.9`, `cuda-12.4` before
/// `cuda-11.8`), then by name.
pub(crate) fn versioned_entries(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = sorted_entries(dir)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.len() > prefix.len())
        })
        .collect();
    v.sort_by(|a, b| {
        let key = |p: &PathBuf| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let nums: Vec<u64> = name[prefix.len()..]
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap_or(0))
                .collect();
            nums
        };
        key(b).cmp(&key(a)).then_with(|| a.cmp(b))
    });
    v
}

/// Runs every source in order and returns their sites.
pub(crate) fn collect(ctx: &Ctx) -> Result<Vec<Site>, crate::ErrorKind> {
    let mut sites = Vec::new();
    sites.extend(explicit::sites(ctx)?);
    sites.extend(home::sites(ctx));
    sites.extend(pkgconfig::sites(ctx));
    sites.extend(pip::sites(ctx));
    sites.extend(conda::sites(ctx));
    sites.extend(cuda::sites(ctx));
    sites.extend(system::sites(ctx));
    sites.extend(search_path::sites(ctx));
    Ok(sites)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioned_entries_sort_highest_first() {
        let dir = std::env::temp_dir().join(format!("nccl-find-ve-{}", std::process::id()));
        for n in ["cuda-11.8", "cuda-12.10", "cuda-12.4", "cuda", "other"] {
            std::fs::create_dir_all(dir.join(n)).unwrap();
        }
        let names: Vec<String> = versioned_entries(&dir, "cuda-")
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(names, ["cuda-12.10", "cuda-12.4", "cuda-11.8"]);
    }
}
