//! `nccl-find doctor`: what will go wrong when NCCL runs, each finding with
//! its fix. Problems make the exit status 1; notes do not.

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nccl_find::Verdict;
use nccl_find::{Config, Nccl, Report};
use serde_json::{json, Value};

use crate::host::Facts;
use crate::python;

mod network;
pub(crate) use network::nccl_pick as nccl_interfaces;
mod params;
mod rdma;

pub(crate) use params::{child as params_child, CHILD_FLAG as PARAMS_CHILD_FLAG};

use crate::style::{human, When};
pub(crate) use rdma::sockets_despite_an_adapter;

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

/// NCCL's knobs and what setting them means.
const KNOBS: [(&str, &str); 14] = [
    (
        "NCCL_SOCKET_IFNAME",
        "the network interfaces NCCL may use: prefixes, ^ to exclude, = for exact names",
    ),
    ("NCCL_SOCKET_FAMILY", "AF_INET or AF_INET6 only"),
    (
        "NCCL_IB_DISABLE",
        "1 turns InfiniBand/RoCE off; traffic between nodes then goes over TCP sockets",
    ),
    ("NCCL_IB_HCA", "the InfiniBand adapters NCCL may use"),
    (
        "NCCL_P2P_DISABLE",
        "1 turns GPU peer-to-peer off; traffic between GPUs then goes through host memory, slowly",
    ),
    (
        "NCCL_SHM_DISABLE",
        "1 turns the shared-memory transport off",
    ),
    ("NCCL_NET_GDR_LEVEL", "when GPUDirect RDMA is used"),
    (
        "NCCL_DEBUG",
        "NCCL's log level: VERSION, WARN, INFO or TRACE",
    ),
    ("NCCL_DEBUG_SUBSYS", "which subsystems NCCL logs"),
    ("NCCL_DEBUG_FILE", "where NCCL's log goes"),
    (
        "NCCL_COMM_ID",
        "NCCL's own bootstrap listens at this ip:port",
    ),
    ("NCCL_NVLS_ENABLE", "NVLink SHARP (multicast) on or off"),
    ("NCCL_IB_GID_INDEX", "the RoCE GID index"),
    ("NCCL_ALGO", "forces the collective algorithms"),
];

/// The NCCL area: the install found (or why none was), and what will mislead
/// builds and the run-time loader.
fn check_nccl(f: &mut Findings, result: &Result<Nccl, nccl_find::Error>) {
    let report = check_selected(f, result);
    let nccl = result.as_ref().ok();
    check_pkg_config_files(f, report, nccl);
    check_other_installs(f, report);
    check_visible_copies(f, report);
    if let Some(n) = nccl {
        loader_verdict(f, n);
        check_cuda_headers(f, n);
    }
}

/// CUDA headers `nccl.h` includes and that are missing: builds that
/// compile it (C, C++, bindgen) fail; running needs none of them.
fn check_cuda_headers(f: &mut Findings, n: &Nccl) {
    if let Err(why) = &n.cuda_include_dirs {
        f.add(
            Area::Nccl,
            Level::Note,
            "builds that compile nccl.h (C, C++, bindgen) will fail: it includes CUDA headers \
             that are not here; running needs none of them",
            Some(why.clone()),
        );
    }
}

/// The install selected, or why there is none; returns the probe's report.
fn check_selected<'a>(f: &mut Findings, result: &'a Result<Nccl, nccl_find::Error>) -> &'a Report {
    match result {
        Ok(n) => {
            f.add(
                Area::Nccl,
                Level::Ok,
                format!(
                    "NCCL {}{} from {}; links {}",
                    n.version,
                    n.cuda_version
                        .map(|c| format!(" (CUDA {c})"))
                        .unwrap_or_default(),
                    n.origin,
                    n.library.display()
                ),
                None,
            );
            &n.report
        }
        Err(e) => {
            f.add(
                Area::Nccl,
                Level::Problem,
                e.headline(),
                Some(
                    "run `nccl-find --print` to see where it looked and how to install NCCL".into(),
                ),
            );
            e.report()
        }
    }
}

