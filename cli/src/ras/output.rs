//! What `nccl-find ras` prints: the verdict, what the service said rank by
//! rank, who served it and what was asked, the hazards behind a question
//! not put, and the answer last; or all of it as JSON. Everything here is
//! worked out before; nothing is asked from here.

use serde_json::{json, Value};

use super::client::Format;
use super::place;
use super::status::{self, JobStatus, Suspect, Trouble, Who};
use super::{Asked, Diagnosis, SECOND_LOOK};
use crate::rules::ras::{Hazard, Question, Releases};

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
    for f in st.suspects.iter().take(SHOWN) {
        s.push_str(&format!("  {}: {}\n", who(&f.who), trouble(&f.trouble)));
    }
    let more = (st.suspects.len().saturating_sub(SHOWN) as u64).saturating_add(st.left_out);
    if more > 0 {
        s.push_str(&format!(
            "  … and {more} more finding(s), the less urgent (`--json` has the first {})\n",
            super::status::MAX_FINDINGS
        ));
    }
    s
}

/// The most findings printed as text.
const SHOWN: usize = 50;

/// A rank's trouble in a word or two, for a drain reason.
pub(super) fn short(t: &Trouble) -> &'static str {
    match t {
        Trouble::Missing { .. } => "missing",
        Trouble::Error { .. } => "error",
        Trouble::Behind { .. } => "behind",
        Trouble::State { .. } => "stuck",
    }
}

/// What the last line adds of the rank's node: its name in the
/// scheduler's words, and the line that takes it out.
pub(super) fn take_out(p: &place::Place) -> String {
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

/// Everything printed above the answer: the service's report where a rank
/// needs looking at, the rank's node and the lines that take it out, a
/// release that could not be read, and the hazards behind a question not
/// put.
pub(super) fn above(
    addr: &str,
    status: Option<&JobStatus>,
    v: &Diagnosis,
    asked: &Asked,
    place: Option<&place::Place>,
    code: u8,
) -> String {
    let mut s = String::new();
    if let (Some(st), 1) = (status, code) {
        s = details(addr, st, asked);
    }
    if let Some(p) = place {
        s.push_str(&format!("  its node: {}\n", p.said()));
        if let Some(t) = &p.take_out {
            s.push_str(&format!("  take it out: {t}\n"));
        }
        if let Some(n) = &p.next {
            s.push_str(&format!("  keep the next run off it: srun/sbatch {n}\n"));
        }
    }
    // The release could not be read: said, with what that left to ask.
    if let (Err(why), false) = (&asked.servers, asked.sent.is_empty()) {
        if code != 1 && !matches!(v, Diagnosis::Withheld(_)) {
            s.push_str(&format!(
                "note: the release of NCCL's RAS service at {addr} could not be read ({why}); \
                 asked what every release that answers so survives: {}\n",
                asked.sent.join(", then ")
            ));
        }
    }
    s.push_str(&hazard_lines(v, asked));
    s
}

/// What a healthy report cannot rule out.
const BLIND_SPOT: &str = "What RAS cannot see: a kernel stuck on the network, in a job whose \
ranks all launched the same collectives, looks healthy to it (NVIDIA/nccl#1730). If the job \
hangs all the same: see where each rank waits (`py-spy dump --pid PID`), torch's flight recorder \
(TORCH_NCCL_TRACE_BUFFER_SIZE=2000; it dumps on a timeout), and `nccl-find explain` on its logs.\n";

/// The answer: what to do first.
pub(super) fn last_line(
    addr: &str,
    st: Option<&JobStatus>,
    v: &Diagnosis,
    asked: &Asked,
) -> String {
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
            "OK: the job is moving: {} was behind at the first look, and the counts moved {} \
             later (NCCL {nccl} at {addr})",
            who(&was[0].who),
            seconds(asked.second.as_ref().and_then(|s| s.as_ref().ok()).copied())
        ),
        Diagnosis::Once(hs) => {
            let f = &st.suspects[0];
            let Trouble::Behind { op, launched, most } = &f.trouble else {
                return look_at(f, st.suspects.len(), None);
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
        _ => look_at(&st.suspects[0], st.suspects.len(), asked.second.as_ref()),
    }
}

/// A pause in words: `2 s`, `0.5 s`.
fn seconds(d: Option<std::time::Duration>) -> String {
    let d = d.unwrap_or(SECOND_LOOK);
    match d.subsec_millis() {
        0 => format!("{} s", d.as_secs()),
        _ => format!("{:.1} s", d.as_secs_f64()),
    }
}

fn look_at(
    f: &Suspect,
    all: usize,
    second: Option<&Result<std::time::Duration, String>>,
) -> String {
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
             {}: the others wait for it. See where {pid} is (`py-spy dump --pid {}` for \
             Python){others}",
            most - launched,
            match second {
                Some(Ok(d)) => format!("and the counts did not move in {}", seconds(Some(*d))),
                Some(Err(why)) => format!("and a second look got no answer ({why})"),
                None => "at the one look taken".to_string(),
            },
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

pub(super) fn to_json(
    addr: &str,
    st: Option<&JobStatus>,
    v: &Diagnosis,
    asked: &Asked,
    place: Option<&place::Place>,
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
        Diagnosis::Look | Diagnosis::Once(_) => st.and_then(|s| s.suspects.first()).map(|f| {
            let mut at = suspect_json(f);
            if let Some(p) = place {
                at["place"] = json!({
                    "scheduler": p.scheduler, "node": p.node, "said": p.said(),
                    "take_out": p.take_out, "exclude": p.next,
                });
            }
            at
        }),
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
    out["findings_left_out"] = json!(st.left_out);
    out["communicators"] = st.detail.iter().map(comm_json).collect();
    if let Diagnosis::Moving(was) = v {
        out["behind_at_first_look"] = was.iter().map(suspect_json).collect();
    }
    out
}
