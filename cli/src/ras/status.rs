//! What NCCL's RAS report says, read into one shape whichever format it
//! came in, and the verdict: which rank to look at, and why. As NCCL's own
//! report judges: a rank NCCL has no data from, a result code other than
//! success and "in progress" (at init or later), a communicator not running
//! as the others' are, and collective counts that differ. A rank that is
//! gone outranks the errors it causes in the others (NCCL's "Remote process
//! error"), and an error of its own outranks a rank that is behind.

use serde_json::Value;

use super::client::{shown, Format};

/// A rank, as the report names it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Who {
    /// Its rank in the communicator.
    pub(crate) rank: Option<u64>,
    /// Its process (`None`: "process information not found").
    pub(crate) pid: Option<u64>,
    /// Its node, as NCCL names it (an address).
    pub(crate) host: String,
    /// Its GPU (CUDA device number).
    pub(crate) gpu: Option<u64>,
}

/// What is wrong with a rank.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Trouble {
    /// NCCL has no data from it: its process is gone, or does not answer.
    /// `dead`: the RAS network considers the process dead.
    Missing { dead: bool },
    /// It reported an error (`remote`: a peer's failure, seen here;
    /// `result`: the `ncclResult_t` name, where the report gives one).
    Error {
        what: String,
        remote: bool,
        result: Option<&'static str>,
    },
    /// It has launched fewer of one collective than the others.
    Behind {
        op: String,
        launched: u64,
        most: u64,
    },
    /// Its communicator is not running as the others' are: still in init,
    /// aborted, or finalized.
    State { what: String },
}

/// One rank that needs looking at.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Suspect {
    /// The communicator, by NCCL's hash.
    pub(crate) comm: String,
    /// The rank.
    pub(crate) who: Who,
    /// What is wrong.
    pub(crate) trouble: Trouble,
}

/// One rank's facts (the JSON report has them for every rank).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rank {
    /// Who it is.
    pub(crate) who: Who,
    /// How many of each collective it launched, in the report's order.
    pub(crate) counts: Vec<(String, u64)>,
    /// Its asynchronous error and its init state, as NCCL's result codes
    /// (0: success, 7: in progress).
    pub(crate) async_error: i64,
    pub(crate) init_state: i64,
    /// Its communicator was aborted; finalized (or destroyed).
    pub(crate) aborted: bool,
    pub(crate) finalized: bool,
    /// NCCL has no data from it; the RAS network considers it dead.
    pub(crate) missing: bool,
    pub(crate) dead: bool,
}

/// One communicator.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Comm {
    /// NCCL's hash of it.
    pub(crate) hash: String,
    /// Its ranks (`size`).
    pub(crate) size: u64,
    /// Every rank the report names.
    pub(crate) ranks: Vec<Rank>,
}

/// The report, read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JobStatus {
    /// The format it came in.
    pub(crate) format: Format,
    /// The job's NCCL version, as the report gives it.
    pub(crate) nccl: Option<String>,
    /// How many communicators, and ranks in all.
    pub(crate) comms: u64,
    pub(crate) ranks: u64,
    /// Every rank's facts (from JSON; empty from text).
    pub(crate) detail: Vec<Comm>,
    /// The ranks that need looking at, the one to look at first first.
    pub(crate) suspects: Vec<Suspect>,
    /// Whether the JSON needed mending (NCCL 2.28.9 leaves out a comma
    /// after a missing rank's `nvml_dev`).
    pub(crate) mended: bool,
    /// Findings past [`MAX_FINDINGS`], counted, not kept.
    pub(crate) left_out: u64,
}

/// The most communicators, ranks and lines read from one report.
const MAX_ITEMS: usize = 1 << 20;

/// Reads the report `body` in `format`. JSON that does not parse even once
/// mended is an error; so is a text report with none of NCCL's headings.
pub(crate) fn read(format: Format, body: &[u8]) -> Result<JobStatus, String> {
    let text = String::from_utf8_lossy(body);
    let mut st = match format {
        Format::Json => read_json(&text)?,
        Format::Text => read_text(&text)?,
    };
    st.suspects
        .sort_by_key(|x| (urgency(&x.trouble), x.who.rank));
    if st.suspects.len() > MAX_FINDINGS {
        st.left_out = (st.suspects.len() - MAX_FINDINGS) as u64;
        st.suspects.truncate(MAX_FINDINGS);
    }
    Ok(st)
}

