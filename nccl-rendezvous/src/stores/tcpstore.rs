//! A client of PyTorch's TCPStore, the key-value server torchrun's agent
//! serves at `MASTER_ADDR:MASTER_PORT`, and the [`Kv`] made of it.
//!
//! The protocol, client side: a request is a one-byte command and its
//! arguments; a length is a u64 (little-endian), a string is its length and
//! its bytes, a key list its count and its strings. torch >= 2.2 (the
//! [`Dialect::New`]) opens each connection with a validation message and
//! numbers the commands one higher than torch 2.0 and 2.1
//! ([`Dialect::Old`]). Every reply read is bounded in size and in time.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::kv::Kv;
use crate::stores::prefix::{PrefixStore, Store};
use crate::words::{fail, list, Failed};

/// Which numbering of the commands the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// torch 2.2 and later: a validation message first, then SET=1, GET=3,
    /// ADD=4, CHECK=5, WAIT=6.
    New,
    /// torch 2.0 and 2.1: no validation, SET=0, GET=2, ADD=3, CHECK=4, WAIT=5.
    Old,
}

impl Dialect {
    /// The other one, to fall back on.
    pub(crate) fn other(self) -> Dialect {
        match self {
            Dialect::New => Dialect::Old,
            Dialect::Old => Dialect::New,
        }
    }

    /// In words, for messages.
    pub(crate) fn words(self) -> &'static str {
        match self {
            Dialect::New => "the protocol of torch >= 2.2",
            Dialect::Old => "the protocol of torch 2.0/2.1",
        }
    }

    fn code(self, req: &Req) -> u8 {
        let new = match req {
            Req::Validate => 0,
            Req::Set(..) => 1,
            Req::Get(_) => 3,
            Req::Add(..) => 4,
            Req::Check(_) => 5,
            Req::Wait(_) => 6,
        };
        match self {
            Dialect::New => new,
            Dialect::Old => new - 1,
        }
    }
}

/// The number a torch >= 2.2 client sends first on every connection.
const VALIDATE_MAGIC: u32 = 0x3C85_F7CE;

/// The longest value this client reads back (ours are at most a few KB).
const MAX_VALUE: u64 = 64 * 1024;

/// The longest key the server takes (torch's libuv server: 8 KiB).
const MAX_KEY: usize = 8 * 1024;

