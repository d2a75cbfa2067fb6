//! The deadline keeper of blocking communicators. The run thread calls NCCL
//! as a plain program would (blocking communicators, back-to-back calls, so
//! the timing is NCCL's own); this thread watches each step's deadline,
//! NCCL's asynchronous errors and the other ranks, and on any of them calls
//! `ncclCommAbort` on every communicator, which makes NCCL's kernels and
//! calls return. Should NCCL still not give the run thread back, the
//! process ends with the failure (exit status 1) a few seconds later: the
//! deadline holds whatever NCCL does.
//!
//! Queuing stops before any abort. Once the watchdog fires, the run thread
//! starts no NCCL call ([`Watchdog::inside_nccl`] refuses it), and a thread
//! outside NCCL stops at its next look at the flag and aborts the
//! communicators itself (`Run::abort_live`).
//! The watchdog aborts only a thread held inside one NCCL call for
//! [`HELD`], which NCCL allows beside a call in flight; never one that is
//! between calls of a batch, where the next call would find a freed
//! communicator ("corrupted comm object detected").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::nccl::{self, NcclComm};
use crate::report::Failure;
use nccl_rendezvous as rendezvous;

/// How long the run thread gets, after the aborts, to come back.
pub const GRACE: Duration = Duration::from_secs(10);

/// How often the watchdog looks at NCCL's errors and the other ranks.
const TICK: Duration = Duration::from_millis(20);

/// How long the run thread must stay inside one NCCL call, once the
/// watchdog has fired, before the watchdog aborts under it.
pub const HELD: Duration = Duration::from_millis(200);

#[derive(Default)]
struct State {
    /// The step under way: what to say when late, and its deadline.
    step: Option<(String, Instant)>,
    /// Live communicators (as addresses).
    comms: Vec<usize>,
    /// Look at `ncclCommGetAsyncError` (once the communicators are ready).
    poll_errors: bool,
    /// Why the run was stopped.
    fired: Option<Failure>,
    /// The run is over.
    stop: bool,
}

/// The watchdog, shared by the run thread and its own.
pub struct Watchdog {
    state: Mutex<State>,
    cv: Condvar,
    fired: AtomicBool,
    /// The run thread is inside an NCCL call.
    in_nccl: AtomicBool,
    /// The NCCL calls the run thread has entered.
    calls: AtomicU64,
}

/// What the watchdog needs of NCCL (plain function pointers).
#[derive(Clone, Copy)]
pub struct NcclFns {
    /// `ncclCommAbort`.
    pub abort: Option<unsafe extern "C" fn(NcclComm) -> nccl::NcclResult>,
    /// `ncclCommGetAsyncError`.
    pub async_error: Option<nccl::AsyncErrorFn>,
    /// `ncclGetErrorString`.
    pub error_string: unsafe extern "C" fn(nccl::NcclResult) -> *const std::ffi::c_char,
}

impl Watchdog {
    /// Starts the watchdog thread.
    pub fn start(fns: NcclFns, abort: Option<Arc<rendezvous::Abort>>) -> Arc<Watchdog> {
        let dog = Arc::new(Watchdog {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            fired: AtomicBool::new(false),
            in_nccl: AtomicBool::new(false),
            calls: AtomicU64::new(0),
        });
        let d = dog.clone();
        std::thread::Builder::new()
            .name("nccl-find-watchdog".into())
            .spawn(move || d.watch(fns, abort))
            .ok();
        dog
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A step begins: `late` is the failure's text if `deadline` passes.
    pub fn arm(&self, late: String, deadline: Instant) {
        self.lock().step = Some((late, deadline));
        self.cv.notify_all();
    }

    /// The step ended in time.
    pub fn disarm(&self) {
        self.lock().step = None;
    }

    /// The communicators to abort if need be.
    pub fn set_comms(&self, comms: &[NcclComm], poll_errors: bool) {
        let mut s = self.lock();
        s.comms = comms
            .iter()
            .filter(|c| !c.is_null())
            .map(|c| *c as usize)
            .collect();
        s.poll_errors = poll_errors;
    }

    /// Runs `f`, an NCCL call of the run thread, marked as inside NCCL;
    /// `None`, without calling it, once the watchdog has fired: no call
    /// starts on a communicator that may be aborted. (Sequentially
    /// consistent with [`Watchdog::fire`]: either this sees the flag, or
    /// the watchdog sees the call under way.)
    pub fn inside_nccl<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.in_nccl.store(true, Ordering::SeqCst);
        if self.fired.load(Ordering::SeqCst) {
            self.in_nccl.store(false, Ordering::SeqCst);
            return None;
        }
        let r = f();
        self.in_nccl.store(false, Ordering::SeqCst);
        Some(r)
    }

