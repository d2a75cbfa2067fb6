//! Pairs of nodes, timed over the address NCCL will use, in two rounds:
//! which node (or which link) is slow or failing, told apart.
//!
//! Round one is the ring the meeting already tests (the `reach` room): the
//! last rank of each host sends to the first rank of the next for
//! [`SEND_FOR`], as NCCL's socket transport would (one TCP stream, the
//! bootstrap's address), while it receives from the host before it; every
//! node sends once and receives once, all at the same time. A link is a
//! suspect when it failed, or when it carried less than a [`SLOW`]th of the
//! median link's rate.
//!
//! Round two (only where round one found a suspect) times each suspect
//! link again, and pairs each of its ends with a node that did well: the
//! sender of the link sends to a good receiver, a good sender sends to the
//! link's receiver. The sender slow again is a bad node (its sending); the
//! receiver slow again, a bad node (its receiving); both fine, the link
//! between the two where it is slow again, and a moment's slowness (no
//! finding) where it is not. Two rounds, whatever the number of nodes.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::untrusted::peer_text;

/// How long one pair sends.
pub const SEND_FOR: Duration = Duration::from_millis(300);
/// A link is slow below the median link's rate divided by this.
pub const SLOW: u64 = 4;
/// The most bytes one pair sends, whatever its rate.
const MAX_BYTES: u64 = 1 << 30;
/// What one write hands the kernel.
const CHUNK: usize = 64 << 10;
/// The most a sender keeps in flight: a shaped link drains it quickly.
const SEND_BUFFER: libc::c_int = 1 << 20;
/// How long a receiver reads one pair's bytes, at most.
const SINK_FOR: Duration = Duration::from_secs(10);
/// The most pairs one rank receives at once; past it a connection is only
/// answered with the tag.
const MAX_SINKS: usize = 64;
/// The most suspect links round two looks at again.
pub(crate) const MAX_SUSPECTS: usize = 64;

/// One timed transfer: rank `from` sent to rank `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pair {
    /// The rank that sent.
    pub from: usize,
    /// The rank that received.
    pub to: usize,
    /// 1 or 2.
    pub round: u8,
    /// The bytes the receiver counted.
    pub bytes: u64,
    /// From the first byte sent to the receiver's count back, in µs.
    pub micros: u64,
    /// Why it failed, in words; `None` where it carried bytes.
    pub error: Option<String>,
}

impl Pair {
    /// A transfer of `bytes` in `micros` from rank `from` to `to`.
    pub fn new(from: usize, to: usize, round: u8, bytes: u64, micros: u64) -> Pair {
        Pair {
            from,
            to,
            round,
            bytes,
            micros,
            error: None,
        }
    }

    /// A transfer from rank `from` to `to` that failed, and why.
    pub fn failed(from: usize, to: usize, round: u8, why: String) -> Pair {
        let mut p = Pair::new(from, to, round, 0, 0);
        p.error = Some(why);
        p
    }

    /// Bytes per second; `None` where it failed.
    pub fn rate(&self) -> Option<f64> {
        (self.error.is_none() && self.micros > 0)
            .then(|| self.bytes as f64 * 1e6 / self.micros as f64)
    }
}

/// What two rounds of pairs found: a node or a link, with the transfer
/// that shows it.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    /// A node slow or failing with every partner it was given: sending
    /// (`sending`), or receiving.
    Node {
        /// A rank of the node.
        rank: usize,
        /// Whether its sending is at fault (else its receiving).
        sending: bool,
        /// The round-two transfer that confirmed it.
        pair: Pair,
    },
    /// A link slow or failing while both its ends did well with others;
    /// `alone`: there was no node to pair them with, so which it is could
    /// not be told.
    Link {
        /// The round-one transfer.
        pair: Pair,
        /// No third node to tell the link from its ends.
        alone: bool,
    },
}

/// The median rate of round one's transfers that carried bytes, in bytes
/// per second.
pub fn median(pairs: &[Pair]) -> Option<f64> {
    let mut r: Vec<f64> = pairs
        .iter()
        .filter(|p| p.round == 1)
        .filter_map(Pair::rate)
        .collect();
    if r.is_empty() {
        return None;
    }
    r.sort_by(f64::total_cmp);
    Some(r[r.len() / 2])
}