/// A request, as [`encode`] writes it.
#[derive(Debug)]
pub(crate) enum Req<'a> {
    /// torch >= 2.2's first message (no reply).
    Validate,
    /// Sets a key (no reply).
    Set(&'a str, &'a [u8]),
    /// A key's value (reply: its length and bytes).
    Get(&'a str),
    /// Adds to a counter (reply: the new value, i64).
    Add(&'a str, i64),
    /// Whether every key exists (reply: a byte, 0 yes, 1 no).
    Check(&'a [String]),
    /// Waits until every key exists (reply: a byte 0, then).
    Wait(&'a [String]),
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u64).to_le_bytes());
    out.extend_from_slice(b);
}

/// A request's bytes in `d`.
pub(crate) fn encode(d: Dialect, req: &Req) -> Vec<u8> {
    let mut out = vec![d.code(req)];
    match req {
        Req::Validate => out.extend_from_slice(&VALIDATE_MAGIC.to_le_bytes()),
        Req::Set(k, v) => {
            put_bytes(&mut out, k.as_bytes());
            put_bytes(&mut out, v);
        }
        Req::Get(k) => put_bytes(&mut out, k.as_bytes()),
        Req::Add(k, n) => {
            put_bytes(&mut out, k.as_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
        Req::Check(keys) | Req::Wait(keys) => {
            out.extend_from_slice(&(keys.len() as u64).to_le_bytes());
            for k in keys.iter() {
                put_bytes(&mut out, k.as_bytes());
            }
        }
    }
    out
}

/// Why a call to the store failed.
#[derive(Debug)]
pub(crate) enum StoreError {
    /// Nothing listens there.
    Refused(io::Error),
    /// The server closed or reset the connection.
    Closed,
    /// No reply in time.
    Silent,
    /// The deadline passed before a connection could be tried.
    NoTime,
    /// A reply this client does not take.
    Bad(String),
    /// Anything else.
    Io(io::Error),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Refused(e) => write!(f, "nothing listens there ({e})"),
            StoreError::Closed => f.write_str("the server closed the connection"),
            StoreError::Silent => f.write_str("the server did not answer in time"),
            StoreError::NoTime => f.write_str("no time was left to connect"),
            StoreError::Bad(m) => f.write_str(m),
            StoreError::Io(e) => write!(f, "{e}"),
        }
    }
}

fn io_error(e: io::Error) -> StoreError {
    use io::ErrorKind::*;
    match e.kind() {
        WouldBlock | TimedOut => StoreError::Silent,
        UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => StoreError::Closed,
        ConnectionRefused => StoreError::Refused(e),
        _ => StoreError::Io(e),
    }
}

/// What is left of the time until `until`: at least a millisecond (a zero
/// timeout means "none" to the socket), `None` once it has passed.
fn left(until: Instant) -> Option<Duration> {
    let d = until.saturating_duration_since(Instant::now());
    (!d.is_zero()).then(|| d.max(Duration::from_millis(1)))
}

/// One connection to the store.
pub(crate) struct Conn {
    s: TcpStream,
    dialect: Dialect,
    /// The longest the server took to answer a request that waits for
    /// nothing (a get, an add, a check).
    slowest: Duration,
}

impl Conn {
    /// Connects to the first of `addrs` that answers, by `until`, and (in
    /// the new dialect) sends the validation message.
    pub(crate) fn open(
        addrs: &[SocketAddr],
        dialect: Dialect,
        until: Instant,
    ) -> Result<Conn, StoreError> {
        let mut last = StoreError::NoTime;
        for a in addrs {
            let Some(t) = left(until) else { break };
            match TcpStream::connect_timeout(a, t.min(Duration::from_secs(5))) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    let mut c = Conn {
                        s,
                        dialect,
                        slowest: Duration::ZERO,
                    };
                    if dialect == Dialect::New {
                        c.send(&Req::Validate, until)?;
                    }
                    return Ok(c);
                }
                // Not reachable yet, or too busy to take the connection (a
                // thousand workers connecting at once): like a refusal, a
                // reason to try again, never a sign of the other protocol.
                Err(e) if e.kind() == io::ErrorKind::TimedOut => last = StoreError::Refused(e),
                Err(e) => last = io_error(e),
            }
        }
        Err(last)
    }

    /// The dialect this connection speaks.
    pub(crate) fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn send(&mut self, req: &Req, until: Instant) -> Result<(), StoreError> {
        let t = left(until).ok_or(StoreError::Silent)?;
        self.s.set_write_timeout(Some(t)).map_err(io_error)?;
        self.s
            .write_all(&encode(self.dialect, req))
            .map_err(io_error)
    }

    fn read_exact(&mut self, buf: &mut [u8], until: Instant) -> Result<(), StoreError> {
        let mut got = 0;
        while got < buf.len() {
            let t = left(until).ok_or(StoreError::Silent)?;
            self.s.set_read_timeout(Some(t)).map_err(io_error)?;
            match self.s.read(&mut buf[got..]) {
                Ok(0) => return Err(StoreError::Closed),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(e)),
            }
        }
        Ok(())
    }

    fn read_byte(&mut self, until: Instant) -> Result<u8, StoreError> {
        let mut b = [0u8];
        self.read_exact(&mut b, until)?;
        Ok(b[0])
    }

    fn answered(&mut self, asked: Instant) {
        self.slowest = self.slowest.max(asked.elapsed());
    }

    pub(crate) fn close(&mut self) {
        let _ = self.s.shutdown(Shutdown::Both);
    }
}

