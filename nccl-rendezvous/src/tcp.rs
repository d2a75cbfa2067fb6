//! `tcp://HOST:PORT`: a store that rank 0 serves. Rank 0 listens on every
//! address the host name resolves to and sends each new connection a
//! challenge; every other rank connects and says hello with a proof of the
//! job token over that challenge and its own nonce, and is welcomed with
//! rank 0's proof of the token over both nonces. The token itself is never
//! sent, so a rank 0 or a peer of another job (or a listener that is not
//! nccl-find) learns nothing it could answer with. Once every rank is in,
//! each connection carries the store's requests ([`crate::kv::Kv`]: put,
//! get, arrive at a barrier), served by a thread of rank 0's per peer; a
//! peer whose connection closes before it has put its outcome stops the
//! job, and rank 0's going away stops every peer.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::job::Job;
use crate::kv::{done_key, Kv};
use crate::proof::{self, Label, NONCE_LEN, PROOF_LEN};
use crate::untrusted::peer_text;
use crate::wire::{decode, decode_header, encode, kind_name, read_msg, send, timed_out, Msg};
use crate::words::{fail, list, never_came, then, Failed};

/// Connections that have not said hello yet, at most this many at once: a
/// flood of idle ones pushes out the oldest, never a real rank's.
pub(crate) const MAX_PENDING: usize = 64;

/// How long a new connection has to send its hello.
pub(crate) const HELLO_WAIT: Duration = Duration::from_secs(5);

/// A hello payload's length: three numbers, a nonce and a proof.
pub(crate) const MAX_HELLO: usize = 12 + NONCE_LEN + PROOF_LEN;

/// Admitted peers named one by one in the log; the rest are counted.
pub(crate) const JOINED_SHOWN: usize = 16;

