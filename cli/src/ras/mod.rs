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
pub(crate) mod place;
pub(crate) mod status;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::facts::conf::{self, ConfFacts};
use crate::rules::ras::{self, Hazard, Question, Releases};
use crate::rules::settings::InForce;
use crate::style;
use client::{AskError, Conversation, Format};
use listeners::Server;
use status::{JobStatus, Suspect, Trouble, Who};

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
        let mut v = to_json(&addr, status.as_ref(), &diagnosis, &asked, &line, code);
        if let (Some(p), Some(at)) = (&place, v.get_mut("look_at")) {
            if at.is_object() {
                at["place"] = json!({
                    "scheduler": p.scheduler, "node": p.node, "said": p.said(),
                    "take_out": p.take_out, "exclude": p.next,
                });
            }
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("JSON from plain values")
        );
        return ExitCode::from(code);
    }
    let mut above = String::new();
    if let Some(st) = &status {
        if code == 1 {
            above = details(&addr, st, &asked);
        }
    }
    if let Some(p) = &place {
        above.push_str(&format!("  its node: {}\n", p.said()));
        if let Some(t) = &p.take_out {
            above.push_str(&format!("  take it out: {t}\n"));
        }
        if let Some(n) = &p.next {
            above.push_str(&format!("  keep the next run off it: srun/sbatch {n}\n"));
        }
    }
    above.push_str(&hazard_lines(&diagnosis, &asked));
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

fn who(w: &Who) -> String {
    let mut s = match w.rank {
        Some(r) => format!("rank {r} ("),
        None => "a rank (".to_string(),
    };
    match w.pid {
        Some(p) => s.push_str(&format!("process {p} on {}", w.host)),
        None => s.push_str("process information not found"),
    }
    if let Some(g) = w.gpu {
        s.push_str(&format!(", GPU {g}"));
    }
    s.push(')');
    s
}

/// What is wrong, in a few words.
fn trouble(t: &Trouble) -> String {
    match t {
        Trouble::Missing { dead: true } => {
            "missing: the RAS network considers its process dead".into()
        }
        Trouble::Missing { dead: false } => {
            "missing: NCCL has no data from it (its process is gone or does not answer)".into()
        }
        Trouble::Error {
            what, remote: true, ..
        } => {
            format!("{what} (how a peer's failure looks from here)")
        }
        Trouble::Error { what, .. } => format!("reported {what}"),
        Trouble::Behind { op, launched, most } => format!(
            "{} {op} behind: launched {launched}, the others up to {most}",
            most - launched
        ),
        Trouble::State { what } => what.clone(),
    }
}

/// What the service said, rank by rank: under the verdict, over the answer.
fn details(addr: &str, st: &JobStatus, asked: &Asked) -> String {
    let format = match st.format {
        Format::Json => "JSON",
        Format::Text => "text",
    };
    let mut s = String::new();
    if let Some(f) = st.suspects.first() {
        s.push_str(&format!(
            "LOOK AT {}: {}\n",
            who(&f.who),
            trouble(&f.trouble)
        ));
    }
    s.push_str(&format!(
        "NCCL's RAS service at {addr} (NCCL {}, {format} report): {} communicator(s), {} rank(s)\n",
        st.nccl.as_deref().unwrap_or("?"),
        st.comms,
        st.ranks
    ));
    s.push_str(&format!("  served by {}\n", served_by(asked)));
    for f in &st.suspects {
        s.push_str(&format!("  {}: {}\n", who(&f.who), trouble(&f.trouble)));
    }
    s
}

/// A rank's trouble in a word or two, for a drain reason.
fn short(t: &Trouble) -> &'static str {
    match t {
        Trouble::Missing { .. } => "missing",
        Trouble::Error { .. } => "error",
        Trouble::Behind { .. } => "behind",
        Trouble::State { .. } => "stuck",
    }
}

