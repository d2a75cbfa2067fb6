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

/// Reads one message, giving up at `deadline`.
fn read_msg(s: &mut TcpStream, deadline: Option<Instant>) -> Result<Msg, String> {
    let left = deadline.map(|d| {
        d.saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    });
    s.set_read_timeout(left).map_err(|e| e.to_string())?;
    let mut h = [0u8; 10];
    s.read_exact(&mut h).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => "the connection closed".to_string(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            "no message before the deadline".to_string()
        }
        _ => e.to_string(),
    })?;
    let (kind, len) = decode_header(&h)?;
    let mut p = vec![0u8; len];
    s.read_exact(&mut p)
        .map_err(|e| format!("reading a message: {e}"))?;
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

enum Link {
    TcpRoot(Vec<(usize, TcpStream, DoneSlot)>),
    TcpPeer(TcpStream),
    File {
        path: PathBuf,
        rank: usize,
        world: usize,
    },
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
    let deadline = Instant::now() + job.timeout;
    match &job.init {
        Init::Tcp { host, port } if job.rank == 0 => {
            tcp_root(job, host, *port, deadline, make_id, log)
        }
        Init::Tcp { host, port } => tcp_peer(job, host, *port, deadline),
        Init::File { path } if job.rank == 0 => file_root(job, path, deadline, make_id, log),
        Init::File { path } => file_peer(job, path, deadline),
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
    let mut peers: Vec<(usize, usize, TcpStream)> = Vec::new();
    while peers.len() + 1 < job.world {
        if Instant::now() >= deadline {
            let here: Vec<usize> = peers.iter().map(|p| p.0).collect();
            let missing: Vec<usize> = (1..job.world).filter(|r| !here.contains(r)).collect();
            return Err(Failed {
                message: format!(
                    "the rendezvous timed out after {:.0} s: rank(s) {} never arrived at tcp://{host}:{port} \
                     ({} of {} processes did). Start them, check that they can reach this address and use the \
                     same token, or raise --timeout",
                    job.timeout.as_secs_f64(),
                    list(&missing),
                    peers.len() + 1,
                    job.world
                ),
                missing,
            });
        }
        let (mut s, addr) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => return Err(fail(format!("accepting a peer: {e}"))),
        };
        let _ = s.set_nonblocking(false);
        let hello_deadline = deadline.min(Instant::now() + Duration::from_secs(5));
        match read_msg(&mut s, Some(hello_deadline)) {
            Ok(Msg::Hello {
                token,
                rank,
                world,
                ngpus,
            }) => {
                let (rank, world, ngpus) = (rank as usize, world as usize, ngpus as usize);
                let why = if token != job.token {
                    Some(format!(
                        "token mismatch: this job's token is {:?}, the peer's {token:?}",
                        job.token
                    ))
                } else if world != job.world {
                    Some(format!(
                        "world size mismatch: this job has {}, the peer says {world}",
                        job.world
                    ))
                } else if rank == 0 || rank >= world {
                    Some(format!(
                        "rank {rank} is not a peer rank of a world of {world}"
                    ))
                } else if peers.iter().any(|p| p.0 == rank) {
                    Some(format!("rank {rank} arrived twice"))
                } else if ngpus == 0 || ngpus > 1024 {
                    Some(format!("{ngpus} GPUs is not a GPU count"))
                } else {
                    None
                };
                match why {
                    Some(why) => {
                        log(format!("refused a peer from {addr}: {why}"));
                        let _ = send(&mut s, &Msg::Refused { reason: why });
                    }
                    None => peers.push((rank, ngpus, s)),
                }
            }
            Ok(other) => log(format!(
                "refused a peer from {addr}: it sent {other:?} instead of a hello"
            )),
            Err(why) => log(format!("refused a malformed peer from {addr}: {why}")),
        }
    }
    let id = make_id().map_err(fail)?;
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
        send(&mut s, &welcome)
            .map_err(|e| fail(format!("sending rank {rank} the unique id: {e}")))?;
        // Watch the peer: its Done, or its going away.
        let slot = Arc::new(Mutex::new(None));
        if let Ok(mut r) = s.try_clone() {
            let (slot, abort) = (slot.clone(), abort.clone());
            std::thread::spawn(move || match read_msg(&mut r, None) {
                Ok(Msg::Done { ok, wrong, message }) => {
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(Msg::Done { ok, wrong, message });
                }
                Ok(m) => abort.raise(format!("rank {rank} sent {m:?} during the run")),
                Err(e) => abort.raise(format!("rank {rank}'s process went away ({e})")),
            });
        }
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

fn tcp_peer(job: &Job, host: &str, port: u16, deadline: Instant) -> Result<Joined, Failed> {
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| fail(format!("cannot resolve {host}:{port}: {e}")))?
        .collect();
    let mut last = String::from("nothing tried");
    let mut s = loop {
        if Instant::now() >= deadline {
            return Err(fail(format!(
                "rank {} could not reach rank 0 at tcp://{host}:{port} within {:.0} s ({last}). Is rank 0 \
                 running, and is that address reachable from here?",
                job.rank,
                job.timeout.as_secs_f64()
            )));
        }
        match addrs.iter().find_map(|a| {
            TcpStream::connect_timeout(a, Duration::from_millis(500))
                .map_err(|e| last = e.to_string())
                .ok()
        }) {
            Some(s) => break s,
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let hello = Msg::Hello {
        token: job.token.clone(),
        rank: job.rank as u32,
        world: job.world as u32,
        ngpus: job.ngpus as u32,
    };
    send(&mut s, &hello).map_err(|e| fail(format!("greeting rank 0: {e}")))?;
    match read_msg(&mut s, Some(deadline)) {
        Ok(Msg::Welcome {
            id,
            nranks,
            first_rank,
        }) => {
            let abort = Arc::new(Abort::default());
            if let Ok(mut r) = s.try_clone() {
                let abort = abort.clone();
                std::thread::spawn(move || match read_msg(&mut r, None) {
                    Ok(Msg::Abort { reason }) => {
                        abort.raise(format!("rank 0 stopped the job: {reason}"))
                    }
                    Ok(m) => abort.raise(format!("rank 0 sent {m:?} during the run")),
                    Err(e) => abort.raise(format!("rank 0's process went away ({e})")),
                });
            }
            let mut out = [0u8; 128];
            out.copy_from_slice(&id);
            Ok(Joined {
                id: out,
                nranks: nranks as usize,
                first_rank: first_rank as usize,
                abort,
                link: Link::TcpPeer(s),
            })
        }
        Ok(Msg::Refused { reason }) => {
            Err(fail(format!("rank 0 refused rank {}: {reason}", job.rank)))
        }
        Ok(m) => Err(fail(format!(
            "rank 0 answered {m:?} instead of the unique id"
        ))),
        Err(e) => Err(fail(format!("waiting for rank 0's unique id: {e}"))),
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

/// Writes a file atomically (temp file, then rename).
fn write_atomic(path: &Path, text: &str) -> Result<(), String> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!(
                "cannot write {}: {e}. The rendezvous file must be in a directory every rank can write",
                path.display()
            )
        })
}

fn side(path: &Path, what: &str, rank: usize) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{what}.{rank}"));
    PathBuf::from(s)
}