/// `nccl.pc` files whose prefix has no NCCL, which mislead C and CMake builds.
fn check_pkg_config_files(f: &mut Findings, report: &Report, nccl: Option<&Nccl>) {
    for pc in &report.misleading_pc {
        let real = match nccl {
            Some(n) => format!(
                " NCCL's files are in {} and {}.",
                n.include_paths
                    .first()
                    .map(|i| report.logical(i).display().to_string())
                    .unwrap_or_default(),
                report.logical(&n.lib_dir).display()
            ),
            None => String::new(),
        };
        f.add(
            Area::Nccl,
            Level::Problem,
            format!(
                "{} says prefix={} ({}), where there is no NCCL: C and CMake builds that ask \
                 `pkg-config --cflags --libs nccl` get wrong flags and fail.{real}",
                report.logical(&pc.file).display(),
                pc.prefix,
                pc.flags
            ),
            Some(match &pc.tree {
                Some(tree) => format!(
                    "the tree it sits in, {}, holds an NCCL (`pkg-config --define-prefix` finds it): \
                     NCCL_HOME={} uses it; or fix the prefix= line of that file",
                    report.logical(tree).display(),
                    report.logical(tree).display()
                ),
                None => "fix the prefix= line of that file, or build with `nccl-find --cflags --libs` \
                     (or `eval \"$(nccl-find --env)\"`) instead of pkg-config"
                    .into(),
            }),
        );
    }
}

/// Other installs that conflict with the selected one.
fn check_other_installs(f: &mut Findings, report: &Report) {
    for c in report.others().filter(|c| c.conflict.is_some()) {
        f.add(
            Area::Nccl,
            Level::Note,
            format!(
                "another NCCL {} is installed at {} ({})",
                c.version().map(|v| v.to_string()).unwrap_or_default(),
                report.logical(&c.place).display(),
                c.origin
            ),
            Some(
                "keep only one on the loader's path, or link with an rpath to the one you mean"
                    .into(),
            ),
        );
    }
}

/// Several versions of libnccl.so.2 visible to the run-time loader.
fn check_visible_copies(f: &mut Findings, report: &Report) {
    let visible = &report.loader.visible;
    let mut versions: Vec<String> = visible
        .iter()
        .filter_map(|v| v.version.as_ref().map(|v| v.to_string()))
        .collect();
    versions.sort();
    versions.dedup();
    if versions.len() > 1 {
        let list: Vec<String> = visible
            .iter()
            .map(|v| {
                format!(
                    "{} ({}, {})",
                    report.logical(&v.path).display(),
                    v.version.as_ref().map_or("?".into(), |v| v.to_string()),
                    v.via
                )
            })
            .collect();
        f.add(
            Area::Nccl,
            Level::Problem,
            format!(
                "several different libnccl.so.2 are visible to the loader: {}; the first wins",
                list.join(", ")
            ),
            Some("remove the stale ones, or put the one you mean first on LD_LIBRARY_PATH".into()),
        );
    }
}

