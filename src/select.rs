//! Step 3 of the probe: **select**. One winner; every loser with its
//! reason; installs that differ from the winner flagged as conflicts.
//!
//! Rules, in order:
//! 1. An install named by an NCCL variable (`NCCL_INCLUDE_DIR`+`NCCL_LIB_DIR`,
//!    then `NCCL_HOME`, `NCCL_ROOT`, `NCCL_DIR`) wins outright. If it cannot
//!    be used, or misses the version requirement, that is an error: there
//!    is no silent fallback to another install.
//! 2. Otherwise the first usable install in search order that meets the
//!    requirement wins. Each source lists its places in a fixed order
//!    (sorted, newest version first), so the outcome never depends on the
//!    order a directory happens to be listed in.

use std::ops::Bound;
use std::path::PathBuf;

use crate::context::Ctx;
use crate::inspect::{self, Candidate, Status};
use crate::problem::{ErrorKind, Problem};
use crate::req::VersionReq;
use crate::sources::Site;

use crate::version::{lenient_version, or_empty};

/// A version requirement, as given to `Config`.
#[derive(Debug, Clone)]
pub(crate) enum Requirement {
    AtLeast(String),
    Exactly(String),
    Range(Bound<String>, Bound<String>),
    Semver(String),
}

/// `2.18` as `2.18.0`, for a requirement's text.
fn dotted(v: &str) -> Result<String, ErrorKind> {
    match lenient_version(v) {
        Ok((x, y, z)) => Ok(format!("{x}.{y}.{z}")),
        Err(why) => Err(invalid(v, why)),
    }
}

impl Requirement {
    /// The requirement as a semver requirement, with its text (`>=2.18.0`);
    /// `None` for a range open at both ends.
    pub(crate) fn parse(&self) -> Result<Option<(VersionReq, String)>, ErrorKind> {
        let text = match self {
            Requirement::AtLeast(v) => format!(">={}", dotted(v)?),
            // Cargo's `=`: the parts given must match, the rest are free
            // (`=2.21` is any 2.21.x), as `version_req("=2.21")` reads it.
            Requirement::Exactly(v) => {
                dotted(v)?;
                format!("={}", v.trim())
            }
            Requirement::Range(lo, hi) => {
                let mut parts = Vec::new();
                for (b, inc, exc) in [(lo, ">=", ">"), (hi, "<=", "<")] {
                    match b {
                        Bound::Included(v) => parts.push(format!("{inc}{}", dotted(v)?)),
                        Bound::Excluded(v) => parts.push(format!("{exc}{}", dotted(v)?)),
                        Bound::Unbounded => {}
                    }
                }
                if parts.is_empty() {
                    return Ok(None);
                }
                parts.join(", ")
            }
            Requirement::Semver(r) => r.clone(),
        };
        match VersionReq::parse(&text) {
            Ok(req) => Ok(Some((req, text))),
            Err(why) => Err(invalid(&text, why)),
        }
    }
}

fn invalid(requirement: &str, why: String) -> ErrorKind {
    ErrorKind::InvalidRequirement {
        requirement: requirement.to_string(),
        why,
    }
}

/// Steps 1 and 2: runs the sources in order and inspects every site each
/// proposes, keeping one candidate per install. In a build script the
/// search ends after the first source that names an install explicitly,
/// or that yields an install that is usable and meets the requirement: the
/// sources after it cannot change the answer, so their variables are not
/// read (each read would be one more rerun trigger). The command
/// (`--print`, `doctor`) runs them all, to show every install.
pub(crate) fn search(
    ctx: &Ctx,
    req: Option<&(VersionReq, String)>,
) -> Result<Vec<Candidate>, ErrorKind> {
    let mut found = Found {
        cands: Vec::new(),
        keys: Vec::new(),
    };
    for source in crate::sources::SOURCES {
        let sites = (source.search)(ctx)?;
        let mut explicit = false;
        for site in sites {
            explicit |= site.explicit;
            found.add(ctx, site);
        }
        if ctx.build_script && (explicit || found.any_meets(req)) {
            break;
        }
    }
    Ok(found.finish(ctx))
}

/// The candidates so far, one per install, with their files resolved.
struct Found {
    cands: Vec<Candidate>,
    /// Each kept candidate's header and library, links resolved once: a
    /// thousand Spack installs are compared pairwise, by bytes, not by
    /// resolving both paths again for each pair.
    keys: Vec<Files>,
}

