//! The Python processes beside NCCL: for each installed package that uses
//! NCCL, which `libnccl.so.2` it will map and whether that library has
//! what the package imports, worked out from files with nccl-find's model
//! of the loader (no Python is started).
//!
//! `PACKAGES` is the table: one module per package, each saying how to
//! find the package in a site-packages directory and how it loads NCCL
//! (its own preloads, `dlopen`s, and the object that needs `libnccl.so.2`).

use std::path::{Path, PathBuf};

use nccl_find::internal::{imports, LoaderFacts, Process, Via};

mod cupy;
mod jax;
mod nccl4py;
mod paddle;
mod torch;
mod vllm;

/// The Python environment in use.
#[derive(Debug, Clone)]
pub struct PyEnv {
    /// Its prefix (a venv, a conda env, an interpreter's installation).
    pub prefix: PathBuf,
    /// Its interpreter, as a process would start it.
    pub python: PathBuf,
    /// How it was found: `--python`, `VIRTUAL_ENV`, `CONDA_PREFIX`, `PATH`.
    pub how: String,
    /// The directories on `sys.path` that hold packages, in order:
    /// `PYTHONPATH`, then the site-packages.
    pub sys_path: Vec<PathBuf>,
}

/// How a package binds NCCL's functions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// All at once when it is imported (`DT_NEEDED` under Python's
    /// `RTLD_NOW`): a missing function fails the import, naming the first
    /// one in this object's relocation order.
    Now(PathBuf),
    /// One at a time when called (`dlsym`): a missing function fails only
    /// the call that needs it.
    Lazy,
}

/// One package's way of loading NCCL: a row of [`PACKAGES`].
pub struct Row {
    /// The name people import (`torch`).
    pub name: &'static str,
    /// Its distribution's name in `*.dist-info` (`torch`, `cupy_cuda12x`),
    /// a prefix.
    pub dist: &'static str,
    /// Whether the package is in this site-packages directory, and uses NCCL.
    pub present: fn(&Path) -> bool,
    /// Its loading steps in `sim`, for the package in site-packages `sp`.
    pub load: fn(&mut Sim, &Path) -> Loaded,
    /// Where the package catches a failed import of its NCCL extension
    /// (`undefined symbol`) and goes on: what it does instead. `None`: the
    /// import fails.
    pub caught: Option<&'static str>,
}

/// What a package's loading steps did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// How it binds NCCL's functions.
    pub binding: Binding,
    /// How the file got into the process, in words.
    pub how: String,
    /// What the package itself asks of NCCL, where its distribution's
    /// metadata does not say (`nvidia-nccl-cu12>=2.18.1,<3`).
    pub requires: Option<String>,
}

/// The table of packages, in the order they are reported.
pub static PACKAGES: &[Row] = &[
    torch::ROW,
    cupy::ROW,
    jax::ROW,
    paddle::ROW,
    vllm::ROW,
    nccl4py::ROW,
];

/// A modelled Python process: the interpreter started, then the packages'
/// loading steps.
pub struct Sim<'a> {
    /// The loader model's process.
    pub process: Process<'a>,
    /// The environment.
    pub env: &'a PyEnv,
}

