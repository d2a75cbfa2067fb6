//! `nccl-find ras`: asks NCCL's own RAS service (NCCL 2.24 and newer, on by
//! default) about the running job, and names the rank to look at: one
//! whose process is gone or does not answer, one with an error of its own,
//! one that launched fewer collectives than the others and stays so, one
//! whose communicator is not running as the others' are. The verdict comes
//! first, the ranks after it, and the answer (what to do) last. Exit 0 for
//! a healthy job (or one that is moving), 1 when a rank needs looking at,
//! 2 when the service could not be asked.

pub(crate) mod client;
pub(crate) mod listeners;
mod output;
pub(crate) mod place;
pub(crate) mod status;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::facts::conf::{self, ConfFacts};
use crate::rules::ras::{self, Hazard, Question, Releases};
use crate::rules::settings::InForce;
use crate::style;
use client::{AskError, Conversation};
use listeners::Server;
use output::{above, last_line, short, take_out, to_json};
use status::{JobStatus, Suspect, Trouble};

/// `nccl-find ras`'s flags.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The node whose RAS service to ask (default: NCCL_RAS_ADDR's host,
    /// else localhost)
    #[arg(long, value_name = "HOST")]
    host: Option<String>,
    /// Its port (default: NCCL_RAS_ADDR's port, else 28028)
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// Seconds to wait for the whole answer, both looks together
    #[arg(long, value_name = "SECS", default_value = "10")]
    timeout: u64,
    /// The verdict and every rank's facts as JSON
    #[arg(long)]
    json: bool,
    /// Ask for the text report even where NCCL has JSON
    #[arg(long)]
    text: bool,
    /// Ask even a release whose RAS service has crashed jobs at every
    /// question it takes (one STATUS, the least risky; never twice)
    #[arg(long)]
    ask_anyway: bool,
}

/// How long to wait before a second look, when a rank is only behind: a
/// job that moves has other counts by then.
const SECOND_LOOK: Duration = Duration::from_secs(2);