fn read_json(text: &str) -> Result<JobStatus, String> {
    let (v, mended) = match serde_json::from_str::<Value>(text) {
        Ok(v) => (v, false),
        Err(first) => match serde_json::from_str::<Value>(&mend(text)) {
            Ok(v) => (v, true),
            Err(_) => return Err(format!("its JSON report does not parse ({first})")),
        },
    };
    let comms = v["communicators"]
        .as_array()
        .ok_or("its JSON report has no \"communicators\" list")?;
    let mut st = JobStatus {
        format: Format::Json,
        nccl: v["nccl_version"].as_str().map(shown),
        comms: comms.len() as u64,
        ranks: 0,
        detail: Vec::new(),
        suspects: Vec::new(),
        mended,
        left_out: 0,
    };
    for c in comms.iter().take(MAX_ITEMS) {
        let comm = json_comm(c);
        st.ranks = st.ranks.saturating_add(comm.size);
        judge_comm(&comm, &mut st.suspects);
        st.detail.push(comm);
    }
    Ok(st)
}

/// NCCL 2.28.9 writes a missing rank's `"nvml_dev": N` with no comma
/// before its `"status"`: a comma goes wherever a line ends a value and the
/// next line starts a key.
fn mend(text: &str) -> String {
    // One pass, the line breaks after a non-blank line held back until the
    // next non-blank line says whether a comma goes before them: linear in
    // time, and in memory no more than the text.
    let mut out = String::with_capacity(text.len() + 64);
    let mut held = 0usize;
    let mut ends_value = false;
    for l in text.lines() {
        let t = l.trim();
        if t.is_empty() {
            held += 1;
            continue;
        }
        if ends_value && t.starts_with('"') {
            out.push(',');
        }
        out.extend(std::iter::repeat_n('\n', held));
        out.push_str(l);
        held = 1;
        ends_value = !t.ends_with([',', '{', '[', ':']);
    }
    out.extend(std::iter::repeat_n('\n', held));
    out
}

fn json_who(r: &Value) -> Who {
    Who {
        rank: r["rank"].as_u64(),
        pid: r["pid"].as_u64(),
        host: shown(r["host"].as_str().unwrap_or("?")),
        gpu: r["cuda_dev"].as_u64(),
    }
}

fn json_rank(r: &Value, missing: bool) -> Rank {
    let mut counts = Vec::new();
    if let Some(m) = r["collective_counts"].as_object() {
        for (op, n) in m.iter().take(64) {
            counts.push((shown(op), n.as_u64().unwrap_or(0)));
        }
    }
    let s = &r["status"];
    let flag = |k: &str| s[k].as_bool().unwrap_or(false);
    Rank {
        who: json_who(r),
        counts,
        async_error: s["async_error"].as_i64().unwrap_or(0),
        init_state: s["init_state"].as_i64().unwrap_or(0),
        aborted: flag("abort_flag"),
        finalized: flag("finalize_called") || flag("destroy_flag"),
        missing,
        dead: missing && flag("considered_dead"),
    }
}

fn json_comm(c: &Value) -> Comm {
    let mut ranks = Vec::new();
    for (key, missing) in [("ranks", false), ("missing_ranks", true)] {
        for r in c[key].as_array().into_iter().flatten().take(MAX_ITEMS) {
            ranks.push(json_rank(r, missing));
        }
    }
    Comm {
        hash: shown(c["hash"].as_str().unwrap_or("?")),
        // NCCL's sizes are C ints: a larger one is not believed.
        size: c["size"]
            .as_u64()
            .filter(|&n| n <= MAX_RANKS)
            .unwrap_or(ranks.len() as u64),
        ranks,
    }
}

