//! From the lines the table knows to one answer: the cause, first in time
//! across every file (where the lines say when; else the most basic class,
//! by the order of `rules::failures::CLASSES`), with the ranks and hosts
//! that show it, the lines that show it, and the symptoms as its echoes.
//! Where ranks disagree on what must be the same (`agree`), that is the
//! cause; a hang is read by its sequence numbers (`watchdog`).

mod agree;
mod reach;
mod watchdog;

pub use watchdog::ranks_words;

use std::collections::{BTreeMap, BTreeSet};

use crate::explain::line::{Line, Stamp};
use crate::rules::failures::{self, Failure};
use crate::rules::fixes;
use crate::rules::messages::{self, Fact, Hit, Says};

/// A line the table knows, and where it came from.
#[derive(Debug, Clone)]
pub struct Event {
    pub input: usize,
    pub line: u64,
    /// The line as read.
    pub text: String,
    pub rank: Option<u32>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub time: Option<Stamp>,
    pub hit: Hit,
}

impl Event {
    pub fn new(input: usize, line: u64, text: &str, parsed: &Line, hit: Hit) -> Event {
        Event {
            input,
            line,
            text: text.to_string(),
            rank: parsed.rank,
            host: parsed.host.map(str::to_string),
            pid: parsed.pid,
            time: parsed.time,
            hit,
        }
    }

    fn fact(&self) -> Option<Fact> {
        match self.hit.says {
            Says::Fact(f) => Some(f),
            _ => None,
        }
    }

    /// The process it came from, as far as the line says.
    fn source(&self) -> Source {
        match (self.rank, &self.host, self.pid) {
            (Some(r), _, _) => Source::Rank(r),
            (None, Some(h), Some(p)) => Source::Process(h.clone(), p),
            (None, Some(h), None) => Source::Host(self.input, h.clone()),
            _ => Source::Input(self.input),
        }
    }
}

/// Where a line came from: a rank, a process, a host in one file, or a
/// file alone.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    Rank(u32),
    Process(String, u32),
    Host(usize, String),
    Input(usize),
}

/// A line quoted as evidence: its input, its number, the line, and who
/// printed it.
#[derive(Debug, Clone, PartialEq)]
pub struct Quote {
    pub input: usize,
    pub line: u64,
    pub text: String,
    pub printer: &'static str,
}

impl Quote {
    fn of(e: &Event) -> Quote {
        Quote {
            input: e.input,
            line: e.line,
            text: e.text.clone(),
            printer: e.hit.row.printer.id(),
        }
    }
}

/// What the logs come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A failure or a hang, and its cause.
    Cause,
    /// A failure or a hang, and no line that says why.
    NoCause,
    /// A job that ended well, as far as the logs say.
    NoFailure,
}

impl Verdict {
    pub fn id(self) -> &'static str {
        match self {
            Verdict::Cause => "cause",
            Verdict::NoCause => "no-cause",
            Verdict::NoFailure => "no-failure",
        }
    }
}

/// The echoes of the cause: the symptoms, and the cause's own lines past
/// the first few.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Echoes {
    pub lines: u64,
    pub ranks: BTreeSet<u32>,
    pub classes: BTreeSet<&'static str>,
}

/// The answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub verdict: Verdict,
    pub failure: Option<Failure>,
    /// The cause, after who shows it.
    pub what: String,
    /// Who shows it: ranks and hosts.
    pub ranks: Vec<u32>,
    pub hosts: Vec<String>,
    /// The files that show it, where no rank or host does.
    pub inputs: Vec<usize>,
    pub evidence: Vec<Quote>,
    pub echoes: Echoes,
    pub fix: String,
    /// What else the logs show, said in passing.
    pub notes: Vec<String>,
}

/// The fields `--here` may add for the fix: this node's interface toward
/// the peer (`route`), its network plugins (`plugins_here`), its
/// GPUDirect RDMA module (`peermem_here`).
pub const HERE: [&str; 3] = ["route", "plugins_here", "peermem_here"];

