//! Meeting through a key-value store and barrier: one algorithm for every
//! exchange, our own stores (`tcp://`, `file://`) and the launchers'
//! (torchrun's TCPStore, a PMI-1 or PMIx server). A store only says how to
//! put, fence and get ([`Kv`]), and, where it can, how to watch for
//! another rank's abort and raise one.
//!
//! 1. Every rank puts `hello/<rank>` (its GPU count); fence.
//! 2. The last rank of each host tests the connections to the next host
//!    ([`crate::reach`]), times a transfer to it (round one of the pairs,
//!    [`crate::pairs`]), and puts `reach/<rank>` and `pair/<rank>`; fence.
//! 3. Rank 0 reads every hello, test and transfer. Where round one found a
//!    suspect link, it puts `round2` (the transfers of round two); fence;
//!    the ranks named there time them and put `pair2/<rank>`; fence. (A
//!    peer that finds no `round2` goes straight on.)
//! 4. Rank 0 judges what it read
//!    ([`crate::reach::Judge`]): a cause NCCL will fail on goes under
//!    `ruling` for every rank, and stops the job here (unless the job runs
//!    NCCL anyway). Otherwise it puts `plan` (the unique id, the NCCL ranks
//!    in all, and the GPU count when every process has the same one) and,
//!    only when the counts differ, `place/<rank>` (each one's first NCCL
//!    rank); fence. Every peer reads `ruling`, then `plan` (and its
//!    `place`).
//! 5. At the end every rank puts `done/<rank>` (its outcome); fence; rank 0
//!    reads every outcome; fence (so that no rank leaves the store, and a
//!    launcher drops what it put, before rank 0 has read it).
//!
//! Three fences to meet (five where a link was suspect), whatever the world size: each rank does O(1) work,
//! and rank 0 O(world). Between the meeting and the end, the same thread
//! looks for an abort every 250 ms ([`Kv::watch`]); a rank that fails
//! raises one ([`Kv::abort`]). The store's calls may block (a PMI server
//! that does not answer, a rank that never comes): they run on a thread of
//! their own, and the process waits for them only until the deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::reach::{Card, Gathered, Judge, Ruling};
use crate::words::{deadline_after, fail, then, Abort, Failed, PeerOutcome};

mod records;
mod steps;

use records::Done;
pub(crate) use steps::done_key;
use steps::{meet, outcomes, Learned};

/// A launcher's key-value store, as one rank sees it. Keys are short ASCII
/// words (letters, digits, `/`, `-`); values are bytes (a backend that
/// carries text encodes them).
pub trait Kv: Send {
    /// Publishes `value` under `key`, for every rank to read after the
    /// next fence.
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String>;
    /// Returns once every rank of the job has reached this fence, and what
    /// each put before it can be read; by `deadline` where the backend can
    /// tell (naming, in [`Failed::missing`], the ranks that never came).
    fn fence(&mut self, deadline: Instant) -> Result<(), Failed>;
    /// Reads `key` as rank `from` put it.
    fn get(&mut self, from: usize, key: &str) -> Result<Vec<u8>, String>;
    /// Leaves the store (best effort), by `until`: a store that waits for
    /// the others to leave first waits no longer than that.
    fn close(&mut self, _until: Instant) {}
    /// What the report should hear about the store itself (a slow one),
    /// once the ranks have met.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Why the job stops, when another rank said so or went away: looked
    /// at now and then while the rank runs (`None` where the store cannot
    /// tell; the launcher then ends the job itself).
    fn watch(&mut self) -> Option<String> {
        None
    }
    /// Tells the other ranks to stop (best effort): their [`Kv::watch`]
    /// sees it.
    fn abort(&mut self, _why: &str) {}
}

/// How to reach a launcher's store: what [`crate::job::Exchange::Launcher`]
/// holds. Made by the backend's row in [`super::BACKENDS`] from the
/// environment.
pub trait Connect: std::fmt::Debug + Send + Sync {
    /// Connects rank `rank` of `world`, by `deadline`.
    fn connect(&self, rank: usize, world: usize, deadline: Instant) -> Result<Box<dyn Kv>, String>;
    /// Where the store is, in words (never a secret): for the report.
    fn describe(&self) -> String;
    /// What the processes that never came are called in a failure (the
    /// launcher, and what to check).
    fn launcher(&self) -> &'static str;
}

/// The most GPUs one process may say it drives.
const MAX_GPUS: u32 = 1024;

