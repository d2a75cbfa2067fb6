//! `nccl-find smoke`: the proof that the NCCL found really works here, and
//! across processes and nodes. This file is the run, in order: the
//! arguments (`args`), the facts and the settings for the NCCL to load, the
//! check before NCCL starts, the signals (`signals`), the run itself
//! (`nccl_smoke::run`), then the end (`verdict`), worked out whole before
//! anything of it is printed (`output`). Between nodes, each rank's card
//! and rank 0's reading of them are `nodes`'.

mod args;
pub(crate) mod nodes;
mod output;
mod signals;
mod verdict;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use nccl_find::Version;
use nccl_rendezvous::{Gathered, Meeting};
use nccl_smoke::{self as smoke, Event, Failure, Options};
use serde_json::json;

pub(crate) use args::Args;
use output::{say, Captured, Last, Table};
use verdict::{Ending, Known, Likely};

use crate::facts::conf::{self, ConfFacts};
use crate::facts::node::{self, Node};
use crate::facts::{host, net, rdma::RdmaHw};
use crate::rules::settings::InForce;
use crate::rules::{fabric, failures, ifaces, messages, plugins};

/// What this process knows before NCCL starts: the release of the NCCL
/// to load, the settings in force for it, this host's interfaces, and the
/// cause that will make NCCL fail here, where there is one.
struct Before {
    release: Option<Version>,
    /// The library's own version text (`2.28.9+cuda13.0`).
    build: Option<String>,
    /// The branch and commit it was built from (NCCL 2.29 on).
    git: Option<String>,
    settings: InForce,
    interfaces: Vec<net::Iface>,
    cause: Option<String>,
}

impl Before {
    /// Read before the capture of NCCL's log sets its own settings.
    fn read(lib: &Path) -> Before {
        // One read of the file: its release, and its build.
        let elf = nccl_find::internal::read_elf(lib).ok();
        let release = elf
            .as_ref()
            .and_then(|e| e.version())
            .map(|(v, _)| Version::new(v.major, v.minor, v.patch, ""));
        let (build, git) = elf.map_or((None, None), |e| (e.version_text, e.git_version));
        let settings = InForce::of(
            &ConfFacts::read(&conf::process_env(), Path::new("/")),
            release.as_ref(),
        );
        let interfaces = net::interfaces();
        let cause = before_nccl(&interfaces, &settings, release.as_ref());
        Before {
            release,
            build,
            git,
            settings,
            interfaces,
            cause,
        }
    }
}

/// Runs the smoke test; `lib` is the probe's choice when `--lib` is absent.
pub(crate) fn run(a: &Args, probed: impl FnOnce() -> Result<PathBuf, String>) -> ExitCode {
    let started = Instant::now();
    let (mut opts, meeting) = match args::prepared(a, probed) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let before = Before::read(&opts.lib);
    bring_card(&mut opts, &before, a.run_nccl_anyway);
    let wake = signals::handle_interrupts();
    let capture = Captured(smoke::Capture::start(a.json));
    signals::watch_interrupts(wake);
    let who = opts
        .job
        .as_ref()
        .map(|j| format!("[rank {}] ", j.rank))
        .unwrap_or_default();
    let mut events = output::preamble(a.json, &who, meeting.as_ref(), &before.settings, &capture);
    let result = run_or_stop(a, &opts, &before, &who, &mut events);
    flush_nccls_log();
    let wall = started.elapsed().as_secs_f64();
    let gathered = gathered(&events);
    // This process's own cause, where NCCL ran all the same (stopped, the
    // failure carries it).
    let own = before
        .cause
        .as_deref()
        .filter(|_| opts.job.is_none() && a.run_nccl_anyway);
    let said = capture.0.last_warnings(10);
    let cause_of = |rc: i32| likely(rc, &before, &said);
    let summary = result.as_ref().ok();
    let (pairs, between) = between_nodes(gathered, summary);
    let known = Known {
        between,
        cause: ruling(&events).or(own),
        likely: &cause_of,
    };
    let end = verdict::ending(a, &result, wall, &known);
    let judged = verdict::judge(&result, end.top, &capture.0, &before.settings);
    let slow = summary.map(|s| nodes::slow_ranks(s, gathered));
    let (leave, leave_json) = leave_out(a, meeting.as_ref(), gathered, summary);
    let warnings = match end.code {
        1 => said,
        _ => Vec::new(),
    };
    if a.json {
        let doc = Json {
            end: &end,
            wall,
            events: &events,
            warnings: &warnings,
            judged: judged.as_ref(),
            settings: &before.settings,
            slow: slow.as_ref().map(|s| &s.1),
            meeting: meeting.as_ref(),
            leave: leave_json,
            pairs: summary
                .filter(|s| !s.pairs.is_empty())
                .map(nodes::nccl_pairs_json),
        };
        print_json(a, &doc);
        return ExitCode::from(end.code);
    }
    let sockets = judged.as_ref().and_then(|v| sockets_why(v, &before));
    let mut slow_lines = pairs.notes;
    slow_lines.extend(slow.map(|s| s.0).unwrap_or_default());
    output::print_ending(&Last {
        who: &who,
        problems: &pairs.problems,
        slow: &slow_lines,
        leave: &leave,
        warnings: &warnings,
        judged: judged.as_ref(),
        sockets: sockets.as_deref(),
        stopped: matches!(result, Err(Failure::Stopped(_))),
        verdict: &end.verdict,
        code: end.code,
    });
    ExitCode::from(end.code)
}