/// The loader verdict: whether the run-time loader will load the selected
/// NCCL. (The library's `check/loader.rs` judges the same with other
/// thresholds; doctor is to take its verdict from there.)
fn loader_verdict(f: &mut Findings, n: &Nccl) {
    let report = &n.report;
    let fix = || {
        Some(format!(
            "put {} first on LD_LIBRARY_PATH, or use an rpath",
            n.lib_dir.display()
        ))
    };
    match report.loader.verdict(&n.library_real, &n.library_version) {
        Verdict::NoneFound => f.add(
            Area::Nccl,
            Level::Note,
            format!("the run-time loader finds no libnccl.so.2, so programs linked against {} need an rpath", n.library.display()),
            Some(format!(
                "LD_LIBRARY_PATH={} or nccl_find::emit_rpath_from_dep in the binary's build script",
                n.lib_dir.display()
            )),
        ),
        // A note: whether it fails depends on what a program needs; the
        // Python area says it for the packages that will run.
        Verdict::OtherOlder(p) => f.add(
            Area::Nccl,
            Level::Note,
            format!(
                "a program linked against the selected NCCL {} with no rpath of its own would map {} (NCCL {}): {}",
                n.library_version,
                report.logical(&p.path).display(),
                p.version.as_ref().map_or("?".into(), |v| v.to_string()),
                match &p.version {
                    Some(_) => "an older minor version, so it fails with `undefined symbol` if it uses what that lacks",
                    None => "its version cannot be read, so it fails with `undefined symbol` if that is older and lacks what it uses",
                }
            ),
            Some(format!(
                "nccl_find::emit_rpath_from_dep in the program's build script (a DT_RPATH wins over LD_LIBRARY_PATH), or put {} first on LD_LIBRARY_PATH",
                n.lib_dir.display()
            )),
        ),
        Verdict::OtherCompatible(p) => {
            let theirs = p.version.as_ref().map_or("?".into(), |v| v.to_string());
            let mine = &n.library_version;
            let why = match &p.version {
                Some(v) if (v.major, v.minor) == (mine.major, mine.minor) => format!(
                    "the same minor version ({}.{}) has the same API, so programs run, with {theirs}'s fixes",
                    mine.major, mine.minor
                ),
                _ => format!("{theirs} is newer, and NCCL runs programs built against older versions"),
            };
            f.add(
                Area::Nccl,
                Level::Note,
                format!(
                    "the run-time loader picks {} (NCCL {theirs}), not the selected NCCL {mine}: {why}",
                    report.logical(&p.path).display(),
                ),
                fix(),
            )
        }
        Verdict::OtherSameVersion(p) => f.add(
            Area::Nccl,
            Level::Note,
            format!(
                "the run-time loader picks {}, another copy of NCCL {}: it works, but it is not the file nccl-find inspected",
                report.logical(&p.path).display(),
                n.library_version
            ),
            fix(),
        ),
        _ => {}
    }
}

fn check_driver(f: &mut Findings, facts: &Facts, nccl: Option<&Nccl>) {
    let d = &facts.driver;
    let Some(v) = d.version else {
        f.add(
            Area::Driver,
            Level::Problem,
            format!(
                "no NVIDIA driver: libcuda.so.1 cannot be used ({}); NCCL cannot run here",
                d.error.as_deref().unwrap_or("not found")
            ),
            Some("install the NVIDIA driver; in a container, run it with the NVIDIA container toolkit (--gpus all)".into()),
        );
        return;
    };
    let cuda = nccl_find::CudaVersion::from_code(u32::try_from(v).unwrap_or(0));
    f.add(
        Area::Driver,
        Level::Ok,
        format!(
            "driver supports CUDA {cuda} ({}){}",
            d.libcuda.as_deref().unwrap_or("libcuda.so.1"),
            d.gpus
                .map(|g| format!("; {g} GPU{} visible", if g == 1 { "" } else { "s" }))
                .unwrap_or_default()
        ),
        None,
    );
    if let Some(e) = &d.error {
        f.add(
            Area::Driver,
            Level::Problem,
            format!("the driver does not start: {e}"),
            Some("check `nvidia-smi`, and that this process may use the GPU devices".into()),
        );
    } else if d.gpus == Some(0) {
        f.add(
            Area::Driver,
            Level::Problem,
            "the driver sees no GPU".to_string(),
            Some("check CUDA_VISIBLE_DEVICES and `nvidia-smi`".into()),
        );
    }
    if let Some(cu) = nccl.and_then(|n| n.cuda_version) {
        let major = cuda.major;
        if cuda.major < cu.major {
            f.add(
                Area::Driver,
                Level::Problem,
                format!("NCCL was built for CUDA {cu}, but the driver supports only CUDA {cuda}: NCCL fails with `unhandled cuda error`"),
                Some(format!("update the driver, or use an NCCL built for CUDA {major} (pip install nvidia-nccl-cu{major})")),
            );
        } else if cuda.major == cu.major && cuda.minor < cu.minor {
            f.add(
                Area::Driver,
                Level::Note,
                format!("NCCL was built for CUDA {cu} and the driver supports CUDA {cuda}: this relies on CUDA's minor-version compatibility"),
                Some("update the driver if NCCL reports `unhandled cuda error`".into()),
            );
        }
    }
}

/// The names the NCCL that runs can read: the `NCCL_*` strings of its
/// library (`None` where there is no library to read), with its version,
/// and its parameters where it can list them (2.30.3 and newer).
struct Names {
    version: String,
    names: Vec<String>,
    params: params::Asked,
}