/// The longest outcome message a rank leaves.
const MAX_MESSAGE: usize = 2000;

/// A thread's answer: what the rank learned, or why it failed.
type Reply<T> = Result<T, Failed>;

/// What a rank learns by meeting ([`Learned`]), and what the store says
/// of itself.
type Met = (Learned, Vec<String>);

/// What a rank brings to the meeting: its card, and (rank 0's) how the
/// meeting is judged.
pub(crate) struct Brought {
    /// What the others see of this rank.
    pub card: Card,
    /// Rank 0's judge of what every rank brought.
    pub judge: Option<Judge>,
    /// Whether a cause found goes on to NCCL all the same.
    pub run_anyway: bool,
}

enum Cmd {
    Finish {
        ok: bool,
        wrong: u64,
        message: String,
        times_us: Vec<u64>,
        deadline: Instant,
    },
}

/// The link to the store's thread, kept between the meeting and the end.
pub(crate) struct KvLink {
    cmds: mpsc::Sender<Cmd>,
    outcomes: mpsc::Receiver<Vec<PeerOutcome>>,
    rank: usize,
    world: usize,
}

/// Extra time past the deadline for a backend to say itself what timed out,
/// before the process stops waiting for it.
const GRACE: Duration = Duration::from_secs(2);

/// What to do instead of the launcher's server, at the end of a failure
/// to reach it.
const INSTEAD: &str =
    "Or pass --rank, --world-size and --init tcp://HOST:PORT to meet without the launcher's server";

/// How long to wait for the store's thread: until `deadline`, and [`GRACE`].
fn until_past(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .saturating_add(GRACE)
}

/// How a rank reaches its store: made by [`super::join`] from the
/// exchange, run on the store's thread, with a way to log (rank 0 names
/// the ranks it admitted).
pub(crate) type Opener =
    Box<dyn FnOnce(Instant, &mut dyn FnMut(String)) -> Result<Box<dyn Kv>, Failed> + Send>;

