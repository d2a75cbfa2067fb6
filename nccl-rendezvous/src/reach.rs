//! What each rank brings to the meeting, and a test of the network the way
//! NCCL's bootstrap will use it, before NCCL starts.
//!
//! Every rank brings a [`Card`]: its host, a compact record of facts for
//! rank 0 to compare (the caller's, opaque here), and the addresses NCCL
//! would use on this host with the others it has. Before its hello, each
//! rank listens briefly on every one of those addresses (a port of the
//! kernel's choosing); the hello carries the ports and a random tag that
//! whoever connects reads back, so that an address that leads to another
//! process (a bridge with the same subnet on every host) is not taken
//! for a reachable peer.
//!
//! Between the two fences of the meeting, ranks test the boundaries
//! between nodes: the last rank of each host connects to every address of
//! the next rank in a ring over ranks (the first rank of the next host),
//! and to rank 0's unless rank 0 shares its host. That is O(nodes)
//! connections, in parallel per address (each distinct address of a card
//! once, at most [`MAX_ADDRS`]), each bounded by [`PROBE_WAIT`]. Nothing
//! is sent; nothing is read but the tag.
//!
//! The tag proves that the far end is a process of this job that knows the
//! tag (it got it from the store), not another process on a shared subnet.
//! It is no secret and authenticates nothing more: whoever connects to a
//! listener is sent it.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::fsafe::random_bytes;
use crate::untrusted::{peer_text, shown};

/// The most bytes of facts a card carries ([`Card::MAX_TEXT`]).
pub(crate) const MAX_CARD_TEXT: usize = 4096;
/// The most addresses a card offers ([`Card::MAX_ADDRS`]).
pub(crate) const MAX_ADDRS: usize = 16;
/// How long one connection of the test may take, at most.
pub(crate) const PROBE_WAIT: Duration = Duration::from_secs(2);
/// The longest host or interface name a card carries.
const MAX_NAME: usize = 255;

/// What a rank brings to the meeting: what rank 0 compares, and the
/// addresses the others test.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Card {
    /// The host's name.
    pub host: String,
    /// A compact record of facts (at most [`Card::MAX_TEXT`] bytes, text),
    /// handed to rank 0 as it is.
    pub facts: String,
    /// The addresses to test (at most [`Card::MAX_ADDRS`]): NCCL's first.
    pub addrs: Vec<Addr>,
}

impl Card {
    /// The most bytes of facts a card carries.
    pub const MAX_TEXT: usize = MAX_CARD_TEXT;
    /// The most addresses a card offers.
    pub const MAX_ADDRS: usize = MAX_ADDRS;

    /// A card with these parts.
    pub fn new(host: String, facts: String, addrs: Vec<Addr>) -> Card {
        Card { host, facts, addrs }
    }
}

/// One address of a host's.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Addr {
    /// The interface that holds it.
    pub iface: String,
    /// The address.
    pub ip: IpAddr,
    /// Whether NCCL would use it (its bootstrap, by its rule).
    pub nccl: bool,
}

impl Addr {
    /// An address of `iface`'s.
    pub fn new(iface: String, ip: IpAddr, nccl: bool) -> Addr {
        Addr { iface, ip, nccl }
    }
}

/// One connection of the test.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// The rank that connected.
    pub from: usize,
    /// The rank it connected to.
    pub to: usize,
    /// The address it tried, with its interface (escaped, from `to`'s card).
    pub addr: Addr,
    /// `None` where it reached `to`; else why not, in words (`no route to
    /// host`, `refused`, `timed out`, …).
    pub error: Option<String>,
}

impl Attempt {
    /// A connection from rank `from` to `to`'s `addr`, that reached it.
    pub fn new(from: usize, to: usize, addr: Addr) -> Attempt {
        Attempt {
            from,
            to,
            addr,
            error: None,
        }
    }
}

/// What rank 0 gathered: every rank's card and every connection tested.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Gathered {
    /// Each rank's card, by rank (peer text escaped, line by line).
    pub cards: Vec<Card>,
    /// The connections tested, in rank order.
    pub probes: Vec<Attempt>,
    /// The timed transfers between hosts, both rounds
    /// ([`crate::pairs`]).
    pub pairs: Vec<crate::pairs::Pair>,
}

