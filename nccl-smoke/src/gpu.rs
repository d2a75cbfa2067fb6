//! One process's GPUs: their contexts, communicators, streams, buffers and
//! kernels, and a checked, timed collective ([`crate::collective`]) on all
//! of them at once.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::collective::{AllReduce, Call, Collective};
use crate::cuda::{self, CuContext, CuDevicePtr, CuFunction, CuStream, Cuda};
use crate::data::{Dtype, Exact, Redop};
use crate::nccl::{self, NcclComm, NcclLib};
use crate::report::{Event, Failure, Timing};
use crate::{verdict, watchdog};
use nccl_rendezvous as rendezvous;

mod verify;

/// The GPUs of this process, with their contexts and streams.
pub(crate) struct Gpu {
    pub(crate) ordinal: usize,
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

impl Gpu {
    /// Where NCCL rank `rank`'s send and receive buffers start on this
    /// GPU: its two buffers; in place, the op's offsets into the one.
    fn places(&self, op: &dyn Collective, d: &Data, rank: usize, in_place: bool) -> (u64, u64) {
        if !in_place {
            return (self.send, self.recv);
        }
        let e = d.rule.t.size() as u64;
        let (s, r) = op.in_place(rank, d.rule.nranks, d.count);
        (self.recv + s as u64 * e, self.recv + r as u64 * e)
    }
}

pub(crate) struct Run<'a> {
    pub(crate) cu: &'a Cuda,
    pub(crate) nc: &'a NcclLib,
    pub(crate) gpus: Vec<Gpu>,
    pub(crate) timeout: Duration,
    pub(crate) dog: Arc<watchdog::Watchdog>,
    /// Seconds spent making and checking data, and bytes per GPU touched.
    pub(crate) data_time: std::cell::Cell<(f64, u64)>,
    /// The lowest compute capability (major) of this process's GPUs.
    pub(crate) min_cc: i32,
}

impl<'a> Run<'a> {
    /// The run on `gpus`, its watchdog started (`abort`: raised when another
    /// process goes away).
    pub(crate) fn new(
        cu: &'a Cuda,
        nc: &'a NcclLib,
        gpus: Vec<Gpu>,
        timeout: Duration,
        abort: Option<Arc<rendezvous::Abort>>,
    ) -> Run<'a> {
        let dog = watchdog::Watchdog::start(
            watchdog::NcclFns {
                abort: nc.comm_abort,
                async_error: nc.comm_get_async_error,
                error_string: nc.get_error_string,
            },
            abort,
        );
        Run {
            cu,
            nc,
            gpus,
            timeout,
            dog,
            data_time: std::cell::Cell::new((0.0, 0)),
            min_cc: 0,
        }
    }
}

