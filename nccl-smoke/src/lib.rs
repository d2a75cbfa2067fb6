//! # nccl-smoke
//!
//! The run-time smoke test behind `nccl-find smoke`: verified NCCL
//! collectives (the all-reduce by default, and every other [`ops`]) in
//! every [`Redop`] and [`Dtype`], on every GPU, in one process or across
//! processes and nodes. It loads the exact NCCL file it is given, checks
//! every element of every result, and never hangs: every step has a
//! deadline, after which the communicators are aborted and the report names
//! what never finished.
//!
//! It is a crate of its own, apart from `nccl-find` (the build dependency
//! that finds NCCL), so that build scripts never compile this GPU and network
//! runtime. [`driver`] is the one place that loads the CUDA driver, for the
//! test and for `nccl-find doctor`'s facts alike.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use nccl_smoke::{Dtype, Event, Options, Redop, DEFAULT_SIZES};
//! # fn main() -> Result<(), nccl_smoke::Failure> {
//! let mut opts = Options::new("/usr/lib/x86_64-linux-gnu/libnccl.so.2");
//! opts.sizes = DEFAULT_SIZES.to_vec();
//! opts.ops = vec!["all-reduce".into(), "reduce-scatter".into()];
//! opts.redops = vec![Redop::Sum, Redop::Avg];
//! opts.dtypes = vec![Dtype::F32, Dtype::Bf16];
//! opts.timeout = Duration::from_secs(60);
//! let summary = nccl_smoke::run(&opts, &mut |e: Event| println!("{e:?}"))?;
//! assert!(summary.ok);
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

mod capture;
mod collective;
mod cuda;
mod data;
pub mod driver;
mod gpu;
mod nccl;
pub mod nvml;
mod pairs;
mod ptx;
mod report;
pub mod rundir;
pub mod verdict;
mod watchdog;

/// What the unit tests share: a scratch directory, a directory's names.
#[cfg(test)]
pub(crate) mod testutil {
    use std::path::{Path, PathBuf};

    /// A fresh, empty directory of one test's own, under the system's
    /// temporary directory.
    pub(crate) fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nccl-smoke-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// The names in `d`, sorted.
    pub(crate) fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

pub use capture::Capture;
use collective::{Collective, COLLECTIVES};
use cuda::Cuda;
use data::Exact;
pub use data::{Dtype, Redop};
use gpu::{Data, Run};
use nccl::NcclLib;
use nccl_find::explain::Change;
use nccl_rendezvous as rendezvous;
use nccl_rendezvous::untrusted;
use nccl_rendezvous::{Failed, Job, PeerOutcome};
pub use report::{Event, Failure, Row, Summary, Timing, TIMES};

/// What to run: [`Options::new`], then the fields to change.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// The NCCL library file to load.
    pub lib: PathBuf,
    /// The GPUs this process drives; `None`: by `local_rank`, else every
    /// visible GPU.
    pub gpus: Option<Vec<usize>>,
    /// Under a launcher, this process's rank on its node: it drives that
    /// GPU (see [`gpus_for_local_rank`]).
    pub local_rank: Option<usize>,
    /// Sizes in bytes, per rank.
    pub sizes: Vec<usize>,
    /// Datatypes.
    pub dtypes: Vec<Dtype>,
    /// Seed of the inputs; `None`: derived from NCCL's unique id.
    pub seed: Option<u64>,
    /// Deadline of each step.
    pub timeout: Duration,
    /// Several processes: this one's place. `None`: one process.
    pub job: Option<Job>,
    /// Timed iterations per size; `None`: by size.
    pub iters: Option<usize>,
    /// Only meet the other processes, and test the network between nodes
    /// (no GPU, no NCCL call): `smoke --rendezvous-only`, to check a
    /// launcher and the network before a job.
    pub rendezvous_only: bool,
    /// The collectives to run, by name ([`ops`]): the all-reduce alone by
    /// default.
    pub ops: Vec<String>,
    /// The reductions of the collectives that reduce: `sum` by default.
    pub redops: Vec<Redop>,
}

impl Options {
    /// The default run of `lib`: one process, every visible GPU, the
    /// default sizes in `f32`, a deadline of 60 s.
    pub fn new(lib: impl Into<PathBuf>) -> Options {
        Options {
            lib: lib.into(),
            gpus: None,
            local_rank: None,
            sizes: DEFAULT_SIZES.to_vec(),
            dtypes: vec![Dtype::F32],
            seed: None,
            timeout: Duration::from_secs(60),
            job: None,
            iters: None,
            rendezvous_only: false,
            ops: vec!["all-reduce".into()],
            redops: vec![Redop::Sum],
        }
    }
}

/// The default sweep: quick (about 2 s end to end on two GPUs), 4 KiB to 32 MiB.
pub const DEFAULT_SIZES: [usize; 5] = [4 << 10, 64 << 10, 1 << 20, 8 << 20, 32 << 20];

/// The name of every collective the smoke test runs, in the order a run of
/// several goes through them (`all-reduce`, `all-gather`, …).
pub fn ops() -> Vec<&'static str> {
    COLLECTIVES.iter().map(|c| c.name()).collect()
}