/// The proof a hello must carry: the peer's, over rank 0's challenge.
pub(crate) fn hello_proof(
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

/// The proof a welcome must carry: rank 0's, over the peer's nonce, rank
/// and world size.
pub(crate) fn welcome_proof(
    token: &str,
    challenge: &[u8; NONCE_LEN],
    nonce: &[u8; NONCE_LEN],
    rank: u32,
    world: u32,
) -> [u8; PROOF_LEN] {
    proof::prove(
        token,
        Label::Welcome,
        challenge,
        nonce,
        &[&rank.to_le_bytes(), &world.to_le_bytes()],
    )
}

/// A connection that has not said hello yet.
pub(crate) struct Pending {
    s: TcpStream,
    addr: SocketAddr,
    buf: Vec<u8>,
    until: Instant,
    /// The nonce rank 0 sent it.
    challenge: [u8; NONCE_LEN],
}

/// A peer that said a good hello.
pub(crate) struct Admitted {
    rank: usize,
    s: TcpStream,
    addr: SocketAddr,
    /// The nonce rank 0 sent it, and the one it sent.
    challenge: [u8; NONCE_LEN],
    nonce: [u8; NONCE_LEN],
}

pub(crate) enum Pumped {
    More,
    Got(Msg),
    Bad(String),
}

/// Reads what has come of a pending connection's hello, without blocking.
pub(crate) fn pump(p: &mut Pending) -> Pumped {
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
pub(crate) struct Notes<'a> {
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

/// Rank 0: admits every other rank (each proving the token), welcomes
/// each, and serves the store over their connections.
pub(crate) fn serve_root(
    job: &Job,
    host: &str,
    port: u16,
    deadline: Instant,
    log: &mut dyn FnMut(String),
) -> Result<Box<dyn Kv>, Failed> {
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
    let at = format!("tcp://{}", crate::job::host_port(host, port));
    Hub::serve(job, peers, at, deadline).map(|h| Box::new(h) as Box<dyn Kv>)
}

/// Listens at `host:port` on every address the name resolved to (`addrs`):
/// peers may reach any of them, so the port must be this job's on each. A
/// port in use on any one is an error naming that address (a second job's
/// rank 0 must not take the other address of a name, say `localhost`'s
/// `127.0.0.1` while `::1` is held); an address this host does not have
/// (IPv6 turned off) is passed over, as long as one is left.
pub(crate) fn listen_all(
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
pub(crate) struct Lobby<'a> {
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
        let message = never_came(
            &missing,
            job.world,
            job.timeout,
            &format!("tcp://{}", crate::job::host_port(host, port)),
            &if dropped > 0 {
                format!(" ({dropped} other connection(s) sent no valid hello)")
            } else {
                String::new()
            },
        );
        // Those that came hear why the job ends, not a closed connection.
        let stop = Msg::Stop {
            reason: message.clone(),
            missing: missing.iter().map(|r| *r as u32).collect(),
        };
        for p in &mut self.peers {
            let _ = p.s.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = send(&mut p.s, &stop);
        }
        Failed { message, missing }
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

/// A peer: connects to rank 0, proves the token and checks rank 0's
/// proof; the connection is then its link to the store.
pub(crate) fn tcp_peer(
    job: &Job,
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<Box<dyn Kv>, Failed> {
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
        match welcome_answer(job, &mut s, host, port, at, &challenge, &nonce, deadline) {
            Step::Go(()) => {
                return Ok(Box::new(PeerKv {
                    s,
                    at: format!("tcp://{}", crate::job::host_port(host, port)),
                    rank: job.rank,
                    fences: 0,
                    aborted: None,
                }))
            }
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

/// Rank 0's answer to this peer's hello: a welcome, proven to come from a
/// rank 0 that knows the token.
#[allow(clippy::too_many_arguments)]
fn welcome_answer(
    job: &Job,
    s: &mut TcpStream,
    host: &str,
    port: u16,
    at: SocketAddr,
    challenge: &[u8; 16],
    nonce: &[u8; 16],
    deadline: Instant,
) -> Step<()> {
    // Rank 0 says, at its own deadline (a little later, maybe), who never
    // came: a while past this rank's own for it, within the meeting's
    // grace (`kv::GRACE`).
    match read_msg(s, Some(deadline + WELCOME_GRACE)) {
        Ok(Msg::Welcome { proof: their_proof }) => {
            let want = welcome_proof(
                &job.token,
                challenge,
                nonce,
                job.rank as u32,
                job.world as u32,
            );
            if !proof::same_proof(&their_proof, &want) {
                return Step::End(fail(format!(
                    "the rank 0 at tcp://{host}:{port} ({at}) does not know this job's token: it is \
                     another job's rank 0 (or not nccl-find), and nothing it sends is used. Give every \
                     rank the same --token (or NCCL_FIND_TOKEN), or choose another port"
                )));
            }
            Step::Go(())
        }
        Ok(Msg::Refused { reason }) => Step::End(fail(format!(
            "rank 0 refused rank {}: {}",
            job.rank,
            peer_text(&reason)
        ))),
        Ok(Msg::Stop { reason, missing }) => Step::End(Failed {
            message: peer_text(&reason),
            missing: missing.into_iter().map(|r| r as usize).collect(),
        }),
        Ok(m) => Step::End(fail(format!(
            "rank 0 answered {} instead of a welcome",
            kind_name(&m)
        ))),
        Err(e) if e.ends_with("the connection closed") || e.contains("reset") => Step::Retry(
            format!("rank 0 closed the connection before answering ({e})"),
        ),
        Err(e) => Step::End(fail(format!("waiting for rank 0's welcome: {e}"))),
    }
}

/// How long past its deadline a peer waits for rank 0's welcome, or for its
/// word on who never came.
const WELCOME_GRACE: Duration = Duration::from_secs(1);

/// How long rank 0, closing the store, waits for the peers to leave first.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The most keys one rank may put: more is not nccl-find's doing.
const MAX_KEYS: usize = 256;

/// What rank 0's store holds, and how far each rank has come.
#[derive(Default)]
struct State {
    /// Each rank's puts.
    puts: HashMap<(usize, String), Vec<u8>>,
    /// Keys each rank has put.
    keys: Vec<usize>,
    /// Barriers each rank has reached.
    arrived: Vec<u32>,
    /// Ranks whose connection closed.
    gone: Vec<bool>,
    /// Why rank 0 cut a rank off (a limit or a rule it broke), by rank:
    /// what its barrier's failure says rather than that it went away.
    broke: Vec<Option<String>>,
    /// A barrier's failure, for every rank waiting at it: its number, the
    /// words and the ranks that never came.
    failed: Option<(u32, String, Vec<usize>)>,
    /// Why the job stops, once a rank said so or went away.
    abort: Option<String>,
    /// Rank 0 is closing the store: connections that close are no loss.
    closing: bool,
}

impl State {
    /// Whether barrier `n` is open: every rank has reached it.
    fn open(&self, n: u32) -> bool {
        self.arrived.iter().all(|a| *a > n)
    }
    /// Ranks that have not reached barrier `n`.
    fn missing(&self, n: u32) -> Vec<usize> {
        (0..self.arrived.len())
            .filter(|r| self.arrived[*r] <= n)
            .collect()
    }
}

/// Rank 0's store, shared with the thread that serves each peer.
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// Each peer's connection, to answer on (index: rank; rank 0's `None`).
    peers: Vec<Option<Mutex<TcpStream>>>,
    /// Where the store is, in words.
    at: String,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send(&self, rank: usize, m: &Msg) -> Result<(), String> {
        match self.peers.get(rank).and_then(|p| p.as_ref()) {
            Some(p) => send(&mut p.lock().unwrap_or_else(|e| e.into_inner()), m),
            None => Err(format!("rank {rank} has no connection")),
        }
    }

    /// Stops the job, keeping the first reason, and tells every peer.
    fn abort(&self, why: String, except: Option<usize>) {
        {
            let mut st = self.lock();
            if st.abort.is_some() || st.closing {
                return;
            }
            st.abort = Some(why.clone());
        }
        self.changed.notify_all();
        for r in 1..self.peers.len() {
            if Some(r) != except {
                let _ = self.send(
                    r,
                    &Msg::Abort {
                        reason: why.clone(),
                    },
                );
            }
        }
    }
}

/// Rank 0's side of the store.
struct Hub {
    shared: Arc<Shared>,
    fences: u32,
    /// The job's `--timeout`, for the words of a barrier that times out.
    timeout: Duration,
}

impl Hub {
    /// Welcomes every admitted peer and starts a thread that serves each.
    fn serve(
        job: &Job,
        peers: Vec<Admitted>,
        at: String,
        deadline: Instant,
    ) -> Result<Hub, Failed> {
        let world = job.world;
        let mut conns: Vec<Option<Mutex<TcpStream>>> = (0..world).map(|_| None).collect();
        let mut readers = Vec::new();
        for p in peers {
            let (rank, mut s) = (p.rank, p.s);
            let welcome = Msg::Welcome {
                proof: welcome_proof(
                    &job.token,
                    &p.challenge,
                    &p.nonce,
                    rank as u32,
                    world as u32,
                ),
            };
            let _ = s.set_write_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_secs(1)),
            ));
            send(&mut s, &welcome).map_err(|e| fail(format!("welcoming rank {rank}: {e}")))?;
            let r = s
                .try_clone()
                .map_err(|e| fail(format!("rank {rank}'s connection: {e}")))?;
            readers.push((rank, r));
            conns[rank] = Some(Mutex::new(s));
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                keys: vec![0; world],
                arrived: vec![0; world],
                gone: vec![false; world],
                broke: vec![None; world],
                ..State::default()
            }),
            changed: Condvar::new(),
            peers: conns,
            at,
        });
        for (rank, r) in readers {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("nccl-find-store".into())
                .spawn(move || serve_peer(&shared, rank, r))
                .map_err(|e| fail(format!("cannot start a thread: {e}")))?;
        }
        Ok(Hub {
            shared,
            fences: 0,
            timeout: job.timeout,
        })
    }
}