/// Whose store it is: a launcher's (its failures are prefixed with its
/// name and say what to do instead), or ours.
pub(crate) enum Whose {
    /// A launcher's, with where it is in words.
    Launcher(&'static str, String),
    /// Our own (`tcp://`, `file://`): its messages are whole already.
    Ours,
}

/// What the store's thread tells the waiting rank.
enum Up {
    /// A line for the log.
    Note(String),
    /// Rank 0's unique id is wanted now.
    NeedId,
    /// The meeting's end.
    Met(Box<Reply<Met>>),
}

/// How often a rank looks for another's abort while it runs.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// The store's thread's ends of the channels to the waiting rank.
struct ThreadEnds {
    up: mpsc::Sender<Up>,
    ids: mpsc::Receiver<Result<[u8; 128], String>>,
    cmds: mpsc::Receiver<Cmd>,
    outcomes: mpsc::Sender<Vec<PeerOutcome>>,
    abort: Arc<Abort>,
    /// Whether the store took this rank: at the deadline, a server that
    /// never answered is not "a rank never came".
    connected: Arc<AtomicBool>,
}

/// The store's thread: opens the store, meets, watches while the rank runs,
/// and ends the run.
fn store_thread(
    open: Opener,
    ends: ThreadEnds,
    rank: usize,
    world: usize,
    ngpus: usize,
    brought: Brought,
    deadline: Instant,
) {
    let notes = ends.up.clone();
    let mut kv = match open(deadline, &mut |m| {
        let _ = notes.send(Up::Note(m));
    }) {
        Ok(kv) => kv,
        Err(f) => {
            let _ = ends.up.send(Up::Met(Box::new(Err(f))));
            return;
        }
    };
    ends.connected.store(true, Ordering::SeqCst);
    // Rank 0's unique id is made on the waiting thread, which holds the
    // means: asked for here, when every rank has come.
    let mut id = || {
        let gone = |_| "the rank stopped waiting".to_string();
        ends.up.send(Up::NeedId).map_err(gone)?;
        ends.ids
            .recv()
            .map_err(|_| "the rank stopped waiting".to_string())?
    };
    let met = meet(kv.as_mut(), rank, world, ngpus, &brought, &mut id, deadline)
        .map(|learned| (learned, kv.notes()));
    // A failed meeting closes the store before the rank hears of it: the
    // process may end as soon as it does.
    if met.is_err() {
        kv.close(close_by(deadline));
        let _ = ends.up.send(Up::Met(Box::new(met)));
        return;
    }
    let _ = ends.up.send(Up::Met(Box::new(met)));
    match run_until_finished(kv.as_mut(), &ends.cmds, &ends.abort, rank, world) {
        Some((got, deadline)) => {
            kv.close(close_by(deadline));
            let _ = ends.outcomes.send(got);
        }
        None => kv.close(close_by(Instant::now())),
    }
}

/// When closing the store ends, for a step whose deadline is `deadline`:
/// within the [`GRACE`] the waiting rank gives the store's thread, with
/// time left to say what happened (a peer that stalled, named, rather
/// than a rendezvous that did not end).
fn close_by(deadline: Instant) -> Instant {
    deadline + GRACE / 2
}

/// Meets the other ranks through the store `open` reaches. Rank 0 makes
/// the unique id with `make_id` when every rank has come.
#[allow(clippy::too_many_arguments)]
pub(crate) fn join(
    open: Opener,
    whose: Whose,
    rank: usize,
    world: usize,
    ngpus: usize,
    brought: Brought,
    make_id: &dyn Fn() -> Result<[u8; 128], String>,
    timeout: Duration,
    log: &mut dyn FnMut(String),
) -> Result<Joined, Failed> {
    let deadline = deadline_after(timeout);
    let (up_tx, up_rx) = mpsc::channel::<Up>();
    let (id_tx, id_rx) = mpsc::channel();
    let (cmd_tx, cmd_rx) = mpsc::channel::<Cmd>();
    let (out_tx, out_rx) = mpsc::channel::<Vec<PeerOutcome>>();
    let abort = Arc::new(Abort::default());
    let connected = Arc::new(AtomicBool::new(false));
    let ends = ThreadEnds {
        up: up_tx,
        ids: id_rx,
        cmds: cmd_rx,
        outcomes: out_tx,
        abort: abort.clone(),
        connected: connected.clone(),
    };
    std::thread::Builder::new()
        .name("nccl-find-kv".into())
        .spawn(move || store_thread(open, ends, rank, world, ngpus, brought, deadline))
        .map_err(|e| fail(format!("cannot start a thread: {e}")))?;
    let until = Instant::now() + until_past(deadline);
    let met = meeting_end(&up_rx, &id_tx, make_id, until, log);
    match (met, whose) {
        (Some(Ok((learned, notes))), _) => {
            for n in notes {
                log(n);
            }
            let link = KvLink {
                cmds: cmd_tx,
                outcomes: out_rx,
                rank,
                world,
            };
            Ok(Joined {
                id: learned.id,
                nranks: learned.nranks,
                first_rank: learned.first_rank,
                abort,
                times_us: Vec::new(),
                gathered: learned.gathered,
                ruling: learned.ruling,
                link,
            })
        }
        (Some(Err(mut f)), Whose::Launcher(launcher, _)) => {
            f.message = format!("{launcher}: {}", f.message);
            Err(f)
        }
        (Some(Err(f)), Whose::Ours) => Err(f),
        (None, Whose::Launcher(launcher, where_)) => Err(timed_out(
            launcher,
            &where_,
            timeout,
            connected.load(Ordering::SeqCst),
        )),
        (None, Whose::Ours) => Err(fail(format!(
            "the rendezvous did not end within {:.0} s: raise --timeout, or check every rank's output",
            timeout.as_secs_f64()
        ))),
    }
}

/// What the store's thread says until the meeting ends (its lines logged,
/// rank 0's unique id made when it is wanted): the end, or `None` when
/// nothing came by `until`.
fn meeting_end(
    up: &mpsc::Receiver<Up>,
    ids: &mpsc::Sender<Result<[u8; 128], String>>,
    make_id: &dyn Fn() -> Result<[u8; 128], String>,
    until: Instant,
    log: &mut dyn FnMut(String),
) -> Option<Reply<Met>> {
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match up.recv_timeout(left) {
            Ok(Up::Note(m)) => log(m),
            Ok(Up::NeedId) => {
                let _ = ids.send(make_id());
            }
            Ok(Up::Met(m)) => return Some(*m),
            Err(_) => return None,
        }
    }
}

