//! `nccl-find doctor`: what will go wrong when NCCL runs, each finding with
//! its fix. Problems make the exit status 1; notes do not.

mod driver;
mod lookups;
mod mpi;
mod nccl;
mod network;
mod packages;
mod rdma;
mod shm;
mod variables;

use std::fmt::Write;
use std::path::Path;
use std::process::ExitCode;

use nccl_find::{Config, Nccl};
use serde_json::{json, Value};

use crate::facts::conf::{self, ConfFacts};
use crate::facts::host::Facts;
use crate::rules::plugins;
use crate::rules::settings::InForce;
use crate::style::{human, When};
pub(crate) use packages::PythonReport;
use variables::{Judged, Names};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Ok,
    Note,
    Problem,
}

impl Level {
    fn word(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Note => "note",
            Level::Problem => "problem",
        }
    }
}

/// The part of the system a finding is about; findings are printed grouped
/// under these headings, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Area {
    Nccl,
    Python,
    Driver,
    Variables,
    Network,
    Rdma,
    Shm,
    Mpi,
}

impl Area {
    /// The heading in the text output, and `area` in the JSON output.
    fn word(self) -> &'static str {
        match self {
            Area::Nccl => "NCCL",
            Area::Python => "Python",
            Area::Driver => "GPU and driver",
            Area::Variables => "NCCL variables",
            Area::Network => "Network",
            Area::Rdma => "RDMA",
            Area::Shm => "Shared memory",
            Area::Mpi => "MPI",
        }
    }
}

struct Finding {
    area: Area,
    level: Level,
    text: String,
    fix: Option<String>,
}

#[derive(Default)]
struct Findings(Vec<Finding>);

impl Findings {
    fn add(&mut self, area: Area, level: Level, text: impl Into<String>, fix: Option<String>) {
        self.0.push(Finding {
            area,
            level,
            text: text.into(),
            fix,
        });
    }
    fn count(&self, l: Level) -> usize {
        self.0.iter().filter(|f| f.level == l).count()
    }
}

/// Everything doctor reads besides the probe: the host's facts and what
/// NCCL's settings are read from. Both come from the machine, or from a
/// facts file (`--host-facts`) so that tests can fix them.
struct Inputs {
    facts: Facts,
    /// The variables and configuration files NCCL's settings come from.
    conf: ConfFacts,
    /// The `NCCL_*` settings in force for the NCCL judged ([`Judged`]),
    /// by its release's rules.
    settings: InForce,
    /// Whether the variables came from a facts file (its `env`): data
    /// about another machine, which never reaches a process that loads
    /// code (the child that asks NCCL does not run).
    env_from_file: bool,
    /// Whether doctor judges another system's root (`--root`): its
    /// libraries are data, never loaded.
    other_root: bool,
}

impl Inputs {
    /// Reads the machine and the process environment.
    fn gather(root: &Path) -> Inputs {
        let conf = ConfFacts::read(&conf::process_env(), root);
        let settings = InForce::of(&conf, None);
        let named: Vec<String> = plugins::FAMILIES
            .iter()
            .filter_map(|(f, _, _)| settings.value(&plugins::variable(f)))
            .map(String::from)
            .collect();
        Inputs {
            facts: Facts::gather(&named),
            conf,
            settings,
            env_from_file: false,
            other_root: root != Path::new("/"),
        }
    }

    /// The settings again, as the NCCL judged (`release`) reads them
    /// (`NCCL_CONF_FILE` from 2.23.4, `~` from `HOME` from 2.30.3).
    fn for_nccl(&mut self, release: Option<&nccl_find::Version>) {
        self.settings = InForce::of(&self.conf, release);
    }

    /// Reads a facts file: the keys `Facts::to_json` writes, and `env`, an
    /// object of variables that then stands for the whole environment
    /// (without it, the process environment is read).
    fn from_file(path: &Path, root: &Path) -> Result<Inputs, String> {
        let text = read_facts_file(path)?;
        let v: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        Inputs::from_json(&v, root)
    }

