//! doctor's `variables` check: what each `NCCL_*` setting does, judged by
//! the rules of the NCCL that will run; misspellings, rejected values.

use std::path::PathBuf;

use nccl_find::{Nccl, Version};
use serde_json::{json, Value};

use super::packages::PythonReport;
use super::{Area, Findings, Inputs, Level};
use crate::facts::params;
use crate::rules::settings::{is_nccls, InForce, Setting};
use crate::rules::{knobs, ras};

/// The names the NCCL that runs can read: the `NCCL_*` strings of its
/// library (`None` where there is no library to read), with its version,
/// and its parameters where it can list them (2.30.3 and newer).
pub(super) struct Names {
    pub(super) version: String,
    pub(super) names: Vec<String>,
    pub(super) params: params::Asked,
}

/// The NCCL whose rules doctor judges the settings by (variables,
/// interface choice, parameters): the library a Python package maps where
/// one does (`--python`, or the environment in use), since that is the NCCL
/// the job runs; else the one selected.
pub(super) struct Judged {
    pub(super) library: PathBuf,
    pub(super) version: Version,
    /// In words: `torch 2.11.0's NCCL 2.28.9`, or `NCCL 2.32.3`.
    pub(super) who: String,
    /// Where it is not the selected NCCL: the selected one, in words.
    pub(super) not: Option<String>,
}

impl Judged {
    pub(super) fn of(
        result: &Result<Nccl, nccl_find::Error>,
        py: Option<&PythonReport>,
    ) -> Option<Judged> {
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
                    who: format!("{name}'s NCCL {version} ({})", library.display()),
                    library,
                    version,
                    not,
                })
            }
            (None, Some(n)) => {
                let v = &n.library_version;
                Some(Judged {
                    library: n.library_real.clone(),
                    version: Version::new(v.major, v.minor, v.patch, ""),
                    who: format!("NCCL {v}"),
                    not: None,
                })
            }
            (None, None) => None,
        }
    }
}

/// `2.28.9` as a release.
fn parse_version(text: &str) -> Option<Version> {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
    Some(Version::new(
        parts.next()??,
        parts.next()??,
        parts.next()??,
        "",
    ))
}