/// Below this (bytes per second: 1 Gbit/s), a link of a job of two nodes
/// is slow whatever the other carries: two links make no majority (and a
/// node whose sending is slow slows what it receives too).
pub const FLOOR: f64 = 125e6;

/// The median of round one and whether it is too few links to make one
/// (two nodes: [`FLOOR`] judges them).
type Norm = (Option<f64>, bool);

fn norm(pairs: &[Pair]) -> Norm {
    let few = pairs.iter().filter(|p| p.round == 1).count() < 3;
    (median(pairs), few)
}

/// Whether a transfer failed or was slow against the median (or, of two
/// nodes, the floor).
fn bad(p: &Pair, (median, few): Norm) -> bool {
    match p.rate() {
        None => true,
        Some(r) => (few && r < FLOOR) || median.is_some_and(|m| r * (SLOW as f64) < m),
    }
}

/// Round one's suspect links, slowest first, at most [`MAX_SUSPECTS`].
fn suspects(pairs: &[Pair]) -> Vec<&Pair> {
    let m = norm(pairs);
    let mut out: Vec<&Pair> = pairs.iter().filter(|p| p.round == 1 && bad(p, m)).collect();
    out.sort_by(|a, b| a.rate().unwrap_or(0.0).total_cmp(&b.rate().unwrap_or(0.0)));
    out.truncate(MAX_SUSPECTS);
    out
}

/// Round two's transfers (sender, receiver) for round one's `pairs`, with
/// `host` naming each rank's host: each suspect link again, its sender to
/// a good node, a good node to its receiver. A good node is on a host at
/// neither end of any suspect (a node whose sending is slow slows the
/// link into it too, so a ring may have no clean link left, but still
/// clean nodes). Empty where there is no suspect, or no good node.
pub fn round_two(pairs: &[Pair], host: &dyn Fn(usize) -> String) -> Vec<(usize, usize)> {
    let sus = suspects(pairs);
    if sus.is_empty() {
        return Vec::new();
    }
    let tainted: Vec<String> = sus
        .iter()
        .flat_map(|p| [host(p.from), host(p.to)])
        .collect();
    let mut good: Vec<usize> = Vec::new();
    for p in pairs.iter().filter(|p| p.round == 1 && p.error.is_none()) {
        for r in [p.to, p.from] {
            if !tainted.contains(&host(r)) && !good.contains(&r) {
                good.push(r);
            }
        }
    }
    if good.is_empty() {
        return Vec::new();
    }
    let mut plan = Vec::new();
    for (i, s) in sus.iter().enumerate() {
        plan.push((s.from, s.to));
        plan.push((s.from, good[i % good.len()]));
        plan.push((good[(i + 1) % good.len()], s.to));
    }
    plan
}

/// Round one over ranks on hosts numbered `unit` (by rank): each rank
/// whose next rank, in a ring, is on another host sends to it; on one
/// host, every rank to the next. Empty for one rank.
pub fn ring(unit: &[usize]) -> Vec<(usize, usize)> {
    let n = unit.len();
    let one_host = unit.iter().all(|u| *u == unit[0]);
    (0..n)
        .filter(|&r| n > 1 && (one_host || unit[r] != unit[(r + 1) % n]))
        .map(|r| (r, (r + 1) % n))
        .collect()
}

/// `plan`'s transfers in steps, in order, such that no host (`unit` of
/// each rank) sends or receives twice in one step: each transfer is timed
/// alone on both its hosts.
pub fn steps(plan: &[(usize, usize)], unit: &[usize]) -> Vec<Vec<(usize, usize)>> {
    let u = |r: usize| unit.get(r).copied().unwrap_or(r);
    let mut out: Vec<Vec<(usize, usize)>> = Vec::new();
    for &(a, b) in plan {
        let free = |s: &Vec<(usize, usize)>| {
            s.iter()
                .all(|&(x, y)| ![u(x), u(y)].iter().any(|h| *h == u(a) || *h == u(b)))
        };
        match out.iter_mut().find(|s| free(s)) {
            Some(s) => s.push((a, b)),
            None => out.push(vec![(a, b)]),
        }
    }
    out
}

