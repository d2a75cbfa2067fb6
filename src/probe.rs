//! The probe: the builder, the pipeline that runs sources → inspect →
//! select, and its two results.

use std::ffi::OsString;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};

use crate::check::{self, loader::Loader, Linking};
use crate::env::{Env, EnvRead};
use crate::error::{Error, ErrorKind};
use crate::inspect::{self, Candidate};
use crate::sources::{self, Ctx, Looked, Origin};
use crate::target::Target;
use crate::version::{lenient_semver, CudaVersion, Version};

/// The probe's settings, in the style of the `pkg-config` crate:
///
/// ```no_run
/// use nccl_find::{Config, ErrorKind};
///
/// match Config::new().atleast_version("2.18").probe() {
///     Ok(nccl) => println!("NCCL {} in {}", nccl.version, nccl.lib_dir.display()),
///     // docs.rs: nothing is probed, nothing is needed.
///     Err(e) if *e.kind() == ErrorKind::DocsRs => {}
///     Err(e) => panic!("{e}"),
/// }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Config {
    vars: Option<Vec<(OsString, OsString)>>,
    root: Option<PathBuf>,
    target: Option<String>,
    requirement: Option<Requirement>,
    cargo_metadata: Option<bool>,
    statik: Option<bool>,
    symbols: Vec<String>,
    runpath: Vec<PathBuf>,
    compile_check: bool,
}

#[derive(Debug, Clone)]
enum Requirement {
    AtLeast(String),
    Exactly(String),
    Range(Bound<String>, Bound<String>),
    Semver(String),
}

impl Config {
    /// A probe of the real environment and filesystem, with no version requirement.
    pub fn new() -> Config {
        Config::default()
    }

    /// Requires at least this version, e.g. `"2.18"`.
    pub fn atleast_version(&mut self, version: &str) -> &mut Config {
        self.requirement = Some(Requirement::AtLeast(version.to_string()));
        self
    }

    /// Requires exactly this version (patch included), e.g. `"2.21.5"`.
    pub fn exactly_version(&mut self, version: &str) -> &mut Config {
        self.requirement = Some(Requirement::Exactly(version.to_string()));
        self
    }

    /// Requires a version in a range, e.g. `"2.18".."2.30"`.
    pub fn range_version<'a, R: RangeBounds<&'a str>>(&mut self, range: R) -> &mut Config {
        let own = |b: Bound<&&str>| match b {
            Bound::Included(s) => Bound::Included(s.to_string()),
            Bound::Excluded(s) => Bound::Excluded(s.to_string()),
            Bound::Unbounded => Bound::Unbounded,
        };
        self.requirement = Some(Requirement::Range(
            own(range.start_bound()),
            own(range.end_bound()),
        ));
        self
    }

    /// Requires a version matching a semver requirement, e.g. `">=2.18, <3"`.
    pub fn version_req(&mut self, req: &str) -> &mut Config {
        self.requirement = Some(Requirement::Semver(req.to_string()));
        self
    }