/// What `--here` adds: a field of [`HERE`], from the cause's fields.
pub type Extra<'a> = &'a dyn Fn(&str, &BTreeMap<&'static str, String>) -> Option<String>;

/// A field is said in the verdict to this many bytes.
const FIELD_SHOWN: usize = 120;

/// At most this many lines of one cause are quoted.
const QUOTED: usize = 3;

/// The answer of `events` (in the order read: file by file, line by
/// line), with each input's count of lines (`ends`).
pub fn judge(events: &[Event], ends: &[u64], extra: Extra) -> Answer {
    let events = with_ranks(events);
    let mut a = judged(&events, ends, extra);
    a.notes.extend(fixed_later(&a, &events));
    a
}

fn judged(events: &[Event], ends: &[u64], extra: Extra) -> Answer {
    let failed = events.iter().any(|e| {
        matches!(e.hit.says, Says::Cause(_) | Says::Symptom(_))
            || matches!(e.fact(), Some(Fact::Traceback | Fact::Crash))
            || (e.fact() == Some(Fact::Exited) && e.hit.field("exit").is_some_and(|x| x != "0"))
    });
    let by_class = direct_causes(events);
    let setup = setup_causes(events, &by_class);
    // What the setup shows is a cause where the job failed or never
    // finished setting up; in a job that did, a note.
    if !failed && events.iter().any(|e| e.fact() == Some(Fact::InitDone)) {
        let mut a = no_failure(events);
        a.notes.extend(setup.iter().map(|(f, evs, fields)| {
            let field = |n: &str| fields.get(n).cloned();
            format!(
                "the logs show {}: {} (line {} of input {})",
                f.class().id,
                failures::render(f.class().what, &field),
                evs[0].line,
                evs[0].input + 1
            )
        }));
        return a;
    }
    let mut causes = setup;
    for (f, evs) in by_class {
        let fields = fields_of(evs[0], events);
        causes.push((f, evs, fields));
    }
    if causes.is_empty() && !failed {
        return match stopped_in_setup(events, ends) {
            Some(e) => {
                let (v, f) = (Verdict::NoCause, Failure::SetupHang);
                answer(v, f, &[e], BTreeMap::new(), events, extra)
            }
            None => no_failure(events),
        };
    }
    match pick(&causes) {
        Some(i) => {
            let (f, evs, fields) = causes.swap_remove(i);
            answer(Verdict::Cause, f, &evs, fields, events, extra)
        }
        None => no_cause(events, extra),
    }
}

/// The lines that name a cause, by class (in context: a completion error
/// that ran out of retries on RoCE is its GID's).
fn direct_causes(events: &[Event]) -> BTreeMap<Failure, Vec<&Event>> {
    let roce = events
        .iter()
        .any(|e| e.fact() == Some(Fact::IbDevices) && e.text.contains("/RoCE"));
    let mut by_class: BTreeMap<Failure, Vec<&Event>> = BTreeMap::new();
    for e in events {
        if let Says::Cause(f) = e.hit.says {
            by_class.entry(in_context(f, e, roce)).or_default().push(e);
        }
    }
    by_class
}

/// What the setup shows: ranks that differ, interfaces that reach no
/// other host, one name on two nodes.
fn setup_causes<'a>(
    events: &'a [Event],
    by_class: &BTreeMap<Failure, Vec<&Event>>,
) -> Vec<agree::Difference<'a>> {
    // Interfaces of other names on other nodes are a cause only where the
    // failure is the network's.
    let network = by_class
        .keys()
        .all(|f| matches!(f, Failure::Unreachable | Failure::Refused | Failure::IbLink));
    let mut setup: Vec<agree::Difference> = agree::disagreements(events)
        .into_iter()
        .filter(|(_, weak)| !weak || network)
        .map(|(d, _)| d)
        .collect();
    setup.extend(reach::unreachable_ifaces(events));
    // One name on two nodes: NCCL takes them for one, and finds two ranks
    // on one GPU, or another node's shared memory or GPU not there.
    let one_node = by_class.keys().any(|f| {
        matches!(
            f,
            Failure::DuplicateGpu | Failure::Shm | Failure::PeerAccess | Failure::CudaError
        )
    });
    if one_node {
        setup.extend(agree::same_hostname(events));
    }
    setup
}

