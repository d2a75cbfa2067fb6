//! Between hosts: the connections tested as NCCL's bootstrap connects,
//! the one `NCCL_SOCKET_IFNAME` that reached every node, and rank 0's
//! judge (`blocker`), the one place that ranks the causes found between
//! nodes.

use std::collections::BTreeMap;

use nccl_rendezvous::{Attempt, Card, Gathered};

use super::card::NO_IFACE;
use super::compare::{compare, facts_of, who};
use super::hosts_of;

/// The one `NCCL_SOCKET_IFNAME` that reached every node tried: an
/// interface name every node has, reached at every connection made to it.
/// `None` where none does. Where another interface's name starts with it,
/// the value is exact (`=eth0`).
pub(crate) fn proposal(g: &Gathered) -> Option<String> {
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
/// another version (NCCL compares them, to the patch, at init),
/// a plugin on some nodes only, more ranks on a node than its GPUs,
/// an address NCCL will use that another node cannot reach (NCCL hangs
/// until its timeout), a node or a link the pairs found slow or failing.
/// `None`: nothing known stops NCCL.
pub(crate) fn blocker(g: &Gathered) -> Option<String> {
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
            "NCCL releases differ: {}, and NCCL refuses ranks of another release (`Mismatched NCCL version \
             detected`): load the same NCCL everywhere (the same wheel, or --lib to the same file)",
            d.line
        ));
    }
    if let Some(d) = diffs.iter().find(|d| d.problem && d.key == "plugins") {
        return Some(format!(
            "NCCL plugins differ: {}, and NCCL hangs or fails where some ranks load a plugin the others do \
             not (NVIDIA/nccl#1634): put the same plugins on every node's loader path, or take the odd one \
             off it",
            d.line
        ));
    }
    if let Some(c) = super::compare::crowded(&g.cards) {
        return Some(c);
    }
    let failed: Vec<&Attempt> = g
        .probes
        .iter()
        .filter(|p| p.addr.nccl && p.error.is_some())
        .collect();
    // Nothing unreachable: a node or a link the pairs found slow.
    let Some(p) = failed.first() else {
        return super::pairs::cause(&super::pairs::Timed::sockets(g));
    };
    let host = |r: usize| g.cards.get(r).map_or("?", |c| c.host.as_str());
    let more = match failed.len() {
        1 => String::new(),
        n => format!(" (and {} more connection(s) to NCCL's addresses)", n - 1),
    };
    // Loopback, or a bridge of this host alone: no route or firewall is at
    // fault, the interface is.
    let otherwise = match crate::rules::ifaces::reaches_no_other_node(&p.addr.iface) {
        Some(kind) => format!(
            "{} is {kind}, which reaches no other node: set NCCL_SOCKET_IFNAME to an interface every \
             node has, or unset it",
            p.addr.iface
        ),
        None => "no one interface reached every node: check the routes and firewalls between them"
            .to_string(),
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
        fix(&otherwise)
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
pub(crate) fn reach_lines(g: &Gathered) -> Vec<(bool, String)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smoke::nodes::tests::made;

    /// The judge's causes, first to last: a rank without an interface,
    /// NCCL releases that differ, an address NCCL will use that is
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
                "NCCL releases differ: b: NCCL 2.21.5 (the other node: 2.28.9), and NCCL refuses ranks of another \
                 release (`Mismatched NCCL version detected`): load the same NCCL everywhere (the same wheel, or --lib to the \
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

    /// `NCCL_SOCKET_IFNAME=lo` on nodes whose other interfaces differ in
    /// name: the fix names loopback, not the routes and firewalls.
    #[test]
    fn loopback_that_nccl_will_use_is_named_as_the_cause() {
        let cards: Vec<Card> = [("a", "v0"), ("b", "v1")]
            .iter()
            .map(|(h, i)| made(h, "nccl=2.32.3\n", &["lo", i]))
            .collect();
        let mut g = Gathered::new(cards, Vec::new());
        for (f, t) in [(0, 1), (1, 0)] {
            g.probes.push(probe(f, t, &g, 0, Some("refused")));
        }
        assert_eq!(proposal(&g), None);
        let line = blocker(&g).unwrap();
        assert!(
            line.ends_with(
                "so NCCL would hang: lo is loopback, which reaches no other node: set \
                 NCCL_SOCKET_IFNAME to an interface every node has, or unset it"
            ),
            "{line}"
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
