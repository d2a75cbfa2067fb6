//! The deadline keeper of blocking communicators. The run thread calls NCCL
//! as a plain program would (blocking communicators, back-to-back calls, so
//! the timing is NCCL's own); this thread watches each step's deadline,
//! NCCL's asynchronous errors and the other ranks, and on any of them calls
//! `ncclCommAbort` on every communicator, which makes NCCL's kernels and
//! calls return. Should NCCL still not give the run thread back, the
//! process ends with the failure (exit status 1) a few seconds later: the
//! deadline holds whatever NCCL does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::nccl::{self, NcclComm};
use crate::report::{hint, Failure};
use nccl_rendezvous as rendezvous;

/// How long the run thread gets, after the aborts, to come back.
pub const GRACE: Duration = Duration::from_secs(10);

/// How often the watchdog looks at NCCL's errors and the other ranks.
const TICK: Duration = Duration::from_millis(20);

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

    /// Runs `f`, an NCCL call of the run thread, marked as inside NCCL.
    pub fn inside_nccl<T>(&self, f: impl FnOnce() -> T) -> T {
        self.in_nccl.store(true, Ordering::Release);
        let r = f();
        self.in_nccl.store(false, Ordering::Release);
        r
    }

    /// Whether the watchdog stopped the run (cheap: one atomic load).
    pub fn has_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    /// Why the watchdog stopped the run.
    pub fn failure(&self) -> Option<Failure> {
        self.lock().fired.clone()
    }

    /// The run is over: the communicators left (none if they were aborted)
    /// are the caller's to destroy.
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
            self.fired.store(true, Ordering::Release);
        }
        // A run thread outside NCCL (waiting on its streams) sees the flag
        // at once and aborts the communicators itself, with no NCCL call in
        // flight; one held inside NCCL needs the abort from here.
        let asked = Instant::now();
        let mut s = self.lock();
        while !s.stop
            && !self.in_nccl.load(Ordering::Acquire)
            && asked.elapsed() < Duration::from_millis(200)
        {
            s = self
                .cv
                .wait_timeout(s, Duration::from_millis(5))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        if s.stop {
            return;
        }
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
                                    Failure::Nccl {
                                        what: "an NCCL operation".into(),
                                        error: text,
                                        hint: hint(bad),
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