/// A later release that fixed a bug on the path the answer names, where
/// the logs say which NCCL ran (one release on every rank).
fn fixed_later(a: &Answer, events: &[Event]) -> Option<String> {
    let f = a.failure?;
    let versions: BTreeSet<&str> = events
        .iter()
        .filter_map(|e| e.hit.field("version"))
        .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()))
        .map(|v| v.split(['+', ' ']).next().unwrap_or(v))
        .collect();
    let [running] = versions.into_iter().collect::<Vec<_>>()[..] else {
        return None;
    };
    let found = fixes::after(running, f.class().topics, 2);
    found.first()?;
    let said: Vec<String> = found
        .iter()
        .map(|(v, fix)| format!("{v}: \"{fix}\""))
        .collect();
    Some(format!(
        "NCCL {running} ran; a later release's notes say it fixed a bug on this path: {}",
        said.join("; ")
    ))
}

/// Ranks for the lines that lack one, where the file or the process says
/// it: a file of one rank, or a process whose communicator said its rank.
fn with_ranks(events: &[Event]) -> Vec<Event> {
    let mut by_input: BTreeMap<usize, BTreeSet<u32>> = BTreeMap::new();
    let mut by_pid: BTreeMap<(String, u32), u32> = BTreeMap::new();
    for e in events {
        if let Some(r) = e.rank {
            by_input.entry(e.input).or_default().insert(r);
        }
        if let (Some(Fact::InitStart | Fact::InitDone), Some(h), Some(p)) =
            (e.fact(), &e.host, e.pid)
        {
            if let Some(r) = e.hit.field("rank").and_then(|r| r.parse().ok()) {
                by_pid.entry((h.clone(), p)).or_insert(r);
            }
        }
    }
    events
        .iter()
        .cloned()
        .map(|mut e| {
            if e.rank.is_none() {
                e.rank = match (&e.host, e.pid) {
                    (Some(h), Some(p)) => by_pid.get(&(h.clone(), p)).copied(),
                    _ => None,
                }
                .or_else(|| {
                    let set = by_input.get(&e.input)?;
                    (set.len() == 1).then(|| *set.iter().next().unwrap())
                });
            }
            e
        })
        .collect()
}

/// The line where a log ends with NCCL setting up: its version line (or
/// a communicator's start) among the last lines of its file, no
/// communicator ready, nothing after it. A job that ended well prints on
/// after NCCL's version line; one that hung in NCCL's setup, at
/// `NCCL_DEBUG=WARN`, prints nothing more.
fn stopped_in_setup<'a>(events: &'a [Event], ends: &[u64]) -> Option<&'a Event> {
    if events.iter().any(|e| e.fact() == Some(Fact::InitDone)) {
        return None;
    }
    events.iter().find(|e| {
        matches!(e.fact(), Some(Fact::Version | Fact::InitStart))
            && ends
                .get(e.input)
                .is_some_and(|&end| end.saturating_sub(e.line) < 2)
    })
}

/// A cause's class where the lines around it say more: a completion
/// error that timed out on RoCE is its GID's.
fn in_context(f: Failure, e: &Event, roce: bool) -> Failure {
    let retry = e
        .hit
        .field("status")
        .is_some_and(|s| s == "12" || s.contains("retry"));
    match f {
        Failure::IbLink if roce && retry => Failure::IbGid,
        f => f,
    }
}

