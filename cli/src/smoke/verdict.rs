//! How a smoke run ends: the exit status and the last line, ranked in one
//! place. A cause found before NCCL (rank 0's ruling at the meeting, or
//! this process's own check) outranks the symptom it causes (NCCL's error,
//! a timeout, a rank gone), which follows it; NCCL's error comes with the
//! likely cause of its result.

use nccl_smoke::{self as smoke, Failure};

use super::args::Args;
use super::output::human;
use crate::rules::settings::InForce;

/// Exit status when there is no driver or no GPU.
pub(crate) const NO_GPU: u8 = 3;

/// What the end is judged from besides the run's result.
pub(super) struct Known<'a> {
    /// The first problem rank 0 found between the nodes, and how many.
    pub(super) between: Option<String>,
    /// A cause found before NCCL: it outranks what NCCL then says.
    pub(super) cause: Option<&'a str>,
    /// The likely cause and fix of an NCCL result code.
    pub(super) likely: &'a dyn Fn(i32) -> Likely,
}

/// The likely cause and fix of a failed NCCL call.
pub(super) enum Likely {
    /// A warning NCCL said whose cause is known: its words, the cause and
    /// the fix. The cause leads the last line.
    Said {
        words: String,
        means: String,
        fix: String,
    },
    /// The result code's usual cause, said after NCCL's error.
    Usual(String),
}

/// No more than NCCL's own words: where a cause found before outranks.
fn as_said(_rc: i32) -> Likely {
    Likely::Usual(String::new())
}

/// The end: the exit status, the last line, the largest size's bus
/// bandwidth (size, GB/s), and why `--min-busbw` failed the run.
pub(super) struct Ending {
    pub(super) code: u8,
    pub(super) verdict: String,
    pub(super) top: Option<(usize, f64)>,
    pub(super) floor: Option<String>,
}

/// The exit status and the verdict, with `--min-busbw`'s figure and why it
/// failed the run, where it did (or, on rank 0, a problem between nodes).
pub(super) fn ending(
    a: &Args,
    result: &Result<smoke::Summary, Failure>,
    wall: f64,
    known: &Known,
) -> Ending {
    let top = largest(result);
    let floor = a.min_busbw.and_then(|min| below_floor(&top, min));
    let why = floor.clone().or(known.between.clone());
    let code = match (exit_code(result), &why) {
        (0, Some(_)) => 1,
        (c, _) => c,
    };
    let ok = result.as_ref().is_ok_and(|s| s.ok);
    let (code, verdict) = match (known.cause, &why) {
        // NCCL ran anyway and failed, or nothing ran that could show the
        // cause wrong: the cause first, then what NCCL said.
        (Some(c), _) if !ok || a.rendezvous_only => {
            let then = match failed_text(result, &as_said) {
                Some(t) => format!(" (then: {t})"),
                None => String::new(),
            };
            (code.max(1), format!("FAILED: {c}{then} ({wall:.2} s)"))
        }
        (_, Some(why)) if ok => (code, format!("FAILED: {why} ({wall:.2} s)")),
        _ => (
            code,
            verdict_line(result, a.rendezvous_only, wall, known.likely),
        ),
    };
    Ending {
        code,
        verdict,
        top,
        floor,
    }
}

/// The exit status: 0 every element right everywhere, 1 a wrong element or
/// a failure, 2 a usage error, [`NO_GPU`] no driver or no GPU.
pub(super) fn exit_code(result: &Result<smoke::Summary, Failure>) -> u8 {
    match result {
        Ok(s) if s.ok => 0,
        Ok(_) => 1,
        Err(Failure::NoDriver(_) | Failure::NoGpu(_)) => NO_GPU,
        Err(Failure::Usage(_)) => 2,
        Err(_) => 1,
    }
}