/// What the last line adds of the rank's node: its name in the
/// scheduler's words, and the line that takes it out.
fn take_out(p: &place::Place) -> String {
    let mut s = format!(". It runs on {}", p.said());
    if let Some(t) = &p.take_out {
        s.push_str(&format!("; take the node out: `{t}`"));
    }
    if let Some(n) = &p.next {
        s.push_str(&format!(", and keep the next run off it: `{n}`"));
    }
    s
}

/// Who serves the address, and how its release is known.
fn served_by(asked: &Asked) -> String {
    let sent = match asked.sent.is_empty() {
        true => "nothing asked".to_string(),
        false => format!("asked: {}", asked.sent.join(", then ")),
    };
    match &asked.servers {
        Ok(all) => {
            let s = &all[0];
            let more = match all.len() {
                1 => String::new(),
                n => format!(" and {} other process(es)", n - 1),
            };
            let libs: Vec<String> = s
                .libs
                .iter()
                .map(|(lib, v)| {
                    let v = v
                        .as_ref()
                        .map_or("a release its file does not say".into(), |v| v.to_string());
                    format!(
                        "NCCL {v} from {}",
                        nccl_rendezvous::untrusted::shown(&lib.to_string_lossy(), 200)
                    )
                })
                .collect();
            format!(
                "process {} ({}){more} on this host, {}; {sent}",
                s.pid,
                s.name,
                libs.join(" and ")
            )
        }
        Err(why) => format!("a process whose NCCL release cannot be read ({why}); {sent}"),
    }
}

/// The release asked about, in words: `NCCL 2.28.3` or `an NCCL before 2.28.7`.
fn release_words(r: &Releases) -> String {
    let t = |(a, b, c): (u32, u32, u32)| format!("{a}.{b}.{c}");
    match r {
        Releases::Exactly(v) => format!("NCCL {v}"),
        Releases::Between(a, Some(b)) => format!("an NCCL from {}, before {}", t(*a), t(*b)),
        Releases::Between(a, None) => format!("an NCCL from {}", t(*a)),
    }
}

/// The hazards behind a look not taken, one line each, above the answer.
fn hazard_lines(v: &Diagnosis, asked: &Asked) -> String {
    let mut s = String::new();
    match v {
        Diagnosis::Withheld(each) => {
            s.push_str(&format!("NCCL's RAS service here: {}\n", served_by(asked)));
            for (q, hs) in each {
                for h in hs {
                    s.push_str(&format!(
                        "  {}: NVIDIA/nccl#{} (seen on {}): {}\n",
                        q.words(),
                        h.thread,
                        h.seen,
                        h.what
                    ));
                }
            }
        }
        Diagnosis::Once(hs) => {
            for h in hs {
                s.push_str(&format!(
                    "  no second look: NVIDIA/nccl#{} (seen on {}): {}\n",
                    h.thread, h.seen, h.what
                ));
            }
        }
        Diagnosis::Healthy => s.push_str(BLIND_SPOT),
        _ => {}
    }
    s
}

/// What a healthy report cannot rule out.
const BLIND_SPOT: &str = "What RAS cannot see: a kernel stuck on the network, in a job whose \
ranks all launched the same collectives, looks healthy to it (NVIDIA/nccl#1730). If the job \
hangs all the same: see where each rank waits (`py-spy dump --pid PID`), torch's flight recorder \
(TORCH_NCCL_TRACE_BUFFER_SIZE=2000; it dumps on a timeout), and `nccl-find explain` on its logs.\n";

