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
use std::net::TcpStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::job::Job;
use crate::kv::{done_key, Kv};
use crate::untrusted::peer_text;
use crate::wire::{kind_name, read_msg, send, timed_out, Msg};
use crate::words::{fail, list, Failed};

mod lobby;
mod notes;
#[cfg(test)]
mod tests;

pub(crate) use lobby::*;
#[cfg(test)]
pub(crate) use notes::{joined_lines, JOINED_SHOWN};

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