impl Sim<'_> {
    /// `ctypes.CDLL(path)` / a `dlopen` by path from the interpreter;
    /// whether the file loaded.
    pub fn preload(&mut self, path: &Path) -> bool {
        path.is_file()
            && self
                .process
                .dlopen(&path.display().to_string(), 0)
                .is_some()
    }

    /// The object now answering to `libnccl.so.2`, if any.
    pub fn nccl(&self) -> Option<usize> {
        self.process.find_mapped("libnccl.so.2")
    }

    /// cuda.pathfinder's `load_nvidia_dynamic_lib("nccl")`, as nccl4py and
    /// CuPy use it: a `libnccl.so.2` already loaded; the site-packages'
    /// `nvidia/nccl/lib/libnccl.so.2`; `$CONDA_PREFIX/{lib64,lib}`; the
    /// loader's own search; `$NCCL_HOME/{lib,lib64,build/lib}`; then
    /// `$CUDA_PATH` (else `$CUDA_HOME`) `/{lib64,lib}`. The first that
    /// loads is loaded by path. Says how, or `None`.
    pub fn pathfinder(&mut self) -> Option<String> {
        if self.nccl().is_some() {
            return Some("already loaded".into());
        }
        for sp in self.env.sys_path.clone() {
            let p = sp.join("nvidia/nccl/lib/libnccl.so.2");
            if self.preload(&p) {
                return Some(format!("cuda.pathfinder, from {}", sp.display()));
            }
        }
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        if let Some(c) = var("CONDA_PREFIX") {
            for l in ["lib64", "lib"] {
                if self.preload(&c.join(l).join("libnccl.so.2")) {
                    return Some("cuda.pathfinder, from CONDA_PREFIX".into());
                }
            }
        }
        if self.process.dlopen("libnccl.so.2", 0).is_some() {
            let via = self.nccl().map(|i| self.process.mapped[i].via.to_string());
            return Some(format!(
                "cuda.pathfinder, through the loader ({})",
                via.unwrap_or_default()
            ));
        }
        let mut roots = Vec::new();
        if let Some(h) = var("NCCL_HOME") {
            for l in ["lib", "lib64", "build/lib"] {
                roots.push((h.join(l), "NCCL_HOME"));
            }
        }
        if let Some((c, name)) = var("CUDA_PATH")
            .map(|c| (c, "CUDA_PATH"))
            .or_else(|| var("CUDA_HOME").map(|c| (c, "CUDA_HOME")))
        {
            for l in ["lib64", "lib"] {
                roots.push((c.join(l), name));
            }
        }
        for (dir, name) in roots {
            if self.preload(&dir.join("libnccl.so.2")) {
                return Some(format!("cuda.pathfinder, from {name}"));
            }
        }
        None
    }
}

/// The environment this program was installed into by pip (its
/// `bin/`'s parent, with a `pyvenv.cfg` or `conda-meta/`), if any.
fn own_env() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let prefix = exe.parent()?.parent()?;
    (prefix.join("pyvenv.cfg").is_file() || prefix.join("conda-meta").is_dir())
        .then(|| prefix.to_path_buf())
}

/// The Python environment to look at: `--python PATH` (an interpreter, or
/// an environment's directory), else `VIRTUAL_ENV`, else `CONDA_PREFIX`,
/// else the venv this command was installed into, else the `python3` (or
/// `python`) on `PATH`.
pub fn find_env(explicit: Option<&Path>) -> Option<PyEnv> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let (prefix, how) = if let Some(p) = explicit {
        let prefix = if p.is_dir() {
            p.to_path_buf()
        } else {
            p.parent()?.parent()?.to_path_buf()
        };
        (prefix, "--python".to_string())
    } else if let Some(v) = var("VIRTUAL_ENV") {
        (v, "VIRTUAL_ENV".to_string())
    } else if let Some(c) = var("CONDA_PREFIX") {
        (c, "CONDA_PREFIX".to_string())
    } else if let Some(v) = own_env() {
        // pip installed this command into a venv that is not active: that
        // venv is the one its NCCL check judges, and the one to look at.
        (v, "the venv nccl-find is installed in".to_string())
    } else {
        let path = var("PATH")?;
        let mut found = None;
        for dir in std::env::split_paths(&path) {
            if dir.join("python3").is_file() || dir.join("python").is_file() {
                found = dir.parent().map(Path::to_path_buf);
                break;
            }
        }
        (found?, "the python on PATH".to_string())
    };
    let mut python = prefix.join("bin/python3");
    if !python.exists() {
        python = prefix.join("bin/python");
    }
    if let Some(p) = explicit.filter(|p| p.is_file()) {
        python = p.to_path_buf();
    }
    let mut sys_path = Vec::new();
    if let Some(pp) = var("PYTHONPATH") {
        sys_path.extend(std::env::split_paths(&pp).filter(|d| d.is_absolute()));
    }
    for lib in ["lib", "lib64"] {
        let Ok(rd) = std::fs::read_dir(prefix.join(lib)) else {
            continue;
        };
        let mut pys: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("python3"))
            })
            .collect();
        pys.sort();
        pys.reverse();
        for py in pys {
            for sp in ["site-packages", "dist-packages"] {
                let d = py.join(sp);
                if d.is_dir() && !sys_path.contains(&d) {
                    sys_path.push(d);
                }
            }
        }
    }
    Some(PyEnv {
        prefix,
        python,
        how,
        sys_path,
    })
}