impl Found {
    /// Inspects a site: the same files found again are noted on the first
    /// ("also via"); a path with a line break rejects its install.
    fn add(&mut self, ctx: &Ctx, site: Site) {
        let Some(mut c) = inspect::inspect_site(ctx, site) else {
            return;
        };
        // Only a build script prints paths as directives: the command
        // shows an install whose path is not plain text (marked), and its
        // `--env` keeps the bytes. A line break no one can carry.
        let refused = match c.line_break() {
            Some(p) => Some(Problem::LineBreak {
                path: p.to_path_buf(),
            }),
            None if ctx.build_script => c.build_script_refuses(),
            None => None,
        };
        if let Some(problem) = refused {
            if !c.explicit {
                ctx.note(format!("an install was skipped: {problem}"));
            }
            c.status = Status::Rejected(problem);
        }
        let key = Files::of(&c);
        if !c.explicit && c.lib_dir.is_none() && header_seen(&self.keys, &key) {
            // A shared include dir (/usr/include) seen again beside a
            // library dir with no NCCL: nothing new.
            return;
        }
        match same_install_in(&self.keys, &key) {
            Some(i) => self.cands[i].also_found_by.push(c.origin),
            None => {
                self.cands.push(c);
                self.keys.push(key);
            }
        }
    }

    /// Whether an install found so far is usable and meets the requirement.
    fn any_meets(&self, req: Option<&(VersionReq, String)>) -> bool {
        for c in &self.cands {
            if c.is_usable() && meets(c, req) {
                return true;
            }
        }
        false
    }

    /// The candidates, an explicit install shadowed by another warned about.
    fn finish(self, ctx: &Ctx) -> Vec<Candidate> {
        let cands = self.cands;
        for c in cands.iter().skip(1) {
            if !c.explicit {
                continue;
            }
            if let Some(p) = c.problem() {
                ctx.warn(format!(
                    "{} is set but shadowed by {}; it is ignored. Note: {p}",
                    c.origin.variable.as_deref().unwrap_or(""),
                    cands[0].origin.variable.as_deref().unwrap_or("")
                ));
            }
        }
        cands
    }
}

/// A candidate's header and library, links resolved (a path that cannot
/// be resolved stands for itself).
struct Files {
    header: Option<std::ffi::OsString>,
    library: Option<std::ffi::OsString>,
}

impl Files {
    fn of(c: &Candidate) -> Files {
        Files {
            header: canonical(&c.header),
            library: canonical(&c.library_real),
        }
    }
}

/// Whether an earlier candidate has the same header file.
fn header_seen(keys: &[Files], c: &Files) -> bool {
    for o in keys {
        if o.header == c.header {
            return true;
        }
    }
    false
}

/// The earlier candidate that is the same install: the same header and
/// library files once resolved.
fn same_install_in(keys: &[Files], b: &Files) -> Option<usize> {
    for (i, a) in keys.iter().enumerate() {
        if (a.header.is_some() || a.library.is_some())
            && a.header == b.header
            && a.library == b.library
        {
            return Some(i);
        }
    }
    None
}

fn canonical(p: &Option<PathBuf>) -> Option<std::ffi::OsString> {
    let p = p.as_ref()?;
    match std::fs::canonicalize(p) {
        Ok(real) => Some(real.into_os_string()),
        Err(_) => Some(p.clone().into_os_string()),
    }
}

/// Picks the winner: see the module's rules.
pub(crate) fn select(
    cands: &mut [Candidate],
    req: Option<&(VersionReq, String)>,
) -> Result<usize, ErrorKind> {
    let explicit = match cands.first() {
        Some(c) => c.explicit,
        None => false,
    };
    let winner = if explicit {
        explicit_winner(cands, req)?
    } else {
        first_usable(cands, req)?
    };
    cands[winner].status = Status::Selected;
    mark_losers(cands, winner);
    Ok(winner)
}

/// Whether a candidate meets the requirement (one without a version, or no
/// requirement, does).
fn meets(c: &Candidate, req: Option<&(VersionReq, String)>) -> bool {
    match (req, c.version()) {
        (Some((r, _)), Some(v)) => r.matches(v.major.into(), v.minor.into(), v.patch.into()),
        _ => true,
    }
}