/// A result code by its name in `nccl.h` and NCCL's words for it:
/// `ncclTimeout (timeout)`; a code `nccl.h` does not have, as a number.
fn nccl_error(code: i64) -> String {
    match result_of(code) {
        Some(r) => format!("{} ({})", r.name, r.words),
        None => format!("result {code}, which no nccl.h this command knows has"),
    }
}

fn result_of(code: i64) -> Option<&'static crate::rules::messages::Result> {
    i32::try_from(code)
        .ok()
        .and_then(crate::rules::messages::result)
}

/// The result code the text report's words name (its own
/// `ncclErrorToString`: `System error`, `Remote process error`).
fn result_by_ras_words(words: &str) -> Option<&'static crate::rules::messages::Result> {
    const RAS: [(&str, i32); 7] = [
        ("Unhandled CUDA error", 1),
        ("System error", 2),
        ("Internal error", 3),
        ("Invalid argument", 4),
        ("Invalid usage", 5),
        ("Remote process error", 6),
        ("NCCL operation in progress", 7),
    ];
    let (_, code) = RAS.iter().find(|(w, _)| words.trim() == *w)?;
    crate::rules::messages::result(*code)
}

/// A rank whose communicator runs: init done, neither aborted nor finalized.
fn running(r: &Rank) -> bool {
    !r.missing && r.init_state == 0 && !r.aborted && !r.finalized
}

/// What is wrong with one rank (`others_run`: another rank's communicator
/// runs), as NCCL's own report judges it.
fn rank_trouble(r: &Rank, others_run: bool) -> Option<Trouble> {
    let failed = |code: i64| code != 0 && code != 7;
    if r.missing {
        return Some(Trouble::Missing { dead: r.dead });
    }
    if failed(r.init_state) {
        let what = format!("communicator init failed: {}", nccl_error(r.init_state));
        return Some(Trouble::Error {
            what,
            remote: r.init_state == 6,
            result: result_of(r.init_state).map(|r| r.name),
        });
    }
    if failed(r.async_error) {
        let what = nccl_error(r.async_error);
        return Some(Trouble::Error {
            what,
            remote: r.async_error == 6,
            result: result_of(r.async_error).map(|r| r.name),
        });
    }
    let what = if r.aborted {
        "its communicator was aborted (ncclCommAbort)"
    } else if r.init_state == 7 && others_run {
        "its communicator is still in init while the others run"
    } else if r.finalized && others_run {
        "its communicator was finalized while the others run"
    } else {
        return None;
    };
    Some(Trouble::State { what: what.into() })
}

fn judge_comm(c: &Comm, out: &mut Vec<Suspect>) {
    let others_run = c.ranks.iter().any(running);
    for r in &c.ranks {
        if let Some(trouble) = rank_trouble(r, others_run) {
            out.push(Suspect {
                comm: c.hash.clone(),
                who: r.who.clone(),
                trouble,
            });
        }
    }
    // Each collective (at most MAX_OPS names): the most any present rank
    // launched. A rank behind in several is named once, where it is
    // furthest behind: findings grow with the ranks, not ranks × names.
    let present: Vec<&Rank> = c.ranks.iter().filter(|r| !r.missing).collect();
    let mut most: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for r in &present {
        for (op, n) in &r.counts {
            if most.len() < MAX_OPS || most.contains_key(op.as_str()) {
                let m = most.entry(op.as_str()).or_insert(0);
                *m = (*m).max(*n);
            }
        }
    }
    for r in &present {
        let worst = most
            .iter()
            .map(|(op, m)| {
                let launched = r
                    .counts
                    .iter()
                    .find(|(o, _)| o == op)
                    .map_or(0, |(_, n)| *n);
                (m - launched.min(*m), *op, launched, *m)
            })
            .filter(|(gap, ..)| *gap > 0)
            .max_by_key(|(gap, ..)| *gap);
        if let Some((_, op, launched, most)) = worst {
            out.push(Suspect {
                comm: c.hash.clone(),
                who: r.who.clone(),
                trouble: Trouble::Behind {
                    op: op.to_string(),
                    launched,
                    most,
                },
            });
        }
    }
}

/// The largest count NCCL can write (a C `int`).
const MAX_RANKS: u64 = i32::MAX as u64;