/// How a peer's service ended: its process went away, or it broke a
/// rule of the store and was cut off; why, in words.
enum End {
    Gone(String),
    Broke(String),
}

/// Serves one peer's requests until its connection closes (or the store
/// does): a peer that goes before it has put its outcome stops the job.
/// One that breaks a rule is cut off, and the rule is what is said.
fn serve_peer(shared: &Shared, rank: usize, mut s: TcpStream) {
    let end = loop {
        let m = match read_msg(&mut s, None) {
            Ok(m) => m,
            Err(e) => break End::Gone(format!("rank {rank}'s process went away ({e})")),
        };
        let answer = match m {
            Msg::Put { key, value } => {
                let mut st = shared.lock();
                if st.keys[rank] >= MAX_KEYS {
                    break End::Broke(format!(
                        "rank {rank} put more than {MAX_KEYS} keys (nccl-find puts a few)"
                    ));
                }
                st.keys[rank] += 1;
                st.puts.insert((rank, key), value);
                None
            }
            Msg::Get { from, key } => Some(Msg::Value {
                value: shared.lock().puts.get(&(from as usize, key)).cloned(),
            }),
            Msg::Arrive { n } => match arrive(shared, rank, n) {
                Ok(m) => Some(m),
                Err(e) => break End::Broke(e),
            },
            Msg::Abort { reason } => {
                shared.abort(
                    format!("rank {rank} stopped the job: {}", peer_text(&reason)),
                    Some(rank),
                );
                None
            }
            m => break End::Broke(format!("rank {rank} sent {} during the run", kind_name(&m))),
        };
        if let Some(a) = answer {
            if let Err(e) = shared.send(rank, &a) {
                break End::Gone(format!("rank {rank}'s process went away ({e})"));
            }
        }
    };
    let (end, broke) = match end {
        End::Gone(why) => (why, false),
        End::Broke(why) => {
            let _ = s.shutdown(std::net::Shutdown::Both);
            (why, true)
        }
    };
    let lost = {
        let mut st = shared.lock();
        st.gone[rank] = true;
        if broke {
            st.broke[rank] = Some(end.clone());
        }
        !st.closing && !st.puts.contains_key(&(rank, done_key(rank)))
    };
    shared.changed.notify_all();
    if lost {
        shared.abort(end, Some(rank));
    }
}