/// The last line: OK, or FAILED with every reason (here and on the other
/// ranks), and the wall time. With `--rendezvous-only` an OK says that the
/// ranks met, and that no all-reduce ran.
fn verdict_line(
    result: &Result<smoke::Summary, Failure>,
    met_only: bool,
    wall: f64,
    likely: &dyn Fn(i32) -> Likely,
) -> String {
    match result {
        Ok(s) if s.ok => {
            let agree = if s.peers.is_empty() {
                String::new()
            } else {
                format!(", {} other process(es) agree", s.peers.len())
            };
            if met_only {
                format!(
                    "OK: {} rank(s) met, no all-reduce run (--rendezvous-only){agree} ({wall:.2} s)",
                    s.nranks
                )
            } else {
                if s.rows.is_empty() {
                    return format!(
                        "OK: no call ran: each one asked for was skipped (the notes say why){agree} ({wall:.2} s)"
                    );
                }
                let calls = calls(&s.rows);
                format!(
                    "OK: every element of {} {calls} right on {} rank(s){agree} ({wall:.2} s)",
                    s.rows.len() * 2,
                    s.nranks
                )
            }
        }
        _ => format!(
            "FAILED: {} ({wall:.2} s)",
            failed_text(result, likely).unwrap_or_default()
        ),
    }
}

/// What failed, in words: every reason (here and on the other ranks), or
/// the failure, with the likely cause and fix of NCCL's result (`likely`);
/// `None` where every element everywhere was right.
fn failed_text(
    result: &Result<smoke::Summary, Failure>,
    likely: &dyn Fn(i32) -> Likely,
) -> Option<String> {
    match result {
        Ok(s) if s.ok => None,
        Ok(s) => {
            let mut why = Vec::new();
            if s.wrong > 0 {
                why.push(format!("{} wrong element(s) here", s.wrong));
            }
            for p in &s.peers {
                match &p.done {
                    Some((true, _, _)) => {}
                    Some((false, 0, m)) => why.push(format!("rank {} failed: {m}", p.rank)),
                    Some((false, w, m)) => {
                        why.push(format!("rank {} reported {w} wrong ({m})", p.rank))
                    }
                    None => why.push(match &p.why {
                        Some(w) => format!("rank {} never reported: {w}", p.rank),
                        None => format!(
                            "rank {} never reported (killed, or past the deadline)",
                            p.rank
                        ),
                    }),
                }
            }
            Some(why.join("; "))
        }
        Err(f @ Failure::NcclLib { rc, .. }) => Some(match likely(*rc) {
            Likely::Said { words, means, fix } => {
                format!("{means} (NCCL said \"{words}\"): {fix} (then: {f})")
            }
            Likely::Usual(t) if t.is_empty() => f.to_string(),
            Likely::Usual(t) => format!("{f}. {t}"),
        }),
        Err(f) => Some(f.to_string()),
    }
}

/// What the rows ran, for the verdict: `all-reduce(s)` (the default), or
/// `call(s) (all-reduce, all-gather)`, with the reductions where any is
/// not `sum`: `call(s) (all-reduce, all-gather; sum, prod)`.
pub(super) fn calls(rows: &[smoke::Row]) -> String {
    let mut ops: Vec<&str> = rows.iter().map(|r| r.op).collect();
    ops.dedup();
    let mut redops: Vec<&str> = Vec::new();
    for r in rows.iter().filter_map(|r| r.redop) {
        if !redops.contains(&r.name()) {
            redops.push(r.name());
        }
    }
    if ops.iter().all(|o| *o == "all-reduce") && redops == ["sum"] {
        "all-reduce(s)".to_string()
    } else if redops.iter().all(|r| *r == "sum") {
        format!("call(s) ({})", ops.join(", "))
    } else {
        format!("call(s) ({}; {})", ops.join(", "), redops.join(", "))
    }
}

/// The largest size of a run that finished, and the better bus bandwidth
/// there (out of place or in place) of its first row (the all-reduce's,
/// where it ran); `None` when nothing was timed.
pub(super) fn largest(result: &Result<smoke::Summary, Failure>) -> Option<(usize, f64)> {
    let s = result.as_ref().ok()?;
    smoke::Row::first_largest(&s.rows).map(|r| (r.bytes, r.oop.busbw.max(r.ip.busbw)))
}