    /// The facts file's contents; see `from_file`.
    fn from_json(v: &Value, root: &Path) -> Result<Inputs, String> {
        let facts = Facts::from_json(v)?;
        let (env, env_from_file) = match v.get("env") {
            None | Some(Value::Null) => (conf::process_env(), false),
            Some(vars) => (env_from_json(vars)?, true),
        };
        let conf = ConfFacts::read(&env, root);
        Ok(Inputs {
            facts,
            settings: InForce::of(&conf, None),
            conf,
            env_from_file,
            other_root: root != Path::new("/"),
        })
    }
}

/// A facts file's `env`: `{"NAME": "value", ...}`.
fn env_from_json(v: &Value) -> Result<Vec<(String, String)>, String> {
    let vars = v
        .as_object()
        .ok_or("\"env\" is not an object of variables")?;
    let mut env = Vec::new();
    for (k, x) in vars {
        let x = x
            .as_str()
            .ok_or_else(|| format!("\"env\": {k} is not a string"))?;
        env.push((k.clone(), x.to_string()));
    }
    Ok(env)
}

/// What every check may read: the host's facts and settings, the probe's
/// result, the Python environment, and the names the NCCL that runs reads.
struct Seen<'a> {
    inputs: &'a Inputs,
    result: &'a Result<Nccl, nccl_find::Error>,
    py: Option<&'a PythonReport>,
    judged: Option<&'a Judged>,
    names: Option<&'a Names>,
}

impl Seen<'_> {
    fn nccl(&self) -> Option<&Nccl> {
        self.result.as_ref().ok()
    }

    /// The release whose rules apply: the NCCL judged's.
    fn release(&self) -> Option<&nccl_find::Version> {
        self.judged.map(|j| &j.version)
    }
}

/// One of doctor's checks: a row of [`CHECKS`].
struct Check {
    /// A short name, unique.
    id: &'static str,
    /// What it reads, in words.
    reads: &'static str,
    /// What it can conclude, in words.
    concludes: &'static str,
    /// Adds its findings.
    run: fn(&mut Findings, &Seen),
}

/// Every check, in the order the areas are printed. Adding a check is one
/// function and one row here (ARCHITECTURE.md, "How to add a doctor check").
const CHECKS: &[Check] = &[
    Check {
        id: "nccl",
        reads: "the probe's result: every install, the loader's pick",
        concludes: "the install found, conflicting installs, the loader loading another version",
        run: |f, s| nccl::check(f, s.result),
    },
    Check {
        id: "python",
        reads: "the Python environment in use and its packages",
        concludes: "which libnccl.so.2 each package will map, and an undefined symbol it will hit",
        run: |f, s| {
            if let Some(py) = s.py {
                packages::check(f, py);
            }
            variables::check_judged(f, s.judged);
        },
    },
    Check {
        id: "driver",
        reads: "libcuda's driver version and GPU count, the CUDA version NCCL was built for",
        concludes: "a driver too old for the NCCL found, no GPU",
        run: |f, s| driver::check(f, &s.inputs.facts, s.nccl()),
    },
    Check {
        id: "variables",
        reads: "NCCL_* in the environment and NCCL's configuration files; the library's names and parameters",
        concludes: "what each setting does, misspellings, values NCCL rejects, values an env plugin set, a RAS service that crashes by itself",
        run: |f, s| {
            variables::check(f, &s.inputs.settings, s.names);
            variables::check_ras(f, &s.inputs.settings, s.judged);
        },
    },
    Check {
        id: "network",
        reads: "the interfaces, their addresses and routes; NCCL_SOCKET_IFNAME; the NCCL version's rule",
        concludes: "the interface NCCL will pick, a NCCL_SOCKET_IFNAME that matches nothing",
        run: |f, s| network::check(f, &s.inputs.facts.interfaces, &s.inputs.settings, s.release()),
    },
    Check {
        id: "lookups",
        reads: "the time a reverse name lookup of each of this host's addresses takes",
        concludes: "a resolver slow enough to stall torch's store, which looks up every client it accepts",
        run: |f, s| lookups::check(f, &s.inputs.facts.lookups),
    },
    Check {
        id: "rdma",
        reads: "RDMA adapters, ports, GIDs, device nodes, locked memory, plugins of every family",
        concludes: "what keeps NCCL off the fabric, the plugins NCCL will load",
        run: |f, s| rdma::check(f, &s.inputs.facts, &s.inputs.settings, s.release()),
    },
    Check {
        id: "shm",
        reads: "the size of /dev/shm",
        concludes: "a /dev/shm too small for NCCL's shared-memory transport",
        run: |f, s| shm::check(f, &s.inputs.facts),
    },
    Check {
        id: "mpi",
        reads: "mpirun and mpiexec on PATH",
        concludes: "whether MPI-launched jobs can start",
        run: |f, s| mpi::check(f, &s.inputs.facts),
    },
];