/// The answer: what to do first.
fn last_line(addr: &str, st: Option<&JobStatus>, v: &Diagnosis, asked: &Asked) -> String {
    if let Diagnosis::Withheld(each) = v {
        let mut threads: Vec<String> = Vec::new();
        for (_, hs) in each {
            for h in hs {
                let t = format!("NVIDIA/nccl#{}", h.thread);
                if !threads.contains(&t) {
                    threads.push(t);
                }
            }
        }
        return format!(
            "not asked, to keep the job alive: {}'s RAS service has crashed jobs at every \
             question it takes ({}; above). Read the job's logs with `nccl-find explain` instead, \
             or ask anyway, at that risk, with `nccl-find ras --ask-anyway` (one STATUS)",
            release_words(&asked.releases),
            threads.join(", ")
        );
    }
    let st = match (st, v) {
        (_, Diagnosis::Silent(why)) => return format!("cannot ask NCCL about the job: {why}"),
        (Some(st), _) => st,
        (None, _) => return "cannot ask NCCL about the job".into(),
    };
    let nccl = st.nccl.as_deref().unwrap_or("?");
    match v {
        Diagnosis::Healthy => format!(
            "OK: {} communicator(s), {} rank(s), every rank answering, none behind, no errors \
             (NCCL {nccl} at {addr})",
            st.comms, st.ranks
        ),
        Diagnosis::Moving(was) => format!(
            "OK: the job is moving: {} was behind at the first look, and the counts moved {} s \
             later (NCCL {nccl} at {addr})",
            who(&was[0].who),
            SECOND_LOOK.as_secs()
        ),
        Diagnosis::Once(hs) => {
            let f = &st.suspects[0];
            let Trouble::Behind { op, launched, most } = &f.trouble else {
                return look_at(f, st.suspects.len());
            };
            let threads: Vec<String> = hs.iter().map(|h| format!("#{}", h.thread)).collect();
            format!(
                "behind, once: {} is {} {op} behind (launched {launched}, the others up to \
                 {most}) at the one look taken; a second look, which would tell whether it \
                 moves, is a known hazard for NCCL {nccl}'s RAS service (NVIDIA/nccl{}; above). \
                 See where {} is (`py-spy dump --pid {}` for Python)",
                who(&f.who),
                most - launched,
                threads.join(", "),
                f.who
                    .pid
                    .map_or("its process".to_string(), |p| format!("process {p}")),
                f.who.pid.map_or("PID".to_string(), |p| p.to_string())
            )
        }
        _ => look_at(&st.suspects[0], st.suspects.len()),
    }
}

fn look_at(f: &Suspect, all: usize) -> String {
    let w = who(&f.who);
    let pid = f
        .who
        .pid
        .map_or("its process".to_string(), |p| format!("process {p}"));
    let others = match all {
        1 => String::new(),
        n => format!(
            " ({} other finding(s) above follow from it or come after it)",
            n - 1
        ),
    };
    match &f.trouble {
        Trouble::Missing { .. } => format!(
            "look at {w} first: NCCL has no data from it, so {pid} is gone or stuck, and the job \
             cannot go on without it. Check whether it still runs, and why it ended (its output; \
             `dmesg` for the out-of-memory killer){others}"
        ),
        Trouble::Error { what, .. } => format!(
            "look at {w} first: it reported {what}; its own output says why (run with \
             NCCL_DEBUG=WARN to see NCCL's words){others}"
        ),
        Trouble::Behind { op, launched, most } => format!(
            "look at {w} first: it is {} {op} behind (launched {launched}, the others up to {most}), \
             and the counts did not move in {} s: the others wait for it. See where {pid} is \
             (`py-spy dump --pid {}` for Python){others}",
            most - launched,
            SECOND_LOOK.as_secs(),
            f.who.pid.map_or("PID".to_string(), |p| p.to_string())
        ),
        Trouble::State { what } => format!(
            "look at {w} first: {what}; its own output says why (NCCL_DEBUG=WARN){others}"
        ),
    }
}

fn who_json(w: &Who) -> Value {
    json!({"rank": w.rank, "pid": w.pid, "host": w.host, "gpu": w.gpu})
}

fn suspect_json(f: &Suspect) -> Value {
    let mut v = who_json(&f.who);
    v["communicator"] = json!(f.comm);
    match &f.trouble {
        Trouble::Missing { dead } => {
            v["kind"] = json!("missing");
            v["considered_dead"] = json!(dead);
        }
        Trouble::Error {
            what,
            remote,
            result,
        } => {
            v["kind"] = json!("error");
            v["error"] = json!(what);
            v["result"] = json!(result);
            v["remote"] = json!(remote);
        }
        Trouble::Behind { op, launched, most } => {
            v["kind"] = json!("behind");
            v["collective"] = json!(op);
            v["launched"] = json!(launched);
            v["most_launched"] = json!(most);
        }
        Trouble::State { what } => {
            v["kind"] = json!("state");
            v["state"] = json!(what);
        }
    }
    v
}

