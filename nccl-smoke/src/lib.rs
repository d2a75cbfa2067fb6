//! # nccl-smoke
//!
//! The run-time smoke test behind `nccl-find smoke`: a verified all-reduce on
//! every GPU, in one process or across processes and nodes. It loads the
//! exact NCCL file it is given, checks every element of every result, and
//! never hangs: every step has a deadline, after which the communicators are
//! aborted and the report names what never finished.
//!
//! It is a crate of its own, apart from `nccl-find` (the build dependency
//! that finds NCCL), so that build scripts never compile this GPU and network
//! runtime. [`driver`] is the one place that loads the CUDA driver, for the
//! test and for `nccl-find doctor`'s facts alike.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use nccl_smoke::{Dtype, Event, Options, DEFAULT_SIZES};
//! # fn main() -> Result<(), nccl_smoke::Failure> {
//! let opts = Options {
//!     lib: "/usr/lib/x86_64-linux-gnu/libnccl.so.2".into(),
//!     gpus: None,
//!     sizes: DEFAULT_SIZES.to_vec(),
//!     dtypes: vec![Dtype::F32],
//!     seed: None,
//!     timeout: Duration::from_secs(60),
//!     job: None,
//!     iters: None,
//!     rendezvous_only: false,
//! };
//! let summary = nccl_smoke::run(&opts, &mut |e: Event| println!("{e:?}"))?;
//! assert!(summary.ok);
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod cuda;
pub mod data;
pub mod driver;
mod fsafe;
mod nccl;
mod ptx;
pub mod rendezvous;
pub mod verdict;
mod watchdog;

use cuda::{CuContext, CuDevicePtr, CuFunction, CuStream, Cuda};
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
    /// The links of this process's GPUs (for [`verdict::judge`]).
    pub topology: verdict::Topology,
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
    /// Two counters the check kernel adds into: wrong elements, first wrong index.
    result: CuDevicePtr,
    /// The fill and check kernels, loaded into this GPU's context.
    kernels: Option<(CuFunction, CuFunction)>,
}

struct Run<'a> {
    cu: &'a Cuda,
    nc: &'a Nccl,
    gpus: Vec<Gpu>,
    timeout: Duration,
    dog: Arc<watchdog::Watchdog>,
    /// Seconds spent making and checking data, and bytes per GPU touched.
    data_time: std::cell::Cell<(f64, u64)>,
}

