//! PMI-1 over the socket a launcher leaves open in `PMI_FD`: Hydra's
//! `mpiexec` (MPICH, Intel MPI, MVAPICH) and Slurm's `srun --mpi=pmi2`.
//! Hydra gives each process `PMI_FD`, `PMI_RANK`, `PMI_SIZE`,
//! `MPI_LOCALRANKID` and `MPI_LOCALNRANKS`; srun gives `PMI_FD`,
//! `PMI_RANK`, `PMI_SIZE` and `SLURM_LOCALID`.
//!
//! The wire needs no library: one line per request and one per reply, each
//! a list of space-separated `key=value` attributes, the first `cmd=…`:
//!
//! ```text
//! cmd=init pmi_version=1 pmi_subversion=1   -> cmd=response_to_init … rc=0
//! cmd=get_maxes                             -> cmd=maxes … keylen_max=64 vallen_max=1024
//! cmd=get_my_kvsname                        -> cmd=my_kvsname … kvsname=K
//! cmd=put kvsname=K key=k value=v           -> cmd=put_result rc=0
//! cmd=barrier_in                            -> cmd=barrier_out
//! cmd=get kvsname=K key=k                   -> cmd=get_result rc=0 value=v
//! cmd=finalize                              -> cmd=finalize_ack
//! ```
//!
//! What the real servers do, and this module relies on:
//! - The attributes come in any order (MPICH puts `rc` first, Intel MPI
//!   last), and `rc` may be missing (Intel MPI leaves it out of most
//!   replies): a missing `rc` is success, as MPICH's own client reads it.
//! - A key that is not there: `cmd=get_result rc=1` (MPICH 5, Slurm) or
//!   `rc=-1 msg=… value=unknown` (Intel MPI): any non-zero `rc` is a failure.
//! - Keys may hold letters, digits, `_`, `-` and `/`; keys starting `PMI_`
//!   are the server's. The store is one per job, shared by every rank, so
//!   each key is prefixed with the rank that puts it (`3/nccl-find/hello/3`).
//! - Values are text without spaces: ours are hex. Slurm reads each request
//!   with one 1024-byte `read`, so every request line is at most 1024 bytes,
//!   sent with one write, and the next request waits for the reply. A value
//!   longer than a line takes (or than the server's `vallen_max`) is split:
//!   its first part reads `PARTS:HEX`, the others lie under `KEY/1`, `KEY/2`…
//! - Hydra's proxy kills the whole job when a process that spoke PMI closes
//!   its socket without `cmd=finalize`: every exit goes through
//!   [`Kv::close`], which finalizes.
//! - A rank that never speaks PMI (it exited early, or is another program)
//!   leaves the barrier waiting: PMI-1 cannot say which rank is missing, so
//!   the barrier gives up at the deadline and says what to check.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::job::Exchange;
use crate::kv::{Connect, Kv};
use crate::launch::{need, optional, Backend, LaunchEnv, Plan};
use crate::words::{fail, hex, printable, unhex, Failed};

/// A launcher that leaves a PMI-1 socket open in `PMI_FD`.
pub(crate) const PMI1: Backend = Backend {
    id: "pmi1",
    launcher: "Hydra's mpiexec (MPICH, Intel MPI, MVAPICH), or srun --mpi=pmi2",
    recognised_by: "PMI_FD, PMI_RANK, PMI_SIZE (local rank: MPI_LOCALRANKID, else SLURM_LOCALID)",
    carries:
        "the launcher's PMI-1 key-value store and barrier over the socket in PMI_FD, values in hex",
    never_came:
        "PMI-1 cannot name them: the barrier gives up at the deadline, saying what to check",
    detect,
};

/// The launcher, in words, as the report names it.
const HYDRA: &str = "mpiexec (Hydra)";
const SRUN: &str = "srun --mpi=pmi2";
const OTHER: &str = "a PMI-1 launcher (PMI_FD)";

/// The longest request line, newline included: Slurm reads a request with
/// one read of this size, and MPICH's client never sends longer lines.
const MAX_REQUEST: usize = 1024;

/// The longest reply line we read.
const MAX_REPLY: usize = 64 * 1024;

/// The longest value we put or accept, in bytes (before hex).
const MAX_VALUE: usize = 64 * 1024;

/// The most parts one value is split into.
const MAX_PARTS: usize = 9999;

/// The least room for a value a server must leave on a line.
const MIN_ROOM: usize = 32;

/// Time a put, get or finalize may take past the deadline: the server
/// answers them at once, so this only bounds a server that hangs.
const CALL_GRACE: Duration = Duration::from_secs(10);

/// What to do instead, when the launcher's socket cannot be used.
const INSTEAD: &str =
    "Start nccl-find directly under the launcher, or pass --rank, --world-size and \
                       --init tcp://HOST:PORT";

fn detect(env: &LaunchEnv) -> Option<Result<Plan, String>> {
    if !env.has("PMI_FD") {
        return None;
    }
    Some(plan(env))
}