/// The most collective names judged in one communicator (NCCL has about
/// ten).
const MAX_OPS: usize = 64;

/// The most findings kept, the most urgent; the rest are counted.
pub(crate) const MAX_FINDINGS: usize = 10_000;

/// How urgent a finding is: the cause before the symptoms it makes.
fn urgency(t: &Trouble) -> (u8, u64) {
    match t {
        Trouble::Missing { dead: true } => (0, 0),
        Trouble::Missing { dead: false } => (1, 0),
        Trouble::Error { remote: false, .. } => (2, 0),
        Trouble::Behind { launched, .. } => (3, *launched),
        Trouble::State { .. } => (4, 0),
        Trouble::Error { remote: true, .. } => (5, 0),
    }
}

fn read_text(text: &str) -> Result<JobStatus, String> {
    if !text.contains("Communicators") || !text.contains("Errors") {
        return Err(format!(
            "its report has none of NCCL's headings (it begins \"{}\")",
            shown(text.lines().next().unwrap_or(""))
        ));
    }
    let mut st = JobStatus {
        format: Format::Text,
        nccl: text
            .lines()
            .find_map(|l| l.strip_prefix("NCCL version "))
            .and_then(|l| l.split_whitespace().next())
            .map(shown),
        comms: 0,
        ranks: 0,
        detail: Vec::new(),
        suspects: Vec::new(),
        mended: false,
        left_out: 0,
    };
    text_table(text, &mut st);
    let mut block = Block::default();
    for l in text.lines().take(MAX_ITEMS) {
        block.line(l, &mut st.suspects);
    }
    block.end(&mut st.suspects);
    Ok(st)
}

/// The communicators table: `Group  Comms-in-group  Nodes-per-comm
/// Ranks-per-node  Ranks-per-comm  Ranks-in-group  Status  Errors`.
fn text_table(text: &str, st: &mut JobStatus) {
    let Some(at) = text.find("\nCommunicators") else {
        return;
    };
    for l in text[at..].lines().skip(1) {
        if l.starts_with("Errors") {
            break;
        }
        let n: Vec<u64> = l
            .split_whitespace()
            .take(6)
            .filter_map(|x| x.parse().ok())
            .filter(|&n| n <= MAX_RANKS)
            .collect();
        if n.len() == 6 {
            st.comms = st.comms.saturating_add(n[1]);
            st.ranks = st.ranks.saturating_add(n[1].saturating_mul(n[4]));
        }
    }
}

/// What a line of a text report's block says of the ranks listed under
/// it: `N ranks have launched up to operation K`, `N ranks reported X`,
/// `N ranks have status S`, or the same said of one rank on its own line.
#[derive(Debug, Clone, PartialEq)]
enum Said {
    Launched(u64),
    Reported(String),
    Status(String),
    Nothing,
}

/// One `#G-C (hash) KIND` block of a text report, read line by line. NCCL
/// lists a group's ranks under the group's line (all of them with `VERBOSE
/// STATUS`), and a rank alone in its group on a line of its own.
#[derive(Default)]
struct Block {
    comm: String,
    kind: String,
    /// The line that says what the block is about (`Communicator ranks
    /// have different AllReduce operation counts`, `Asynchronous error on
    /// 1 rank`).
    about: String,
    group: Option<Said>,
    /// Ranks and their counts of the block's collective.
    launched: Vec<(Who, u64)>,
    most: u64,
}

impl Block {
    fn line(&mut self, l: &str, out: &mut Vec<Suspect>) {
        if let Some(rest) = l.strip_prefix('#') {
            self.end(out);
            let mut w = rest.split_whitespace().skip(1);
            let hash = w
                .next()
                .unwrap_or("?")
                .trim_matches(|c| c == '(' || c == ')');
            self.comm = shown(hash);
            self.kind = w.next().unwrap_or("").to_string();
            return;
        }
        let Some(line) = l.strip_prefix("  ") else {
            return;
        };
        let Some(rest) = line.strip_prefix("Rank ") else {
            self.group = group_line(line);
            if let Some(Said::Launched(k)) = self.group {
                self.most = self.most.max(k);
            }
            if self.group.is_none() {
                self.about = line.to_string();
            }
            return;
        };
        let (head, place) = rest.split_once(" -- ").unwrap_or((rest, ""));
        let (rank, said) = head.split_once(' ').unwrap_or((head, ""));
        let who = text_who(rank.parse().ok(), place);
        let said = match said_of(said) {
            Said::Nothing => self.group.clone().unwrap_or(Said::Nothing),
            s => s,
        };
        self.rank(who, said, out);
    }