/// The cause to name: the first in time where every candidate says when;
/// else the most basic class.
fn pick(causes: &[agree::Difference]) -> Option<usize> {
    if causes.is_empty() {
        return None;
    }
    let timed: Vec<Option<Stamp>> = causes
        .iter()
        .map(|(_, evs, _)| {
            evs.iter()
                .filter_map(|e| e.time)
                .reduce(|a, b| if b.before(&a) { b } else { a })
        })
        .collect();
    if timed.iter().all(Option::is_some) && causes.len() > 1 {
        let mut best = 0;
        for i in 1..causes.len() {
            if timed[i].unwrap().before(&timed[best].unwrap()) {
                best = i;
            }
        }
        return Some(best);
    }
    (0..causes.len()).min_by_key(|&i| causes[i].0)
}

/// The fields a cause's words may use: its line's, and what its process
/// said before (the interface it took, `NCCL_SOCKET_IFNAME`).
fn fields_of(e: &Event, events: &[Event]) -> BTreeMap<&'static str, String> {
    let mut out: BTreeMap<&'static str, String> = BTreeMap::new();
    for (k, v) in &e.hit.fields {
        out.insert(k, v.clone());
    }
    let same = |o: &&Event| o.source() == e.source() || (o.input == e.input && o.host == e.host);
    for o in events.iter().filter(same) {
        match o.fact() {
            Some(Fact::Bootstrap) if !out.contains_key("iface") => {
                if let Some(i) = o.hit.field("ifaces").and_then(first_iface) {
                    out.insert("iface", i);
                }
            }
            Some(Fact::Ifname) => {
                if let Some(v) = o.hit.field("ifname") {
                    out.insert("ifname", v.to_string());
                }
            }
            _ => {}
        }
    }
    for v in out.values_mut() {
        if v.len() > FIELD_SHOWN {
            let mut cut = FIELD_SHOWN;
            while !v.is_char_boundary(cut) {
                cut -= 1;
            }
            v.truncate(cut);
            v.push('…');
        }
    }
    if let Some(p) = out.get("peer").cloned() {
        out.insert("peer", p.split('<').next().unwrap_or(&p).to_string());
    }
    if let Some(sym) = out.get("symbol").cloned() {
        if let Some(v) = nccl_find::explain::introduced_in(&sym) {
            out.insert("since", format!("it came in NCCL {v}"));
        }
    }
    if let (Some(a), Some(b)) = (out.get("local"), out.get("remote")) {
        out.insert(
            "versions",
            format!(
                "{a} here, {b} on {}",
                out.get("peer").map_or("a peer", |p| p)
            ),
        );
    }
    if let (Some(b), Some(r)) = (out.get("built"), out.get("running")) {
        out.insert("since", format!("built with NCCL {b}, running {r}"));
    }
    if let Some(s) = out.get("status").cloned() {
        if let Some(words) = ib_status(&s) {
            out.insert("status", format!("status {s}: {words}"));
        }
    }
    if let (Some(a), Some(b), Some(d)) = (out.get("rank_a"), out.get("rank_b"), out.get("device")) {
        let (ranks, device) = (format!("rank {a} and rank {b}"), format!("CUDA device {d}"));
        out.insert("ranks", ranks);
        out.insert("device", device);
    }
    out
}

/// The first interface of NCCL's list (` [0]eth0:10.0.0.1<0> [1]…` or
/// ` eth0:10.0.0.1<0>`), as `eth0 (10.0.0.1)`.
pub fn first_iface(list: &str) -> Option<String> {
    let first = list.split_whitespace().next()?;
    let first = first.split_once(']').map_or(first, |(_, r)| r);
    let (name, addr) = first.split_once(':')?;
    let addr = addr.rsplit_once('<').map_or(addr, |(a, _)| a);
    Some(format!("{name} ({addr})"))
}

/// What an `ibv_wc_status` number means, where it is one NCCL's users meet.
fn ib_status(code: &str) -> Option<&'static str> {
    Some(match code.trim().parse::<u32>().ok()? {
        4 => "local protection error",
        5 => "work request flushed",
        9 => "remote invalid request",
        10 => "remote access error",
        11 => "remote operation error",
        12 => "transport retry counter exceeded",
        13 => "RNR retry counter exceeded",
        _ => return None,
    })
}

