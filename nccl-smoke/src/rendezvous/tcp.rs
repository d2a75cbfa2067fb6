//! `tcp://HOST:PORT`: rank 0 listens, every other rank connects, says
//! hello with the job token, and gets the unique id and its first NCCL rank.

use std::io::Read;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::wire::{decode, decode_header, kind_name, read_msg, send, timed_out, Msg};
use super::{
    fail, list, offsets, same_token, Abort, Failed, Job, Joined, Link, PeerOutcome, MAX_TOKEN,
};

/// Where a watcher thread leaves a peer's Done message.
pub(super) type DoneSlot = Arc<Mutex<Option<Msg>>>;

/// Connections that have not said hello yet, at most this many at once: a
/// flood of idle ones pushes out the oldest, never a real rank's.
pub(super) const MAX_PENDING: usize = 64;

/// How long a new connection has to send its hello.
pub(super) const HELLO_WAIT: Duration = Duration::from_secs(5);

/// The longest hello payload: a token and three numbers.
pub(super) const MAX_HELLO: usize = 2 + MAX_TOKEN + 12;

/// A connection that has not said hello yet.
pub(super) struct Pending {
    s: TcpStream,
    addr: std::net::SocketAddr,
    buf: Vec<u8>,
    until: Instant,
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
            if kind == 1 && len > MAX_HELLO {
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
pub(super) struct Notes<'a> {
    log: &'a mut dyn FnMut(String),
    shown: usize,
    hidden: usize,
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
    fn flush(&mut self) {
        if self.hidden > 0 {
            (self.log)(format!(
                "{} more connection(s) refused or dropped (not shown)",
                std::mem::take(&mut self.hidden)
            ));
        }
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
    let listener = TcpListener::bind((host, port)).map_err(|e| {
        fail(format!(
            "rank 0 cannot listen on {host}:{port}: {e}. Another job may hold the port: choose another one \
             (or stop that job)"
        ))
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| fail(e.to_string()))?;
    let mut lobby = Lobby {
        job,
        notes: Notes {
            log,
            shown: 0,
            hidden: 0,
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
        let busy = lobby.accept(&listener, now, deadline);
        lobby.read_hellos();
        if !busy {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    lobby.notes.flush();
    let Lobby { peers, pending, .. } = lobby;
    drop(pending);
    let id = make_id().map_err(fail)?;
    welcome(job, peers, id, deadline)
}

/// Rank 0's side of a TCP rendezvous while the peers arrive.
pub(super) struct Lobby<'a> {
    job: &'a Job,
    notes: Notes<'a>,
    /// Peers that said a good hello: process rank, GPU count, connection.
    peers: Vec<(usize, usize, TcpStream)>,
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
        let here: Vec<usize> = self.peers.iter().map(|p| p.0).collect();
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
                Ok((s, addr)) => {
                    busy = true;
                    if s.set_nonblocking(true).is_err() {
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
            let addr = p.addr;
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
                    token,
                    rank,
                    world,
                    ngpus,
                }) => {
                    let (rank, world, ngpus) = (rank as usize, world as usize, ngpus as usize);
                    let why = self.refusal(&token, rank, world, ngpus);
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
                            self.peers.push((rank, ngpus, p.s));
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

    /// Why a hello is refused; `None`: the peer is in.
    fn refusal(&self, token: &str, rank: usize, world: usize, ngpus: usize) -> Option<String> {
        let job = self.job;
        if !same_token(token, &job.token) {
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
        } else if self.peers.iter().any(|p| p.0 == rank) {
            Some(format!("rank {rank} arrived twice"))
        } else if ngpus == 0 || ngpus > 1024 {
            Some(format!("{ngpus} GPUs is not a GPU count"))
        } else {
            None
        }
    }
}

/// Rank 0 hands every peer the unique id and its first NCCL rank, and
/// watches each for its outcome or its going away.
pub(super) fn welcome(
    job: &Job,
    mut peers: Vec<(usize, usize, TcpStream)>,
    id: [u8; 128],
    deadline: Instant,
) -> Result<Joined, Failed> {
    peers.sort_by_key(|p| p.0);
    let mut counts = vec![job.ngpus];
    counts.extend(peers.iter().map(|p| p.1));
    let (first, nranks) = offsets(&counts);
    let abort = Arc::new(Abort::default());
    let mut kept = Vec::new();
    for (rank, _, mut s) in peers {
        let welcome = Msg::Welcome {
            id: id.to_vec(),
            nranks: nranks as u32,
            first_rank: first[rank] as u32,
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
                *slot.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(Msg::Done { ok, wrong, message });
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
            return Err(fail(format!(
                "rank {} could not reach rank 0 at tcp://{host}:{port} within {:.0} s ({last}). Is rank 0 \
                 running, and is that address reachable from here?",
                job.rank,
                job.timeout.as_secs_f64()
            )));
        }
        let Some(mut s) = addrs.iter().find_map(|a| {
            TcpStream::connect_timeout(a, Duration::from_millis(500))
                .map_err(|e| last = e.to_string())
                .ok()
        }) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let hello = Msg::Hello {
            token: job.token.clone(),
            rank: job.rank as u32,
            world: job.world as u32,
            ngpus: job.ngpus as u32,
        };
        let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
        if let Err(e) = send(&mut s, &hello) {
            last = format!("greeting rank 0: {e}");
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        let _ = s.set_write_timeout(None);
        return match read_msg(&mut s, Some(deadline)) {
            Ok(Msg::Welcome {
                id,
                nranks,
                first_rank,
            }) => Ok(welcomed(s, &id, nranks as usize, first_rank as usize)),
            Ok(Msg::Refused { reason }) => {
                Err(fail(format!("rank 0 refused rank {}: {reason}", job.rank)))
            }
            Ok(m) => Err(fail(format!(
                "rank 0 answered {} instead of the unique id",
                kind_name(&m)
            ))),
            Err(e) if e.ends_with("the connection closed") || e.contains("reset") => {
                last = format!("rank 0 closed the connection before answering ({e})");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            Err(e) => Err(fail(format!("waiting for rank 0's unique id: {e}"))),
        };
    }
}

/// A peer that rank 0 welcomed: it watches rank 0, on a thread of its
/// own, for an abort or its going away.
pub(super) fn welcomed(s: TcpStream, id: &[u8], nranks: usize, first_rank: usize) -> Joined {
    let abort = Arc::new(Abort::default());
    if let Ok(mut r) = s.try_clone() {
        let abort = abort.clone();
        std::thread::spawn(move || match read_msg(&mut r, None) {
            Ok(Msg::Abort { reason }) => abort.raise(format!("rank 0 stopped the job: {reason}")),
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

    /// Rank 0 on a thread, with the notes it logged.
    fn tcp_rank0(
        port: u16,
        token: &'static str,
        secs: u64,
    ) -> std::thread::JoinHandle<(Result<usize, String>, Vec<String>)> {
        std::thread::spawn(move || {
            let mut notes = Vec::new();
            let r = join(&job(0, 2, token, tcp(port), secs), &id, &mut |m| {
                notes.push(m)
            });
            (r.map(|j| j.nranks).map_err(|f| f.message), notes)
        })
    }

    #[test]
    fn a_wrong_token_is_refused_without_sending_the_real_one() {
        let port = free_port();
        let r0 = tcp_rank0(port, "s3cret-token-xyz", 3);
        let mut s = connect(port);
        let hello = Msg::Hello {
            token: "s3cret-token-xyA".into(),
            rank: 1,
            world: 2,
            ngpus: 1,
        };
        s.write_all(&encode(&hello)).unwrap();
        let reply = read_msg(&mut s, Some(Instant::now() + Duration::from_secs(5))).unwrap();
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
    fn a_slow_drip_peer_cannot_hold_rank_0_past_its_deadline() {
        let port = free_port();
        let t = Instant::now();
        let r0 = tcp_rank0(port, "t", 3);
        let mut s = connect(port);
        // A valid hello, one byte every 500 ms (each read sees data well
        // within any per-read timeout).
        let frame = encode(&Msg::Hello {
            token: "t".into(),
            rank: 1,
            world: 2,
            ngpus: 1,
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
            for b in encode(&Msg::Welcome {
                id: vec![1; 128],
                nranks: 2,
                first_rank: 1,
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
