//! Between machines: what each rank brings to the smoke test's meeting
//! (its card), and rank 0's reading of every card: the facts grouped by
//! value with the nodes in the minority named, and the connections tested
//! between hosts with the one `NCCL_SOCKET_IFNAME` that reaches them all.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use nccl_rendezvous::{Addr, Attempt, Card, Gathered};
use serde_json::{json, Value};

use crate::facts::host::Iface;
use crate::facts::settings::{Setting, Source};

/// The facts that belong to a host, not to a process: sent by the first
/// process of each node only, where the launcher says which that is.
const HOST_KEYS: [&str; 5] = ["driver", "cuda", "gpus", "ifaces", "rdma"];

/// Settings whose difference changes which interface NCCL takes: a
/// problem, not a note.
const INTERFACE_RULES: [&str; 4] = [
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_FAMILY",
    "NCCL_IB_HCA",
    "NCCL_NET",
];

/// The fact of a process on which NCCL finds no interface: why, in words
/// (a per-process fact, never compared: [`blocker`] names it).
const NO_IFACE: &str = "no_iface";

/// Why NCCL finds no interface here (`why`: the rule's words, or the
/// `NCCL_SOCKET_IFNAME=…` that chose), with the interfaces there are.
fn no_interface(ifaces: &[Iface], why: &str) -> String {
    let names: Vec<&str> = ifaces
        .iter()
        .filter(|i| i.name != "lo")
        .map(|i| i.name.as_str())
        .collect();
    let names = if names.is_empty() {
        "lo only".to_string()
    } else {
        names.join(", ")
    };
    match why.strip_prefix("NCCL_SOCKET_IFNAME=") {
        Some(v) => format!("NCCL_SOCKET_IFNAME={v} matches none of its interfaces ({names})"),
        None => format!("NCCL finds no interface: {why} (interfaces: {names})"),
    }
}

/// This process's card: its host, its facts (the NCCL `lib` it loads and
/// `version`, the settings in force and, on the first process of a node,
/// the driver, the GPUs, the interfaces NCCL would use and the RDMA
/// ports), and the addresses to test, NCCL's first.
pub fn card(
    lib: &Path,
    version: Option<(u32, u32, u32)>,
    settings: &[Setting],
    local_rank: Option<usize>,
) -> Card {
    let ifaces = crate::facts::host::interfaces();
    let env: Vec<(String, String)> = settings
        .iter()
        .map(|s| (s.name.clone(), s.value.clone()))
        .collect();
    let (picked, why) = nccl_smoke::net::nccl_pick(&ifaces, &env, version);
    let picked: Vec<String> = picked.iter().map(|i| i.name.clone()).collect();
    let mut facts = vec![
        format!(
            "nccl={}",
            version.map_or("unknown".into(), |(a, b, c)| format!("{a}.{b}.{c}"))
        ),
        format!("nccl_file={}", lib.display()),
    ];
    if picked.is_empty() {
        facts.push(format!("{NO_IFACE}={}", no_interface(&ifaces, &why)));
    }
    if local_rank.unwrap_or(0) == 0 {
        facts.extend(host_facts(&picked));
    }
    // NCCL_VERSION is NVIDIA's images' note for apt, which NCCL ignores.
    for s in settings.iter().filter(|s| s.name != "NCCL_VERSION") {
        let from = match &s.source {
            Source::Environment => String::new(),
            Source::File(p) => format!(" ({})", p.display()),
        };
        facts.push(format!("set {}={}{from}", s.name, s.value));
    }
    let mut text = String::new();
    for f in facts {
        // One fact a line: a value never breaks one, and one too long to
        // fit is left out (the card stays within its bound).
        let f = f.replace('\n', " ");
        if text.len() + f.len() + 1 > Card::MAX_TEXT {
            continue;
        }
        text.push_str(&f);
        text.push('\n');
    }
    Card::new(host_name(), text, addresses(&ifaces, &picked))
}