fn plan(env: &LaunchEnv) -> Result<Plan, String> {
    let launcher = if env.has("MPI_LOCALRANKID") {
        HYDRA
    } else if env.has("SLURM_LOCALID") || env.has("SLURM_STEP_ID") {
        SRUN
    } else {
        OTHER
    };
    let mut from = Vec::new();
    let fd = need(env, launcher, "PMI_FD", &mut from)?;
    let fd = i32::try_from(fd)
        .ok()
        .filter(|fd| *fd > 2)
        .ok_or_else(|| {
            format!(
                "{launcher}: PMI_FD={fd} cannot be the launcher's socket (0, 1 and 2 are standard input, \
                 output and error). {INSTEAD}"
            )
        })?;
    let rank = need(env, launcher, "PMI_RANK", &mut from)?;
    let world = need(env, launcher, "PMI_SIZE", &mut from)?;
    let local_rank = optional(env, &["MPI_LOCALRANKID", "SLURM_LOCALID"], &mut from)?;
    Ok(Plan {
        backend: PMI1.id,
        launcher,
        rank,
        world,
        local_rank,
        exchange: Exchange::Launcher(Arc::new(Pmi1 {
            fd,
            launcher,
            taken: AtomicBool::new(false),
        })),
        token: None,
        from,
        origin: None,
    })
}

/// The socket in `PMI_FD`, not yet taken.
#[derive(Debug)]
struct Pmi1 {
    fd: i32,
    launcher: &'static str,
    /// Set when [`Connect::connect`] takes the socket: it is taken once.
    taken: AtomicBool,
}

impl Connect for Pmi1 {
    fn connect(&self, rank: usize, world: usize, deadline: Instant) -> Result<Box<dyn Kv>, String> {
        if self.taken.swap(true, Ordering::SeqCst) {
            return Err(format!(
                "PMI_FD={} was already used by this process",
                self.fd
            ));
        }
        let sock = take(self.fd)?;
        // Reads and writes wait (each with its own timeout), whatever the
        // launcher left set.
        sock.set_nonblocking(false)
            .map_err(|e| format!("PMI_FD={} cannot be used: {e}", self.fd))?;
        Ok(Box::new(Session::start(
            sock, self.fd, rank, world, deadline,
        )?))
    }

    fn describe(&self) -> String {
        format!("PMI-1 on fd {}", self.fd)
    }

    fn launcher(&self) -> &'static str {
        self.launcher
    }
}

/// Takes the socket in `fd`, once it is known to be an open socket.
fn take(fd: i32) -> Result<UnixStream, String> {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::FileTypeExt;
    if !std::path::Path::new("/proc/self/fd").is_dir() {
        return Err(format!(
            "PMI_FD={fd} cannot be checked (no /proc/self/fd), so it is left alone. {INSTEAD}"
        ));
    }
    let kind = match std::fs::metadata(format!("/proc/self/fd/{fd}")) {
        Ok(m) if m.file_type().is_socket() => None,
        Ok(m) if m.is_file() => Some("a file"),
        Ok(m) if m.is_dir() => Some("a directory"),
        Ok(m) if m.file_type().is_fifo() => Some("a pipe"),
        Ok(_) => Some("a device"),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(format!(
                "PMI_FD={fd} is not open in this process: the launcher's socket is gone (a program between \
                 the launcher and nccl-find closed it, or the variable was set by hand). {INSTEAD}"
            ))
        }
        Err(e) => return Err(format!("PMI_FD={fd} cannot be checked: {e}. {INSTEAD}")),
    };
    if let Some(kind) = kind {
        return Err(format!(
            "PMI_FD={fd} is {kind}, not the launcher's socket. {INSTEAD}"
        ));
    }
    // SAFETY: `fd` is open in this process and is a socket (checked just
    // above through /proc/self/fd). It was inherited from the launcher for
    // this process's PMI client, which is us: nothing else in this process
    // reads, writes or closes it, and `Pmi1::taken` makes sure it is taken
    // once, so the stream owns it alone and closes it when dropped.
    Ok(unsafe { UnixStream::from_raw_fd(fd) })
}

/// Why a request got no good answer.
#[derive(Debug, PartialEq, Eq)]
enum WireError {
    /// Nothing came by the time given.
    Timeout,
    /// The server closed the socket.
    Closed,
    /// Anything else, in words.
    Other(String),
}

/// A reply's attributes, in the order they came (`cmd` included).
#[derive(Debug, PartialEq, Eq)]
struct Reply(Vec<(String, Option<String>)>);

impl Reply {
    /// The first attribute named `key` that has a value.
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, v)| k == key && v.is_some())
            .and_then(|(_, v)| v.as_deref())
    }
}

/// Reads one reply line into its attributes. The line comes from outside:
/// anything malformed is an error quoting it (escaped), never a panic.
fn parse_reply(line: &[u8]) -> Result<Reply, String> {
    let text = std::str::from_utf8(line).map_err(|_| {
        format!(
            "the PMI server sent a line that is not text: {}",
            printable(&String::from_utf8_lossy(line), 200)
        )
    })?;
    let mut attrs = Vec::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let (k, v) = match word.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (word, None),
        };
        if k.is_empty()
            || !k
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'/')
        {
            return Err(format!(
                "the PMI server sent a malformed line: {}",
                printable(text, 200)
            ));
        }
        attrs.push((k.to_string(), v));
    }
    match attrs.first() {
        Some((k, Some(_))) if k == "cmd" => Ok(Reply(attrs)),
        _ => Err(format!(
            "the PMI server sent a line that is not a reply (no cmd= first): {}",
            printable(text, 200)
        )),
    }
}