impl Run<'_> {
    fn set(&self, g: &Gpu) -> Result<(), Failure> {
        // SAFETY: the context is a retained primary context of this process.
        let rc = unsafe { (self.cu.ctx_set_current)(g.ctx) };
        self.cu.check(rc, "cuCtxSetCurrent").map_err(Failure::Cuda)
    }

    fn nccl_err(&self, what: &str, rc: i32, comm: Option<NcclComm>) -> Failure {
        // After an abort the communicators are gone: the watchdog's reason
        // is the one to give, and no freed communicator may be asked.
        if let Some(f) = self.dog.failure() {
            return f;
        }
        Failure::Nccl {
            what: what.to_string(),
            error: self.nc.error(rc, comm),
            hint: hint(rc),
        }
    }

    fn fired(&self) -> Result<(), Failure> {
        match self.dog.has_fired().then(|| self.dog.failure()).flatten() {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }

    /// Waits for every stream, spinning as `cuStreamSynchronize` would,
    /// while the watchdog keeps the deadline.
    fn wait(&self, what: &str) -> Result<(), Failure> {
        let start = Instant::now();
        let mut spins = 0u32;
        let mut pending: Vec<&Gpu> = self.gpus.iter().collect();
        loop {
            self.fired()?;
            let mut k = 0;
            while k < pending.len() {
                let g = pending[k];
                self.set(g)?;
                // SAFETY: live stream of the current context.
                let rc = unsafe { (self.cu.stream_query)(g.stream) };
                if rc == cuda::NOT_READY {
                    k += 1;
                } else if rc != 0 {
                    self.fired()?;
                    return Err(Failure::Cuda(format!("{what}: {}", self.cu.error(rc))));
                } else {
                    pending.swap_remove(k);
                }
            }
            if pending.is_empty() {
                return Ok(());
            }
            spins += 1;
            if spins % 256 == 0 && start.elapsed() > Duration::from_millis(20) {
                std::thread::sleep(Duration::from_micros(20));
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// One all-reduce on every GPU, as one group (blocking communicators).
    fn all_reduce(&self, count: usize, t: Dtype, in_place: bool) -> Result<(), Failure> {
        self.dog.in_nccl(true);
        let r = self.all_reduce_inner(count, t, in_place);
        self.dog.in_nccl(false);
        r
    }

    fn all_reduce_inner(&self, count: usize, t: Dtype, in_place: bool) -> Result<(), Failure> {
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
            if rc != nccl::SUCCESS {
                // After an abort no NCCL call may touch the communicators.
                self.fired()?;
                // SAFETY: close the group before reporting.
                unsafe { (self.nc.group_end)() };
                return Err(self.nccl_err("ncclAllReduce", rc, Some(g.comm)));
            }
        }
        // SAFETY: closes the group opened above.
        let rc = unsafe { (self.nc.group_end)() };
        if rc != nccl::SUCCESS {
            return Err(self.nccl_err("ncclGroupEnd (all-reduce)", rc, None));
        }
        Ok(())
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

    /// Launches `f` on `g`'s stream over `count` elements.
    fn launch(
        &self,
        g: &Gpu,
        f: CuFunction,
        count: usize,
        args: &mut [*mut c_void],
    ) -> Result<(), Failure> {
        self.set(g)?;
        // SAFETY: `args` points at one value per kernel parameter, of the
        // parameter's type, alive for the call (the driver copies them).
        let rc = unsafe {
            (self.cu.launch_kernel)(
                f,
                ptx::grid(count),
                1,
                1,
                ptx::BLOCK,
                1,
                1,
                0,
                g.stream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.cu.check(rc, "cuLaunchKernel").map_err(Failure::Cuda)
    }

    /// Fills `dst` on the GPU: rank `rank`'s input, or the poison.
    fn fill(
        &self,
        g: &Gpu,
        d: &Data,
        dst: CuDevicePtr,
        rank: usize,
        poison: bool,
    ) -> Result<(), Failure> {
        let (fill, _) = g.kernels.expect("kernels loaded");
        let (mut ptr, mut count, mut seed, mut rank, mut nranks) =
            (dst, d.count as u64, d.seed, rank as u64, d.nranks as u64);
        let (mut dtype, mut mask, mut esize, mut mode) = (
            d.t.code(),
            d.t.value_mask(d.nranks),
            d.t.size() as u64,
            u32::from(poison),
        );
        let mut args: [*mut c_void; 9] = [
            &mut ptr as *mut _ as *mut c_void,
            &mut count as *mut _ as *mut c_void,
            &mut seed as *mut _ as *mut c_void,
            &mut rank as *mut _ as *mut c_void,
            &mut nranks as *mut _ as *mut c_void,
            &mut dtype as *mut _ as *mut c_void,
            &mut mask as *mut _ as *mut c_void,
            &mut esize as *mut _ as *mut c_void,
            &mut mode as *mut _ as *mut c_void,
        ];
        self.launch(g, fill, d.count, &mut args)
    }

    /// Checks every element of `src` on the GPU; returns the number wrong
    /// and the first wrong index.
    fn check_on_gpu(&self, g: &Gpu, d: &Data, src: CuDevicePtr) -> Result<(), Failure> {
        let (_, check) = g.kernels.expect("kernels loaded");
        self.upload(
            g,
            g.result,
            &[0u8; 8]
                .iter()
                .chain(&[0xffu8; 8])
                .copied()
                .collect::<Vec<_>>(),
        )?;
        let (mut ptr, mut count, mut seed, mut nranks) =
            (src, d.count as u64, d.seed, d.nranks as u64);
        let (mut dtype, mut mask, mut esize, mut out) = (
            d.t.code(),
            d.t.value_mask(d.nranks),
            d.t.size() as u64,
            g.result,
        );
        let mut args: [*mut c_void; 8] = [
            &mut ptr as *mut _ as *mut c_void,
            &mut count as *mut _ as *mut c_void,
            &mut seed as *mut _ as *mut c_void,
            &mut nranks as *mut _ as *mut c_void,
            &mut dtype as *mut _ as *mut c_void,
            &mut mask as *mut _ as *mut c_void,
            &mut esize as *mut _ as *mut c_void,
            &mut out as *mut _ as *mut c_void,
        ];
        self.launch(g, check, d.count, &mut args)
    }

    fn check_result(&self, g: &Gpu) -> Result<(usize, u64), Failure> {
        let b = self.download(g, g.result, 16)?;
        let wrong = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        let first = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
        Ok((wrong as usize, first))
    }

    /// Runs one size in one mode: poison, run, check every element, time.
    fn one(
        &self,
        d: &Data,
        first_rank: usize,
        in_place: bool,
        iters: usize,
    ) -> Result<Timing, Failure> {
        let (t, count, nranks) = (d.t, d.count, d.nranks);
        let bytes = count * t.size();
        let on_gpu = self.gpus.iter().all(|g| g.kernels.is_some());
        let t_data = Instant::now();
        for (j, g) in self.gpus.iter().enumerate() {
            let dst = if in_place { g.recv } else { g.send };
            if on_gpu {
                self.fill(g, d, dst, first_rank + j, false)?;
                if !in_place {
                    self.fill(g, d, g.recv, 0, true)?;
                }
            } else {
                self.upload(
                    g,
                    dst,
                    &data::input(t, d.seed, first_rank + j, nranks, count),
                )?;
                if !in_place {
                    self.upload(
                        g,
                        g.recv,
                        &data::poison(&data::expected(t, d.seed, nranks, count)),
                    )?;
                }
            }
        }
        let what = format!("all-reduce of {bytes} bytes ({})", t.name());
        self.wait("making the inputs")?;
        let mut data_s = t_data.elapsed().as_secs_f64();
        let late = format!(
            "{what} did not finish within {:.0} s; the communicators were aborted. A rank died or stalled: check \
             the other ranks",
            self.timeout.as_secs_f64()
        );
        // One deadline per step: the checked run, the warm-up, the timed batch.
        let step = |f: &dyn Fn() -> Result<(), Failure>| -> Result<(), Failure> {
            self.dog.arm(late.clone(), Instant::now() + self.timeout);
            let r = f();
            self.dog.disarm();
            r
        };
        step(&|| {
            self.all_reduce(count, t, in_place)?;
            self.wait(&what)
        })?;
        let mut wrong = 0;
        let t_check = Instant::now();
        if on_gpu {
            for g in &self.gpus {
                self.check_on_gpu(g, d, g.recv)?;
            }
            for g in &self.gpus {
                wrong += self.check_result(g)?.0;
            }
        } else {
            let want = data::expected(t, d.seed, nranks, count);
            for g in &self.gpus {
                let got = self.download(g, g.recv, bytes)?;
                wrong += data::check(t, &got, &want).wrong;
            }
        }
        data_s += t_check.elapsed().as_secs_f64();
        let (s0, b0) = self.data_time.get();
        let touched = bytes as u64 * if in_place { 2 } else { 3 };
        self.data_time.set((s0 + data_s, b0 + touched));
        // Timing: warm-ups (several for small sizes, so that every rank
        // comes to the timed batch in step), then `iters` back to back,
        // one wait.
        step(&|| {
            for _ in 0..if bytes <= 1 << 20 { 5 } else { 1 } {
                self.all_reduce(count, t, in_place)?;
            }
            self.wait(&what)
        })?;
        let secs = std::cell::Cell::new(0.0);
        step(&|| {
            let start = Instant::now();
            for _ in 0..iters {
                self.all_reduce(count, t, in_place)?;
            }
            self.wait(&what)?;
            secs.set(start.elapsed().as_secs_f64() / iters as f64);
            Ok(())
        })?;
        Ok(Timing::of(bytes, secs.get(), nranks, wrong))
    }

    /// Loads the kernels on every GPU and checks them against the host's
    /// data: the fill's inputs and poison, the check's counts. Any
    /// disagreement leaves the data to the host (slower, as exact).
    fn load_kernels(
        &mut self,
        dtypes: &[Dtype],
        nranks: usize,
        seed: u64,
        on: &mut dyn FnMut(Event),
    ) {
        let text = std::ffi::CString::new(ptx::module()).unwrap_or_default();
        for j in 0..self.gpus.len() {
            if self.set(&self.gpus[j]).is_err() {
                return;
            }
            let mut m: cuda::CuModule = std::ptr::null_mut();
            let (mut fill, mut check): (CuFunction, CuFunction) =
                (std::ptr::null_mut(), std::ptr::null_mut());
            // SAFETY: the text is NUL-terminated PTX; each call writes one handle.
            let rc = unsafe {
                let mut rc = (self.cu.module_load_data)(&mut m, text.as_ptr() as *const c_void);
                if rc == 0 {
                    rc = (self.cu.module_get_function)(&mut fill, m, b"nf_fill\0".as_ptr().cast());
                }
                if rc == 0 {
                    rc =
                        (self.cu.module_get_function)(&mut check, m, b"nf_check\0".as_ptr().cast());
                }
                rc
            };
            if rc != 0 {
                on(Event::Note(format!(
                    "the GPU kernels did not load ({}): data is made and checked on the host",
                    self.cu.error(rc)
                )));
                for g in &mut self.gpus {
                    g.kernels = None;
                }
                return;
            }
            self.gpus[j].kernels = Some((fill, check));
        }
        if let Err(why) = self.self_test(dtypes, nranks, seed) {
            on(Event::Note(format!(
                "the GPU kernels disagree with the host ({why}): data is made and checked on the host"
            )));
            for g in &mut self.gpus {
                g.kernels = None;
            }
        }
    }

    fn self_test(&self, dtypes: &[Dtype], nranks: usize, seed: u64) -> Result<(), String> {
        let count = 4099usize;
        for g in &self.gpus {
            for &t in dtypes {
                let d = Data {
                    t,
                    count,
                    nranks,
                    seed,
                };
                let bytes = count * t.size();
                let e = |f: Failure| f.to_string();
                self.fill(g, &d, g.send, nranks - 1, false).map_err(e)?;
                self.fill(g, &d, g.recv, 0, true).map_err(e)?;
                self.wait("the kernels' self-test").map_err(e)?;
                let input = self.download(g, g.send, bytes).map_err(e)?;
                if input != data::input(t, seed, nranks - 1, nranks, count) {
                    return Err(format!("{} inputs", t.name()));
                }
                let want = data::expected(t, seed, nranks, count);
                if self.download(g, g.recv, bytes).map_err(e)? != data::poison(&want) {
                    return Err(format!("{} poison", t.name()));
                }
                // The poison is all wrong; the answer, planted, all right
                // but one element.
                self.check_on_gpu(g, &d, g.recv).map_err(e)?;
                self.wait("the kernels' self-test").map_err(e)?;
                if self.check_result(g).map_err(e)? != (count, 0) {
                    return Err(format!("{} check of the poison", t.name()));
                }
                let mut planted = want.clone();
                planted[1234 * t.size()] ^= 1;
                self.upload(g, g.recv, &planted).map_err(e)?;
                self.check_on_gpu(g, &d, g.recv).map_err(e)?;
                self.wait("the kernels' self-test").map_err(e)?;
                if self.check_result(g).map_err(e)? != (1, 1234) {
                    return Err(format!("{} check of the answer", t.name()));
                }
            }
        }
        Ok(())
    }
}

/// One size of one datatype: what the kernels and the host need to know.
#[derive(Debug, Clone, Copy)]
struct Data {
    t: Dtype,
    count: usize,
    nranks: usize,
    seed: u64,
}

impl Timing {
    /// The figures of `bytes` all-reduced over `nranks` in `secs` per call.
    pub fn of(bytes: usize, secs: f64, nranks: usize, wrong: usize) -> Timing {
        let algbw = bytes as f64 / secs / 1e9;
        let n = nranks as f64;
        Timing {
            time_us: secs * 1e6,
            algbw,
            busbw: algbw * 2.0 * (n - 1.0) / n,
            wrong,
        }
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
    if let Some(p) = ifname_problem(
        std::env::var("NCCL_SOCKET_IFNAME").ok().as_deref(),
        &interfaces(),
    ) {
        on(Event::Note(p));
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
            result: 0,
            kernels: None,
        });
    }
    let topology = topology(&cu, &gpus);
    let ctx_s = t_ctx.elapsed().as_secs_f64();
    // Meet the others (or be alone).
    let (id, nranks, first_rank, joined) = match &opts.job {
        None => (nccl_id(&nc)?, gpus.len(), 0, None),
        Some(job) => {
            let mut job = job.clone();
            job.ngpus = gpus.len();
            let make = || nccl_id(&nc).map_err(|f| f.to_string());
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
    let dog = watchdog::Watchdog::start(
        watchdog::NcclFns {
            abort: nc.comm_abort,
            async_error: nc.comm_get_async_error,
            error_string: nc.get_error_string,
        },
        joined.as_ref().map(|j| j.abort.clone()),
    );
    let mut run = Run {
        cu: &cu,
        nc: &nc,
        gpus,
        timeout: opts.timeout,
        dog,
        data_time: std::cell::Cell::new((0.0, 0)),
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
        // The watchdog aborted them already, or an error came back: abort
        // what is left (destroying a broken communicator can hang).
        let t = Instant::now();
        let live = run.dog.stop();
        if let Some(f) = nc.comm_abort {
            for c in &live {
                // SAFETY: a live communicator of this run, aborted once.
                unsafe { f(*c) };
            }
        }
        for g in &mut run.gpus {
            g.comm = std::ptr::null_mut();
        }
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
        topology,
    })
}

/// The links of this process's GPUs: NVLinks and PCIe from NVML, P2P
/// between every pair from the driver.
fn topology(cu: &Cuda, gpus: &[Gpu]) -> verdict::Topology {
    let nvml = verdict::Nvml::open();
    let mut t = verdict::Topology::default();
    let mut devs = Vec::new();
    for g in gpus {
        let mut dev = 0;
        let mut cc = 0;
        let mut bus = [0 as std::ffi::c_char; 32];
        // SAFETY: each call writes into the local it is given (bus: 32 bytes, NUL-terminated).
        let ok = unsafe {
            (cu.device_get)(&mut dev, g.ordinal as i32) == 0
                && (cu.device_get_attribute)(&mut cc, cuda::ATTR_CC_MAJOR, dev) == 0
                && (cu.device_get_pci_bus_id)(bus.as_mut_ptr(), 32, dev) == 0
        };
        devs.push(dev);
        // SAFETY: the driver wrote a NUL-terminated string (or zeros).
        let bus = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) };
        let (nvlinks, pcie) = match (&nvml, ok) {
            (Some(n), true) => n.links(bus),
            _ => (None, None),
        };
        t.gpus.push(verdict::GpuLinks {
            ordinal: g.ordinal,
            cc_major: cc,
            nvlinks,
            pcie,
        });
    }
    if devs.len() > 1 {
        let mut all = true;
        for &a in &devs {
            for &b in devs.iter().filter(|b| **b != a) {
                let mut can = 0;
                // SAFETY: writes one int.
                let rc = unsafe { (cu.device_can_access_peer)(&mut can, a, b) };
                all &= rc == 0 && can == 1;
            }
        }
        t.p2p = Some(all);
    }
    t
}

fn nccl_id(nc: &Nccl) -> Result<[u8; 128], Failure> {
    nc.unique_id()
        .map(|u| u.internal)
        .map_err(|e| Failure::Nccl {
            what: "ncclGetUniqueId".into(),
            error: e.trim_start_matches("ncclGetUniqueId failed: ").to_string(),
            hint: ifname_problem(
                std::env::var("NCCL_SOCKET_IFNAME").ok().as_deref(),
                &interfaces(),
            )
            .unwrap_or_else(|| hint(2)),
        })
}

/// What is wrong with `NCCL_SOCKET_IFNAME` (`ifname`) given this machine's
/// interfaces, with the fix; `None` when it is unset or matches one. NCCL
/// reads it as a comma-separated list of name prefixes (`=` before the list:
/// exact names; `^`: names to avoid).
pub fn ifname_problem(ifname: Option<&str>, interfaces: &[String]) -> Option<String> {
    let v = ifname?.trim();
    if v.is_empty() {
        return None;
    }
    let (exclude, rest) = match v.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, v),
    };
    let (exact, list) = match rest.strip_prefix('=') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let named = |i: &String| {
        list.split(',')
            .filter(|p| !p.is_empty())
            .any(|p| if exact { i == p } else { i.starts_with(p) })
    };
    let usable: Vec<&String> = interfaces
        .iter()
        .filter(|i| i.as_str() != "lo" && named(i) != exclude)
        .collect();
    if !usable.is_empty() {
        return None;
    }
    let others: Vec<&str> = interfaces
        .iter()
        .map(String::as_str)
        .filter(|i| *i != "lo")
        .collect();
    Some(format!(
        "NCCL_SOCKET_IFNAME={v} leaves NCCL no network interface here (interfaces: {}), so it cannot bootstrap. \
         Name one that reaches the other nodes{}",
        if others.is_empty() { "lo only".to_string() } else { others.join(", ") },
        default_route_iface().map_or(String::new(), |i| format!(": the default route's is NCCL_SOCKET_IFNAME={i}"))
    ))
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
    // Blocking communicators, as a plain program makes them; the watchdog
    // keeps the deadline (it aborts them if init outlives it).
    let uid = nccl::UniqueId { internal: id };
    // SAFETY: group calls bracket the per-GPU inits.
    unsafe { (run.nc.group_start)() };
    for j in 0..run.gpus.len() {
        run.set(&run.gpus[j])?;
        let rank = (first_rank + j) as i32;
        let mut comm: NcclComm = std::ptr::null_mut();
        // SAFETY: comm receives the handle (NCCL sets it before the group ends).
        let rc = unsafe { (run.nc.comm_init_rank)(&mut comm, nranks as i32, uid, rank) };
        run.gpus[j].comm = comm;
        if rc != nccl::SUCCESS {
            // SAFETY: closes the group.
            unsafe { (run.nc.group_end)() };
            return Err(run.nccl_err(&format!("ncclCommInitRank (rank {rank})"), rc, None));
        }
    }
    let comms: Vec<NcclComm> = run.gpus.iter().map(|g| g.comm).collect();
    run.dog.set_comms(&comms, false);
    let t_init = Instant::now();
    run.dog.arm(
        format!(
            "NCCL communicator init did not finish within {:.0} s; the communicators were aborted. Some rank \
             never joined NCCL's own bootstrap: check that every rank is alive and that the nodes can reach each \
             other (nccl-find doctor)",
            run.timeout.as_secs_f64()
        ),
        Instant::now() + opts.timeout,
    );
    run.dog.in_nccl(true);
    // SAFETY: closes the group opened above; blocks until init is done.
    let rc = unsafe { (run.nc.group_end)() };
    run.dog.in_nccl(false);
    run.dog.disarm();
    if rc != nccl::SUCCESS {
        return Err(run.nccl_err("ncclGroupEnd (communicator init)", rc, None));
    }
    run.fired()?;
    run.dog.set_comms(&comms, true);
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
            for (buf, len) in [
                (&mut g.send, max_bytes.max(1 << 16)),
                (&mut g.recv, max_bytes.max(1 << 16)),
                (&mut g.result, 16),
            ] {
                run.cu
                    .check(
                        (run.cu.mem_alloc)(buf, len),
                        &format!("cuMemAlloc of {len} bytes"),
                    )
                    .map_err(Failure::Cuda)?;
            }
        }
    }
    let t_k = Instant::now();
    run.load_kernels(&opts.dtypes, nranks, seed, on);
    if run.gpus.iter().all(|g| g.kernels.is_some()) {
        on(Event::Note(format!(
            "data made and checked on the GPU (kernels loaded and self-tested in {:.2} s)",
            t_k.elapsed().as_secs_f64()
        )));
    }
    let mut rows = Vec::new();
    let mut wrong = 0;
    for &t in &opts.dtypes {
        for &bytes in &opts.sizes {
            let count = (bytes / t.size()).max(1);
            let d = Data {
                t,
                count,
                nranks,
                seed,
            };
            let iters = opts.iters.unwrap_or_else(|| iters_for(bytes));
            let oop = run.one(&d, first_rank, false, iters)?;
            let ip = run.one(&d, first_rank, true, iters)?;
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
    let (secs, touched) = run.data_time.get();
    if touched > 0 {
        on(Event::Note(format!(
            "data: {:.2} GB per GPU made and checked on the {} in {secs:.3} s ({:.0} GB/s per GPU)",
            touched as f64 / 1e9,
            if run.gpus.iter().all(|g| g.kernels.is_some()) {
                "GPU"
            } else {
                "host"
            },
            touched as f64 / 1e9 / secs.max(1e-9)
        )));
    }
    Ok((rows, wrong))
}

fn cleanup(run: &mut Run) {
    // Communicators the watchdog aborted are gone; the others are destroyed.
    let live = run.dog.stop();
    for g in &mut run.gpus {
        if !live.contains(&g.comm) {
            g.comm = std::ptr::null_mut();
        }
    }
    for g in &run.gpus {
        if run.set(g).is_err() {
            continue;
        }
        // SAFETY: frees what this run allocated, once; zero handles are skipped.
        unsafe {
            if !g.comm.is_null() {
                (run.nc.comm_destroy)(g.comm);
            }
            for p in [g.send, g.recv, g.result] {
                if p != 0 {
                    (run.cu.mem_free)(p);
                }
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
        topology: verdict::Topology::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_ifname_that_names_no_interface_is_caught() {
        let here: Vec<String> = ["eth0", "ifb0", "ifb1", "lo"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(ifname_problem(None, &here), None);
        assert_eq!(ifname_problem(Some("eth0"), &here), None);
        assert_eq!(ifname_problem(Some("eth"), &here), None);
        assert_eq!(ifname_problem(Some("^docker,lo"), &here), None);
        assert_eq!(ifname_problem(Some("=ifb1"), &here), None);
        let p = ifname_problem(Some("nosuchif0"), &here).unwrap();
        assert!(
            p.starts_with(
                "NCCL_SOCKET_IFNAME=nosuchif0 leaves NCCL no network interface here (interfaces: eth0, ifb0, ifb1), \
                 so it cannot bootstrap. Name one that reaches the other nodes"
            ),
            "{p}"
        );
        assert!(ifname_problem(Some("=eth"), &here).is_some());
        assert!(ifname_problem(Some("^eth,ifb"), &here).is_some());
        assert!(ifname_problem(Some("lo"), &here).is_some());
    }

    #[test]
    fn timing_math() {
        let t = Timing::of(1 << 30, 0.003, 4, 0);
        assert!((t.time_us - 3000.0).abs() < 1e-9);
        assert!((t.algbw - 357.913_941_333).abs() < 1e-6, "{}", t.algbw);
        assert!((t.busbw - t.algbw * 1.5).abs() < 1e-9);
        assert_eq!(Timing::of(8, 1e-5, 1, 3).busbw, 0.0);
        assert_eq!(Timing::of(8, 1e-5, 1, 3).wrong, 3);
    }
}