/// The run, each event printed as it comes (but under `--json`); or, for
/// one process where NCCL cannot start, no run: stopped before NCCL (a
/// job's ranks are stopped by rank 0's ruling, from their cards).
fn run_or_stop(
    a: &Args,
    opts: &Options,
    before: &Before,
    who: &str,
    events: &mut Vec<Event>,
) -> Result<smoke::Summary, Failure> {
    if let Some(cause) = before.cause.as_ref() {
        if opts.job.is_none() && !a.run_nccl_anyway {
            return Err(Failure::Stopped(cause.clone()));
        }
    }
    let mut out = std::io::stdout();
    let mut table = Table::default();
    smoke::run(opts, &mut |e: Event| {
        let line = output::event_line(who, &e, &mut table);
        if !a.json && !line.is_empty() {
            say(&mut out, &line);
            let _ = out.flush();
        }
        events.push(e);
    })
}

/// What will make NCCL fail here before it starts: it finds no network
/// interface (`rules::ifaces`). The cause and the fix, in one line.
fn before_nccl(
    interfaces: &[net::Iface],
    settings: &InForce,
    release: Option<&Version>,
) -> Option<String> {
    let choice = ifaces::choose(interfaces, settings, release);
    let (cause, fix) = choice.none_found(settings)?;
    Some(format!("{cause}, so NCCL cannot start here: {fix}"))
}

/// The likely cause and fix of an NCCL result `rc`: a warning NCCL said
/// (`said`, its last) whose cause is known comes first; else the result's
/// usual cause, with the interfaces NCCL lists here where it is a system
/// error.
fn likely(rc: i32, before: &Before, said: &[String]) -> Likely {
    if let Some((words, hit)) = messages::first_known(&messages::Known::new(), said) {
        if let messages::Says::Cause(f) | messages::Says::Symptom(f) = hit.says {
            let field = |n: &str| hit.field(n).map(str::to_string);
            return Likely::Said {
                words: words.to_string(),
                means: failures::render(f.class().what, &field),
                fix: failures::render(f.class().fix, &field),
            };
        }
    }
    let (interfaces, settings, release) = (
        &before.interfaces,
        &before.settings,
        before.release.as_ref(),
    );
    let mut out = messages::likely(rc);
    if messages::result(rc).is_some_and(|r| r.name == "ncclSystemError") {
        let choice = ifaces::choose(interfaces, settings, release);
        let listed: Vec<&str> = choice.listed.iter().map(|i| i.name.as_str()).collect();
        out.push_str(&format!(
            " Interfaces NCCL lists here: {}; NCCL uses {} ({}); to choose: {}.",
            listed.join(", "),
            choice.taken.first().map_or("none", |i| i.name.as_str()),
            choice.why,
            choice.suggestion()
        ));
    }
    Likely::Usual(out)
}