/// The host's facts, as `key=value` lines.
fn host_facts(picked: &[String]) -> Vec<String> {
    let driver =
        nccl_find::internal::read_bounded(Path::new("/proc/driver/nvidia/version"), 64 << 10)
            .ok()
            .and_then(|b| {
                let t = String::from_utf8_lossy(&b).into_owned();
                let line = t.lines().next()?.to_string();
                let at = line.find("Kernel Module")?;
                line[at..]
                    .split_whitespace()
                    .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))
                    .map(String::from)
            });
    let cuda =
        nccl_smoke::driver::cuda_version().map(|v| format!("{}.{}", v / 1000, v % 1000 / 10));
    let ports: Vec<String> = crate::facts::rdma::adapters(Path::new("/"))
        .iter()
        .flat_map(|a| {
            a.ports
                .iter()
                .map(move |p| format!("{}/{} {}", a.name, p.num, p.state))
        })
        .collect();
    let listed = |v: &[String], sep: &str| match v.is_empty() {
        true => "none".to_string(),
        false => v.join(sep),
    };
    vec![
        format!("driver={}", driver.as_deref().unwrap_or("none")),
        format!("cuda={}", cuda.as_deref().unwrap_or("none")),
        format!("gpus={}", gpus()),
        format!("ifaces={}", listed(picked, ",")),
        format!("rdma={}", listed(&ports, ", ")),
    ]
}

/// The GPUs the driver lists, without a context: `8 x NVIDIA H100 80GB
/// HBM3`, or `none`.
fn gpus() -> String {
    let dirs: Vec<std::path::PathBuf> = std::fs::read_dir("/proc/driver/nvidia/gpus")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    let mut models: Vec<String> = dirs
        .iter()
        .take(64)
        .filter_map(|d| {
            let b = nccl_find::internal::read_bounded(&d.join("information"), 64 << 10).ok()?;
            let t = String::from_utf8_lossy(&b).into_owned();
            t.lines()
                .find_map(|l| l.strip_prefix("Model:"))
                .map(|m| m.trim().to_string())
        })
        .collect();
    models.sort();
    models.dedup_by(|a, b| a == b);
    let n = dirs.len();
    match models.as_slice() {
        [] => "none".into(),
        [one] => format!("{n} x {one}"),
        many => format!("{n}: {}", many.join(", ")),
    }
}

/// This node's name: Slurm's (`SLURMD_NODENAME`), where it says it, else
/// the host's, as the kernel has it.
fn host_name() -> String {
    if let Some(n) = std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty())
    {
        return n;
    }
    nccl_find::internal::read_bounded(Path::new("/proc/sys/kernel/hostname"), 4096)
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default()
}

/// The addresses to test: first the one NCCL's bootstrap would use (the
/// first address of the first interface NCCL takes, IPv4 before IPv6, as
/// NCCL reads them), then every other address of every running interface
/// (loopback and link-local ones left out: no other host reaches them).
fn addresses(ifaces: &[Iface], picked: &[String]) -> Vec<Addr> {
    let usable = |i: &Iface| -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = i
            .addrs
            .iter()
            .filter(|a| !a.link_local)
            .filter_map(|a| a.ip.parse().ok())
            .collect();
        v.sort_by_key(|ip: &IpAddr| ip.is_ipv6());
        v
    };
    let mut out = Vec::new();
    let first = picked
        .first()
        .and_then(|p| ifaces.iter().find(|i| &i.name == p));
    if let Some(i) = first {
        if let Some(ip) = usable(i).first() {
            out.push(Addr::new(i.name.clone(), *ip, true));
        }
    }
    for i in ifaces.iter().filter(|i| i.running) {
        for ip in usable(i) {
            if ip.is_loopback() || out.iter().any(|a| a.ip == ip) {
                continue;
            }
            out.push(Addr::new(i.name.clone(), ip, false));
        }
    }
    out.truncate(Card::MAX_ADDRS);
    out
}

/// One card's facts, by key (`set NAME=…` lines under `NAME`).
fn facts_of(card: &Card) -> BTreeMap<String, String> {
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
        k => k,
    }
}

/// Whether two values of `key` differ in a way that breaks NCCL: another
/// minor version of NCCL, or another interface rule.
fn breaks(key: &str, a: &str, b: &str) -> bool {
    let minor = |v: &str| v.split('.').take(2).collect::<Vec<_>>().join(".");
    match key {
        // A version that could not be read is not known to differ.
        "nccl" => a != "unknown" && b != "unknown" && minor(a) != minor(b),
        k => INTERFACE_RULES.contains(&k),
    }
}

/// A difference between nodes, in words, and whether it breaks NCCL.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    pub problem: bool,
    pub key: String,
    pub line: String,
}

