//! `tcp://HOST:PORT`: rank 0 listens on every address the host name
//! resolves to and sends each new connection a challenge; every other rank
//! connects, says hello with a proof of the job token over that challenge
//! and its own nonce, and gets the unique id and its first NCCL rank with
//! rank 0's proof of the token over both nonces. The token itself is never
//! sent, so a rank 0 or a peer of another job (or a listener that is not
//! nccl-find) learns nothing it could answer with.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::proof::{self, Label, NONCE_LEN, PROOF_LEN};
use super::wire::{decode, decode_header, encode, kind_name, read_msg, send, timed_out, Msg};
use super::{fail, list, offsets, then, Abort, Failed, Job, Joined, Link, PeerOutcome};
use crate::untrusted::peer_text;

/// Where a watcher thread leaves a peer's Done message.
pub(super) type DoneSlot = Arc<Mutex<Option<Msg>>>;

/// Connections that have not said hello yet, at most this many at once: a
/// flood of idle ones pushes out the oldest, never a real rank's.
pub(super) const MAX_PENDING: usize = 64;

/// How long a new connection has to send its hello.
pub(super) const HELLO_WAIT: Duration = Duration::from_secs(5);

/// A hello payload's length: three numbers, a nonce and a proof.
pub(super) const MAX_HELLO: usize = 12 + NONCE_LEN + PROOF_LEN;

/// Admitted peers named one by one in the log; the rest are counted.
pub(super) const JOINED_SHOWN: usize = 16;

/// The proof a hello must carry: the peer's, over rank 0's challenge.
pub(super) fn hello_proof(
    token: &str,
    nonce: &[u8; NONCE_LEN],
    challenge: &[u8; NONCE_LEN],
    rank: u32,
    world: u32,
    ngpus: u32,
) -> [u8; PROOF_LEN] {
    proof::prove(
        token,
        Label::Hello,
        nonce,
        challenge,
        &[
            &rank.to_le_bytes(),
            &world.to_le_bytes(),
            &ngpus.to_le_bytes(),
        ],
    )
}

/// The proof a welcome must carry: rank 0's, over the peer's nonce.
pub(super) fn welcome_proof(
    token: &str,
    challenge: &[u8; NONCE_LEN],
    nonce: &[u8; NONCE_LEN],
    id: &[u8],
    nranks: u32,
    first_rank: u32,
) -> [u8; PROOF_LEN] {
    proof::prove(
        token,
        Label::Welcome,
        challenge,
        nonce,
        &[id, &nranks.to_le_bytes(), &first_rank.to_le_bytes()],
    )
}

/// A connection that has not said hello yet.
pub(super) struct Pending {
    s: TcpStream,
    addr: SocketAddr,
    buf: Vec<u8>,
    until: Instant,
    /// The nonce rank 0 sent it.
    challenge: [u8; NONCE_LEN],
}

/// A peer that said a good hello.
pub(super) struct Admitted {
    rank: usize,
    ngpus: usize,
    s: TcpStream,
    addr: SocketAddr,
    /// The nonce rank 0 sent it, and the one it sent.
    challenge: [u8; NONCE_LEN],
    nonce: [u8; NONCE_LEN],
}

pub(super) enum Pumped {
    More,
    Got(Msg),
    Bad(String),
}

/// Reads what has come of a pending connection's hello, without blocking.
pub(super) fn pump(p: &mut Pending) -> Pumped {
    loop {
        let need = if p.buf.len() >= 10 {
            let h: [u8; 10] = p.buf[..10].try_into().unwrap_or([0; 10]);
            let (kind, len) = match decode_header(&h) {
                Ok(x) => x,
                Err(e) => return Pumped::Bad(e),
            };
            if len > MAX_HELLO {
                return Pumped::Bad(format!("a {len}-byte hello is too long"));
            }
            if p.buf.len() == 10 + len {
                return match decode(kind, &p.buf[10..]) {
                    Ok(m) => Pumped::Got(m),
                    Err(e) => Pumped::Bad(e),
                };
            }
            10 + len
        } else {
            10
        };
        let mut chunk = [0u8; 4096];
        let want = (need - p.buf.len()).min(chunk.len());
        match p.s.read(&mut chunk[..want]) {
            Ok(0) => return Pumped::Bad("the connection closed".into()),
            Ok(n) => p.buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if timed_out(&e) => return Pumped::More,
            Err(e) => return Pumped::Bad(e.to_string()),
        }
    }
}

/// Notes about refused connections: the first few one by one, then a count.
/// And the peers admitted: the first few one by one, then every other one
/// by its host, its ranks run together.
pub(super) struct Notes<'a> {
    log: &'a mut dyn FnMut(String),
    shown: usize,
    hidden: usize,
    joined_shown: usize,
    /// Host and rank of each admitted peer past the first few.
    joined_later: Vec<(std::net::IpAddr, usize)>,
}

