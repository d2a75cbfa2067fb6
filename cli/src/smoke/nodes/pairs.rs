//! The pairs of nodes, timed in two rounds ([`nccl_rendezvous::pairs`]):
//! the line that sums them up, the node or link they name, in words, with
//! its figure and the median's, and the hosts a job should leave out. The
//! pairs are timed at the meeting, over sockets (by process rank, rank 0's
//! [`Gathered`]), and on GPUs over NCCL itself (by NCCL rank, every rank's
//! [`nccl_smoke::Summary`]): [`Timed`] names the ranks of either.

use nccl_rendezvous::pairs::{self, Finding, Pair};
use nccl_rendezvous::Gathered;

/// Transfers timed, and how their ranks are named.
pub(crate) struct Timed<'a> {
    pairs: &'a [Pair],
    /// A rank's host (over NCCL on one host: the rank, its GPU's own).
    host: Box<dyn Fn(usize) -> String + 'a>,
    /// A rank's host with what the transfer went over there.
    end: Box<dyn Fn(usize) -> String + 'a>,
    /// The ranks are one host's GPUs, not nodes: what they name is no
    /// host to leave out.
    pub(crate) by_gpu: bool,
}

impl<'a> Timed<'a> {
    /// The meeting's pairs, over sockets.
    pub(crate) fn sockets(g: &'a Gathered) -> Timed<'a> {
        Timed {
            pairs: &g.pairs,
            host: Box::new(move |r| host(g, r).to_string()),
            end: Box::new(move |r| end(g, r)),
            by_gpu: false,
        }
    }

    /// The pairs over NCCL, by NCCL rank, with each one's host.
    pub(crate) fn nccl(pairs: &'a [Pair], hosts: &'a [String]) -> Timed<'a> {
        let one_host = hosts.iter().all(|h| Some(h) == hosts.first());
        let name = move |r: usize| hosts.get(r).map_or("?", String::as_str);
        Timed {
            pairs,
            host: Box::new(move |r| match one_host {
                true => format!("rank {r}"),
                false => name(r).to_string(),
            }),
            end: Box::new(move |r| format!("{} (NCCL rank {r})", name(r))),
            by_gpu: one_host,
        }
    }

    fn host(&self, r: usize) -> String {
        (self.host)(r)
    }

    fn findings(&self) -> Vec<Finding> {
        pairs::findings(self.pairs, &|r| self.host(r))
    }
}

fn host(g: &Gathered, r: usize) -> &str {
    g.cards.get(r).map_or("?", |c| c.host.as_str())
}

/// A rank's host with the interface and address NCCL will use there.
fn end(g: &Gathered, r: usize) -> String {
    match g.cards.get(r).and_then(|c| c.addrs.iter().find(|a| a.nccl)) {
        Some(a) => format!("{} ({} {})", host(g, r), a.iface, a.ip),
        None => host(g, r).to_string(),
    }
}

/// A transfer's figure: its rate, or why it failed.
fn figure(p: &Pair) -> String {
    match (p.rate(), &p.error) {
        (Some(r), _) => pairs::shown_rate(r),
        (None, Some(e)) => format!("failed ({e})"),
        (None, None) => "nothing".into(),
    }
}

/// The round-one transfer from (`sending`) or to `rank`.
fn first_round<'a>(t: &Timed<'a>, rank: usize, sending: bool) -> Option<&'a Pair> {
    t.pairs.iter().find(|p| {
        p.round == 1
            && if sending {
                p.from == rank
            } else {
                p.to == rank
            }
    })
}

