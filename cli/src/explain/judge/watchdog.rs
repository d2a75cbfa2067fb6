//! A hang, read by its sequence numbers: PyTorch's watchdog names the
//! collective each rank waited in (`WorkNCCL(SeqNum=5, OpType=ALLREDUCE`)
//! and, in newer releases, the last it enqueued and completed. The rank
//! behind is the one that enqueued fewest, or timed out in an earlier
//! collective, or printed no timeout at all while the others did.

use std::collections::{BTreeMap, BTreeSet};

use super::{answer, fields_of, Answer, Event, Extra, Verdict};
use crate::rules::failures::Failure;
use crate::rules::messages::{Fact, Says};

/// What one rank's watchdog said.
#[derive(Debug, Default, Clone)]
struct Waited {
    seq: Option<u64>,
    op: Option<String>,
    enqueued: Option<u64>,
}

/// `key=value` out of torch's `WorkNCCL(SeqNum=5, OpType=ALLREDUCE, …)`.
fn work_field<'a>(work: &'a str, key: &str) -> Option<&'a str> {
    work.split(", ")
        .find_map(|kv| kv.trim().strip_prefix(key)?.strip_prefix('='))
}

/// Ranks as words: `rank 2`, `ranks 0, 1 and 3`.
pub fn ranks_words(ranks: &BTreeSet<u32>) -> String {
    let v: Vec<String> = ranks.iter().map(u32::to_string).collect();
    match v.len() {
        0 => "no rank".into(),
        1 => format!("rank {}", v[0]),
        n if n > 8 => format!("{} ranks ({} … {})", n, v[0], v[n - 1]),
        n => format!("ranks {} and {}", v[..n - 1].join(", "), v[n - 1]),
    }
}

/// What each rank's watchdog said, by rank.
fn waited(lines: &[&Event]) -> BTreeMap<u32, Waited> {
    let mut by_rank: BTreeMap<u32, Waited> = BTreeMap::new();
    for e in lines {
        let Some(r) = e.rank else { continue };
        let w = by_rank.entry(r).or_default();
        if let Some(work) = e.hit.field("work") {
            if let Some(s) = work_field(work, "SeqNum").and_then(|s| s.parse().ok()) {
                w.seq = Some(w.seq.map_or(s, |o: u64| o.max(s)));
            }
            w.op = work_field(work, "OpType")
                .map(str::to_string)
                .or(w.op.take());
        }
        if let Some(q) = e.hit.field("enqueued").and_then(|s| s.parse().ok()) {
            w.enqueued = Some(q);
        }
    }
    by_rank
}

/// Every rank the logs know of: any line's, and a communicator's size.
fn every_rank(events: &[Event]) -> BTreeSet<u32> {
    let mut all: BTreeSet<u32> = events.iter().filter_map(|e| e.rank).collect();
    let nranks = events
        .iter()
        .filter(|e| matches!(e.hit.says, Says::Fact(Fact::InitDone | Fact::InitStart)))
        .filter_map(|e| e.hit.field("nranks")?.parse::<u32>().ok())
        .max();
    if let Some(n) = nranks.filter(|&n| n <= 65536) {
        all.extend(0..n);
    }
    all
}

/// The ranks behind, and the words for them: the ranks that enqueued
/// fewest, else those that waited in an earlier collective, else those
/// that did not time out while the others did.
fn behind(by_rank: &BTreeMap<u32, Waited>, all: &BTreeSet<u32>) -> (BTreeSet<u32>, String) {
    let timed: BTreeSet<u32> = by_rank.keys().copied().collect();
    let max_seq = by_rank.values().filter_map(|w| w.seq).max();
    let enq: BTreeMap<u32, u64> = by_rank
        .iter()
        .filter_map(|(r, w)| Some((*r, w.enqueued?)))
        .collect();
    let (min_enq, max_enq) = (enq.values().min().copied(), enq.values().max().copied());
    let seqs: BTreeSet<u64> = by_rank.values().filter_map(|w| w.seq).collect();
    let ranks_at = |f: &dyn Fn(&Waited) -> bool| -> BTreeSet<u32> {
        by_rank
            .iter()
            .filter(|(_, w)| f(w))
            .map(|(r, _)| *r)
            .collect()
    };
    if enq.len() > 1 && min_enq != max_enq {
        let b = ranks_at(&|w| w.enqueued == min_enq);
        let words = format!(
            "{} enqueued only {} collectives, the others more: it is behind",
            ranks_words(&b),
            min_enq.unwrap_or(0)
        );
        (b, words)
    } else if seqs.len() > 1 {
        let low = seqs.iter().next().copied();
        let b = ranks_at(&|w| w.seq == low);
        let words = format!(
            "{} waited in collective {}, the others in later ones: it is behind",
            ranks_words(&b),
            low.unwrap_or(0)
        );
        (b, words)
    } else if !timed.is_empty() && all.len() > timed.len() {
        let b: BTreeSet<u32> = all.difference(&timed).copied().collect();
        let words = format!(
            "{} timed out{}; {} did not: the rank that stopped calling collectives is among them",
            ranks_words(&timed),
            max_seq.map_or(String::new(), |s| format!(" in collective {s}")),
            ranks_words(&b)
        );
        (b, words)
    } else if all.len() == 1 {
        let words = format!(
            "only {}'s lines are here: the rank behind is among the ranks these logs lack",
            ranks_words(all)
        );
        (BTreeSet::new(), words)
    } else {
        let who = match timed.is_empty() {
            true => "the ranks".to_string(),
            false => ranks_words(&timed),
        };
        let words = format!(
            "{who} timed out{}, and the logs show no rank behind: each entered it, so NCCL itself stalled there, or a rank these logs lack",
            max_seq.map_or(String::new(), |s| format!(" in the same collective ({s})"))
        );
        (BTreeSet::new(), words)
    }
}

/// The answer for a hang that PyTorch's watchdog saw, where no line says
/// why: who is behind.
pub fn hang(events: &[Event], extra: Extra) -> Option<Answer> {
    let lines: Vec<&Event> = events
        .iter()
        .filter(|e| e.hit.says == Says::Symptom(Failure::Watchdog))
        .collect();
    if lines.is_empty() {
        return None;
    }
    let by_rank = waited(&lines);
    let (behind, words) = behind(&by_rank, &every_rank(events));
    let max_seq = by_rank.values().filter_map(|w| w.seq).max();
    let op = by_rank
        .values()
        .find(|w| w.seq == max_seq && w.op.is_some())
        .and_then(|w| w.op.clone());
    let mut fields = fields_of(lines[0], events);
    fields.insert("behind", words);
    if !behind.is_empty() {
        fields.insert("behind_rank", ranks_words(&behind));
    }
    if let Some(op) = op {
        let op = max_seq.map_or(op.clone(), |s| format!("{op}, collective {s}"));
        fields.insert("op", op);
    }
    let (v, f) = (Verdict::NoCause, Failure::Watchdog);
    Some(answer(v, f, &lines, fields, events, extra))
}