/// The answer for a cause of class `f`, shown by `evs`.
fn answer(
    verdict: Verdict,
    f: Failure,
    evs: &[&Event],
    mut fields: BTreeMap<&'static str, String>,
    events: &[Event],
    extra: Extra,
) -> Answer {
    for name in HERE {
        if let Some(v) = extra(name, &fields) {
            fields.insert(name, v);
        }
    }
    let field = |n: &str| fields.get(n).cloned();
    let class = f.class();
    let (ranks, hosts, inputs) = who(evs);
    let evidence = evidence(f, evs, events);
    let echoes = echoes(f, events, &evidence);
    Answer {
        verdict,
        failure: Some(f),
        what: failures::render(class.what, &field),
        ranks,
        hosts,
        inputs,
        evidence,
        echoes,
        fix: failures::render(class.fix, &field),
        notes: Vec::new(),
    }
}

/// The lines that show a cause of class `f`: first the line that set the
/// scene (the interface NCCL took), then one for each process and
/// message (for ranks that differ, each line), a few at most.
fn evidence(f: Failure, evs: &[&Event], events: &[Event]) -> Vec<Quote> {
    let mut evidence: Vec<Quote> = Vec::new();
    if matches!(
        f,
        Failure::Unreachable | Failure::Refused | Failure::NoInterface
    ) {
        let src = evs[0].source();
        let scene = |o: &&Event| {
            matches!(o.fact(), Some(Fact::Bootstrap | Fact::Ifname)) && o.source() == src
        };
        evidence.extend(events.iter().find(scene).map(Quote::of));
    }
    let differ = matches!(
        f,
        Failure::VersionMismatch
            | Failure::PluginMismatch
            | Failure::IfaceMismatch
            | Failure::SameHostname
    );
    let mut quoted = BTreeSet::new();
    for e in evs {
        if evidence.len() > QUOTED {
            break;
        }
        let key = match differ {
            true => (Source::Input(e.input), e.line as usize),
            false => (e.source(), e.hit.row as *const _ as usize),
        };
        if quoted.insert(key) && !quoted_line(&evidence, e) {
            evidence.push(Quote::of(e));
        }
    }
    evidence
}

/// Whether `e` is one of the lines quoted.
fn quoted_line(evidence: &[Quote], e: &Event) -> bool {
    evidence
        .iter()
        .any(|q| q.input == e.input && q.line == e.line)
}

/// The symptoms, and causes of other classes, that were not quoted.
fn echoes(f: Failure, events: &[Event], evidence: &[Quote]) -> Echoes {
    let mut echoes = Echoes::default();
    for e in events {
        let g = match e.hit.says {
            Says::Symptom(g) => g,
            Says::Cause(g) if g != f => g,
            _ => continue,
        };
        if !quoted_line(evidence, e) {
            echoes.lines += 1;
            echoes.ranks.extend(e.rank);
            echoes.classes.insert(g.class().id);
        }
    }
    echoes
}

/// The ranks, hosts and inputs of `evs`.
fn who(evs: &[&Event]) -> (Vec<u32>, Vec<String>, Vec<usize>) {
    let ranks: BTreeSet<u32> = evs.iter().filter_map(|e| e.rank).collect();
    let hosts: BTreeSet<String> = evs.iter().filter_map(|e| e.host.clone()).collect();
    let inputs: BTreeSet<usize> = evs.iter().map(|e| e.input).collect();
    (
        ranks.into_iter().collect(),
        hosts.into_iter().collect(),
        inputs.into_iter().collect(),
    )
}

