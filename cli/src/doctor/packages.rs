//! doctor's `python` check: for each package that uses NCCL, the library
//! it will map and whether that has what it imports.

use std::path::Path;

use serde_json::{json, Value};

use super::{Area, Findings, Level};
use crate::facts::python;

/// The Python environment and what each package that uses NCCL does there.
pub(crate) struct PythonReport {
    pub(super) env: python::PyEnv,
    pub(super) outcomes: Vec<python::Outcome>,
    pub(super) orders: Vec<String>,
}

impl PythonReport {
    /// The environment `--python` names, or the one in use; `None` when
    /// there is none.
    pub fn gather(explicit: Option<&Path>) -> Option<PythonReport> {
        let env = python::find_env(explicit)?;
        let facts = python::machine_facts();
        let (outcomes, orders) = python::assess(&env, &facts);
        Some(PythonReport {
            env,
            outcomes,
            orders,
        })
    }

    pub(super) fn to_json(&self) -> Value {
        json!({
            "prefix": self.env.prefix.display().to_string(),
            "python": self.env.python.display().to_string(),
            "found_by": self.env.how,
            "packages": self.outcomes.iter().map(|o| json!({
                "package": o.package,
                "version": o.version,
                "site_packages": o.site.display().to_string(),
                "library": o.library.as_ref().map(|p| p.display().to_string()),
                "nccl_version": o.nccl_version,
                "how": o.how,
                "binds": match &o.binding { python::Binding::Now(_) => "at import", python::Binding::Lazy => "when called" },
                "imports": o.imports.len(),
                "missing": o.missing,
                "requires": o.requires,
            })).collect::<Vec<_>>(),
            "import_order": self.orders,
        })
    }
}

/// The Python area: for each package that uses NCCL, the file it maps and
/// whether that has what it imports; a problem only where a process that
/// will run gets a library lacking what it needs.
pub(super) fn check(f: &mut Findings, py: &PythonReport) {
    let env = &py.env;
    if py.outcomes.is_empty() {
        f.add(
            Area::Python,
            Level::Ok,
            format!(
                "{} ({}): no package that uses NCCL (torch, cupy, jax, paddle, vllm, nccl4py)",
                env.prefix.display(),
                env.how
            ),
            None,
        );
    }
    for o in &py.outcomes {
        python_outcome(f, o);
    }
    for o in &py.orders {
        let level = if o.contains("fails with") {
            Level::Problem
        } else {
            Level::Note
        };
        f.add(
            Area::Python,
            level,
            format!("in one process, {o}: libnccl.so.2 is loaded once, and the first to load it decides"),
            Some("keep one NCCL in the environment (one nvidia-nccl wheel), or import the package whose NCCL the others can use first".into()),
        );
    }
}

/// One package's finding: the file it maps, and whether that has what it
/// imports.
fn python_outcome(f: &mut Findings, o: &python::Outcome) {
    let name = match &o.version {
        Some(v) => format!("{} {v}", o.package),
        None => o.package.to_string(),
    };
    let fix = Some(match &o.requires {
        Some(r) => format!("pip install '{r}' (what {name} asks for)"),
        None => "pip install -U nvidia-nccl-cu12 (or -cu13, as your CUDA)".to_string(),
    });
    let consumer = match &o.binding {
        python::Binding::Now(c) => c
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        python::Binding::Lazy => String::new(),
    };
    let Some(lib) = &o.library else {
        let (level, what) = match o.binding {
            python::Binding::Now(_) => (
                Level::Problem,
                format!(
                    "`import {}` fails with `libnccl.so.2: cannot open shared object file`",
                    o.package
                ),
            ),
            python::Binding::Lazy => (Level::Note, "its NCCL calls fail".to_string()),
        };
        f.add(
            Area::Python,
            level,
            format!("{name} finds no libnccl.so.2: {what}"),
            fix,
        );
        return;
    };
    let mapped = format!(
        "{name} maps {} (NCCL {}; {})",
        lib.display(),
        o.nccl_version.as_deref().unwrap_or("?"),
        o.how
    );
    match (&o.binding, o.import_failure()) {
        (python::Binding::Now(_), Some(failure)) => f.add(
            Area::Python,
            Level::Problem,
            format!(
                "{mapped}, which lacks {} of the {} NCCL functions {consumer} imports: {failure}",
                o.missing.len(),
                o.imports.len(),
            ),
            fix,
        ),
        (python::Binding::Now(_), None) => f.add(
            Area::Python,
            Level::Ok,
            format!(
                "{mapped}: it has all {} NCCL functions {consumer} imports",
                o.imports.len()
            ),
            None,
        ),
        (python::Binding::Lazy, _) => f.add(
            Area::Python,
            Level::Ok,
            format!("{mapped}: it looks each NCCL function up when it calls it"),
            None,
        ),
    }
}