/// Each rank's host as a number, in order of first appearance, for
/// [`ring`] and [`steps`]; on one host, each rank its own (the pairs are
/// then between GPUs).
pub fn units(hosts: &[String]) -> Vec<usize> {
    let mut seen: Vec<&str> = Vec::new();
    let by_host: Vec<usize> = hosts
        .iter()
        .map(|h| match seen.iter().position(|s| *s == h) {
            Some(i) => i,
            None => {
                seen.push(h);
                seen.len() - 1
            }
        })
        .collect();
    match seen.len() {
        1 => (0..hosts.len()).collect(),
        _ => by_host,
    }
}

/// What the two rounds found, nodes first (each host once, `host` naming
/// each rank's): each suspect link of round one, told by round two. A
/// link with a bad node at one end is that node's symptom, not a finding
/// of its own.
pub fn findings(pairs: &[Pair], host: &dyn Fn(usize) -> String) -> Vec<Finding> {
    let m = norm(pairs);
    let second: Vec<&Pair> = pairs.iter().filter(|p| p.round == 2).collect();
    let mut nodes: Vec<Finding> = Vec::new();
    let mut links = Vec::new();
    for s in suspects(pairs) {
        let sent = second.iter().find(|p| p.from == s.from && p.to != s.to);
        let got = second.iter().find(|p| p.to == s.to && p.from != s.from);
        let (Some(sent), Some(got)) = (sent, got) else {
            links.push(Finding::Link {
                pair: s.clone(),
                alone: true,
            });
            continue;
        };
        let (a, b) = (bad(sent, m), bad(got, m));
        if a {
            keep_worst(&mut nodes, host, s.from, true, sent);
        }
        if b {
            keep_worst(&mut nodes, host, s.to, false, got);
        }
        // Both ends did well with others: the link, if it is slow again;
        // else a moment's slowness, which is no finding.
        let again = second.iter().find(|p| p.from == s.from && p.to == s.to);
        if !a && !b && again.map_or(true, |p| bad(p, m)) {
            links.push(Finding::Link {
                pair: s.clone(),
                alone: false,
            });
        }
    }
    let bad: Vec<String> = nodes
        .iter()
        .filter_map(|f| match f {
            Finding::Node { rank, .. } => Some(host(*rank)),
            Finding::Link { .. } => None,
        })
        .collect();
    let mut kept: Vec<Finding> = Vec::new();
    for f in links {
        let Finding::Link { pair, .. } = &f else {
            continue;
        };
        // A link whose reverse is named already is the same two nodes.
        let reverse = kept.iter().any(
            |k| matches!(k, Finding::Link { pair: q, .. } if q.from == pair.to && q.to == pair.from),
        );
        if !reverse && !bad.contains(&host(pair.from)) && !bad.contains(&host(pair.to)) {
            kept.push(f);
        }
    }
    nodes.extend(kept);
    nodes
}

/// A node found bad by `pair`, once: where it is found bad both ways (a
/// node whose sending is slow also delays the acknowledgements of what it
/// receives), the slower transfer says which.
fn keep_worst(
    nodes: &mut Vec<Finding>,
    host: &dyn Fn(usize) -> String,
    rank: usize,
    sending: bool,
    pair: &Pair,
) {
    let new = Finding::Node {
        rank,
        sending,
        pair: pair.clone(),
    };
    let rate = |p: &Pair| p.rate().unwrap_or(0.0);
    match nodes
        .iter_mut()
        .find(|f| matches!(f, Finding::Node { rank: r, .. } if host(*r) == host(rank)))
    {
        Some(Finding::Node { pair: old, .. }) if rate(pair) >= rate(old) => {}
        Some(f) => *f = new,
        None => nodes.push(new),
    }
}

