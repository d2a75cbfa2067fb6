//! The probe: the builder, the pipeline that runs sources → inspect →
//! select, and its two results.

use std::ffi::OsString;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};

use crate::env::{Env, EnvRead};
use crate::error::{Error, ErrorKind};
use crate::inspect::{self, Candidate};
use crate::sources::{self, Ctx, Looked, Origin};
use crate::target::Target;
use crate::version::{lenient_semver, CudaVersion, Version};

/// The probe's settings, in the style of the `pkg-config` crate:
///
/// ```no_run
/// let nccl = nccl_find::Config::new().atleast_version("2.18").probe()?;
/// println!("NCCL {} in {}", nccl.version, nccl.lib_dir.display());
/// # Ok::<(), nccl_find::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Config {
    vars: Option<Vec<(OsString, OsString)>>,
    root: Option<PathBuf>,
    target: Option<String>,
    requirement: Option<Requirement>,
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

    /// Finds NCCL, checks it, and picks one install.
    pub fn probe(&self) -> Result<Nccl, Error> {
        let (report, outcome) = self.run();
        match outcome {
            Ok(()) => Ok(Nccl::from_report(report)),
            Err(kind) => Err(Error::new(kind, report)),
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

    fn run(&self) -> (Report, Result<(), ErrorKind>) {
        let env = match &self.vars {
            Some(v) => Env::from_vars(v.iter().cloned()),
            None => Env::process(),
        };
        let triple = self
            .target
            .clone()
            .or_else(|| env.raw("TARGET").map(|t| t.to_string_lossy().into_owned()))
            .unwrap_or_else(|| env!("NCCL_FIND_BUILT_FOR").to_string());
        let target = Target::new(&triple);
        let root = self.root.clone().unwrap_or_else(|| PathBuf::from("/"));
        let root = std::fs::canonicalize(&root).unwrap_or(root);
        let ctx = Ctx::new(&env, &root, &target);
        let mut report = Report {
            target: triple.clone(),
            root: root.clone(),
            requirement: None,
            candidates: Vec::new(),
            selected: None,
            looked: Vec::new(),
            env: Vec::new(),
            warnings: Vec::new(),
        };
        let outcome = (|| {
            let req = self.requirement()?;
            report.requirement = req.as_ref().map(|r| r.1.clone());
            let sites = sources::collect(&ctx)?;
            let mut cands: Vec<Candidate> = Vec::new();
            for site in sites {
                let Some(c) = inspect::inspect_site(&ctx, site) else {
                    continue;
                };
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
            result.map(|_| ())
        })();
        report.looked = ctx.looked.into_inner();
        report.warnings = ctx.warnings.into_inner();
        report.env = env.reads();
        (report, outcome)
    }
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
    /// Everything the probe saw, the other installs included.
    pub report: Report,
}

impl Nccl {
    fn from_report(report: Report) -> Nccl {
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
            report,
        }
    }

    /// Every other install found, each with why it lost or was rejected.
    pub fn others(&self) -> impl Iterator<Item = &Candidate> {
        self.report.others()
    }
}