/// What this process brings to the meeting ([`nodes::card`]), under a
/// launcher or `--init`. Rank 0 judges every card with
/// [`nodes::blocker`], and stops the job before NCCL on what it finds,
/// unless `run_anyway`.
fn bring_card(opts: &mut Options, before: &Before, run_anyway: bool) {
    let (lib, local_rank) = (opts.lib.clone(), opts.local_rank);
    if let Some(job) = opts.job.as_mut() {
        // The host's facts travel on the first process of a node only.
        let node = match local_rank.unwrap_or(0) {
            0 => Some(Node::gather()),
            _ => None,
        };
        let here = nodes::Here {
            lib: &lib,
            release: before.release.as_ref(),
            build: before.build.as_deref(),
            git: before.git.as_deref(),
            settings: &before.settings,
            interfaces: &before.interfaces,
            node: node.as_ref(),
            host: node.as_ref().map_or_else(node::name, |n| n.name.clone()),
        };
        job.card = nodes::card(&here);
        job.judge = Some(nodes::blocker);
        job.run_anyway = run_anyway;
    }
}

/// What rank 0 gathered from every rank, once they met.
fn gathered(events: &[Event]) -> Option<&Gathered> {
    events.iter().find_map(|e| match e {
        Event::Gathered(g) => Some(g),
        _ => None,
    })
}

/// Rank 0's ruling, where the job runs NCCL although it found a cause.
fn ruling(events: &[Event]) -> Option<&str> {
    events.iter().find_map(|e| match e {
        Event::Cause(c) => Some(c.as_str()),
        _ => None,
    })
}

/// What is known between the nodes on this rank: what the pairs over NCCL
/// found (every rank has every time); and the cause, rank 0's problems
/// from the meeting first.
fn between_nodes(
    gathered: Option<&Gathered>,
    summary: Option<&smoke::Summary>,
) -> (nodes::NcclPairs, Option<String>) {
    let found = summary.map(nodes::nccl_pairs).unwrap_or_default();
    let first = gathered.and_then(between).or(found
        .cause
        .as_ref()
        .map(|c| format!("the pairs over NCCL: {c}")));
    (found, first)
}

/// Rank 0's lines that leave the bad nodes out, in the launcher's syntax;
/// under `--json`, the same as JSON instead.
fn leave_out(
    a: &Args,
    meeting: Option<&Meeting>,
    gathered: Option<&Gathered>,
    summary: Option<&smoke::Summary>,
) -> (Vec<String>, Option<serde_json::Value>) {
    let under = nodes::Under::of(
        meeting.map_or("", |m| m.backend),
        std::env::var_os("SLURM_JOB_ID").is_some(),
        std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
    );
    let best = a.best.map(|n| n as usize);
    match (gathered, a.json) {
        (None, _) => (Vec::new(), None),
        (Some(g), false) => (nodes::leave_out(g, summary, under, best), None),
        (Some(g), true) => (Vec::new(), Some(nodes::leave_json(g, summary, under, best))),
    }
}

/// The problems rank 0 found between the nodes: how many, and the first
/// cause with its fix as the judge ranks them ([`nodes::blocker`]), else
/// the first problem.
fn between(g: &Gathered) -> Option<String> {
    let problems: Vec<String> = nodes::report(g)
        .into_iter()
        .filter(|(p, _)| *p)
        .map(|(_, l)| l)
        .collect();
    let first = nodes::blocker(g).or_else(|| problems.first().cloned())?;
    Some(format!(
        "{} problem(s) between nodes, first: {first}",
        problems.len().max(1)
    ))
}

/// NCCL logs through C's stdio, which holds its lines back when stdout is
/// a file (`NCCL_DEBUG=INFO > log`): out with them before the verdict, so
/// that the verdict stays the last line.
fn flush_nccls_log() {
    // SAFETY: fflush(NULL) flushes every C output stream and closes none.
    unsafe { libc::fflush(std::ptr::null_mut()) };
}