/// Every check of [`CHECKS`], in order.
fn findings(
    inputs: &Inputs,
    result: &Result<Nccl, nccl_find::Error>,
    py: Option<&PythonReport>,
    judged: Option<&Judged>,
    names: Option<&Names>,
) -> Findings {
    let seen = Seen {
        inputs,
        result,
        py,
        judged,
        names,
    };
    let mut f = Findings::default();
    for c in CHECKS {
        (c.run)(&mut f, &seen);
    }
    f
}

/// The version of `doctor --json`'s format, raised when a documented key
/// changes shape.
const DOCTOR_SCHEMA: u32 = 1;

fn to_json(
    f: &Findings,
    facts: &Facts,
    py: Option<&PythonReport>,
    names: Option<&Names>,
) -> String {
    let (problems, notes) = (f.count(Level::Problem), f.count(Level::Note));
    let out = json!({
        "schema": DOCTOR_SCHEMA,
        "healthy": problems == 0,
        "problems": problems,
        "notes": notes,
        "findings": f.0.iter().map(|x| json!({
            "area": x.area.word(), "level": x.level.word(), "text": x.text, "fix": x.fix,
        })).collect::<Vec<_>>(),
        "facts": facts.to_json(),
        "python": py.map(PythonReport::to_json),
        "nccl_parameters": names.map(Names::to_json),
        "checks": CHECKS.iter().map(|c| json!({
            "id": c.id, "reads": c.reads, "concludes": c.concludes,
        })).collect::<Vec<_>>(),
    });
    serde_json::to_string_pretty(&out).expect("JSON from plain values")
}

fn to_text(f: &Findings) -> String {
    let (problems, notes) = (f.count(Level::Problem), f.count(Level::Note));
    let mut s = String::from("nccl-find doctor\n");
    let mut area = None;
    for x in &f.0 {
        if area != Some(x.area) {
            area = Some(x.area);
            let _ = writeln!(s, "\n{}:", x.area.word());
        }
        let _ = writeln!(s, "  {:<8} {}", x.level.word(), x.text);
        if let Some(fix) = &x.fix {
            let _ = writeln!(s, "           fix: {fix}");
        }
    }
    // Doctor judges this machine; a job that already failed is judged
    // by its own logs.
    let _ = writeln!(
        s,
        "\nA job failed? `nccl-find explain` reads its logs (slurm-*.out, kubectl logs) and names the cause."
    );
    let _ = writeln!(
        s,
        "{problems} problem{}, {notes} note{}.",
        if problems == 1 { "" } else { "s" },
        if notes == 1 { "" } else { "s" }
    );
    s
}

/// The most a facts file may hold; `--host-facts` files are a few KiB.
const HOST_FILE_MAX: u64 = 1 << 20;

/// A facts file's text: a regular file (a link to one is followed), opened
/// without blocking (a FIFO is refused, never waited on), read up to
/// [`HOST_FILE_MAX`] bytes.
fn read_facts_file(path: &Path) -> Result<String, String> {
    use std::io::ErrorKind;
    // The library's bounded read: a regular file only (checked before and
    // after the open, which does not block), at most the bound.
    let bytes = nccl_find::internal::read_bounded(path, HOST_FILE_MAX).map_err(|e| match e.kind() {
        ErrorKind::InvalidInput => "it is not a regular file; give the path of a JSON file".to_string(),
        ErrorKind::InvalidData => format!(
            "it is larger than {HOST_FILE_MAX} bytes, which no facts file is; give a JSON file of host facts \
             (the \"facts\" object `doctor --json` prints)"
        ),
        _ => e.to_string(),
    })?;
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text; give a JSON file".into())
}