/// Sends to `at` (a listener of [`crate::reach`], which answers with
/// `tag`) for [`SEND_FOR`] and waits for its count, by `until`: the bytes
/// it counted and the µs it took.
pub(crate) fn send(at: SocketAddr, tag: [u8; 16], until: Instant) -> Result<(u64, u64), String> {
    let left = || until.saturating_duration_since(Instant::now());
    if left().is_zero() {
        return Err("not tried: the deadline passed".into());
    }
    let mut s = connect_tagged(at, tag, left().min(Duration::from_secs(2)))?;
    let _ = s.set_nodelay(true);
    // SAFETY: sets one int option on a socket this function owns.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&SEND_BUFFER as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    let chunk = vec![0x5au8; CHUNK];
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < SEND_FOR && sent < MAX_BYTES {
        let _ = s.set_write_timeout(Some(left().max(Duration::from_millis(1))));
        match s.write(&chunk) {
            Ok(n) => sent += n as u64,
            Err(e) => return Err(format!("stopped after {sent} bytes: {e}")),
        }
    }
    s.shutdown(Shutdown::Write).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(left().max(Duration::from_millis(1))))
        .map_err(|e| e.to_string())?;
    let mut n = [0u8; 8];
    s.read_exact(&mut n)
        .map_err(|e| format!("sent {sent} bytes; the count never came back: {e}"))?;
    let micros = start.elapsed().as_micros().max(1) as u64;
    Ok((u64::from_le_bytes(n), micros))
}

/// Connects to a listener of [`crate::reach`] at `at` by `wait` and reads
/// its tag: the connection, where the tag is `tag`; else why not, in
/// words. The probes of the reachability test and the pairs both begin so.
pub(crate) fn connect_tagged(
    at: SocketAddr,
    tag: [u8; 16],
    wait: Duration,
) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect_timeout(&at, wait).map_err(|e| words(&e))?;
    let _ = s.set_read_timeout(Some(wait));
    let mut got = [0u8; 16];
    match s.read_exact(&mut got) {
        Ok(()) if got == tag => Ok(s),
        Ok(()) => Err(
            "another process answered (an address of another host's, or a copy of this one)".into(),
        ),
        Err(e) => Err(format!("connected, but {}", words(&e))),
    }
}

/// An error of a connection, as `ip route` and NCCL's users say it.
fn words(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EHOSTUNREACH) => "no route to host".into(),
        Some(libc::ENETUNREACH) => "network unreachable".into(),
        Some(libc::ECONNREFUSED) => "refused".into(),
        Some(libc::ETIMEDOUT) => "timed out".into(),
        Some(libc::EADDRNOTAVAIL) => "address not available here".into(),
        _ if matches!(
            e.kind(),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
        ) =>
        {
            "timed out".into()
        }
        _ if e.kind() == std::io::ErrorKind::UnexpectedEof => "closed without a word".into(),
        _ => peer_text(&e.to_string()),
    }
}