/// A fresh random-enough nonce: time, pid and an address.
fn nonce() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let x = 0u8;
    t ^ (u64::from(std::process::id()) << 32) ^ (&x as *const u8 as u64)
}

fn file_root(
    job: &Job,
    path: &Path,
    deadline: Instant,
    make_id: &dyn Fn() -> Result<[u8; 128], String>,
    log: &mut dyn FnMut(String),
) -> Result<Joined, Failed> {
    let _ = std::fs::remove_file(path);
    // Interrupted, rank 0 removes the job's files (its peers' included).
    let (p, w) = (path.to_path_buf(), job.world);
    super::on_interrupt(move || cleanup(&p, w));
    let mut arrived: Vec<Option<(usize, String)>> = vec![None; job.world];
    let mut warned = std::collections::HashSet::new();
    loop {
        for (r, slot) in arrived.iter_mut().enumerate().skip(1) {
            if slot.is_some() {
                continue;
            }
            let f = side(path, "hello", r);
            let Ok(text) = std::fs::read_to_string(&f) else {
                continue;
            };
            let lines: Vec<&str> = text.lines().collect();
            match lines[..] {
                [token, ngpus, nonce] if token == job.token => match ngpus.parse::<usize>() {
                    Ok(n) if (1..=1024).contains(&n) => *slot = Some((n, nonce.to_string())),
                    _ => {
                        if warned.insert(f.clone()) {
                            log(format!(
                                "ignored {}: {ngpus:?} is not a GPU count",
                                f.display()
                            ));
                        }
                    }
                },
                [token, ..] => {
                    if warned.insert(f.clone()) {
                        log(format!(
                            "ignored {}: it holds another job's token ({token:?})",
                            f.display()
                        ));
                    }
                }
                _ => {
                    if warned.insert(f.clone()) {
                        log(format!("ignored {}: it is not a hello file", f.display()));
                    }
                }
            }
        }
        if arrived.iter().skip(1).all(Option::is_some) {
            break;
        }
        if Instant::now() >= deadline {
            cleanup(path, job.world);
            let missing: Vec<usize> = (1..job.world).filter(|r| arrived[*r].is_none()).collect();
            return Err(Failed {
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
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let id = make_id().map_err(fail)?;
    let mut counts = vec![job.ngpus];
    counts.extend(
        arrived
            .iter()
            .skip(1)
            .map(|a| a.as_ref().map_or(0, |x| x.0)),
    );
    let (first, nranks) = offsets(&counts);
    let mut text = format!("nccl-find-smoke 1\n{}\n{nranks}\n{}\n", job.token, hex(&id));
    for (r, a) in arrived.iter().enumerate().skip(1) {
        if let Some((_, n)) = a {
            text.push_str(&format!("{r} {} {n}\n", first[r]));
        }
    }
    write_atomic(path, &text).map_err(fail)?;
    Ok(Joined {
        id,
        nranks,
        first_rank: 0,
        abort: Arc::new(Abort::default()),
        link: Link::File {
            path: path.to_path_buf(),
            rank: 0,
            world: job.world,
        },
    })
}

fn file_peer(job: &Job, path: &Path, deadline: Instant) -> Result<Joined, Failed> {
    let me = nonce().to_string();
    let hello = side(path, "hello", job.rank);
    write_atomic(&hello, &format!("{}\n{}\n{me}\n", job.token, job.ngpus)).map_err(fail)?;
    let key = {
        let hello = hello.clone();
        super::on_interrupt(move || {
            let _ = std::fs::remove_file(&hello);
        })
    };
    let result = file_peer_wait(job, path, deadline, &me);
    super::forget_cleanup(key);
    if result.is_err() {
        let _ = std::fs::remove_file(&hello);
    }
    result
}

fn file_peer_wait(job: &Job, path: &Path, deadline: Instant, me: &str) -> Result<Joined, Failed> {
    let mut other_token = None;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            let lines: Vec<&str> = text.lines().collect();
            if lines.len() >= 4 && lines[0] == "nccl-find-smoke 1" {
                if lines[1] != job.token {
                    other_token = Some(lines[1].to_string());
                } else if let (Ok(nranks), Some(id)) = (lines[2].parse::<usize>(), unhex(lines[3]))
                {
                    let mine = lines[4..].iter().find_map(|l| {
                        let f: Vec<&str> = l.split(' ').collect();
                        (f.len() == 3 && f[0] == job.rank.to_string() && f[2] == me)
                            .then(|| f[1].parse::<usize>().ok())?
                    });
                    if let (Some(first_rank), 128) = (mine, id.len()) {
                        let mut out = [0u8; 128];
                        out.copy_from_slice(&id);
                        return Ok(Joined {
                            id: out,
                            nranks,
                            first_rank,
                            abort: Arc::new(Abort::default()),
                            link: Link::File {
                                path: path.to_path_buf(),
                                rank: job.rank,
                                world: job.world,
                            },
                        });
                    }
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(fail(format!(
                "rank {} waited {:.0} s for rank 0's unique id in {}{}. Is rank 0 running with the same file?",
                job.rank,
                job.timeout.as_secs_f64(),
                path.display(),
                other_token.map(|t| format!(" (it holds another job's token, {t:?})")).unwrap_or_default()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
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
        let deadline = Instant::now() + timeout;
        match self.link {
            Link::TcpPeer(mut s) => {
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
            Link::TcpRoot(peers) => {
                let mut out = Vec::new();
                for (rank, mut s, slot) in peers {
                    if !ok {
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
                            Some(Msg::Done { ok, wrong, message }) => {
                                break Some((ok, wrong, message))
                            }
                            _ if Instant::now() >= deadline || self.abort.raised().is_some() => {
                                break None
                            }
                            _ => std::thread::sleep(Duration::from_millis(10)),
                        }
                    };
                    out.push(PeerOutcome { rank, done });
                }
                out
            }
            Link::File { path, rank, .. } if rank != 0 => {
                let text = format!("{} {wrong} {message}\n", if ok { "ok" } else { "fail" });
                let _ = write_atomic(&side(&path, "done", rank), &text);
                Vec::new()
            }
            Link::File { path, world, .. } => {
                let mut out = Vec::new();
                for rank in 1..world {
                    let f = side(&path, "done", rank);
                    let done = loop {
                        if let Ok(t) = std::fs::read_to_string(&f) {
                            let mut it = t.splitn(3, ' ');
                            if let (Some(o), Some(w), m) = (it.next(), it.next(), it.next()) {
                                break Some((
                                    o == "ok",
                                    w.parse().unwrap_or(0),
                                    m.unwrap_or("").trim().to_string(),
                                ));
                            }
                        }
                        if Instant::now() >= deadline {
                            break None;
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    };
                    out.push(PeerOutcome { rank, done });
                }
                cleanup(&path, world);
                out
            }
        }
    }
}

/// Removes the rendezvous files of a job.
fn cleanup(path: &Path, world: usize) {
    let _ = std::fs::remove_file(path);
    for r in 1..world {
        let _ = std::fs::remove_file(side(path, "hello", r));
        let _ = std::fs::remove_file(side(path, "done", r));
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
}