fn requirement_text(req: Option<&(VersionReq, String)>) -> String {
    match req {
        Some((_, text)) => text.clone(),
        None => String::new(),
    }
}

fn unsatisfied(c: &Candidate, req: Option<&(VersionReq, String)>) -> Problem {
    Problem::Unsatisfied {
        version: c
            .version()
            .cloned()
            .expect("usable candidates have a version"),
        requirement: requirement_text(req),
    }
}

/// Rule 1: the explicitly named install, or an error without a fallback
/// (every other usable install is marked as not considered).
fn explicit_winner(
    cands: &mut [Candidate],
    req: Option<&(VersionReq, String)>,
) -> Result<usize, ErrorKind> {
    let variable = cands[0].origin.variable.clone().unwrap_or_default();
    let problem = match &cands[0].status {
        Status::Rejected(problem) => Some(problem.clone()),
        _ if !meets(&cands[0], req) => {
            let problem = unsatisfied(&cands[0], req);
            cands[0].status = Status::Rejected(problem.clone());
            Some(problem)
        }
        _ => None,
    };
    let Some(problem) = problem else {
        return Ok(0);
    };
    // Nothing is selected: the other usable installs were not
    // considered, since an explicit variable has no fallback.
    let name = variable.split('=').next().unwrap_or("").to_string();
    for c in cands.iter_mut().skip(1) {
        if !c.is_usable() {
            continue;
        }
        c.status = Status::Lost(format!(
            "not considered: {name} is set, and an explicitly named install has no fallback"
        ));
    }
    Err(ErrorKind::Explicit { variable, problem })
}

/// Rule 2: the first usable install that meets the requirement; those
/// before it that miss it are rejected. None: why, in the most telling
/// words (none satisfies, only NCCL 1, not found).
fn first_usable(
    cands: &mut [Candidate],
    req: Option<&(VersionReq, String)>,
) -> Result<usize, ErrorKind> {
    for (i, c) in cands.iter_mut().enumerate() {
        if c.is_usable() && !meets(c, req) {
            c.status = Status::Rejected(unsatisfied(c, req));
        } else if c.is_usable() {
            return Ok(i);
        }
    }
    let (mut unsatisfied, mut all_nccl1) = (false, true);
    for c in cands.iter() {
        let problem = c.problem();
        unsatisfied |= matches!(problem, Some(Problem::Unsatisfied { .. }));
        all_nccl1 &= matches!(problem, Some(p) if p.is_nccl1());
    }
    if unsatisfied {
        return Err(ErrorKind::NoneSatisfies {
            requirement: requirement_text(req),
        });
    }
    if !cands.is_empty() && all_nccl1 {
        let files = cands
            .iter()
            .filter_map(|c| match c.problem() {
                Some(Problem::Nccl1 { file, .. }) => Some(file.clone()),
                _ => None,
            })
            .collect();
        return Err(ErrorKind::OnlyNccl1 { files });
    }
    Err(ErrorKind::NotFound)
}

/// Every other usable install lost: why, and whether it conflicts with the
/// winner (another library version the loader might find first).
fn mark_losers(cands: &mut [Candidate], winner: usize) {
    let (w_origin, w_explicit) = (cands[winner].origin.clone(), cands[winner].explicit);
    let w_version = cands[winner].library_version.clone();
    for (i, c) in cands.iter_mut().enumerate() {
        if i == winner || !c.is_usable() {
            continue;
        }
        let why = if w_explicit {
            format!(
                "{} was set, and an explicitly named install wins outright",
                w_origin.variable.as_deref().unwrap_or("an NCCL variable")
            )
        } else if c.origin.source == w_origin.source {
            // (Every usable install before the winner was rejected for the
            // requirement: the losers all come after it.)
            format!("{} came first within {}", w_origin.detail, w_origin.source)
        } else {
            format!(
                "{} comes earlier in the search order than {}",
                w_origin.source, c.origin.source
            )
        };
        c.status = Status::Lost(why);
        if c.library_version.is_some() && c.library_version != w_version {
            c.conflict = Some(format!(
                "this is NCCL {}, the selected install is NCCL {}: if the run-time loader finds this one \
                 first, expect `undefined symbol` errors. Keep one on the loader's path.",
                or_empty(&c.library_version),
                or_empty(&w_version)
            ));
        }
    }
}