/// Runs every check and prints the findings.
pub fn run(
    config: &Config,
    root: &Path,
    as_json: bool,
    facts_file: Option<&Path>,
    color: When,
    py: Option<PythonReport>,
) -> ExitCode {
    let inputs = match facts_file {
        None => Inputs::gather(root),
        Some(p) => match Inputs::from_file(p, root) {
            Ok(i) => i,
            Err(e) => {
                crate::style::complain(&format!(
                    "cannot read host facts from {}: {e}",
                    p.display()
                ));
                return ExitCode::from(2);
            }
        },
    };
    let result = config.probe();
    let judged = Judged::of(&result, py.as_ref());
    let mut inputs = inputs;
    inputs.for_nccl(judged.as_ref().map(|j| &j.version));
    let names = judged.as_ref().and_then(|j| Names::of(j, &inputs));
    let f = findings(
        &inputs,
        &result,
        py.as_ref(),
        judged.as_ref(),
        names.as_ref(),
    );
    if as_json {
        println!(
            "{}",
            to_json(&f, &inputs.facts, py.as_ref(), names.as_ref())
        );
    } else {
        print!("{}", human(&to_text(&f), color));
    }
    if f.count(Level::Problem) > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Inputs {
        /// A facts file's contents, with no configuration file anywhere.
        fn from_json_at_root(v: &Value) -> Result<Inputs, String> {
            Inputs::from_json(v, Path::new("/nonexistent-root"))
        }
    }

    /// The findings as (area, level, text, fix).
    fn rows(f: &Findings) -> Vec<(Area, Level, &str, Option<&str>)> {
        f.0.iter()
            .map(|x| (x.area, x.level, x.text.as_str(), x.fix.as_deref()))
            .collect()
    }

    #[test]
    fn nccl_variables_come_from_the_injected_inputs() {
        // Whatever this process's environment holds, the facts' `env` is
        // doctor's whole environment; variables other than NCCL_* are left out.
        let inputs = Inputs::from_json_at_root(&json!({
            "interfaces": [{"name": "eth0", "addrs": [{"ip": "10.0.0.5", "prefix": 24, "routed": true}]}],
            "env": {"NCCL_SOCKET_IFNAME": "ib", "PATH": "/bin", "NCCL_DEBUG": "INFO"},
        }))
        .unwrap();
        let var = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            inputs.settings.environment(),
            [var("NCCL_DEBUG", "INFO"), var("NCCL_SOCKET_IFNAME", "ib")]
        );
        let mut f = Findings::default();
        variables::check(&mut f, &inputs.settings, None);
        network::check(&mut f, &inputs.facts.interfaces, &inputs.settings, None);
        assert_eq!(
            rows(&f),
            [
                (
                    Area::Variables,
                    Level::Note,
                    "NCCL_DEBUG=INFO (NCCL's log level: VERSION, WARN, INFO or TRACE)",
                    None
                ),
                (
                    Area::Variables,
                    Level::Note,
                    "NCCL_SOCKET_IFNAME=ib (the network interfaces NCCL may use: prefixes, ^ to exclude, = for exact names)",
                    None
                ),
                (
                    Area::Network,
                    Level::Ok,
                    "interfaces: eth0 10.0.0.5/24",
                    None
                ),
                (
                    Area::Network,
                    Level::Problem,
                    "NCCL would find no interface: NCCL_SOCKET_IFNAME=ib matches none of the interfaces NCCL lists (eth0)",
                    Some("NCCL fails with `no socket interface found`: set NCCL_SOCKET_IFNAME to one of eth0")
                ),
            ]
        );
    }

    #[test]
    fn an_empty_injected_environment_is_nccl_s_defaults() {
        let inputs = Inputs::from_json_at_root(&json!({"env": {}})).unwrap();
        assert!(inputs.settings.settings.is_empty());
        let mut f = Findings::default();
        variables::check(&mut f, &inputs.settings, None);
        assert_eq!(
            rows(&f),
            [
                (
                    Area::Variables,
                    Level::Ok,
                    "no NCCL_* variables are set: NCCL uses its defaults",
                    None
                ),
                (
                    Area::Variables,
                    Level::Note,
                    "NCCL_DEBUG is unset, so NCCL says little when it fails",
                    Some("NCCL_DEBUG=WARN (or INFO) when something goes wrong")
                ),
            ]
        );
        let bad = Inputs::from_json_at_root(&json!({"env": {"NCCL_DEBUG": 1}}));
        assert_eq!(bad.err().unwrap(), "\"env\": NCCL_DEBUG is not a string");
        let bad = Inputs::from_json_at_root(&json!({"env": ["NCCL_DEBUG=WARN"]}));
        assert_eq!(bad.err().unwrap(), "\"env\" is not an object of variables");
    }

    #[test]
    fn values_no_setting_explains_came_from_an_env_plugin() {
        let inputs = Inputs::from_json_at_root(&json!({"env": {"NCCL_DEBUG": "WARN"}})).unwrap();
        let p = |key: &str, value: &str, default: &str, set_by: &str| crate::facts::params::Param {
            key: key.into(),
            value: value.into(),
            default: default.into(),
            set_by: set_by.into(),
            accepted: String::new(),
        };
        let names = Names {
            version: "2.32.3".into(),
            names: vec!["NCCL_DEBUG".into()],
            params: crate::facts::params::Asked::Params(vec![
                p("NCCL_DEBUG", "WARN", "<unknown>", "EnvPlugin"),
                p("NCCL_SET_THREAD_NAME", "TRUE", "FALSE", "EnvPlugin"),
                p("NCCL_PARAM_DUMP_ALL", "TRUE", "FALSE", "EnvPlugin"),
                p("NCCL_NO_CACHE", "<unset>", "<unset>", "Default"),
            ]),
        };
        let mut f = Findings::default();
        variables::check(&mut f, &inputs.settings, Some(&names));
        assert_eq!(
            rows(&f),
            [
                (
                    Area::Variables,
                    Level::Note,
                    "NCCL_DEBUG=WARN (NCCL's log level: VERSION, WARN, INFO or TRACE; default: none)",
                    None
                ),
                (
                    Area::Variables,
                    Level::Note,
                    "NCCL 2.32.3 uses NCCL_SET_THREAD_NAME=TRUE (default: FALSE), though no variable or configuration file nccl-find read sets it: an env plugin (NCCL_ENV_PLUGIN) did",
                    None
                ),
            ]
        );
        // A library that has the API but could not be asked says so, and
        // what the names were checked against instead.
        let names = Names {
            params: crate::facts::params::Asked::Failed(
                "loading it failed (exit status: 1)".into(),
            ),
            ..names
        };
        let mut f = Findings::default();
        variables::check(&mut f, &inputs.settings, Some(&names));
        assert_eq!(
            rows(&f)[1].2,
            "NCCL 2.32.3 could not be asked for its parameters (loading it failed (exit status: 1)): names were checked against the NCCL_* strings in its library and nccl-find's own list"
        );
    }

    #[test]
    fn each_check_has_a_unique_id_and_says_what_it_reads_and_concludes() {
        let mut ids: Vec<&str> = CHECKS.iter().map(|c| c.id).collect();
        assert!(CHECKS
            .iter()
            .all(|c| !c.reads.is_empty() && !c.concludes.is_empty()));
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), CHECKS.len());
        // docs/doctor.md lists every check by its id.
        let doc = include_str!("../../docs/doctor.md");
        for c in CHECKS {
            assert!(
                doc.contains(&format!("| `{}` |", c.id)),
                "docs/doctor.md lacks the check {}",
                c.id
            );
        }
    }
}
