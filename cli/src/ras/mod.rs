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
pub(crate) mod status;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::facts::conf::{self, ConfFacts};
use crate::rules::ras;
use crate::rules::settings::InForce;
use crate::style;
use client::{AskError, Format};
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
    /// The service could not be asked: why, in one line.
    Silent(String),
}

/// Runs `nccl-find ras`.
pub(crate) fn run(args: &Args, color: style::When) -> ExitCode {
    let addr = address(args, settings().value("NCCL_RAS_ADDR"));
    let deadline = Instant::now() + Duration::from_secs(args.timeout.clamp(1, 3600));
    let (status, diagnosis) = look(&addr, deadline, args.text);
    let line = last_line(&addr, status.as_ref(), &diagnosis);
    let code = match diagnosis {
        Diagnosis::Healthy | Diagnosis::Moving(_) => 0,
        Diagnosis::Look => 1,
        Diagnosis::Silent(_) => 2,
    };
    if args.json {
        let v = to_json(&addr, status.as_ref(), &diagnosis, &line, code);
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("JSON from plain values")
        );
        return ExitCode::from(code);
    }
    match (&status, code) {
        (Some(st), 1) => print!("{}", style::human(&details(&addr, st), color)),
        (Some(st), _) if st.fell_back.is_some() => {
            print!("{}", style::human(&details(&addr, st), color))
        }
        _ => {}
    }
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

/// The first look, and a second where ranks were only behind.
fn look(addr: &str, deadline: Instant, text: bool) -> (Option<JobStatus>, Diagnosis) {
    let first = match ask(addr, deadline, text) {
        Ok(s) => s,
        Err(e) => return (None, Diagnosis::Silent(not_asked(addr, e))),
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
        return (Some(first), v);
    }
    // Room for the second conversation: half of what is left at most.
    let pause = SECOND_LOOK.min(deadline.saturating_duration_since(Instant::now()) / 2);
    std::thread::sleep(pause);
    match ask(addr, deadline, text) {
        // Moving: nothing but ranks behind at the second look either, and
        // other counts (a rank gone between the looks is no progress).
        Ok(second) if behind_only(&second) && counts_moved(&first, &second) => {
            (Some(second), Diagnosis::Moving(first.suspects))
        }
        Ok(second) => (Some(second), Diagnosis::Look),
        // The first look stands when the second cannot be had.
        Err(_) => (Some(first), Diagnosis::Look),
    }
}

/// One conversation, its report read; a report that cannot be read is
/// [`AskError::Broken`]. Why nothing answered is worked out (from `/proc`)
/// only where it is shown, by [`not_asked`].
fn ask(addr: &str, deadline: Instant, text: bool) -> Result<JobStatus, AskError> {
    let answer = client::ask(addr, deadline, text)?;
    match status::read(answer.format, &answer.body) {
        Ok(st) => Ok(st),
        // A JSON report that does not parse: the text report instead.
        Err(e) if answer.format == Format::Json => match ask(addr, deadline, true) {
            Ok(mut st) => {
                st.fell_back = Some(e);
                Ok(st)
            }
            Err(again) => Err(AskError::Broken(format!(
                "the RAS service at {addr} answered, but {e}; asked for text, {}",
                not_asked(addr, again)
            ))),
        },
        Err(e) => {
            let (host, port) = ras::split_addr(addr);
            let port = port.map_or(String::new(), |p| format!(" {p}"));
            Err(AskError::Broken(format!(
                "the RAS service at {addr} answered, but {e}: see its answer with `nc {host}{port}`"
            )))
        }
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
        Trouble::Error { what, remote: true } => {
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
fn details(addr: &str, st: &JobStatus) -> String {
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
    if let Some(e) = &st.fell_back {
        s.push_str(&format!("  (read from its text report: {e})\n"));
    }
    for f in &st.suspects {
        s.push_str(&format!("  {}: {}\n", who(&f.who), trouble(&f.trouble)));
    }
    s
}

/// The answer: what to do first.
fn last_line(addr: &str, st: Option<&JobStatus>, v: &Diagnosis) -> String {
    let st = match (st, v) {
        (Some(st), Diagnosis::Healthy | Diagnosis::Moving(_) | Diagnosis::Look) => st,
        (_, Diagnosis::Silent(why)) => return format!("cannot ask NCCL about the job: {why}"),
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
        Trouble::Error { what, remote } => {
            v["kind"] = json!("error");
            v["error"] = json!(what);
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

fn to_json(addr: &str, st: Option<&JobStatus>, v: &Diagnosis, line: &str, code: u8) -> Value {
    let verdict = match v {
        Diagnosis::Healthy => "healthy",
        Diagnosis::Moving(_) => "moving",
        Diagnosis::Look => "look",
        Diagnosis::Silent(_) => "no answer",
    };
    let look_at = match v {
        Diagnosis::Look => st.and_then(|s| s.suspects.first()).map(suspect_json),
        _ => None,
    };
    let mut out = json!({
        "addr": addr, "verdict": verdict, "exit": code, "message": line, "look_at": look_at,
    });
    let Some(st) = st else { return out };
    out["nccl_version"] = json!(st.nccl);
    out["format"] = json!(match st.format {
        Format::Json => "json",
        Format::Text => "text",
    });
    out["mended"] = json!(st.mended);
    out["json_unread"] = json!(st.fell_back);
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