impl Store for Conn {
    type Error = StoreError;

    /// Sets `key` to `value`.
    fn set(&mut self, key: &str, value: &[u8], until: Instant) -> Result<(), StoreError> {
        check_key(key)?;
        self.send(&Req::Set(key, value), until)
    }

    /// `key`'s value: call only once [`Conn::check`] said it exists (torch's
    /// older server drops a connection that asks for a missing key).
    fn get(&mut self, key: &str, until: Instant) -> Result<Vec<u8>, StoreError> {
        check_key(key)?;
        let asked = Instant::now();
        self.send(&Req::Get(key), until)?;
        let mut n = [0u8; 8];
        self.read_exact(&mut n, until)?;
        self.answered(asked);
        let n = u64::from_le_bytes(n);
        if n > MAX_VALUE {
            return Err(StoreError::Bad(format!(
                "the store sent a value of {n} bytes; at most {MAX_VALUE} are taken"
            )));
        }
        let mut v = vec![0u8; n as usize];
        self.read_exact(&mut v, until)?;
        Ok(v)
    }

    /// Adds `n` to the counter `key`: its new value.
    fn add(&mut self, key: &str, n: i64, until: Instant) -> Result<i64, StoreError> {
        check_key(key)?;
        let asked = Instant::now();
        self.send(&Req::Add(key, n), until)?;
        let mut v = [0u8; 8];
        self.read_exact(&mut v, until)?;
        self.answered(asked);
        Ok(i64::from_le_bytes(v))
    }

    /// Whether every one of `keys` exists.
    fn check(&mut self, keys: &[String], until: Instant) -> Result<bool, StoreError> {
        keys.iter().try_for_each(|k| check_key(k))?;
        let asked = Instant::now();
        self.send(&Req::Check(keys), until)?;
        let b = self.read_byte(until)?;
        self.answered(asked);
        ready(b)
    }

    /// Whether each of `keys` exists, one CHECK each, a batch at a time.
    fn check_each(&mut self, keys: &[String], until: Instant) -> Result<Vec<bool>, StoreError> {
        let mut out = Vec::with_capacity(keys.len());
        for batch in keys.chunks(512) {
            let mut bytes = Vec::new();
            for k in batch {
                check_key(k)?;
                bytes.extend(encode(self.dialect, &Req::Check(std::slice::from_ref(k))));
            }
            let t = left(until).ok_or(StoreError::Silent)?;
            self.s.set_write_timeout(Some(t)).map_err(io_error)?;
            self.s.write_all(&bytes).map_err(io_error)?;
            let mut replies = vec![0u8; batch.len()];
            self.read_exact(&mut replies, until)?;
            for r in replies {
                out.push(ready(r)?);
            }
        }
        Ok(out)
    }

    /// Returns once every one of `keys` exists; [`StoreError::Silent`] at
    /// `until`.
    fn wait(&mut self, keys: &[String], until: Instant) -> Result<(), StoreError> {
        keys.iter().try_for_each(|k| check_key(k))?;
        self.send(&Req::Wait(keys), until)?;
        match self.read_byte(until)? {
            0 => Ok(()),
            b => Err(StoreError::Bad(format!(
                "the store ended a wait with {b} (canceled?)"
            ))),
        }
    }
}

fn check_key(k: &str) -> Result<(), StoreError> {
    if k.len() > MAX_KEY {
        return Err(StoreError::Bad(format!(
            "a key of {} bytes is longer than the {MAX_KEY} the store takes",
            k.len()
        )));
    }
    Ok(())
}

fn ready(b: u8) -> Result<bool, StoreError> {
    match b {
        0 => Ok(true),
        1 => Ok(false),
        b => Err(StoreError::Bad(format!(
            "the store answered a check with {b}, neither 0 (ready) nor 1 (not ready)"
        ))),
    }
}