/// The NCCL whose rules doctor judges the settings by (variables,
/// interface choice, parameters): the library a Python package maps where
/// one does (`--python`, or the environment in use), since that is the NCCL
/// the job runs; else the one selected.
struct Judged {
    library: PathBuf,
    version: (u32, u32, u32),
    /// In words: `torch 2.11.0's NCCL 2.28.9`, or `NCCL 2.32.3`.
    who: String,
    /// Where it is not the selected NCCL: the selected one, in words.
    not: Option<String>,
}

impl Judged {
    fn of(result: &Result<Nccl, nccl_find::Error>, py: Option<&PythonReport>) -> Option<Judged> {
        let selected = result.as_ref().ok();
        let mapped = py.into_iter().flat_map(|p| &p.outcomes).find_map(|o| {
            let v = parse_version(o.nccl_version.as_deref()?)?;
            Some((o, o.library.clone()?, v))
        });
        match (mapped, selected) {
            (Some((o, library, version)), n) => {
                let name = match &o.version {
                    Some(v) => format!("{} {v}", o.package),
                    None => o.package.to_string(),
                };
                let not = n
                    .filter(|n| n.library_real != library)
                    .map(|n| format!("NCCL {} ({})", n.library_version, n.library_real.display()));
                Some(Judged {
                    who: format!(
                        "{name}'s NCCL {}.{}.{} ({})",
                        version.0,
                        version.1,
                        version.2,
                        library.display()
                    ),
                    library,
                    version,
                    not,
                })
            }
            (None, Some(n)) => {
                let v = &n.library_version;
                Some(Judged {
                    library: n.library_real.clone(),
                    version: (v.major, v.minor, v.patch),
                    who: format!("NCCL {v}"),
                    not: None,
                })
            }
            (None, None) => None,
        }
    }
}

/// `2.28.9` as numbers.
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// Where a package maps another NCCL than the one selected, one note says
/// that the settings are judged for the NCCL the package will run.
fn check_judged(f: &mut Findings, judged: Option<&Judged>) {
    if let Some(Judged {
        who,
        not: Some(not),
        ..
    }) = judged
    {
        f.add(
            Area::Python,
            Level::Note,
            format!(
                "the settings below are judged by the rules of {who}, the NCCL the job will run, \
                 not by the selected {not}"
            ),
            None,
        );
    }
}

impl Names {
    /// Reads the library's strings and asks it for its parameters, with
    /// the environment's `NCCL_*` variables; never with a facts file's,
    /// which are data about another machine.
    fn of(j: &Judged, inputs: &Inputs) -> Option<Names> {
        let names = nccl_find::internal::rodata_names(&j.library, "NCCL_").ok()?;
        let (a, b, c) = j.version;
        // A library with no such strings (a stand-in) teaches nothing.
        (names.len() > 10).then(|| {
            Names {
            version: format!("{a}.{b}.{c}"),
            names,
            params: match (
                inputs.env_from_file,
                inputs.unread.iter().find(|u| u.hangs),
            ) {
                (true, _) => params::Asked::Withheld(
                    "the variables come from a facts file, and nothing from a facts file reaches a \
                     process that loads code"
                        .into(),
                ),
                (false, Some(file)) => params::Asked::Withheld(format!(
                    "NCCL's configuration file {}, and NCCL would wait on it",
                    file.text
                )),
                (false, None) => params::ask(&j.library, &inputs.environment()),
            },
        }
        })
    }

    /// The parameter `key`, where the library listed it.
    fn param(&self, key: &str) -> Option<&params::Param> {
        match &self.params {
            params::Asked::Params(p) => p.iter().find(|p| p.key == key),
            _ => None,
        }
    }

    fn knows(&self, key: &str) -> bool {
        self.names.iter().any(|x| x == key) || self.param(key).is_some()
    }

    /// The known name nearest to `name` (fewest edits, at most 3).
    fn nearest(&self, name: &str) -> Option<&str> {
        let listed = match &self.params {
            params::Asked::Params(p) => p.iter().map(|p| p.key.as_str()).collect(),
            _ => Vec::new(),
        };
        let mut best: Option<(usize, &str)> = None;
        for n in self.names.iter().map(String::as_str).chain(listed) {
            let d = edits(name, n);
            if d <= 3 && best.is_none_or(|(b, _)| d < b) {
                best = Some((d, n));
            }
        }
        best.map(|(_, n)| n)
    }