/// While the rank runs, looks for another's abort now and then; at the
/// end, leaves this rank's outcome and (rank 0) gets everyone's, with the
/// end's deadline. `None` when the rank went without finishing.
fn run_until_finished(
    kv: &mut dyn Kv,
    cmds: &mpsc::Receiver<Cmd>,
    abort: &Abort,
    rank: usize,
    world: usize,
) -> Option<(Vec<PeerOutcome>, Instant)> {
    loop {
        match cmds.recv_timeout(WATCH_EVERY) {
            Ok(Cmd::Finish {
                ok,
                wrong,
                message,
                times_us,
                deadline,
            }) => {
                if !ok {
                    kv.abort(&message);
                }
                let mine = Done {
                    ok,
                    wrong,
                    message: &message,
                    times_us: &times_us,
                };
                return Some((outcomes(kv, rank, world, &mine, deadline), deadline));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if abort.raised().is_none() {
                    if let Some(why) = kv.watch() {
                        abort.raise(why);
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return None,
        }
    }
}

/// A launcher's store, opened by its [`Connect`]: what [`Opener`] runs.
pub(crate) fn launcher_opener(via: Arc<dyn Connect>, rank: usize, world: usize) -> Opener {
    Box::new(move |deadline, _log| {
        via.connect(rank, world, deadline)
            .map_err(|e| fail(then(&e, INSTEAD)))
    })
}

/// The meeting's deadline passed: the launcher's server never took this
/// rank (`connected` false), or some rank never came.
fn timed_out(launcher: &str, where_: &str, timeout: Duration, connected: bool) -> Failed {
    if !connected {
        return fail(format!(
            "{launcher}: no answer from {where_} within {:.0} s: is the launcher still running, and did it \
             start this process? {INSTEAD}",
            timeout.as_secs_f64()
        ));
    }
    fail(format!(
        "{launcher}: the processes did not all meet through {where_} within {:.0} s: a rank never came (it \
         failed to start, or was started outside this job), or the launcher's server stopped answering. \
         Check every rank's output, or raise --timeout",
        timeout.as_secs_f64()
    ))
}

impl KvLink {
    /// Leaves this rank's outcome; rank 0 gets everyone's, by `deadline`
    /// (a peer whose outcome never came is `None`).
    pub(crate) fn finish(
        self,
        ok: bool,
        wrong: u64,
        message: &str,
        times_us: Vec<u64>,
        deadline: Instant,
    ) -> Vec<PeerOutcome> {
        let sent = self.cmds.send(Cmd::Finish {
            ok,
            wrong,
            message: message.to_string(),
            times_us,
            deadline,
        });
        let wait = until_past(deadline);
        match sent
            .ok()
            .and_then(|_| self.outcomes.recv_timeout(wait).ok())
        {
            Some(got) => got,
            // Rank 0: every peer's outcome is missing.
            None if self.rank == 0 => (1..self.world)
                .map(|rank| PeerOutcome {
                    rank,
                    done: None,
                    times_us: Vec::new(),
                    why: None,
                })
                .collect(),
            // A peer: rank 0's word on the job is, never this rank's own.
            None => vec![PeerOutcome {
                rank: 0,
                done: None,
                times_us: Vec::new(),
                why: Some(
                    "at the end of the job: no word from rank 0 by the deadline (it hangs, or \
                     died)"
                        .into(),
                ),
            }],
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
    /// Raised when another rank goes away, or stops the job.
    pub abort: Arc<Abort>,
    /// What [`Joined::report_times`] set, for rank 0.
    times_us: Vec<u64>,
    /// Rank 0's: every rank's [`Card`] and the connections tested between
    /// hosts (`None` on the other ranks).
    pub gathered: Option<Gathered>,
    /// Rank 0's ruling, on every rank, where it found a cause NCCL will
    /// fail on. Where it stops the job ([`Ruling::stop`]) there is no
    /// unique id: the caller ends with the cause ([`Joined::finish`] still
    /// closes the store).
    pub ruling: Option<Ruling>,
    link: KvLink,
}

impl Joined {
    /// Every rank leaves its outcome; rank 0 collects everyone's (waiting
    /// until `timeout` from now), and the store is closed (our file store's
    /// files removed).
    pub fn finish(
        self,
        ok: bool,
        wrong: u64,
        message: &str,
        timeout: Duration,
    ) -> Vec<PeerOutcome> {
        self.link
            .finish(ok, wrong, message, self.times_us, deadline_after(timeout))
    }

    /// Times this rank reports to rank 0 with its outcome, in microseconds
    /// (at most 8 are sent; what each means is the caller's to say): rank 0
    /// finds them in [`PeerOutcome::times_us`].
    pub fn report_times(&mut self, times_us: &[u64]) {
        self.times_us = times_us.to_vec();
    }
}

#[cfg(test)]
mod tests;