/// Checks that `reply` answers `request` (its `cmd` is `expect`, its `rc`
/// is 0 or missing).
fn check_reply(reply: &Reply, request: &str, expect: &str) -> Result<(), String> {
    let cmd = reply.get("cmd").unwrap_or_default();
    if cmd != expect {
        return Err(format!(
            "the PMI server answered cmd={request} with cmd={}, not cmd={expect}",
            printable(cmd, 60)
        ));
    }
    let rc = match reply.get("rc") {
        None => 0,
        Some(rc) => rc.parse::<i64>().map_err(|_| {
            format!(
                "the PMI server answered cmd={request} with rc={}, not a number",
                printable(rc, 40)
            )
        })?,
    };
    if rc != 0 {
        let why = reply
            .get("msg")
            .or_else(|| reply.get("errmsg"))
            .map(|m| format!(": {}", printable(m, 200)))
            .unwrap_or_default();
        return Err(format!(
            "the PMI server refused cmd={request} (rc={rc}){why}"
        ));
    }
    Ok(())
}

/// Whether `s` may stand as a value on a request line: printable ASCII
/// without spaces, `=` or backslashes.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'=' && b != b'\\')
}

/// Whether `s` may be a key: letters, digits, `_`, `-`, `/`.
fn is_key(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'/')
}

/// A number from a reply, within reason.
fn reply_number(reply: &Reply, key: &str, what: &str) -> Result<usize, String> {
    let v = reply
        .get(key)
        .ok_or_else(|| format!("the PMI server's answer to cmd={what} has no {key}"))?;
    v.parse::<usize>()
        .ok()
        .filter(|n| *n <= 1 << 24)
        .ok_or_else(|| {
            format!(
                "the PMI server's answer to cmd={what} has {key}={}, not a number",
                printable(v, 40)
            )
        })
}

/// One rank's PMI-1 conversation with its server.
struct Session {
    sock: UnixStream,
    fd: i32,
    /// Bytes read past the last line.
    pending: Vec<u8>,
    /// The job's key-value space.
    kvs: String,
    keylen_max: usize,
    vallen_max: usize,
    rank: usize,
    world: usize,
    /// The last deadline the algorithm gave.
    deadline: Instant,
    /// A request went unanswered: the next line read might be its late
    /// reply, so no further request is made.
    broken: bool,
    finalized: bool,
}

impl Session {
    /// Says hello: `init`, `get_maxes`, `get_my_kvsname`.
    fn start(
        sock: UnixStream,
        fd: i32,
        rank: usize,
        world: usize,
        deadline: Instant,
    ) -> Result<Session, String> {
        let mut s = Session {
            sock,
            fd,
            pending: Vec::new(),
            kvs: String::new(),
            keylen_max: 0,
            vallen_max: 0,
            rank,
            world,
            deadline,
            broken: false,
            finalized: false,
        };
        let until = s.call_until();
        let init = s.call(
            "init pmi_version=1 pmi_subversion=1",
            "response_to_init",
            until,
        )?;
        if let Some(v) = init.get("pmi_version").filter(|v| *v != "1") {
            return Err(format!(
                "the PMI server on fd {fd} speaks PMI version {}, not 1",
                printable(v, 20)
            ));
        }
        let maxes = s.call("get_maxes", "maxes", until)?;
        s.keylen_max = reply_number(&maxes, "keylen_max", "get_maxes")?;
        s.vallen_max = reply_number(&maxes, "vallen_max", "get_maxes")?;
        let name = s.call("get_my_kvsname", "my_kvsname", until)?;
        let kvs = name
            .get("kvsname")
            .ok_or("the PMI server's answer to cmd=get_my_kvsname has no kvsname")?;
        if !is_token(kvs) || kvs.len() > 256 {
            return Err(format!(
                "the PMI server's key-value space is named {}: not a name this client can send back",
                printable(kvs, 60)
            ));
        }
        s.kvs = kvs.to_string();
        Ok(s)
    }

    /// Until when a put or get may wait: the deadline, or a little past it.
    fn call_until(&self) -> Instant {
        let soon = Instant::now() + CALL_GRACE;
        soon.max(self.deadline)
    }

    /// Sends `cmd=<request>` and reads its reply, `cmd=<expect>`, checked.
    fn call(&mut self, request: &str, expect: &str, until: Instant) -> Result<Reply, String> {
        let name = request.split(' ').next().unwrap_or_default();
        self.exchange(request, until)
            .map_err(|e| match e {
                WireError::Timeout => format!(
                    "the PMI server on fd {} did not answer cmd={name} in time",
                    self.fd
                ),
                WireError::Closed => self.closed(),
                WireError::Other(m) => m,
            })
            .and_then(|r| check_reply(&r, name, expect).map(|()| r))
    }

    fn closed(&self) -> String {
        format!(
            "the PMI server closed fd {} (the launcher ended the job, or another program in this job \
             already used and finalized PMI_FD)",
            self.fd
        )
    }