    /// `doctor --json`'s `nccl_parameters`.
    fn to_json(&self) -> Value {
        match &self.params {
            params::Asked::NoApi => json!({"asked": false, "why": format!(
                "NCCL {} has no Parameter API (it came in {})", self.version, param_api_release())}),
            params::Asked::Failed(e) | params::Asked::Withheld(e) => {
                json!({"asked": false, "why": e})
            }
            params::Asked::Params(p) => json!({"asked": true, "parameters": p.iter()
                .filter(|p| p.key != params::DUMP_ALL)
                .map(|p| json!({"name": p.key, "value": p.value, "default": p.default,
                    "set_by": p.set_by, "accepted": p.accepted}))
                .collect::<Vec<_>>()}),
        }
    }
}

/// The first release with NCCL's Parameter API, from the catalog.
fn param_api_release() -> &'static str {
    nccl_find::internal::introduced_in("ncclParamDumpAll").unwrap_or("2.30")
}

/// Levenshtein distance, for names of a few dozen letters.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

// Long: one finding per setting, then the library's own values and where
// the names came from; the cases read best side by side.
fn check_env(f: &mut Findings, inputs: &Inputs, names: Option<&Names>) {
    let mut any = false;
    for s in &inputs.settings {
        let (k, v, source) = (&s.name, &s.value, &s.source);
        if !crate::settings::is_nccls(k) {
            continue;
        }
        any = true;
        // Where a configuration file set it, say which.
        let set = match source {
            crate::settings::Source::Environment => format!("{k}={v}"),
            crate::settings::Source::File(p) => format!("{k}={v} from {}", p.display()),
        };
        if k == "NCCL_VERSION" {
            f.add(Area::Variables, Level::Note, format!("{set} is set (NVIDIA's CUDA images set it for apt); NCCL and nccl-find ignore it"), None);
            continue;
        }
        // The parameter as NCCL listed it, with the library that listed it.
        let param = names.and_then(|n| n.param(k).map(|p| (n, p)));
        if let Some((n, p)) = param {
            if p.set_by == "Default" && k != params::DUMP_ALL {
                f.add(
                    Area::Variables,
                    Level::Problem,
                    format!(
                        "{set}: NCCL {} ignores this value and uses its default ({})",
                        n.version,
                        default_of(p)
                    ),
                    Some(format!("{k} takes {}", takes(&p.accepted))),
                );
                continue;
            }
        }
        // What NCCL will use, where it said and it is not the default.
        let uses = match param {
            Some((_, p)) if p.value == p.default => String::new(),
            Some((_, p)) if p.value.eq_ignore_ascii_case(v) => {
                format!("; default: {}", default_of(p))
            }
            Some((n, p)) => format!(
                "; NCCL {} reads {}, default: {}",
                n.version,
                p.value,
                default_of(p)
            ),
            None => String::new(),
        };
        match KNOBS.iter().find(|(n, _)| n == k) {
            Some((_, what)) => f.add(Area::Variables, Level::Note, format!("{set} ({what}{uses})"), None),
            None => match names {
                Some(n) if param.is_some() => f.add(Area::Variables, Level::Note,
                    format!("{set} (a parameter NCCL {} lists{uses})", n.version), None),
                Some(n) if n.knows(k) => f.add(Area::Variables, Level::Note,
                    format!("{set} (a setting NCCL {} reads)", n.version), None),
                Some(n) => f.add(
                    Area::Variables,
                    Level::Note,
                    format!(
                        "{set}: NCCL {}'s library holds no such name, so NCCL ignores it (a plugin may read it)",
                        n.version
                    ),
                    Some(match n.nearest(k) {
                        Some(near) => format!("did you mean {near}?"),
                        None => "check its spelling against NCCL's documentation".into(),
                    }),
                ),
                None => f.add(
                    Area::Variables,
                    Level::Note,
                    format!("{set} is not a variable nccl-find knows"),
                    Some("check its spelling against NCCL's documentation".into()),
                ),
            },
        }
    }
    if let Some(n) = names {
        library_values(f, inputs, n, any);
    }
    for u in &inputs.unread {
        let text = &u.text;
        if u.hangs {
            f.add(
                Area::Variables,
                Level::Problem,
                format!(
                    "NCCL's configuration file {text}: NCCL would hang reading it when it starts"
                ),
                Some("remove it, or point NCCL_CONF_FILE at a regular file".into()),
            );
        } else {
            f.add(
                Area::Variables,
                Level::Note,
                format!("NCCL's configuration file {text}: NCCL reads nothing from it"),
                None,
            );
        }
    }
    if !any {
        f.add(
            Area::Variables,
            Level::Ok,
            "no NCCL_* variables are set: NCCL uses its defaults",
            None,
        );
    }
    if !inputs.settings.iter().any(|s| s.name == "NCCL_DEBUG") {
        f.add(
            Area::Variables,
            Level::Note,
            "NCCL_DEBUG is unset, so NCCL says little when it fails",
            Some("NCCL_DEBUG=WARN (or INFO) when something goes wrong".into()),
        );
    }
}