impl Gathered {
    /// What rank 0 would gather from these cards and connections.
    pub fn new(cards: Vec<Card>, probes: Vec<Attempt>) -> Gathered {
        Gathered {
            cards,
            probes,
            pairs: Vec::new(),
        }
    }
}

/// How rank 0 judges what it gathered, once every rank has met and every
/// connection between hosts was tested: the cause that will make NCCL fail
/// (an address NCCL will use that another node cannot reach, a setting
/// that leaves NCCL no interface, another NCCL on a node), in one line
/// with its fix; `None` where none is known.
pub type Judge = fn(&Gathered) -> Option<String>;

/// Rank 0's ruling on the meeting, as every rank hears it: the cause NCCL
/// will fail on, with its fix, and whether the job stops here, before
/// NCCL starts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ruling {
    /// The cause, with the fix (peer text, escaped where it came from
    /// rank 0).
    pub cause: String,
    /// Whether every rank stops before NCCL.
    pub stop: bool,
}

/// The longest cause a ruling carries.
const MAX_CAUSE: usize = 2000;

/// A ruling as the store carries it: whether it stops (a byte), then the
/// cause.
pub(crate) fn ruling_bytes(r: &Ruling) -> Vec<u8> {
    let mut v = vec![u8::from(r.stop)];
    v.extend_from_slice(crate::untrusted::cut(&r.cause, MAX_CAUSE).as_bytes());
    v
}

/// A ruling read back from rank 0's bytes: `None` when malformed. The
/// cause is shown escaped.
pub(crate) fn read_ruling(b: &[u8]) -> Option<Ruling> {
    let stop = match b.first()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    if b.len() > 1 + MAX_CAUSE {
        return None;
    }
    Some(Ruling {
        cause: peer_text(&String::from_utf8_lossy(&b[1..])),
        stop,
    })
}

/// A hello as read back: a rank's GPU count and card, its listening ports
/// (0 where it could not listen) and its tag.
pub(crate) struct Hello {
    pub ngpus: u32,
    pub card: Card,
    pub ports: Vec<u16>,
    pub tag: [u8; 16],
}

/// This rank's listeners: open until dropped (the thread that answers
/// them hears the end of `_stop` and ends).
pub(crate) struct Listening {
    ports: Vec<u16>,
    tag: [u8; 16],
    _stop: Option<UnixStream>,
}

/// Listens on each of `card`'s addresses; a thread answers each connection
/// with the tag until the result is dropped. It sleeps in `poll(2)` until a
/// connection comes: a thousand ranks on one host cost no CPU while they
/// wait.
pub(crate) fn listen(card: &Card) -> Listening {
    let tag = random_bytes();
    let mut ports = Vec::new();
    let mut ls = Vec::new();
    for a in card.addrs.iter().take(MAX_ADDRS) {
        let l = TcpListener::bind(SocketAddr::new(a.ip, 0))
            .and_then(|l| l.set_nonblocking(true).map(|()| l));
        match l.as_ref().map(|l| l.local_addr().map(|s| s.port())) {
            Ok(Ok(p)) => {
                ports.push(p);
                ls.push(l.expect("bound"));
            }
            _ => ports.push(0),
        }
    }
    let mut stop = None;
    if !ls.is_empty() {
        let spawned = UnixStream::pair().ok().and_then(|(mine, theirs)| {
            std::thread::Builder::new()
                .name("nccl-find-listen".into())
                .spawn(move || answer(&ls, &theirs, tag))
                .ok()
                .map(|_| mine)
        });
        if spawned.is_none() {
            ports.iter_mut().for_each(|p| *p = 0);
        }
        stop = spawned;
    }
    Listening {
        ports,
        tag,
        _stop: stop,
    }
}