    /// One request line out, one reply line in.
    fn exchange(&mut self, request: &str, until: Instant) -> Result<Reply, WireError> {
        if self.broken {
            return Err(WireError::Other(format!(
                "an earlier request to the PMI server on fd {} went unanswered",
                self.fd
            )));
        }
        let line = format!("cmd={request}\n");
        if line.len() > MAX_REQUEST {
            return Err(WireError::Other(format!(
                "a PMI request of {} bytes is longer than the {MAX_REQUEST} a line may take",
                line.len()
            )));
        }
        self.broken = true;
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(WireError::Timeout);
        }
        self.sock
            .set_write_timeout(Some(left))
            .map_err(|e| WireError::Other(format!("cannot use fd {}: {e}", self.fd)))?;
        match self.sock.write_all(line.as_bytes()) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(WireError::Timeout)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::NotConnected
                ) =>
            {
                return Err(WireError::Closed)
            }
            Err(e) => {
                return Err(WireError::Other(format!(
                    "cannot write to the PMI server on fd {}: {e}",
                    self.fd
                )))
            }
        }
        let got = self.read_line(until)?;
        self.broken = false;
        parse_reply(&got).map_err(WireError::Other)
    }

    /// The next line from the server (without its newline), by `until`, at
    /// most [`MAX_REPLY`] bytes.
    fn read_line(&mut self, until: Instant) -> Result<Vec<u8>, WireError> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(at) = self.pending.iter().position(|b| *b == b'\n') {
                let mut line: Vec<u8> = self.pending.drain(..=at).collect();
                line.pop();
                return Ok(line);
            }
            if self.pending.len() > MAX_REPLY {
                return Err(WireError::Other(format!(
                    "the PMI server on fd {} sent a line longer than {} KiB",
                    self.fd,
                    MAX_REPLY / 1024
                )));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(WireError::Timeout);
            }
            self.sock
                .set_read_timeout(Some(left))
                .map_err(|e| WireError::Other(format!("cannot use fd {}: {e}", self.fd)))?;
            match self.sock.read(&mut chunk) {
                Ok(0) => return Err(WireError::Closed),
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(WireError::Timeout)
                }
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Err(WireError::Closed),
                Err(e) => {
                    return Err(WireError::Other(format!(
                        "cannot read from the PMI server on fd {}: {e}",
                        self.fd
                    )))
                }
            }
        }
    }

    /// This rank's name for `key` in the job's shared store.
    fn wire_key(&self, rank: usize, key: &str) -> Result<String, String> {
        if !is_key(key) {
            return Err(format!("{} cannot be a PMI key", printable(key, 60)));
        }
        Ok(format!("{rank}/{key}"))
    }

    /// Checks a key against the server's `keylen_max`.
    fn fits(&self, key: &str) -> Result<(), String> {
        if key.len() >= self.keylen_max {
            return Err(format!(
                "the key {key} is {} bytes long; the PMI server takes keys shorter than {} (keylen_max)",
                key.len(),
                self.keylen_max
            ));
        }
        Ok(())
    }

    /// The room for a value on a put line for a key of `key_len` bytes.
    fn room(&self, key_len: usize) -> Result<usize, String> {
        let around = "cmd=put kvsname= key= value=\n".len() + self.kvs.len() + key_len;
        let room = self
            .vallen_max
            .saturating_sub(1)
            .min(MAX_REQUEST.saturating_sub(around));
        if room < MIN_ROOM {
            return Err(format!(
                "the PMI server leaves {room} bytes for a value (vallen_max={}, kvsname {} bytes); \
                 {MIN_ROOM} are needed",
                self.vallen_max,
                self.kvs.len()
            ));
        }
        Ok(room)
    }

    fn put_one(&mut self, key: &str, value: &str) -> Result<(), String> {
        self.fits(key)?;
        let until = self.call_until();
        let request = format!("put kvsname={} key={key} value={value}", self.kvs);
        self.call(&request, "put_result", until).map(|_| ())
    }

    fn get_one(&mut self, key: &str) -> Result<String, String> {
        self.fits(key)?;
        let until = self.call_until();
        let request = format!("get kvsname={} key={key}", self.kvs);
        let reply = self.call(&request, "get_result", until).map_err(|e| {
            if e.starts_with("the PMI server refused") {
                format!("{e}: no {key} in the job's store")
            } else {
                e
            }
        })?;
        reply
            .get("value")
            .map(str::to_string)
            .ok_or_else(|| format!("the PMI server's answer to cmd=get of {key} has no value"))
    }
}

