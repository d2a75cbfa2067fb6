//! The run-time smoke test (feature `smoke`): a verified all-reduce on
//! every GPU, in one process or across processes and nodes. It loads the
//! exact NCCL file it is given, checks every element of every result, and
//! never hangs: every step has a deadline, after which the communicators are
//! aborted and the report names what never finished.

use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod cuda;
pub mod data;
mod fsafe;
mod nccl;
pub mod rendezvous;

use cuda::{CuContext, CuDevicePtr, CuStream, Cuda};
pub use data::Dtype;
pub use fsafe::private_dir;
use nccl::{Nccl, NcclComm};
pub use rendezvous::{Failed, Init, Job, PeerOutcome};

type Cleanup = Box<dyn Fn() + Send>;
static CLEANUPS: std::sync::Mutex<Vec<(u64, Cleanup)>> = std::sync::Mutex::new(Vec::new());
static NEXT_CLEANUP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Registers something to undo if the process is interrupted (files this
/// run wrote); returns a key for [`forget_cleanup`].
pub fn on_interrupt(f: impl Fn() + Send + 'static) -> u64 {
    let key = NEXT_CLEANUP.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    CLEANUPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((key, Box::new(f)));
    key
}

/// Drops a registered cleanup (the run cleaned up by itself).
pub fn forget_cleanup(key: u64) {
    CLEANUPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(k, _)| *k != key);
}

/// Runs every registered cleanup: call it from an interrupt handler's
/// thread before exiting.
pub fn run_cleanups() {
    let list = std::mem::take(&mut *CLEANUPS.lock().unwrap_or_else(|e| e.into_inner()));
    for (_, f) in list {
        f();
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The NCCL library file to load.
    pub lib: PathBuf,
    /// The GPUs this process drives; `None`: every visible GPU.
    pub gpus: Option<Vec<usize>>,
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
    /// Only meet the other processes (no GPU needed): for tests.
    pub rendezvous_only: bool,
}

/// The default sweep: quick (about 2 s end to end on two GPUs), 4 KiB to 32 MiB.
pub const DEFAULT_SIZES: [usize; 5] = [4 << 10, 64 << 10, 1 << 20, 8 << 20, 32 << 20];

/// Timing and correctness of one mode at one size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Microseconds per all-reduce.
    pub time_us: f64,
    /// Bytes / time, GB/s.
    pub algbw: f64,
    /// algbw × 2(n−1)/n, GB/s.
    pub busbw: f64,
    /// Wrong elements on this process.
    pub wrong: usize,
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Bytes per rank.
    pub bytes: usize,
    /// Elements.
    pub count: usize,
    /// Datatype.
    pub dtype: Dtype,
    /// Out of place.
    pub oop: Timing,
    /// In place.
    pub ip: Timing,
}

/// What the run says as it goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The NCCL file loaded and its version.
    Loaded {
        /// The file.
        path: PathBuf,
        /// `ncclGetVersion`.
        version: String,
    },
    /// The GPUs driven by this process, by name, and the NCCL ranks.
    Devices {
        /// `(ordinal, name)`.
        gpus: Vec<(usize, String)>,
        /// NCCL ranks in all.
        nranks: usize,
        /// This process's first NCCL rank.
        first_rank: usize,
        /// The seed of the inputs.
        seed: u64,
    },
    /// Something worth saying.
    Note(String),
    /// A size finished.
    Row(Row),
}

/// How it went.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Every row.
    pub rows: Vec<Row>,
    /// Wrong elements on this process.
    pub wrong: usize,
    /// NCCL ranks in all.
    pub nranks: usize,
    /// The other processes' outcomes (rank 0 only).
    pub peers: Vec<PeerOutcome>,
    /// Whether every element everywhere was right.
    pub ok: bool,
}