/// Why barrier `n` failed, with `missing` the ranks that never reached
/// it: a rule one broke (rank 0 cut it off), else the ranks that went
/// away, else the ranks that, still connected, stopped answering.
fn failed_barrier(st: &State, n: u32, missing: &[usize], at: &str, timeout: Duration) -> String {
    let gone: Vec<usize> = missing.iter().copied().filter(|r| st.gone[*r]).collect();
    if let Some(why) = gone.iter().find_map(|r| st.broke[*r].as_ref()) {
        return format!(
            "{why}: rank 0 cut it off before barrier {n} of the rendezvous at {at}. Check that every \
             rank runs this version of nccl-find, and that nothing else connects to its port"
        );
    }
    if !gone.is_empty() {
        return format!(
            "rank(s) {} went away before barrier {n} of the rendezvous at {at}: check their output",
            list(&gone)
        );
    }
    // Every rank here was admitted: one that is still connected and never
    // came stopped answering.
    format!(
        "rank(s) {} stopped answering: still connected to the rendezvous at {at}, they never reached \
         barrier {n} within {:.0} s ({} of {} processes did). Check their output (a process stopped or \
         hung?), or raise --timeout",
        list(missing),
        timeout.as_secs_f64(),
        st.arrived.len() - missing.len(),
        st.arrived.len()
    )
}