/// Writes the tag to every connection, until `stop`'s other end closes;
/// then counts what a pair sends ([`crate::pairs::sink`]).
fn answer(ls: &[TcpListener], stop: &UnixStream, tag: [u8; 16]) {
    let busy = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut fds: Vec<libc::pollfd> = ls
        .iter()
        .map(|l| l.as_raw_fd())
        .chain([stop.as_raw_fd()])
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        // SAFETY: `fds` is a live array of `fds.len()` pollfd structs, whose
        // descriptors this thread's listeners and `stop` hold open.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
        if fds.last().is_some_and(|f| f.revents != 0) {
            return;
        }
        for l in ls {
            while let Ok((mut s, _)) = l.accept() {
                let _ = s.set_nonblocking(false);
                let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                if s.write_all(&tag).is_ok() {
                    crate::pairs::sink(s, &busy);
                }
            }
        }
    }
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str, max: usize) {
    let s = crate::untrusted::cut(s, max);
    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// The hello: the GPU count, the tag, the host, the facts and each
/// address with its port.
pub(crate) fn hello(ngpus: u32, card: &Card, l: &Listening) -> Vec<u8> {
    let mut v = ngpus.to_le_bytes().to_vec();
    v.extend_from_slice(&l.tag);
    put_str(&mut v, &card.host, MAX_NAME);
    put_str(&mut v, &card.facts, MAX_CARD_TEXT);
    let addrs = &card.addrs[..card.addrs.len().min(MAX_ADDRS)];
    v.push(addrs.len() as u8);
    for (a, port) in addrs.iter().zip(&l.ports) {
        put_str(&mut v, &a.iface, MAX_NAME);
        match a.ip {
            IpAddr::V4(ip) => {
                v.push(4);
                v.extend_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                v.push(6);
                v.extend_from_slice(&ip.octets());
            }
        }
        v.extend_from_slice(&port.to_le_bytes());
        v.push(u8::from(a.nccl));
    }
    v
}

/// Reads a field at a time; anything short or oversized is an error.
pub(crate) struct Cursor<'a>(pub(crate) &'a [u8]);

impl Cursor<'_> {
    pub(crate) fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    pub(crate) fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    /// Text from a peer: escaped, line by line.
    pub(crate) fn text(&mut self, max: usize) -> Option<String> {
        let n = usize::from(self.u16()?);
        if n > max {
            return None;
        }
        let raw = String::from_utf8_lossy(self.take(n)?).into_owned();
        Some(
            raw.split('\n')
                .map(|l| shown(l, max))
                .collect::<Vec<_>>()
                .join("\n"),
        )
    }
}

/// Reads a hello back. One of four bytes (a GPU count alone) is a hello
/// without a card. The card's addresses are bounded ([`MAX_ADDRS`]) and
/// each is kept once (its first mention), so the test connects to each
/// distinct address once.
pub(crate) fn read_hello(b: &[u8]) -> Option<Hello> {
    let mut c = Cursor(b);
    let ngpus = c.u32()?;
    if c.0.is_empty() {
        return Some(Hello {
            ngpus,
            card: Card::default(),
            ports: Vec::new(),
            tag: [0; 16],
        });
    }
    let tag: [u8; 16] = c.take(16)?.try_into().ok()?;
    let host = c.text(MAX_NAME)?.replace('\n', "\\u{a}");
    let facts = c.text(MAX_CARD_TEXT)?;
    let n = usize::from(c.byte()?);
    if n > MAX_ADDRS {
        return None;
    }
    let (mut addrs, mut ports) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let iface = c.text(MAX_NAME)?.replace('\n', "\\u{a}");
        let ip = match c.byte()? {
            4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(c.take(4)?).ok()?)),
            6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(c.take(16)?).ok()?)),
            _ => return None,
        };
        let port = c.u16()?;
        let nccl = match c.byte()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        // Each address once, as its first mention says it: a card that
        // names one 16 times is not 16 connections to it.
        if addrs.iter().any(|a: &Addr| a.ip == ip) {
            continue;
        }
        ports.push(port);
        addrs.push(Addr { iface, ip, nccl });
    }
    if !c.0.is_empty() {
        return None;
    }
    Some(Hello {
        ngpus,
        card: Card { host, facts, addrs },
        ports,
        tag,
    })
}