impl Notes<'_> {
    const SHOWN: usize = 20;
    fn note(&mut self, m: String) {
        if self.shown < Self::SHOWN {
            self.shown += 1;
            (self.log)(m);
        } else {
            self.hidden += 1;
        }
    }
    fn joined(&mut self, rank: usize, addr: SocketAddr) {
        if self.joined_shown < JOINED_SHOWN {
            self.joined_shown += 1;
            (self.log)(format!("rank {rank} joined from {addr}"));
        } else {
            self.joined_later.push((addr.ip(), rank));
        }
    }
    fn flush(&mut self) {
        let mut later = std::mem::take(&mut self.joined_later);
        later.sort_unstable();
        let mut at = 0;
        while at < later.len() {
            let host = later[at].0;
            let ranks: Vec<usize> = later[at..]
                .iter()
                .take_while(|(h, _)| *h == host)
                .map(|(_, r)| *r)
                .collect();
            at += ranks.len();
            (self.log)(format!(
                "{} more rank(s) joined from {host}: {}",
                ranks.len(),
                list(&ranks)
            ));
        }
        if self.hidden > 0 {
            (self.log)(format!(
                "{} more connection(s) refused or dropped (not shown)",
                std::mem::take(&mut self.hidden)
            ));
        }
    }
}

/// A failure to reach or hold our rendezvous' address, and where a
/// launcher's address came from (nothing more for one the flags gave).
fn with_origin(job: &Job, message: String) -> String {
    match &job.origin {
        Some(o) => then(&message, &format!("The address is {o}.")),
        None => message,
    }
}

pub(super) fn tcp_root(
    job: &Job,
    host: &str,
    port: u16,
    deadline: Instant,
    make_id: &dyn Fn() -> Result<[u8; 128], String>,
    log: &mut dyn FnMut(String),
) -> Result<Joined, Failed> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| fail(format!("rank 0 cannot resolve {host}:{port}: {e}")))?
        .collect();
    let listeners = listen_all(host, port, &addrs).map_err(|e| fail(with_origin(job, e)))?;
    let mut lobby = Lobby {
        job,
        notes: Notes {
            log,
            shown: 0,
            hidden: 0,
            joined_shown: 0,
            joined_later: Vec::new(),
        },
        peers: Vec::new(),
        pending: std::collections::VecDeque::new(),
        dropped: 0,
    };
    while lobby.peers.len() + 1 < job.world {
        let now = Instant::now();
        if now >= deadline {
            return Err(lobby.timed_out(host, port));
        }
        let mut busy = false;
        for l in &listeners {
            busy |= lobby.accept(l, now, deadline);
        }
        lobby.read_hellos();
        if !busy {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    lobby.notes.flush();
    let Lobby { peers, pending, .. } = lobby;
    drop((pending, listeners));
    let id = make_id().map_err(fail)?;
    welcome(job, peers, id, deadline)
}

/// Listens at `host:port` on every address the name resolved to (`addrs`):
/// peers may reach any of them, so the port must be this job's on each. A
/// port in use on any one is an error naming that address (a second job's
/// rank 0 must not take the other address of a name, say `localhost`'s
/// `127.0.0.1` while `::1` is held); an address this host does not have
/// (IPv6 turned off) is passed over, as long as one is left.
pub(super) fn listen_all(
    host: &str,
    port: u16,
    addrs: &[SocketAddr],
) -> Result<Vec<TcpListener>, String> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    let mut first_error = None;
    let cannot = |a: &SocketAddr, e: &dyn std::fmt::Display| {
        format!(
            "rank 0 cannot listen on {host}:{port} ({a}): {e}. Another job may hold the port: choose \
             another one (or stop that job)"
        )
    };
    for a in addrs {
        if seen.contains(a) {
            continue;
        }
        seen.push(*a);
        match TcpListener::bind(a) {
            Ok(l) => {
                l.set_nonblocking(true).map_err(|e| cannot(a, &e))?;
                out.push(l);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => return Err(cannot(a, &e)),
            Err(e) => {
                first_error.get_or_insert_with(|| cannot(a, &e));
            }
        }
    }
    match first_error {
        Some(e) if out.is_empty() => Err(e),
        _ if out.is_empty() => Err(format!(
            "rank 0 cannot listen on {host}:{port}: the name resolves to no address"
        )),
        _ => Ok(out),
    }
}

/// Rank 0's side of a TCP rendezvous while the peers arrive.
pub(super) struct Lobby<'a> {
    job: &'a Job,
    notes: Notes<'a>,
    /// Peers that said a good hello.
    peers: Vec<Admitted>,
    /// Connections that have not said hello yet, oldest first.
    pending: std::collections::VecDeque<Pending>,
    /// Connections dropped or refused without a valid hello.
    dropped: usize,
}