/// A failure without a line that says why: the symptom that says most
/// (a hang's sequence numbers; NCCL's result; a peer gone), and how to
/// get the cause.
fn no_cause(events: &[Event], extra: Extra) -> Answer {
    let mut a = no_cause_of(events, extra);
    let warned: Vec<&str> = events
        .iter()
        .filter(|e| e.fact() == Some(Fact::Warning))
        .filter_map(|e| e.hit.field("words"))
        .collect();
    if let Some(w) = warned.first() {
        a.notes.push(format!(
            "NCCL warned \"{w}\"{}, a warning nccl-find has no cause for",
            match warned.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            }
        ));
    }
    a
}

fn no_cause_of(events: &[Event], extra: Extra) -> Answer {
    if let Some(a) = watchdog::hang(events, extra) {
        return a;
    }
    let symptoms: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e.hit.says, Says::Symptom(_)))
        .collect();
    // NCCL's result, in the words a framework printed: a remote error is a
    // peer gone.
    let class_of = |e: &Event| match e.hit.says {
        Says::Symptom(Failure::NcclError) => {
            match e.hit.field("words").and_then(messages::result_by_words) {
                Some(r) if r.name == "ncclRemoteError" => Failure::RemoteError,
                _ => Failure::NcclError,
            }
        }
        Says::Symptom(f) => f,
        _ => Failure::NcclError,
    };
    // NCCL's bare result says least: any other symptom first.
    let rank = |f: Failure| (f == Failure::NcclError, f);
    if let Some(f) = symptoms
        .iter()
        .map(|e| class_of(e))
        .min_by_key(|f| rank(*f))
    {
        let evs: Vec<&Event> = symptoms
            .iter()
            .copied()
            .filter(|e| class_of(e) == f)
            .collect();
        let mut fields = fields_of(evs[0], events);
        if let Some(w) = fields.get("words").cloned() {
            let w = w
                .split(" (run with")
                .next()
                .unwrap_or(&w)
                .trim_end_matches(['.', ',']);
            fields.insert("words", w.to_string());
        }
        return answer(Verdict::NoCause, f, &evs, fields, events, extra);
    }
    // A traceback, a crash or an exit, and nothing of NCCL's.
    let first = events
        .iter()
        .find(|e| matches!(e.fact(), Some(Fact::Traceback | Fact::Crash | Fact::Exited)))
        .expect("a failure was seen");
    let (ranks, hosts, inputs) = who(&[first]);
    Answer {
        verdict: Verdict::NoCause,
        failure: None,
        what: "the job failed, and no line of NCCL's or of the framework's says why NCCL would be the cause".into(),
        ranks,
        hosts,
        inputs,
        evidence: vec![Quote::of(first)],
        echoes: Echoes::default(),
        fix: "read the traceback's last lines for the job's own error; where NCCL is in doubt, rerun with NCCL_DEBUG=INFO, or nccl-find smoke under the same launcher".into(),
        notes: Vec::new(),
    }
}

/// A job that shows no failure.
fn no_failure(events: &[Event]) -> Answer {
    let ranks: BTreeSet<u32> = events.iter().filter_map(|e| e.rank).collect();
    let versions: BTreeSet<&str> = events
        .iter()
        .filter(|e| e.fact() == Some(Fact::Version))
        .filter_map(|e| e.hit.field("version"))
        .collect();
    let mut what = String::from("the logs show no failure");
    if !versions.is_empty() {
        let v: Vec<&str> = versions.into_iter().collect();
        what.push_str(&format!(" (NCCL {}", v.join(", ")));
        if !ranks.is_empty() {
            what.push_str(&format!(
                ", {} rank{}",
                ranks.len(),
                if ranks.len() == 1 { "" } else { "s" }
            ));
        }
        what.push(')');
    }
    Answer {
        verdict: Verdict::NoFailure,
        failure: None,
        what,
        ranks: Vec::new(),
        hosts: Vec::new(),
        inputs: Vec::new(),
        evidence: Vec::new(),
        echoes: Echoes::default(),
        fix: "if the job hung with no line at all, rerun it with NCCL_DEBUG=INFO, or nccl-find smoke under the same launcher".into(),
        notes: Vec::new(),
    }
}

#[cfg(test)]
mod tests;