    fn rank(&mut self, who: Who, said: Said, out: &mut Vec<Suspect>) {
        let comm = self.comm.clone();
        let trouble = match (self.kind.as_str(), said) {
            ("INCOMPLETE", _) => Trouble::Missing { dead: false },
            (_, Said::Launched(k)) => {
                self.most = self.most.max(k);
                self.launched.push((who, k));
                return;
            }
            (_, Said::Reported(x)) => {
                let remote = x.contains("Remote process error");
                let result = result_by_ras_words(&x);
                let x = match result {
                    Some(r) => format!("{} ({})", r.name, r.words),
                    None => x,
                };
                let what = match self.about.starts_with("Initialization") {
                    true => format!("communicator init failed: {x}"),
                    false => x,
                };
                Trouble::Error {
                    what: shown(&what),
                    remote,
                    result: result.map(|r| r.name),
                }
            }
            (_, Said::Status(s)) if s == "RUNNING" => return,
            (_, Said::Status(s)) => Trouble::State {
                what: format!("its communicator is {}", shown(&s)),
            },
            (_, Said::Nothing) => return,
        };
        out.push(Suspect { comm, who, trouble });
    }

    /// The block's end: its ranks that launched fewer than the most.
    fn end(&mut self, out: &mut Vec<Suspect>) {
        // "Communicator ranks have different AllReduce operation counts"
        let op = self
            .about
            .strip_prefix("Communicator ranks have different ")
            .and_then(|r| r.strip_suffix(" operation counts"))
            .unwrap_or("collective");
        for (who, n) in self.launched.drain(..) {
            if n < self.most {
                let trouble = Trouble::Behind {
                    op: shown(op),
                    launched: n,
                    most: self.most,
                };
                out.push(Suspect {
                    comm: self.comm.clone(),
                    who,
                    trouble,
                });
            }
        }
        self.most = 0;
        self.group = None;
        self.about.clear();
    }
}

/// `N ranks have launched up to operation K` and the like.
fn group_line(line: &str) -> Option<Said> {
    let (n, rest) = line.split_once(' ')?;
    n.parse::<u64>().ok()?;
    let rest = rest.strip_prefix("ranks ")?;
    match said_of(rest) {
        Said::Nothing => None,
        s => Some(s),
    }
}

/// What `has launched up to operation K`, `have not launched any
/// operations`, `reported X`, `has status S` says.
fn said_of(s: &str) -> Said {
    let s = s.trim();
    let up_to = [
        "has launched up to operation ",
        "have launched up to operation ",
    ];
    for p in up_to {
        if let Some(k) = s.strip_prefix(p).and_then(|k| k.parse().ok()) {
            return Said::Launched(k);
        }
    }
    if s.starts_with("has not launched any") || s.starts_with("have not launched any") {
        return Said::Launched(0);
    }
    if let Some(x) = s.strip_prefix("reported ") {
        return Said::Reported(x.to_string());
    }
    for p in ["has status ", "have status "] {
        if let Some(x) = s.strip_prefix(p) {
            return Said::Status(x.to_string());
        }
    }
    Said::Nothing
}