/// The loader's facts on this machine: asked of `ld.so` itself, with this
/// process's `LD_LIBRARY_PATH`, `LD_PRELOAD` and loader cache.
pub fn machine_facts() -> LoaderFacts {
    let arch = std::env::consts::ARCH;
    let ma = match arch {
        "x86_64" => Some("x86_64-linux-gnu"),
        "aarch64" => Some("aarch64-linux-gnu"),
        _ => None,
    };
    let mut f = LoaderFacts::for_target(Path::new("/"), ma);
    for ld in ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"] {
        if !Path::new(ld).is_file() {
            continue;
        }
        let ask = |flag: &str| {
            std::process::Command::new(ld)
                .arg(flag)
                .stdin(std::process::Stdio::null())
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        f.read_ld_so(&ask("--help"), &ask("--list-diagnostics"));
        break;
    }
    f.ld_library_path = match std::env::var_os("LD_LIBRARY_PATH") {
        Some(v) => std::env::split_paths(&v)
            .filter(|d| d.is_absolute())
            .collect(),
        None => Vec::new(),
    };
    f.preload = std::env::var("LD_PRELOAD")
        .unwrap_or_default()
        .split([' ', ':'])
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if let Ok(data) = nccl_find::internal::read_bounded(Path::new("/etc/ld.so.cache"), 64 << 20) {
        f.read_ld_cache(&data);
    }
    f
}

/// What one package will do in a process of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The package's name (`torch`).
    pub package: &'static str,
    /// Its version, from its `.dist-info`.
    pub version: Option<String>,
    /// The site-packages it is in.
    pub site: PathBuf,
    /// The `libnccl.so.2` it maps (links resolved), if any.
    pub library: Option<PathBuf>,
    /// That library's NCCL version.
    pub nccl_version: Option<String>,
    /// How the file got into the process.
    pub how: String,
    /// How the package binds NCCL's functions.
    pub binding: Binding,
    /// The NCCL functions its object imports (for [`Binding::Now`]).
    pub imports: Vec<String>,
    /// Those the library lacks, in the loader's order.
    pub missing: Vec<String>,
    /// What its distribution requires of NCCL (`nvidia-nccl-cu13==2.30.7`).
    pub requires: Option<String>,
    /// What the package does instead where it catches a failed import
    /// (the row's `caught`).
    pub caught: Option<&'static str>,
}

impl Outcome {
    /// What a function the library lacks does to this package, where it
    /// binds them at import: the import fails, naming the first missing one
    /// as the loader does, or the package catches that and goes on.
    pub fn import_failure(&self) -> Option<String> {
        let first = self.missing.first()?;
        if self.binding == Binding::Lazy {
            return None;
        }
        Some(match self.caught {
            None => format!(
                "`import {}` fails with `undefined symbol: {first}`",
                self.package
            ),
            Some(instead) => {
                format!("its NCCL extension fails to load (`undefined symbol: {first}`): {instead}")
            }
        })
    }
}

/// Every package of the table installed in `env`, each in a process of its
/// own, and then each pair in one process in both import orders: the
/// outcomes, and where an import order changes one.
pub fn assess(env: &PyEnv, facts: &LoaderFacts) -> (Vec<Outcome>, Vec<String>) {
    let mut found: Vec<(&Row, PathBuf)> = Vec::new();
    for row in PACKAGES {
        for sp in &env.sys_path {
            if (row.present)(sp) {
                found.push((row, sp.clone()));
                break;
            }
        }
    }
    let mut out = Vec::new();
    for (row, sp) in &found {
        let mut sim = start(env, facts);
        let loaded = (row.load)(&mut sim, sp);
        out.push(outcome(&sim, row, sp, loaded));
    }
    let mut orders = Vec::new();
    for (i, (a, asp)) in found.iter().enumerate() {
        for (j, (b, bsp)) in found.iter().enumerate() {
            if i == j {
                continue;
            }
            let mut sim = start(env, facts);
            (a.load)(&mut sim, asp);
            let second = (b.load)(&mut sim, bsp);
            let o = outcome(&sim, b, bsp, second);
            let alone = &out[j];
            if o.library != alone.library {
                orders.push(format!(
                    "imported after {}, {} maps {} instead of {}{}",
                    a.name,
                    b.name,
                    show(&o.library),
                    show(&alone.library),
                    match o.import_failure() {
                        Some(f) => format!(", which lacks {}: {f}", o.missing.len()),
                        None => String::new(),
                    }
                ));
            }
        }
    }
    (out, orders)
}

fn show(p: &Option<PathBuf>) -> String {
    match p {
        Some(p) => p.display().to_string(),
        None => "no libnccl.so.2".into(),
    }
}

/// The interpreter started, as `execve` and `ld.so` start it.
fn start<'a>(env: &'a PyEnv, facts: &'a LoaderFacts) -> Sim<'a> {
    Sim {
        process: Process::exec(facts, Path::new("/"), &env.python),
        env,
    }
}