impl Run<'_> {
    /// Makes one communicator per GPU, as one group (blocking
    /// communicators, as a plain program makes them); the watchdog keeps
    /// the deadline (it aborts them if init outlives it).
    pub(crate) fn init_comms(
        &mut self,
        id: [u8; 128],
        nranks: usize,
        first_rank: usize,
        on: &mut dyn FnMut(Event),
    ) -> Result<(), Failure> {
        let uid = nccl::UniqueId { internal: id };
        // SAFETY: group calls bracket the per-GPU inits.
        unsafe { (self.nc.group_start)() };
        for j in 0..self.gpus.len() {
            self.set(&self.gpus[j])?;
            let rank = (first_rank + j) as i32;
            let mut comm: NcclComm = std::ptr::null_mut();
            // SAFETY: comm receives the handle (NCCL sets it before the group ends).
            let rc = unsafe { (self.nc.comm_init_rank)(&mut comm, nranks as i32, uid, rank) };
            self.gpus[j].comm = comm;
            if rc != nccl::SUCCESS {
                // SAFETY: closes the group.
                unsafe { (self.nc.group_end)() };
                return Err(self.nccl_err(&format!("ncclCommInitRank (rank {rank})"), rc, None));
            }
        }
        let comms: Vec<NcclComm> = self.gpus.iter().map(|g| g.comm).collect();
        self.dog.set_comms(&comms, false);
        let t_init = Instant::now();
        self.dog.arm(
            format!(
                "NCCL communicator init did not finish within {:.0} s; the communicators were aborted. Some rank \
                 never joined NCCL's own bootstrap: check that every rank is alive and that the nodes can reach each \
                 other (nccl-find doctor)",
                self.timeout.as_secs_f64()
            ),
            Instant::now() + self.timeout,
        );
        // SAFETY: closes the group opened above; blocks until init is done.
        let rc = self.dog.inside_nccl(|| unsafe { (self.nc.group_end)() });
        self.dog.disarm();
        let Some(rc) = rc else {
            return Err(self.stopped());
        };
        if rc != nccl::SUCCESS {
            return Err(self.nccl_err("ncclGroupEnd (communicator init)", rc, None));
        }
        self.fired()?;
        self.dog.set_comms(&comms, true);
        on(Event::Note(format!(
            "NCCL communicators ready in {:.2} s",
            t_init.elapsed().as_secs_f64()
        )));
        Ok(())
    }

    /// A stream, the send and receive buffers (each at least 64 KiB) and
    /// the check kernel's counters on every GPU.
    pub(crate) fn alloc(&mut self, send_bytes: usize, recv_bytes: usize) -> Result<(), Failure> {
        for j in 0..self.gpus.len() {
            self.set(&self.gpus[j])?;
            let g = &mut self.gpus[j];
            // SAFETY: each call writes into the field it is given, on the current context.
            unsafe {
                self.cu
                    .check((self.cu.stream_create)(&mut g.stream, 0), "cuStreamCreate")
                    .map_err(Failure::Cuda)?;
                for (buf, len) in [
                    (&mut g.send, send_bytes.max(1 << 16)),
                    (&mut g.recv, recv_bytes.max(1 << 16)),
                    (&mut g.result, 16),
                ] {
                    self.cu
                        .check(
                            (self.cu.mem_alloc)(buf, len),
                            &format!("cuMemAlloc of {len} bytes"),
                        )
                        .map_err(Failure::Cuda)?;
                }
            }
        }
        Ok(())
    }

    /// Whether every GPU has the kernels: the data is made and checked on
    /// the GPUs, else on the host.
    pub(crate) fn kernels_loaded(&self) -> bool {
        self.gpus.iter().all(|g| g.kernels.is_some())
    }

    /// After a failure: the watchdog aborted the communicators already, or
    /// an error came back; aborts what is left (destroying a broken
    /// communicator can hang).
    pub(crate) fn abort_live(&mut self) {
        let live = self.dog.stop();
        if let Some(f) = self.nc.comm_abort {
            for c in &live {
                // SAFETY: a live communicator of this run, aborted once.
                unsafe { f(*c) };
            }
        }
        for g in &mut self.gpus {
            g.comm = std::ptr::null_mut();
        }
    }

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
        Failure::NcclLib {
            what: what.to_string(),
            error: self.nc.error(rc, comm),
            rc,
        }
    }

    /// The watchdog's failure, once it has fired.
    fn stopped(&self) -> Failure {
        match self.dog.failure() {
            Some(f) => f,
            None => Failure::Timeout("the watchdog stopped the run".into()),
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

    /// One call of `op` on every GPU, as one group (blocking communicators),
    /// marked for the watchdog as inside NCCL. The GPUs hold NCCL ranks
    /// `first_rank` on, of `d.rule.nranks`.
    fn collective(
        &self,
        op: &dyn Collective,
        d: &Data,
        first_rank: usize,
        in_place: bool,
    ) -> Result<(), Failure> {
        // One GPU and one NCCL call: no group, as nccl-tests calls it (a
        // group costs microseconds where NCCL's own call costs less).
        let grouped = self.gpus.len() > 1 || op.grouped(self.nc);
        let done = self.dog.inside_nccl(|| {
            // SAFETY: group calls bracket the per-GPU enqueues.
            let rc = if grouped {
                unsafe { (self.nc.group_start)() }
            } else {
                nccl::SUCCESS
            };
            if rc != nccl::SUCCESS {
                return Err(self.nccl_err("ncclGroupStart", rc, None));
            }
            for (j, g) in self.gpus.iter().enumerate() {
                let rank = first_rank + j;
                let (send, recv) = g.places(op, d, rank, in_place);
                let c = Call {
                    send: send as *const c_void,
                    recv: recv as *mut c_void,
                    count: d.count,
                    t: d.rule.t,
                    op: d.rule.op,
                    rank,
                    nranks: d.rule.nranks,
                    comm: g.comm,
                    stream: g.stream,
                };
                // SAFETY: both buffers hold what `op.buffers` asks for at
                // `d.count` elements of `d.rule.t` on this GPU (`alloc`), from the
                // op's in-place offsets; the stream and communicator belong
                // to it; the sweep runs no op that `missing` refused.
                let rc = unsafe { op.call(self.nc, &c) };
                if rc != nccl::SUCCESS {
                    // After an abort no NCCL call may touch the communicators.
                    self.fired()?;
                    if grouped {
                        // SAFETY: close the group before reporting.
                        unsafe { (self.nc.group_end)() };
                    }
                    return Err(self.nccl_err(op.nccl_name(), rc, Some(g.comm)));
                }
            }
            if !grouped {
                return Ok(());
            }
            // SAFETY: closes the group opened above.
            let rc = unsafe { (self.nc.group_end)() };
            if rc != nccl::SUCCESS {
                return Err(self.nccl_err(&format!("ncclGroupEnd ({})", op.name()), rc, None));
            }
            Ok(())
        });
        match done {
            Some(r) => r,
            None => Err(self.stopped()),
        }
    }

    /// Runs one size in one mode: poison, run, check every element, time.
    pub(crate) fn one(
        &self,
        op: &dyn Collective,
        d: &Data,
        first_rank: usize,
        in_place: bool,
        iters: usize,
    ) -> Result<Timing, Failure> {
        let (t, count, nranks) = (d.rule.t, d.count, d.rule.nranks);
        let bytes = count * t.size();
        let on_gpu = self.kernels_loaded();
        let t_data = Instant::now();
        self.make_inputs(op, d, first_rank, in_place, on_gpu)?;
        let what = match op.reduces() {
            true => format!(
                "{} of {bytes} bytes ({}, {})",
                op.name(),
                t.name(),
                d.rule.op.name()
            ),
            false => format!("{} of {bytes} bytes ({})", op.name(), t.name()),
        };
        self.wait("making the inputs")?;
        let mut data_s = t_data.elapsed().as_secs_f64();
        // One deadline per step: the checked run, the warm-up, the timed batch.
        let alone = self.gpus.len() >= nranks;
        let step = |f: &dyn Fn() -> Result<(), Failure>| self.within(&what, alone, f);
        step(&|| {
            self.collective(op, d, first_rank, in_place)?;
            self.wait(&what)
        })?;
        let t_check = Instant::now();
        let wrong = self.count_wrong(op, d, first_rank, in_place, on_gpu)?;
        data_s += t_check.elapsed().as_secs_f64();
        let (s0, b0) = self.data_time.get();
        let touched = bytes as u64 * if in_place { 2 } else { 3 };
        self.data_time.set((s0 + data_s, b0 + touched));
        // Timing: warm-ups (several for small sizes, so that every rank
        // comes to the timed batch in step), then `iters` back to back,
        // one wait.
        step(&|| {
            for _ in 0..if bytes <= 1 << 20 { 5 } else { 1 } {
                self.collective(op, d, first_rank, in_place)?;
            }
            self.wait(&what)
        })?;
        let secs = std::cell::Cell::new(0.0);
        step(&|| {
            let start = Instant::now();
            for _ in 0..iters {
                self.collective(op, d, first_rank, in_place)?;
            }
            self.wait(&what)?;
            secs.set(start.elapsed().as_secs_f64() / iters as f64);
            Ok(())
        })?;
        let counted = op.nccl_tests_count(count, nranks) * t.size();
        Ok(Timing::of(
            counted,
            secs.get(),
            op.bus_factor(nranks),
            wrong,
        ))
    }

    /// Runs `f` (collectives and the wait for them) within the timeout:
    /// past it, the watchdog aborts the communicators and says that `what`
    /// did not finish, and why it may not have: another rank, or (`alone`:
    /// this process holds every rank) the work asked for.
    fn within(
        &self,
        what: &str,
        alone: bool,
        f: &dyn Fn() -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        let why = match alone {
            true => {
                "This process holds every rank, so no other rank held it up: raise --timeout, or ask for \
                 less (--iters, --sizes)"
            }
            false => "A rank died or stalled: check the other ranks",
        };
        let late = format!(
            "{what} did not finish within {:.0} s; the communicators were aborted. {why}",
            self.timeout.as_secs_f64()
        );
        self.dog.arm(late, Instant::now() + self.timeout);
        let r = f();
        self.dog.disarm();
        r
    }

    /// The lowest of every GPU's `value` over the job: one `int32` min
    /// all-reduce on the communicators, so that every rank decides alike.
    pub(crate) fn agree_min(
        &self,
        value: i32,
        nranks: usize,
        first_rank: usize,
    ) -> Result<i32, Failure> {
        let all = self.agree(
            &[value],
            Redop::Min,
            nranks,
            first_rank,
            "the GPUs' compute capability",
        )?;
        Ok(all.first().copied().unwrap_or(value))
    }

    /// `mine` reduced over the job by `op` (an `int32` all-reduce in place
    /// on the communicators): with [`Redop::Min`] every GPU brings `mine`;
    /// with [`Redop::Sum`] this process brings it once (its first GPU),
    /// so that slots each process fills alone come back filled by all.
    /// `what` names it in a timeout.
    pub(crate) fn agree(
        &self,
        mine: &[i32],
        op: Redop,
        nranks: usize,
        first_rank: usize,
        what: &str,
    ) -> Result<Vec<i32>, Failure> {
        let d = Data {
            count: mine.len().max(1),
            seed: 0,
            // Integers add and compare exactly, at any rank count.
            rule: Exact::of(Dtype::I32, op, nranks)
                .unwrap_or_else(|_| unreachable!("an integer reduction is exact")),
        };
        let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
        let zeros = vec![0u8; bytes.len()];
        for (j, g) in self.gpus.iter().enumerate() {
            let src = if j == 0 || op != Redop::Sum {
                &bytes
            } else {
                &zeros
            };
            self.upload(g, g.recv, src)?;
        }
        let alone = self.gpus.len() >= nranks;
        let label = format!("the all-reduce of {what}");
        self.within(&label, alone, &|| {
            self.collective(&AllReduce, &d, first_rank, true)?;
            self.wait(&label)
        })?;
        let Some(g) = self.gpus.first() else {
            return Ok(mine.to_vec());
        };
        let b = self.download(g, g.recv, bytes.len())?;
        Ok(b.chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

/// Retains the primary context of each GPU in `ordinals`, one thread per
/// GPU (each takes a while): the GPUs, and their names.
#[allow(clippy::type_complexity)]
pub(crate) fn open(
    cu: &Cuda,
    ordinals: &[usize],
) -> Result<(Vec<Gpu>, Vec<(usize, String)>), Failure> {
    let made: Vec<Result<(usize, String), String>> = std::thread::scope(|sc| {
        let hs: Vec<_> = ordinals
            .iter()
            .map(|&o| sc.spawn(move || retain(cu, o)))
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
    Ok((gpus, names))
}

/// GPU `o`'s primary context, retained, and its name. The context handle
/// crosses threads as an address.
fn retain(cu: &Cuda, o: usize) -> Result<(usize, String), String> {
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
    Ok((ctx as usize, n))
}

/// One size of one datatype in one reduction: what the kernels and the
/// host need to know.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Data {
    pub(crate) count: usize,
    pub(crate) seed: u64,
    /// The datatype, the reduction and the ranks, and how the inputs are
    /// chosen for them ([`Exact`]).
    pub(crate) rule: Exact,
}

/// The links of this process's GPUs: NVLinks and PCIe from NVML, P2P
/// between every pair from the driver.
pub(crate) fn topology(cu: &Cuda, gpus: &[Gpu]) -> verdict::Topology {
    let nvml = crate::nvml::Nvml::open();
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

/// Frees what the run made; destroys the communicators the watchdog did not
/// abort.
pub(crate) fn cleanup(run: &mut Run) {
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