impl Lobby<'_> {
    /// The failure at the deadline: who never came.
    fn timed_out(&mut self, host: &str, port: u16) -> Failed {
        let job = self.job;
        self.notes.flush();
        // Those still half-way through a hello count as sending none.
        self.dropped += self.pending.len();
        let dropped = self.dropped;
        let here: Vec<usize> = self.peers.iter().map(|p| p.rank).collect();
        let missing: Vec<usize> = (1..job.world).filter(|r| !here.contains(r)).collect();
        Failed {
            message: format!(
                "the rendezvous timed out after {:.0} s: rank(s) {} never arrived at tcp://{host}:{port} \
                 ({} of {} processes did{}). Start them, check that they can reach this address and use the \
                 same token, or raise --timeout",
                job.timeout.as_secs_f64(),
                list(&missing),
                self.peers.len() + 1,
                job.world,
                if dropped > 0 {
                    format!("; {dropped} other connection(s) sent no valid hello")
                } else {
                    String::new()
                }
            ),
            missing,
        }
    }

    /// Takes what has arrived (a few at a time, so that each new connection
    /// is read before a flood can push it out); whether anything had.
    fn accept(&mut self, listener: &TcpListener, now: Instant, deadline: Instant) -> bool {
        let mut busy = false;
        for _ in 0..16 {
            match listener.accept() {
                Ok((mut s, addr)) => {
                    busy = true;
                    let challenge = proof::nonce();
                    // A fresh connection's send buffer is empty: the whole
                    // challenge goes at once, or the connection is no good.
                    let frame = encode(&Msg::Challenge { nonce: challenge });
                    if s.set_nonblocking(true).is_err()
                        || !matches!(s.write(&frame), Ok(n) if n == frame.len())
                    {
                        self.dropped += 1;
                        self.notes.note(format!(
                            "dropped a connection from {addr}: it could not be sent a challenge"
                        ));
                        continue;
                    }
                    if self.pending.len() >= MAX_PENDING {
                        if let Some(old) = self.pending.pop_front() {
                            self.dropped += 1;
                            self.notes.note(format!(
                                "dropped a connection from {}: {MAX_PENDING} others were waiting to say hello",
                                old.addr
                            ));
                        }
                    }
                    self.pending.push_back(Pending {
                        s,
                        addr,
                        buf: Vec::new(),
                        until: deadline.min(now + HELLO_WAIT),
                        challenge,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // Out of descriptors, a connection reset before it was
                // taken: not this job's end.
                Err(_) => break,
            }
        }
        busy
    }

    /// Reads what the pending connections sent: admits good hellos, refuses
    /// bad ones (saying why), drops the malformed and the silent.
    fn read_hellos(&mut self) {
        let mut i = 0;
        while i < self.pending.len() {
            let p = &mut self.pending[i];
            let got = pump(p);
            let (addr, challenge) = (p.addr, p.challenge);
            match got {
                Pumped::More if Instant::now() < p.until => {
                    i += 1;
                    continue;
                }
                Pumped::More => {
                    self.dropped += 1;
                    self.notes.note(format!(
                        "refused a malformed peer from {addr}: no message before the deadline"
                    ));
                }
                Pumped::Bad(why) => {
                    self.dropped += 1;
                    self.notes
                        .note(format!("refused a malformed peer from {addr}: {why}"));
                }
                Pumped::Got(Msg::Hello {
                    rank,
                    world,
                    ngpus,
                    nonce,
                    proof: their_proof,
                }) => {
                    let knows = proof::same_proof(
                        &their_proof,
                        &hello_proof(&self.job.token, &nonce, &challenge, rank, world, ngpus),
                    );
                    let (rank, world, ngpus) = (rank as usize, world as usize, ngpus as usize);
                    if knows {
                        self.replace_if_gone(rank, addr);
                    }
                    let why = self.refusal(knows, rank, world, ngpus);
                    let mut p = self.pending.remove(i).expect("an index in range");
                    match why {
                        Some(why) => {
                            self.notes
                                .note(format!("refused a peer from {addr}: {why}"));
                            let _ = p.s.set_nonblocking(false);
                            let _ = p.s.set_write_timeout(Some(Duration::from_secs(1)));
                            let _ = send(&mut p.s, &Msg::Refused { reason: why });
                        }
                        None => {
                            let _ = p.s.set_nonblocking(false);
                            self.notes.joined(rank, addr);
                            self.peers.push(Admitted {
                                rank,
                                ngpus,
                                s: p.s,
                                addr,
                                challenge,
                                nonce,
                            });
                        }
                    }
                    continue;
                }
                Pumped::Got(other) => {
                    self.dropped += 1;
                    self.notes.note(format!(
                        "refused a peer from {addr}: it sent {} instead of a hello",
                        kind_name(&other)
                    ));
                }
            }
            self.pending.remove(i);
        }
    }

    /// A rank that says hello again (its process was restarted): where the
    /// connection it came on before is closed, it is dropped so that the new
    /// one can take its place; where it is still open, nothing changes (and
    /// the newcomer is refused).
    fn replace_if_gone(&mut self, rank: usize, addr: SocketAddr) {
        let Some(at) = self.peers.iter().position(|p| p.rank == rank) else {
            return;
        };
        if !gone(&self.peers[at].s) {
            return;
        }
        let old = self.peers.remove(at);
        (self.notes.log)(format!(
            "rank {rank} came again from {addr}; its earlier connection (from {}) had closed, so the new \
             one takes its place",
            old.addr
        ));
    }

    /// Why a hello is refused; `None`: the peer is in. `knows`: its proof
    /// of the token was good.
    fn refusal(&self, knows: bool, rank: usize, world: usize, ngpus: usize) -> Option<String> {
        let job = self.job;
        if !knows {
            // Neither token is ever sent or logged.
            Some(
                "token mismatch: the peer's token is not this job's. Give every rank the same \
                 --token (or NCCL_FIND_TOKEN)"
                    .to_string(),
            )
        } else if world != job.world {
            Some(format!(
                "world size mismatch: this job has {}, the peer says {world}",
                job.world
            ))
        } else if rank == 0 || rank >= world {
            Some(format!(
                "rank {rank} is not a peer rank of a world of {world}"
            ))
        } else if self.peers.iter().any(|p| p.rank == rank) {
            Some(format!("rank {rank} arrived twice"))
        } else if ngpus == 0 || ngpus > 1024 {
            Some(format!("{ngpus} GPUs is not a GPU count"))
        } else {
            None
        }
    }
}

/// Whether an admitted peer's connection is closed (its process died): a
/// look that never blocks and takes nothing from it.
fn gone(s: &TcpStream) -> bool {
    if s.set_nonblocking(true).is_err() {
        return true;
    }
    let dead = match s.peek(&mut [0u8; 1]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !(timed_out(&e) || e.kind() == std::io::ErrorKind::Interrupted),
    };
    let _ = s.set_nonblocking(false);
    dead
}

/// Rank 0 hands every peer the unique id and its first NCCL rank, and
/// watches each for its outcome or its going away.
pub(super) fn welcome(
    job: &Job,
    mut peers: Vec<Admitted>,
    id: [u8; 128],
    deadline: Instant,
) -> Result<Joined, Failed> {
    peers.sort_by_key(|p| p.rank);
    let mut counts = vec![job.ngpus];
    counts.extend(peers.iter().map(|p| p.ngpus));
    let (first, nranks) = offsets(&counts);
    let abort = Arc::new(Abort::default());
    let mut kept = Vec::new();
    for p in peers {
        let (rank, mut s) = (p.rank, p.s);
        let (nranks, first_rank) = (nranks as u32, first[rank] as u32);
        let welcome = Msg::Welcome {
            id: id.to_vec(),
            nranks,
            first_rank,
            proof: welcome_proof(&job.token, &p.challenge, &p.nonce, &id, nranks, first_rank),
        };
        let _ = s.set_write_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_secs(1)),
        ));
        send(&mut s, &welcome)
            .map_err(|e| fail(format!("sending rank {rank} the unique id: {e}")))?;
        let slot = watch_peer(rank, &s, &abort);
        kept.push((rank, s, slot));
    }
    Ok(Joined {
        id,
        nranks,
        first_rank: 0,
        abort,
        link: Link::TcpRoot(kept),
    })
}