/// How long a server has to answer the first request in the old protocol
/// before the newer one is tried (a newer server stays silent to it).
const PROBE_WAIT: Duration = Duration::from_secs(5);

/// The least time a put or get has, even past the meeting's deadline (the
/// outcomes are put before their own fence sets a new one).
const OP_FLOOR: Duration = Duration::from_secs(10);

/// How long, past a fence's deadline, asking who never came may take.
const ASK_WAIT: Duration = Duration::from_millis(1500);

/// Connects and finds the dialect the server speaks: `hint` first, then
/// the other, turn about, by `until`. `probe` is a key to CHECK. With the
/// connection, how long the server took to take it and answer the probe.
pub(crate) fn open_probed(
    addrs: &[SocketAddr],
    hint: Dialect,
    probe: &str,
    until: Instant,
) -> Result<(Conn, Duration), String> {
    let mut tried: Vec<String> = Vec::new();
    // The last refusal: what to say when the deadline ends the retries.
    let mut refused: Option<io::Error> = None;
    let mut d = hint;
    loop {
        // A server of torch <= 2.1 drops a connection that speaks torch
        // >= 2.2's protocol at once: silence in it is a busy server (a
        // thousand workers connecting on two cores), never the wrong
        // protocol, and is waited out. Only silence in the old protocol (a
        // newer server ignores it) is a sign to try the other.
        let by = match d {
            Dialect::New => until,
            Dialect::Old => (Instant::now() + PROBE_WAIT).min(until),
        };
        let tried_at = Instant::now();
        let got = Conn::open(addrs, d, until).and_then(|mut c| {
            c.check(&[probe.to_string()], by)?;
            Ok(c)
        });
        match got {
            Ok(c) => return Ok((c, tried_at.elapsed())),
            Err(StoreError::Refused(e)) => {
                // The server may not be up yet: try again shortly.
                refused = Some(e);
                match left(until) {
                    Some(t) => std::thread::sleep(t.min(Duration::from_millis(200))),
                    None => break,
                }
                continue;
            }
            Err(StoreError::NoTime) => break,
            Err(e @ (StoreError::Closed | StoreError::Silent)) => {
                let t = format!("in {}: {e}", d.words());
                if !tried.contains(&t) {
                    tried.push(t);
                }
                d = d.other();
            }
            Err(e) => {
                tried.push(format!("in {}: {e}", d.words()));
                break;
            }
        }
        if left(until).is_none() {
            break;
        }
    }
    if let Some(e) = refused.filter(|_| tried.is_empty()) {
        tried.push(format!("nothing listens there ({e})"));
    }
    if tried.is_empty() {
        tried.push(StoreError::NoTime.to_string());
    }
    Err(tried.join("; "))
}

/// The store as one rank's [`Kv`]: keys under `prefix`; a fence is a
/// counter each rank adds 1 to (after setting its own arrival key), and a
/// key the last to arrive sets, that every rank waits for.
pub(crate) struct StoreKv {
    /// The connection, every key under this run's prefix
    /// (`/nccl-find/RUN/RESTART/N/`).
    pub(crate) store: PrefixStore<Conn>,
    pub(crate) addrs: Vec<SocketAddr>,
    /// Where the store is, in words.
    pub(crate) at: String,
    pub(crate) rank: usize,
    pub(crate) world: usize,
    /// Fences passed so far.
    pub(crate) fences: u64,
    /// When this rank connected (to say how long it waited).
    pub(crate) since: Instant,
    /// The latest deadline it was given.
    pub(crate) until: Instant,
    /// How long the server took to take this connection and answer it.
    pub(crate) accepted_in: Duration,
}

/// A store that takes longer than this to take a connection, or to answer
/// a request that waits for nothing, is slow: the report says so.
pub(crate) const SLOW: Duration = Duration::from_secs(1);

