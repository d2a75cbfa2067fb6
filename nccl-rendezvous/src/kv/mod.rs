//! Meeting through a key-value store and barrier: one algorithm for every
//! exchange, our own stores (`tcp://`, `file://`) and the launchers'
//! (torchrun's TCPStore, a PMI-1 or PMIx server). A store only says how to
//! put, fence and get ([`Kv`]), and, where it can, how to watch for
//! another rank's abort and raise one.
//!
//! 1. Every rank puts `hello/<rank>` (its GPU count); fence.
//! 2. The last rank of each host tests the connections to the next host
//!    ([`crate::reach`]) and puts `reach/<rank>`; fence.
//! 3. Rank 0 reads every hello and every test, and judges them
//!    ([`crate::reach::Judge`]): a cause NCCL will fail on goes under
//!    `ruling` for every rank, and stops the job here (unless the job runs
//!    NCCL anyway). Otherwise it puts `plan` (the unique id, the NCCL ranks
//!    in all, and the GPU count when every process has the same one) and,
//!    only when the counts differ, `place/<rank>` (each one's first NCCL
//!    rank); fence. Every peer reads `ruling`, then `plan` (and its
//!    `place`).
//! 4. At the end every rank puts `done/<rank>` (its outcome); fence; rank 0
//!    reads every outcome; fence (so that no rank leaves the store, and a
//!    launcher drops what it put, before rank 0 has read it).
//!
//! Three fences to meet, whatever the world size: each rank does O(1) work,
//! and rank 0 O(world). Between the meeting and the end, the same thread
//! looks for an abort every 250 ms ([`Kv::watch`]); a rank that fails
//! raises one ([`Kv::abort`]). The store's calls may block (a PMI server
//! that does not answer, a rank that never comes): they run on a thread of
//! their own, and the process waits for them only until the deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::reach::{self, Card, Gathered, Judge, Ruling};
use crate::untrusted::{cut, peer_text};
use crate::words::{deadline_after, fail, offsets, then, Abort, Failed, PeerOutcome};

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
            None => (1..self.world)
                .map(|rank| PeerOutcome {
                    rank,
                    done: None,
                    times_us: Vec::new(),
                    why: None,
                })
                .collect(),
        }
    }
}

fn key(what: &str, rank: usize) -> String {
    format!("nccl-find/{what}/{rank}")
}

/// The key rank `rank`'s outcome goes under: a store that sees a rank go
/// before it has put this one has lost that rank.
pub(crate) fn done_key(rank: usize) -> String {
    key("done", rank)
}

const PLAN: &str = "nccl-find/plan";

/// What a rank learns by meeting.
struct Learned {
    /// NCCL's unique id (zeros where the job stops).
    id: [u8; 128],
    /// The NCCL ranks in all.
    nranks: usize,
    /// This rank's first.
    first_rank: usize,
    /// Rank 0's: what every rank brought.
    gathered: Option<Gathered>,
    /// Rank 0's ruling, where it found a cause.
    ruling: Option<Ruling>,
}

const RULING: &str = "nccl-find/ruling";

/// Steps 1 to 3: the connections between hosts tested ([`crate::reach`]),
/// rank 0's ruling on them, the unique id, the NCCL ranks in all, this
/// rank's first.
fn meet(
    kv: &mut dyn Kv,
    rank: usize,
    world: usize,
    ngpus: usize,
    brought: &Brought,
    make_id: &mut dyn FnMut() -> Result<[u8; 128], String>,
    deadline: Instant,
) -> Reply<Learned> {
    let card = &brought.card;
    let n = u32::try_from(ngpus)
        .ok()
        .filter(|n| (1..=MAX_GPUS).contains(n))
        .ok_or_else(|| fail(format!("{ngpus} GPUs is not a GPU count")))?;
    // Open until every test of this rank's addresses is done (the second
    // fence).
    let listening = reach::listen(card);
    kv.put(&key("hello", rank), &reach::hello(n, card, &listening))
        .map_err(fail)?;
    kv.fence(deadline)?;
    let tested = test_boundaries(kv, rank, world, &card.host, deadline);
    if !tested.is_empty() {
        kv.put(&key("reach", rank), &reach::results(&tested))
            .map_err(fail)?;
    }
    kv.fence(deadline)?;
    drop(listening);
    if rank == 0 {
        return rule(kv, world, brought, make_id, deadline);
    }
    kv.fence(deadline)?;
    let ruling = match kv.get(0, RULING) {
        Ok(b) => Some(
            reach::read_ruling(&b)
                .ok_or_else(|| fail("rank 0's ruling is malformed (another program wrote it?)"))?,
        ),
        Err(_) => None,
    };
    if ruling.as_ref().is_some_and(|r| r.stop) {
        return Ok(Learned {
            id: [0u8; 128],
            nranks: 0,
            first_rank: 0,
            gathered: None,
            ruling,
        });
    }
    let plan = kv.get(0, PLAN).map_err(fail)?;
    let (id, nranks, first_rank) = read_plan(&plan, rank, world, |r| kv.get(0, &key("place", r)))?;
    Ok(Learned {
        id,
        nranks,
        first_rank,
        gathered: None,
        ruling,
    })
}