/// Why the smoke test could not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No NVIDIA driver.
    NoDriver(String),
    /// A driver, but no GPU.
    NoGpu(String),
    /// Bad options.
    Usage(String),
    /// The NCCL file would not load.
    Load(String),
    /// The processes did not all meet.
    Rendezvous(Failed),
    /// NCCL returned an error.
    Nccl {
        /// What was being done.
        what: String,
        /// NCCL's words.
        error: String,
        /// Cause and fix.
        hint: String,
    },
    /// A CUDA call failed.
    Cuda(String),
    /// A deadline passed; the communicators were aborted.
    Timeout(String),
    /// Another rank went away.
    PeerGone(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NoDriver(e) => write!(
                f,
                "no NVIDIA driver: libcuda.so.1 cannot be used ({e}). The smoke test needs a GPU; install the driver, \
                 or in a container run with the NVIDIA container toolkit (--gpus all)"
            ),
            Failure::NoGpu(e) => write!(f, "no GPU: {e}. Check CUDA_VISIBLE_DEVICES and nvidia-smi"),
            Failure::Usage(e) | Failure::Load(e) | Failure::Cuda(e) | Failure::Timeout(e) | Failure::PeerGone(e) => {
                f.write_str(e)
            }
            Failure::Rendezvous(r) => f.write_str(&r.message),
            Failure::Nccl { what, error, hint } => write!(f, "{what} failed: {error}. {hint}"),
        }
    }
}

/// Cause and fix for an NCCL result code.
pub fn hint(rc: i32) -> String {
    match rc {
        1 => "Likely cause: a driver/CUDA problem or out of memory. Check nvidia-smi and the driver version \
              (nccl-find doctor)."
            .into(),
        2 => format!(
            "Likely cause: NCCL picked a wrong network interface (docker0, virbr0, an unroutable address) or \
             /dev/shm is too small. Interfaces here: {}. Try NCCL_SOCKET_IFNAME={}; NCCL_IB_DISABLE=1 without working \
             RDMA; NCCL_SHM_DISABLE=1 or a larger /dev/shm (nccl-find doctor checks all of these).",
            interfaces().join(", "),
            default_route_iface().map_or("^docker,virbr,lo".to_string(), |i| format!("={i}"))
        ),
        3 => "Likely cause: no usable network interface (\"no socket interface found\"): set NCCL_SOCKET_IFNAME.".into(),
        5 => "Likely cause: two ranks on one GPU (a wrong local-rank mapping): give each rank its own GPU.".into(),
        6 => "Likely cause: a peer died or the network dropped: check the other ranks' logs.".into(),
        _ => "Run with NCCL_DEBUG=INFO for NCCL's own account.".into(),
    }
}

/// Interface names, from /sys/class/net.
fn interfaces() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The interface of the IPv4 default route, from /proc/net/route.
fn default_route_iface() -> Option<String> {
    std::fs::read_to_string("/proc/net/route")
        .ok()?
        .lines()
        .skip(1)
        .find_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            (c.len() > 2 && c[1] == "00000000").then(|| c[0].to_string())
        })
}

/// The GPUs of this process, with their contexts and streams.
struct Gpu {
    ordinal: usize,
    ctx: CuContext,
    stream: CuStream,
    comm: NcclComm,
    send: CuDevicePtr,
    recv: CuDevicePtr,
}

struct Run<'a> {
    cu: &'a Cuda,
    nc: &'a Nccl,
    gpus: Vec<Gpu>,
    timeout: Duration,
    abort: Option<Arc<rendezvous::Abort>>,
}

