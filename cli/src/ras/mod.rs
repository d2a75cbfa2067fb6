//! `nccl-find ras`: asks NCCL's own RAS service (NCCL 2.24 and newer, on by
//! default) about the running job, and names the rank to look at: one
//! whose process is gone or does not answer, one with an error of its own,
//! or one that launched fewer collectives than the others and stays so.
//! Exit 0 for a healthy job (or one that is moving), 1 when a rank needs
//! looking at, 2 when the service could not be asked.

pub(crate) mod client;
pub(crate) mod listeners;
pub(crate) mod status;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::style;
use client::{AskError, Format};
use status::{Finding, Status, Trouble, Who};

/// `nccl-find ras`'s flags.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Where the job's RAS service listens (default: NCCL_RAS_ADDR, else
    /// localhost:28028)
    #[arg(long, value_name = "HOST:PORT")]
    addr: Option<String>,
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
enum Verdict {
    /// Nothing needs looking at.
    Healthy,
    /// Ranks were behind at the first look, and the counts moved by the
    /// second.
    Moving(Vec<Finding>),
    /// A rank to look at (the first finding).
    Look,
    /// The service could not be asked: why, in one line.
    Silent(String),
}

/// Runs `nccl-find ras`.
pub(crate) fn run(args: &Args, color: style::When) -> ExitCode {
    let own_addr = std::env::var("NCCL_RAS_ADDR")
        .ok()
        .filter(|a| !a.is_empty());
    let addr = args
        .addr
        .clone()
        .or(own_addr)
        .unwrap_or(client::DEFAULT_ADDR.into());
    let addr = nccl_rendezvous::untrusted::shown(&addr, 200);
    let deadline = Instant::now() + Duration::from_secs(args.timeout.clamp(1, 3600));
    let (status, verdict) = look(&addr, deadline, args.text);
    let line = last_line(&addr, status.as_ref(), &verdict);
    let code = match verdict {
        Verdict::Healthy | Verdict::Moving(_) => 0,
        Verdict::Look => 1,
        Verdict::Silent(_) => 2,
    };
    if args.json {
        let v = to_json(&addr, status.as_ref(), &verdict, &line, code);
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("JSON from plain values")
        );
    } else {
        if let Some(st) = &status {
            print!("{}", style::human(&summary(&addr, st), color));
        }
        match code {
            0 => println!("{line}"),
            _ => style::complain(&line),
        }
    }
    ExitCode::from(code)
}

/// The first look, and a second where ranks were only behind.
fn look(addr: &str, deadline: Instant, text: bool) -> (Option<Status>, Verdict) {
    let first = match ask(addr, deadline, text) {
        Ok(s) => s,
        Err(why) => return (None, Verdict::Silent(why)),
    };
    let behind_only = !first.findings.is_empty()
        && first
            .findings
            .iter()
            .all(|f| matches!(f.trouble, Trouble::Behind { .. }));
    if !behind_only {
        let v = if first.findings.is_empty() {
            Verdict::Healthy
        } else {
            Verdict::Look
        };
        return (Some(first), v);
    }
    // Room for the second conversation: half of what is left at most.
    let pause = SECOND_LOOK.min(deadline.saturating_duration_since(Instant::now()) / 2);
    std::thread::sleep(pause);
    match ask(addr, deadline, text) {
        Ok(second) if second.findings.is_empty() || counts_moved(&first, &second) => {
            (Some(second), Verdict::Moving(first.findings))
        }
        Ok(second) => (Some(second), Verdict::Look),
        // The first look stands when the second cannot be had.
        Err(_) => (Some(first), Verdict::Look),
    }
}

fn ask(addr: &str, deadline: Instant, text: bool) -> Result<Status, String> {
    match client::ask(addr, deadline, text) {
        Ok(a) => match status::read(a.format, &a.body) {
            Ok(st) => Ok(st),
            // A JSON report that does not parse: the text report instead.
            Err(e) if a.format == Format::Json => match ask(addr, deadline, true) {
                Ok(mut st) => {
                    st.fell_back = Some(e);
                    Ok(st)
                }
                Err(again) => Err(format!(
                    "the RAS service at {addr} answered, but {e}; asked for text, {again}"
                )),
            },
            Err(e) => Err(format!(
                "the RAS service at {addr} answered, but {e}: see its answer with `nc {}`",
                addr.replace(':', " ")
            )),
        },
        Err(AskError::Unreachable(why)) => {
            let procs = listeners::nccl_processes();
            let own = std::env::var("NCCL_RAS_ENABLE").ok();
            Err(listeners::why_silent(addr, &procs, own.as_deref(), &why))
        }
        Err(AskError::Slow(why)) => Err(format!(
            "NCCL's RAS service did not answer in time: {why}. Its node may be overloaded, or the \
             address ({addr}) leads elsewhere; give it longer with --timeout"
        )),
        Err(AskError::NotRas(why) | AskError::Broken(why)) => Err(why),
    }
}

/// Whether any rank's collective counts differ between two looks.
fn counts_moved(a: &Status, b: &Status) -> bool {
    let behind = |s: &Status| -> Vec<(Option<u64>, String, u64, u64)> {
        s.findings
            .iter()
            .filter_map(|f| match &f.trouble {
                Trouble::Behind { op, launched, most } => {
                    Some((f.who.rank, op.clone(), *launched, *most))
                }
                _ => None,
            })
            .collect()
    };
    behind(a) != behind(b)
}