/// A listener's side of a pair: reads what comes until the sender is done
/// (or [`SINK_FOR`]), then writes the count. A plain probe of
/// [`crate::reach`] closes at once, and costs nothing more.
pub(crate) fn sink(mut s: TcpStream, busy: &Arc<AtomicUsize>) {
    if busy.fetch_add(1, Ordering::SeqCst) >= MAX_SINKS {
        busy.fetch_sub(1, Ordering::SeqCst);
        return;
    }
    let mine = busy.clone();
    let spawned = std::thread::Builder::new()
        .name("nccl-find-sink".into())
        .spawn(move || {
            let start = Instant::now();
            let mut buf = vec![0u8; CHUNK];
            let mut n = 0u64;
            loop {
                let left = SINK_FOR.saturating_sub(start.elapsed());
                if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
                    break;
                }
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => n += k as u64,
                }
            }
            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = s.write_all(&n.to_le_bytes());
            mine.fetch_sub(1, Ordering::SeqCst);
        });
    // A thread that never ran gives its place back (the connection drops:
    // the sender hears an error).
    if spawned.is_err() {
        busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A rate, as network people say it.
pub fn shown_rate(bytes_per_s: f64) -> String {
    let bits = bytes_per_s * 8.0;
    if bits >= 1e9 {
        format!("{:.1} Gbit/s", bits / 1e9)
    } else if bits >= 1e6 {
        format!("{:.1} Mbit/s", bits / 1e6)
    } else {
        format!("{:.0} kbit/s", bits / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(from: usize, to: usize, round: u8, mb_per_s: u64) -> Pair {
        Pair::new(from, to, round, mb_per_s * 1_000_000, 1_000_000)
    }

    /// Six hosts of one rank each, in a ring.
    fn host(r: usize) -> String {
        format!("node{r}")
    }

    /// Round one on six hosts: every link at 400 MB/s but the `slow` ones
    /// (the sender's rank, and its rate).
    fn six(slow: &[(usize, u64)]) -> Vec<Pair> {
        (0..6)
            .map(|r| {
                let rate = slow.iter().find(|s| s.0 == r).map_or(400, |s| s.1);
                p(r, (r + 1) % 6, 1, rate)
            })
            .collect()
    }

    #[test]
    fn a_healthy_ring_has_no_second_round() {
        let ring: Vec<Pair> = (0..6)
            .map(|r| p(r, (r + 1) % 6, 1, 400 + r as u64))
            .collect();
        assert_eq!(median(&ring), Some(403e6));
        assert!(round_two(&ring, &host).is_empty());
        assert!(findings(&ring, &host).is_empty());
    }

    /// Node 3 sends slowly: the link 3→4 is the suspect; round two sends
    /// from 3 to a good receiver (slow again) and from a good sender to 4
    /// (fine): node 3, sending.
    #[test]
    fn a_slow_sender_is_named_and_not_its_link() {
        let mut ring = six(&[(3, 2)]);
        let plan = round_two(&ring, &host);
        assert_eq!(plan, [(3, 4), (3, 1), (0, 4)]);
        ring.extend([p(3, 4, 2, 2), p(3, 1, 2, 2), p(0, 4, 2, 390)]);
        assert_eq!(
            findings(&ring, &host),
            [Finding::Node {
                rank: 3,
                sending: true,
                pair: p(3, 1, 2, 2)
            }]
        );
    }

    /// A node whose sending is shaped also receives slowly while it sends
    /// (its acknowledgements wait behind its data): the slower way names it.
    #[test]
    fn a_node_bad_both_ways_is_named_once_by_its_slower_way() {
        let mut ring = six(&[(2, 5), (3, 2)]);
        // The slowest suspect first.
        assert_eq!(
            round_two(&ring, &host),
            [(3, 4), (3, 1), (0, 4), (2, 3), (2, 0), (5, 3)]
        );
        ring.extend([
            p(3, 4, 2, 2),
            p(3, 1, 2, 2),
            p(0, 4, 2, 380),
            p(2, 3, 2, 5),
            p(2, 0, 2, 390),
            p(5, 3, 2, 12),
        ]);
        assert_eq!(
            findings(&ring, &host),
            [Finding::Node {
                rank: 3,
                sending: true,
                pair: p(3, 1, 2, 2)
            }]
        );
        // The link into node 3 fine in round two from another sender, and
        // slow again itself: a link finding, but node 3 is bad, and the
        // link is its symptom.
        let n = ring.len();
        ring[n - 1] = p(5, 3, 2, 390);
        assert_eq!(findings(&ring, &host).len(), 1);
    }

    #[test]
    fn a_slow_receiver_and_a_slow_link_are_told_apart() {
        let mut ring = six(&[(1, 3)]);
        ring.extend([p(1, 4, 2, 380), p(4, 2, 2, 3)]);
        assert!(matches!(
            findings(&ring, &host)[..],
            [Finding::Node {
                rank: 2,
                sending: false,
                ..
            }]
        ));
        let mut ring = six(&[(1, 3)]);
        ring.extend([p(1, 2, 2, 3), p(1, 4, 2, 380), p(4, 2, 2, 410)]);
        assert_eq!(
            findings(&ring, &host),
            [Finding::Link {
                pair: p(1, 2, 1, 3),
                alone: false
            }]
        );
    }

    /// A link slow in round one only (a moment's contention), with both
    /// ends fine with others: no finding.
    #[test]
    fn a_moments_slowness_is_no_finding() {
        let mut ring = six(&[(1, 60)]);
        ring.extend([p(1, 2, 2, 350), p(1, 4, 2, 380), p(4, 2, 2, 410)]);
        assert_eq!(findings(&ring, &host), []);
    }

    /// Two nodes: two links make no majority; below the floor, a link is
    /// slow (both ways, as a node whose sending is slow slows the other
    /// way too), the slowest named first.
    #[test]
    fn two_nodes_are_judged_by_the_floor() {
        let ring = vec![p(0, 1, 1, 7), p(1, 0, 1, 2)];
        let f = findings(&ring, &host);
        assert_eq!(f.len(), 1);
        assert!(matches!(&f[0], Finding::Link { pair, alone: true } if pair.from == 1));
        let fast = vec![p(0, 1, 1, 3000), p(1, 0, 1, 2900)];
        assert!(findings(&fast, &host).is_empty());
    }

    /// Two nodes: no third to tell a node from the link.
    #[test]
    fn two_nodes_name_the_link_alone() {
        let ring = vec![p(0, 1, 1, 400), p(1, 0, 1, 2)];
        assert!(round_two(&ring, &host).is_empty());
        assert!(matches!(
            findings(&ring, &host)[..],
            [Finding::Link { alone: true, .. }]
        ));
    }

    #[test]
    fn a_pair_over_real_sockets_counts_what_it_sent() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let tag = [7u8; 16];
        let busy = Arc::new(AtomicUsize::new(0));
        let b = busy.clone();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(&tag).unwrap();
            sink(s, &b);
        });
        let (bytes, micros) = send(at, tag, Instant::now() + Duration::from_secs(30)).unwrap();
        t.join().unwrap();
        assert!(bytes >= CHUNK as u64, "{bytes}");
        // It sent for SEND_FOR, or until MAX_BYTES, whichever came first
        // (a fast loopback passes 1 GiB in 150 ms).
        assert!(
            micros >= SEND_FOR.as_micros() as u64 || bytes >= MAX_BYTES,
            "{bytes} bytes in {micros} us"
        );
        assert_eq!(
            send(at, tag, Instant::now() + Duration::from_secs(30)).map(|_| ()),
            Err("refused".into())
        );
    }

    #[test]
    fn rates_read_as_network_people_say_them() {
        assert_eq!(shown_rate(2.5e6), "20.0 Mbit/s");
        assert_eq!(shown_rate(1.25e9), "10.0 Gbit/s");
        assert_eq!(shown_rate(100.0), "1 kbit/s");
    }

    #[test]
    fn round_one_crosses_hosts_and_steps_keep_each_host_to_one_transfer() {
        // Three hosts of two ranks each: the last of each sends to the
        // first of the next.
        let unit = [0, 0, 1, 1, 2, 2];
        assert_eq!(ring(&unit), [(1, 2), (3, 4), (5, 0)]);
        // Host 1 receives in the first transfer and sends in the second:
        // three hosts in a ring need three steps.
        assert_eq!(
            steps(&ring(&unit), &unit),
            [vec![(1, 2)], vec![(3, 4)], vec![(5, 0)]]
        );
        // Four hosts of one rank: two steps of two transfers.
        let four = [0, 1, 2, 3];
        assert_eq!(
            steps(&ring(&four), &four),
            [vec![(0, 1), (2, 3)], vec![(1, 2), (3, 0)]]
        );
        // One host: a ring over its ranks; one rank: nothing.
        let hosts = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(units(&hosts(&["a", "a", "a"])), [0, 1, 2]);
        assert_eq!(units(&hosts(&["b", "a", "b", "c"])), [0, 1, 0, 2]);
        assert_eq!(ring(&[0, 1, 2]), [(0, 1), (1, 2), (2, 0)]);
        assert!(ring(&[0]).is_empty());
    }

    /// Four nodes, node 2's sending shaped: its own link and the link into
    /// it are both slow in round one (its acknowledgements wait behind its
    /// data), so no link is clean; node 0 is, and round two pairs with it.
    #[test]
    fn with_no_clean_link_left_a_clean_node_still_pairs() {
        let mut ring = vec![
            p(0, 1, 1, 4000),
            p(1, 2, 1, 68),
            p(2, 3, 1, 24),
            p(3, 0, 1, 4000),
        ];
        let plan = round_two(&ring, &host);
        assert_eq!(plan, [(2, 3), (2, 0), (0, 3), (1, 2), (1, 0), (0, 2)]);
        ring.extend([
            p(2, 3, 2, 24),
            p(2, 0, 2, 24),
            p(0, 3, 2, 3900),
            p(1, 2, 2, 70),
            p(1, 0, 2, 3800),
            p(0, 2, 2, 60),
        ]);
        assert_eq!(
            findings(&ring, &host),
            [Finding::Node {
                rank: 2,
                sending: true,
                pair: p(2, 0, 2, 24)
            }]
        );
    }
}
