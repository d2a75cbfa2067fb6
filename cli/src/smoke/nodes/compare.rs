//! Rank 0's reading of the cards: the facts that are the same everywhere,
//! and each difference, with the nodes in the minority named; a
//! difference that breaks NCCL (`rules::agree`) is a problem.

use std::collections::BTreeMap;

use nccl_rendezvous::Card;

use super::card::NO_IFACE;
use super::hosts_of;
use crate::rules::agree;

/// The facts that belong to a host, not to a process: sent by the first
/// process of each node only, where the launcher says which that is.
const HOST_KEYS: [&str; 8] = [
    "driver",
    "cuda",
    "gpus",
    "gpu_health",
    "ifaces",
    "rdma",
    "plugins",
    "gdr",
];

/// One card's facts, by key (`set NAME=…` lines under `NAME`).
pub(super) fn facts_of(card: &Card) -> BTreeMap<String, String> {
    card.facts
        .lines()
        .filter_map(|l| {
            let l = l.strip_prefix("set ").unwrap_or(l);
            let (k, v) = l.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// What a key is called in the report.
fn label(key: &str) -> &str {
    match key {
        "nccl" => "NCCL",
        "nccl_file" => "NCCL file",
        "driver" => "driver",
        "cuda" => "CUDA",
        "gpus" => "GPUs",
        "ifaces" => "NCCL's interfaces",
        "rdma" => "RDMA ports",
        "nccl_build" => "NCCL build",
        "nccl_git" => "NCCL git version",
        "plugins" => "NCCL plugins",
        "gdr" => "GPUDirect RDMA module",
        "gpu_health" => "GPU health",
        k => k,
    }
}

/// A difference between nodes, in words, and whether it breaks NCCL.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Difference {
    pub(crate) problem: bool,
    pub(crate) key: String,
    pub(crate) line: String,
}

/// Rank 0's reading of the cards: the facts that are the same everywhere
/// (`NCCL 2.21.5`, …) and each difference, the nodes in the minority
/// named (`node07: NCCL 2.21.5 (the 15 other nodes: 2.28.9)`).
pub(crate) fn compare(cards: &[Card]) -> (Vec<String>, Vec<Difference>) {
    let facts: Vec<BTreeMap<String, String>> = cards.iter().map(facts_of).collect();
    let mut keys: Vec<String> = facts.iter().flat_map(|f| f.keys().cloned()).collect();
    keys.sort();
    keys.dedup();
    // NCCL first, then the host's facts, then the settings.
    keys.sort_by_key(|k| match k.as_str() {
        "nccl" => 0,
        "nccl_build" => 1,
        "nccl_git" => 2,
        "nccl_file" => 3,
        k => HOST_KEYS.iter().position(|h| *h == k).map_or(19, |i| 4 + i),
    });
    let (mut same, mut diffs) = (Vec::new(), Vec::new());
    for key in keys {
        if key == NO_IFACE {
            continue;
        }
        let host_key = HOST_KEYS.contains(&key.as_str());
        let groups = by_value(&facts, &key, host_key);
        let nodes = |ranks: &[usize]| hosts_of(cards, ranks.iter().copied()).len();
        if groups.len() == 1 {
            if groups[0].0 != "unset" && key != "nccl_file" {
                same.push(format!("{} {}", label(&key), groups[0].0));
            }
            continue;
        }
        let most = groups
            .iter()
            .enumerate()
            .max_by_key(|(i, g)| (nodes(&g.1), g.1.len(), std::cmp::Reverse(*i)))
            .map_or(0, |(i, _)| i);
        let (common, common_ranks) = &groups[most];
        for (i, (v, ranks)) in groups.iter().enumerate() {
            if i == most {
                continue;
            }
            // Nodes where the values part whole nodes, else ranks.
            let whole = host_key || {
                let theirs = hosts_of(cards, ranks.iter().copied());
                hosts_of(cards, common_ranks.iter().copied())
                    .iter()
                    .all(|h| !theirs.contains(h))
            };
            let others = others(cards, whole, ranks, (common, common_ranks));
            let line = format!(
                "{}: {} {} ({others})",
                who(cards, ranks, &facts, host_key),
                label(&key),
                shown(v),
            );
            diffs.push(Difference {
                problem: breaks(&key, v, common),
                key: key.clone(),
                line,
            });
        }
    }
    (same, diffs)
}

/// The ranks that have each value of `key` (`unset` where a card has
/// none), in the order first seen; a host fact only from the cards that
/// carry the host's facts.
fn by_value(
    facts: &[BTreeMap<String, String>],
    key: &str,
    host_key: bool,
) -> Vec<(String, Vec<usize>)> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (r, f) in facts.iter().enumerate() {
        if host_key && !f.contains_key("driver") {
            continue;
        }
        let v = f.get(key).cloned().unwrap_or_else(|| "unset".into());
        match groups.iter_mut().find(|g| g.0 == v) {
            Some(g) => g.1.push(r),
            None => groups.push((v, vec![r])),
        }
    }
    groups
}

/// Who holds the common value, in words, beside the minority `ranks`:
/// whole nodes where the values part whole nodes (`whole`), else ranks.
fn others(cards: &[Card], whole: bool, ranks: &[usize], common: (&str, &[usize])) -> String {
    let (value, common_ranks) = common;
    let nodes = |ranks: &[usize]| hosts_of(cards, ranks.iter().copied()).len();
    match (whole, nodes(common_ranks), common_ranks.len()) {
        (false, 1, _)
            if nodes(ranks) == 1 && cards[ranks[0]].host == cards[common_ranks[0]].host =>
        {
            format!("the other rank(s) there: {}", shown(value))
        }
        (false, _, 1) => format!("the other rank: {}", shown(value)),
        (false, _, n) => format!("the {n} other ranks: {}", shown(value)),
        (true, 1, _) => format!("the other node: {}", shown(value)),
        (true, n, _) => format!("the {n} other nodes: {}", shown(value)),
    }
}

/// A fact's value as the report shows it: an empty one as `""` (set, and
/// empty), never as nothing between two spaces.
pub(super) fn shown(v: &str) -> &str {
    if v.is_empty() {
        "\"\" (empty)"
    } else {
        v
    }
}

/// The nodes `ranks` name: a host alone where every one of its ranks is
/// among them, else the host with the ranks (`node3 rank 5`).
pub(super) fn who(
    cards: &[Card],
    ranks: &[usize],
    facts: &[BTreeMap<String, String>],
    host_key: bool,
) -> String {
    let mut out = Vec::new();
    for h in hosts_of(cards, ranks.iter().copied()) {
        let all = (0..cards.len())
            .filter(|r| cards[*r].host == h && (!host_key || facts[*r].contains_key("driver")))
            .all(|r| ranks.contains(&r));
        let mine: Vec<usize> = ranks
            .iter()
            .copied()
            .filter(|r| cards[*r].host == h)
            .collect();
        out.push(if all {
            h.to_string()
        } else {
            format!(
                "{h} rank {}",
                mine.iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        });
    }
    if out.len() > 8 {
        let n = out.len() - 8;
        out.truncate(8);
        out.push(format!("{n} more"));
    }
    out.join(", ")
}

/// Whether two values of `key` differ in a way that breaks NCCL (another
/// build of one release, even of another commit, does not): another
/// release of NCCL (to the patch), a plugin some nodes load and others do not (a
/// known silent hang, NVIDIA/nccl#1634), GPUs at fault (NVML: ECC errors,
/// remapped rows, throttling), or another setting that decides the
/// interface.
fn breaks(key: &str, a: &str, b: &str) -> bool {
    match key {
        "nccl" => !agree::releases_agree(a, b),
        "plugins" => true,
        // A node whose GPUs are at fault, not one that is fine among them.
        "gpu_health" => a != "ok",
        // NCCL 2.32 compares the git versions too, but only says so
        // (`Mismatched NCCL git versions detected`) and goes on.
        "nccl_build" | "nccl_git" | "gdr" => false,
        k => agree::setting_must_agree(k),
    }
}

/// The first node with more ranks than GPUs (two ranks on one GPU, which
/// NCCL refuses: `Duplicate GPU detected`), in one line with the fix;
/// nodes with no GPU (a check without GPUs) are left alone.
pub(crate) fn crowded(cards: &[Card]) -> Option<String> {
    for h in hosts_of(cards, 0..cards.len()) {
        let ranks = cards.iter().filter(|c| c.host == h).count();
        let gpus = cards
            .iter()
            .filter(|c| c.host == h)
            .find_map(|c| facts_of(c).get("gpus").cloned())
            .and_then(|g| g.split([' ', ':']).next()?.parse::<usize>().ok())
            .filter(|n| *n > 0)?;
        if ranks > gpus {
            return Some(format!(
                "{h} runs {ranks} ranks on its {gpus} GPU(s), so two ranks would share a GPU, which NCCL \
                 refuses (`Duplicate GPU detected`): start at most {gpus} rank(s) per node \
                 (--nproc-per-node={gpus}, --ntasks-per-node={gpus})"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smoke::nodes::tests::{made, HOST};

    /// A node whose GPUs NVML finds at fault is a problem; the healthy
    /// ones beside it are not.
    #[test]
    fn a_node_with_gpus_at_fault_is_a_problem() {
        let card = |h: &str, health: &str| {
            made(
                h,
                &format!("nccl=2.28.9\ndriver=580\ngpu_health={health}\n"),
                &[],
            )
        };
        let mut cards: Vec<Card> = ["a", "b", "c"].iter().map(|h| card(h, "ok")).collect();
        cards.push(card("d", "GPU 2: 1 uncorrected ECC error(s)"));
        let (same, diffs) = compare(&cards);
        assert!(
            !same.iter().any(|s| s.starts_with("GPU health")),
            "{same:?}"
        );
        assert_eq!(
            diffs
                .iter()
                .map(|d| (d.problem, d.line.as_str()))
                .collect::<Vec<_>>(),
            [(
                true,
                "d: GPU health GPU 2: 1 uncorrected ECC error(s) (the 3 other nodes: ok)"
            )]
        );
        let (same, diffs) = compare(&cards[..3]);
        assert!(same.contains(&"GPU health ok".to_string()) && diffs.is_empty());
    }

    /// One node's NCCL built from another commit of the same release: named,
    /// but no problem (NCCL 2.32 only says so, and goes on).
    #[test]
    fn another_commit_of_the_same_release_is_named_but_no_problem() {
        let card = |h: &str, git: &str| {
            made(
                h,
                &format!("nccl=2.32.3\nnccl_build=2.32.3+cuda13.2\nnccl_git={git}\n"),
                &[],
            )
        };
        let mut cards: Vec<Card> = ["a", "b"]
            .iter()
            .map(|h| card(h, "unknown unknown"))
            .collect();
        cards.push(card("c", "master v2.32.3-1-g3f2a1b4"));
        let (same, diffs) = compare(&cards);
        assert_eq!(same, ["NCCL 2.32.3", "NCCL build 2.32.3+cuda13.2"]);
        let got: Vec<(bool, &str)> = diffs.iter().map(|d| (d.problem, d.line.as_str())).collect();
        assert_eq!(
            got,
            [(
                false,
                "c: NCCL git version master v2.32.3-1-g3f2a1b4 (the 2 other nodes: unknown unknown)"
            )]
        );
    }

    #[test]
    fn more_ranks_than_gpus_on_a_node_is_named() {
        let card = |h: &str, gpus: &str| made(h, &format!("nccl=2.28.9\ngpus={gpus}\n"), &[]);
        let mut cards = vec![
            card("a", "2 x H100"),
            card("a", "2 x H100"),
            card("b", "2 x H100"),
        ];
        assert_eq!(crowded(&cards), None);
        cards.push(card("b", "2 x H100"));
        cards.push(card("b", "2 x H100"));
        assert_eq!(
            crowded(&cards).unwrap(),
            "b runs 3 ranks on its 2 GPU(s), so two ranks would share a GPU, which NCCL refuses \
             (`Duplicate GPU detected`): start at most 2 rank(s) per node (--nproc-per-node=2, \
             --ntasks-per-node=2)"
        );
        let none = vec![card("a", "none"), card("a", "none")];
        assert_eq!(crowded(&none), None);
    }

    #[test]
    fn the_minority_is_named_and_what_breaks_nccl_is_a_problem() {
        let mut cards: Vec<Card> = (0..16)
            .map(|i| {
                made(
                    &format!("node{i:02}"),
                    &format!("nccl=2.28.9\nset NCCL_SOCKET_IFNAME=ib0\n{HOST}"),
                    &[],
                )
            })
            .collect();
        cards[7].facts = format!("nccl=2.21.5\nset NCCL_SOCKET_IFNAME=ib0\n{HOST}");
        cards[3].facts = format!("nccl=2.28.7\n{HOST}");
        let (same, diffs) = compare(&cards);
        assert_eq!(
            same,
            [
                "driver 550.54.15",
                "CUDA 12.4",
                "GPUs 8 x NVIDIA H100",
                "NCCL's interfaces ib0",
                "RDMA ports none"
            ]
        );
        let got: Vec<(bool, &str)> = diffs.iter().map(|d| (d.problem, d.line.as_str())).collect();
        assert_eq!(
            got,
            [
                (true, "node03: NCCL 2.28.7 (the 14 other nodes: 2.28.9)"),
                (true, "node07: NCCL 2.21.5 (the 14 other nodes: 2.28.9)"),
                (
                    true,
                    "node03: NCCL_SOCKET_IFNAME unset (the 15 other nodes: ib0)"
                ),
            ]
        );
        // A patch release apart is a problem too (NCCL compares releases to
        // the patch); a second rank of a node alone is named by its rank.
        let mut two = vec![
            made("a", &format!("nccl=2.28.9\n{HOST}"), &[]),
            made("a", "nccl=2.28.7\n", &[]),
            made("b", &format!("nccl=2.28.9\n{HOST}"), &[]),
            made("b", "nccl=2.28.9\nset NCCL_DEBUG=INFO\n", &[]),
        ];
        let (_, diffs) = compare(&two);
        let got: Vec<(bool, &str)> = diffs.iter().map(|d| (d.problem, d.line.as_str())).collect();
        assert_eq!(
            got,
            [
                (true, "a rank 1: NCCL 2.28.7 (the 3 other ranks: 2.28.9)"),
                (
                    false,
                    "b rank 3: NCCL_DEBUG INFO (the 3 other ranks: unset)"
                ),
            ]
        );
        // Ranks placed cyclically (a, b, a, b, …): each host is named once.
        let cyclic: Vec<Card> = (0..7)
            .map(|r| {
                let v = if r < 3 { "2.21.5" } else { "2.28.9" };
                made(["a", "b"][r % 2], &format!("nccl={v}\n"), &[])
            })
            .collect();
        let lines: Vec<String> = compare(&cyclic).1.into_iter().map(|d| d.line).collect();
        assert_eq!(
            lines,
            ["a rank 0, 2, b rank 1: NCCL 2.21.5 (the 4 other ranks: 2.28.9)"]
        );
        two[1].facts = "nccl=2.28.9\n".into();
        two[3].facts = "nccl=2.28.9\n".into();
        assert_eq!(compare(&two).1, vec![]);
    }

    /// An empty value is named as one; a version that could not be read
    /// is not a problem.
    #[test]
    fn an_empty_value_and_an_unknown_version_are_named() {
        let mut two = vec![
            made("a", &format!("nccl=2.28.9\n{HOST}"), &[]),
            made("a", "nccl=2.28.9\n", &[]),
            made("b", &format!("nccl=2.28.9\n{HOST}"), &[]),
            made("b", "nccl=2.28.9\n", &[]),
        ];
        two[3].facts = "nccl=unknown\nset NCCL_SOCKET_IFNAME=\n".into();
        let lines: Vec<(bool, String)> = compare(&two)
            .1
            .into_iter()
            .map(|d| (d.problem, d.line))
            .collect();
        assert_eq!(
            lines,
            [
                (
                    false,
                    "b rank 3: NCCL unknown (the 3 other ranks: 2.28.9)".to_string()
                ),
                (
                    true,
                    "b rank 3: NCCL_SOCKET_IFNAME \"\" (empty) (the 3 other ranks: unset)"
                        .to_string()
                ),
            ]
        );
    }
}