fn who(w: &Who) -> String {
    let mut s = match w.rank {
        Some(r) => format!("rank {r} ("),
        None => "a process (".to_string(),
    };
    if let Some(p) = w.pid {
        s.push_str(&format!("process {p} "));
    }
    s.push_str(&format!("on {}", w.host));
    if let Some(g) = w.gpu {
        s.push_str(&format!(", GPU {g}"));
    }
    s.push(')');
    s
}

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
        Trouble::Behind { op, launched, most } => {
            format!("launched {op} {launched} time(s), the others up to {most}")
        }
    }
}

/// The lines before the answer: what the service said, rank by rank.
fn summary(addr: &str, st: &Status) -> String {
    let format = match st.format {
        Format::Json => "JSON",
        Format::Text => "text",
    };
    let mut s = format!(
        "NCCL's RAS service at {addr} (NCCL {}, {format} report): {} communicator(s), {} rank(s)\n",
        st.nccl.as_deref().unwrap_or("?"),
        st.comms,
        st.ranks
    );
    if let Some(e) = &st.fell_back {
        s.push_str(&format!("  (read from its text report: {e})\n"));
    }
    for f in &st.findings {
        s.push_str(&format!("  {}: {}\n", who(&f.who), trouble(&f.trouble)));
    }
    s
}

/// The answer: what to do first.
fn last_line(addr: &str, st: Option<&Status>, v: &Verdict) -> String {
    let st = match (st, v) {
        (_, Verdict::Silent(why)) => return format!("cannot ask NCCL about the job: {why}"),
        (Some(st), _) => st,
        (None, _) => unreachable!("a verdict other than Silent comes with a status"),
    };
    let nccl = st.nccl.as_deref().unwrap_or("?");
    match v {
        Verdict::Healthy => format!(
            "OK: {} communicator(s), {} rank(s), every rank answering, none behind, no errors (NCCL {nccl} at {addr})",
            st.comms, st.ranks
        ),
        Verdict::Moving(was) => format!(
            "OK: the job is moving: {} was behind at the first look, and the counts moved {} s later (NCCL {nccl} at {addr})",
            who(&was[0].who),
            SECOND_LOOK.as_secs()
        ),
        _ => look_at(&st.findings[0], st.findings.len()),
    }
}

fn look_at(f: &Finding, all: usize) -> String {
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
            "look at {w} first: NCCL has no data from it, so {pid} is gone or stuck, and the job cannot \
             go on without it. Check whether it still runs, and why it ended (its output; `dmesg` for \
             the out-of-memory killer){others}"
        ),
        Trouble::Error { what, .. } => format!(
            "look at {w} first: it reported {what}; its own output says why (run with NCCL_DEBUG=WARN \
             to see NCCL's words){others}"
        ),
        Trouble::Behind { op, launched, most } => format!(
            "look at {w} first: it launched {op} {launched} time(s), the others up to {most}, and the \
             counts did not move in {} s: the others wait for it. See where {pid} is \
             (`py-spy dump --pid {}` for Python){others}",
            SECOND_LOOK.as_secs(),
            f.who.pid.map_or("PID".to_string(), |p| p.to_string())
        ),
    }
}

fn who_json(w: &Who) -> Value {
    json!({"rank": w.rank, "pid": w.pid, "host": w.host, "gpu": w.gpu})
}

fn finding_json(f: &Finding) -> Value {
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
    }
    v
}

fn to_json(addr: &str, st: Option<&Status>, v: &Verdict, line: &str, code: u8) -> Value {
    let verdict = match v {
        Verdict::Healthy => "healthy",
        Verdict::Moving(_) => "moving",
        Verdict::Look => "look",
        Verdict::Silent(_) => "no answer",
    };
    let mut out = json!({
        "addr": addr,
        "verdict": verdict,
        "exit": code,
        "message": line,
        "look_at": st.and_then(|s| s.findings.first()).filter(|_| matches!(v, Verdict::Look)).map(finding_json),
    });
    if let Some(st) = st {
        out["nccl_version"] = json!(st.nccl);
        out["format"] = json!(match st.format {
            Format::Json => "json",
            Format::Text => "text",
        });
        out["mended"] = json!(st.mended);
        out["json_unread"] = json!(st.fell_back);
        out["communicators_count"] = json!(st.comms);
        out["ranks_count"] = json!(st.ranks);
        out["findings"] = st.findings.iter().map(finding_json).collect();
        out["communicators"] = st
            .detail
            .iter()
            .map(|c| {
                let ranks: Vec<Value> = c
                    .ranks
                    .iter()
                    .map(|r| {
                        let mut x = who_json(&r.who);
                        x["missing"] = json!(r.missing);
                        x["async_error"] = json!(r.async_error.max(0));
                        x["collective_counts"] = r
                            .counts
                            .iter()
                            .map(|(o, n)| (o.clone(), json!(n)))
                            .collect::<serde_json::Map<_, _>>()
                            .into();
                        x
                    })
                    .collect();
                json!({"hash": c.hash, "size": c.size, "ranks": ranks})
            })
            .collect();
        if let Verdict::Moving(was) = v {
            out["behind_at_first_look"] = was.iter().map(finding_json).collect();
        }
    }
    out
}