/// One row's work: a collective, how its inputs are chosen (datatype and
/// reduction), a size in bytes.
type Work = (&'static dyn Collective, Exact, usize);

/// A usage error where `opts.ops` names something that is not a collective.
fn known_ops(opts: &Options) -> Result<(), Failure> {
    match opts.ops.iter().find(|o| collective::by_name(o).is_none()) {
        Some(bad) => Err(Failure::Usage(format!(
            "{bad:?} is not a collective: {}, or all",
            self::ops().join(", ")
        ))),
        None => Ok(()),
    }
}

/// The pairs over NCCL ([`pairs`]), where other processes take part: at
/// the largest size, in the send-receive rule; `None` for one process, or
/// an NCCL without ncclSend.
fn pairs_work(run: &Run, opts: &Options, nranks: usize) -> Option<Work> {
    if nranks <= run.gpus.len() {
        return None;
    }
    let op = collective::by_name("send-recv")?;
    op.missing(run.nc).is_none().then_some(())?;
    let rule = exact_for(op, None, Dtype::F32, run.nc, nranks, run.min_cc).ok()?;
    let bytes = opts.sizes.iter().copied().max()?;
    Some((op, rule, bytes))
}

/// Each collective of `opts.ops` (in [`COLLECTIVES`]' order; [`known_ops`]
/// checked them), in each of `opts.redops` where it reduces, in every
/// datatype, at every size. What the loaded NCCL or this process's GPUs
/// (compute capability `min_cc`) cannot run, or what has no exact answer,
/// is left out and said why, once.
fn sweep_order(
    opts: &Options,
    nranks: usize,
    nc: &NcclLib,
    min_cc: i32,
    on: &mut dyn FnMut(Event),
) -> Vec<Work> {
    let chosen = || {
        COLLECTIVES
            .iter()
            .filter(|c| opts.ops.iter().any(|o| o == c.name()))
    };
    if opts.redops != [Redop::Sum] && !chosen().any(|c| c.reduces()) {
        on(Event::Note(
            "the reductions asked for go unused: none of these collectives reduces".into(),
        ));
    }
    let (names, fns): (Vec<_>, Vec<_>) = chosen()
        .filter(|c| c.missing(nc).is_none() && c.stands_in(nc))
        .map(|c| (c.name(), c.nccl_name()))
        .unzip();
    if !names.is_empty() {
        on(Event::Note(format!(
            "{} run as grouped ncclSend and ncclRecv, as nccl-tests does: NCCL {} lacks {}",
            names.join(", "),
            nc.version(),
            fns.join(", ")
        )));
    }
    let mut said: Vec<String> = Vec::new();
    let mut skip = |why: String| {
        if !said.contains(&why) {
            on(Event::Note(format!("skipped: {why}")));
            said.push(why);
        }
    };
    let mut out = Vec::new();
    for op in chosen() {
        if let Some(why) = op.missing(nc) {
            skip(why);
            continue;
        }
        let redops: Vec<Option<Redop>> = match op.reduces() {
            true => opts.redops.iter().copied().map(Some).collect(),
            false => vec![None],
        };
        if redops.is_empty() {
            skip(format!("{}: no reduction was asked for", op.name()));
        }
        for red in redops {
            for &t in &opts.dtypes {
                match exact_for(*op, red, t, nc, nranks, min_cc) {
                    Ok(rule) => out.extend(opts.sizes.iter().map(|&bytes| (*op, rule, bytes))),
                    Err(why) => skip(why),
                }
            }
        }
    }
    out
}

/// The inputs of `op` in `t` with reduction `red` (`None`: it moves data)
/// over `nranks` ranks on GPUs of compute capability `min_cc`.x, or why it
/// cannot run here: the loaded NCCL lacks the reduction or the datatype, or
/// refuses them, or no input makes the result exact.
fn exact_for(
    op: &dyn Collective,
    red: Option<Redop>,
    t: Dtype,
    nc: &NcclLib,
    nranks: usize,
    min_cc: i32,
) -> Result<Exact, String> {
    let names = [
        red.map(|r| (r.name(), r.nccl().1)),
        Some((t.name(), t.nccl().1)),
    ];
    for (what, name) in names.into_iter().flatten() {
        if let Some(first) = nc.lacks(name) {
            return Err(format!(
                "{what} needs NCCL {first} (this is {})",
                nc.version()
            ));
        }
    }
    let old = (!nc.does(Change::Fp8CopiesBelowSm90)).then(|| nc.version());
    if let Some(why) = fp8_refused(t, op.name(), red.is_some(), op.grouped(nc), old, min_cc) {
        return Err(why);
    }
    // NCCL's one-rank path (a copy, or a kernel for the 1/n multiply) has
    // no 8-bit float kernel in its host code: it answers invalid argument.
    if red == Some(Redop::Avg) && t.is_f8() && nranks == 1 {
        return Err(format!(
            "avg in {} on one rank: NCCL's one-rank path has no 8-bit float kernel (it answers \
             invalid argument)",
            t.name()
        ));
    }
    match red {
        Some(r) => Exact::of(t, r, nranks),
        None => Ok(Exact::copy(t, nranks)),
    }
}

/// Why NCCL refuses collective `op` in `t` where the communicator's GPUs
/// have compute capability `min_cc`.x: an 8-bit float needs 9.0 in every
/// reduction, and before NCCL 2.28.3 (`old`: the version, where older) in
/// every collective that is not sends and receives (`p2p`). NCCL checks
/// the communicator's lowest GPU.
fn fp8_refused(
    t: Dtype,
    op: &str,
    reduces: bool,
    p2p: bool,
    old: Option<String>,
    min_cc: i32,
) -> Option<String> {
    if !t.is_f8() || min_cc >= 9 {
        return None;
    }
    let have = match min_cc {
        0 => "whose compute capability could not be read".to_string(),
        cc => format!("of compute capability {cc}.x"),
    };
    match (reduces, p2p, old) {
        (true, _, _) => Some(format!(
            "{} reductions need compute capability 9.0; the job has GPUs {have}",
            t.name()
        )),
        (false, false, Some(v)) => Some(format!(
            "{} in {op} needs compute capability 9.0 before NCCL 2.28.3 (this is {v}); the job has GPUs {have}",
            t.name()
        )),
        _ => None,
    }
}

fn iters_for(bytes: usize) -> usize {
    match bytes {
        0..=1_048_576 => 20,
        1_048_577..=67_108_864 => 10,
        _ => 5,
    }
}

/// A seed from the unique id, so every process derives the same one.
fn seed_of(id: &[u8; 128]) -> u64 {
    id.chunks(8).fold(0xcbf2_9ce4_8422_2325u64, |h, c| {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        (h ^ u64::from_le_bytes(b)).wrapping_mul(0x100_0000_01b3)
    }) >> 1
}

/// Runs the smoke test.
pub fn run(opts: &Options, on: &mut dyn FnMut(Event)) -> Result<Summary, Failure> {
    let nc = load(opts, on)?;
    if opts.rendezvous_only {
        return rendezvous_only(opts, &nc, on);
    }
    known_ops(opts)?;
    let t_driver = Instant::now();
    let (cu, count) = start_driver()?;
    let driver_s = t_driver.elapsed().as_secs_f64();
    let ordinals = chosen_gpus(opts, count, on)?;
    // Primary contexts take a while each: retained on one thread per GPU.
    let t_ctx = Instant::now();
    let (gpus, names) = gpu::open(&cu, &ordinals)?;
    let topology = gpu::topology(&cu, &gpus);
    let ctx_s = t_ctx.elapsed().as_secs_f64();
    let (id, nranks, first_rank, joined) = meet(opts, &nc, gpus.len(), on)?;
    let seed = opts.seed.unwrap_or_else(|| seed_of(&id));
    on(Event::Devices {
        gpus: names,
        nranks,
        first_rank,
        seed,
    });
    let abort = joined.as_ref().map(|j| j.abort.clone());
    let mut run = Run::new(&cu, &nc, gpus, opts.timeout, abort);
    run.min_cc = topology.gpus.iter().map(|g| g.cc_major).min().unwrap_or(0);
    on(Event::Note(format!(
        "setup: driver {driver_s:.2} s, GPU contexts {ctx_s:.2} s"
    )));
    let result = sweep(&mut run, opts, id, nranks, first_rank, seed, on);
    let (ok, wrong, message) = match &result {
        Ok((_, w, _)) => (*w == 0, *w as u64, format!("{w} wrong elements")),
        Err(f) => (false, 0, f.to_string()),
    };
    if result.is_err() {
        let t = Instant::now();
        run.abort_live();
        on(Event::Note(format!(
            "communicators aborted in {:.2} s",
            t.elapsed().as_secs_f64()
        )));
    }
    gpu::cleanup(&mut run);
    // The out-of-place time per call of the first row at the largest size,
    // in microseconds; 0 with no rows.
    let largest_us = result
        .as_ref()
        .ok()
        .and_then(|(rows, _, _)| Row::first_largest(rows))
        .map_or(0, |r| r.oop.time_us.round() as u64);
    let times_us = vec![((driver_s + ctx_s) * 1e6).round() as u64, largest_us];
    let peers = joined
        .map(|mut j| {
            j.report_times(&times_us);
            finish_with_peers(j, ok, wrong, &message, opts.timeout)
        })
        .unwrap_or_default();
    let (rows, wrong, (pairs, hosts)) = result?;
    let all_ok = wrong == 0 && peers.iter().all(|p| matches!(p.done, Some((true, _, _))));
    Ok(Summary {
        rows,
        wrong,
        nranks,
        peers,
        ok: all_ok,
        topology,
        times_us,
        pairs,
        hosts,
    })
}

/// Loads the library `opts` names, and says so.
fn load(opts: &Options, on: &mut dyn FnMut(Event)) -> Result<NcclLib, Failure> {
    let nc = NcclLib::load(&opts.lib).map_err(Failure::Load)?;
    on(Event::Loaded {
        path: nc.path.clone(),
        version: nc.version(),
    });
    Ok(nc)
}

/// Tells the other processes how this one did; rank 0 hears theirs. After
/// a failure, peers get a short grace to report: a stalled one must not hold
/// this rank for another full deadline.
fn finish_with_peers(
    joined: rendezvous::Joined,
    ok: bool,
    wrong: u64,
    message: &str,
    timeout: Duration,
) -> Vec<PeerOutcome> {
    let grace = if ok {
        timeout
    } else {
        timeout.min(Duration::from_secs(2))
    };
    joined.finish(ok, wrong, message, grace)
}

/// Loads the driver and initialises it; the number of GPUs it sees (at
/// least one).
fn start_driver() -> Result<(Cuda, i32), Failure> {
    let cu = Cuda::load().map_err(Failure::NoDriver)?;
    // SAFETY: cuInit(0) is the driver's documented first call.
    let rc = unsafe { (cu.init)(0) };
    if rc == 100 {
        return Err(Failure::NoGpu(
            "the driver reports no CUDA-capable device".into(),
        ));
    } else if rc != 0 {
        return Err(Failure::NoDriver(cu.error(rc)));
    }
    let mut count = 0;
    // SAFETY: writes one int.
    cu.check(
        unsafe { (cu.device_get_count)(&mut count) },
        "cuDeviceGetCount",
    )
    .map_err(Failure::NoDriver)?;
    if count == 0 {
        return Err(Failure::NoGpu("the driver sees no GPU".into()));
    }
    Ok((cu, count))
}

/// The GPUs this process drives, of the `count` the driver sees: the ones
/// asked for (each once, each there), else the local rank's, else all.
fn chosen_gpus(
    opts: &Options,
    count: i32,
    on: &mut dyn FnMut(Event),
) -> Result<Vec<usize>, Failure> {
    let count = count.max(0) as usize;
    let ordinals: Vec<usize> = match (&opts.gpus, opts.local_rank, &opts.job) {
        (Some(g), _, _) => g.clone(),
        (None, Some(local), Some(_)) => {
            let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
            let per_task = std::env::var("SLURM_GPUS_PER_TASK").ok();
            let (g, why) =
                gpus_for_local_rank(local, count, visible.as_deref(), per_task.as_deref())
                    .map_err(Failure::Usage)?;
            on(Event::Note(why));
            g
        }
        _ => (0..count).collect(),
    };
    if ordinals.is_empty() {
        return Err(Failure::Usage("no GPU was chosen".into()));
    }
    if let Some(bad) = ordinals.iter().find(|o| **o >= count) {
        return Err(Failure::Usage(format!(
            "GPU {bad} does not exist: this machine shows {count} GPU(s)"
        )));
    }
    let mut dedup = ordinals.clone();
    dedup.sort_unstable();
    dedup.dedup();
    if dedup.len() != ordinals.len() {
        return Err(Failure::Usage(format!(
            "GPUs {ordinals:?} name one GPU twice: NCCL needs one rank per GPU"
        )));
    }
    Ok(ordinals)
}

/// The GPU(s) a process of a launcher drives, from its rank on the node
/// and the `count` GPUs it sees, and why, in words:
///
/// - every GPU it sees, when `CUDA_VISIBLE_DEVICES` is set and it sees as
///   many as Slurm's `--gpus-per-task` gave each task (`per_task`, the
///   value of `SLURM_GPUS_PER_TASK`: `2`, or `a100:2`), so that every
///   task drives its own, whatever its local rank;
/// - the local rank's own GPU, when it sees that many (each process sees
///   every GPU of the node, the usual case);
/// - every GPU it sees, when it sees fewer and `CUDA_VISIBLE_DEVICES` is
///   set (the launcher gave each process its own);
/// - otherwise, an error: more processes on this node than GPUs.
pub fn gpus_for_local_rank(
    local: usize,
    count: usize,
    visible: Option<&str>,
    per_task: Option<&str>,
) -> Result<(Vec<usize>, String), String> {
    let given = per_task
        .and_then(|p| p.rsplit(':').next())
        .and_then(|n| n.trim().parse::<usize>().ok());
    if let (Some(v), Some(n)) = (visible, given) {
        if n == count && n > 0 {
            return Ok((
                (0..count).collect(),
                format!(
                    "every GPU this process sees ({count}): Slurm gave each task its own \
                     (SLURM_GPUS_PER_TASK={n}, CUDA_VISIBLE_DEVICES=\"{}\")",
                    untrusted::shown(v, 64)
                ),
            ));
        }
    }
    if local < count {
        return Ok((
            vec![local],
            format!("GPU {local} of {count}: this process's local rank is {local}"),
        ));
    }
    match visible {
        Some(v) if count > 0 => Ok((
            (0..count).collect(),
            format!(
                "every GPU this process sees ({count}): CUDA_VISIBLE_DEVICES=\"{}\" gives it its own, and its \
                 local rank {local} is past them",
                untrusted::shown(v, 64)
            ),
        )),
        _ => Err(format!(
            "local rank {local}, but this node shows {count} GPU(s): more processes on this node than GPUs. \
             Start at most {count} process(es) per node, or pass --gpus"
        )),
    }
}

/// Meets the other processes (or is alone): NCCL's unique id, the NCCL
/// ranks in all, this process's first rank, and the link to the others.
fn meet(
    opts: &Options,
    nc: &NcclLib,
    ngpus: usize,
    on: &mut dyn FnMut(Event),
) -> Result<([u8; 128], usize, usize, Option<rendezvous::Joined>), Failure> {
    Ok(match &opts.job {
        None => (nccl_id(nc)?, ngpus, 0, None),
        Some(job) => {
            let mut job = job.clone();
            job.ngpus = ngpus;
            let make = || nccl_id(nc).map_err(|f| f.to_string());
            let j = ruled(
                rendezvous::join(&job, &make, &mut |m| on(Event::Note(m))),
                opts.timeout,
                on,
            )?;
            (j.id, j.nranks, j.first_rank, Some(j))
        }
    })
}

/// The meeting's end, as this rank hears it: rank 0's report of what every
/// rank brought, then its ruling. Where the ruling stops the job, every
/// rank leaves (the store closed behind it) with the cause, before NCCL
/// starts; where the job runs NCCL anyway, the cause is said
/// ([`Event::Cause`]).
fn ruled(
    joined: Result<rendezvous::Joined, Failed>,
    timeout: Duration,
    on: &mut dyn FnMut(Event),
) -> Result<rendezvous::Joined, Failure> {
    let mut j = joined.map_err(Failure::Rendezvous)?;
    if let Some(g) = j.gathered.take() {
        on(Event::Gathered(g));
    }
    match j.ruling.clone() {
        Some(r) if r.stop => {
            // Every rank stops alike: the end's fences only wait for the
            // ranks that are all leaving now.
            j.finish(
                true,
                0,
                "stopped before NCCL",
                timeout.min(Duration::from_secs(10)),
            );
            Err(Failure::Stopped(r.cause))
        }
        Some(r) => {
            on(Event::Cause(r.cause));
            Ok(j)
        }
        None => Ok(j),
    }
}

fn nccl_id(nc: &NcclLib) -> Result<[u8; 128], Failure> {
    nc.unique_id()
        .map(|u| u.internal)
        .map_err(|(rc, error)| Failure::NcclLib {
            what: "ncclGetUniqueId".into(),
            error,
            rc,
        })
}

/// The rows' work and the pairs' ([`pairs_work`]), with every GPU's
/// buffers allocated for them and, where the job has 8-bit floats to run
/// over several processes, the job's lowest compute capability agreed.
fn plan(
    run: &mut Run,
    opts: &Options,
    nranks: usize,
    first_rank: usize,
    on: &mut dyn FnMut(Event),
) -> Result<(Vec<Work>, Option<Work>), Failure> {
    // Streams and buffers, big enough for the largest size of every
    // collective in every datatype (as this process's GPUs would run them:
    // the job's can only run fewer).
    let (mut send, mut recv) = (8, 8);
    let order = sweep_order(opts, nranks, run.nc, run.min_cc, &mut |_| {});
    // The pairs over NCCL too: they run where every row was skipped.
    let paired = pairs_work(run, opts, nranks);
    for (op, rule, bytes) in order.into_iter().chain(paired) {
        let t = rule.t;
        let count = (bytes / t.size()).max(1);
        send = send.max(op.buffers(count, nranks).0 * t.size());
        // The receive buffer is also, in place, the one buffer of both,
        // which holds at least what is received.
        recv = recv.max(op.one_buffer(count, nranks) * t.size());
    }
    if nranks > run.gpus.len() {
        // And share each rank's host name, in place.
        recv = recv.max(nranks * pairs::NAME * 4);
    }
    run.alloc(send, recv)?;
    // NCCL refuses 8-bit floats by the communicator's lowest GPU: every
    // rank must skip alike.
    let fp8 = opts.dtypes.iter().any(|t| t.is_f8());
    if fp8 && nranks > run.gpus.len() {
        let local = run.min_cc;
        run.min_cc = run.agree_min(local, nranks, first_rank)?;
        if run.min_cc != local {
            on(Event::Note(format!(
                "the job's GPUs have compute capability {}.x at the lowest (this process's: {local}.x)",
                run.min_cc
            )));
        }
    }
    Ok((sweep_order(opts, nranks, run.nc, run.min_cc, on), paired))
}

fn sweep(
    run: &mut Run,
    opts: &Options,
    id: [u8; 128],
    nranks: usize,
    first_rank: usize,
    seed: u64,
    on: &mut dyn FnMut(Event),
) -> Result<(Vec<Row>, usize, pairs::Found), Failure> {
    run.init_comms(id, nranks, first_rank, on)?;
    let (order, paired) = plan(run, opts, nranks, first_rank, on)?;
    let mut rules: Vec<Exact> = Vec::new();
    for (_, rule, _) in order.iter().chain(&paired) {
        if !rules.contains(rule) {
            rules.push(*rule);
        }
    }
    let t_k = Instant::now();
    run.load_kernels(&rules, seed, on);
    if run.kernels_loaded() {
        on(Event::Note(format!(
            "data made and checked on the GPU (kernels loaded and self-tested in {:.2} s)",
            t_k.elapsed().as_secs_f64()
        )));
    }
    let mut rows = Vec::new();
    let mut wrong = 0;
    for (op, rule, bytes) in order {
        let t = rule.t;
        let count = (bytes / t.size()).max(1);
        let d = Data { count, seed, rule };
        let iters = opts.iters.unwrap_or_else(|| iters_for(bytes));
        let oop = run.one(op, &d, first_rank, false, iters)?;
        let ip = run.one(op, &d, first_rank, true, iters)?;
        wrong += oop.wrong + ip.wrong;
        let row = Row::new(
            op.name(),
            op.reduces().then_some(rule.op),
            t,
            count,
            oop,
            ip,
        );
        on(Event::Row(row.clone()));
        rows.push(row);
    }
    let mut found = pairs::Found::default();
    if let Some((_, rule, bytes)) = paired {
        let count = (bytes / rule.t.size()).max(1);
        let host = opts.job.as_ref().map_or("", |j| j.card.host.as_str());
        let d = Data { count, seed, rule };
        let (w, f) = pairs::run(run, &d, host, first_rank, on)?;
        wrong += w;
        found = f;
    }
    let (secs, touched) = run.data_time.get();
    if touched > 0 {
        let where_ = if run.kernels_loaded() {
            "the GPU"
        } else {
            "the host"
        };
        on(Event::Note(format!(
            "data: {:.2} GB per GPU made and checked on {where_} in {secs:.3} s ({:.1} GB/s per GPU)",
            touched as f64 / 1e9,
            touched as f64 / 1e9 / secs.max(1e-9)
        )));
    }
    Ok((rows, wrong, found))
}

/// The test seam: meet, report what was handed out, finish.
fn rendezvous_only(
    opts: &Options,
    nc: &NcclLib,
    on: &mut dyn FnMut(Event),
) -> Result<Summary, Failure> {
    let job = opts
        .job
        .clone()
        .ok_or_else(|| Failure::Usage("--rendezvous-only needs --world-size and --init".into()))?;
    let mut job = job;
    job.ngpus = opts.gpus.as_ref().map_or(1, Vec::len);
    if let Some(local) = opts.local_rank {
        on(Event::Note(format!("local rank {local}")));
    }
    let make = || {
        nc.unique_id()
            .map(|u| u.internal)
            .map_err(|(_, e)| format!("ncclGetUniqueId failed: {e}"))
    };
    let j = ruled(
        rendezvous::join(&job, &make, &mut |m| on(Event::Note(m))),
        opts.timeout,
        on,
    )?;
    on(Event::Note(format!(
        "rendezvous: nranks {} first_rank {} id {}",
        j.nranks,
        j.first_rank,
        j.id[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )));
    let nranks = j.nranks;
    let peers = j.finish(true, 0, "rendezvous only", opts.timeout);
    let ok = peers.iter().all(|p| matches!(p.done, Some((true, _, _))));
    Ok(Summary {
        rows: Vec::new(),
        wrong: 0,
        nranks,
        peers,
        ok,
        topology: verdict::Topology::default(),
        times_us: Vec::new(),
        pairs: Vec::new(),
        hosts: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launchers_process_drives_its_local_ranks_gpu() {
        assert_eq!(
            gpus_for_local_rank(3, 8, None, None),
            Ok((
                vec![3],
                "GPU 3 of 8: this process's local rank is 3".to_string()
            ))
        );
        // Each process given its own GPU(s) by CUDA_VISIBLE_DEVICES.
        assert_eq!(
            gpus_for_local_rank(5, 1, Some("5"), None),
            Ok((
                vec![0],
                "every GPU this process sees (1): CUDA_VISIBLE_DEVICES=\"5\" gives it its own, and its local rank 5 \
                 is past them"
                    .to_string()
            ))
        );
        assert_eq!(
            gpus_for_local_rank(2, 2, Some("4,5"), None).unwrap().0,
            [0, 1]
        );
        // srun --gpus-per-task=2: every task drives the two it was given,
        // local ranks 0 and 1 too (they drove one each).
        for local in 0..4 {
            assert_eq!(
                gpus_for_local_rank(local, 2, Some("2,3"), Some("2")),
                Ok((
                    vec![0, 1],
                    "every GPU this process sees (2): Slurm gave each task its own (SLURM_GPUS_PER_TASK=2, \
                     CUDA_VISIBLE_DEVICES=\"2,3\")"
                        .to_string()
                ))
            );
        }
        assert_eq!(
            gpus_for_local_rank(1, 2, Some("0,1"), Some("a100:2"))
                .unwrap()
                .0,
            [0, 1]
        );
        // --gpus-per-task with every GPU of the node visible to each task
        // (--gpu-bind=none): the local rank's own, never all of them.
        assert_eq!(
            gpus_for_local_rank(1, 4, Some("0,1,2,3"), Some("2"))
                .unwrap()
                .0,
            [1]
        );
        assert_eq!(gpus_for_local_rank(1, 4, None, Some("2")).unwrap().0, [1]);
        // More processes than GPUs, and nothing to say they were divided.
        assert_eq!(
            gpus_for_local_rank(4, 4, None, None),
            Err("local rank 4, but this node shows 4 GPU(s): more processes on this node than GPUs. Start at \
                 most 4 process(es) per node, or pass --gpus"
                .to_string())
        );
        // A hostile value is shown escaped.
        assert!(gpus_for_local_rank(1, 1, Some("\x1b[2J"), None)
            .unwrap()
            .1
            .contains("CUDA_VISIBLE_DEVICES=\"\\u{1b}[2J\""));
    }

    /// The `nvidia/nccl` directory (`lib/libnccl.so.2`,
    /// `include/nccl.h`) of each cached `nvidia-nccl-cu12` wheel, by
    /// version, oldest first (the test command caches them, the newest
    /// release on PyPI among them).
    fn cached_wheels() -> Vec<((u32, u32, u32), PathBuf)> {
        let Some(site) = std::env::var_os("NCCL_FIND_WHEELS") else {
            assert!(
                std::env::var_os("NCCL_FIND_REQUIRE_WHEELS").is_none(),
                "NCCL_FIND_WHEELS is unset; run scripts/test"
            );
            eprintln!("skipped: NCCL_FIND_WHEELS is unset (scripts/test downloads the wheels and sets it)");
            return Vec::new();
        };
        let mut out: Vec<_> = std::fs::read_dir(site)
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let mut v = name.strip_prefix("nvidia_nccl_cu12-")?.split('.');
                let mut n = || v.next()?.parse::<u32>().ok();
                let v = (n()?, n()?, n()?);
                Some((v, e.path().join("nvidia/nccl")))
            })
            .collect();
        out.sort();
        out
    }

    /// The notes and the rows' work of a sweep with a real NCCL loaded (no
    /// GPU needed), for `nranks` ranks on GPUs of compute capability
    /// `cc`.x.
    fn planned(
        lib: &std::path::Path,
        nranks: usize,
        cc: i32,
        opts: &mut Options,
    ) -> (Vec<String>, Vec<String>) {
        let nc = NcclLib::load(lib).unwrap();
        opts.sizes = vec![4096];
        let mut notes = Vec::new();
        let order = sweep_order(opts, nranks, &nc, cc, &mut |e| {
            if let Event::Note(n) = e {
                notes.push(n);
            }
        });
        let work = order
            .iter()
            .map(|(op, rule, _)| format!("{} {} {}", op.name(), rule.t.name(), rule.op.name()))
            .collect();
        (notes, work)
    }

    #[test]
    fn what_nccl_or_the_gpus_cannot_run_is_skipped_with_its_reason_once() {
        let wheels = cached_wheels();
        let (Some((old_v, old)), Some((new_v, new))) = (wheels.first(), wheels.last()) else {
            return;
        };
        let (old, new) = (&old.join("lib/libnccl.so.2"), &new.join("lib/libnccl.so.2"));
        assert!(*old_v < (2, 24, 3) && *new_v >= (2, 28, 3), "{wheels:?}");
        let mut opts = Options::new(old);
        opts.ops = vec!["all-reduce".into(), "all-to-all".into(), "gather".into()];
        opts.dtypes = vec![Dtype::F32, Dtype::F8e4m3];
        opts.redops = vec![Redop::Sum, Redop::Avg];
        let (notes, work) = planned(old, 3, 9, &mut opts);
        let v = format!("{}.{}.{}", old_v.0, old_v.1, old_v.2);
        assert_eq!(
            notes,
            [
                format!(
                    "all-to-all, gather run as grouped ncclSend and ncclRecv, as nccl-tests \
                     does: NCCL {v} lacks ncclAlltoAll, ncclGather"
                ),
                format!("skipped: f8e4m3 needs NCCL 2.24.3 (this is {v})"),
                "skipped: avg in f32 over 3 ranks has no exact answer: 1/n is not a power of two"
                    .into(),
            ]
        );
        // All-to-all and gather run as sends and receives before 2.28.3;
        // a collective that moves data takes a maximum's inputs.
        assert_eq!(
            work,
            ["all-reduce f32 sum", "all-to-all f32 max", "gather f32 max"]
        );
        // The newest NCCL has 8-bit floats: their reductions need compute
        // capability 9.0, their moves do not.
        opts.dtypes = vec![Dtype::F8e4m3];
        let (notes, work) = planned(new, 1, 8, &mut opts);
        assert_eq!(
            notes,
            ["skipped: f8e4m3 reductions need compute capability 9.0; the job has GPUs of compute capability 8.x"]
        );
        assert_eq!(work, ["all-to-all f8e4m3 max", "gather f8e4m3 max"]);
        // On one rank, NCCL has no 8-bit float average.
        let (notes, work) = planned(new, 1, 9, &mut opts);
        assert_eq!(
            notes,
            ["skipped: avg in f8e4m3 on one rank: NCCL's one-rank path has no 8-bit float kernel (it answers \
              invalid argument)"]
        );
        assert_eq!(work[0], "all-reduce f8e4m3 sum");
        // Reductions where nothing reduces are said to go unused.
        opts.ops = vec!["gather".into()];
        opts.redops = vec![Redop::Max];
        let (notes, _) = planned(new, 2, 9, &mut opts);
        assert_eq!(
            notes,
            ["the reductions asked for go unused: none of these collectives reduces"]
        );
        // An unknown collective is a usage error.
        opts.ops = vec!["alltoall".into()];
        assert!(matches!(known_ops(&opts), Err(Failure::Usage(_))));
    }

    #[test]
    fn eight_bit_floats_below_compute_capability_9_are_skipped_as_nccl_refuses_them() {
        let f8 = Dtype::F8e5m2;
        let old = || Some("2.27.7".to_string());
        assert_eq!(fp8_refused(f8, "all-reduce", true, false, None, 9), None);
        assert_eq!(
            fp8_refused(Dtype::Bf16, "all-reduce", true, false, None, 7),
            None
        );
        assert_eq!(
            fp8_refused(f8, "reduce", true, false, None, 8).as_deref(),
            Some("f8e5m2 reductions need compute capability 9.0; the job has GPUs of compute capability 8.x")
        );
        // Before 2.28.3 a copy is refused too, unless it is sends and
        // receives; from 2.28.3 it runs.
        assert_eq!(
            fp8_refused(f8, "broadcast", false, false, old(), 8).as_deref(),
            Some(
                "f8e5m2 in broadcast needs compute capability 9.0 before NCCL 2.28.3 (this is 2.27.7); the job \
                 has GPUs of compute capability 8.x"
            )
        );
        assert_eq!(fp8_refused(f8, "all-to-all", false, true, old(), 8), None);
        assert_eq!(fp8_refused(f8, "all-gather", false, false, None, 8), None);
        assert!(fp8_refused(f8, "all-gather", true, false, None, 0)
            .unwrap()
            .ends_with("GPUs whose compute capability could not be read"));
    }

    /// The `name = value` pairs of the `typedef enum { … } <name>;` in `text`,
    /// comments left out.
    fn enum_values(text: &str, name: &str) -> Vec<(String, i64)> {
        let end = text
            .find(&format!("}} {name};"))
            .unwrap_or_else(|| panic!("no {name}"));
        let start = text[..end].rfind("typedef enum").unwrap();
        let mut body = String::new();
        let mut rest = &text[start..end];
        while let Some(i) = rest.find("/*") {
            body.push_str(&rest[..i]);
            rest = rest[i..].split_once("*/").map_or("", |(_, after)| after);
        }
        body.push_str(rest);
        body.split(['{', ','])
            .filter_map(|item| {
                let (k, v) = item.split_once('=')?;
                Some((k.trim().to_string(), v.trim().parse().ok()?))
            })
            .collect()
    }

    /// The smoke test's datatypes and reductions against NCCL's own, in the
    /// newest `nccl.h` cached: a release that adds a datatype or a
    /// reduction turns this red.
    #[test]
    fn every_datatype_and_reduction_of_the_newest_nccl_is_ours() {
        let Some((version, root)) = cached_wheels().pop() else {
            return;
        };
        let text = std::fs::read_to_string(root.join("include/nccl.h")).unwrap();
        let ours: Vec<(i32, &str)> = Dtype::ALL.iter().map(|d| d.nccl()).collect();
        let declared = enum_values(&text, "ncclDataType_t");
        for (name, value) in &declared {
            if name == "ncclNumTypes" || ours.iter().any(|(v, _)| i64::from(*v) == *value) {
                continue;
            }
            panic!(
                "NCCL {version:?} has the datatype {name} = {value}, which the smoke test lacks"
            );
        }
        for (v, name) in &ours {
            assert!(
                declared.contains(&(name.to_string(), i64::from(*v))),
                "{name} = {v}"
            );
        }
        let ours: Vec<(i32, &str)> = Redop::ALL.iter().map(|r| r.nccl()).collect();
        let declared = enum_values(&text, "ncclRedOp_t");
        for (name, value) in &declared {
            if name == "ncclNumOps"
                || ours
                    .iter()
                    .any(|(v, n)| i64::from(*v) == *value && n == name)
            {
                continue;
            }
            panic!(
                "NCCL {version:?} has the reduction {name} = {value}, which the smoke test lacks"
            );
        }
        assert_eq!(declared.len(), ours.len() + 1, "{declared:?}");
    }

    /// Every datatype and reduction is a name of the catalog nccl-find
    /// read from the releases, which says which NCCL has it.
    #[test]
    fn every_datatype_and_reduction_is_in_the_catalog() {
        let names = Dtype::ALL
            .iter()
            .map(|d| d.nccl().1)
            .chain(Redop::ALL.iter().map(|r| r.nccl().1));
        for name in names {
            assert!(
                nccl_find::explain::introduced_in(name).is_some(),
                "{name} is not in nccl-find's catalog"
            );
        }
        assert_eq!(
            nccl_find::explain::introduced_in("ncclBfloat16"),
            Some("2.10.3")
        );
        assert_eq!(
            nccl_find::explain::introduced_in("ncclFloat8e4m3"),
            Some("2.24.3")
        );
    }

    #[test]
    fn timing_math() {
        let t = Timing::of(1 << 30, 0.003, collective::AllReduce.bus_factor(4), 0);
        assert!((t.time_us - 3000.0).abs() < 1e-9);
        assert!((t.algbw - 357.913_941_333).abs() < 1e-6, "{}", t.algbw);
        assert!((t.busbw - t.algbw * 1.5).abs() < 1e-9);
        let alone = collective::AllReduce.bus_factor(1);
        assert_eq!(Timing::of(8, 1e-5, alone, 3).busbw, 0.0);
        assert_eq!(Timing::of(8, 1e-5, alone, 3).wrong, 3);
    }
}