impl Kv for Session {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        let wk = self.wire_key(self.rank, key)?;
        if value.is_empty() || value.len() > MAX_VALUE {
            return Err(format!(
                "a value of {} bytes for {key}: PMI takes 1 to {MAX_VALUE}",
                value.len()
            ));
        }
        let text = hex(value);
        // Room on the line for the longest part's key (`KEY/9999`).
        let room = self.room(wk.len() + 5)?;
        if text.len() <= room {
            return self.put_one(&wk, &text);
        }
        // The first part carries `PARTS:`; a part is at most `room - 5`.
        let each = room - 5;
        let parts = text.len().div_ceil(each);
        if parts > MAX_PARTS {
            return Err(format!("{key} is too long for this PMI server"));
        }
        for (i, part) in text.as_bytes().chunks(each).enumerate() {
            let part = std::str::from_utf8(part).unwrap_or_default();
            if i == 0 {
                self.put_one(&wk, &format!("{parts}:{part}"))?;
            } else {
                self.put_one(&format!("{wk}/{i}"), part)?;
            }
        }
        Ok(())
    }

    fn fence(&mut self, deadline: Instant) -> Result<(), Failed> {
        self.deadline = deadline;
        match self.exchange("barrier_in", deadline) {
            Ok(r) => check_reply(&r, "barrier_in", "barrier_out").map_err(fail),
            Err(WireError::Timeout) => Err(fail(format!(
                "the PMI barrier did not complete by the deadline: not all {} processes reached it. A rank \
                 that exited early, failed to start, or runs another program never does (PMI-1 cannot say \
                 which). Check every rank's output, or raise --timeout",
                self.world
            ))),
            Err(WireError::Closed) => Err(fail(self.closed())),
            Err(WireError::Other(m)) => Err(fail(m)),
        }
    }

    fn get(&mut self, from: usize, key: &str) -> Result<Vec<u8>, String> {
        let wk = self.wire_key(from, key)?;
        let first = self.get_one(&wk)?;
        let bad = || format!("rank {from}'s {key} in the PMI store is not ours (not hex)");
        let text = match first.split_once(':') {
            None => first,
            Some((n, rest)) => {
                let parts = n
                    .parse::<usize>()
                    .ok()
                    .filter(|p| (2..=MAX_PARTS).contains(p))
                    .ok_or_else(bad)?;
                let mut text = rest.to_string();
                for i in 1..parts {
                    text.push_str(&self.get_one(&format!("{wk}/{i}"))?);
                    if text.len() > 2 * MAX_VALUE {
                        return Err(bad());
                    }
                }
                text
            }
        };
        unhex(&text).ok_or_else(bad)
    }

    fn close(&mut self, until: Instant) {
        if self.finalized {
            return;
        }
        self.finalized = true;
        // A barrier may still be waiting for its answer: finalize anyway,
        // skipping a late barrier_out, for a short while only.
        self.broken = false;
        let until = until.min(Instant::now() + Duration::from_secs(2));
        let line = b"cmd=finalize\n";
        let _ = self.sock.set_write_timeout(Some(Duration::from_secs(2)));
        if self.sock.write_all(line).is_err() {
            return;
        }
        for _ in 0..4 {
            match self.read_line(until).map(|l| parse_reply(&l)) {
                Ok(Ok(r)) if r.get("cmd") == Some("finalize_ack") => return,
                Ok(_) => {}
                Err(_) => return,
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.close(Instant::now() + Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launchers::detect;
    use std::io::{BufRead, BufReader};
    use std::os::fd::{AsRawFd, IntoRawFd};
    use std::sync::Mutex;

    fn hydra_env(rank: &'static str) -> Vec<(&'static str, &'static str)> {
        vec![
            ("PMI_FD", "11"),
            ("PMI_RANK", rank),
            ("PMI_SIZE", "4"),
            ("MPI_LOCALRANKID", rank),
            ("MPI_LOCALNRANKS", "4"),
            ("PMI_HOSTNAME", "node1"),
        ]
    }

    #[test]
    fn hydra_is_recognised_by_pmi_fd() {
        let p = detect(&LaunchEnv::from_pairs(&hydra_env("2")))
            .unwrap()
            .unwrap();
        assert_eq!(
            (p.backend, p.launcher, p.rank, p.world, p.local_rank),
            ("pmi1", "mpiexec (Hydra)", 2, 4, Some(2))
        );
        assert_eq!(
            p.from,
            ["PMI_FD", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"]
        );
        assert_eq!(p.exchange.describe(), "PMI-1 on fd 11");
        assert_eq!(p.token, None);
        match &p.exchange {
            Exchange::Launcher(c) => assert_eq!(c.launcher(), "mpiexec (Hydra)"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn srun_gives_its_local_rank() {
        let env = LaunchEnv::from_pairs(&[
            ("PMI_FD", "7"),
            ("PMI_RANK", "5"),
            ("PMI_SIZE", "8"),
            ("PMI_JOBID", "1234.0"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_STEP_ID", "0"),
        ]);
        let p = detect(&env).unwrap().unwrap();
        assert_eq!(
            (p.backend, p.launcher, p.rank, p.world, p.local_rank),
            ("pmi1", "srun --mpi=pmi2", 5, 8, Some(1))
        );
        assert_eq!(p.from, ["PMI_FD", "PMI_RANK", "PMI_SIZE", "SLURM_LOCALID"]);
        // Without any launcher's own variable, and without a local rank.
        let env = LaunchEnv::from_pairs(&[("PMI_FD", "7"), ("PMI_RANK", "0"), ("PMI_SIZE", "2")]);
        let p = detect(&env).unwrap().unwrap();
        assert_eq!(
            (p.launcher, p.local_rank),
            ("a PMI-1 launcher (PMI_FD)", None)
        );
        // PMI_RANK without PMI_FD is not this launcher.
        let env = LaunchEnv::from_pairs(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")]);
        assert!(detect(&env).unwrap().is_none());
    }

    #[test]
    fn a_half_set_environment_says_what_is_missing() {
        let env = LaunchEnv::from_pairs(&[
            ("PMI_FD", "11"),
            ("PMI_SIZE", "4"),
            ("MPI_LOCALRANKID", "0"),
        ]);
        assert_eq!(
            detect(&env).unwrap_err(),
            "mpiexec (Hydra): PMI_RANK is not set, though PMI_FD are: the launcher's environment is half \
             set. Start every process with the launcher, or pass --rank, --world-size and --init \
             tcp://HOST:PORT"
        );
        let env = LaunchEnv::from_pairs(&[("PMI_FD", "11"), ("PMI_RANK", "0")]);
        assert_eq!(
            detect(&env).unwrap_err(),
            "a PMI-1 launcher (PMI_FD): PMI_SIZE is not set, though PMI_FD, PMI_RANK are: the launcher's \
             environment is half set. Start every process with the launcher, or pass --rank, --world-size \
             and --init tcp://HOST:PORT"
        );
        let env = LaunchEnv::from_pairs(&[
            ("PMI_FD", "sock\u{1b}[2J"),
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "2"),
        ]);
        assert_eq!(
            detect(&env).unwrap_err(),
            "a PMI-1 launcher (PMI_FD): PMI_FD=\"sock\\u{1b}[2J\" is not a number. Pass --rank, --world-size \
             and --init tcp://HOST:PORT instead"
        );
        for fd in ["1", "4294967296"] {
            let env =
                LaunchEnv::from_pairs(&[("PMI_FD", fd), ("PMI_RANK", "0"), ("PMI_SIZE", "2")]);
            assert_eq!(
                detect(&env).unwrap_err(),
                format!(
                    "a PMI-1 launcher (PMI_FD): PMI_FD={fd} cannot be the launcher's socket (0, 1 and 2 are \
                     standard input, output and error). Start nccl-find directly under the launcher, or \
                     pass --rank, --world-size and --init tcp://HOST:PORT"
                )
            );
        }
    }

    #[test]
    fn replies_are_read_by_name_in_any_order() {
        let r = parse_reply(b"cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=4096").unwrap();
        assert_eq!(r.get("vallen_max"), Some("4096"));
        assert_eq!(check_reply(&r, "get_maxes", "maxes"), Ok(()));
        let r = parse_reply(b"cmd=get_result  rc=0 msg=success value=0a0b  tag=").unwrap();
        assert_eq!((r.get("value"), r.get("tag")), (Some("0a0b"), Some("")));
        let r = parse_reply(b"cmd=barrier_out tag=0 bare").unwrap();
        assert_eq!(r.0[2], ("bare".to_string(), None));
        assert_eq!(check_reply(&r, "barrier_in", "barrier_out"), Ok(()));
        // rc missing: success, as MPICH's client reads it (Intel MPI).
        let r = parse_reply(b"cmd=finalize_ack").unwrap();
        assert_eq!(check_reply(&r, "finalize", "finalize_ack"), Ok(()));
    }

    #[test]
    fn hostile_replies_are_refused_with_their_text_escaped() {
        let e = |line: &[u8]| parse_reply(line).unwrap_err();
        assert_eq!(
            e(b"value=1 cmd=get_result"),
            "the PMI server sent a line that is not a reply (no cmd= first): \"value=1 cmd=get_result\""
        );
        assert_eq!(
            e(b""),
            "the PMI server sent a line that is not a reply (no cmd= first): \"\""
        );
        assert_eq!(
            e(b"cmd=put_result r\x1bc=0"),
            "the PMI server sent a malformed line: \"cmd=put_result r\\u{1b}c=0\""
        );
        assert_eq!(
            e(b"cmd=put_result \xff"),
            "the PMI server sent a line that is not text: \"cmd=put_result \u{fffd}\""
        );
        let long = vec![b'x'; 10_000];
        assert!(
            e(&long).ends_with("... (9800 more bytes)\""),
            "bounded in print: {}",
            e(&long)
        );
        let check =
            |line: &[u8], req, exp| check_reply(&parse_reply(line).unwrap(), req, exp).unwrap_err();
        assert_eq!(
            check(
                b"cmd=get_result rc=-1 msg=key_x_not_found value=unknown",
                "get",
                "get_result"
            ),
            "the PMI server refused cmd=get (rc=-1): \"key_x_not_found\""
        );
        assert_eq!(
            check(b"cmd=get_result rc=1", "get", "get_result"),
            "the PMI server refused cmd=get (rc=1)"
        );
        assert_eq!(
            check(b"cmd=put_result rc=zero", "put", "put_result"),
            "the PMI server answered cmd=put with rc=\"zero\", not a number"
        );
        assert_eq!(
            check(b"cmd=barrier_out\x07", "put", "put_result"),
            "the PMI server answered cmd=put with cmd=\"barrier_out\\u{7}\", not cmd=put_result"
        );
        let r = parse_reply(b"cmd=maxes keylen_max=64 vallen_max=99999999999").unwrap();
        assert_eq!(
            reply_number(&r, "vallen_max", "get_maxes").unwrap_err(),
            "the PMI server's answer to cmd=get_maxes has vallen_max=\"99999999999\", not a number"
        );
        assert_eq!(
            reply_number(&r, "kvsname_max", "get_maxes").unwrap_err(),
            "the PMI server's answer to cmd=get_maxes has no kvsname_max"
        );
    }

    /// A PMI-1 server on the other end of a socket pair, as a test double
    /// of the real ones (they are tested in cli/tests/launch_hydra.rs): it
    /// answers with `reply(line, store)` and keeps every line it got.
    struct Fake {
        lines: Arc<Mutex<Vec<String>>>,
        thread: std::thread::JoinHandle<()>,
    }

    type Store = std::collections::HashMap<String, String>;

    fn fake(
        server: UnixStream,
        mut reply: impl FnMut(&str, &mut Store) -> Option<String> + Send + 'static,
    ) -> Fake {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let got = lines.clone();
        let thread = std::thread::spawn(move || {
            let mut out = server.try_clone().unwrap();
            let mut store = Store::new();
            for line in BufReader::new(server).lines() {
                let Ok(line) = line else { return };
                got.lock().unwrap().push(line.clone());
                match reply(&line, &mut store) {
                    Some(r) => {
                        if out.write_all(r.as_bytes()).is_err() {
                            return;
                        }
                    }
                    None => return,
                }
            }
        });
        Fake { lines, thread }
    }

    /// Answers as MPICH's Hydra does, keeping puts in `store`.
    fn hydra(line: &str, store: &mut Store, vallen: usize) -> Option<String> {
        let attrs = parse_reply(line.as_bytes()).unwrap();
        Some(match attrs.get("cmd").unwrap() {
            "init" => "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=2\n".into(),
            "get_maxes" => {
                format!("cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max={vallen}\n")
            }
            "get_my_kvsname" => "cmd=my_kvsname rc=0 kvsname=kvs_77_0\n".into(),
            "put" => {
                let (k, v) = (attrs.get("key").unwrap(), attrs.get("value").unwrap());
                assert!(v.len() < vallen && line.len() < MAX_REQUEST, "{line}");
                store.insert(k.into(), v.into());
                "cmd=put_result rc=0\n".into()
            }
            "barrier_in" => "cmd=barrier_out tag=0\n".into(),
            "get" => match store.get(attrs.get("key").unwrap()) {
                Some(v) => format!("cmd=get_result rc=0 value={v}\n"),
                None => "cmd=get_result rc=1\n".into(),
            },
            "finalize" => "cmd=finalize_ack rc=0\n".into(),
            _ => return None,
        })
    }

    fn soon(secs: u64) -> Instant {
        Instant::now() + Duration::from_secs(secs)
    }

    #[test]
    fn the_exact_lines_sent_and_a_value_split_into_parts() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let f = fake(theirs, |l, s| hydra(l, s, 1024));
        let mut s = Session::start(ours, 9, 1, 2, soon(60)).unwrap();
        s.put("nccl-find/hello/1", &[1, 0, 0, 0]).unwrap();
        s.fence(soon(60)).unwrap();
        assert_eq!(s.get(1, "nccl-find/hello/1").unwrap(), [1, 0, 0, 0]);
        // 2000 bytes: 4000 hex digits, in parts that each fit a line.
        let long: Vec<u8> = (0..2000u32).map(|i| (i % 251) as u8).collect();
        s.put("nccl-find/done/1", &long).unwrap();
        assert_eq!(s.get(1, "nccl-find/done/1").unwrap(), long);
        assert_eq!(
            s.get(0, "nccl-find/plan").unwrap_err(),
            "the PMI server refused cmd=get (rc=1): no 0/nccl-find/plan in the job's store"
        );
        s.close(soon(60));
        drop(s);
        f.thread.join().unwrap();
        let lines = f.lines.lock().unwrap();
        assert_eq!(
            lines[..7],
            [
                "cmd=init pmi_version=1 pmi_subversion=1",
                "cmd=get_maxes",
                "cmd=get_my_kvsname",
                "cmd=put kvsname=kvs_77_0 key=1/nccl-find/hello/1 value=01000000",
                "cmd=barrier_in",
                "cmd=get kvsname=kvs_77_0 key=1/nccl-find/hello/1",
                // Room on a line: 1024 - 29 - 8 (kvsname) - 23 (key, /9999) =
                // 964, less 5 for the first part's `5:`: 959 hex digits a part.
                &format!(
                    "cmd=put kvsname=kvs_77_0 key=1/nccl-find/done/1 value=5:{}",
                    &hex(&long)[..959]
                ),
            ]
        );
        assert_eq!(
            lines[7],
            format!(
                "cmd=put kvsname=kvs_77_0 key=1/nccl-find/done/1/1 value={}",
                &hex(&long)[959..1918]
            )
        );
        assert!(lines.iter().all(|l| l.len() < MAX_REQUEST));
        assert_eq!(lines.last().unwrap(), "cmd=finalize");
        assert_eq!(lines.iter().filter(|l| *l == "cmd=finalize").count(), 1);
    }

    #[test]
    fn intel_mpi_replies_without_rc_and_refuses_missing_keys_with_rc_minus_1() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let f = fake(theirs, |l, _| {
            Some(match l.split(' ').next().unwrap() {
                "cmd=init" => "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n".into(),
                "cmd=get_maxes" => {
                    "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=4096\n".into()
                }
                "cmd=get_my_kvsname" => "cmd=my_kvsname kvsname=kvs_3976_0\n".into(),
                "cmd=put" => "cmd=put_result rc=0 msg=success\n".into(),
                "cmd=barrier_in" => "cmd=barrier_out\n".into(),
                "cmd=get" if l.contains("key=0/a") => {
                    "cmd=get_result rc=0 msg=success value=zz\n".into()
                }
                "cmd=get" => "cmd=get_result rc=-1 msg=key_0/b_not_found value=unknown\n".into(),
                "cmd=finalize" => "cmd=finalize_ack\n".into(),
                _ => return None,
            })
        });
        let mut s = Session::start(ours, 9, 0, 2, soon(60)).unwrap();
        assert_eq!(
            (s.keylen_max, s.vallen_max, s.kvs.as_str()),
            (64, 4096, "kvs_3976_0")
        );
        s.put("a", b"x").unwrap();
        s.fence(soon(60)).unwrap();
        assert_eq!(
            s.get(0, "a").unwrap_err(),
            "rank 0's a in the PMI store is not ours (not hex)"
        );
        assert_eq!(
            s.get(0, "b").unwrap_err(),
            "the PMI server refused cmd=get (rc=-1): \"key_0/b_not_found\": no 0/b in the job's store"
        );
        assert_eq!(
            s.put("x y", b"1").unwrap_err(),
            "\"x y\" cannot be a PMI key"
        );
        assert_eq!(
            s.put(&"k".repeat(70), b"1").unwrap_err(),
            format!(
                "the key 0/{} is 72 bytes long; the PMI server takes keys shorter than 64 (keylen_max)",
                "k".repeat(70)
            )
        );
        drop(s);
        f.thread.join().unwrap();
        assert_eq!(f.lines.lock().unwrap().last().unwrap(), "cmd=finalize");
    }

    #[test]
    fn a_server_that_floods_hangs_or_leaves_is_bounded() {
        // A line that never ends.
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let flood = std::thread::spawn(move || {
            let mut r = [0u8; 64];
            let _ = theirs.read(&mut r);
            let junk = vec![b'x'; 4096];
            while theirs.write_all(&junk).is_ok() {}
        });
        let e = Session::start(ours, 9, 0, 2, soon(60)).err().unwrap();
        assert_eq!(e, "the PMI server on fd 9 sent a line longer than 64 KiB");
        flood.join().unwrap();

        // A server that answers init, then nothing: the barrier ends at the
        // deadline, and says what to check.
        let (ours, theirs) = UnixStream::pair().unwrap();
        let f = fake(theirs, |l, s| match l {
            "cmd=barrier_in" => Some(String::new()),
            _ => hydra(l, s, 1024),
        });
        let mut s = Session::start(ours, 9, 0, 3, soon(60)).unwrap();
        let t = Instant::now();
        let e = s
            .fence(Instant::now() + Duration::from_millis(300))
            .unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
        assert_eq!(
            e.message,
            "the PMI barrier did not complete by the deadline: not all 3 processes reached it. A rank that \
             exited early, failed to start, or runs another program never does (PMI-1 cannot say which). \
             Check every rank's output, or raise --timeout"
        );
        // Nothing more is asked after an unanswered request but finalize.
        assert_eq!(
            s.put("a", b"1").unwrap_err(),
            "an earlier request to the PMI server on fd 9 went unanswered"
        );
        drop(s);
        f.thread.join().unwrap();
        assert_eq!(
            f.lines.lock().unwrap()[3..],
            ["cmd=barrier_in", "cmd=finalize"]
        );

        // A server that goes away.
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(theirs);
        assert_eq!(
            Session::start(ours, 9, 0, 2, soon(60)).err().unwrap(),
            "the PMI server closed fd 9 (the launcher ended the job, or another program in this job already \
             used and finalized PMI_FD)"
        );

        // Too little room for a value.
        let (ours, theirs) = UnixStream::pair().unwrap();
        let _f = fake(theirs, |l, s| hydra(l, s, 16));
        let mut s = Session::start(ours, 9, 0, 2, soon(60)).unwrap();
        assert_eq!(
            s.put("a", b"1").unwrap_err(),
            "the PMI server leaves 15 bytes for a value (vallen_max=16, kvsname 8 bytes); 32 are needed"
        );
    }

    #[test]
    fn the_socket_is_taken_from_its_fd_once_and_checked_first() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let f = fake(theirs, |l, s| hydra(l, s, 1024));
        let fd = ours.into_raw_fd();
        let c = Pmi1 {
            fd,
            launcher: HYDRA,
            taken: AtomicBool::new(false),
        };
        let mut kv = c.connect(0, 1, soon(60)).unwrap();
        kv.put("k", b"v").unwrap();
        assert_eq!(
            c.connect(0, 1, soon(60)).err().unwrap(),
            format!("PMI_FD={fd} was already used by this process")
        );
        kv.close(soon(60));
        drop(kv);
        f.thread.join().unwrap();

        // A file is left alone, still open.
        let path = std::env::temp_dir().join(format!("nccl-find-pmi1-{}", std::process::id()));
        let mut file = std::fs::File::create(&path).unwrap();
        let fd = file.as_raw_fd();
        let c = Pmi1 {
            fd,
            launcher: HYDRA,
            taken: AtomicBool::new(false),
        };
        assert_eq!(
            c.connect(0, 2, soon(60)).err().unwrap(),
            format!(
                "PMI_FD={fd} is a file, not the launcher's socket. Start nccl-find directly under the \
                 launcher, or pass --rank, --world-size and --init tcp://HOST:PORT"
            )
        );
        file.write_all(b"still mine").unwrap();
        drop(file);
        std::fs::remove_file(&path).unwrap();

        // An fd that is not open.
        let c = Pmi1 {
            fd: 999_999,
            launcher: HYDRA,
            taken: AtomicBool::new(false),
        };
        assert_eq!(
            c.connect(0, 2, soon(60)).err().unwrap(),
            "PMI_FD=999999 is not open in this process: the launcher's socket is gone (a program between the \
             launcher and nccl-find closed it, or the variable was set by hand). Start nccl-find directly \
             under the launcher, or pass --rank, --world-size and --init tcp://HOST:PORT"
        );
    }
}