fn comm_json(c: &status::Comm) -> Value {
    let mut ranks = Vec::new();
    for r in &c.ranks {
        let mut x = who_json(&r.who);
        x["missing"] = json!(r.missing);
        x["async_error"] = json!(r.async_error);
        x["init_state"] = json!(r.init_state);
        x["aborted"] = json!(r.aborted);
        x["finalized"] = json!(r.finalized);
        let counts: serde_json::Map<String, Value> = r
            .counts
            .iter()
            .map(|(o, n)| (o.clone(), json!(n)))
            .collect();
        x["collective_counts"] = counts.into();
        ranks.push(x);
    }
    json!({"hash": c.hash, "size": c.size, "ranks": ranks})
}

fn hazard_json(q: Option<Question>, h: &Hazard) -> Value {
    let (a, b, c) = h.from;
    json!({
        "question": q.map(Question::words),
        "thread": format!("NVIDIA/nccl#{}", h.thread),
        "seen_on": h.seen,
        "from": format!("{a}.{b}.{c}"),
        "what": h.what,
    })
}

fn to_json(
    addr: &str,
    st: Option<&JobStatus>,
    v: &Diagnosis,
    asked: &Asked,
    line: &str,
    code: u8,
) -> Value {
    let verdict = match v {
        Diagnosis::Healthy => "healthy",
        Diagnosis::Moving(_) => "moving",
        Diagnosis::Look => "look",
        Diagnosis::Once(_) => "behind once",
        Diagnosis::Silent(_) => "no answer",
        Diagnosis::Withheld(_) => "not asked",
    };
    let look_at = match v {
        Diagnosis::Look | Diagnosis::Once(_) => {
            st.and_then(|s| s.suspects.first()).map(suspect_json)
        }
        _ => None,
    };
    let hazards: Vec<Value> = match v {
        Diagnosis::Withheld(each) => each
            .iter()
            .flat_map(|(q, hs)| hs.iter().map(|h| hazard_json(Some(*q), h)))
            .collect(),
        Diagnosis::Once(hs) => hs
            .iter()
            .map(|h| hazard_json(Some(Question::Again), h))
            .collect(),
        _ => Vec::new(),
    };
    let server = match &asked.servers {
        Ok(all) => json!({
            "pids": all.iter().map(|s| s.pid).collect::<Vec<_>>(),
            "name": all[0].name,
            "libraries": all[0].libs.iter().map(|(lib, v)| json!({
                "path": lib.to_string_lossy(),
                "nccl_version": v.as_ref().map(|v| v.to_string()),
            })).collect::<Vec<_>>(),
        }),
        Err(why) => json!({ "unknown": why }),
    };
    let mut out = json!({
        "addr": addr, "verdict": verdict, "exit": code, "message": line, "look_at": look_at,
        "server": server, "releases": release_words(&asked.releases),
        "sent": asked.sent,
        "hazards": hazards,
    });
    if let Diagnosis::Healthy = v {
        out["blind_spot"] = json!(BLIND_SPOT.trim_end());
    }
    let Some(st) = st else { return out };
    out["nccl_version"] = json!(st.nccl);
    out["format"] = json!(match st.format {
        Format::Json => "json",
        Format::Text => "text",
    });
    out["mended"] = json!(st.mended);
    out["communicators_count"] = json!(st.comms);
    out["ranks_count"] = json!(st.ranks);
    out["findings"] = st.suspects.iter().map(suspect_json).collect();
    out["communicators"] = st.detail.iter().map(comm_json).collect();
    if let Diagnosis::Moving(was) = v {
        out["behind_at_first_look"] = was.iter().map(suspect_json).collect();
    }
    out
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