/// NCCL's words for what a parameter accepts, after "takes":
/// `one of A, B`, `a comma-separated list of A, B`, `boolean: 1/T/TRUE …`.
fn takes(accepted: &str) -> String {
    let mut c = accepted.chars();
    let lower = match c.next() {
        Some(first) => first.to_lowercase().chain(c).collect(),
        None => "a value NCCL did not describe".to_string(),
    };
    if lower.starts_with("comma-separated") {
        format!("a {lower}")
    } else {
        lower
    }
}

/// A parameter's default, `none` where NCCL has no word for it.
fn default_of(p: &params::Param) -> &str {
    match p.default.as_str() {
        "<unset>" | "<unknown>" | "" => "none",
        d => d,
    }
}

/// What the library said beyond the settings nccl-find read: values that
/// something else set (an env plugin), and where the names came from when
/// it could not be asked.
fn library_values(f: &mut Findings, inputs: &Inputs, n: &Names, any: bool) {
    match &n.params {
        params::Asked::Params(ps) => {
            for p in ps {
                let read = inputs.settings.iter().any(|s| s.name == p.key);
                if !read && p.key != params::DUMP_ALL && p.value != p.default {
                    f.add(Area::Variables, Level::Note, format!(
                        "NCCL {} uses {}={} (default: {}), though no variable or configuration file nccl-find read sets it: an env plugin (NCCL_ENV_PLUGIN) did",
                        n.version, p.key, p.value, default_of(p)), None);
                }
            }
        }
        params::Asked::NoApi if any => f.add(Area::Variables, Level::Note, format!(
            "NCCL {} cannot list its parameters (that came in {}): names were checked against the NCCL_* strings in its library and nccl-find's own list",
            n.version, param_api_release()), None),
        params::Asked::Failed(e) if any => f.add(Area::Variables, Level::Note, format!(
            "NCCL {} could not be asked for its parameters ({e}): names were checked against the NCCL_* strings in its library and nccl-find's own list",
            n.version), None),
        params::Asked::Withheld(why) if any => f.add(Area::Variables, Level::Note, format!(
            "NCCL {} was not asked for its parameters ({why}): names were checked against the NCCL_* strings in its library and nccl-find's own list",
            n.version), None),
        _ => {}
    }
}

fn check_shm(f: &mut Findings, facts: &Facts) {
    const MIB: u64 = 1 << 20;
    match facts.shm_bytes {
        None => f.add(
            Area::Shm,
            Level::Problem,
            "/dev/shm is missing: NCCL's shared-memory transport fails",
            Some("mount a tmpfs on /dev/shm, or NCCL_SHM_DISABLE=1".into()),
        ),
        Some(b) if b < 256 * MIB => f.add(
            Area::Shm,
            Level::Problem,
            format!("/dev/shm is {} MiB (Docker's default is 64 MiB): NCCL fails with `unhandled system error` between GPUs", b / MIB),
            Some("docker run --shm-size=1g (or --ipc=host), or NCCL_SHM_DISABLE=1".into()),
        ),
        Some(b) => f.add(Area::Shm, Level::Ok, format!("/dev/shm is {} MiB", b / MIB), None),
    }
}