/// Rank 0's reading of the cards: the facts that are the same everywhere
/// (`NCCL 2.21.5`, …) and each difference, the nodes in the minority
/// named (`node07: NCCL 2.21.5 (the 15 other nodes: 2.28.9)`).
pub fn compare(cards: &[Card]) -> (Vec<String>, Vec<Difference>) {
    let facts: Vec<BTreeMap<String, String>> = cards.iter().map(facts_of).collect();
    let mut keys: Vec<String> = facts.iter().flat_map(|f| f.keys().cloned()).collect();
    keys.sort();
    keys.dedup();
    // NCCL first, then the host's facts, then the settings.
    keys.sort_by_key(|k| match k.as_str() {
        "nccl" => 0,
        "nccl_file" => 1,
        k => HOST_KEYS.iter().position(|h| *h == k).map_or(9, |i| 2 + i),
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
fn shown(v: &str) -> &str {
    if v.is_empty() {
        "\"\" (empty)"
    } else {
        v
    }
}

/// The nodes `ranks` name: a host alone where every one of its ranks is
/// among them, else the host with the ranks (`node3 rank 5`).
fn who(
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

/// The one `NCCL_SOCKET_IFNAME` that reached every node tried: an
/// interface name every node has, reached at every connection made to it.
/// `None` where none does. Where another interface's name starts with it,
/// the value is exact (`=eth0`).
pub fn proposal(g: &Gathered) -> Option<String> {
    if g.probes.is_empty() {
        return None;
    }
    let with_addrs: Vec<&Card> = g.cards.iter().filter(|c| !c.addrs.is_empty()).collect();
    let mut names: Vec<&str> = with_addrs
        .first()?
        .addrs
        .iter()
        .map(|a| a.iface.as_str())
        .filter(|n| {
            with_addrs
                .iter()
                .all(|c| c.addrs.iter().any(|a| a.iface == *n))
        })
        .collect();
    names.dedup();
    let mut pairs: Vec<(usize, usize)> = g.probes.iter().map(|p| (p.from, p.to)).collect();
    pairs.dedup();
    let works = |n: &str| {
        pairs.iter().all(|(f, t)| {
            let tried: Vec<&Attempt> = g
                .probes
                .iter()
                .filter(|p| (p.from, p.to) == (*f, *t) && p.addr.iface == n)
                .collect();
            !tried.is_empty() && tried.iter().all(|p| p.error.is_none())
        })
    };
    let name = names.into_iter().find(|n| works(n))?;
    let longer = g
        .cards
        .iter()
        .flat_map(|c| c.addrs.iter())
        .any(|a| a.iface != name && a.iface.starts_with(name));
    Some(if longer {
        format!("={name}")
    } else {
        name.to_string()
    })
}

/// What the meeting showed will make NCCL fail, in one line with the fix:
/// rank 0's judge ([`nccl_rendezvous::Judge`]), the one place that ranks
/// the causes found between nodes. The first of: a rank on which NCCL
/// finds no interface (its bootstrap cannot start), NCCL releases of
/// another minor version (their bootstraps do not speak to each other),
/// an address NCCL will use that another node cannot reach (NCCL hangs
/// until its timeout). `None`: nothing known stops NCCL.
pub fn blocker(g: &Gathered) -> Option<String> {
    let facts: Vec<BTreeMap<String, String>> = g.cards.iter().map(facts_of).collect();
    let fix = |otherwise: &str| match proposal(g) {
        Some(v) => format!("use NCCL_SOCKET_IFNAME={v}, which reached every node"),
        None => otherwise.to_string(),
    };
    let lost: Vec<usize> = (0..facts.len())
        .filter(|r| facts[*r].contains_key(NO_IFACE))
        .collect();
    if let Some(first) = lost.first() {
        let why = &facts[*first][NO_IFACE];
        let same = lost.iter().all(|r| facts[*r][NO_IFACE] == *why);
        let more = match lost.len() {
            n if n > 1 && !same => " (on the first of them; each in --json)".to_string(),
            _ => String::new(),
        };
        return Some(format!(
            "{}: {why}{more}, so NCCL cannot start there: {}",
            who(&g.cards, &lost, &facts, false),
            fix("unset NCCL_SOCKET_IFNAME, or set it to an interface every node has")
        ));
    }
    let (_, diffs) = compare(&g.cards);
    if let Some(d) = diffs.iter().find(|d| d.problem && d.key == "nccl") {
        return Some(format!(
            "NCCL releases differ: {}, and NCCL's bootstrap needs one minor release on every rank: load \
             the same NCCL everywhere (the same wheel, or --lib to the same file)",
            d.line
        ));
    }
    let failed: Vec<&Attempt> = g
        .probes
        .iter()
        .filter(|p| p.addr.nccl && p.error.is_some())
        .collect();
    let p = failed.first()?;
    let host = |r: usize| g.cards.get(r).map_or("?", |c| c.host.as_str());
    let more = match failed.len() {
        1 => String::new(),
        n => format!(" (and {} more connection(s) to NCCL's addresses)", n - 1),
    };
    Some(format!(
        "{} (rank {}) cannot reach {} {} of {} (rank {}), which NCCL will use ({}){more}, so NCCL would \
         hang: {}",
        host(p.from),
        p.from,
        p.addr.iface,
        p.addr.ip,
        host(p.to),
        p.to,
        p.error.as_deref().unwrap_or(""),
        fix("no one interface reached every node: check the routes and firewalls between them")
    ))
}

/// `failed`, connections to the interfaces NCCL will not use, by
/// interface and error, in one line (`None`: none).
fn others_not_reached(failed: &[&Attempt]) -> Option<String> {
    let mut by: Vec<(&str, &str, usize)> = Vec::new();
    for p in failed {
        let (i, e) = (p.addr.iface.as_str(), p.error.as_deref().unwrap_or(""));
        match by.iter_mut().find(|b| b.0 == i && b.1 == e) {
            Some(b) => b.2 += 1,
            None => by.push((i, e, 1)),
        }
    }
    let parts: Vec<String> = by
        .iter()
        .map(|(i, e, n)| format!("{i} {n}x ({e})"))
        .collect();
    (!parts.is_empty()).then(|| {
        format!(
            "not reached on the other interfaces: {} (each in --json)",
            parts.join(", ")
        )
    })
}

/// Each failed connection to an address NCCL will use, a problem line
/// each, at most [`MAX_LINES`] of them and a count of the rest.
fn failed_lines(g: &Gathered, nccl: &[&Attempt]) -> Vec<(bool, String)> {
    let host = |r: usize| g.cards.get(r).map_or("?", |c| c.host.as_str());
    let mut out = Vec::new();
    for (i, p) in nccl.iter().enumerate() {
        if i == MAX_LINES {
            out.push((
                false,
                format!("(and {} more: every one is in --json)", nccl.len() - i),
            ));
            break;
        }
        out.push((
            true,
            format!(
                "{} (rank {}) -> {} (rank {}) {} {}, which NCCL will use: {}",
                host(p.from),
                p.from,
                host(p.to),
                p.to,
                p.addr.iface,
                p.addr.ip,
                p.error.as_deref().unwrap_or("")
            ),
        ));
    }
    out
}

/// The most failed connections the text report names one by one.
const MAX_LINES: usize = 12;

/// The reachability report: a headline, then each failed connection
/// (those to the addresses NCCL will use are problems), then the proposal.
pub fn reach_lines(g: &Gathered) -> Vec<(bool, String)> {
    let hosts = hosts_of(&g.cards, 0..g.cards.len());
    if g.probes.is_empty() {
        let why = if hosts.len() < 2 {
            "one host: nothing to test between hosts".to_string()
        } else {
            "nothing was tested (the processes did not say their host, or offered no address)"
                .into()
        };
        return vec![(false, format!("reach: {why}"))];
    }
    // Failed connections: to the addresses NCCL will use, and the others.
    let (nccl, others): (Vec<&Attempt>, Vec<&Attempt>) = g
        .probes
        .iter()
        .filter(|p| p.error.is_some())
        .partition(|p| p.addr.nccl);
    let nccl_failed = nccl.len();
    let mut out = vec![(
        false,
        format!(
            "reach: {} connection(s) tested between {} hosts, as NCCL's bootstrap connects (the last rank of each host to the next host and to rank 0): {}",
            g.probes.len(),
            hosts.len(),
            if nccl_failed == 0 {
                "every address NCCL will use was reached".to_string()
            } else {
                format!("{nccl_failed} to an address NCCL will use failed")
            }
        ),
    )];
    out.extend(failed_lines(g, &nccl));
    if let Some(line) = others_not_reached(&others) {
        out.push((false, line));
    }
    let rdma = |c: &Card| facts_of(c).get("rdma").is_some_and(|v| v != "none");
    if g.cards.iter().any(rdma) {
        out.push((
            false,
            "RDMA (NCCL_IB_HCA, RoCE GIDs) was not tested here: this test is TCP, on the addresses NCCL's \
             bootstrap uses; the run's own transfers test RDMA"
                .into(),
        ));
    }
    if nccl_failed > 0 {
        out.push((
            false,
            match proposal(g) {
                Some(v) => format!("proposed: NCCL_SOCKET_IFNAME={v} (it reached every host tried)"),
                None => "proposed: none; no one interface reached every host tried: check the routes and firewalls between them".into(),
            },
        ));
    }
    out
}

/// The whole multi-node report for rank 0, as (problem, line) pairs.
/// Nothing where every rank is on one host and says the same: the usual
/// job on one machine hears nothing new (`--json` has it all).
pub fn report(g: &Gathered) -> Vec<(bool, String)> {
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
    }
    out
}

/// The hosts of `ranks`, each once, in the order of its first rank there
/// (a host whose ranks are not next to each other, as srun's cyclic
/// distribution places them, is still one host).
fn hosts_of(cards: &[Card], ranks: impl Iterator<Item = usize>) -> Vec<&str> {
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
pub fn json(g: &Gathered) -> Value {
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
    })
}

/// The ranks whose `values` (rank, microseconds) are clear outliers: at
/// least 1.5 times the median of them all and `floor_us` above it, among
/// at least 3 ranks (fewer say nothing). The median, and each outlier.
pub fn outliers(values: &[(usize, u64)], floor_us: u64) -> (u64, Vec<(usize, u64)>) {
    if values.len() < 3 {
        return (0, Vec::new());
    }
    let mut sorted: Vec<u64> = values.iter().map(|v| v.1).collect();
    sorted.sort_unstable();
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2
    };
    let slow = values
        .iter()
        .copied()
        .filter(|(_, v)| *v as f64 >= 1.5 * median as f64 && *v >= median.saturating_add(floor_us))
        .collect();
    (median, slow)
}

/// The least a setup must exceed the median by to be named: one second.
const SETUP_FLOOR_US: u64 = 1_000_000;

/// Rank 0's lines on the ranks whose own times are clear outliers
/// ([`nccl_smoke::TIMES`]: setup, and the time per call at the largest
/// size), each with its node; and the same as JSON.
pub fn slow_ranks(s: &nccl_smoke::Summary, g: Option<&Gathered>) -> (Vec<String>, Value) {
    let host = |r: usize| {
        g.and_then(|g| g.cards.get(r))
            .map(|c| c.host.clone())
            .filter(|h| !h.is_empty())
    };
    let mut all: Vec<(usize, &[u64])> = vec![(0, s.times_us.as_slice())];
    all.extend(s.peers.iter().map(|p| (p.rank, p.times_us.as_slice())));
    let (mut lines, mut found) = (Vec::new(), Vec::new());
    for (i, what) in nccl_smoke::TIMES.iter().enumerate() {
        let values: Vec<(usize, u64)> = all
            .iter()
            .filter_map(|(r, t)| t.get(i).map(|v| (*r, *v)))
            .filter(|(_, v)| *v > 0)
            .collect();
        let floor = if i == 0 { SETUP_FLOOR_US } else { 0 };
        let (median, slow) = outliers(&values, floor);
        for (r, v) in slow {
            let at = host(r).map_or(String::new(), |h| format!(" ({h})"));
            lines.push(format!(
                "timing: rank {r}{at}: {what} {}, {:.1}x the median of {} ranks ({})",
                micros(v),
                v as f64 / median.max(1) as f64,
                values.len(),
                micros(median)
            ));
            found.push(
                json!({"rank": r, "host": host(r), "what": what, "us": v, "median_us": median}),
            );
        }
    }
    let doc = json!({
        "names": nccl_smoke::TIMES,
        "ranks": all.iter().map(|(r, t)| json!({"rank": r, "us": t})).collect::<Vec<_>>(),
        "outliers": found,
    });
    (lines, doc)
}

/// Microseconds in words: `4.20 s`, `907.0 ms`, `830 us`.
fn micros(us: u64) -> String {
    match us {
        1_000_000.. => format!("{:.2} s", us as f64 / 1e6),
        1_000.. => format!("{:.1} ms", us as f64 / 1e3),
        _ => format!("{us} us"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Times per call at 256 MiB (us) and setups (us), as eight ranks of a
    /// 2-node H100 job reported them, and the same with one slow node.
    const PER_CALL: [u64; 8] = [1712, 1709, 1715, 1711, 1710, 1713, 1708, 1714];
    const SETUP: [u64; 8] = [
        912_000, 884_000, 931_000, 902_000, 4_210_000, 890_000, 921_000, 873_000,
    ];

    fn ranked(v: &[u64]) -> Vec<(usize, u64)> {
        v.iter().copied().enumerate().collect()
    }

    #[test]
    fn only_a_clear_outlier_is_named() {
        // Ranks that wait for each other time the same: nothing to name.
        assert_eq!(outliers(&ranked(&PER_CALL), 0), (1711, vec![]));
        // One setup of 4.2 s among 0.9 s ones.
        assert_eq!(
            outliers(&ranked(&SETUP), SETUP_FLOOR_US),
            (907_000, vec![(4, 4_210_000)])
        );
        // 1.5x the median, but less than the floor above it: not named.
        let quick = [100_000, 100_000, 100_000, 400_000];
        assert_eq!(outliers(&ranked(&quick), SETUP_FLOOR_US).1, vec![]);
        assert_eq!(outliers(&ranked(&quick), 0).1, vec![(3, 400_000)]);
        // Two slow ranks of eight, and fewer than three ranks.
        let mut two = PER_CALL;
        two[2] = 3100;
        two[6] = 2900;
        assert_eq!(outliers(&ranked(&two), 0).1, vec![(2, 3100), (6, 2900)]);
        assert_eq!(outliers(&ranked(&[1, 100]), 0), (0, vec![]));
    }

    #[test]
    fn a_card_holds_the_settings_and_the_hosts_facts_once_per_node() {
        let set = |name: &str, value: &str, source: Source| Setting {
            name: name.into(),
            value: value.into(),
            source,
        };
        let settings = [
            set("NCCL_SOCKET_IFNAME", "eth0", Source::Environment),
            set(
                "NCCL_IB_HCA",
                "mlx5_0",
                Source::File("/etc/nccl.conf".into()),
            ),
            set("NCCL_VERSION", "2.28.3-1", Source::Environment),
            set(
                "NCCL_DEBUG_SUBSYS",
                &"x\n".repeat(5000),
                Source::Environment,
            ),
        ];
        let lib = Path::new("/opt/nccl/lib/libnccl.so.2");
        let first = card(lib, Some((2, 28, 9)), &settings, None);
        let lines: Vec<&str> = first.facts.lines().collect();
        assert_eq!(
            lines[..2],
            ["nccl=2.28.9", "nccl_file=/opt/nccl/lib/libnccl.so.2"]
        );
        let keys: Vec<&str> = lines[2..7]
            .iter()
            .map(|l| l.split('=').next().unwrap())
            .collect();
        assert_eq!(keys, ["driver", "cuda", "gpus", "ifaces", "rdma"]);
        assert_eq!(
            lines[7..],
            [
                "set NCCL_SOCKET_IFNAME=eth0",
                "set NCCL_IB_HCA=mlx5_0 (/etc/nccl.conf)"
            ]
        );
        // The 10 KB value does not fit: left out; a line break in a value
        // never makes a line of its own.
        assert!(first.facts.len() <= Card::MAX_TEXT);
        assert!(
            !first.facts.contains("NCCL_VERSION") && !first.facts.contains("NCCL_DEBUG_SUBSYS")
        );
        // The first process of a node (or one that cannot tell, above)
        // brings the host's facts; the others do not.
        let second = card(lib, None, &settings[..1], Some(1));
        assert_eq!(
            second.facts,
            "nccl=unknown\nnccl_file=/opt/nccl/lib/libnccl.so.2\nset NCCL_SOCKET_IFNAME=eth0\n"
        );
    }

    fn made(host: &str, facts: &str, ifaces: &[&str]) -> Card {
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

    const HOST: &str = "driver=550.54.15\ncuda=12.4\ngpus=8 x NVIDIA H100\nifaces=ib0\nrdma=none\n";

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
                (false, "node03: NCCL 2.28.7 (the 14 other nodes: 2.28.9)"),
                (true, "node07: NCCL 2.21.5 (the 14 other nodes: 2.28.9)"),
                (
                    true,
                    "node03: NCCL_SOCKET_IFNAME unset (the 15 other nodes: ib0)"
                ),
            ]
        );
        // A patch release apart is a note; a second rank of a node alone
        // is named by its rank.
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
                (false, "a rank 1: NCCL 2.28.7 (the 3 other ranks: 2.28.9)"),
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

    /// The judge's causes, first to last: a rank without an interface,
    /// NCCL minor releases that differ, an address NCCL will use that is
    /// not reached; each with its fix.
    #[test]
    fn the_blocker_is_the_first_cause_with_its_fix() {
        let cards: Vec<Card> = ["a", "b"]
            .iter()
            .map(|h| made(h, "nccl=2.28.9\n", &["ib0", "eth0"]))
            .collect();
        let mut g = Gathered::new(cards, Vec::new());
        assert_eq!(blocker(&g), None);
        for (f, t) in [(0, 1), (1, 0)] {
            g.probes.push(probe(f, t, &g, 0, Some("timed out")));
            g.probes.push(probe(f, t, &g, 1, None));
        }
        assert_eq!(
            blocker(&g).as_deref(),
            Some(
                "a (rank 0) cannot reach ib0 10.0.0.1 of b (rank 1), which NCCL will use (timed out) (and 1 more \
                 connection(s) to NCCL's addresses), so NCCL would hang: use NCCL_SOCKET_IFNAME=eth0, which \
                 reached every node"
            )
        );
        g.cards[1].facts = "nccl=2.21.5\n".into();
        assert_eq!(
            blocker(&g).as_deref(),
            Some(
                "NCCL releases differ: b: NCCL 2.21.5 (the other node: 2.28.9), and NCCL's bootstrap needs one \
                 minor release on every rank: load the same NCCL everywhere (the same wheel, or --lib to the \
                 same file)"
            )
        );
        g.cards[0].facts =
            "nccl=2.28.9\nno_iface=NCCL_SOCKET_IFNAME=x0 matches none of its interfaces (eth0)\n"
                .into();
        assert_eq!(
            blocker(&g).as_deref(),
            Some(
                "a: NCCL_SOCKET_IFNAME=x0 matches none of its interfaces (eth0), so NCCL cannot start there: use \
                 NCCL_SOCKET_IFNAME=eth0, which reached every node"
            )
        );
    }

    fn probe(from: usize, to: usize, g: &Gathered, i: usize, error: Option<&str>) -> Attempt {
        let mut p = Attempt::new(from, to, g.cards[to].addrs[i].clone());
        p.error = error.map(String::from);
        p
    }

    #[test]
    fn the_proposal_is_the_interface_reached_at_every_connection() {
        let cards: Vec<Card> = ["a", "b", "c"]
            .iter()
            .map(|h| made(h, "", &["dummy0", "eth0", "eth01"]))
            .collect();
        let mut g = Gathered::new(cards, Vec::new());
        assert_eq!(proposal(&g), None);
        let bad = Some("network unreachable");
        for (f, t) in [(0, 1), (1, 2), (2, 0)] {
            g.probes.push(probe(f, t, &g, 0, bad));
            g.probes.push(probe(f, t, &g, 1, None));
            g.probes
                .push(probe(f, t, &g, 2, if t == 2 { bad } else { None }));
        }
        // eth0 reached everywhere; another name starts with it: exact.
        assert_eq!(proposal(&g).as_deref(), Some("=eth0"));
        let lines = reach_lines(&g);
        assert!(
            lines[0]
                .1
                .ends_with(": 3 to an address NCCL will use failed"),
            "{lines:?}"
        );
        assert_eq!(
            lines.last().unwrap(),
            &(
                false,
                "proposed: NCCL_SOCKET_IFNAME==eth0 (it reached every host tried)".to_string()
            )
        );
        // Nothing reached everywhere.
        let p = g
            .probes
            .iter()
            .position(|p| p.addr.iface == "eth0" && p.to == 0)
            .unwrap();
        g.probes[p].error = Some("timed out".into());
        assert_eq!(proposal(&g), None);
        assert!(reach_lines(&g)
            .last()
            .unwrap()
            .1
            .starts_with("proposed: none;"));
    }
}