/// What a slow store costs, in words, when it was slow: `accepted` is how
/// long it took to take the connection and answer it, `slowest` its
/// longest answer since.
pub(crate) fn slowness(at: &str, accepted: Duration, slowest: Duration) -> Option<String> {
    if accepted < SLOW && slowest < SLOW {
        return None;
    }
    Some(format!(
        "the agent's TCPStore at {at} was slow: {:.1} s to take this process's connection, {:.1} s for its \
         slowest answer. torch's store looks up the name of every client it accepts, one at a time, so a \
         slow resolver makes every worker of the job wait as long, torch's own too: `nccl-find doctor` \
         times that lookup on each node; an /etc/hosts entry for each node's address, or a resolver that \
         answers, mends it",
        accepted.as_secs_f64(),
        slowest.as_secs_f64()
    ))
}

impl StoreKv {
    /// Counts this worker's runs in the store and moves this run's keys
    /// under its number (`<prefix><n>/`), so that a second run in one
    /// worker (a pre-flight script that runs the smoke test twice) meets
    /// under keys of its own: every rank runs as often.
    pub(crate) fn begin_run(&mut self) -> Result<(), String> {
        let (runs, until) = (format!("runs/{}", self.rank), self.op_until());
        let n = self
            .store
            .add(&runs, 1, until)
            .map_err(|e| format!("the agent's TCPStore at {} counted no run: {e}", self.at))?;
        self.store.descend(&format!("{n}/"));
        Ok(())
    }

    fn op_until(&self) -> Instant {
        self.until.max(Instant::now() + OP_FLOOR)
    }

    /// Barrier `n`'s keys: `…/fence/N/`.
    fn fence_base(&self, n: u64) -> String {
        format!("fence/{n}/")
    }

    fn broke(&self, n: u64, e: StoreError) -> Failed {
        fail(format!(
            "the store at {} failed at barrier {n}: {e}",
            self.at
        ))
    }

    /// Says that `rank` has reached barrier `n`: its arrival key, by which
    /// a rank that never came is named.
    fn arrive_at(&mut self, n: u64, rank: usize) -> Result<(), Failed> {
        self.fences = self.fences.max(n + 1);
        let (key, until) = (format!("{}{rank}", self.fence_base(n)), self.op_until());
        self.store
            .set(&key, b"1", until)
            .map_err(|e| self.broke(n, e))
    }

    /// `count` ranks that have arrived at barrier `n` are counted in; the
    /// last of the job to be counted opens it. Returns once it is open, or
    /// at `deadline` naming who never came.
    fn pass_at(&mut self, n: u64, count: usize, deadline: Instant) -> Result<(), Failed> {
        self.until = deadline;
        let base = self.fence_base(n);
        let open = format!("{base}open");
        let (world, until) = (self.world, self.op_until());
        let total = self
            .store
            .add(&format!("{base}count"), count as i64, until)
            .map_err(|e| self.broke(n, e))?;
        if total < 1 || total as u64 > world as u64 {
            return Err(fail(format!(
                "the store at {} counts {total} arrivals at barrier {n} of {world} ranks: another \
                 program (or a second job) uses the same keys",
                self.at
            )));
        }
        if total as u64 == world as u64 {
            self.store
                .set(&open, b"1", until)
                .map_err(|e| self.broke(n, e))?;
        }
        match self.store.wait(std::slice::from_ref(&open), deadline) {
            Ok(()) => Ok(()),
            Err(StoreError::Silent) => Err(self.never_came(n, &base)),
            Err(e) => Err(self.broke(n, e)),
        }
    }