    /// Reads exactly these variables instead of the process environment.
    pub fn env_vars<I, K, V>(&mut self, vars: I) -> &mut Config
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        self.vars = Some(
            vars.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        );
        self
    }

    /// Treats `root` as the filesystem root: every absolute path the probe
    /// looks at, built in or from a variable, is taken under it. For tests
    /// against fixture trees, and for sysroots.
    pub fn root(&mut self, root: impl Into<PathBuf>) -> &mut Config {
        self.root = Some(root.into());
        self
    }

    /// The target triple. Default: `TARGET` (set by cargo for build
    /// scripts), else the target nccl-find itself was built for.
    pub fn target(&mut self, triple: &str) -> &mut Config {
        self.target = Some(triple.to_string());
        self
    }

    /// Whether to print cargo directives (link flags, `rerun-if-*`,
    /// metadata, cfgs) on stdout. Default: yes when running as a build
    /// script (`OUT_DIR` is set), no otherwise.
    pub fn cargo_metadata(&mut self, on: bool) -> &mut Config {
        self.cargo_metadata = Some(on);
        self
    }

    /// Links `libnccl_static.a` (with the static CUDA runtime) instead of
    /// the shared library. Default: `NCCL_STATIC=1`, else shared.
    pub fn statik(&mut self, on: bool) -> &mut Config {
        self.statik = Some(on);
        self
    }

    /// Fails unless the library exports every one of these functions, e.g.
    /// `&["ncclCommSplit"]`. Checked in the file's dynamic symbol table,
    /// without running anything.
    pub fn require_symbols(&mut self, symbols: &[&str]) -> &mut Config {
        self.symbols = symbols.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Tells the run-time loader check that the final binary will have this
    /// directory in its `RUNPATH` (as `emit_rpath_from_dep` gives it).
    pub fn runpath(&mut self, dir: impl Into<PathBuf>) -> &mut Config {
        self.runpath.push(dir.into());
        self
    }

    /// Also builds and runs a tiny C program against the found header and
    /// library, which must report the version the files said (feature
    /// `cc`; only where host == target, skipped with a warning otherwise).
    #[cfg(feature = "cc")]
    pub fn compile_check(&mut self, on: bool) -> &mut Config {
        self.compile_check = on;
        self
    }

    /// Finds NCCL, checks it, and picks one install. In a build script (see
    /// [`Config::cargo_metadata`]) it also prints the cargo directives, and on
    /// failure still prints `rerun-if-env-changed` for every variable read.
    ///
    /// Under docs.rs (`DOCS_RS` set) it looks at nothing, prints nothing, and
    /// returns [`ErrorKind::DocsRs`]; [`Config::probe_or_exit`] turns that into `None`.
    pub fn probe(&self) -> Result<Nccl, Error> {
        let (report, outcome) = self.run();
        let emit = self.build_script(&self.env());
        let result = match outcome {
            Ok(post) => {
                let n = Nccl::from_report(report, post);
                // Last line of defence: no directive may hold a line break.
                match crate::emit::cargo::directives(&n)
                    .into_iter()
                    .find(|d| crate::emit::cargo::has_line_break(d))
                {
                    Some(d) => Err(Error::new(
                        ErrorKind::LineBreak {
                            directive: crate::emit::cargo::escape(&d),
                        },
                        n.report,
                    )),
                    None => Ok(n),
                }
            }
            Err(kind) => Err(Error::new(kind, report)),
        };
        if emit {
            match &result {
                Ok(n) => crate::emit::cargo::print(&crate::emit::cargo::directives(n)),
                Err(e) if *e.kind() != ErrorKind::DocsRs => {
                    crate::emit::cargo::print(&crate::emit::cargo::rerun_env(&e.report().env))
                }
                Err(_) => {}
            }
        }
        result
    }

    /// For build scripts: [`Config::probe`], and on failure print the whole
    /// message to stderr and exit with status 1 (no panic, no backtrace).
    /// `None` under docs.rs, where nothing is probed.
    pub fn probe_or_exit(&self) -> Option<Nccl> {
        match self.probe() {
            Ok(n) => Some(n),
            Err(e) if *e.kind() == ErrorKind::DocsRs => None,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
    }

    /// Everything the probe sees, whether or not NCCL is usable. This is
    /// what `nccl-find --print` shows.
    pub fn report(&self) -> (Report, Option<ErrorKind>) {
        let (report, outcome) = self.run();
        (report, outcome.err())
    }

    fn requirement(&self) -> Result<Option<(semver::VersionReq, String)>, ErrorKind> {
        let invalid = |requirement: &str, why: String| ErrorKind::InvalidRequirement {
            requirement: requirement.to_string(),
            why,
        };
        let text = match &self.requirement {
            None => return Ok(None),
            Some(Requirement::AtLeast(v)) => {
                format!(">={}", lenient_semver(v).map_err(|e| invalid(v, e))?)
            }
            Some(Requirement::Exactly(v)) => {
                format!("={}", lenient_semver(v).map_err(|e| invalid(v, e))?)
            }
            Some(Requirement::Range(lo, hi)) => {
                let mut parts = Vec::new();
                for (b, inc, exc) in [(lo, ">=", ">"), (hi, "<=", "<")] {
                    match b {
                        Bound::Included(v) => parts.push(format!(
                            "{inc}{}",
                            lenient_semver(v).map_err(|e| invalid(v, e))?
                        )),
                        Bound::Excluded(v) => parts.push(format!(
                            "{exc}{}",
                            lenient_semver(v).map_err(|e| invalid(v, e))?
                        )),
                        Bound::Unbounded => {}
                    }
                }
                if parts.is_empty() {
                    return Ok(None);
                }
                parts.join(", ")
            }
            Some(Requirement::Semver(r)) => r.clone(),
        };
        let req = semver::VersionReq::parse(&text).map_err(|e| invalid(&text, e.to_string()))?;
        Ok(Some((req, text)))
    }

    fn env(&self) -> Env {
        match &self.vars {
            Some(v) => Env::from_vars(v.iter().cloned()),
            None => Env::process(),
        }
    }

    /// Whether this probe runs as a build script: [`Config::cargo_metadata`],
    /// else whether `OUT_DIR` is set.
    fn build_script(&self, env: &Env) -> bool {
        self.cargo_metadata
            .unwrap_or_else(|| env.peek("OUT_DIR").is_some())
    }

    fn run(&self) -> (Report, Result<Post, ErrorKind>) {
        let env = self.env();
        let triple = self
            .target
            .clone()
            .or_else(|| env.raw("TARGET").map(|t| t.to_string_lossy().into_owned()))
            .unwrap_or_else(crate::target::built_for);
        let target = Target::new(&triple);
        let mut report = Report {
            target: triple.clone(),
            root: PathBuf::from("/"),
            requirement: None,
            candidates: Vec::new(),
            selected: None,
            looked: Vec::new(),
            env: Vec::new(),
            warnings: Vec::new(),
            misleading_pc: Vec::new(),
            loader: Loader::default(),
            cross: false,
        };
        if env.raw("DOCS_RS").is_some() {
            report.env = env.reads();
            return (report, Err(ErrorKind::DocsRs));
        }
        let host = env.raw("HOST").map(|h| h.to_string_lossy().into_owned());
        let cross = host.as_deref().is_some_and(|h| h != triple);
        report.cross = cross;
        let sysroot = env.var(&target.env_prefix, "NCCL_SYSROOT");
        let root = match (&self.root, &sysroot) {
            (Some(r), _) => r.clone(),
            (None, Some(v)) => PathBuf::from(&v.value),
            (None, None) => PathBuf::from("/"),
        };
        let root = std::fs::canonicalize(&root).unwrap_or(root);
        report.root = root.clone();
        let mut ctx = Ctx::new(&env, &root, &target);
        ctx.build_script = self.build_script(&env);
        let mut loader_done = false;
        let outcome = (|| {
            if let (None, Some(v)) = (&self.root, &sysroot) {
                if let Some(problem) = sources::home::check_dir(Path::new("/"), &v.name, &root) {
                    return Err(ErrorKind::Explicit {
                        variable: format!("{}={}", v.name, v.value.to_string_lossy()),
                        problem,
                    });
                }
            }
            let req = self.requirement()?;
            report.requirement = req.as_ref().map(|r| r.1.clone());
            let sites = sources::collect(&ctx)?;
            let mut cands: Vec<Candidate> = Vec::new();
            for site in sites {
                let Some(mut c) = inspect::inspect_site(&ctx, site) else {
                    continue;
                };
                if let Some(p) = c.line_break().map(Path::to_path_buf) {
                    let problem = inspect::Problem::LineBreak { path: p };
                    if !c.explicit {
                        ctx.warn(format!("an install was skipped: {problem}"));
                    }
                    c.status = inspect::Status::Rejected(problem);
                }
                if !c.explicit
                    && c.lib_dir.is_none()
                    && cands.iter().any(|o| same_file(&o.header, &c.header))
                {
                    // A shared include dir (/usr/include) seen again beside a
                    // library dir with no NCCL: nothing new.
                    continue;
                }
                if let Some(same) = cands.iter_mut().find(|o| same_install(o, &c)) {
                    same.also_found_by.push(c.origin);
                    continue;
                }
                cands.push(c);
            }
            for c in cands.iter().skip(1).filter(|c| c.explicit) {
                if let Some(p) = c.problem() {
                    ctx.warn(format!(
                        "{} is set but shadowed by {}; it is ignored. Note: {p}",
                        c.origin.variable.as_deref().unwrap_or(""),
                        cands[0].origin.variable.as_deref().unwrap_or("")
                    ));
                }
            }
            let result = crate::select::select(&mut cands, req.as_ref());
            report.candidates = cands;
            report.selected = result.as_ref().ok().copied();
            report.loader = check::loader::resolve(&ctx, &self.runpath, cross);
            loader_done = true;
            let c = report
                .selected()
                .cloned()
                .ok_or_else(|| result.err().unwrap_or(ErrorKind::NotFound))?;
            if c.origin.source == sources::SourceKind::Pip && c.origin.detail.ends_with("(PATH)") {
                ctx.warn(format!(
                    "this install was found through a python on PATH, which a build script does not search \
                     (a PATH change would rerun it): for cargo builds set NCCL_HOME={}, or activate the \
                     environment (VIRTUAL_ENV).",
                    ctx.show(c.root.as_deref().unwrap_or(&c.place))
                ));
            }
            self.post(&ctx, &c, &report.loader)
        })();
        // Failed before selection: still say what the loader would pick.
        if !loader_done {
            report.loader = check::loader::resolve(&ctx, &self.runpath, cross);
        }
        report.looked = ctx.looked.take();
        report.warnings = ctx.warnings.take();
        report.misleading_pc = ctx.misleading_pc.take();
        report.env = env.reads();
        (report, outcome)
    }

    /// The checks after selection: static or shared, required symbols, the
    /// run-time loader, the CUDA headers.
    fn post(&self, ctx: &Ctx, c: &Candidate, loader: &Loader) -> Result<Post, ErrorKind> {
        let lib_dir = c.lib_dir.clone().unwrap_or_default();
        let statik = self.wants_static(ctx, c)?;
        let linking = if statik {
            let archive = c.static_library.clone().ok_or_else(|| ErrorKind::StaticMissing {
                lib_dir: lib_dir.clone(),
                hint: match &c.origin.package {
                    _ if is_wheel(c) => "pip wheels ship no static library; use the NVIDIA tarball, \
                         libnccl-dev, or a source build (make src.staticlib)"
                        .into(),
                    Some(sources::Package::Dpkg { dev: None, .. }) => "install libnccl-dev, which has libnccl_static.a".into(),
                    _ => "point NCCL_HOME at an install with lib/libnccl_static.a (tarball, libnccl-dev, \
                          libnccl-static, or a source build), or link the shared library (NCCL_STATIC=0)"
                        .into(),
                },
            })?;
            let mut extra = Vec::new();
            if let Some(ma) = ctx.target.multiarch {
                extra.push(ctx.path("/usr/lib").join(ma));
            }
            if let Some((_, p)) = ctx.var_path("CONDA_PREFIX") {
                extra.push(p.join("lib"));
            }
            let cudart = sources::cuda::find_file(
                ctx,
                c.cuda_version,
                "libcudart_static.a",
                &["lib64", "lib"],
                extra,
            )
            .map_err(|looked| ErrorKind::CudartStaticMissing {
                looked,
                cuda: c.cuda_version,
            })?;
            Linking::Static { archive, cudart }
        } else if c.has_dev_link {
            Linking::Dynamic
        } else {
            Linking::DynamicVerbatim
        };
        let library_real = c.library_real.clone().unwrap_or_default();
        let missing = check::missing_symbols(&library_real, &self.symbols).map_err(|why| {
            ErrorKind::Explicit {
                variable: "require_symbols".into(),
                problem: inspect::Problem::BadLibrary {
                    file: library_real.clone(),
                    why,
                },
            }
        })?;
        if !missing.is_empty() {
            return Err(ErrorKind::MissingSymbols {
                library: library_real,
                version: c
                    .library_version
                    .clone()
                    .unwrap_or_else(|| Version::new(0, 0, 0, "")),
                missing,
            });
        }
        if !statik {
            let version = c
                .library_version
                .clone()
                .unwrap_or_else(|| Version::new(0, 0, 0, ""));
            let library = c.library.clone().unwrap_or_default();
            if let Some(w) =
                check::loader::warning(loader, &library, &library_real, &version, &lib_dir)
            {
                ctx.warn(w);
            }
        }
        let cuda_include = cuda_headers(ctx, c);
        #[cfg(feature = "cc")]
        let compiled = self.run_compile_check(ctx, c, &linking, &cuda_include)?;
        #[cfg(not(feature = "cc"))]
        let compiled = None;
        let _ = self.compile_check;
        Ok(Post {
            linking,
            cuda_include,
            compiled,
        })
    }
}

impl Config {
    /// Static or shared, in the order the `pkg-config` crate uses:
    /// [`Config::statik`], `NCCL_STATIC` (1 or 0), `NCCL_DYNAMIC`, then
    /// `PKG_CONFIG_ALL_STATIC` (`PKG_CONFIG_ALL_DYNAMIC` asks for the
    /// default, shared). The global
    /// `PKG_CONFIG_ALL_STATIC` asks for static NCCL only where there is a
    /// `libnccl_static.a`; elsewhere it links shared and says so.
    fn wants_static(&self, ctx: &Ctx, c: &Candidate) -> Result<bool, ErrorKind> {
        if let Some(s) = self.statik {
            return Ok(s);
        }
        if let Some(v) = ctx.var("NCCL_STATIC") {
            return match v.value.to_string_lossy().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" => Ok(false),
                _ => Err(ErrorKind::BadValue {
                    variable: format!("{}={}", v.name, v.value.to_string_lossy()),
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
}

/// A pip wheel's files, found through any source.
fn is_wheel(c: &Candidate) -> bool {
    matches!(c.origin.package, Some(sources::Package::Pip { .. }))
        || c.lib_dir
            .as_ref()
            .is_some_and(|d| d.ends_with("nvidia/nccl/lib"))
}

/// What the checks after selection add to the result.
pub(crate) struct Post {
    linking: Linking,
    cuda_include: Result<Vec<PathBuf>, String>,
    compiled: Option<CompileCheck>,
}

/// What the compile-and-run check found: `ncclGetVersion()` of the library
/// loaded, and `NCCL_VERSION_CODE` of the header compiled against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileCheck {
    /// `ncclGetVersion()` of the library the program loaded.
    pub runtime_code: u32,
    /// `NCCL_VERSION_CODE` from the header it was compiled with.
    pub header_code: u32,
}

#[cfg(feature = "cc")]
impl Config {
    fn run_compile_check(
        &self,
        ctx: &Ctx,
        c: &Candidate,
        linking: &Linking,
        cuda_include: &Result<Vec<PathBuf>, String>,
    ) -> Result<Option<CompileCheck>, ErrorKind> {
        if !self.compile_check {
            return Ok(None);
        }
        let host = ctx
            .env
            .raw("HOST")
            .map(|h| h.to_string_lossy().into_owned());
        if host.as_deref().is_some_and(|h| h != ctx.target.triple) {
            ctx.warn(
                "the compile-and-run check was skipped: it runs only where host == target".into(),
            );
            return Ok(None);
        }
        let work = ctx
            .env
            .raw("OUT_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let empty = Vec::new();
        let inputs = check::compile::Inputs {
            triple: &ctx.target.triple,
            include: c.include_dir().unwrap_or(Path::new("/")),
            cuda_include: cuda_include.as_ref().unwrap_or(&empty),
            lib_dir: c.lib_dir.as_deref().unwrap_or(Path::new("/")),
            linking,
        };
        let fail = |why: String| ErrorKind::CompileCheck {
            why: match cuda_include {
                Err(cuda) => format!("{why}\n(nccl.h needs the CUDA headers: {cuda})"),
                Ok(_) => why,
            },
        };
        let got = check::compile::run(inputs, &work).map_err(fail)?;
        let file_code = c.library_version.as_ref().map_or(0, |v| v.code);
        if got.runtime_code != file_code {
            return Err(ErrorKind::CompileCheck {
                why: format!(
                    "the program loaded a library whose ncclGetVersion() is {}, but the file {} says {file_code}: \
                     the library loaded is not the one inspected",
                    got.runtime_code,
                    c.library_real.as_deref().unwrap_or(Path::new("?")).display()
                ),
            });
        }
        Ok(Some(CompileCheck {
            runtime_code: got.runtime_code,
            header_code: got.header_code,
        }))
    }
}

/// Headers that the CUDA runtime headers include but that pip's
/// `nvidia-cuda-runtime-cu*` wheel does not ship: `(file, included from,
/// the wheel's include dir beside it, the wheel)`. A CUDA toolkit has all.
const CUDA_COMPANIONS: [(&str, &str, &str, &str); 2] = [
    (
        "crt/host_config.h",
        "cuda_runtime.h",
        "cuda_nvcc/include",
        "nvidia-cuda-nvcc",
    ),
    (
        "nv/target",
        "cuda_fp16.h",
        "cuda_cccl/include",
        "nvidia-cuda-cccl",
    ),
];

/// The include dirs that make `nccl.h`'s `#include <cuda_runtime.h>` work:
/// the one holding `cuda_runtime.h`, plus, for each companion header it
/// needs and lacks, the dir holding that (wheels are looked for beside a
/// wheel's NCCL, in `site-packages/nvidia/`).
fn cuda_headers(ctx: &Ctx, c: &Candidate) -> Result<Vec<PathBuf>, String> {
    let nvidia = c
        .root
        .as_ref()
        .and_then(|r| r.parent())
        .filter(|p| p.ends_with("nvidia"));
    let beside = |sub: &str| nvidia.map(|n| n.join(sub)).into_iter().collect::<Vec<_>>();
    let list = |l: Vec<PathBuf>| {
        l.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let cu = format!("cu{}", c.cuda_version.map_or(12, |v| v.major));
    let mut extra = beside("cuda_runtime/include");
    extra.push(ctx.path("/usr/include"));
    let runtime = sources::cuda::find_file(ctx, c.cuda_version, "cuda_runtime.h", &["include"], extra).map_err(|looked| {
        format!(
            "no cuda_runtime.h (looked in {}). Install the CUDA toolkit and set CUDA_HOME, or pip install \
             nvidia-cuda-runtime-{cu} nvidia-cuda-nvcc-{cu} nvidia-cuda-cccl-{cu} beside the NCCL wheel",
            list(looked)
        )
    })?;
    let dir = runtime.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut dirs = vec![dir.clone()];
    for (file, from, wheel_dir, wheel) in CUDA_COMPANIONS {
        let needed = crate::files::read_bounded(&dir.join(from), 4 << 20)
            .map(|text| String::from_utf8_lossy(&text).contains(file))
            .unwrap_or(false);
        if !needed || dir.join(file).is_file() {
            continue;
        }
        let found =
            sources::cuda::find_file(ctx, c.cuda_version, file, &["include"], beside(wheel_dir))
                .map_err(|looked| {
                    format!(
                "{} has {from}, which includes {file}, and no {file} was found (looked in {}). \
                 pip install {wheel}-{cu} beside the NCCL wheel, or use the CUDA toolkit",
                dir.display(),
                list(looked)
            )
                })?;
        let mut inc = found.clone();
        for _ in Path::new(file).components() {
            inc.pop();
        }
        if !dirs.contains(&inc) {
            dirs.push(inc);
        }
    }
    Ok(dirs)
}

/// Two candidates are one install when they resolve to the same header
/// and library files.
fn same_install(a: &Candidate, b: &Candidate) -> bool {
    (a.header.is_some() || a.library_real.is_some())
        && same_file(&a.header, &b.header)
        && same_file(&a.library_real, &b.library_real)
}

fn same_file(a: &Option<PathBuf>, b: &Option<PathBuf>) -> bool {
    let canon = |p: &Option<PathBuf>| {
        p.as_ref()
            .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
    };
    canon(a) == canon(b)
}

/// Everything one probe saw.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Things worth knowing that stopped nothing.
    pub warnings: Vec<String>,
    /// `nccl.pc` files whose directories hold no NCCL (a wrong `prefix=`).
    pub misleading_pc: Vec<sources::MisleadingPc>,
    /// Which `libnccl.so.2` the run-time loader would load.
    pub loader: Loader,
    /// Whether the target differs from the host (`TARGET` ≠ `HOST`).
    pub cross: bool,
}

impl Report {
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
        sources::under_root(&self.root, path)
    }
}

/// The NCCL install that was selected.
#[derive(Debug, Clone)]
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
    /// Everything the probe saw, the other installs included.
    pub report: Report,
}

impl Nccl {
    fn from_report(report: Report, post: Post) -> Nccl {
        let c = report.selected().expect("a selected candidate").clone();
        let missing = || PathBuf::new();
        Nccl {
            include_paths: c.include_dir().map(Path::to_path_buf).into_iter().collect(),
            lib_dir: c.lib_dir.clone().unwrap_or_else(missing),
            library: c.library.clone().unwrap_or_else(missing),
            library_real: c.library_real.clone().unwrap_or_else(missing),
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
            report,
        }
    }

    /// Every other install found, each with why it lost or was rejected.
    pub fn others(&self) -> impl Iterator<Item = &Candidate> {
        self.report.others()
    }

    /// The cargo directives a build script gets for this install.
    pub fn cargo_directives(&self) -> Vec<String> {
        crate::emit::cargo::directives(self)
    }
}