/// What the command concluded.
enum Diagnosis {
    /// Nothing needs looking at.
    Healthy,
    /// Ranks were behind at the first look, and the counts moved by the
    /// second.
    Moving(Vec<Suspect>),
    /// A rank to look at (the first finding).
    Look,
    /// Ranks were behind at the one look taken: a second look is a
    /// hazard of this release (the hazards).
    Once(Vec<&'static Hazard>),
    /// The service could not be asked: why, in one line.
    Silent(String),
    /// Not asked: every question the release takes has crashed jobs.
    Withheld(Vec<(Question, Vec<&'static Hazard>)>),
}

/// What was learnt of the service before and while it was asked.
struct Asked {
    /// The processes that serve the address, or why they cannot be known.
    servers: Result<Vec<Server>, String>,
    /// The releases it may be.
    releases: Releases,
    /// The questions asked, in order.
    questions: Vec<Question>,
    /// What was sent after the handshake, line by line.
    sent: Vec<&'static str>,
    /// The second look: after how long it answered, or why it did not.
    second: Option<Result<Duration, String>>,
}

/// Runs `nccl-find ras`.
pub(crate) fn run(args: &Args, color: style::When) -> ExitCode {
    let addr = address(args, settings().value("NCCL_RAS_ADDR"));
    let deadline = Instant::now() + Duration::from_secs(args.timeout.clamp(1, 3600));
    let (status, diagnosis, asked) = look(&addr, deadline, args);
    let place = match (&diagnosis, &status) {
        (Diagnosis::Look | Diagnosis::Once(_), Some(st)) => st.suspects.first().and_then(|f| {
            let job = asked
                .servers
                .as_ref()
                .ok()
                .and_then(|all| place::env_of(u64::from(all[0].pid)))
                .unwrap_or_else(place::own_env);
            place::place(&f.who, &job, short(&f.trouble))
        }),
        _ => None,
    };
    let mut line = last_line(&addr, status.as_ref(), &diagnosis, &asked);
    if let Some(p) = &place {
        line.push_str(&take_out(p));
    }
    let code = match diagnosis {
        Diagnosis::Healthy | Diagnosis::Moving(_) => 0,
        Diagnosis::Look | Diagnosis::Once(_) => 1,
        Diagnosis::Silent(_) | Diagnosis::Withheld(_) => 2,
    };
    if args.json {
        let v = to_json(
            &addr,
            status.as_ref(),
            &diagnosis,
            &asked,
            place.as_ref(),
            &line,
            code,
        );
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("JSON from plain values")
        );
        return ExitCode::from(code);
    }
    let above = above(
        &addr,
        status.as_ref(),
        &diagnosis,
        &asked,
        place.as_ref(),
        code,
    );
    print!("{}", style::human(&above, color));
    match code {
        0 => println!("{line}"),
        _ => style::complain(&line),
    }
    ExitCode::from(code)
}

/// NCCL's settings in force here (the environment, then NCCL's
/// configuration files): what a job started from here runs with.
fn settings() -> InForce {
    let conf = ConfFacts::read(&conf::process_env(), std::path::Path::new("/"));
    InForce::of(&conf, None)
}

/// `HOST:PORT` to ask: the flags, then `NCCL_RAS_ADDR` (`ras_addr`), then
/// NCCL's default, `localhost:28028`; an IPv6 host in brackets.
fn address(args: &Args, ras_addr: Option<&str>) -> String {
    let (env_host, env_port) = match ras_addr.map(str::trim).filter(|a| !a.is_empty()) {
        Some(a) => {
            let (h, p) = ras::split_addr(a);
            (Some(h), p)
        }
        None => (None, None),
    };
    let host = args
        .host
        .as_deref()
        .or(env_host)
        .unwrap_or(ras::DEFAULT_HOST);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = args.port.or(env_port).unwrap_or(ras::DEFAULT_PORT);
    let host = nccl_rendezvous::untrusted::shown(host, 200);
    match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    }
}

/// The first look, and a second where ranks were only behind and the
/// release survives one. Every question is one the table of hazards
/// allows for the releases the service may be.
fn look(addr: &str, deadline: Instant, args: &Args) -> (Option<JobStatus>, Diagnosis, Asked) {
    let mut asked = Asked {
        servers: Err(String::new()),
        releases: Releases::any(),
        questions: Vec::new(),
        sent: Vec::new(),
        second: None,
    };
    let c = match Conversation::open(addr, deadline) {
        Ok(c) => c,
        Err(e) => return (None, Diagnosis::Silent(not_asked(addr, e)), asked),
    };
    asked.servers = listeners::serving(c.peer);
    if let Ok(all) = &asked.servers {
        asked.releases = releases_of(all);
    }
    let first = match ask(c, args, &mut asked) {
        Ok(s) => s,
        Err(Stop::Withheld(w)) => return (None, Diagnosis::Withheld(w), asked),
        Err(Stop::Failed(e)) => return (None, Diagnosis::Silent(not_asked(addr, e)), asked),
    };
    let behind_only = |s: &JobStatus| {
        s.suspects
            .iter()
            .all(|f| matches!(f.trouble, Trouble::Behind { .. }))
    };
    if first.suspects.is_empty() || !behind_only(&first) {
        let v = match first.suspects.is_empty() {
            true => Diagnosis::Healthy,
            false => Diagnosis::Look,
        };
        return (Some(first), v, asked);
    }
    // No second look where the release does not survive one, nor where the
    // first question was itself a hazard, asked anyway.
    let mut hazards = ras::hazards_of(&asked.releases, Question::Again);
    for q in &asked.questions {
        for h in ras::hazards_of(&asked.releases, *q) {
            if !hazards.iter().any(|k| k.thread == h.thread) {
                hazards.push(h);
            }
        }
    }
    if !hazards.is_empty() {
        return (Some(first), Diagnosis::Once(hazards), asked);
    }
    // Room for the second conversation: half of what is left at most.
    let pause = SECOND_LOOK.min(deadline.saturating_duration_since(Instant::now()) / 2);
    std::thread::sleep(pause);
    let second = Conversation::open(addr, deadline)
        .map_err(Stop::Failed)
        .and_then(|c| ask(c, args, &mut asked));
    asked.second = Some(match &second {
        Ok(_) => Ok(pause),
        Err(Stop::Failed(e)) => Err(not_asked(addr, e.clone())),
        Err(Stop::Withheld(_)) => Err("withheld".into()),
    });
    match second {
        // Moving: nothing but ranks behind at the second look either, and
        // other counts (a rank gone between the looks is no progress).
        Ok(second) if behind_only(&second) && counts_moved(&first, &second) => {
            (Some(second), Diagnosis::Moving(first.suspects), asked)
        }
        Ok(second) => (Some(second), Diagnosis::Look, asked),
        // The first look stands when the second cannot be had.
        Err(_) => (Some(first), Diagnosis::Look, asked),
    }
}

/// The releases of the processes that serve the address: one, or the
/// span from the oldest to the newest library they map (a process may map
/// more than one; a file whose release cannot be read leaves any release
/// possible).
fn releases_of(servers: &[Server]) -> Releases {
    let Some(all) = servers
        .iter()
        .flat_map(|s| s.libs.iter().map(|(_, v)| v.clone()))
        .collect::<Option<Vec<_>>>()
    else {
        return Releases::any();
    };
    let t = |v: &nccl_find::Version| (v.major, v.minor, v.patch);
    let (Some(lo), Some(hi)) = (all.iter().map(t).min(), all.iter().map(t).max()) else {
        return Releases::any();
    };
    match lo == hi {
        true => Releases::Exactly(all[0].clone()),
        false => Releases::Between(lo, Some((hi.0, hi.1, hi.2 + 1))),
    }
}

/// Why a look was not had.
enum Stop {
    /// The service could not be asked.
    Failed(AskError),
    /// Every question the release takes is a hazard: each, with its own.
    Withheld(Vec<(Question, Vec<&'static Hazard>)>),
}

/// One conversation: greeted, the format settled, one report asked for and
/// read. `asked.releases` narrows by what `SET FORMAT json` says, where it
/// was not known. A report that cannot be read is [`AskError::Broken`].
fn ask(mut c: Conversation, args: &Args, asked: &mut Asked) -> Result<JobStatus, Stop> {
    let addr = c.peer.to_string();
    c.greet().map_err(Stop::Failed)?;
    let json = match (args.text, asked.releases.json()) {
        (true, _) | (false, Some(false)) => false,
        (false, _) => {
            asked.sent.push("SET FORMAT json");
            let took = c.json().map_err(Stop::Failed)?;
            asked.releases = asked.releases.narrowed(took);
            took
        }
    };
    let q = match json {
        true => Question::Json,
        false => text_question(&asked.releases, args.ask_anyway)?,
    };
    asked.questions.push(q);
    asked.sent.push(match q {
        Question::Verbose => "VERBOSE STATUS",
        _ => "STATUS",
    });
    let answer = c.report(q).map_err(Stop::Failed)?;
    match status::read(answer.format, &answer.body) {
        Ok(st) => Ok(st),
        Err(e) => {
            let (host, port) = ras::split_addr(&addr);
            let port = port.map_or(String::new(), |p| format!(" {p}"));
            Err(Stop::Failed(AskError::Broken(format!(
                "the RAS service at {addr} answered, but {e}: see its answer with `nc {host}{port}`"
            ))))
        }
    }
}

/// The text question to ask: `VERBOSE STATUS` (every rank listed) where no
/// hazard is known for it, else `STATUS`; neither where both are, unless
/// `anyway` (then the one with fewer).
fn text_question(releases: &Releases, anyway: bool) -> Result<Question, Stop> {
    let each: Vec<(Question, Vec<&'static Hazard>)> = [Question::Verbose, Question::Text]
        .into_iter()
        .map(|q| (q, ras::hazards_of(releases, q)))
        .collect();
    if let Some((q, _)) = each.iter().find(|(_, h)| h.is_empty()) {
        return Ok(*q);
    }
    match anyway {
        // The plain STATUS first among equals: the lighter report.
        true => Ok(each
            .iter()
            .rev()
            .min_by_key(|(_, h)| h.len())
            .map(|(q, _)| *q)
            .expect("two questions")),
        false => Err(Stop::Withheld(each)),
    }
}

/// Why the service could not be asked, in one line.
fn not_asked(addr: &str, e: AskError) -> String {
    match e {
        AskError::Unreachable(why) => {
            let procs = listeners::nccl_processes();
            let own = settings();
            listeners::why_silent(addr, &procs, own.value("NCCL_RAS_ENABLE"), &why)
        }
        AskError::Slow(why) => format!(
            "NCCL's RAS service did not answer in time: {why}. Its node may be overloaded, or the \
             address ({addr}) leads elsewhere; give it longer with --timeout"
        ),
        AskError::NotRas(why) | AskError::Broken(why) => why,
    }
}

/// Whether any rank's collective counts differ between two looks.
fn counts_moved(a: &JobStatus, b: &JobStatus) -> bool {
    let behind = |s: &JobStatus| -> Vec<(Option<u64>, String, u64, u64)> {
        let mut v = Vec::new();
        for f in &s.suspects {
            if let Trouble::Behind { op, launched, most } = &f.trouble {
                v.push((f.who.rank, op.clone(), *launched, *most));
            }
        }
        v
    };
    behind(a) != behind(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(host: Option<&str>, port: Option<u16>) -> Args {
        Args {
            host: host.map(String::from),
            port,
            timeout: 10,
            json: false,
            text: false,
            ask_anyway: false,
        }
    }

    #[test]
    fn the_address_is_the_flags_then_nccl_ras_addr_then_ncclss_default() {
        assert_eq!(address(&args(None, None), None), "localhost:28028");
        assert_eq!(
            address(&args(None, None), Some("10.0.0.7:29000")),
            "10.0.0.7:29000"
        );
        assert_eq!(
            address(&args(Some("node3"), None), Some("10.0.0.7:29000")),
            "node3:29000"
        );
        assert_eq!(
            address(&args(None, Some(1)), Some("[::1]:29000")),
            "[::1]:1"
        );
        assert_eq!(
            address(&args(Some("fe80::1"), None), Some("")),
            "[fe80::1]:28028"
        );
        assert_eq!(address(&args(None, None), Some("node9")), "node9:28028");
    }
}
