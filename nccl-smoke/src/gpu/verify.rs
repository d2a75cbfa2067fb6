//! The data on the GPU: each rank's inputs made in place, every element of
//! every result checked, by the fill and check kernels (`ptx`), which are
//! loaded on every GPU and tested against the host's own computation
//! first; and the copies between host and GPU the host's fallback needs.

use std::ffi::c_void;

use super::{Data, Gpu, Run};
use crate::collective::Collective;
use crate::cuda::{self, CuDevicePtr, CuFunction};
use crate::data::{self, Exact, Source};
use crate::ptx;
use crate::report::{Event, Failure};

impl Run<'_> {
    pub(super) fn upload(&self, g: &Gpu, dst: CuDevicePtr, src: &[u8]) -> Result<(), Failure> {
        self.set(g)?;
        // SAFETY: dst holds at least src.len() bytes on this GPU.
        let rc = unsafe { (self.cu.memcpy_htod)(dst, src.as_ptr() as *const c_void, src.len()) };
        self.cu.check(rc, "cuMemcpyHtoD").map_err(Failure::Cuda)
    }

    pub(super) fn download(
        &self,
        g: &Gpu,
        src: CuDevicePtr,
        len: usize,
    ) -> Result<Vec<u8>, Failure> {
        self.set(g)?;
        let mut out = vec![0u8; len];
        // SAFETY: out holds len bytes; src holds at least len bytes.
        let rc = unsafe { (self.cu.memcpy_dtoh)(out.as_mut_ptr() as *mut c_void, src, len) };
        self.cu.check(rc, "cuMemcpyDtoH").map_err(Failure::Cuda)?;
        Ok(out)
    }

    /// Launches `f` on `g`'s stream over `count` elements.
    pub(super) fn launch(
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

    /// Launches `f` over `l.count` elements: a fill or a check.
    pub(super) fn kernel(&self, g: &Gpu, f: CuFunction, l: &ptx::Launch) -> Result<(), Failure> {
        let mut values = l.values();
        let mut args: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| v as *mut u64 as *mut c_void)
            .collect();
        self.launch(g, f, l.count as usize, &mut args)
    }

    /// Fills `len` elements at `dst` on the GPU: rank `rank`'s input, or
    /// the poison of a result from `src` (`rank` None).
    pub(super) fn fill(
        &self,
        g: &Gpu,
        d: &Data,
        dst: CuDevicePtr,
        len: usize,
        rank: Option<usize>,
        src: Source,
    ) -> Result<(), Failure> {
        let (fill, _) = g.kernels.expect("kernels loaded");
        let l = ptx::Launch {
            ptr: dst,
            count: len as u64,
            first: 0,
            seed: d.seed,
            rank: rank.unwrap_or(0) as u64,
            mode: u64::from(rank.is_none()),
            out: 0,
            rule: d.rule,
            src,
        };
        self.kernel(g, fill, &l)
    }

    /// Checks `len` elements at `at` on the GPU, element `first` of a
    /// result from `src` on, into the GPU's two counters
    /// ([`Run::check_result`]).
    pub(super) fn check_on_gpu(
        &self,
        g: &Gpu,
        d: &Data,
        at: CuDevicePtr,
        (first, len): (usize, usize),
        src: Source,
    ) -> Result<(), Failure> {
        let (_, check) = g.kernels.expect("kernels loaded");
        let mut fresh = [0u8; 16];
        fresh[8..].fill(0xff);
        self.upload(g, g.result, &fresh)?;
        let l = ptx::Launch {
            ptr: at,
            count: len as u64,
            first: first as u64,
            seed: d.seed,
            rank: 0,
            mode: 0,
            out: g.result,
            rule: d.rule,
            src,
        };
        self.kernel(g, check, &l)
    }

    pub(super) fn check_result(&self, g: &Gpu) -> Result<(usize, u64), Failure> {
        let b = self.download(g, g.result, 16)?;
        let wrong = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        let first = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
        Ok((wrong as usize, first))
    }

    /// Puts every GPU's input in place (in `recv`, at the op's in-place
    /// offset; else in `send`), over its receive buffer poisoned: made by
    /// the kernels, or by the host and uploaded. Enqueued only:
    /// [`Run::wait`] for it.
    pub(super) fn make_inputs(
        &self,
        op: &dyn Collective,
        d: &Data,
        first_rank: usize,
        in_place: bool,
        on_gpu: bool,
    ) -> Result<(), Failure> {
        let (count, nranks) = (d.count, d.rule.nranks);
        let (send, recv) = op.buffers(count, nranks);
        for (j, g) in self.gpus.iter().enumerate() {
            let rank = first_rank + j;
            let src = op.source(rank, nranks, count);
            let (send_at, recv_at) = g.places(op, d, rank, in_place);
            // In place, the input then covers part of the poison (the
            // rank's own block): an element NCCL never wrote there passes
            // where the answer equals the rank's input, as in nccl-tests.
            if on_gpu {
                self.fill(g, d, recv_at, recv, None, src)?;
                self.fill(g, d, send_at, send, Some(rank), src)?;
            } else {
                let want = op.expected(&d.rule, d.seed, rank, count);
                self.upload(g, recv_at, &data::poison(&want))?;
                self.upload(g, send_at, &op.input(&d.rule, d.seed, rank, count))?;
            }
        }
        Ok(())
    }

    /// Checks every element of every GPU's result that
    /// [`Collective::checked`] names (by the check kernel, or downloaded
    /// to the host); the number wrong.
    pub(super) fn count_wrong(
        &self,
        op: &dyn Collective,
        d: &Data,
        first_rank: usize,
        in_place: bool,
        on_gpu: bool,
    ) -> Result<usize, Failure> {
        let e = d.rule.t.size();
        let mut wrong = 0;
        let mut checked = Vec::new();
        for (j, g) in self.gpus.iter().enumerate() {
            let rank = first_rank + j;
            let (at, len) = op.checked(rank, d.rule.nranks, d.count, in_place);
            if len == 0 {
                continue;
            }
            // The first checked element's index in the result.
            let recv_at = if in_place {
                op.in_place(rank, d.rule.nranks, d.count).1
            } else {
                0
            };
            let src = op.source(rank, d.rule.nranks, d.count);
            let ptr = g.recv + (at * e) as u64;
            if on_gpu {
                self.check_on_gpu(g, d, ptr, (at - recv_at, len), src)?;
                checked.push(g);
            } else {
                let want = op.expected(&d.rule, d.seed, rank, d.count);
                let got = self.download(g, ptr, len * e)?;
                let from = (at - recv_at) * e;
                wrong += data::check(d.rule.t, &got, &want[from..from + len * e]).wrong;
            }
        }
        for g in checked {
            wrong += self.check_result(g)?.0;
        }
        Ok(wrong)
    }

    /// Loads the kernels on every GPU and checks them against the host's
    /// data in each of `rules`: the fill's inputs and poison, the check's
    /// counts. Any disagreement leaves the data to the host (slower, as
    /// exact).
    pub(crate) fn load_kernels(&mut self, rules: &[Exact], seed: u64, on: &mut dyn FnMut(Event)) {
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
        if let Err(why) = self.self_test(rules, seed) {
            on(Event::Note(format!(
                "the GPU kernels disagree with the host ({why}): data is made and checked on the host"
            )));
            for g in &mut self.gpus {
                g.kernels = None;
            }
        }
    }

    /// Each rule, a reduction and blocks from every rank: the kernels'
    /// input, poison and counts against the host's.
    pub(super) fn self_test(&self, rules: &[Exact], seed: u64) -> Result<(), String> {
        let count = 4099usize;
        let e = |f: Failure| f.to_string();
        for rule in rules {
            let (t, n) = (rule.t, rule.nranks);
            let d = Data {
                count,
                seed,
                rule: *rule,
            };
            let bytes = count * t.size();
            let what = format!("{} {}", t.name(), rule.op.name());
            // Rank 0's input (hashed values in every rule) and the last
            // rank's (the identity, past the ranks that put in values).
            for (src, rank) in [(Source::reduced(7), 0), (Source::blocks(1000, 3), n - 1)] {
                // The host's, made once for every GPU.
                let input = data::input(rule, seed, rank, count);
                let want = data::expected(rule, seed, src, count);
                let poison = data::poison(&want);
                // The poison is all wrong; the answer, planted, all right
                // but one element; checked from element 5 on.
                let mut planted = want;
                planted[1234 * t.size()] ^= 1;
                for g in &self.gpus {
                    self.fill(g, &d, g.send, count, Some(rank), src)
                        .map_err(e)?;
                    self.fill(g, &d, g.recv, count, None, src).map_err(e)?;
                    self.wait("the kernels' self-test").map_err(e)?;
                    if self.download(g, g.send, bytes).map_err(e)? != input {
                        return Err(format!("{what} inputs"));
                    }
                    if self.download(g, g.recv, bytes).map_err(e)? != poison {
                        return Err(format!("{what} poison"));
                    }
                    self.check_on_gpu(g, &d, g.recv, (0, count), src)
                        .map_err(e)?;
                    self.wait("the kernels' self-test").map_err(e)?;
                    if self.check_result(g).map_err(e)? != (count, 0) {
                        return Err(format!("{what} check of the poison"));
                    }
                    self.upload(g, g.recv, &planted[5 * t.size()..])
                        .map_err(e)?;
                    self.check_on_gpu(g, &d, g.recv, (5, count - 5), src)
                        .map_err(e)?;
                    self.wait("the kernels' self-test").map_err(e)?;
                    if self.check_result(g).map_err(e)? != (1, 1229) {
                        return Err(format!("{what} check of the answer"));
                    }
                }
            }
        }
        Ok(())
    }
}
