//! Admission: rank 0 listens, challenges each new connection and welcomes
//! each rank that proves the job token; a peer connects, says hello and
//! checks rank 0's welcome.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};

use std::time::{Duration, Instant};

use crate::job::Job;
use crate::kv::Kv;
use crate::proof::{self, Label, NONCE_LEN, PROOF_LEN};
use crate::untrusted::peer_text;
use crate::wire::{decode, decode_header, encode, kind_name, read_msg, send, timed_out, Msg};
use crate::words::{fail, never_came, then, Failed};

use super::notes::Notes;
use super::{Hub, PeerKv};

/// Connections that have not said hello yet, at most this many at once: a
/// flood of idle ones pushes out the oldest, never a real rank's.
pub(crate) const MAX_PENDING: usize = 64;

/// How long a new connection has to send its hello.
pub(crate) const HELLO_WAIT: Duration = Duration::from_secs(5);

/// A hello payload's length: three numbers, a nonce and a proof.
pub(crate) const MAX_HELLO: usize = 12 + NONCE_LEN + PROOF_LEN;

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
    pub(super) rank: usize,
    pub(super) s: TcpStream,
    pub(super) addr: SocketAddr,
    /// The nonce rank 0 sent it, and the one it sent.
    pub(super) challenge: [u8; NONCE_LEN],
    pub(super) nonce: [u8; NONCE_LEN],
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
        notes: Notes::new(log),
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
        self.notes.say(format!(
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