/// Rank 0, step 3: every hello and every test read and judged; the
/// ruling, where there is a cause, and the plan, unless the ruling stops
/// the job; the fence.
fn rule(
    kv: &mut dyn Kv,
    world: usize,
    brought: &Brought,
    make_id: &mut dyn FnMut() -> Result<[u8; 128], String>,
    deadline: Instant,
) -> Reply<Learned> {
    let mut hellos = Vec::with_capacity(world);
    for r in 0..world {
        let b = kv.get(r, &key("hello", r)).map_err(fail)?;
        let h = reach::read_hello(&b)
            .filter(|h| (1..=MAX_GPUS).contains(&h.ngpus))
            .ok_or_else(|| {
                fail(format!(
                    "rank {r} left a hello that is malformed (another program wrote it?)"
                ))
            })?;
        hellos.push(h);
    }
    let counts: Vec<usize> = hellos.iter().map(|h| h.ngpus as usize).collect();
    let gathered = gather(kv, hellos);
    let mut ruling = brought
        .judge
        .and_then(|j| j(&gathered))
        .map(|cause| Ruling {
            cause,
            stop: !brought.run_anyway,
        });
    // Made once every rank is here and nothing known stops the job:
    // NCCL's side of it (its bootstrap root) starts only for a job that
    // can run. Where it cannot be made, that is the job's cause.
    let id = match &ruling {
        Some(r) if r.stop => [0u8; 128],
        _ => match make_id() {
            Ok(id) => id,
            Err(e) => {
                ruling = Some(Ruling {
                    cause: format!("rank 0 could not make NCCL's unique id: {e}"),
                    stop: true,
                });
                [0u8; 128]
            }
        },
    };
    if let Some(r) = &ruling {
        kv.put(RULING, &reach::ruling_bytes(r)).map_err(fail)?;
    }
    let (first, nranks) = offsets(&counts);
    if !ruling.as_ref().is_some_and(|r| r.stop) {
        let uniform = counts.iter().all(|c| *c == counts[0]);
        let mut plan = id.to_vec();
        plan.extend_from_slice(&(nranks as u64).to_le_bytes());
        plan.push(u8::from(uniform));
        plan.extend_from_slice(&(counts[0] as u32).to_le_bytes());
        kv.put(PLAN, &plan).map_err(fail)?;
        if !uniform {
            for (r, f) in first.iter().enumerate().skip(1) {
                kv.put(&key("place", r), &(*f as u64).to_le_bytes())
                    .map_err(fail)?;
            }
        }
    }
    kv.fence(deadline)?;
    Ok(Learned {
        id,
        nranks,
        first_rank: 0,
        gathered: Some(gathered),
        ruling,
    })
}

/// The tests this rank makes: where it is the last of its host's, every
/// address of the next rank's, and of rank 0's unless rank 0 is on this
/// host or next. Each result by the rank tried.
fn test_boundaries(
    kv: &mut dyn Kv,
    rank: usize,
    world: usize,
    host: &str,
    deadline: Instant,
) -> Vec<(usize, reach::Tries)> {
    let mut hello_of = |r: usize| {
        kv.get(r, &key("hello", r))
            .ok()
            .and_then(|b| reach::read_hello(&b))
    };
    let next = (rank + 1) % world;
    let Some(h) = hello_of(next).filter(|h| world > 1 && reach::at_boundary(host, &h.card.host))
    else {
        return Vec::new();
    };
    let mut out = vec![(next, reach::probe(&h, deadline))];
    if rank != 0 && next != 0 {
        if let Some(h0) = hello_of(0).filter(|h0| reach::at_boundary(host, &h0.card.host)) {
            out.push((0, reach::probe(&h0, deadline)));
        }
    }
    out
}