    /// The failure of fence `n` at its deadline: who never came, asked on
    /// a fresh connection.
    fn never_came(&self, n: u64, base: &str) -> Failed {
        let waited = Instant::now().saturating_duration_since(self.since);
        let until = Instant::now() + ASK_WAIT;
        let keys: Vec<String> = (0..self.world).map(|r| format!("{base}{r}")).collect();
        let asked = Conn::open(&self.addrs, self.store.inner.dialect(), until).and_then(|c| {
            let mut c = PrefixStore::new(c, self.store.prefix());
            let got = c.check_each(&keys, until);
            c.inner.close();
            got
        });
        let (at, world, secs) = (&self.at, self.world, waited.as_secs_f64());
        match asked {
            Ok(here) => {
                let missing: Vec<usize> = (0..world).filter(|r| !here[*r]).collect();
                let message = if missing.is_empty() {
                    format!(
                        "all {world} ranks reached barrier {n} in the store at {at}, but it did not open \
                         within {secs:.0} s: the last to arrive never opened it (it died?). Check every \
                         rank's output"
                    )
                } else {
                    format!(
                        "rank(s) {} never reached barrier {n} in the store at {at} within {secs:.0} s ({} \
                         of {world} processes did). Check that torchrun started them all (--nnodes, \
                         --nproc-per-node) and every rank's output, or raise --timeout",
                        list(&missing),
                        world - missing.len(),
                    )
                };
                Failed { message, missing }
            }
            Err(e) => fail(format!(
                "the ranks did not all reach barrier {n} in the store at {at} within {secs:.0} s, and the \
                 store could not be asked who never came ({e}). Check every rank's output, or raise \
                 --timeout"
            )),
        }
    }
}

/// A meeting's key (`nccl-find/…`) in the store, below the prefix.
fn unscoped(key: &str) -> &str {
    key.strip_prefix("nccl-find/").unwrap_or(key)
}