/// A peer reaches barrier `n`: the answer once it opens or fails.
fn arrive(shared: &Shared, rank: usize, n: u32) -> Result<Msg, String> {
    let mut st = shared.lock();
    if st.arrived[rank] != n {
        return Err(format!(
            "rank {rank} arrived at barrier {n}, but is at barrier {}",
            st.arrived[rank]
        ));
    }
    st.arrived[rank] = n + 1;
    shared.changed.notify_all();
    loop {
        if st.open(n) {
            return Ok(Msg::Pass { n });
        }
        if let Some((at, reason, missing)) = &st.failed {
            if *at == n {
                return Ok(Msg::Stop {
                    reason: reason.clone(),
                    missing: missing.iter().map(|r| *r as u32).collect(),
                });
            }
        }
        if st.closing {
            return Err("the store closed".into());
        }
        st = shared.changed.wait(st).unwrap_or_else(|e| e.into_inner());
    }
}

impl Kv for Hub {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        self.shared
            .lock()
            .puts
            .insert((0, key.into()), value.into());
        Ok(())
    }

    fn fence(&mut self, deadline: Instant) -> Result<(), Failed> {
        let n = self.fences;
        self.fences += 1;
        let shared = &self.shared;
        let mut st = shared.lock();
        st.arrived[0] = n + 1;
        shared.changed.notify_all();
        loop {
            if st.open(n) {
                return Ok(());
            }
            let missing = st.missing(n);
            let gone = missing.iter().any(|r| st.gone[*r]);
            let now = Instant::now();
            if gone || now >= deadline {
                let reason = failed_barrier(&st, n, &missing, &shared.at, self.timeout);
                st.failed = Some((n, reason.clone(), missing.clone()));
                drop(st);
                shared.changed.notify_all();
                return Err(Failed {
                    message: reason,
                    missing,
                });
            }
            let wait = (deadline - now).min(Duration::from_millis(500));
            st = shared
                .changed
                .wait_timeout(st, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn get(&mut self, from: usize, key: &str) -> Result<Vec<u8>, String> {
        self.shared
            .lock()
            .puts
            .get(&(from, key.to_string()))
            .cloned()
            .ok_or_else(|| format!("rank {from} left no {key}"))
    }

    fn watch(&mut self) -> Option<String> {
        self.shared.lock().abort.clone()
    }

    fn abort(&mut self, why: &str) {
        self.shared.abort(why.to_string(), None);
    }

    fn close(&mut self, until: Instant) {
        // A peer leaves once it has heard that the last barrier opened: wait
        // (a little, and never past `until`: a peer that stalled never
        // goes) for each to go, so that none misses it, then close.
        let shared = &self.shared;
        let until = until.min(Instant::now() + CLOSE_WAIT);
        let mut st = shared.lock();
        while !st.gone.iter().skip(1).all(|g| *g) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = shared
                .changed
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        st.closing = true;
        drop(st);
        self.shared.changed.notify_all();
        for p in self.shared.peers.iter().flatten() {
            let _ = p
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .shutdown(std::net::Shutdown::Both);
        }
    }
}

/// A peer's side of the store: its connection to rank 0.
struct PeerKv {
    s: TcpStream,
    /// Where the store is, in words.
    at: String,
    rank: usize,
    fences: u32,
    /// Rank 0's abort, when one came between answers.
    aborted: Option<String>,
}

/// How long past its deadline a peer waits for rank 0 to say how a barrier
/// ended (rank 0 says so at its own deadline, which may be a little later).
const PEER_GRACE: Duration = Duration::from_secs(2);

impl PeerKv {
    /// The next answer from rank 0 by `until`: an abort on the way is kept
    /// for [`Kv::watch`], and the wait goes on.
    fn answer(&mut self, until: Instant) -> Result<Msg, String> {
        loop {
            match read_msg(&mut self.s, Some(until))? {
                Msg::Abort { reason } => {
                    self.aborted
                        .get_or_insert(format!("rank 0 stopped the job: {}", peer_text(&reason)));
                }
                m => return Ok(m),
            }
        }
    }

    fn gone(&self, e: &str) -> String {
        format!("rank 0's process went away ({e})")
    }
}

impl Kv for PeerKv {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        let _ = self.s.set_write_timeout(Some(Duration::from_secs(10)));
        send(
            &mut self.s,
            &Msg::Put {
                key: key.into(),
                value: value.into(),
            },
        )
        .map_err(|e| self.gone(&e))
    }

    fn fence(&mut self, deadline: Instant) -> Result<(), Failed> {
        let n = self.fences;
        self.fences += 1;
        let _ = self.s.set_write_timeout(Some(Duration::from_secs(10)));
        send(&mut self.s, &Msg::Arrive { n }).map_err(|e| fail(self.gone(&e)))?;
        match self.answer(deadline + PEER_GRACE) {
            Ok(Msg::Pass { n: m }) if m == n => Ok(()),
            Ok(Msg::Stop { reason, missing }) => Err(Failed {
                message: peer_text(&reason),
                missing: missing.into_iter().map(|r| r as usize).collect(),
            }),
            Ok(m) => Err(fail(format!(
                "rank 0 answered {} at barrier {n}",
                kind_name(&m)
            ))),
            Err(e) if e.contains("deadline") => Err(fail(format!(
                "rank {} waited at barrier {n} of the rendezvous at {} past its deadline, and rank 0 never \
                 said how it ended: is rank 0 still running? Check its output",
                self.rank, self.at
            ))),
            Err(e) => Err(fail(self.gone(&e))),
        }
    }

    fn get(&mut self, from: usize, key: &str) -> Result<Vec<u8>, String> {
        let _ = self.s.set_write_timeout(Some(Duration::from_secs(10)));
        let ask = Msg::Get {
            from: from as u32,
            key: key.into(),
        };
        send(&mut self.s, &ask).map_err(|e| self.gone(&e))?;
        match self.answer(Instant::now() + Duration::from_secs(30)) {
            Ok(Msg::Value { value: Some(v) }) => Ok(v),
            Ok(Msg::Value { value: None }) => Err(format!("rank {from} left no {key}")),
            Ok(m) => Err(format!("rank 0 answered {} to a get", kind_name(&m))),
            Err(e) => Err(self.gone(&e)),
        }
    }

    fn watch(&mut self) -> Option<String> {
        if self.aborted.is_some() {
            return self.aborted.clone();
        }
        if self.s.set_nonblocking(true).is_err() {
            return None;
        }
        let peeked = self.s.peek(&mut [0u8; 1]);
        let _ = self.s.set_nonblocking(false);
        match peeked {
            Ok(0) => self.aborted = Some(self.gone("the connection closed")),
            Ok(_) => match read_msg(&mut self.s, Some(Instant::now() + Duration::from_secs(5))) {
                Ok(Msg::Abort { reason }) => {
                    self.aborted = Some(format!("rank 0 stopped the job: {}", peer_text(&reason)))
                }
                Ok(m) => {
                    self.aborted = Some(format!("rank 0 sent {} during the run", kind_name(&m)))
                }
                Err(e) => self.aborted = Some(self.gone(&e)),
            },
            Err(e) if timed_out(&e) || e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => self.aborted = Some(self.gone(&e.to_string())),
        }
        self.aborted.clone()
    }

    fn abort(&mut self, why: &str) {
        let _ = self.s.set_write_timeout(Some(Duration::from_secs(2)));
        let _ = send(&mut self.s, &Msg::Abort { reason: why.into() });
    }

    fn close(&mut self, _until: Instant) {
        let _ = self.s.shutdown(std::net::Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::*;
    use super::*;
    use crate::words::same_token;
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

    /// A welcomed peer speaking the store by hand: its hello (one GPU) and
    /// the three barriers of the meeting.
    fn raw_meet(s: &mut TcpStream, rank: usize) {
        let hello = Msg::Put {
            key: format!("nccl-find/hello/{rank}"),
            value: 1u32.to_le_bytes().to_vec(),
        };
        s.write_all(&encode(&hello)).unwrap();
        for n in [0, 1, 2] {
            s.write_all(&encode(&Msg::Arrive { n })).unwrap();
            assert_eq!(read_msg(s, wait()), Ok(Msg::Pass { n }));
        }
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
        assert!(r
            .unwrap_err()
            .starts_with("rank 1 never came to tcp://127.0.0.1:"));
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
            let welcome = Msg::Welcome {
                proof: welcome_proof("a-guess", &[5; 16], &nonce, 1, 2),
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
                 it is another job's rank 0 (or not nccl-find), and nothing it sends is used. Give every \
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
        // Rank 2 stays in the job to its end: a rank that leaves before it
        // reports stops the others, and the raw rank 1 would hear that.
        let peer2 = std::thread::spawn(move || {
            join(&job(2, 3, "t", tcp(port), 30), &id, &mut |_| {}).map_err(|f| f.message)
        });
        let Msg::Welcome { proof: p } = read_msg(&mut again, wait()).unwrap() else {
            panic!("no welcome")
        };
        assert_eq!(p, welcome_proof("t", &challenge, &nonce, 1, 3));
        raw_meet(&mut again, 1);
        let peer2 = peer2.join().unwrap();
        assert_eq!(peer2.as_ref().map(|j| j.first_rank), Ok(2));
        let (r, notes) = r0.join().unwrap();
        assert_eq!(r, Ok(3), "{notes:?}");
        assert_eq!(
            notes.iter().filter(|n| n.contains("came again")).count(),
            1,
            "{notes:?}"
        );
        drop((again, twin, peer2));
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
        let peers: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, mut s)| {
                std::thread::spawn(move || {
                    assert!(matches!(read_msg(&mut s, wait()), Ok(Msg::Welcome { .. })));
                    raw_meet(&mut s, i + 1);
                    s
                })
            })
            .collect();
        let _conns: Vec<TcpStream> = peers.into_iter().map(|p| p.join().unwrap()).collect();
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
        raw_meet(&mut s, 1);
        // The peer's outcome, as a hostile one would put it.
        let mut done = vec![1u8];
        done.extend_from_slice(&0u64.to_le_bytes());
        done.push(0);
        done.extend_from_slice("\x1b[2Jfine\nrank 9: OK\u{202e}".as_bytes());
        let put = Msg::Put {
            key: done_key(1),
            value: done,
        };
        s.write_all(&encode(&put)).unwrap();
        for n in [3, 4] {
            s.write_all(&encode(&Msg::Arrive { n })).unwrap();
            assert_eq!(read_msg(&mut s, wait()), Ok(Msg::Pass { n }));
        }
        assert_eq!(
            r0.join().unwrap(),
            vec![PeerOutcome {
                rank: 1,
                done: Some((true, 0, "\\u{1b}[2Jfine\\u{a}rank 9: OK\\u{202e}".into())),
                times_us: Vec::new(),
                why: None,
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
        assert!(e.starts_with("rank 1 never came to tcp://"), "{e}");
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
            for b in encode(&Msg::Welcome { proof: [0; 32] }) {
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

    /// A peer that stalls after the meeting (it never leaves its outcome):
    /// rank 0's end names it, within the grace past the end's deadline
    /// (before, closing the store waited 5 s, and the outcome came back
    /// empty).
    #[test]
    fn a_peer_that_stalls_at_the_end_is_named_within_the_grace() {
        let port = free_port();
        let r0 = std::thread::spawn(move || {
            let j = join(&job(0, 2, "t", tcp(port), 20), &id, &mut |_| {}).unwrap();
            let t = Instant::now();
            let got = j.finish(true, 0, "", Duration::from_secs(2));
            (got, t.elapsed())
        });
        let (mut s, _, _) = raw_hello(port, "t", 1, 2);
        assert!(matches!(read_msg(&mut s, wait()), Ok(Msg::Welcome { .. })));
        raw_meet(&mut s, 1);
        let (got, took) = r0.join().unwrap();
        assert_eq!(
            got,
            vec![PeerOutcome {
                rank: 1,
                done: None,
                times_us: Vec::new(),
                why: Some(format!(
                    "rank(s) 1 stopped answering: still connected to the rendezvous at \
                     tcp://127.0.0.1:{port}, they never reached barrier 3 within 20 s (1 of 2 processes \
                     did). Check their output (a process stopped or hung?), or raise --timeout"
                )),
            }]
        );
        assert!(took < Duration::from_secs(4), "{took:?}");
        drop(s);
    }

    /// A peer that puts more keys than the store takes is cut off, and
    /// rank 0 and the other peer say so (it was reported as "went away").
    #[test]
    fn a_peer_that_breaks_a_limit_is_named_with_the_limit() {
        let port = free_port();
        let r0 = tcp_rank0_of(port, "t", 3, 30);
        let (mut s, _, _) = raw_hello(port, "t", 1, 3);
        let peer2 = std::thread::spawn(move || {
            join(&job(2, 3, "t", tcp(port), 30), &id, &mut |_| {})
                .map(|_| ())
                .map_err(|f| f.message)
        });
        assert!(matches!(read_msg(&mut s, wait()), Ok(Msg::Welcome { .. })));
        for k in 0..=MAX_KEYS {
            let put = Msg::Put {
                key: format!("k{k}"),
                value: vec![1],
            };
            if s.write_all(&encode(&put)).is_err() {
                break;
            }
        }
        let (r, _) = r0.join().unwrap();
        let want = format!(
            "rank 1 put more than 256 keys (nccl-find puts a few): rank 0 cut it off before barrier 0 of \
             the rendezvous at tcp://127.0.0.1:{port}. Check that every rank runs this version of \
             nccl-find, and that nothing else connects to its port"
        );
        assert_eq!(r, Err(want.clone()));
        assert_eq!(peer2.join().unwrap(), Err(want));
        // The connection was closed on it, without another word.
        let mut rest = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        assert_eq!(s.read_to_end(&mut rest).map_err(|e| e.kind()), Ok(0));
    }

    /// An admitted peer that stalls (its hello said, then not a word):
    /// rank 0 names it at its deadline and ends within the grace (closing
    /// the store waited 5 s for it to leave, past the 2 s grace, and rank 0
    /// said only that the rendezvous did not end). The other peer hears
    /// the same.
    #[test]
    fn a_stalled_peer_is_named_within_the_grace() {
        let port = free_port();
        let t = Instant::now();
        let r0 = tcp_rank0_of(port, "t", 3, 2);
        let (mut stalled, _, _) = raw_hello(port, "t", 1, 3);
        let peer2 = std::thread::spawn(move || {
            join(&job(2, 3, "t", tcp(port), 2), &id, &mut |_| {})
                .map(|_| ())
                .map_err(|f| f.message)
        });
        assert!(matches!(
            read_msg(&mut stalled, wait()),
            Ok(Msg::Welcome { .. })
        ));
        let (r, _) = r0.join().unwrap();
        let took = t.elapsed();
        let want = format!(
            "rank(s) 1 stopped answering: still connected to the rendezvous at tcp://127.0.0.1:{port}, \
             they never reached barrier 0 within 2 s (2 of 3 processes did). Check their output (a \
             process stopped or hung?), or raise --timeout"
        );
        assert_eq!(r, Err(want.clone()));
        assert!(took < Duration::from_secs(4), "{took:?}");
        assert_eq!(peer2.join().unwrap(), Err(want));
        drop(stalled);
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
