//! Between machines: what each rank brings to the smoke test's meeting
//! (`card`), and rank 0's reading of every card: the facts grouped by
//! value with the nodes in the minority named (`compare`), the connections
//! tested between hosts with the one `NCCL_SOCKET_IFNAME` that reaches them
//! all and the verdict (`reach`), the pairs of nodes timed in two rounds
//! and the node or link they name (`pairs`), what a launcher is told to
//! leave out (`leave`), and the ranks that were slow (`timing`).

mod card;
mod compare;
mod leave;
mod pairs;
mod reach;
mod timing;

use nccl_rendezvous::{Card, Gathered};
use serde_json::{json, Value};

pub(crate) use card::{card, Here};
use compare::{compare, facts_of};
pub(crate) use leave::Under;
use pairs::{bad_hosts, Timed};
pub(crate) use reach::blocker;
use reach::{proposal, reach_lines};
pub(crate) use timing::slow_ranks;

/// The whole multi-node report for rank 0, as (problem, line) pairs.
/// Nothing where every rank is on one host and says the same: the usual
/// job on one machine hears nothing new (`--json` has it all).
pub(crate) fn report(g: &Gathered) -> Vec<(bool, String)> {
    let (same, diffs) = compare(&g.cards);
    let hosts = hosts_of(&g.cards, 0..g.cards.len());
    if hosts.len() < 2 && diffs.is_empty() {
        return Vec::new();
    }
    let mut out = vec![(
        false,
        format!(
            "nodes: {} ({}), {} rank(s); the same on every one: {}",
            hosts.len(),
            shown_hosts(&hosts),
            g.cards.len(),
            if same.is_empty() {
                "nothing compared".into()
            } else {
                same.join(", ")
            }
        ),
    )];
    for d in diffs {
        out.push((d.problem, d.line));
    }
    if hosts.len() > 1 {
        out.extend(reach_lines(g));
        out.extend(pairs::pair_lines(g));
    }
    out
}

/// The hosts the pairs named bad: at the meeting (`g`) and over NCCL
/// (`s`), each once.
fn all_bad(g: &Gathered, s: Option<&nccl_smoke::Summary>) -> Vec<String> {
    let mut bad = bad_hosts(&Timed::sockets(g));
    for h in s
        .map(|s| bad_hosts(&Timed::nccl(&s.pairs, &s.hosts)))
        .unwrap_or_default()
    {
        if !bad.contains(&h) {
            bad.push(h);
        }
    }
    bad
}

/// Rank 0's lines after a verdict that names nodes (the healthy set in
/// the launcher's syntax), and the best `best` nodes where asked.
pub(crate) fn leave_out(
    g: &Gathered,
    s: Option<&nccl_smoke::Summary>,
    under: Under,
    best: Option<usize>,
) -> Vec<String> {
    let bad = all_bad(g, s);
    let mut out = leave::lines(g, &bad, "slow in the pair test between nodes", under);
    if let Some(n) = best {
        let chosen = leave::best(g, &bad, n);
        let list: Vec<String> = chosen.iter().map(|h| crate::style::shell_word(h)).collect();
        let short = match chosen.len() < n {
            true => format!(" (only {} good)", chosen.len()),
            false => String::new(),
        };
        out.push(format!("best {n} node(s){short}: {}", list.join(",")));
        if under == Under::Slurm && !list.is_empty() {
            out.push(format!("  srun --nodelist={} ...", list.join(",")));
        }
    }
    out
}

/// `leave_out` in `--json`.
pub(crate) fn leave_json(
    g: &Gathered,
    s: Option<&nccl_smoke::Summary>,
    under: Under,
    best: Option<usize>,
) -> Value {
    leave::json(g, &all_bad(g, s), under, best)
}

/// What the pairs over NCCL found, on every rank: each finding, and the
/// first as the cause with its fix. Between nodes a finding is a problem;
/// between the GPUs of one host it is a note (their links differ by
/// design: NVLink beside PCIe), and no cause.
pub(crate) fn nccl_pairs(s: &nccl_smoke::Summary) -> NcclPairs {
    let t = Timed::nccl(&s.pairs, &s.hosts);
    let lines = pairs::findings_lines(&t).into_iter().map(|l| l.1);
    match t.by_gpu {
        true => NcclPairs {
            notes: lines
                .map(|l| format!("pairs over NCCL, between this host's GPUs: {l}"))
                .collect(),
            ..NcclPairs::default()
        },
        false => NcclPairs {
            problems: lines.collect(),
            cause: pairs::cause(&t),
            ..NcclPairs::default()
        },
    }
}