impl Kv for StoreKv {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        let (k, until) = (unscoped(key), self.op_until());
        self.store
            .set(k, value, until)
            .map_err(|e| format!("the store at {} took no {key}: {e}", self.at))
    }

    fn fence(&mut self, deadline: Instant) -> Result<(), Failed> {
        self.until = deadline;
        let n = self.fences;
        self.arrive_at(n, self.rank)?;
        self.pass_at(n, 1, deadline)
    }

    fn get(&mut self, from: usize, key: &str) -> Result<Vec<u8>, String> {
        let (k, until) = (unscoped(key).to_string(), self.op_until());
        let at = &self.at;
        let err = |e: StoreError| format!("the store at {at} gave no {key} of rank {from}: {e}");
        if !self
            .store
            .check(std::slice::from_ref(&k), until)
            .map_err(err)?
        {
            return Err(format!("rank {from} left no {key} in the store at {at}"));
        }
        self.store.get(&k, until).map_err(err)
    }

    fn close(&mut self, _until: Instant) {
        self.store.inner.close();
    }

    fn watch(&mut self) -> Option<String> {
        let key = "abort".to_string();
        let until = Instant::now() + Duration::from_secs(2);
        match self.store.check(std::slice::from_ref(&key), until) {
            Ok(true) => {
                let why = self.store.get(&key, until).unwrap_or_default();
                Some(crate::untrusted::peer_text(&String::from_utf8_lossy(&why)))
            }
            _ => None,
        }
    }

    fn abort(&mut self, why: &str) {
        let key = "abort".to_string();
        let text = format!("rank {} stopped the job: {why}", self.rank);
        let text = crate::untrusted::cut(&text, 2000);
        let _ = self.store.set(&key, text.as_bytes(), self.op_until());
    }

    fn notes(&self) -> Vec<String> {
        slowness(&self.at, self.accepted_in, self.store.inner.slowest)
            .into_iter()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_encoded_byte_for_byte() {
        assert_eq!(
            encode(Dialect::New, &Req::Validate),
            [0, 0xce, 0xf7, 0x85, 0x3c]
        );
        let set = [
            1, 1, 0, 0, 0, 0, 0, 0, 0, b'k', 2, 0, 0, 0, 0, 0, 0, 0, b'a', b'b',
        ];
        assert_eq!(encode(Dialect::New, &Req::Set("k", b"ab")), set);
        let mut old = set;
        old[0] = 0;
        assert_eq!(encode(Dialect::Old, &Req::Set("k", b"ab")), old);
        assert_eq!(
            encode(Dialect::New, &Req::Get("k")),
            [3, 1, 0, 0, 0, 0, 0, 0, 0, b'k']
        );
        assert_eq!(encode(Dialect::Old, &Req::Get("k"))[0], 2);
        assert_eq!(
            encode(Dialect::New, &Req::Add("c", -2)),
            [4, 1, 0, 0, 0, 0, 0, 0, 0, b'c', 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(encode(Dialect::Old, &Req::Add("c", 1))[0], 3);
        let keys = ["a".to_string(), "bc".to_string()];
        let list = [
            2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, b'a', 2, 0, 0, 0, 0, 0, 0, 0, b'b',
            b'c',
        ];
        assert_eq!(
            encode(Dialect::New, &Req::Check(&keys)),
            [&[5][..], &list].concat()
        );
        assert_eq!(
            encode(Dialect::New, &Req::Wait(&keys)),
            [&[6][..], &list].concat()
        );
        assert_eq!(encode(Dialect::Old, &Req::Check(&keys))[0], 4);
        assert_eq!(encode(Dialect::Old, &Req::Wait(&keys))[0], 5);
    }

    /// A server that answers each connection with `reply` (after reading
    /// what the client sends first), to test the reading side's bounds.
    fn fake(reply: Vec<u8>) -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let mut b = [0u8; 64];
                let _ = s.read(&mut b);
                let _ = s.write_all(&reply);
                std::thread::sleep(Duration::from_secs(2));
            }
        });
        a
    }

    #[test]
    fn replies_are_bounded_and_checked() {
        let until = Instant::now() + Duration::from_secs(20);
        let huge = fake((MAX_VALUE + 1).to_le_bytes().to_vec());
        let mut c = Conn::open(&[huge], Dialect::Old, until).unwrap();
        match c.get("k", until) {
            Err(StoreError::Bad(m)) => {
                assert_eq!(
                    m,
                    "the store sent a value of 65537 bytes; at most 65536 are taken"
                )
            }
            r => panic!("{:?}", r.map(|_| ())),
        }
        let odd = fake(vec![7]);
        let mut c = Conn::open(&[odd], Dialect::Old, until).unwrap();
        assert!(matches!(
            c.check(&["k".into()], until),
            Err(StoreError::Bad(_))
        ));
        let short = fake(vec![1, 0]);
        let mut c = Conn::open(&[short], Dialect::Old, until).unwrap();
        assert!(matches!(c.add("k", 1, until), Err(StoreError::Closed)));
        let silent = fake(Vec::new());
        let mut c = Conn::open(&[silent], Dialect::Old, until).unwrap();
        let t = Instant::now();
        let soon = t + Duration::from_millis(300);
        assert!(matches!(
            c.wait(&["k".into()], soon),
            Err(StoreError::Silent)
        ));
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    /// A port nobody listens on is named as such when the deadline ends
    /// the retries, whenever in a retry's pause it falls (it was called a
    /// server that "did not answer in time").
    #[test]
    fn a_store_nobody_listens_at_is_named_so_at_the_deadline() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        for ms in [1, 150, 290, 430, 610] {
            let until = Instant::now() + Duration::from_millis(ms);
            let e = open_probed(&[port], Dialect::New, "p", until)
                .map(|_| ())
                .unwrap_err();
            assert_eq!(
                e, "nothing listens there (Connection refused (os error 111))",
                "{ms} ms"
            );
        }
        let e = open_probed(&[port], Dialect::New, "p", Instant::now())
            .map(|_| ())
            .unwrap_err();
        assert_eq!(e, "no time was left to connect");
    }
}
