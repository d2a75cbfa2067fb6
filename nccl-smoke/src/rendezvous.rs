//! Getting the ranks together: rank 0 makes NCCL's unique id and hands it
//! out, over TCP (`tcp://HOST:PORT`) or through a shared file
//! (`file:///shared/path`). A job token keeps two jobs on one port or one
//! file apart; a peer that sends garbage is refused, never trusted; every
//! wait has a deadline, and what times out names the ranks that never came.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::fsafe::{self, FileId};

/// How the ranks meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Init {
    /// Rank 0 listens at `host:port`.
    Tcp {
        /// Host to listen at / connect to.
        host: String,
        /// Port.
        port: u16,
    },
    /// Everyone reads and writes files next to this path.
    File {
        /// The rendezvous file.
        path: PathBuf,
    },
}

impl Init {
    /// Parses `tcp://HOST:PORT` or `file:///path`.
    pub fn parse(s: &str) -> Result<Init, String> {
        if let Some(rest) = s.strip_prefix("tcp://") {
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| format!("{s:?} has no port: write tcp://HOST:PORT"))?;
            let port: u16 = port
                .parse()
                .map_err(|_| format!("{s:?}: {port:?} is not a port number"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() {
                return Err(format!("{s:?} has no host: write tcp://HOST:PORT"));
            }
            Ok(Init::Tcp {
                host: host.to_string(),
                port,
            })
        } else if let Some(rest) = s.strip_prefix("file://") {
            if !rest.starts_with('/') {
                return Err(format!(
                    "{s:?}: the file must be an absolute path, as in file:///shared/smoke"
                ));
            }
            Ok(Init::File {
                path: PathBuf::from(rest),
            })
        } else {
            Err(format!("{s:?} is neither tcp://HOST:PORT nor file:///path"))
        }
    }
}

/// One process's place in the job.
#[derive(Debug, Clone)]
pub struct Job {
    /// This process's rank among the processes.
    pub rank: usize,
    /// How many processes.
    pub world: usize,
    /// GPUs this process drives.
    pub ngpus: usize,
    /// Keeps jobs apart.
    pub token: String,
    /// How to meet.
    pub init: Init,
    /// Deadline for each wait.
    pub timeout: Duration,
}

/// A message between ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// A peer introduces itself to rank 0.
    Hello {
        /// The job token.
        token: String,
        /// The peer's process rank.
        rank: u32,
        /// The world size it believes in.
        world: u32,
        /// GPUs it drives.
        ngpus: u32,
    },
    /// Rank 0's answer: the unique id, and the peer's first NCCL rank.
    Welcome {
        /// NCCL's unique id.
        id: Vec<u8>,
        /// NCCL ranks in all.
        nranks: u32,
        /// The peer's first NCCL rank.
        first_rank: u32,
    },
    /// Rank 0 turns a peer away.
    Refused {
        /// Why.
        reason: String,
    },
    /// A peer's outcome.
    Done {
        /// Whether everything it checked was right.
        ok: bool,
        /// Wrong elements it saw.
        wrong: u64,
        /// In words.
        message: String,
    },
    /// Stop: another rank failed.
    Abort {
        /// Why.
        reason: String,
    },
}

const MAGIC: &[u8; 4] = b"NCFS";
const VERSION: u8 = 1;
const MAX_PAYLOAD: usize = 64 * 1024;

fn put_str(out: &mut Vec<u8>, s: &str) {
    let b = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(b.len() as u16).to_le_bytes());
    out.extend_from_slice(b);
}

/// A frame: magic, version, kind, payload length, payload.
pub fn encode(m: &Msg) -> Vec<u8> {
    let mut p = Vec::new();
    let kind = match m {
        Msg::Hello {
            token,
            rank,
            world,
            ngpus,
        } => {
            put_str(&mut p, token);
            for v in [rank, world, ngpus] {
                p.extend_from_slice(&v.to_le_bytes());
            }
            1
        }
        Msg::Welcome {
            id,
            nranks,
            first_rank,
        } => {
            p.extend_from_slice(&(id.len() as u16).to_le_bytes());
            p.extend_from_slice(id);
            p.extend_from_slice(&nranks.to_le_bytes());
            p.extend_from_slice(&first_rank.to_le_bytes());
            2
        }
        Msg::Refused { reason } => {
            put_str(&mut p, reason);
            3
        }
        Msg::Done { ok, wrong, message } => {
            p.push(u8::from(*ok));
            p.extend_from_slice(&wrong.to_le_bytes());
            put_str(&mut p, message);
            4
        }
        Msg::Abort { reason } => {
            put_str(&mut p, reason);
            5
        }
    };
    let mut out = Vec::with_capacity(10 + p.len());
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(kind);
    out.extend_from_slice(&(p.len() as u32).to_le_bytes());
    out.extend_from_slice(&p);
    out
}