    /// Whether the watchdog stopped the run (cheap: one atomic load).
    pub fn has_fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Why the watchdog stopped the run.
    pub fn failure(&self) -> Option<Failure> {
        self.lock().fired.clone()
    }

    /// The run is over: the communicators left (none if they were aborted)
    /// are the caller's to destroy, or to abort after a failure.
    pub fn stop(&self) -> Vec<NcclComm> {
        let mut s = self.lock();
        s.stop = true;
        self.cv.notify_all();
        std::mem::take(&mut s.comms)
            .into_iter()
            .map(|c| c as NcclComm)
            .collect()
    }

    fn fire(&self, why: Failure, fns: &NcclFns) {
        {
            let mut s = self.lock();
            if s.fired.is_some() || s.stop {
                return;
            }
            s.fired = Some(why.clone());
            self.fired.store(true, Ordering::SeqCst);
        }
        // Queuing stops first: the run thread starts no NCCL call now, and
        // one outside NCCL (between the calls of a batch, waiting on its
        // streams) stops at its next look and aborts the communicators
        // itself. Only a thread held inside the same NCCL call for HELD
        // needs the abort from here; one that never comes back gets it
        // after GRACE.
        let Some(mut s) = self.held_inside() else {
            return;
        };
        let comms = std::mem::take(&mut s.comms);
        drop(s);
        if let Some(abort) = fns.abort {
            for c in &comms {
                // SAFETY: a live communicator of this run, aborted once
                // (taken out of the list under the lock); NCCL allows the
                // abort while another thread is inside a call on it.
                unsafe { abort(*c as NcclComm) };
            }
        }
        // The run thread should now return; if NCCL holds it, end here.
        let until = Instant::now()
            + if comms.is_empty() {
                Duration::ZERO
            } else {
                GRACE
            };
        let mut s = self.lock();
        while !s.stop {
            let now = Instant::now();
            if now >= until {
                let _ = std::io::Write::write_all(
                    &mut std::io::stderr(),
                    format!(
                        "nccl-find smoke: FAILED: {why}{}\n",
                        if comms.is_empty() {
                            " (NCCL had not handed out its communicators, so nothing could abort them)"
                        } else {
                            " (NCCL did not return after ncclCommAbort)"
                        }
                    )
                    .as_bytes(),
                );
                nccl_rendezvous::cleanup::run_cleanups();
                std::process::exit(1);
            }
            s = self
                .cv
                .wait_timeout(s, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Waits, once fired, until the run thread is held inside one NCCL
    /// call for [`HELD`], or [`GRACE`] has passed: the lock to abort
    /// under. `None` when the run ended meanwhile (its thread aborts).
    fn held_inside(&self) -> Option<std::sync::MutexGuard<'_, State>> {
        let asked = Instant::now();
        let mut inside_since: Option<(u64, Instant)> = None;
        let mut s = self.lock();
        loop {
            if s.stop {
                return None;
            }
            let call = self.calls.load(Ordering::SeqCst);
            inside_since = match (self.in_nccl.load(Ordering::SeqCst), inside_since) {
                (true, Some((c, t))) if c == call => Some((c, t)),
                (true, _) => Some((call, Instant::now())),
                (false, _) => None,
            };
            let held = inside_since.is_some_and(|(_, t)| t.elapsed() >= HELD);
            if held || asked.elapsed() >= GRACE {
                return Some(s);
            }
            s = self
                .cv
                .wait_timeout(s, Duration::from_millis(5))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn watch(&self, fns: NcclFns, abort: Option<Arc<rendezvous::Abort>>) {
        loop {
            let why = {
                let s = self.lock();
                if s.stop || s.fired.is_some() {
                    return;
                }
                let s = self
                    .cv
                    .wait_timeout(s, TICK)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                if s.stop || s.fired.is_some() {
                    return;
                }
                let late = s
                    .step
                    .as_ref()
                    .filter(|(_, d)| Instant::now() >= *d)
                    .map(|(m, _)| Failure::Timeout(m.clone()));
                let gone = || {
                    abort
                        .as_ref()
                        .and_then(|a| a.raised())
                        .map(Failure::PeerGone)
                };
                // Under the lock, so that no communicator is destroyed meanwhile.
                let errors = || {
                    s.poll_errors
                        .then_some(())
                        .and(fns.async_error)
                        .and_then(|get| {
                            s.comms.iter().find_map(|c| {
                                let mut state = nccl::SUCCESS;
                                // SAFETY: a live communicator (the list is emptied
                                // under this lock before any is aborted or destroyed);
                                // writes one int.
                                let rc = unsafe { get(*c as NcclComm, &mut state) };
                                let bad = if rc != nccl::SUCCESS { rc } else { state };
                                (bad != nccl::SUCCESS && bad != nccl::IN_PROGRESS).then(|| {
                                    // SAFETY: returns a static string.
                                    let text = unsafe {
                                        std::ffi::CStr::from_ptr((fns.error_string)(bad))
                                    }
                                    .to_string_lossy()
                                    .into_owned();
                                    Failure::NcclLib {
                                        what: "an NCCL operation".into(),
                                        error: text,
                                        rc: bad,
                                    }
                                })
                            })
                        })
                };
                late.or_else(gone).or_else(errors)
            };
            if let Some(why) = why {
                return self.fire(why, &fns);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// The aborts of each test, by the fake communicator's address.
    static ABORTS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
    /// Calls of each test that started after its abort.
    static LATE: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

    unsafe extern "C" fn abort(c: NcclComm) -> nccl::NcclResult {
        ABORTS[c as usize - 1].fetch_add(1, Ordering::SeqCst);
        nccl::SUCCESS
    }

    unsafe extern "C" fn error_string(_: nccl::NcclResult) -> *const std::ffi::c_char {
        b"error\0".as_ptr().cast()
    }

    /// A watchdog over the fake communicator `which`.
    fn dog_over(which: usize) -> Arc<Watchdog> {
        let fns = NcclFns {
            abort: Some(abort),
            async_error: None,
            error_string,
        };
        let dog = Watchdog::start(fns, None);
        dog.set_comms(&[which as NcclComm], false);
        dog
    }

    /// A batch of short calls outlives its deadline: the watchdog aborts
    /// nothing while the calls are queued; the run thread stops queuing at
    /// once (no call starts after the flag) and aborts them itself.
    #[test]
    fn a_batch_of_calls_stops_queuing_before_any_abort() {
        let dog = dog_over(1);
        dog.arm("late".into(), Instant::now());
        let start = Instant::now();
        let mut made = 0;
        while start.elapsed() < Duration::from_secs(5) {
            let r = dog.inside_nccl(|| {
                if ABORTS[0].load(Ordering::SeqCst) > 0 {
                    LATE[0].fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(1));
            });
            if r.is_none() {
                break;
            }
            made += 1;
        }
        assert!(dog.has_fired(), "the deadline had passed");
        assert!(made < 5000, "the run thread went on queuing");
        // The run thread's own cleanup takes the communicators.
        assert_eq!(dog.stop().len(), 1);
        assert_eq!(ABORTS[0].load(Ordering::SeqCst), 0);
        assert_eq!(LATE[0].load(Ordering::SeqCst), 0);
        assert!(matches!(dog.failure(), Some(Failure::Timeout(m)) if m == "late"));
    }

    /// A run thread held inside one NCCL call is aborted by the watchdog,
    /// after HELD, and starts no call after it.
    #[test]
    fn a_call_held_inside_nccl_is_aborted_under_it() {
        let dog = dog_over(2);
        let held = dog.inside_nccl(|| {
            // Late from inside the call: the watchdog finds it under way.
            dog.arm("late".into(), Instant::now());
            let start = Instant::now();
            while ABORTS[1].load(Ordering::SeqCst) == 0 && start.elapsed() < Duration::from_secs(5)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            start.elapsed()
        });
        let waited = held.expect("the call started before the deadline");
        assert_eq!(ABORTS[1].load(Ordering::SeqCst), 1);
        assert!(waited >= HELD - Duration::from_millis(50), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        assert!(dog.inside_nccl(|| ()).is_none());
        assert_eq!(dog.stop().len(), 0);
    }
}