/// Why NCCL chose sockets although an RDMA adapter is ACTIVE here
/// (`rules::fabric`), from this machine's RDMA facts alone.
fn sockets_why(v: &smoke::verdict::Judgement, before: &Before) -> Option<String> {
    let (settings, release) = (&before.settings, before.release.as_ref());
    let Some(smoke::verdict::Transport::Net(t)) = &v.transport else {
        return None;
    };
    // Only sockets need explaining: the host is read for nothing else.
    if !t.starts_with("NET/Socket") {
        return None;
    }
    let named: Vec<String> = plugins::FAMILIES
        .iter()
        .filter(|(f, _, _)| plugins::loads(f, release))
        .filter_map(|(f, _, _)| settings.value(&plugins::variable(f)))
        .map(String::from)
        .collect();
    let hw = RdmaHw::gather(Path::new("/"), &named);
    fabric::sockets_despite_an_adapter(t, &host::rdma_libraries(), &hw, settings)
}

/// What the `--json` report holds beside the arguments.
struct Json<'a> {
    end: &'a Ending,
    wall: f64,
    events: &'a [Event],
    warnings: &'a [String],
    judged: Option<&'a smoke::verdict::Judgement>,
    settings: &'a InForce,
    slow: Option<&'a serde_json::Value>,
    meeting: Option<&'a Meeting>,
    leave: Option<serde_json::Value>,
    /// The pairs over NCCL.
    pairs: Option<serde_json::Value>,
}

/// The `--json` report, printed.
fn print_json(a: &Args, j: &Json) {
    let end = j.end;
    let mut doc = output::json_report(
        end.code,
        &end.verdict,
        j.wall,
        j.events,
        j.warnings,
        j.judged,
    );
    doc["settings"] = output::settings_json(j.settings);
    if let Some(t) = j.slow {
        doc["timings"] = t.clone();
    }
    if let Some(m) = j.meeting {
        doc["exchange"] = output::meeting_json(m);
    }
    if let Some(l) = &j.leave {
        doc["leave_out"] = l.clone();
    }
    if let Some(p) = &j.pairs {
        doc["pairs_over_nccl"] = p.clone();
    }
    if let Some(min) = a.min_busbw {
        doc["min_busbw"] = json!({
            "floor": min,
            "bytes": end.top.map(|t| t.0),
            "busbw": end.top.map(|t| t.1),
            "ok": end.floor.is_none(),
        });
    }
    // A closed pipe (`| head`) ends the output quietly; the exit status is
    // still the test's.
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    let _ = writeln!(std::io::stdout(), "{text}");
}

/// Where the smoke test's NCCL comes from when `--lib` is absent.
pub(crate) fn probed_library(config: &nccl_find::Config) -> Result<PathBuf, String> {
    let n = config.probe().map_err(|e| e.headline())?;
    Ok(n.library_real)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smoke::nodes::tests::made;

    /// NCCL ran anyway and worked, yet the meeting found a cause: rank 0's
    /// last line gives that cause with its fix, not a bare problem line.
    #[test]
    fn a_cause_found_between_nodes_ends_with_its_fix() {
        let cards = [("a", "2.28.9"), ("b", "2.28.9"), ("c", "2.28.3")]
            .iter()
            .map(|(h, v)| made(h, &format!("nccl={v}\n"), &["eth0"]))
            .collect();
        let g = Gathered::new(cards, Vec::new());
        assert_eq!(
            between(&g).unwrap(),
            "1 problem(s) between nodes, first: NCCL releases differ: c: NCCL 2.28.3 (the 2 other nodes: \
             2.28.9), and NCCL refuses ranks of another release (`Mismatched NCCL version detected`): load the \
             same NCCL everywhere (the same wheel, or --lib to the same file)"
        );
        let same: Vec<_> = ["a", "b"]
            .iter()
            .map(|h| made(h, "nccl=2.28.9\n", &["eth0"]))
            .collect();
        assert_eq!(between(&Gathered::new(same, Vec::new())), None);
    }
}