/// Reads a frame's header: the kind and the payload length.
pub fn decode_header(h: &[u8; 10]) -> Result<(u8, usize), String> {
    if &h[..4] != MAGIC {
        return Err("not an nccl-find rendezvous message (bad magic)".into());
    }
    if h[4] != VERSION {
        return Err(format!(
            "protocol version {} (this nccl-find speaks {VERSION})",
            h[4]
        ));
    }
    let len = u32::from_le_bytes([h[6], h[7], h[8], h[9]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(format!("a {len}-byte message is too long"));
    }
    Ok((h[5], len))
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("message ends early".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u16(&mut self) -> Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn string(&mut self) -> Result<String, String> {
        let n = self.u16()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "a string is not UTF-8".to_string())
    }
}

/// Decodes a payload of `kind`. Anything malformed is an error, never a panic.
pub fn decode(kind: u8, payload: &[u8]) -> Result<Msg, String> {
    let mut c = Cursor(payload);
    let m = match kind {
        1 => Msg::Hello {
            token: c.string()?,
            rank: c.u32()?,
            world: c.u32()?,
            ngpus: c.u32()?,
        },
        2 => {
            let n = c.u16()? as usize;
            if n != 128 {
                return Err(format!("a unique id of {n} bytes (NCCL's has 128)"));
            }
            Msg::Welcome {
                id: c.take(n)?.to_vec(),
                nranks: c.u32()?,
                first_rank: c.u32()?,
            }
        }
        3 => Msg::Refused {
            reason: c.string()?,
        },
        4 => {
            let ok = match c.take(1)?[0] {
                0 => false,
                1 => true,
                b => return Err(format!("a done flag of {b}")),
            };
            let w = c.take(8)?;
            Msg::Done {
                ok,
                wrong: u64::from_le_bytes(w.try_into().expect("8 bytes")),
                message: c.string()?,
            }
        }
        5 => Msg::Abort {
            reason: c.string()?,
        },
        k => return Err(format!("unknown message kind {k}")),
    };
    if !c.0.is_empty() {
        return Err(format!("{} stray bytes after the message", c.0.len()));
    }
    Ok(m)
}

/// The most processes a job may have: every per-rank table is bounded by it.
pub const MAX_WORLD: usize = 1 << 20;

/// The longest job token, in bytes.
pub const MAX_TOKEN: usize = 1024;

/// The longest `--timeout` the rendezvous takes: a year. Longer ones are a
/// mistake (and would overflow the clock).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Checks a job token: at most [`MAX_TOKEN`] bytes, no line break (the file
/// rendezvous keeps one per line).
pub fn check_token(token: &str) -> Result<(), String> {
    if token.len() > MAX_TOKEN {
        return Err(format!(
            "the token is {} bytes long; at most {MAX_TOKEN} bytes",
            token.len()
        ));
    }
    if token.contains(['\n', '\r', '\0']) {
        return Err("the token holds a line break or a NUL byte: use one line of text".into());
    }
    Ok(())
}

/// Compares two tokens in time that depends on their lengths only, never
/// on where they first differ.
fn same_token(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut diff = u64::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= u64::from(std::hint::black_box(x ^ y));
    }
    diff == 0
}

/// `now + t`, or a year from now where that overflows.
fn deadline_after(t: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(t.min(MAX_TIMEOUT))
        .or_else(|| now.checked_add(Duration::from_secs(3600)))
        .unwrap_or(now)
}

fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Fills `buf`, giving up at `deadline` however the bytes trickle in.
fn read_full(s: &mut TcpStream, buf: &mut [u8], deadline: Option<Instant>) -> Result<(), String> {
    let mut got = 0;
    while got < buf.len() {
        let left = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err("no message before the deadline".into());
                }
                Some(left)
            }
            None => None,
        };
        s.set_read_timeout(left).map_err(|e| e.to_string())?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err("the connection closed".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if timed_out(&e) => return Err("no message before the deadline".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// Reads one whole message by `deadline`: the deadline is for the message,
/// not for each read, so a peer that sends a byte at a time cannot stretch it.
fn read_msg(s: &mut TcpStream, deadline: Option<Instant>) -> Result<Msg, String> {
    let mut h = [0u8; 10];
    read_full(s, &mut h, deadline)?;
    let (kind, len) = decode_header(&h)?;
    let mut p = vec![0u8; len];
    read_full(s, &mut p, deadline).map_err(|e| format!("reading a message: {e}"))?;
    decode(kind, &p)
}

fn send(s: &mut TcpStream, m: &Msg) -> Result<(), String> {
    s.write_all(&encode(m)).map_err(|e| e.to_string())
}

/// Why the rendezvous failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// In words, with what to do.
    pub message: String,
    /// Process ranks that never arrived.
    pub missing: Vec<usize>,
}

fn fail(message: impl Into<String>) -> Failed {
    Failed {
        message: message.into(),
        missing: Vec::new(),
    }
}

/// Shared between the run and the threads that watch the other ranks.
#[derive(Debug, Default)]
pub struct Abort {
    flag: AtomicBool,
    reason: Mutex<Option<String>>,
}

impl Abort {
    /// Raises the flag, keeping the first reason.
    pub fn raise(&self, why: String) {
        let mut r = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        if r.is_none() {
            *r = Some(why);
        }
        self.flag.store(true, Ordering::SeqCst);
    }
    /// The reason, when raised.
    pub fn raised(&self) -> Option<String> {
        if self.flag.load(Ordering::SeqCst) {
            self.reason
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        } else {
            None
        }
    }
}

/// What the rendezvous gives a process.
pub struct Joined {
    /// NCCL's unique id.
    pub id: [u8; 128],
    /// NCCL ranks in all.
    pub nranks: usize,
    /// This process's first NCCL rank.
    pub first_rank: usize,
    /// Raised when another rank goes away.
    pub abort: Arc<Abort>,
    link: Link,
}

/// Where a watcher thread leaves a peer's Done message.
type DoneSlot = Arc<Mutex<Option<Msg>>>;

/// The files a run made, to remove (each only if it is still the one made).
type Made = Arc<Mutex<Vec<(PathBuf, FileId)>>>;

fn remove_made(made: &Made) {
    for (p, id) in std::mem::take(&mut *made.lock().unwrap_or_else(|e| e.into_inner())) {
        fsafe::remove_if_ours(&p, id);
    }
}

enum Link {
    TcpRoot(Vec<(usize, TcpStream, DoneSlot)>),
    TcpPeer(TcpStream),
    File(FileLink),
}

struct FileLink {
    path: PathBuf,
    run: String,
    rank: usize,
    /// Rank 0: each peer's nonce (index = rank). A peer: its own, alone.
    nonces: Vec<String>,
    made: Made,
    cleanup_key: u64,
}

/// Each process's first NCCL rank, and the NCCL ranks in all, from the
/// GPU counts of processes 0, 1, … in order.
fn offsets(ngpus: &[usize]) -> (Vec<usize>, usize) {
    let mut acc = 0;
    let first = ngpus
        .iter()
        .map(|n| {
            let f = acc;
            acc += n;
            f
        })
        .collect();
    (first, acc)
}

/// Meets the other processes. `make_id` runs on rank 0 only; `log` hears
/// about refused peers and the like.
pub fn join(
    job: &Job,
    make_id: &dyn Fn() -> Result<[u8; 128], String>,
    log: &mut dyn FnMut(String),
) -> Result<Joined, Failed> {
    if job.world == 0 || job.rank >= job.world {
        return Err(fail(format!(
            "rank {} is outside a world of {}",
            job.rank, job.world
        )));
    }
    if job.world > MAX_WORLD {
        return Err(fail(format!(
            "a world of {} processes is more than the {MAX_WORLD} the rendezvous takes",
            job.world
        )));
    }
    check_token(&job.token).map_err(fail)?;
    let deadline = deadline_after(job.timeout);
    match &job.init {
        Init::Tcp { host, port } if job.rank == 0 => {
            tcp_root(job, host, *port, deadline, make_id, log)
        }
        Init::Tcp { host, port } => tcp_peer(job, host, *port, deadline),
        Init::File { path } if job.rank == 0 => file_root(job, path, deadline, make_id, log),
        Init::File { path } => file_peer(job, path, deadline),
    }
}

/// Connections that have not said hello yet, at most this many at once: a
/// flood of idle ones pushes out the oldest, never a real rank's.
const MAX_PENDING: usize = 64;

/// How long a new connection has to send its hello.
const HELLO_WAIT: Duration = Duration::from_secs(5);

/// The longest hello payload: a token and three numbers.
const MAX_HELLO: usize = 2 + MAX_TOKEN + 12;

/// A connection that has not said hello yet.
struct Pending {
    s: TcpStream,
    addr: std::net::SocketAddr,
    buf: Vec<u8>,
    until: Instant,
}

enum Pumped {
    More,
    Got(Msg),
    Bad(String),
}

/// Reads what has come of a pending connection's hello, without blocking.
fn pump(p: &mut Pending) -> Pumped {
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
struct Notes<'a> {
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

fn tcp_root(
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
struct Lobby<'a> {
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
fn welcome(
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
fn watch_peer(rank: usize, s: &TcpStream, abort: &Arc<Abort>) -> DoneSlot {
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

/// A message's kind, in words: what is logged of a message that came at the
/// wrong time (never its contents, which may hold a token or the id).
fn kind_name(m: &Msg) -> &'static str {
    match m {
        Msg::Hello { .. } => "a hello",
        Msg::Welcome { .. } => "a welcome",
        Msg::Refused { .. } => "a refusal",
        Msg::Done { .. } => "a done message",
        Msg::Abort { .. } => "an abort",
    }
}

fn tcp_peer(job: &Job, host: &str, port: u16, deadline: Instant) -> Result<Joined, Failed> {
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
fn welcomed(s: TcpStream, id: &[u8], nranks: usize, first_rank: usize) -> Joined {
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

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The first line of a rendezvous file (format 2: named for a run).
const FILE_MAGIC: &str = "nccl-find-smoke 2";

/// A hello or done file's size bound.
const SMALL_FILE: u64 = 8192;

/// The rendezvous file's size bound for a world of `world`.
fn rendezvous_max(world: usize) -> u64 {
    4096 + 80 * world as u64
}

/// A file next to the rendezvous file, named for the run:
/// `<path>.<run>.<what>.<rank>`. The run's nonce makes it unguessable.
fn side(path: &Path, run: &str, what: &str, rank: usize) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{run}.{what}.{rank}"));
    PathBuf::from(s)
}

fn is_nonce(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `path` holds a rendezvous file an earlier run of this user left
/// (a regular file, ours, that starts like one): it may be replaced.
fn stale_rendezvous(path: &Path, world: usize) -> bool {
    let Ok(Some((bytes, _))) = fsafe::read_small(path, rendezvous_max(world)) else {
        return false;
    };
    let mine = std::fs::symlink_metadata(path)
        .ok()
        .zip(std::fs::metadata("/proc/self").ok())
        .map_or(true, |(f, me)| {
            use std::os::unix::fs::MetadataExt;
            f.uid() == me.uid()
        });
    mine && bytes.starts_with(b"nccl-find-smoke ")
}

/// Rank 0 puts `text` at `path`: a new file with an unguessable name,
/// renamed over `path` (a rename replaces a link, never writes through it).
/// `prev`: the file this run put there before, which must still be there;
/// `None`: only nothing, or an earlier run's rendezvous file, may be there.
fn publish(
    path: &Path,
    run: &str,
    text: &str,
    prev: Option<FileId>,
    world: usize,
    log: &mut dyn FnMut(String),
) -> Result<FileId, String> {
    let cannot = |e: &dyn std::fmt::Display| {
        format!(
            "cannot write {}: {e}. The rendezvous file must be in a directory every rank can write",
            path.display()
        )
    };
    match (std::fs::symlink_metadata(path), prev) {
        (Err(e), None) if e.kind() == std::io::ErrorKind::NotFound => {}
        (Ok(m), Some(id)) if m.file_type().is_file() && FileId::of(&m) == id => {}
        (Ok(_), None) if stale_rendezvous(path, world) => log(format!(
            "replaced {}: a rendezvous file an earlier run left",
            path.display()
        )),
        (Ok(m), None) => {
            return Err(format!(
                "{} already exists and is not a rendezvous file of yours ({}): it is left alone. Remove it, \
                 or choose another path",
                path.display(),
                fsafe::kind(&m)
            ))
        }
        (_, Some(_)) => {
            return Err(format!(
                "{} was removed or replaced by someone else during the rendezvous",
                path.display()
            ))
        }
        (Err(e), None) => return Err(cannot(&e)),
    }
    let tmp = side(path, run, &format!("new-{}", fsafe::nonce()), 0);
    let id = fsafe::create_new(&tmp, text.as_bytes()).map_err(|e| cannot(&e))?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        fsafe::remove_if_ours(&tmp, id);
        return Err(cannot(&e));
    }
    Ok(id)
}

fn file_root(
    job: &Job,
    path: &Path,
    deadline: Instant,
    make_id: &dyn Fn() -> Result<[u8; 128], String>,
    log: &mut dyn FnMut(String),
) -> Result<Joined, Failed> {
    let run = fsafe::nonce();
    let made: Made = Arc::default();
    // Interrupted, rank 0 removes what this run made (its peers' files
    // included), each only if it is still the file that was made.
    let key = {
        let made = made.clone();
        crate::on_interrupt(move || remove_made(&made))
    };
    let give_up = |f: Failed| {
        remove_made(&made);
        crate::forget_cleanup(key);
        f
    };
    let head = format!("{FILE_MAGIC}\n{}\n{run}\n", job.token);
    let mut at = publish(
        path,
        &run,
        &format!("{head}waiting\n"),
        None,
        job.world,
        log,
    )
    .map_err(|e| give_up(fail(e)))?;
    made.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((path.to_path_buf(), at));
    let mut arrived: Vec<Option<(usize, String)>> = vec![None; job.world];
    let mut warned = std::collections::HashSet::new();
    let mut left = job.world - 1;
    while left > 0 {
        left -= take_hellos(job, path, &run, &mut arrived, &made, &mut warned, log);
        if left == 0 {
            break;
        }
        if Instant::now() >= deadline {
            return Err(give_up(file_timed_out(job, path, &arrived)));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let id = make_id().map_err(|e| give_up(fail(e)))?;
    let (answer, nranks) = answer(&head, job.ngpus, &arrived, &id);
    let prev = at;
    at = publish(path, &run, &answer, Some(prev), job.world, log).map_err(|e| give_up(fail(e)))?;
    for m in made.lock().unwrap_or_else(|e| e.into_inner()).iter_mut() {
        if m.1 == prev {
            m.1 = at;
        }
    }
    let nonces = arrived
        .into_iter()
        .map(|a| a.map(|x| x.1).unwrap_or_default())
        .collect();
    Ok(Joined {
        id,
        nranks,
        first_rank: 0,
        abort: Arc::new(Abort::default()),
        link: Link::File(FileLink {
            path: path.to_path_buf(),
            run,
            rank: 0,
            nonces,
            made,
            cleanup_key: key,
        }),
    })
}

/// One look at the hello files of the ranks not yet arrived: the good
/// ones are taken (GPU count and nonce into `arrived`, the file into
/// `made`), the bad ones named once each. How many arrived.
fn take_hellos(
    job: &Job,
    path: &Path,
    run: &str,
    arrived: &mut [Option<(usize, String)>],
    made: &Made,
    warned: &mut std::collections::HashSet<PathBuf>,
    log: &mut dyn FnMut(String),
) -> usize {
    let mut came = 0;
    for (r, slot) in arrived.iter_mut().enumerate().skip(1) {
        if slot.is_some() {
            continue;
        }
        let f = side(path, run, "hello", r);
        let (bytes, id) = match fsafe::read_small(&f, SMALL_FILE) {
            Ok(Some(x)) => x,
            Ok(None) => continue,
            Err(e) => {
                if warned.insert(f.clone()) {
                    log(format!("ignored a hello: {e}"));
                }
                continue;
            }
        };
        let why = match hello_file(job, &bytes) {
            Hello::Good(n, nonce) => {
                *slot = Some((n, nonce));
                came += 1;
                made.lock().unwrap_or_else(|e| e.into_inner()).push((f, id));
                continue;
            }
            Hello::Partial => continue,
            Hello::Bad(why) => why,
        };
        if warned.insert(f.clone()) {
            log(format!("ignored {}: {why}", f.display()));
        }
    }
    came
}

/// What a hello file says.
enum Hello {
    /// This job's: the peer's GPU count and nonce.
    Good(usize, String),
    /// Still being written.
    Partial,
    /// Not a hello of this job, and why.
    Bad(&'static str),
}

/// Reads a hello file: `token`, GPU count, nonce, `end`, one a line.
fn hello_file(job: &Job, bytes: &[u8]) -> Hello {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    match lines[..] {
        [token, ngpus, nonce, "end"] => match ngpus.parse::<usize>() {
            _ if !same_token(token, &job.token) => Hello::Bad("it holds another job's token"),
            _ if !is_nonce(nonce) => Hello::Bad("it is not a hello file"),
            Ok(n) if (1..=1024).contains(&n) => Hello::Good(n, nonce.to_string()),
            _ => Hello::Bad("its GPU count is not a number from 1 to 1024"),
        },
        _ if !text.contains("\nend\n") && bytes.len() < 4096 => Hello::Partial,
        _ => Hello::Bad("it is not a hello file"),
    }
}

/// The failure at the deadline of a file rendezvous: who never came.
fn file_timed_out(job: &Job, path: &Path, arrived: &[Option<(usize, String)>]) -> Failed {
    let missing: Vec<usize> = (1..job.world).filter(|r| arrived[*r].is_none()).collect();
    Failed {
        message: format!(
            "the rendezvous timed out after {:.0} s: rank(s) {} never arrived at {} ({} of {} \
             processes did). Start them with the same file and token, or raise --timeout",
            job.timeout.as_secs_f64(),
            list(&missing),
            path.display(),
            job.world - missing.len(),
            job.world
        ),
        missing,
    }
}

/// Rank 0's answer in the rendezvous file, after `head`: the NCCL ranks
/// in all, the unique id, and each peer's first rank and nonce. Also the
/// NCCL ranks in all.
fn answer(
    head: &str,
    ngpus: usize,
    arrived: &[Option<(usize, String)>],
    id: &[u8; 128],
) -> (String, usize) {
    let mut counts = vec![ngpus];
    counts.extend(
        arrived
            .iter()
            .skip(1)
            .map(|a| a.as_ref().map_or(0, |x| x.0)),
    );
    let (first, nranks) = offsets(&counts);
    let mut text = format!("{head}{nranks}\n{}\n", hex(id));
    for (r, a) in arrived.iter().enumerate().skip(1) {
        if let Some((_, n)) = a {
            text.push_str(&format!("{r} {} {n}\n", first[r]));
        }
    }
    (text, nranks)
}

fn file_peer(job: &Job, path: &Path, deadline: Instant) -> Result<Joined, Failed> {
    // Can this rank write there at all? Say so now, not at the deadline.
    let probe = side(path, &fsafe::nonce(), "probe", job.rank);
    match fsafe::create_new(&probe, b"") {
        Ok(id) => {
            fsafe::remove_if_ours(&probe, id);
        }
        Err(e) => {
            return Err(fail(format!(
            "cannot write {}: {e}. The rendezvous file must be in a directory every rank can write",
            probe.display()
        )))
        }
    }
    let me = fsafe::nonce();
    let made: Made = Arc::default();
    let key = {
        let made = made.clone();
        crate::on_interrupt(move || remove_made(&made))
    };
    let result = file_peer_wait(job, path, deadline, &me, &made);
    // Joined, the hello is rank 0's to remove; failed, this rank's.
    if result.is_err() {
        remove_made(&made);
    }
    crate::forget_cleanup(key);
    result
}

fn file_peer_wait(
    job: &Job,
    path: &Path,
    deadline: Instant,
    me: &str,
    made: &Made,
) -> Result<Joined, Failed> {
    let mut other = None;
    let mut taken: Option<PathBuf> = None;
    // The run this rank said hello to, and its hello file.
    let mut greeted: Option<(String, PathBuf, FileId)> = None;
    loop {
        let got = fsafe::read_small(path, rendezvous_max(job.world))
            .map_err(|e| fail(format!("rank {}: {e}", job.rank)))?;
        if let Some((bytes, _)) = got {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            if lines.len() < 4 || lines[0] != FILE_MAGIC {
                other = Some("it is not a rendezvous file of this nccl-find version");
            } else if !same_token(lines[1], &job.token) {
                other = Some("it holds another job's token");
            } else if !is_nonce(lines[2]) {
                other = Some("it is not a rendezvous file of this nccl-find version");
            } else if lines[3] == "waiting" {
                other = None;
                let run = lines[2];
                if greeted.as_ref().map(|g| g.0.as_str()) != Some(run) {
                    greet(job, path, run, me, made, &mut greeted, &mut taken)?;
                }
            } else if greeted.as_ref().map(|g| g.0.as_str()) == Some(lines[2]) {
                if let Some((id, nranks, first_rank)) = my_place(job, &lines, me) {
                    return Ok(Joined {
                        id,
                        nranks,
                        first_rank,
                        abort: Arc::new(Abort::default()),
                        link: Link::File(FileLink {
                            path: path.to_path_buf(),
                            run: lines[2].to_string(),
                            rank: job.rank,
                            nonces: vec![me.to_string()],
                            made: made.clone(),
                            cleanup_key: 0,
                        }),
                    });
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(peer_timed_out(job, path, taken, other));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A new run of rank 0 (the one before was killed, or this is the first):
/// removes the hello this rank left the run before, if any, and says hello
/// to this one. A hello already there is `taken`, not an error.
fn greet(
    job: &Job,
    path: &Path,
    run: &str,
    me: &str,
    made: &Made,
    greeted: &mut Option<(String, PathBuf, FileId)>,
    taken: &mut Option<PathBuf>,
) -> Result<(), Failed> {
    if let Some((_, f, id)) = greeted.take() {
        fsafe::remove_if_ours(&f, id);
        made.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|m| m.1 != id);
    }
    let f = side(path, run, "hello", job.rank);
    let hello = format!("{}\n{}\n{me}\nend\n", job.token, job.ngpus);
    match fsafe::create_new(&f, hello.as_bytes()) {
        Ok(id) => {
            made.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((f.clone(), id));
            *greeted = Some((run.to_string(), f, id));
        }
        // Another process took this rank in this run, or an earlier run of
        // rank 0 left it: wait, in case rank 0 starts over, and say so at
        // the deadline.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            *taken = Some(f);
        }
        Err(e) => {
            return Err(fail(format!(
            "cannot write {}: {e}. The rendezvous file must be in a directory every rank can write",
            f.display()
        )))
        }
    }
    Ok(())
}

/// This rank's place in rank 0's answer (`lines` of the rendezvous file):
/// the unique id, the NCCL ranks in all and this rank's first one; `None`
/// while the answer does not name this rank with this rank's nonce.
fn my_place(job: &Job, lines: &[&str], me: &str) -> Option<([u8; 128], usize, usize)> {
    let (Ok(nranks), Some(id), Some(line)) = (
        lines[3].parse::<usize>(),
        lines.get(4).and_then(|l| unhex(l)),
        lines.get(5..),
    ) else {
        return None;
    };
    let mine = line.iter().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.len() == 3 && f[0] == job.rank.to_string() && f[2] == me)
            .then(|| f[1].parse::<usize>().ok())?
    });
    match (mine, id.len()) {
        (Some(first_rank), 128) => {
            let mut out = [0u8; 128];
            out.copy_from_slice(&id);
            Some((out, nranks, first_rank))
        }
        _ => None,
    }
}

/// The failure at a file peer's deadline: its hello was taken, or rank 0
/// never answered (and what was at the path instead).
fn peer_timed_out(job: &Job, path: &Path, taken: Option<PathBuf>, other: Option<&str>) -> Failed {
    if let Some(f) = taken {
        return fail(format!(
            "rank {r} waited {:.0} s for rank 0's unique id in {}, but could not say hello: {} \
             exists. Two processes were given rank {r}, or a rank 0 that was killed left it",
            job.timeout.as_secs_f64(),
            path.display(),
            f.display(),
            r = job.rank
        ));
    }
    fail(format!(
        "rank {} waited {:.0} s for rank 0's unique id in {}{}. Is rank 0 running with the same file?",
        job.rank,
        job.timeout.as_secs_f64(),
        path.display(),
        other.map(|t| format!(" ({t})")).unwrap_or_default()
    ))
}

/// A peer's outcome as rank 0 heard it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerOutcome {
    /// Process rank.
    pub rank: usize,
    /// Right, wrong elements, message; or `None` when it never reported.
    pub done: Option<(bool, u64, String)>,
}

impl Joined {
    /// Peers report their outcome; rank 0 collects everyone's (waiting
    /// until `deadline`) and cleans up the rendezvous files.
    pub fn finish(
        self,
        ok: bool,
        wrong: u64,
        message: &str,
        timeout: Duration,
    ) -> Vec<PeerOutcome> {
        let deadline = deadline_after(timeout);
        match self.link {
            Link::TcpPeer(mut s) => {
                let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
                let _ = send(
                    &mut s,
                    &Msg::Done {
                        ok,
                        wrong,
                        message: message.to_string(),
                    },
                );
                Vec::new()
            }
            Link::TcpRoot(peers) => tcp_outcomes(peers, ok, message, deadline, &self.abort),
            Link::File(f) if f.rank != 0 => {
                f.report(ok, wrong, message);
                Vec::new()
            }
            Link::File(f) => f.outcomes(deadline),
        }
    }
}

/// Rank 0 over TCP: after a failure, tells every peer to stop; then waits
/// for each peer's Done (until `deadline`, or until one goes away).
fn tcp_outcomes(
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

impl FileLink {
    /// A peer leaves its outcome in a done file, on one line.
    fn report(&self, ok: bool, wrong: u64, message: &str) {
        let one_line: String = message
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(2000)
            .collect();
        let text = format!(
            "{}\n{} {wrong} {one_line}\nend\n",
            self.nonces[0],
            if ok { "ok" } else { "fail" }
        );
        // Rank 0 removes it (and the hello) once read.
        let _ = fsafe::create_new(
            &side(&self.path, &self.run, "done", self.rank),
            text.as_bytes(),
        );
    }

    /// Rank 0 reads every peer's done file (waiting until `deadline`), then
    /// removes this run's files.
    fn outcomes(self, deadline: Instant) -> Vec<PeerOutcome> {
        let mut out = Vec::new();
        for (rank, nonce) in self.nonces.iter().enumerate().skip(1) {
            let done = self.wait_done(rank, nonce, deadline);
            out.push(PeerOutcome { rank, done });
        }
        remove_made(&self.made);
        crate::forget_cleanup(self.cleanup_key);
        out
    }

    /// Rank `rank`'s outcome from its done file, once it is there and holds
    /// the peer's nonce; `None` at the deadline, or for a file of another.
    fn wait_done(
        &self,
        rank: usize,
        nonce: &str,
        deadline: Instant,
    ) -> Option<(bool, u64, String)> {
        let p = side(&self.path, &self.run, "done", rank);
        loop {
            match fsafe::read_small(&p, SMALL_FILE) {
                Ok(Some((bytes, id))) => {
                    let t = String::from_utf8_lossy(&bytes);
                    let lines: Vec<&str> = t.lines().collect();
                    if let [n, result, "end"] = lines[..] {
                        if n != nonce {
                            return None;
                        }
                        self.made
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((p.clone(), id));
                        let mut it = result.splitn(3, ' ');
                        let (o, w, m) = (it.next(), it.next(), it.next());
                        return Some((
                            o == Some("ok"),
                            w.and_then(|w| w.parse().ok()).unwrap_or(0),
                            m.unwrap_or("").trim().to_string(),
                        ));
                    }
                }
                Ok(None) => {}
                Err(_) => return None,
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn list(v: &[usize]) -> String {
    v.iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        for m in [
            Msg::Hello {
                token: "job-7".into(),
                rank: 3,
                world: 4,
                ngpus: 2,
            },
            Msg::Welcome {
                id: vec![9; 128],
                nranks: 8,
                first_rank: 6,
            },
            Msg::Refused {
                reason: "token mismatch".into(),
            },
            Msg::Done {
                ok: false,
                wrong: 12,
                message: "12 wrong".into(),
            },
            Msg::Abort {
                reason: "rank 2 died".into(),
            },
        ] {
            let f = encode(&m);
            let (kind, len) = decode_header(f[..10].try_into().unwrap()).unwrap();
            assert_eq!(len, f.len() - 10);
            assert_eq!(decode(kind, &f[10..]).unwrap(), m);
            // Every truncation is an error, not a panic.
            for cut in 0..f.len() - 10 {
                assert!(
                    decode(kind, &f[10..10 + cut]).is_err(),
                    "{m:?} cut at {cut}"
                );
            }
        }
        assert_eq!(
            decode_header(b"GET / HTTP").unwrap_err(),
            "not an nccl-find rendezvous message (bad magic)"
        );
        assert!(decode(9, &[]).is_err());
        assert!(decode(2, &[5, 0, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 0, 0])
            .unwrap_err()
            .contains("unique id of 5 bytes"));
    }

    #[test]
    fn fuzz_seeds_are_real_frames() {
        let hello = Msg::Hello {
            token: "job-7".into(),
            rank: 3,
            world: 4,
            ngpus: 2,
        };
        assert_eq!(
            &encode(&hello)[..],
            include_bytes!("../../fuzz/seeds/rendezvous/hello")
        );
        let refused = Msg::Refused {
            reason: "token mismatch".into(),
        };
        assert_eq!(
            &encode(&refused)[..],
            include_bytes!("../../fuzz/seeds/rendezvous/refused")
        );
        let done = Msg::Done {
            ok: false,
            wrong: 12,
            message: "12 wrong!".into(),
        };
        assert_eq!(
            &encode(&done)[..],
            include_bytes!("../../fuzz/seeds/rendezvous/done")
        );
    }

    #[test]
    fn init_urls() {
        assert_eq!(
            Init::parse("tcp://127.0.0.1:29500").unwrap(),
            Init::Tcp {
                host: "127.0.0.1".into(),
                port: 29500
            }
        );
        assert_eq!(
            Init::parse("tcp://[::1]:80").unwrap(),
            Init::Tcp {
                host: "::1".into(),
                port: 80
            }
        );
        assert_eq!(
            Init::parse("file:///shared/x").unwrap(),
            Init::File {
                path: "/shared/x".into()
            }
        );
        assert!(Init::parse("tcp://host")
            .unwrap_err()
            .contains("has no port"));
        assert!(Init::parse("file://relative")
            .unwrap_err()
            .contains("absolute path"));
        assert!(Init::parse("env://").unwrap_err().contains("neither"));
    }

    #[test]
    fn offsets_follow_gpu_counts() {
        assert_eq!(offsets(&[2, 1, 3]), (vec![0, 2, 3], 6));
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "nccl-find-rdv-{name}-{}-{}",
            std::process::id(),
            fsafe::nonce()
        ));
        std::fs::create_dir(&d).unwrap();
        d
    }

    fn job(rank: usize, world: usize, token: &str, init: Init, secs: u64) -> Job {
        Job {
            rank,
            world,
            ngpus: 1,
            token: token.into(),
            init,
            timeout: Duration::from_secs(secs),
        }
    }

    fn id() -> Result<[u8; 128], String> {
        Ok([7; 128])
    }

    /// Runs every rank of a job on its own thread (one PID for all, as in
    /// a container): each rank's outcome, rank 0 first.
    fn run_job(jobs: Vec<Job>) -> Vec<Result<(usize, usize), String>> {
        let hs: Vec<_> = jobs
            .into_iter()
            .map(|j| {
                std::thread::spawn(move || {
                    let r = join(&j, &id, &mut |_| {});
                    r.map(|x| {
                        assert_eq!(x.id, [7; 128]);
                        let out = (x.nranks, x.first_rank);
                        x.finish(true, 0, "fine", Duration::from_secs(10));
                        out
                    })
                    .map_err(|f| f.message)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn ranks_sharing_a_pid_meet_through_a_file_and_leave_nothing() {
        let d = scratch("pid");
        let init = Init::File {
            path: d.join("rdv"),
        };
        let got = run_job(
            (0..3)
                .map(|r| job(r, 3, "t", init.clone(), 20))
                .rev()
                .collect(),
        );
        assert_eq!(got, vec![Ok((3, 2)), Ok((3, 1)), Ok((3, 0))]);
        assert_eq!(names(&d), Vec::<String>::new());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn planted_links_at_the_old_predictable_names_are_never_followed_or_removed() {
        let d = scratch("links");
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let pid = std::process::id();
        let planted = [
            format!("rdv.tmp{pid}"),
            format!("rdv.hello.1.tmp{pid}"),
            "rdv.hello.1".into(),
            "rdv.done.1".into(),
        ];
        for n in &planted {
            std::os::unix::fs::symlink(&victim, d.join(n)).unwrap();
        }
        let init = Init::File {
            path: d.join("rdv"),
        };
        let got = run_job(vec![
            job(0, 2, "t", init.clone(), 20),
            job(1, 2, "t", init, 20),
        ]);
        assert_eq!(got, vec![Ok((2, 0)), Ok((2, 1))]);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let mut want: Vec<String> = planted.to_vec();
        want.push("victim".into());
        want.sort();
        assert_eq!(names(&d), want);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_foreign_file_or_link_at_the_rendezvous_path_is_left_alone() {
        let d = scratch("foreign");
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for (path, what) in [(&victim, "a regular file"), (&link, "a symbolic link")] {
            let j = job(0, 2, "t", Init::File { path: path.clone() }, 20);
            let t = Instant::now();
            let e = join(&j, &id, &mut |_| {}).err().unwrap().message;
            assert!(t.elapsed() < Duration::from_secs(2));
            assert!(
                e.contains("already exists and is not a rendezvous file of yours")
                    && e.contains(what),
                "{e}"
            );
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(names(&d), ["link", "victim"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_fifo_or_a_link_to_dev_zero_at_the_rendezvous_path_ends_at_once() {
        let d = scratch("fifo");
        let fifo = d.join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let zero = d.join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let big = d.join("big");
        std::fs::write(&big, vec![b'n'; 1 << 20]).unwrap();
        for (path, says) in [
            (&fifo, "is a FIFO (named pipe), not a regular file"),
            (&zero, "is a symbolic link, not a regular file"),
            (&big, "is larger than the"),
        ] {
            let t = Instant::now();
            let j = job(1, 2, "t", Init::File { path: path.clone() }, 30);
            let e = join(&j, &id, &mut |_| {}).err().unwrap().message;
            assert!(t.elapsed() < Duration::from_secs(2), "{e}");
            assert!(e.contains(says), "{e}");
            assert!(e.contains(&path.display().to_string()), "{e}");
            // Rank 0 does not take it over either.
            let j = job(0, 2, "t", Init::File { path: path.clone() }, 30);
            let e = join(&j, &id, &mut |_| {}).err().unwrap().message;
            assert!(e.contains("is left alone"), "{e}");
        }
        assert!(std::fs::symlink_metadata(&fifo).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn files_a_killed_run_left_do_not_shut_out_a_new_one() {
        let d = scratch("stale");
        let rdv = d.join("rdv");
        let old = "0123456789abcdef0123456789abcdef";
        std::fs::write(&rdv, format!("{FILE_MAGIC}\nt\n{old}\nwaiting\n")).unwrap();
        let stale_hello = side(&rdv, old, "hello", 1);
        std::fs::write(&stale_hello, format!("t\n1\n{old}\nend\n")).unwrap();
        std::fs::write(d.join("rdv.hello.1"), "t\n1\n42\n").unwrap();
        let init = Init::File { path: rdv.clone() };
        // The peer first: it finds the dead run's file and waits.
        let peer = {
            let j = job(1, 2, "t", init.clone(), 20);
            std::thread::spawn(move || run_job(vec![j]))
        };
        std::thread::sleep(Duration::from_millis(300));
        let mut notes = Vec::new();
        let j0 = join(&job(0, 2, "t", init, 20), &id, &mut |m| notes.push(m)).unwrap();
        assert_eq!(
            j0.finish(true, 0, "", Duration::from_secs(10))[0]
                .done
                .as_ref()
                .map(|d| d.0),
            Some(true)
        );
        assert_eq!(peer.join().unwrap(), vec![Ok((2, 1))]);
        assert!(
            notes
                .iter()
                .any(|n| n.contains("a rendezvous file an earlier run left")),
            "{notes:?}"
        );
        // What the dead run left is not this run's to remove.
        assert!(stale_hello.exists() && d.join("rdv.hello.1").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_rank_that_never_comes_ends_at_the_deadline_and_only_our_files_go() {
        let d = scratch("late");
        let rdv = d.join("rdv");
        std::fs::write(d.join("theirs"), "x").unwrap();
        let t = Instant::now();
        let e = join(
            &job(0, 2, "t", Init::File { path: rdv }, 1),
            &id,
            &mut |_| {},
        )
        .err()
        .unwrap();
        assert!(t.elapsed() < Duration::from_secs(3));
        assert_eq!(e.missing, [1]);
        assert!(
            e.message.contains("rank(s) 1 never arrived at "),
            "{}",
            e.message
        );
        assert_eq!(names(&d), ["theirs"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

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

    #[test]
    fn bad_jobs_are_refused_before_anything_is_made() {
        let d = scratch("bad");
        let init = Init::File {
            path: d.join("rdv"),
        };
        let e = join(
            &job(0, MAX_WORLD + 1, "t", init.clone(), 1),
            &id,
            &mut |_| {},
        );
        assert!(e.err().unwrap().message.contains("more than the 1048576"));
        let e = join(&job(0, 2, "a\nb", init, 1), &id, &mut |_| {});
        assert!(e.err().unwrap().message.contains("line break"));
        assert_eq!(names(&d), Vec::<String>::new());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
