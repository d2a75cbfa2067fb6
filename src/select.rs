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

use crate::error::ErrorKind;
use crate::inspect::{Candidate, Problem, Status};

pub(crate) fn select(
    cands: &mut [Candidate],
    req: Option<&(semver::VersionReq, String)>,
) -> Result<usize, ErrorKind> {
    let meets = |c: &Candidate| match (req, c.version()) {
        (Some((r, _)), Some(v)) => r.matches(&v.semver()),
        _ => true,
    };
    let unsatisfied = |c: &Candidate| Problem::Unsatisfied {
        version: c
            .version()
            .cloned()
            .expect("usable candidates have a version"),
        requirement: req.map(|r| r.1.clone()).unwrap_or_default(),
    };
    let winner = if cands.first().is_some_and(|c| c.explicit) {
        let variable = cands[0].origin.variable.clone().unwrap_or_default();
        let problem = match &cands[0].status {
            Status::Rejected(problem) => Some(problem.clone()),
            _ if !meets(&cands[0]) => {
                let problem = unsatisfied(&cands[0]);
                cands[0].status = Status::Rejected(problem.clone());
                Some(problem)
            }
            _ => None,
        };
        if let Some(problem) = problem {
            // Nothing is selected: the other usable installs were not
            // considered, since an explicit variable has no fallback.
            let name = variable.split('=').next().unwrap_or("").to_string();
            for c in cands.iter_mut().skip(1).filter(|c| c.is_usable()) {
                c.status = Status::Lost(format!(
                    "not considered: {name} is set, and an explicitly named install has no fallback"
                ));
            }
            return Err(ErrorKind::Explicit { variable, problem });
        }
        0
    } else {
        let mut found = None;
        for (i, c) in cands.iter_mut().enumerate() {
            if c.is_usable() && !meets(c) {
                c.status = Status::Rejected(unsatisfied(c));
            } else if c.is_usable() {
                found = Some(i);
                break;
            }
        }
        match found {
            Some(i) => i,
            None if cands
                .iter()
                .any(|c| matches!(c.problem(), Some(Problem::Unsatisfied { .. }))) =>
            {
                return Err(ErrorKind::NoneSatisfies {
                    requirement: req.map(|r| r.1.clone()).unwrap_or_default(),
                })
            }
            None if !cands.is_empty()
                && cands
                    .iter()
                    .all(|c| c.problem().is_some_and(Problem::is_nccl1)) =>
            {
                return Err(ErrorKind::OnlyNccl1)
            }
            None => return Err(ErrorKind::NotFound),
        }
    };
    cands[winner].status = Status::Selected;
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
        } else if i < winner {
            "it does not meet the version requirement".to_string()
        } else if c.origin.source == w_origin.source {
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
                c.library_version.as_ref().map(ToString::to_string).unwrap_or_default(),
                w_version.as_ref().map(ToString::to_string).unwrap_or_default()
            ));
        }
    }
    Ok(winner)
}