/// Why `--min-busbw GBPS` fails the run: the bus bandwidth at the largest
/// size is below it (`None`: it is not, or nothing was timed).
pub(super) fn below_floor(largest: &Option<(usize, f64)>, min: f64) -> Option<String> {
    let (bytes, busbw) = (*largest)?;
    (busbw < min).then(|| {
        format!(
            "the bus bandwidth at {} is {busbw:.1} GB/s, below --min-busbw {min} GB/s",
            match human(bytes) {
                h if h.ends_with(['K', 'M', 'G']) => format!("{h}iB"),
                h => format!("{h} bytes"),
            }
        )
    })
}

/// The hardware verdict at the largest size (`top`, from [`largest`]),
/// after a run that finished; the settings that explain a slow transport
/// are those in force (`settings`: the environment and NCCL's files).
pub(super) fn judge(
    result: &Result<smoke::Summary, Failure>,
    top: Option<(usize, f64)>,
    capture: &smoke::Capture,
    settings: &InForce,
) -> Option<smoke::verdict::Judgement> {
    let s = result.as_ref().ok()?;
    let (bytes, busbw) = top?;
    Some(smoke::verdict::judge(
        &s.topology,
        busbw,
        bytes,
        s.nranks,
        &capture.transport_lines(),
        &|n| settings.value(n).map(String::from),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smoke::output::tests::rows;

    /// The verdict names the collectives and the reductions.
    #[test]
    fn the_verdict_names_the_calls() {
        let rows = rows();
        assert_eq!(calls(&rows), "call(s) (all-reduce, all-gather; sum, prod)");
        assert_eq!(calls(&rows[3..]), "call(s) (all-gather)");
        assert_eq!(calls(&rows[..2]), "all-reduce(s)");
    }

    #[test]
    fn the_bandwidth_floor_is_the_largest_sizes() {
        assert_eq!(below_floor(&None, 10.0), None);
        assert_eq!(below_floor(&Some((1 << 30, 327.1)), 300.0), None);
        assert_eq!(below_floor(&Some((1 << 30, 300.0)), 300.0), None);
        assert_eq!(
            below_floor(&Some((1 << 30, 327.1)), 400.0).as_deref(),
            Some("the bus bandwidth at 1GiB is 327.1 GB/s, below --min-busbw 400 GB/s")
        );
        assert_eq!(
            below_floor(&Some((1000, 0.25)), 0.5).as_deref(),
            Some("the bus bandwidth at 1000 bytes is 0.2 GB/s, below --min-busbw 0.5 GB/s")
        );
    }

    /// A warning NCCL said whose cause is known leads the last line, its
    /// fix next, NCCL's error after; a usual cause follows NCCL's error.
    #[test]
    fn a_known_warning_leads_the_failure() {
        let failed: Result<smoke::Summary, Failure> = Err(Failure::NcclLib {
            what: "ncclCommInitRank".into(),
            error: "invalid usage".into(),
            rc: 5,
        });
        let said = |_| Likely::Said {
            words: "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60".into(),
            means: "two ranks use one GPU".into(),
            fix: "give each rank its own GPU".into(),
        };
        assert_eq!(
            failed_text(&failed, &said).unwrap(),
            "two ranks use one GPU (NCCL said \"Duplicate GPU detected : rank 0 and rank 1 both on CUDA \
             device 60\"): give each rank its own GPU (then: ncclCommInitRank failed: invalid usage)"
        );
        let usual = |_| Likely::Usual("Likely cause (ncclInvalidUsage): …".into());
        assert_eq!(
            failed_text(&failed, &usual).unwrap(),
            "ncclCommInitRank failed: invalid usage. Likely cause (ncclInvalidUsage): …"
        );
        assert_eq!(
            failed_text(&failed, &as_said).unwrap(),
            "ncclCommInitRank failed: invalid usage"
        );
    }
}
