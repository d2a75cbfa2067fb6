//! The probe: the builder ([`Config`]) and the pipeline it runs: sources →
//! inspect → select → check, into a [`Report`] and, on success, an [`Nccl`].

use std::ffi::OsString;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};

use crate::check::{self, Post};
use crate::context::Ctx;
use crate::emit::cargo;
use crate::env::{Env, Var};
use crate::error::Error;
use crate::inspect::Candidate;
use crate::problem::ErrorKind;
use crate::report::{Nccl, Report};
use crate::select::{self, Requirement};
use crate::sources;
use crate::target::Target;

/// The probe's settings, in the style of the `pkg-config` crate:
///
/// ```no_run
/// use nccl_find::Config;
///
/// match Config::new().atleast_version("2.18").probe() {
///     Ok(nccl) => println!("NCCL {} in {}", nccl.version, nccl.lib_dir.display()),
///     // docs.rs: nothing is probed, nothing is needed.
///     Err(e) if e.is_docs_rs() => {}
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
    no_loader_check: bool,
    compile_check: bool,
    python_prefix: Option<PathBuf>,
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

    /// Requires exactly this version, in Cargo's meaning of `=`: `"2.21.5"`
    /// is that release; `"2.21"` is any 2.21.x, as `version_req("=2.21")`.
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

    /// Requires a version matching a requirement in Cargo's syntax, e.g.
    /// `">=2.18, <3"`, `"~2.18"`, `"2.*"` (read as the `semver` crate reads
    /// it; pre-release parts are refused, since NCCL versions have none).
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
        let mut list = Vec::new();
        for (k, v) in vars {
            list.push((k.into(), v.into()));
        }
        self.vars = Some(list);
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
        self.symbols.clear();
        for s in symbols {
            self.symbols.push(s.to_string());
        }
        self
    }

    /// Also looks for NCCL wheels in the Python environment at `prefix`
    /// (its `lib/python3.*/site-packages`), right after `VIRTUAL_ENV` and
    /// `CONDA_PREFIX`: for a program installed into a venv, which finds that
    /// venv's NCCL without the venv being activated. `nccl-find` passes the
    /// environment it is installed in.
    pub fn python_prefix(&mut self, prefix: impl Into<PathBuf>) -> &mut Config {
        self.python_prefix = Some(prefix.into());
        self
    }

    /// Tells the run-time loader check that the final binary will have this
    /// directory in its `RUNPATH` (as `emit_rpath_from_dep` gives it).
    pub fn runpath(&mut self, dir: impl Into<PathBuf>) -> &mut Config {
        self.runpath.push(dir.into());
        self
    }

    /// Whether to work out which `libnccl.so.2` the run-time loader will
    /// load, and warn when it is not the linked one: on by default, except
    /// in a build script, where it is always off. A build's
    /// `LD_LIBRARY_PATH` is not the run's, and what the program loads is
    /// decided by the final binary's rpath ([`emit_rpath_from_dep`](crate::emit_rpath_from_dep))
    /// and the machine it runs on, where `nccl-find doctor` says it. Off,
    /// the probe reads none of the loader's variables and gives no such
    /// warning. Its variables are never rerun triggers either way: they
    /// change what runs, not what is built.
    pub fn loader_check(&mut self, on: bool) -> &mut Config {
        self.no_loader_check = !on;
        self
    }

    /// Also builds and runs a tiny C program against the found header and
    /// library, which must report the version the files said (feature
    /// `cc`; only where host == target, skipped with a warning otherwise).
    #[cfg(feature = "cc")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cc")))]
    pub fn compile_check(&mut self, on: bool) -> &mut Config {
        self.compile_check = on;
        self
    }

    /// Finds NCCL, checks it, and picks one install. In a build script (see
    /// [`Config::cargo_metadata`]) it also prints the cargo directives, and on
    /// failure still prints `rerun-if-env-changed` for every variable read.
    ///
    /// Under docs.rs (`DOCS_RS` set) it looks at nothing and returns
    /// [`ErrorKind::DocsRs`] ([`Config::probe_or_exit`] turns that into
    /// `None`); in a build script it prints only the `rustc-check-cfg` and
    /// `rustc-cfg` lines of every API level, so that docs.rs documents every
    /// version-gated item.
    pub fn probe(&self) -> Result<Nccl, Error> {
        self.probe_printing(true)
    }

    /// [`Config::probe`]; `reruns_on_failure` says whether a failure still
    /// prints the rerun triggers (for a build script that goes on without
    /// NCCL, and must run again once NCCL appears).
    fn probe_printing(&self, reruns_on_failure: bool) -> Result<Nccl, Error> {
        let (report, outcome) = self.run();
        let emit = self.build_script(&self.env());
        let result = match outcome {
            Ok(post) => checked(Nccl::from_report(report, post)),
            Err(kind) => Err(Error::new(kind, report)),
        };
        // How much a failure's message says: read only where the probe
        // failed, and no rerun trigger (a failed build script runs again
        // anyway).
        let result = result.map_err(|e| {
            let verbose = self.env().peek("NCCL_FIND_VERBOSE");
            e.verbose(verbose.is_some_and(|v| !v.is_empty() && v != "0"))
        });
        if emit {
            match &result {
                Ok((_, lines)) => cargo::print(lines),
                Err(e) if *e.kind() == ErrorKind::DocsRs => cargo::print(&cargo::docs_rs()),
                Err(e) if reruns_on_failure => cargo::print(&cargo::rerun_env(&e.report().env)),
                Err(_) => {}
            }
        }
        match result {
            Ok((n, _)) => Ok(n),
            Err(e) => Err(e),
        }
    }

    /// For build scripts: [`Config::probe`], and on failure print the
    /// message to stderr and exit with status 1 (no panic, no backtrace),
    /// with no rerun triggers before it: cargo runs a failed build script
    /// again anyway. `None` under docs.rs, where nothing is probed.
    pub fn probe_or_exit(&self) -> Option<Nccl> {
        match self.probe_printing(false) {
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

    fn env(&self) -> Env {
        match &self.vars {
            Some(v) => Env::fixed(v.clone()),
            None => Env::process(),
        }
    }

    /// Whether this probe runs as a build script: [`Config::cargo_metadata`],
    /// else whether `OUT_DIR` is set.
    fn build_script(&self, env: &Env) -> bool {
        match self.cargo_metadata {
            Some(on) => on,
            None => env.peek("OUT_DIR").is_some(),
        }
    }

    /// The pipeline: sources → inspect → select, then the checks after
    /// selection. The report holds everything seen, whatever the outcome.
    fn run(&self) -> (Report, Result<Post, ErrorKind>) {
        let env = self.env();
        let triple = match &self.target {
            Some(t) => t.clone(),
            None => match env.raw("TARGET") {
                Some(t) => t.to_string_lossy().into_owned(),
                None => crate::target::built_for(),
            },
        };
        let target = Target::new(&triple);
        let mut report = Report::empty(&triple);
        if env.raw("DOCS_RS").is_some() {
            report.env = env.reads();
            return (report, Err(ErrorKind::DocsRs));
        }
        report.cross = match env.raw("HOST") {
            Some(h) => h.to_string_lossy() != triple,
            None => false,
        };
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
        ctx.python_prefix = self.python_prefix.clone();
        let found = self.find(&ctx, sysroot.as_ref(), &mut report);
        // What the run-time loader would pick is said in every outcome,
        // outside a build script: a build's loader path is not the run's.
        let loader_check = !self.no_loader_check && !ctx.build_script;
        if loader_check {
            report.loader =
                env.informing(|| check::loader::resolve(&ctx, &self.runpath, report.cross));
        }
        let outcome = match found {
            Ok(c) => {
                let opts = check::Options {
                    loader: loader_check,
                    statik: self.statik,
                    symbols: &self.symbols,
                    compile_check: self.compile_check,
                };
                check::after_selection(&ctx, &c, &report.loader, &opts)
            }
            Err(kind) => Err(kind),
        };
        report.looked = ctx.looked.take();
        report.warnings = ctx.warnings.take();
        report.notes = ctx.notes.take();
        report.misleading_pc = ctx.misleading_pc.take();
        report.watched = ctx.watched.take();
        report.env = env.reads();
        (report, outcome)
    }

    /// Sources → inspect → select: the selected install, or why there is
    /// none. Every candidate goes into the report either way.
    fn find(
        &self,
        ctx: &Ctx,
        sysroot: Option<&Var>,
        report: &mut Report,
    ) -> Result<Candidate, ErrorKind> {
        if let (None, Some(v)) = (&self.root, sysroot) {
            if let Some(problem) = sources::home::check_dir(Path::new("/"), &v.name, ctx.root) {
                return Err(ErrorKind::Explicit {
                    variable: v.setting(),
                    problem,
                });
            }
        }
        let req = match &self.requirement {
            Some(r) => r.parse()?,
            None => None,
        };
        report.requirement = req.as_ref().map(|r| r.1.clone());
        let mut cands = select::search(ctx, req.as_ref())?;
        let result = select::select(&mut cands, req.as_ref());
        report.candidates = cands;
        report.selected = result.as_ref().ok().copied();
        match (report.selected(), result) {
            (Some(c), _) => Ok(c.clone()),
            (None, Err(kind)) => Err(kind),
            (None, Ok(_)) => Err(ErrorKind::NotFound),
        }
    }
}

/// The last line of defence: no directive may hold a line break. The
/// directives, made once, come back with the install for printing.
fn checked(n: Nccl) -> Result<(Nccl, Vec<String>), Error> {
    let lines = cargo::directives(&n);
    for d in &lines {
        if cargo::has_line_break(d) {
            let directive = cargo::escape(d);
            return Err(Error::new(ErrorKind::LineBreak { directive }, n.report));
        }
    }
    Ok((n, lines))
}