/// One finding in words, with its figures and the median's.
fn words(t: &Timed, f: &Finding, median: &str) -> String {
    match f {
        Finding::Node {
            rank,
            sending,
            pair,
        } => {
            // The partner of a transfer, and the words for its way.
            let (verb, to, other): (&str, &str, fn(&Pair) -> usize) = match sending {
                true => ("sends", "to", |p: &Pair| p.to),
                false => ("receives", "from", |p: &Pair| p.from),
            };
            let before = first_round(t, *rank, *sending)
                .map(|p| format!("{} {to} {} and ", figure(p), t.host(other(p))))
                .unwrap_or_default();
            format!(
                "{} {verb} slowly: {before}{} {to} {}, against the median link's {median}",
                (t.end)(*rank),
                figure(pair),
                t.host(other(pair))
            )
        }
        Finding::Link { pair, alone: false } => format!(
            "the link {} -> {} is slow: {}, while each end did well with other nodes, against the \
             median link's {median}: check that link (its cables, switch ports and routes)",
            (t.end)(pair.from),
            (t.end)(pair.to),
            figure(pair)
        ),
        Finding::Link { pair, alone: true } => {
            let back = t
                .pairs
                .iter()
                .find(|p| p.round == 1 && p.from == pair.to && p.to == pair.from)
                .map(|p| format!(" (the other way: {})", figure(p)))
                .unwrap_or_default();
            let against = match t.pairs.iter().filter(|p| p.round == 1).count() < 3 {
                true => format!(
                    "below the {} a job of two nodes needs at the least",
                    pairs::shown_rate(pairs::FLOOR)
                ),
                false => format!("against the median link's {median}"),
            };
            format!(
                "{} -> {} is slow: {}{back}, {against}; with no third node to pair them with, which end is at \
                 fault cannot be told",
                (t.end)(pair.from),
                (t.end)(pair.to),
                figure(pair)
            )
        }
    }
}

/// The median, shown.
fn median(t: &Timed) -> String {
    pairs::median(t.pairs).map_or("(none carried bytes)".into(), pairs::shown_rate)
}

/// The lines of the report: a headline, then each finding (a problem).
pub(super) fn pair_lines(g: &Gathered) -> Vec<(bool, String)> {
    let t = Timed::sockets(g);
    let first: Vec<&Pair> = g.pairs.iter().filter(|p| p.round == 1).collect();
    if first.is_empty() {
        return Vec::new();
    }
    let slowest = first
        .iter()
        .min_by(|a, b| a.rate().unwrap_or(0.0).total_cmp(&b.rate().unwrap_or(0.0)))
        .map(|p| {
            format!(
                "; slowest {} -> {} {}",
                host(g, p.from),
                host(g, p.to),
                figure(p)
            )
        })
        .unwrap_or_default();
    let second = g.pairs.len() - first.len();
    let rounds = match second {
        0 => "one round".to_string(),
        n => format!("two rounds ({n} transfer(s) in the second)"),
    };
    let mut out = vec![(
        false,
        format!(
            "pairs: {} link(s) timed in {rounds}, each node sending to the next for {} ms on the address NCCL \
             will use: median {}{slowest}",
            first.len(),
            pairs::SEND_FOR.as_millis(),
            median(&t)
        ),
    )];
    out.extend(findings_lines(&t));
    out
}

/// Each finding, as a problem line.
pub(crate) fn findings_lines(t: &Timed) -> Vec<(bool, String)> {
    let m = median(t);
    t.findings()
        .iter()
        .map(|f| (true, words(t, f, &m)))
        .collect()
}

/// The first finding, as rank 0's cause (with the fix), where there is one.
pub(crate) fn cause(t: &Timed) -> Option<String> {
    let all = t.findings();
    let f = all.first()?;
    let more = match all.len() {
        1 => String::new(),
        n => format!(" ({} more finding(s) above)", n - 1),
    };
    let fix = match f {
        Finding::Node { rank, .. } => format!("leave {} out of the job", t.host(*rank)),
        Finding::Link { .. } => "fix that link, or leave one of its ends out".into(),
    };
    Some(format!("{}{more}: {fix}", words(t, f, &median(t))))
}