impl Run<'_> {
    fn set(&self, g: &Gpu) -> Result<(), Failure> {
        // SAFETY: the context is a retained primary context of this process.
        let rc = unsafe { (self.cu.ctx_set_current)(g.ctx) };
        self.cu.check(rc, "cuCtxSetCurrent").map_err(Failure::Cuda)
    }

    fn nccl_err(&self, what: &str, rc: i32, comm: Option<NcclComm>) -> Failure {
        Failure::Nccl {
            what: what.to_string(),
            error: self.nc.error(rc, comm),
            hint: hint(rc),
        }
    }

    /// Aborts every communicator (NCCL's way out of a hang).
    fn abort_all(&mut self) {
        for g in &mut self.gpus {
            if !g.comm.is_null() {
                if let Some(f) = self.nc.comm_abort {
                    // SAFETY: the communicator is live; abort frees it.
                    unsafe { f(g.comm) };
                }
                g.comm = std::ptr::null_mut();
            }
        }
    }

    fn check_abort(&self) -> Result<(), Failure> {
        match self.abort.as_ref().and_then(|a| a.raised()) {
            Some(why) => Err(Failure::PeerGone(why)),
            None => Ok(()),
        }
    }

    /// Waits for every stream, watching NCCL's async errors and the deadline.
    fn wait(&self, what: &str, deadline: Instant) -> Result<(), Failure> {
        let mut spins = 0u32;
        loop {
            let mut done = true;
            for g in &self.gpus {
                self.set(g)?;
                // SAFETY: live stream of the current context.
                let rc = unsafe { (self.cu.stream_query)(g.stream) };
                if rc == cuda::NOT_READY {
                    done = false;
                } else if rc != 0 {
                    return Err(Failure::Cuda(format!("{what}: {}", self.cu.error(rc))));
                }
            }
            if done {
                return Ok(());
            }
            spins += 1;
            if spins % 64 == 0 {
                if let Some(get) = self.nc.comm_get_async_error {
                    self.comm_states(get, what)?;
                }
                self.check_abort()?;
                if Instant::now() >= deadline {
                    return Err(Failure::Timeout(format!(
                        "{what} did not finish within {:.0} s; the communicators were aborted. A rank died or \
                         stalled: check the other ranks",
                        self.timeout.as_secs_f64()
                    )));
                }
            }
            if spins > 1000 {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// One all-reduce on every GPU, as one group.
    fn all_reduce(
        &self,
        count: usize,
        t: Dtype,
        in_place: bool,
        deadline: Instant,
    ) -> Result<(), Failure> {
        // SAFETY: group calls bracket the per-GPU enqueues.
        let rc = unsafe { (self.nc.group_start)() };
        if rc != nccl::SUCCESS {
            return Err(self.nccl_err("ncclGroupStart", rc, None));
        }
        for g in &self.gpus {
            let send = if in_place { g.recv } else { g.send };
            // SAFETY: both buffers hold `count` elements of `t` on this GPU;
            // the stream and communicator belong to it.
            let rc = unsafe {
                (self.nc.all_reduce)(
                    send as *const c_void,
                    g.recv as *mut c_void,
                    count,
                    t.nccl(),
                    0,
                    g.comm,
                    g.stream,
                )
            };
            if rc != nccl::SUCCESS && rc != nccl::IN_PROGRESS {
                // SAFETY: close the group before reporting.
                unsafe { (self.nc.group_end)() };
                return Err(self.nccl_err("ncclAllReduce", rc, Some(g.comm)));
            }
        }
        // SAFETY: closes the group opened above.
        let rc = unsafe { (self.nc.group_end)() };
        if rc != nccl::SUCCESS && rc != nccl::IN_PROGRESS {
            return Err(self.nccl_err("ncclGroupEnd (all-reduce)", rc, None));
        }
        self.poll_comms("all-reduce", deadline, &|| {
            format!(
                "an all-reduce was not enqueued within {:.0} s; the communicators were aborted",
                self.timeout.as_secs_f64()
            )
        })
    }

    /// Looks at every communicator once: an error is a failure, and
    /// `Ok(true)` means one is still in progress.
    fn comm_states(&self, get: nccl::AsyncErrorFn, what: &str) -> Result<bool, Failure> {
        let mut pending = false;
        for g in &self.gpus {
            let mut state = 0;
            // SAFETY: live communicator; writes one int.
            let rc = unsafe { get(g.comm, &mut state) };
            if rc != nccl::SUCCESS {
                return Err(self.nccl_err("ncclCommGetAsyncError", rc, Some(g.comm)));
            }
            if state == nccl::IN_PROGRESS {
                pending = true;
            } else if state != nccl::SUCCESS {
                return Err(self.nccl_err(
                    &format!("{what} on GPU {}", g.ordinal),
                    state,
                    Some(g.comm),
                ));
            }
        }
        Ok(pending)
    }

    /// Non-blocking communicators: every call must have left
    /// `ncclInProgress` before the next one is made. Polls every
    /// communicator until then, an error, an abort from another rank, or
    /// `deadline` (after which `late` says what did not finish).
    fn poll_comms(
        &self,
        what: &str,
        deadline: Instant,
        late: &dyn Fn() -> String,
    ) -> Result<(), Failure> {
        let Some(get) = self
            .nc
            .comm_get_async_error
            .filter(|_| self.nc.comm_init_rank_config.is_some())
        else {
            return Ok(());
        };
        let mut spins = 0u32;
        loop {
            if !self.comm_states(get, what)? {
                return Ok(());
            }
            spins += 1;
            if spins % 256 == 0 {
                self.check_abort()?;
                if Instant::now() >= deadline {
                    return Err(Failure::Timeout(late()));
                }
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }

    fn upload(&self, g: &Gpu, dst: CuDevicePtr, src: &[u8]) -> Result<(), Failure> {
        self.set(g)?;
        // SAFETY: dst holds at least src.len() bytes on this GPU.
        let rc = unsafe { (self.cu.memcpy_htod)(dst, src.as_ptr() as *const c_void, src.len()) };
        self.cu.check(rc, "cuMemcpyHtoD").map_err(Failure::Cuda)
    }

    fn download(&self, g: &Gpu, src: CuDevicePtr, len: usize) -> Result<Vec<u8>, Failure> {
        self.set(g)?;
        let mut out = vec![0u8; len];
        // SAFETY: out holds len bytes; src holds at least len bytes.
        let rc = unsafe { (self.cu.memcpy_dtoh)(out.as_mut_ptr() as *mut c_void, src, len) };
        self.cu.check(rc, "cuMemcpyDtoH").map_err(Failure::Cuda)?;
        Ok(out)
    }

    /// Runs one size in one mode: poison, run, check every element, time.
    #[allow(clippy::too_many_arguments)]
    fn one(
        &self,
        t: Dtype,
        count: usize,
        nranks: usize,
        inputs: &[Vec<u8>],
        want: &[u8],
        in_place: bool,
        iters: usize,
    ) -> Result<Timing, Failure> {
        let bytes = count * t.size();
        let poison = data::poison(want);
        for (g, input) in self.gpus.iter().zip(inputs) {
            if in_place {
                self.upload(g, g.recv, input)?;
            } else {
                self.upload(g, g.send, input)?;
                self.upload(g, g.recv, &poison)?;
            }
        }
        let what = format!("all-reduce of {bytes} bytes ({})", t.name());
        // One deadline per step: the checked run, the warm-up, the timed batch.
        let step = || Instant::now() + self.timeout;
        let d = step();
        self.all_reduce(count, t, in_place, d)?;
        self.wait(&what, d)?;
        let mut wrong = 0;
        for g in &self.gpus {
            let got = self.download(g, g.recv, bytes)?;
            wrong += data::check(t, &got, want).wrong;
        }
        // Timing: a warm-up, then `iters` back to back.
        let d = step();
        self.all_reduce(count, t, in_place, d)?;
        self.wait(&what, d)?;
        let d = step();
        let start = Instant::now();
        for _ in 0..iters {
            self.all_reduce(count, t, in_place, d)?;
        }
        self.wait(&what, d)?;
        let secs = start.elapsed().as_secs_f64() / iters as f64;
        let algbw = bytes as f64 / secs / 1e9;
        let n = nranks as f64;
        Ok(Timing {
            time_us: secs * 1e6,
            algbw,
            busbw: algbw * 2.0 * (n - 1.0) / n,
            wrong,
        })
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
    let nc = Nccl::load(&opts.lib).map_err(Failure::Load)?;
    on(Event::Loaded {
        path: nc.path.clone(),
        version: nc.version(),
    });
    if opts.rendezvous_only {
        return rendezvous_only(opts, &nc, on);
    }
    let t_driver = Instant::now();
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
    let driver_s = t_driver.elapsed().as_secs_f64();
    let ordinals: Vec<usize> = opts
        .gpus
        .clone()
        .unwrap_or_else(|| (0..count as usize).collect());
    if ordinals.is_empty() {
        return Err(Failure::Usage("no GPU was chosen".into()));
    }
    if let Some(bad) = ordinals.iter().find(|o| **o >= count as usize) {
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
    // Primary contexts take a while each: retain them on one thread per GPU.
    let t_ctx = Instant::now();
    let made: Vec<Result<(usize, String), String>> = std::thread::scope(|sc| {
        let hs: Vec<_> = ordinals
            .iter()
            .map(|&o| {
                let cu = &cu;
                sc.spawn(move || -> Result<(usize, String), String> {
                    let mut dev = 0;
                    let mut ctx: CuContext = std::ptr::null_mut();
                    let mut name = [0i8; 128];
                    // SAFETY: each call writes into the local it is given.
                    unsafe {
                        cu.check((cu.device_get)(&mut dev, o as i32), "cuDeviceGet")?;
                        cu.check(
                            (cu.primary_ctx_retain)(&mut ctx, dev),
                            "cuDevicePrimaryCtxRetain",
                        )?;
                        (cu.device_get_name)(name.as_mut_ptr(), 128, dev);
                    }
                    // SAFETY: cuDeviceGetName wrote a NUL-terminated string (or left zeros).
                    let n = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
                        .to_string_lossy()
                        .into_owned();
                    // The context handle crosses threads as an address.
                    Ok((ctx as usize, n))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a GPU thread failed".into()))
            })
            .collect()
    });
    let mut gpus = Vec::new();
    let mut names = Vec::new();
    for (&o, m) in ordinals.iter().zip(made) {
        let (ctx, n) = m.map_err(Failure::Cuda)?;
        names.push((o, n));
        gpus.push(Gpu {
            ordinal: o,
            ctx: ctx as CuContext,
            stream: std::ptr::null_mut(),
            comm: std::ptr::null_mut(),
            send: 0,
            recv: 0,
        });
    }
    let ctx_s = t_ctx.elapsed().as_secs_f64();
    // Meet the others (or be alone).
    let (id, nranks, first_rank, joined) = match &opts.job {
        None => (nccl_id(&nc)?, gpus.len(), 0, None),
        Some(job) => {
            let mut job = job.clone();
            job.ngpus = gpus.len();
            let make = || nc.unique_id().map(|u| u.internal);
            let j = rendezvous::join(&job, &make, &mut |m| on(Event::Note(m)))
                .map_err(Failure::Rendezvous)?;
            (j.id, j.nranks, j.first_rank, Some(j))
        }
    };
    let seed = opts.seed.unwrap_or_else(|| seed_of(&id));
    on(Event::Devices {
        gpus: names,
        nranks,
        first_rank,
        seed,
    });
    let mut run = Run {
        cu: &cu,
        nc: &nc,
        gpus,
        timeout: opts.timeout,
        abort: joined.as_ref().map(|j| j.abort.clone()),
    };
    on(Event::Note(format!(
        "setup: driver {driver_s:.2} s, GPU contexts {ctx_s:.2} s"
    )));
    let result = sweep(&mut run, opts, id, nranks, first_rank, seed, on);
    let (ok, wrong, message) = match &result {
        Ok((_, w)) => (*w == 0, *w as u64, format!("{w} wrong elements")),
        Err(f) => (false, 0, f.to_string()),
    };
    if result.is_err() {
        let t = Instant::now();
        run.abort_all();
        on(Event::Note(format!(
            "communicators aborted in {:.2} s",
            t.elapsed().as_secs_f64()
        )));
    }
    cleanup(&mut run);
    let peers = joined
        .map(|j| {
            // After a failure, peers get a short grace to report: a stalled
            // one must not hold this rank for another full deadline.
            let grace = if ok {
                opts.timeout
            } else {
                opts.timeout.min(Duration::from_secs(2))
            };
            j.finish(ok, wrong, &message, grace)
        })
        .unwrap_or_default();
    let (rows, wrong) = result?;
    let all_ok = wrong == 0 && peers.iter().all(|p| matches!(p.done, Some((true, _, _))));
    Ok(Summary {
        rows,
        wrong,
        nranks,
        peers,
        ok: all_ok,
    })
}

fn nccl_id(nc: &Nccl) -> Result<[u8; 128], Failure> {
    nc.unique_id()
        .map(|u| u.internal)
        .map_err(|e| Failure::Nccl {
            what: "ncclGetUniqueId".into(),
            error: e,
            hint: hint(2),
        })
}

fn sweep(
    run: &mut Run,
    opts: &Options,
    id: [u8; 128],
    nranks: usize,
    first_rank: usize,
    seed: u64,
    on: &mut dyn FnMut(Event),
) -> Result<(Vec<Row>, usize), Failure> {
    // Communicators: non-blocking where NCCL has it (2.14+), polled to a deadline.
    let deadline = Instant::now() + opts.timeout;
    let uid = nccl::UniqueId { internal: id };
    // SAFETY: group calls bracket the per-GPU inits.
    unsafe { (run.nc.group_start)() };
    for j in 0..run.gpus.len() {
        run.set(&run.gpus[j])?;
        let rank = (first_rank + j) as i32;
        let mut comm: NcclComm = std::ptr::null_mut();
        let blocking = std::env::var_os("NCCL_FIND_BLOCKING_INIT").is_some();
        let rc = match run.nc.comm_init_rank_config.filter(|_| !blocking) {
            Some(f) => {
                let mut cfg = nccl::Config::non_blocking();
                // SAFETY: comm receives the handle; the config outlives the call.
                unsafe { f(&mut comm, nranks as i32, uid, rank, &mut cfg) }
            }
            // SAFETY: as above, blocking.
            None => unsafe { (run.nc.comm_init_rank)(&mut comm, nranks as i32, uid, rank) },
        };
        run.gpus[j].comm = comm;
        if rc != nccl::SUCCESS && rc != nccl::IN_PROGRESS {
            // SAFETY: closes the group.
            unsafe { (run.nc.group_end)() };
            return Err(run.nccl_err(&format!("ncclCommInitRank (rank {rank})"), rc, None));
        }
    }
    // SAFETY: closes the group opened above.
    let rc = unsafe { (run.nc.group_end)() };
    if rc != nccl::SUCCESS && rc != nccl::IN_PROGRESS {
        return Err(run.nccl_err("ncclGroupEnd (communicator init)", rc, None));
    }
    let t_init = Instant::now();
    let secs = run.timeout.as_secs_f64();
    run.poll_comms("communicator init", deadline, &|| {
        format!(
            "NCCL communicator init did not finish within {secs:.0} s; the communicators were aborted. Some rank \
             never joined NCCL's own bootstrap: check that every rank is alive and that the nodes can reach each \
             other (nccl-find doctor)"
        )
    })?;
    on(Event::Note(format!(
        "NCCL communicators ready in {:.2} s",
        t_init.elapsed().as_secs_f64()
    )));
    // Streams and buffers, big enough for the largest size.
    let max_bytes = opts.sizes.iter().copied().max().unwrap_or(0).max(8);
    for j in 0..run.gpus.len() {
        run.set(&run.gpus[j])?;
        let g = &mut run.gpus[j];
        // SAFETY: each call writes into the field it is given, on the current context.
        unsafe {
            run.cu
                .check((run.cu.stream_create)(&mut g.stream, 0), "cuStreamCreate")
                .map_err(Failure::Cuda)?;
            run.cu
                .check(
                    (run.cu.mem_alloc)(&mut g.send, max_bytes),
                    &format!("cuMemAlloc of {max_bytes} bytes"),
                )
                .map_err(Failure::Cuda)?;
            run.cu
                .check(
                    (run.cu.mem_alloc)(&mut g.recv, max_bytes),
                    &format!("cuMemAlloc of {max_bytes} bytes"),
                )
                .map_err(Failure::Cuda)?;
        }
    }
    let mut rows = Vec::new();
    let mut wrong = 0;
    for &t in &opts.dtypes {
        for &bytes in &opts.sizes {
            let count = (bytes / t.size()).max(1);
            let inputs: Vec<Vec<u8>> = (0..run.gpus.len())
                .map(|j| data::input(t, seed, first_rank + j, nranks, count))
                .collect();
            let want = data::expected(t, seed, nranks, count);
            let iters = opts.iters.unwrap_or_else(|| iters_for(bytes));
            let oop = run.one(t, count, nranks, &inputs, &want, false, iters)?;
            let ip = run.one(t, count, nranks, &inputs, &want, true, iters)?;
            wrong += oop.wrong + ip.wrong;
            let row = Row {
                bytes: count * t.size(),
                count,
                dtype: t,
                oop,
                ip,
            };
            on(Event::Row(row.clone()));
            rows.push(row);
        }
    }
    Ok((rows, wrong))
}

fn cleanup(run: &mut Run) {
    for g in &run.gpus {
        if run.set(g).is_err() {
            continue;
        }
        // SAFETY: frees what this run allocated, once; zero handles are skipped.
        unsafe {
            if !g.comm.is_null() {
                (run.nc.comm_destroy)(g.comm);
            }
            if g.send != 0 {
                (run.cu.mem_free)(g.send);
            }
            if g.recv != 0 {
                (run.cu.mem_free)(g.recv);
            }
            if !g.stream.is_null() {
                (run.cu.stream_destroy)(g.stream);
            }
        }
    }
    for g in &mut run.gpus {
        g.comm = std::ptr::null_mut();
    }
}

/// The test seam: meet, report what was handed out, finish.
fn rendezvous_only(
    opts: &Options,
    nc: &Nccl,
    on: &mut dyn FnMut(Event),
) -> Result<Summary, Failure> {
    let job = opts
        .job
        .clone()
        .ok_or_else(|| Failure::Usage("--rendezvous-only needs --world-size and --init".into()))?;
    let mut job = job;
    job.ngpus = opts.gpus.as_ref().map_or(1, Vec::len);
    let make = || nc.unique_id().map(|u| u.internal);
    let j =
        rendezvous::join(&job, &make, &mut |m| on(Event::Note(m))).map_err(Failure::Rendezvous)?;
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
    })
}