fn outcome(sim: &Sim, row: &Row, sp: &Path, loaded: Loaded) -> Outcome {
    let lib = sim
        .nccl()
        .map(|i| sim.process.mapped[i].object.real.clone());
    let imports_of = match &loaded.binding {
        Binding::Now(consumer) => imports(consumer)
            .unwrap_or_default()
            .into_iter()
            .filter(|s| s.starts_with("nccl"))
            .collect(),
        Binding::Lazy => Vec::new(),
    };
    let mut missing = Vec::new();
    let mut nccl_version = None;
    if let Some(l) = &lib {
        let exports = nccl_find::internal::dynamic_symbols(l).unwrap_or_default();
        for s in &imports_of {
            if exports.binary_search(s).is_err() {
                missing.push(s.clone());
            }
        }
        nccl_version = nccl_find::internal::read_elf(l)
            .ok()
            .and_then(|e| e.version_text)
            .map(|t| t.split('+').next().unwrap_or_default().to_string());
    }
    let (version, requires) = distribution(sp, row.dist);
    let requires = loaded.requires.or(requires);
    Outcome {
        package: row.name,
        version,
        site: sp.to_path_buf(),
        library: lib,
        nccl_version,
        how: loaded.how,
        binding: loaded.binding,
        imports: imports_of,
        missing,
        requires,
        caught: row.caught,
    }
}

/// The version of the distribution `dist` in `sp`, and its requirement on
/// `nvidia-nccl-*`, from its `.dist-info`. `dist` is a name or the start of
/// one (`cupy` for `cupy_cuda12x`, `jax_cuda` for `jax_cuda13_plugin`); the
/// exact name wins, else the first in sorted order.
fn distribution(sp: &Path, dist: &str) -> (Option<String>, Option<String>) {
    let Ok(rd) = std::fs::read_dir(sp) else {
        return (None, None);
    };
    let mut found: Vec<(bool, String, String, PathBuf)> = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".dist-info") else {
            continue;
        };
        let Some((d, v)) = stem.split_once('-') else {
            continue;
        };
        let d = d.to_ascii_lowercase();
        let Some(rest) = d.strip_prefix(dist) else {
            continue;
        };
        if rest.is_empty() || rest.starts_with(|c: char| c == '_' || c.is_ascii_digit()) {
            found.push((!rest.is_empty(), d.clone(), v.to_string(), e.path()));
        }
    }
    found.sort();
    if let Some((_, _, v, info)) = found.into_iter().next() {
        let meta =
            nccl_find::internal::read_bounded(&info.join("METADATA"), 1 << 20).unwrap_or_default();
        let requires = String::from_utf8_lossy(&meta)
            .lines()
            .filter_map(|l| l.strip_prefix("Requires-Dist: "))
            .find(|l| l.starts_with("nvidia-nccl-"))
            .map(|l| {
                l.split(';')
                    .next()
                    .unwrap_or(l)
                    .replace(' ', "")
                    .replace(['(', ')'], "")
            });
        return (Some(v), requires);
    }
    (None, None)
}

/// The first file in `dir` matching `libnccl.so.*[0-9]` (glob's order is
/// the directory's; `libnccl.so.2` is the one a wheel has).
pub fn nccl_glob(dir: &Path) -> Option<PathBuf> {
    let two = dir.join("libnccl.so.2");
    if two.is_file() {
        return Some(two);
    }
    let rd = std::fs::read_dir(dir).ok()?;
    for e in rd.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("libnccl.so.") && n.ends_with(|c: char| c.is_ascii_digit()) {
            return Some(e.path());
        }
    }
    None
}

/// The first file in `dir` whose name starts with `prefix` and ends with `suffix`.
pub fn first_named(dir: &Path, prefix: &str, suffix: &str) -> Option<PathBuf> {
    let rd = std::fs::read_dir(dir).ok()?;
    let mut all: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix))
        })
        .collect();
    all.sort();
    all.into_iter().next()
}

/// How the process got to the object answering to `libnccl.so.2`, in words.
pub fn via(sim: &Sim) -> String {
    match sim.nccl() {
        Some(i) => match &sim.process.mapped[i].via {
            Via::Rpath(o) => format!("DT_RPATH of {}", o.display()),
            Via::Runpath(o) => format!("DT_RUNPATH of {}", o.display()),
            other => other.to_string(),
        },
        None => "not found".into(),
    }
}