fn check_mpi(f: &mut Findings, facts: &Facts) {
    match facts.mpi.first() {
        Some(p) => f.add(
            Area::Mpi,
            Level::Ok,
            format!("MPI launcher found: {p}"),
            None,
        ),
        None => f.add(
            Area::Mpi,
            Level::Note,
            "no mpirun or mpiexec on PATH: needed only for MPI-launched jobs",
            Some(
                "apt install openmpi-bin libopenmpi-dev, if your framework launches through MPI"
                    .into(),
            ),
        ),
    }
}

/// Everything doctor reads besides the probe: the host's facts and the
/// `NCCL_*` variables. Both come from the machine, or from a facts file
/// (`--host-facts`) so that tests can fix them.
struct Inputs {
    facts: Facts,
    /// The `NCCL_*` settings in force, sorted by name: the environment's,
    /// then NCCL's configuration files', each with its source.
    settings: Vec<crate::settings::Setting>,
    /// Configuration files NCCL would read that could not be read.
    unread: Vec<crate::settings::Unread>,
    /// Whether the variables came from a facts file (its `env`): data
    /// about another machine, which never reaches a process that loads
    /// code (the child that asks NCCL does not run).
    env_from_file: bool,
    /// The variables and the root the settings were read from, and the
    /// rules they were read by, to read them again where the NCCL judged
    /// has others ([`Inputs::for_nccl`]).
    vars: Vec<(String, String)>,
    root: PathBuf,
    rules: crate::settings::ConfRules,
}

impl Inputs {
    /// Reads the machine and the process environment.
    fn gather(root: &Path) -> Inputs {
        Inputs::with_env(Facts::gather(), &crate::settings::process_env(), root)
    }

    /// The settings in force from the environment `env` and NCCL's
    /// configuration files, read under `root` by the newest NCCL's rules.
    fn with_env(facts: Facts, env: &[(String, String)], root: &Path) -> Inputs {
        let rules = crate::settings::ConfRules::of(None);
        let (settings, unread) = crate::settings::read(env, root, rules);
        Inputs {
            facts,
            settings,
            unread,
            env_from_file: false,
            vars: env.to_vec(),
            root: root.to_path_buf(),
            rules,
        }
    }

    /// The settings again, as NCCL `version` finds its configuration
    /// files (`NCCL_CONF_FILE` from 2.23, `~` from `HOME` from 2.30.3).
    /// Read again only where its rules differ from those already used.
    fn for_nccl(&mut self, version: Option<(u32, u32, u32)>) {
        let rules = crate::settings::ConfRules::of(version);
        if rules == self.rules {
            return;
        }
        self.rules = rules;
        let (settings, unread) = crate::settings::read(&self.vars, &self.root, rules);
        self.settings = settings;
        self.unread = unread;
    }

    /// The settings as `NAME`, `value` pairs, as the checks read them.
    fn env(&self) -> Vec<(String, String)> {
        self.settings
            .iter()
            .map(|s| (s.name.clone(), s.value.clone()))
            .collect()
    }