/// Watches a peer on a thread of its own: its Done lands in the slot
/// returned; anything else, or its going away, raises `abort`.
pub(super) fn watch_peer(rank: usize, s: &TcpStream, abort: &Arc<Abort>) -> DoneSlot {
    let slot = Arc::new(Mutex::new(None));
    if let Ok(mut r) = s.try_clone() {
        let (slot, abort) = (slot.clone(), abort.clone());
        std::thread::spawn(move || match read_msg(&mut r, None) {
            Ok(Msg::Done { ok, wrong, message }) => {
                *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Msg::Done {
                    ok,
                    wrong,
                    message: peer_text(&message),
                });
            }
            Ok(m) => abort.raise(format!("rank {rank} sent {} during the run", kind_name(&m))),
            Err(e) => abort.raise(format!("rank {rank}'s process went away ({e})")),
        });
    }
    slot
}

pub(super) fn tcp_peer(
    job: &Job,
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<Joined, Failed> {
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| fail(format!("cannot resolve {host}:{port}: {e}")))?
        .collect();
    let mut last = String::from("nothing tried");
    // Rank 0 may drop a connection it had no room for: connect again.
    loop {
        if Instant::now() >= deadline {
            return Err(fail(with_origin(
                job,
                format!(
                    "rank {} could not reach rank 0 at tcp://{host}:{port} within {:.0} s ({last}). Is \
                     rank 0 running, and is that address reachable from here?",
                    job.rank,
                    job.timeout.as_secs_f64()
                ),
            )));
        }
        let Some((mut s, at)) = addrs.iter().find_map(|a| {
            TcpStream::connect_timeout(a, Duration::from_millis(500))
                .map_err(|e| last = e.to_string())
                .ok()
                .map(|s| (s, *a))
        }) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let challenge = match challenge(job, &mut s, at, deadline) {
            Step::Go(c) => c,
            Step::Retry(why) => {
                last = why;
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            Step::End(f) => return Err(f),
        };
        let (rank, world, ngpus) = (job.rank as u32, job.world as u32, job.ngpus as u32);
        let nonce = proof::nonce();
        let hello = Msg::Hello {
            rank,
            world,
            ngpus,
            nonce,
            proof: hello_proof(&job.token, &nonce, &challenge, rank, world, ngpus),
        };
        let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
        if let Err(e) = send(&mut s, &hello) {
            last = format!("greeting rank 0: {e}");
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let _ = s.set_write_timeout(None);
        match welcome_answer(job, s, host, port, at, &challenge, &nonce, deadline) {
            Step::Go(j) => return Ok(j),
            Step::Retry(why) => {
                last = why;
                std::thread::sleep(Duration::from_millis(100));
            }
            Step::End(f) => return Err(f),
        }
    }
}

/// What a peer does after one exchange with rank 0.
enum Step<T> {
    /// Go on, with this.
    Go(T),
    /// Connect again (rank 0 dropped the connection): why.
    Retry(String),
    /// Stop: the failure.
    End(Failed),
}

/// Rank 0's challenge, the first thing it sends; a while for it, within the
/// deadline.
fn challenge(job: &Job, s: &mut TcpStream, at: SocketAddr, deadline: Instant) -> Step<[u8; 16]> {
    match read_msg(s, Some(deadline.min(Instant::now() + HELLO_WAIT))) {
        Ok(Msg::Challenge { nonce }) => Step::Go(nonce),
        Ok(Msg::Refused { reason }) => Step::End(fail(format!(
            "rank 0 refused rank {}: {}",
            job.rank,
            peer_text(&reason)
        ))),
        Ok(m) => Step::End(fail(format!(
            "{at} answered {} instead of rank 0's challenge: is it an nccl-find rank 0 of this version?",
            kind_name(&m)
        ))),
        Err(e) if e.ends_with("the connection closed") || e.contains("reset") => {
            Step::Retry(format!("rank 0 closed the connection before answering ({e})"))
        }
        Err(e) => Step::End(fail(format!("waiting for rank 0's challenge at {at}: {e}"))),
    }
}

/// Rank 0's answer to this peer's hello: the unique id, proven to come from
/// a rank 0 that knows the token.
#[allow(clippy::too_many_arguments)]
fn welcome_answer(
    job: &Job,
    mut s: TcpStream,
    host: &str,
    port: u16,
    at: SocketAddr,
    challenge: &[u8; 16],
    nonce: &[u8; 16],
    deadline: Instant,
) -> Step<Joined> {
    match read_msg(&mut s, Some(deadline)) {
        Ok(Msg::Welcome {
            id,
            nranks,
            first_rank,
            proof: their_proof,
        }) => {
            let want = welcome_proof(&job.token, challenge, nonce, &id, nranks, first_rank);
            if !proof::same_proof(&their_proof, &want) {
                return Step::End(fail(format!(
                    "the rank 0 at tcp://{host}:{port} ({at}) does not know this job's token: it is \
                     another job's rank 0 (or not nccl-find), and its unique id was not used. Give every \
                     rank the same --token (or NCCL_FIND_TOKEN), or choose another port"
                )));
            }
            Step::Go(welcomed(s, &id, nranks as usize, first_rank as usize))
        }
        Ok(Msg::Refused { reason }) => Step::End(fail(format!(
            "rank 0 refused rank {}: {}",
            job.rank,
            peer_text(&reason)
        ))),
        Ok(m) => Step::End(fail(format!(
            "rank 0 answered {} instead of the unique id",
            kind_name(&m)
        ))),
        Err(e) if e.ends_with("the connection closed") || e.contains("reset") => Step::Retry(
            format!("rank 0 closed the connection before answering ({e})"),
        ),
        Err(e) => Step::End(fail(format!("waiting for rank 0's unique id: {e}"))),
    }
}

/// A peer that rank 0 welcomed: it watches rank 0, on a thread of its
/// own, for an abort or its going away.
pub(super) fn welcomed(s: TcpStream, id: &[u8], nranks: usize, first_rank: usize) -> Joined {
    let abort = Arc::new(Abort::default());
    if let Ok(mut r) = s.try_clone() {
        let abort = abort.clone();
        std::thread::spawn(move || match read_msg(&mut r, None) {
            Ok(Msg::Abort { reason }) => {
                abort.raise(format!("rank 0 stopped the job: {}", peer_text(&reason)))
            }
            Ok(m) => abort.raise(format!("rank 0 sent {} during the run", kind_name(&m))),
            Err(e) => abort.raise(format!("rank 0's process went away ({e})")),
        });
    }
    let mut out = [0u8; 128];
    out.copy_from_slice(id);
    Joined {
        id: out,
        nranks,
        first_rank,
        abort,
        link: Link::TcpPeer(s),
    }
}

/// for each peer's Done (until `deadline`, or until one goes away).
pub(super) fn tcp_outcomes(
    peers: Vec<(usize, TcpStream, DoneSlot)>,
    ok: bool,
    message: &str,
    deadline: Instant,
    abort: &Abort,
) -> Vec<PeerOutcome> {
    let mut out = Vec::new();
    for (rank, mut s, slot) in peers {
        if !ok {
            let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
            let _ = send(
                &mut s,
                &Msg::Abort {
                    reason: message.to_string(),
                },
            );
        }
        let done = loop {
            let got = slot.lock().unwrap_or_else(|e| e.into_inner()).clone();
            match got {
                Some(Msg::Done { ok, wrong, message }) => break Some((ok, wrong, message)),
                _ if Instant::now() >= deadline || abort.raised().is_some() => break None,
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        out.push(PeerOutcome { rank, done });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::*;
    use super::*;
    use std::io::Write;

    fn tcp(port: u16) -> Init {
        Init::Tcp {
            host: "127.0.0.1".into(),
            port,
        }
    }

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn connect(port: u16) -> TcpStream {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(s) => return s,
                Err(e) if Instant::now() > until => panic!("{e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    fn wait() -> Option<Instant> {
        Some(Instant::now() + Duration::from_secs(20))
    }

    /// A peer speaking the frames by hand: connects, reads the challenge,
    /// and says hello as `rank` of `world` with a proof of `token`. The
    /// connection, the challenge and the peer's nonce.
    fn raw_hello(
        port: u16,
        token: &str,
        rank: u32,
        world: u32,
    ) -> (TcpStream, [u8; NONCE_LEN], [u8; NONCE_LEN]) {
        let mut s = connect(port);
        let Msg::Challenge { nonce: challenge } = read_msg(&mut s, wait()).unwrap() else {
            panic!("no challenge")
        };
        let nonce = proof::nonce();
        let hello = Msg::Hello {
            rank,
            world,
            ngpus: 1,
            nonce,
            proof: hello_proof(token, &nonce, &challenge, rank, world, 1),
        };
        s.write_all(&encode(&hello)).unwrap();
        (s, challenge, nonce)
    }

    /// Rank 0 of a world of `world` on a thread, with the notes it logged.
    fn tcp_rank0_of(
        port: u16,
        token: &'static str,
        world: usize,
        secs: u64,
    ) -> std::thread::JoinHandle<(Result<usize, String>, Vec<String>)> {
        std::thread::spawn(move || {
            let mut notes = Vec::new();
            let r = join(&job(0, world, token, tcp(port), secs), &id, &mut |m| {
                notes.push(m)
            });
            (r.map(|j| j.nranks).map_err(|f| f.message), notes)
        })
    }

    fn tcp_rank0(
        port: u16,
        token: &'static str,
        secs: u64,
    ) -> std::thread::JoinHandle<(Result<usize, String>, Vec<String>)> {
        tcp_rank0_of(port, token, 2, secs)
    }

    #[test]
    fn a_wrong_token_is_refused_without_sending_the_real_one() {
        let port = free_port();
        let r0 = tcp_rank0(port, "s3cret-token-xyz", 3);
        let (mut s, _, _) = raw_hello(port, "s3cret-token-xyA", 1, 2);
        let reply = read_msg(&mut s, wait()).unwrap();
        let Msg::Refused { reason } = reply else {
            panic!("{reply:?}")
        };
        assert!(reason.starts_with("token mismatch"), "{reason}");
        assert!(!reason.contains("s3cret"), "{reason}");
        let (r, notes) = r0.join().unwrap();
        assert!(r.unwrap_err().contains("rank(s) 1 never arrived"));
        assert!(notes.iter().all(|n| !n.contains("s3cret")), "{notes:?}");
        assert!(same_token("abc", "abc") && !same_token("abc", "abd") && !same_token("abc", "ab"));
    }

    #[test]
    fn a_rank_0_that_does_not_know_the_token_learns_nothing_and_is_not_believed() {
        let token = "the-job-token-4f1c";
        // A listener that is not this job's rank 0: it sends a challenge,
        // keeps the hello, and answers with an id and a made-up proof.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let fake = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(&encode(&Msg::Challenge { nonce: [5; 16] }))
                .unwrap();
            let mut h = [0u8; 10];
            wire::read_full(&mut s, &mut h, wait()).unwrap();
            let (_, len) = decode_header(&h).unwrap();
            let mut hello = vec![0u8; len];
            wire::read_full(&mut s, &mut hello, wait()).unwrap();
            let Ok(Msg::Hello { nonce, .. }) = decode(1, &hello) else {
                panic!("{hello:?}")
            };
            let id = [6u8; 128];
            let welcome = Msg::Welcome {
                id: id.to_vec(),
                nranks: 2,
                first_rank: 1,
                proof: welcome_proof("a-guess", &[5; 16], &nonce, &id, 2, 1),
            };
            s.write_all(&encode(&welcome)).unwrap();
            hello
        });
        let e = join(&job(1, 2, token, tcp(port), 20), &id, &mut |_| {})
            .err()
            .unwrap()
            .message;
        assert_eq!(
            e,
            format!(
                "the rank 0 at tcp://127.0.0.1:{port} (127.0.0.1:{port}) does not know this job's token: \
                 it is another job's rank 0 (or not nccl-find), and its unique id was not used. Give every \
                 rank the same --token (or NCCL_FIND_TOKEN), or choose another port"
            )
        );
        let hello = fake.join().unwrap();
        assert_eq!(hello.len(), MAX_HELLO);
        assert!(!hello.windows(token.len()).any(|w| w == token.as_bytes()));
    }

    #[test]
    fn a_port_held_on_any_address_of_the_name_is_in_use() {
        // Two addresses of one name (as `localhost` has ::1 and 127.0.0.1):
        // another job holds the port on the second.
        let held = TcpListener::bind("127.0.0.2:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let addrs: Vec<SocketAddr> = vec![
            format!("127.0.0.1:{port}").parse().unwrap(),
            format!("127.0.0.2:{port}").parse().unwrap(),
        ];
        let e = listen_all("twohomes", port, &addrs).err().unwrap();
        // 98: EADDRINUSE on Linux.
        assert_eq!(
            e,
            format!(
                "rank 0 cannot listen on twohomes:{port} (127.0.0.2:{port}): {}. Another job may hold the \
                 port: choose another one (or stop that job)",
                std::io::Error::from_raw_os_error(98)
            )
        );
        drop(held);
        // Free on both: rank 0 listens on both (each address, once).
        let mut twice = addrs.clone();
        twice.extend(addrs.clone());
        let ls = listen_all("twohomes", port, &twice).unwrap();
        let got: Vec<SocketAddr> = ls.iter().map(|l| l.local_addr().unwrap()).collect();
        assert_eq!(got, addrs);
    }

    #[test]
    fn a_restarted_rank_takes_the_place_of_its_dead_connection() {
        let port = free_port();
        let r0 = tcp_rank0_of(port, "t", 3, 30);
        // Rank 1 says hello, and its process dies before the welcome.
        let (dead, _, _) = raw_hello(port, "t", 1, 3);
        drop(dead);
        // Its restart comes; then a second rank 1 while the first is alive.
        let (mut again, challenge, nonce) = raw_hello(port, "t", 1, 3);
        let (mut twin, _, _) = raw_hello(port, "t", 1, 3);
        let reply = read_msg(&mut twin, wait()).unwrap();
        assert_eq!(
            reply,
            Msg::Refused {
                reason: "rank 1 arrived twice".into()
            }
        );
        let peer2 = std::thread::spawn(move || {
            join(&job(2, 3, "t", tcp(port), 30), &id, &mut |_| {})
                .map(|j| j.first_rank)
                .map_err(|f| f.message)
        });
        let Msg::Welcome {
            id,
            nranks,
            first_rank,
            proof: p,
        } = read_msg(&mut again, wait()).unwrap()
        else {
            panic!("no welcome")
        };
        assert_eq!((id.clone(), nranks, first_rank), (vec![7; 128], 3, 1));
        assert_eq!(p, welcome_proof("t", &challenge, &nonce, &id, 3, 1));
        assert_eq!(peer2.join().unwrap(), Ok(2));
        let (r, notes) = r0.join().unwrap();
        assert_eq!(r, Ok(3), "{notes:?}");
        assert_eq!(
            notes.iter().filter(|n| n.contains("came again")).count(),
            1,
            "{notes:?}"
        );
        drop((again, twin));
    }

    #[test]
    fn rank_0_names_each_peer_it_admitted() {
        let port = free_port();
        let world = JOINED_SHOWN + 4;
        let r0 = tcp_rank0_of(port, "t", world, 60);
        let mut conns = Vec::new();
        let mut want = Vec::new();
        for r in 1..world {
            let (s, _, _) = raw_hello(port, "t", r as u32, world as u32);
            if r <= JOINED_SHOWN {
                want.push(format!("rank {r} joined from {}", s.local_addr().unwrap()));
            }
            conns.push(s);
        }
        want.push("3 more rank(s) joined from 127.0.0.1: 17-19".into());
        let (r, notes) = r0.join().unwrap();
        assert_eq!(r, Ok(world), "{notes:?}");
        assert_eq!(notes, want);
    }

    #[test]
    fn a_peers_done_message_is_escaped() {
        let port = free_port();
        let r0 = std::thread::spawn(move || {
            let j = join(&job(0, 2, "t", tcp(port), 20), &id, &mut |_| {}).unwrap();
            j.finish(true, 0, "", Duration::from_secs(20))
        });
        let (mut s, _, _) = raw_hello(port, "t", 1, 2);
        assert!(matches!(read_msg(&mut s, wait()), Ok(Msg::Welcome { .. })));
        let done = Msg::Done {
            ok: true,
            wrong: 0,
            message: "\x1b[2Jfine\nrank 9: OK\u{202e}".into(),
        };
        s.write_all(&encode(&done)).unwrap();
        assert_eq!(
            r0.join().unwrap(),
            vec![PeerOutcome {
                rank: 1,
                done: Some((true, 0, "\\u{1b}[2Jfine\\u{a}rank 9: OK\\u{202e}".into()))
            }]
        );
    }

    #[test]
    fn a_slow_drip_peer_cannot_hold_rank_0_past_its_deadline() {
        let port = free_port();
        let t = Instant::now();
        let r0 = tcp_rank0(port, "t", 3);
        let mut s = connect(port);
        let Msg::Challenge { nonce: challenge } = read_msg(&mut s, wait()).unwrap() else {
            panic!("no challenge")
        };
        // A valid hello, one byte every 500 ms (each read sees data well
        // within any per-read timeout).
        let frame = encode(&Msg::Hello {
            rank: 1,
            world: 2,
            ngpus: 1,
            nonce: [1; 16],
            proof: hello_proof("t", &[1; 16], &challenge, 1, 2, 1),
        });
        let drip = std::thread::spawn(move || {
            for b in frame {
                if s.write_all(&[b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        let (r, _) = r0.join().unwrap();
        let e = r.unwrap_err();
        assert!(e.contains("rank(s) 1 never arrived"), "{e}");
        assert!(
            e.contains("1 other connection(s) sent no valid hello"),
            "{e}"
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        drop(drip);

        // A peer waiting for its unique id: the same from a dripping rank 0.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let _ = s.write_all(&encode(&Msg::Challenge { nonce: [2; 16] }));
            for b in encode(&Msg::Welcome {
                id: vec![1; 128],
                nranks: 2,
                first_rank: 1,
                proof: [0; 32],
            }) {
                if s.write_all(&[b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        let t = Instant::now();
        let e = join(&job(1, 2, "t", tcp(port), 2), &id, &mut |_| {})
            .err()
            .unwrap()
            .message;
        assert!(e.contains("no message before the deadline"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    }

    #[test]
    fn three_hundred_idle_connections_do_not_shut_out_a_real_rank() {
        let port = free_port();
        let r0 = tcp_rank0(port, "t", 30);
        // Once rank 0 listens, 300 connections that never say a word.
        let first = connect(port);
        let idle: Vec<TcpStream> = (0..300)
            .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
            .collect();
        assert!(idle.len() >= 100, "{}", idle.len());
        let t = Instant::now();
        let peer = join(&job(1, 2, "t", tcp(port), 30), &id, &mut |_| {});
        let (r, notes) = r0.join().unwrap();
        assert_eq!(r, Ok(2), "{notes:?}");
        assert_eq!(peer.map(|j| j.first_rank).map_err(|f| f.message), Ok(1));
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        drop((first, idle));
    }
}