/// `GPU G managed by process P on node H` (or `[process information not
/// found]`).
fn text_who(rank: Option<u64>, place: &str) -> Who {
    let w: Vec<&str> = place.split_whitespace().collect();
    let after = |word: &str| w.iter().position(|x| *x == word).and_then(|i| w.get(i + 1));
    Who {
        rank,
        pid: after("process").and_then(|p| p.parse().ok()),
        host: shown(after("node").copied().unwrap_or("?")),
        gpu: after("GPU").and_then(|g| g.parse().ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_named_as_nccl_h_names_them() {
        assert_eq!(nccl_error(8), "ncclTimeout (timeout)");
        assert_eq!(
            nccl_error(6),
            "ncclRemoteError (remote process exited or there was a network error)"
        );
        assert_eq!(
            nccl_error(99),
            "result 99, which no nccl.h this command knows has"
        );
        assert_eq!(
            nccl_error(-1),
            "result -1, which no nccl.h this command knows has"
        );
        let by = |w: &str| result_by_ras_words(w).map(|r| r.name);
        assert_eq!(by("System error"), Some("ncclSystemError"));
        assert_eq!(by("Remote process error"), Some("ncclRemoteError"));
        assert_eq!(by("Unexpected error"), None);
    }

    #[test]
    fn a_comma_nccl_left_out_is_put_back_and_nothing_else_changes() {
        let broken = "{\n  \"a\": 0\n  \"b\": {\n    \"c\": [\n\n    ]\n  }\n}\n";
        assert!(serde_json::from_str::<Value>(broken).is_err());
        let mended = mend(broken);
        assert_eq!(
            mended,
            "{\n  \"a\": 0,\n  \"b\": {\n    \"c\": [\n\n    ]\n  }\n}\n"
        );
        let good = "{\n  \"a\": 0,\n  \"b\": [1,\n 2]\n}\n";
        assert_eq!(mend(good), good);
    }

    #[test]
    fn an_error_of_its_own_outranks_a_rank_behind_and_a_remote_error() {
        let who = |r| Who {
            rank: Some(r),
            pid: None,
            host: "h".into(),
            gpu: None,
        };
        let f = |r, trouble| Suspect {
            comm: "c".into(),
            who: who(r),
            trouble,
        };
        let mut v = [
            f(
                0,
                Trouble::Error {
                    what: "ncclRemoteError (remote process exited or there was a network error)"
                        .into(),
                    remote: true,
                    result: Some("ncclRemoteError"),
                },
            ),
            f(
                1,
                Trouble::Behind {
                    op: "AllReduce".into(),
                    launched: 3,
                    most: 4,
                },
            ),
            f(
                2,
                Trouble::Error {
                    what: "ncclUnhandledCudaError (unhandled cuda error)".into(),
                    remote: false,
                    result: Some("ncclUnhandledCudaError"),
                },
            ),
            f(3, Trouble::Missing { dead: false }),
        ];
        v.sort_by_key(|x| (urgency(&x.trouble), x.who.rank));
        let order: Vec<u64> = v.iter().map(|x| x.who.rank.unwrap()).collect();
        assert_eq!(order, [3, 2, 1, 0]);
    }

    /// A text report in the shapes NCCL's `client_support.cc` writes
    /// beside the ones recorded: groups of ranks with `VERBOSE STATUS`, a
    /// rank with no process information, an init error, a status.
    const SHAPES: &str = r#"NCCL version 2.29.7 compiled with CUDA 13.0

Communicators... (0.01s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         2         2         4         4   RUNNING  MISMATCH,ERROR

Errors
======

#0-0 (00000000000000aa) ERROR
  Initialization error on 1 rank
  Rank 2 reported System error -- GPU 0 managed by process 31 on node 10.0.0.2
  Asynchronous errors on 2 ranks
  2 ranks reported Remote process error
  Rank 0 -- GPU 0 managed by process 11 on node 10.0.0.1
  Rank 1 -- [process information not found]

Warnings
========

#0-0 (00000000000000aa) MISMATCH
  Communicator ranks have different status
  3 ranks have status RUNNING
  Rank 0 -- GPU 0 managed by process 11 on node 10.0.0.1
  Rank 1 -- GPU 1 managed by process 12 on node 10.0.0.1
  Rank 3 -- GPU 1 managed by process 32 on node 10.0.0.2
  Rank 2 has status INIT -- GPU 0 managed by process 31 on node 10.0.0.2

#0-0 (00000000000000aa) MISMATCH
  Communicator ranks have different Broadcast operation counts
  2 ranks have launched up to operation 7
  Rank 0 -- GPU 0 managed by process 11 on node 10.0.0.1
  Rank 1 -- GPU 1 managed by process 12 on node 10.0.0.1
  Rank 3 has launched up to operation 5 -- GPU 1 managed by process 32 on node 10.0.0.2
  Rank 2 has not launched any operations -- GPU 0 managed by process 31 on node 10.0.0.2
"#;

    #[test]
    fn a_text_report_names_every_rank_in_every_shape_nccl_writes() {
        let report = SHAPES;
        let st = read(Format::Text, report.as_bytes()).unwrap();
        assert_eq!(
            (st.nccl.as_deref(), st.comms, st.ranks),
            (Some("2.29.7"), 1, 4)
        );
        let who = |rank, pid: Option<u64>, host: &str, gpu| Who {
            rank: Some(rank),
            pid,
            host: host.into(),
            gpu,
        };
        let f = |w, trouble| Suspect {
            comm: "00000000000000aa".into(),
            who: w,
            trouble,
        };
        let remote = || Trouble::Error {
            what: "ncclRemoteError (remote process exited or there was a network error)".into(),
            remote: true,
            result: Some("ncclRemoteError"),
        };
        assert_eq!(
            st.suspects,
            [
                f(
                    who(2, Some(31), "10.0.0.2", Some(0)),
                    Trouble::Error {
                        what: "communicator init failed: ncclSystemError (unhandled system error)"
                            .into(),
                        remote: false,
                        result: Some("ncclSystemError"),
                    }
                ),
                f(
                    who(2, Some(31), "10.0.0.2", Some(0)),
                    Trouble::Behind {
                        op: "Broadcast".into(),
                        launched: 0,
                        most: 7
                    }
                ),
                f(
                    who(3, Some(32), "10.0.0.2", Some(1)),
                    Trouble::Behind {
                        op: "Broadcast".into(),
                        launched: 5,
                        most: 7
                    }
                ),
                f(
                    who(2, Some(31), "10.0.0.2", Some(0)),
                    Trouble::State {
                        what: "its communicator is INIT".into()
                    }
                ),
                f(who(0, Some(11), "10.0.0.1", Some(0)), remote()),
                f(who(1, None, "?", None), remote()),
            ]
        );
    }

    #[test]
    fn json_flags_an_init_error_an_abort_and_a_rank_still_in_init() {
        let rank = |r: u64, init: i64, asynch: i64, abort: bool| {
            format!(
                "{{\"rank\": {r}, \"host\": \"h\", \"pid\": {}, \"cuda_dev\": 0, \"status\": {{\
                 \"init_state\": {init}, \"async_error\": {asynch}, \"finalize_called\": false, \
                 \"destroy_flag\": false, \"abort_flag\": {abort}}}, \"collective_counts\": \
                 {{\"AllReduce\": 2}}}}",
                100 + r
            )
        };
        let report = format!(
            "{{\"nccl_version\": \"2.29.7\", \"communicators\": [{{\"hash\": \"0x1\", \"size\": 4, \
             \"ranks\": [{}, {}, {}, {}], \"missing_ranks\": []}}]}}",
            rank(0, 0, 0, false),
            rank(1, 5, 0, false),
            rank(2, 0, 0, true),
            rank(3, 7, 0, false)
        );
        let st = read(Format::Json, report.as_bytes()).unwrap();
        let got: Vec<(Option<u64>, Trouble)> = st
            .suspects
            .into_iter()
            .map(|f| (f.who.rank, f.trouble))
            .collect();
        assert_eq!(
            got,
            [
                (
                    Some(1),
                    Trouble::Error {
                        what: "communicator init failed: ncclInvalidUsage (invalid usage)".into(),
                        remote: false,
                        result: Some("ncclInvalidUsage"),
                    }
                ),
                (
                    Some(2),
                    Trouble::State {
                        what: "its communicator was aborted (ncclCommAbort)".into()
                    }
                ),
                (
                    Some(3),
                    Trouble::State {
                        what: "its communicator is still in init while the others run".into()
                    }
                ),
            ]
        );
    }
}