/// Where a pair sends to `to` ([`crate::pairs::send`]): the address NCCL
/// will use, where `to` listens there.
pub(crate) fn nccl_target(to: &Hello) -> Option<(usize, SocketAddr)> {
    let i = to.card.addrs.iter().position(|a| a.nccl)?;
    let port = *to.ports.get(i).filter(|p| **p != 0)?;
    Some((i, SocketAddr::new(to.card.addrs[i].ip, port)))
}

/// Whether rank `r` is the last of its host's, in a ring over ranks: the
/// next rank's host differs (an empty host, a hello without a card, never
/// counts).
pub(crate) fn at_boundary(host: &str, next: &str) -> bool {
    !host.is_empty() && !next.is_empty() && host != next
}

/// What happened to each address of one rank tried: its index in that
/// rank's card, and the error (`None`: reached).
pub(crate) type Tries = Vec<(u8, Option<String>)>;

/// Connects to each of `to`'s addresses at once, each by [`PROBE_WAIT`]
/// and `until`; what happened to each, by its index in `to`'s card.
pub(crate) fn probe(to: &Hello, until: Instant) -> Tries {
    let wait = PROBE_WAIT.min(until.saturating_duration_since(Instant::now()));
    let tries: Vec<_> = to
        .card
        .addrs
        .iter()
        .zip(&to.ports)
        .enumerate()
        .map(|(i, (a, port))| {
            let (at, tag) = (SocketAddr::new(a.ip, *port), to.tag);
            let port = *port;
            let t = std::thread::Builder::new()
                .name("nccl-find-probe".into())
                .spawn(move || try_one(at, port, tag, wait));
            (i as u8, t)
        })
        .collect();
    tries
        .into_iter()
        .map(|(i, t)| match t {
            Ok(t) => (
                i,
                t.join().unwrap_or_else(|_| Some("the test failed".into())),
            ),
            Err(e) => (i, Some(format!("cannot start a thread: {e}"))),
        })
        .collect()
}

/// One connection: `None` where the tag came back.
fn try_one(at: SocketAddr, port: u16, tag: [u8; 16], wait: Duration) -> Option<String> {
    if port == 0 {
        return Some("could not listen there".into());
    }
    if wait.is_zero() {
        return Some("not tried: the deadline passed".into());
    }
    crate::pairs::connect_tagged(at, tag, wait).err()
}

/// This rank's results for rank 0: for each, the rank tried, the address's
/// index in its card, and the error (empty: reached).
pub(crate) fn results(done: &[(usize, Tries)]) -> Vec<u8> {
    let mut v = Vec::new();
    for (to, tries) in done {
        for (i, e) in tries {
            v.extend_from_slice(&(*to as u32).to_le_bytes());
            v.push(*i);
            put_str(&mut v, e.as_deref().unwrap_or(""), 200);
        }
    }
    v
}