/// What [`nccl_pairs`] found: problem lines, note lines, and the cause.
#[derive(Debug, Default)]
pub(crate) struct NcclPairs {
    pub(crate) problems: Vec<String>,
    pub(crate) notes: Vec<String>,
    pub(crate) cause: Option<String>,
}

/// The pairs over NCCL in `--json`, by NCCL rank.
pub(crate) fn nccl_pairs_json(s: &nccl_smoke::Summary) -> Value {
    json!({
        "pairs": pairs_json(&s.pairs, &|r| s.hosts.get(r).cloned()),
        "bad_hosts": bad_hosts(&Timed::nccl(&s.pairs, &s.hosts)),
    })
}

/// Timed transfers in `--json`, each end with its host (`host` of a rank).
fn pairs_json(
    pairs: &[nccl_rendezvous::pairs::Pair],
    host: &dyn Fn(usize) -> Option<String>,
) -> Value {
    Value::Array(
        pairs
            .iter()
            .map(|p| {
                json!({
                    "round": p.round,
                    "from": p.from, "to": p.to,
                    "from_host": host(p.from),
                    "to_host": host(p.to),
                    "bytes": p.bytes, "micros": p.micros,
                    "bytes_per_s": p.rate(),
                    "error": p.error,
                })
            })
            .collect(),
    )
}

/// The hosts of `ranks`, each once, in the order of its first rank there
/// (a host whose ranks are not next to each other, as srun's cyclic
/// distribution places them, is still one host).
pub(super) fn hosts_of(cards: &[Card], ranks: impl Iterator<Item = usize>) -> Vec<&str> {
    let mut seen: Vec<&str> = Vec::new();
    for r in ranks {
        let h = cards[r].host.as_str();
        if !seen.contains(&h) {
            seen.push(h);
        }
    }
    seen
}

/// Hosts (each once), at most 8 by name.
fn shown_hosts(hosts: &[&str]) -> String {
    let n = hosts.len();
    if n > 8 {
        format!("{}, and {} more", hosts[..8].join(", "), n - 8)
    } else {
        hosts.join(", ")
    }
}

/// `nodes` in `--json`.
pub(crate) fn json(g: &Gathered) -> Value {
    let (same, diffs) = compare(&g.cards);
    json!({
        "ranks": g.cards.iter().enumerate().map(|(r, c)| json!({
            "rank": r,
            "host": c.host,
            "facts": facts_of(c),
            "addresses": c.addrs.iter().map(|a| json!({"iface": a.iface, "ip": a.ip.to_string(), "nccl": a.nccl})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "same": same,
        "differences": diffs.iter().map(|d| json!({"problem": d.problem, "fact": d.key, "text": d.line})).collect::<Vec<_>>(),
        "reach": {
            "tested": g.probes.iter().map(|p| json!({
                "from": p.from, "to": p.to,
                "from_host": g.cards.get(p.from).map(|c| c.host.clone()),
                "to_host": g.cards.get(p.to).map(|c| c.host.clone()),
                "iface": p.addr.iface, "ip": p.addr.ip.to_string(), "nccl": p.addr.nccl,
                "error": p.error,
            })).collect::<Vec<_>>(),
            "proposed_socket_ifname": proposal(g),
        },
        "pairs": pairs_json(&g.pairs, &|r| g.cards.get(r).map(|c| c.host.clone())),
        "bad_hosts": bad_hosts(&Timed::sockets(g)),
    })
}

/// What the tests of the rooms below share: a card made by hand.
#[cfg(test)]
pub(crate) mod tests {
    use nccl_rendezvous::{Addr, Card};

    pub(crate) fn made(host: &str, facts: &str, ifaces: &[&str]) -> Card {
        let addrs = ifaces
            .iter()
            .enumerate()
            .map(|(i, n)| {
                Addr::new(
                    n.to_string(),
                    format!("10.0.{i}.1").parse().unwrap(),
                    i == 0,
                )
            })
            .collect();
        Card::new(host.into(), facts.into(), addrs)
    }

    pub(crate) const HOST: &str =
        "driver=550.54.15\ncuda=12.4\ngpus=8 x NVIDIA H100\nifaces=ib0\nrdma=none\n";
}