/// Where a package maps another NCCL than the one selected, one note says
/// that the settings are judged for the NCCL the package will run.
pub(super) fn check_judged(f: &mut Findings, judged: Option<&Judged>) {
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
    pub(super) fn of(j: &Judged, inputs: &Inputs) -> Option<Names> {
        let names = nccl_find::internal::rodata_names(&j.library, "NCCL_").ok()?;
        // A library with no such strings (a stand-in) teaches nothing.
        (names.len() > 10).then(|| {
            Names {
            version: j.version.to_string(),
            names,
            params: match (
                inputs.env_from_file,
                inputs.settings.unread.iter().find(|u| u.hangs),
            ) {
                _ if inputs.other_root => params::Asked::Withheld(
                    "its library lies in another system's root (--root), which is judged, never \
                     run"
                        .into(),
                ),
                (true, _) => params::Asked::Withheld(
                    "the variables come from a facts file, and nothing from a facts file reaches a \
                     process that loads code"
                        .into(),
                ),
                (false, Some(file)) => params::Asked::Withheld(format!(
                    "NCCL's configuration file {}, and NCCL would wait on it",
                    file.text
                )),
                (false, None) => params::ask(&j.library, &inputs.settings.environment()),
            },
        }
        })
    }

    /// The parameter `key`, where the library listed it.
    pub(super) fn param(&self, key: &str) -> Option<&params::Param> {
        match &self.params {
            params::Asked::Params(p) => p.iter().find(|p| p.key == key),
            _ => None,
        }
    }

    pub(super) fn knows(&self, key: &str) -> bool {
        self.names.iter().any(|x| x == key) || self.param(key).is_some()
    }

    /// The known name nearest to `name` (fewest edits, at most 3).
    pub(super) fn nearest(&self, name: &str) -> Option<&str> {
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
    pub(super) fn to_json(&self) -> Value {
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
pub(super) fn param_api_release() -> &'static str {
    nccl_find::explain::introduced_in("ncclParamDumpAll").unwrap_or("2.30")
}

/// Levenshtein distance, for names of a few dozen letters.
pub(super) fn edits(a: &str, b: &str) -> usize {
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

/// The variables area: a finding per setting in force, then what the
/// library says beyond them, the files that could not be read, and
/// `NCCL_DEBUG` where it is unset.
pub(super) fn check(f: &mut Findings, settings: &InForce, names: Option<&Names>) {
    let mut any = false;
    for s in settings.settings.iter().filter(|s| is_nccls(&s.name)) {
        any = true;
        setting(f, s, names);
    }
    if let Some(n) = names {
        library_values(f, settings, n, any);
    }
    for u in &settings.unread {
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
    if settings.get("NCCL_DEBUG").is_none() {
        f.add(
            Area::Variables,
            Level::Note,
            "NCCL_DEBUG is unset, so NCCL says little when it fails",
            Some("NCCL_DEBUG=WARN (or INFO) when something goes wrong".into()),
        );
    }
}

/// One setting's finding: what it does, what the NCCL that runs reads of
/// it, or that it reads nothing of it.
fn setting(f: &mut Findings, s: &Setting, names: Option<&Names>) {
    let (k, v) = (&s.name, &s.value);
    let set = s.shown();
    if let Some(note) = ras_note(k, v, &set) {
        f.add(Area::Variables, Level::Note, note, None);
        return;
    }
    if k == "NCCL_VERSION" {
        f.add(
            Area::Variables,
            Level::Note,
            format!(
                "{set} is set (NVIDIA's CUDA images set it for apt); NCCL and nccl-find ignore it"
            ),
            None,
        );
        return;
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
            return;
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
    if let Some(what) = knobs::what(k) {
        f.add(
            Area::Variables,
            Level::Note,
            format!("{set} ({what}{uses})"),
            None,
        );
        return;
    }
    what_nccl_reads(f, &set, k, names, param.is_some(), &uses);
}

/// A setting that is not one of the knobs: what the NCCL that runs reads
/// of it (`listed`: it listed it as a parameter), or that it holds no
/// such name.
fn what_nccl_reads(
    f: &mut Findings,
    set: &str,
    k: &str,
    names: Option<&Names>,
    listed: bool,
    uses: &str,
) {
    let n = match names {
        Some(n) => n,
        None => {
            f.add(
                Area::Variables,
                Level::Note,
                format!("{set} is not a variable nccl-find knows"),
                Some("check its spelling against NCCL's documentation".into()),
            );
            return;
        }
    };
    if listed {
        f.add(
            Area::Variables,
            Level::Note,
            format!("{set} (a parameter NCCL {} lists{uses})", n.version),
            None,
        );
    } else if n.knows(k) {
        f.add(
            Area::Variables,
            Level::Note,
            format!("{set} (a setting NCCL {} reads)", n.version),
            None,
        );
    } else {
        f.add(
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
        );
    }
}

/// A RAS service that has crashed jobs by itself, with no question asked
/// (the release of the NCCL the job will run; not where it is turned off).
pub(super) fn check_ras(f: &mut Findings, settings: &InForce, judged: Option<&Judged>) {
    let Some(j) = judged else { return };
    if ras::turned_off(settings.value("NCCL_RAS_ENABLE")) {
        return;
    }
    let hs = ras::crashes_by_itself(&ras::Releases::Exactly(j.version.clone()));
    if hs.is_empty() {
        return;
    }
    f.add(
        Area::Variables,
        Level::Note,
        format!(
            "{}: its RAS service has crashed jobs by itself: {}",
            j.who,
            ras::cited(&hs)
        ),
        Some(
            "where jobs die in RAS code, set NCCL_RAS_ENABLE=0 (then `nccl-find ras` cannot ask a \
             job that hangs), or run a newer NCCL"
                .into(),
        ),
    );
}

/// What `nccl-find ras` needs of NCCL's RAS service, said once where a
/// setting takes it away: a service turned off, or one that listens
/// beyond this host.
fn ras_note(k: &str, v: &str, set: &str) -> Option<String> {
    match k {
        "NCCL_RAS_ENABLE" if ras::turned_off(Some(v)) => Some(format!(
            "{set} turns NCCL's RAS service off: `nccl-find ras` cannot ask a job that hangs which \
             rank to look at"
        )),
        "NCCL_RAS_ADDR" if ras::listens_beyond_this_host(v) => Some(format!(
            "{set}: NCCL's RAS service listens beyond this host, and whoever reaches it can read the \
             job's status; keep it on localhost (NCCL_RAS_ADDR=localhost:28028) unless you ask from \
             another node"
        )),
        _ => None,
    }
}

/// NCCL's words for what a parameter accepts, after "takes":
/// `one of A, B`, `a comma-separated list of A, B`, `boolean: 1/T/TRUE …`.
pub(super) fn takes(accepted: &str) -> String {
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
pub(super) fn default_of(p: &params::Param) -> &str {
    match p.default.as_str() {
        "<unset>" | "<unknown>" | "" => "none",
        d => d,
    }
}

/// What the library said beyond the settings nccl-find read: values that
/// something else set (an env plugin), and where the names came from when
/// it could not be asked.
fn library_values(f: &mut Findings, settings: &InForce, n: &Names, any: bool) {
    match &n.params {
        params::Asked::Params(ps) => {
            for p in ps {
                let read = settings.get(&p.key).is_some();
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