/// The hosts the findings name as bad, each once (a link names none).
pub(crate) fn bad_hosts(t: &Timed) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if t.by_gpu {
        return out;
    }
    for f in t.findings() {
        if let Finding::Node { rank, .. } = f {
            let h = t.host(rank);
            if !out.contains(&h) {
                out.push(h);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smoke::nodes::tests::{made, HOST};

    fn ring(slow_from: usize) -> Gathered {
        let cards = (0..4)
            .map(|i| made(&format!("node{i}"), HOST, &["eth0"]))
            .collect();
        let mut g = Gathered::new(cards, Vec::new());
        g.pairs = (0..4)
            .map(|r| {
                let mb = if r == slow_from { 2 } else { 400 };
                Pair::new(r, (r + 1) % 4, 1, mb * 1_000_000, 1_000_000)
            })
            .collect();
        g
    }

    #[test]
    fn a_slow_sender_is_named_with_both_figures_and_the_fix() {
        let mut g = ring(2);
        g.pairs.push(Pair::new(2, 1, 2, 2_000_000, 1_000_000));
        g.pairs.push(Pair::new(0, 3, 2, 390_000_000, 1_000_000));
        assert_eq!(
            cause(&Timed::sockets(&g)).unwrap(),
            "node2 (eth0 10.0.0.1) sends slowly: 16.0 Mbit/s to node3 and 16.0 Mbit/s to node1, against the \
             median link's 3.2 Gbit/s: leave node2 out of the job"
        );
        assert_eq!(bad_hosts(&Timed::sockets(&g)), ["node2"]);
        let lines = pair_lines(&g);
        assert_eq!(
            lines[0].1,
            "pairs: 4 link(s) timed in two rounds (2 transfer(s) in the second), each node sending to the next \
             for 300 ms on the address NCCL will use: median 3.2 Gbit/s; slowest node2 -> node3 16.0 Mbit/s"
        );
        assert_eq!(lines.len(), 2);
        assert!(lines[1].0);
    }

    #[test]
    fn two_nodes_name_the_slow_link_against_the_floor() {
        let cards = (0..2)
            .map(|i| made(&format!("node{i}"), HOST, &["eth0"]))
            .collect();
        let mut g = Gathered::new(cards, Vec::new());
        g.pairs = vec![
            Pair::new(0, 1, 1, 7_600_000, 1_000_000),
            Pair::new(1, 0, 1, 2_400_000, 1_000_000),
        ];
        assert_eq!(
            cause(&Timed::sockets(&g)).unwrap(),
            "node1 (eth0 10.0.0.1) -> node0 (eth0 10.0.0.1) is slow: 19.2 Mbit/s (the other way: 60.8 Mbit/s), \
             below the 1.0 Gbit/s a job of two nodes needs at the least; with no third node to pair them with, \
             which end is at fault cannot be told: fix that link, or leave one of its ends out"
        );
    }

    #[test]
    fn a_healthy_ring_says_one_line() {
        let g = ring(9);
        assert_eq!(pair_lines(&g).len(), 1);
        assert_eq!(cause(&Timed::sockets(&g)), None);
        assert!(bad_hosts(&Timed::sockets(&g)).is_empty());
    }

    /// Over NCCL, four hosts of two GPUs each: the last GPU of each sends
    /// to the first of the next; host b sends slowly to c and, in round
    /// two, to a good receiver too.
    #[test]
    fn over_nccl_the_node_is_named_by_its_host_and_nccl_rank() {
        let hosts: Vec<String> = ["a", "a", "b", "b", "c", "c", "d", "d"]
            .iter()
            .map(|h| h.to_string())
            .collect();
        let gb = |from, to, round, tenths: u64| {
            Pair::new(
                from,
                to,
                round,
                32 << 20,
                (32u64 << 20) * 10 / (tenths * 1000),
            )
        };
        let mut p = vec![
            gb(1, 2, 1, 400),
            gb(3, 4, 1, 3),
            gb(5, 6, 1, 410),
            gb(7, 0, 1, 390),
        ];
        p.extend([gb(3, 4, 2, 3), gb(3, 6, 2, 3), gb(1, 4, 2, 400)]);
        let t = Timed::nccl(&p, &hosts);
        assert_eq!(
            cause(&t).unwrap(),
            "b (NCCL rank 3) sends slowly: 2.4 Gbit/s to c and 2.4 Gbit/s to d, against the median link's \
             320.3 Gbit/s: leave b out of the job"
        );
        assert_eq!(bad_hosts(&t), ["b"]);
        // The same ranks on one host: GPUs, named by rank; no host to
        // leave out.
        let one = vec!["a".to_string(); 8];
        let t = Timed::nccl(&p, &one);
        assert!(t.by_gpu && bad_hosts(&t).is_empty());
        assert!(cause(&t)
            .unwrap()
            .starts_with("a (NCCL rank 3) sends slowly: 2.4 Gbit/s to rank 4"));
    }
}