    /// The settings the environment holds (not the configuration files',
    /// which NCCL reads itself).
    fn environment(&self) -> Vec<(String, String)> {
        self.settings
            .iter()
            .filter(|s| s.source == crate::settings::Source::Environment)
            .map(|s| (s.name.clone(), s.value.clone()))
            .collect()
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
        let (env, from_file) = match v.get("env") {
            None | Some(Value::Null) => (crate::settings::process_env(), false),
            Some(vars) => (env_from_json(vars)?, true),
        };
        let mut inputs = Inputs::with_env(facts, &env, root);
        inputs.env_from_file = from_file;
        Ok(inputs)
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
        run: |f, s| check_nccl(f, s.result),
    },
    Check {
        id: "python",
        reads: "the Python environment in use and its packages",
        concludes: "which libnccl.so.2 each package will map, and an undefined symbol it will hit",
        run: |f, s| {
            if let Some(py) = s.py {
                check_python(f, py);
            }
            check_judged(f, s.judged);
        },
    },
    Check {
        id: "driver",
        reads: "libcuda's driver version and GPU count, the CUDA version NCCL was built for",
        concludes: "a driver too old for the NCCL found, no GPU",
        run: |f, s| check_driver(f, &s.inputs.facts, s.nccl()),
    },
    Check {
        id: "variables",
        reads: "NCCL_* in the environment and NCCL's configuration files; the library's names and parameters",
        concludes: "what each setting does, misspellings, values NCCL rejects, values an env plugin set",
        run: |f, s| check_env(f, s.inputs, s.names),
    },
    Check {
        id: "network",
        reads: "the interfaces, their addresses and routes; NCCL_SOCKET_IFNAME; the NCCL version's rule",
        concludes: "the interface NCCL will pick, a NCCL_SOCKET_IFNAME that matches nothing",
        run: |f, s| {
            let version = s.judged.map(|j| j.version);
            network::check(f, &s.inputs.facts.interfaces, &s.inputs.env(), version);
        },
    },
    Check {
        id: "lookups",
        reads: "the time a reverse name lookup of each of this host's addresses takes",
        concludes: "a resolver slow enough to stall torch's store, which looks up every client it accepts",
        run: |f, s| network::check_lookups(f, &s.inputs.facts.lookups),
    },
    Check {
        id: "rdma",
        reads: "RDMA adapters, ports, GIDs, device nodes, locked memory, plugins of every family",
        concludes: "what keeps NCCL off the fabric, the plugins NCCL will load",
        run: |f, s| rdma::check(f, &s.inputs.facts, &s.inputs.env(), s.names),
    },
    Check {
        id: "shm",
        reads: "the size of /dev/shm",
        concludes: "a /dev/shm too small for NCCL's shared-memory transport",
        run: |f, s| check_shm(f, &s.inputs.facts),
    },
    Check {
        id: "mpi",
        reads: "mpirun and mpiexec on PATH",
        concludes: "whether MPI-launched jobs can start",
        run: |f, s| check_mpi(f, &s.inputs.facts),
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

/// The Python environment and what each package that uses NCCL does there.
pub struct PythonReport {
    env: python::PyEnv,
    outcomes: Vec<python::Outcome>,
    orders: Vec<String>,
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

    fn to_json(&self) -> Value {
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
fn check_python(f: &mut Findings, py: &PythonReport) {
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
    let _ = writeln!(
        s,
        "\n{problems} problem{}, {notes} note{}.",
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
    inputs.for_nccl(judged.as_ref().map(|j| j.version));
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
            inputs.env(),
            [var("NCCL_DEBUG", "INFO"), var("NCCL_SOCKET_IFNAME", "ib")]
        );
        let mut f = Findings::default();
        check_env(&mut f, &inputs, None);
        network::check(&mut f, &inputs.facts.interfaces, &inputs.env(), None);
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
                    "NCCL would find no interface (NCCL_SOCKET_IFNAME=ib)",
                    Some("NCCL fails with `no socket interface found`: set NCCL_SOCKET_IFNAME to one of eth0")
                ),
            ]
        );
    }

    #[test]
    fn an_empty_injected_environment_is_nccl_s_defaults() {
        let inputs = Inputs::from_json_at_root(&json!({"env": {}})).unwrap();
        assert!(inputs.env().is_empty());
        let mut f = Findings::default();
        check_env(&mut f, &inputs, None);
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
        let p = |key: &str, value: &str, default: &str, set_by: &str| params::Param {
            key: key.into(),
            value: value.into(),
            default: default.into(),
            set_by: set_by.into(),
            accepted: String::new(),
        };
        let names = Names {
            version: "2.32.3".into(),
            names: vec!["NCCL_DEBUG".into()],
            params: params::Asked::Params(vec![
                p("NCCL_DEBUG", "WARN", "<unknown>", "EnvPlugin"),
                p("NCCL_SET_THREAD_NAME", "TRUE", "FALSE", "EnvPlugin"),
                p("NCCL_PARAM_DUMP_ALL", "TRUE", "FALSE", "EnvPlugin"),
                p("NCCL_NO_CACHE", "<unset>", "<unset>", "Default"),
            ]),
        };
        let mut f = Findings::default();
        check_env(&mut f, &inputs, Some(&names));
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
            params: params::Asked::Failed("loading it failed (exit status: 1)".into()),
            ..names
        };
        let mut f = Findings::default();
        check_env(&mut f, &inputs, Some(&names));
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