/// Rank `from`'s results back, with the addresses from the cards in
/// `hellos`: `None` when they are malformed.
pub(crate) fn read_results(from: usize, b: &[u8], hellos: &[Hello]) -> Option<Vec<Attempt>> {
    let mut c = Cursor(b);
    let mut out = Vec::new();
    while !c.0.is_empty() {
        let to = c.u32()? as usize;
        let i = usize::from(c.byte()?);
        let e = c.text(200)?;
        let addr = hellos.get(to)?.card.addrs.get(i)?.clone();
        if out.len() >= 2 * MAX_ADDRS {
            return None;
        }
        out.push(Attempt {
            from,
            to,
            addr,
            error: (!e.is_empty()).then(|| e.replace('\n', "\\u{a}")),
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(host: &str, ips: &[&str]) -> Card {
        Card::new(
            host.into(),
            "nccl=2.21.5\nline two".into(),
            ips.iter()
                .enumerate()
                .map(|(i, ip)| Addr::new(format!("if{i}"), ip.parse().unwrap(), i == 0))
                .collect(),
        )
    }

    #[test]
    fn a_hello_reads_back_as_it_was_written() {
        let c = card("node1", &["127.0.0.1", "127.0.0.2"]);
        let l = listen(&c);
        let h = read_hello(&hello(3, &c, &l)).unwrap();
        assert_eq!((h.ngpus, &h.card, h.tag), (3, &c, l.tag));
        assert_eq!(h.ports, l.ports);
        assert!(h.ports.iter().all(|p| *p != 0));
        // A count alone is a hello without a card.
        let h = read_hello(&7u32.to_le_bytes()).unwrap();
        assert_eq!((h.ngpus, h.card), (7, Card::default()));
    }

    #[test]
    fn a_malformed_hello_is_refused_and_peer_text_is_escaped() {
        let c = card("node1", &["127.0.0.1"]);
        let b = hello(1, &c, &listen(&c));
        for cut in 5..b.len() {
            assert!(read_hello(&b[..cut]).is_none(), "cut at {cut}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(read_hello(&longer).is_none());
        let evil = Card::new("a\u{1b}[2Jb".into(), "k=\u{202e}v".into(), Vec::new());
        let h = read_hello(&hello(1, &evil, &listen(&evil))).unwrap();
        assert_eq!(h.card.host, "a\\u{1b}[2Jb");
        assert_eq!(h.card.facts, "k=\\u{202e}v");
    }

    #[test]
    fn a_listener_answers_with_its_tag_and_others_are_named() {
        let c = card("node1", &["127.0.0.1"]);
        let l = listen(&c);
        let h = read_hello(&hello(1, &c, &l)).unwrap();
        let until = Instant::now() + Duration::from_secs(30);
        assert_eq!(probe(&h, until), [(0, None)]);
        // The same address with another tag: another process answered.
        let mut other = read_hello(&hello(1, &c, &l)).unwrap();
        other.tag = [9; 16];
        let got = probe(&other, until);
        assert!(got[0]
            .1
            .as_deref()
            .unwrap()
            .starts_with("another process answered"));
        // Gone: refused.
        drop(l);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(probe(&h, until), [(0, Some("refused".to_string()))]);
    }

    /// A card that names one address outside the job 16 times (as a
    /// hostile peer's might, to make the others knock on a host of its
    /// choosing) is read with that address once: one connection, not 16.
    #[test]
    fn a_card_naming_one_address_many_times_is_tried_once() {
        let outside = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = outside.local_addr().unwrap().port();
        let c = card("node1", &["127.0.0.1"; MAX_ADDRS]);
        let l = Listening {
            ports: vec![port; MAX_ADDRS],
            tag: [3; 16],
            _stop: None,
        };
        let h = read_hello(&hello(1, &c, &l)).unwrap();
        assert_eq!(h.card.addrs, c.addrs[..1]);
        assert_eq!(h.ports, [port]);
        let got = probe(&h, Instant::now() + Duration::from_secs(30));
        assert_eq!(got, [(0, Some("connected, but timed out".to_string()))]);
        // Every connection made waits in the listener's queue.
        outside.set_nonblocking(true).unwrap();
        let mut came = 0;
        while outside.accept().is_ok() {
            came += 1;
        }
        assert_eq!(came, 1);
    }

    #[test]
    fn results_read_back_with_the_addresses_they_name() {
        let cards = [
            card("a", &["127.0.0.1"]),
            card("b", &["127.0.0.2", "10.0.0.1"]),
        ];
        let hellos: Vec<Hello> = cards
            .iter()
            .map(|c| read_hello(&hello(1, c, &listen(c))).unwrap())
            .collect();
        let b = results(&[(1, vec![(0, None), (1, Some("no route to host".into()))])]);
        let got = read_results(0, &b, &hellos).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].to, got[0].error.as_deref()), (1, None));
        assert_eq!(got[1].addr.iface, "if1");
        assert_eq!(got[1].error.as_deref(), Some("no route to host"));
        // An index past the card, a rank past the world: malformed.
        assert!(read_results(0, &results(&[(1, vec![(2, None)])]), &hellos).is_none());
        assert!(read_results(0, &results(&[(5, vec![(0, None)])]), &hellos).is_none());
        assert!(read_results(0, &b[..b.len() - 1], &hellos).is_none());
    }

    #[test]
    fn only_a_change_of_host_is_a_boundary() {
        assert!(at_boundary("a", "b"));
        assert!(!at_boundary("a", "a"));
        assert!(!at_boundary("", "b"));
        assert!(!at_boundary("a", ""));
    }
}