/// Rank 0, once the ranks have met: every card, and the results of every
/// rank at a boundary (one whose results are missing or malformed is left
/// out).
fn gather(kv: &mut dyn Kv, hellos: Vec<reach::Hello>) -> Gathered {
    let world = hellos.len();
    let mut probes = Vec::new();
    for r in 0..world {
        let next = &hellos[(r + 1) % world].card.host;
        if world < 2 || !reach::at_boundary(&hellos[r].card.host, next) {
            continue;
        }
        if let Some(mut p) = kv
            .get(r, &key("reach", r))
            .ok()
            .and_then(|b| reach::read_results(r, &b, &hellos))
        {
            probes.append(&mut p);
        }
    }
    Gathered {
        cards: hellos.into_iter().map(|h| h.card).collect(),
        probes,
    }
}

fn le_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

fn le_u64(b: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// A peer's reading of rank 0's plan (and, where the GPU counts differ, of
/// its place): anything malformed is a failure, never a panic.
fn read_plan(
    plan: &[u8],
    rank: usize,
    world: usize,
    mut place: impl FnMut(usize) -> Result<Vec<u8>, String>,
) -> Reply<([u8; 128], usize, usize)> {
    let bad = || fail("rank 0's plan is malformed (another program wrote it?)");
    if plan.len() != 128 + 8 + 1 + 4 {
        return Err(bad());
    }
    let mut id = [0u8; 128];
    id.copy_from_slice(&plan[..128]);
    let nranks = le_u64(&plan[128..136]).ok_or_else(bad)?;
    let each = le_u32(&plan[137..141]).ok_or_else(bad)? as u64;
    let limit = world as u64 * u64::from(MAX_GPUS);
    if nranks == 0 || nranks > limit {
        return Err(bad());
    }
    let first = match plan[136] {
        1 => rank as u64 * each,
        0 => le_u64(&place(rank).map_err(fail)?).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if first >= nranks {
        return Err(bad());
    }
    Ok((id, nranks as usize, first as usize))
}

/// The most times one rank reports.
const MAX_TIMES: usize = 8;

/// One rank's outcome, as it leaves it.
struct Done<'a> {
    ok: bool,
    wrong: u64,
    message: &'a str,
    times_us: &'a [u64],
}

/// An outcome as the store carries it: right (a byte), wrong elements,
/// the count of times and each (little-endian), then the message.
fn encode_done(d: &Done) -> Vec<u8> {
    let mut v = vec![u8::from(d.ok)];
    v.extend_from_slice(&d.wrong.to_le_bytes());
    let times = &d.times_us[..d.times_us.len().min(MAX_TIMES)];
    v.push(times.len() as u8);
    for t in times {
        v.extend_from_slice(&t.to_le_bytes());
    }
    v.extend_from_slice(cut(d.message, MAX_MESSAGE).as_bytes());
    v
}

/// Step 3: this rank's outcome for rank 0; rank 0 gets every peer's.
fn outcomes(
    kv: &mut dyn Kv,
    rank: usize,
    world: usize,
    mine: &Done,
    deadline: Instant,
) -> Vec<PeerOutcome> {
    let fenced = kv
        .put(&key("done", rank), &encode_done(mine))
        .map_err(|e| e.to_string())
        .and_then(|()| kv.fence(deadline).map_err(|f| f.message));
    let got = if rank == 0 {
        (1..world)
            .map(|r| match &fenced {
                Ok(()) => {
                    let read = kv.get(r, &key("done", r)).ok().and_then(|b| read_done(&b));
                    PeerOutcome {
                        rank: r,
                        times_us: read.as_ref().map(|d| d.3.clone()).unwrap_or_default(),
                        done: read.map(|(ok, wrong, m, _)| (ok, wrong, m)),
                        why: None,
                    }
                }
                Err(why) => PeerOutcome {
                    rank: r,
                    done: None,
                    times_us: Vec::new(),
                    why: Some(why.clone()),
                },
            })
            .collect()
    } else {
        Vec::new()
    };
    // Rank 0 tells every rank how the job went: the ranks that failed or
    // never reported (rank 0 among them), so that a rank whose own run was
    // right does not end "OK" in a job that failed.
    if fenced.is_ok() && rank == 0 {
        let _ = kv.put(&key("job", 0), &encode_job(mine, &got));
    }
    let fenced = fenced.is_ok();
    // Nobody leaves the store before rank 0 has read every outcome: a
    // launcher may drop what a process put once that process is gone.
    if fenced && kv.fence(deadline).is_ok() && rank != 0 {
        if let Ok(b) = kv.get(0, &key("job", 0)) {
            return read_job(&b, rank);
        }
    }
    got
}

/// How many failed ranks rank 0 tells the others of, and how much of each
/// one's words.
const JOB_RANKS: usize = 4;
const JOB_MESSAGE: usize = 400;

/// The job's failures as rank 0 tells them: for each of the first
/// [`JOB_RANKS`] ranks that failed or never reported, its rank (u64), 0
/// and its outcome ([`encode_done`], words cut to [`JOB_MESSAGE`]) or 1
/// and why it never reported.
fn encode_job(mine: &Done, peers: &[PeerOutcome]) -> Vec<u8> {
    let mut entries: Vec<(usize, u8, Vec<u8>)> = Vec::new();
    if !mine.ok {
        let d = Done {
            message: cut(mine.message, JOB_MESSAGE),
            times_us: &[],
            ..*mine
        };
        entries.push((0, 0, encode_done(&d)));
    }
    for p in peers {
        let entry = match &p.done {
            Some((true, _, _)) => continue,
            Some((ok, wrong, m)) => {
                let d = Done {
                    ok: *ok,
                    wrong: *wrong,
                    message: cut(m, JOB_MESSAGE),
                    times_us: &[],
                };
                (p.rank, 0, encode_done(&d))
            }
            None => (
                p.rank,
                1,
                cut(p.why.as_deref().unwrap_or(""), JOB_MESSAGE)
                    .as_bytes()
                    .to_vec(),
            ),
        };
        entries.push(entry);
    }
    let mut v = Vec::new();
    for (rank, kind, bytes) in entries.into_iter().take(JOB_RANKS) {
        v.extend_from_slice(&(rank as u64).to_le_bytes());
        v.push(kind);
        v.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        v.extend_from_slice(&bytes);
    }
    v
}

/// The job's failures from rank 0, as this rank's `PeerOutcome`s (its
/// own left out); malformed parts are dropped, never a panic.
fn read_job(b: &[u8], me: usize) -> Vec<PeerOutcome> {
    let mut out = Vec::new();
    let mut at = 0;
    while out.len() < JOB_RANKS && b.len() >= at + 13 {
        let Some(rank) = le_u64(&b[at..at + 8]) else {
            break;
        };
        let kind = b[at + 8];
        let len = u32::from_le_bytes([b[at + 9], b[at + 10], b[at + 11], b[at + 12]]) as usize;
        let Some(body) = b.get(at + 13..at + 13 + len) else {
            break;
        };
        at += 13 + len;
        let rank = usize::try_from(rank).unwrap_or(usize::MAX);
        if rank == me {
            continue;
        }
        let outcome = match kind {
            0 => match read_done(body) {
                Some((ok, wrong, m, _)) => PeerOutcome {
                    rank,
                    done: Some((ok, wrong, m)),
                    times_us: Vec::new(),
                    why: None,
                },
                None => continue,
            },
            _ => PeerOutcome {
                rank,
                done: None,
                times_us: Vec::new(),
                why: Some(String::from_utf8_lossy(body).into_owned()).filter(|w| !w.is_empty()),
            },
        };
        out.push(outcome);
    }
    out
}

/// An outcome back: `None` when it is malformed.
fn read_done(b: &[u8]) -> Option<(bool, u64, String, Vec<u64>)> {
    if b.len() < 10 || b.len() > 10 + 8 * MAX_TIMES + MAX_MESSAGE {
        return None;
    }
    let ok = match b[0] {
        0 => false,
        1 => true,
        _ => return None,
    };
    let wrong = le_u64(&b[1..9])?;
    let n = usize::from(b[9]);
    if n > MAX_TIMES || b.len() < 10 + 8 * n {
        return None;
    }
    let times = b[10..10 + 8 * n].chunks(8).filter_map(le_u64).collect();
    let message = &b[10 + 8 * n..];
    if message.len() > MAX_MESSAGE {
        return None;
    }
    // A peer's words, through a store anyone who reaches it may write:
    // shown escaped, never raw.
    Some((
        ok,
        wrong,
        peer_text(&String::from_utf8_lossy(message)),
        times,
    ))
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
