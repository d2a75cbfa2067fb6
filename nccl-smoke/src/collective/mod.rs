//! The collectives the smoke test runs, one module a row of
//! [`COLLECTIVES`]: what each rank puts in, what each must get back, how
//! nccl-tests counts its bus bandwidth, and the NCCL call. The run poisons
//! every output, calls NCCL on every GPU as one group, checks every element
//! and times it the same way for every row.
//!
//! Adding one is one module here with a type that implements
//! [`Collective`], one row in [`COLLECTIVES`], and a test of its expected
//! values against a host computation for 1, 2, 3 and 8 ranks.

use std::ffi::c_void;

use crate::cuda::CuStream;
use crate::data::{self, Dtype, Exact, Redop, Source};
use crate::nccl::{NcclComm, NcclLib, NcclResult, ReduceLikeFn};

mod all_gather;
mod all_reduce;
mod all_to_all;
mod broadcast;
mod gather;
mod p2p;
mod reduce;
mod reduce_scatter;
mod scatter;
mod send_recv;

pub use all_gather::AllGather;
pub use all_reduce::AllReduce;
pub use all_to_all::AllToAll;
pub use broadcast::Broadcast;
pub use gather::Gather;
pub use reduce::Reduce;
pub use reduce_scatter::ReduceScatter;
pub use scatter::Scatter;
pub use send_recv::SendRecv;

/// The root of the rooted collectives (broadcast, reduce, gather, scatter).
pub(crate) const ROOT: usize = 0;

/// One NCCL collective, as the smoke test runs it. Every rank runs it over
/// `count` elements per rank (the size a row of the report names).
pub trait Collective: Sync + std::fmt::Debug {
    /// Its name, as the report gives it (`all-reduce`).
    fn name(&self) -> &'static str;
    /// NCCL's function.
    fn nccl_name(&self) -> &'static str;
    /// Why the loaded NCCL cannot run it (it lacks the function), or `None`.
    fn missing(&self, _nc: &NcclLib) -> Option<String> {
        None
    }
    /// Whether grouped sends and receives stand in for its NCCL function,
    /// which the loaded NCCL lacks (as nccl-tests does before NCCL 2.28.3).
    fn stands_in(&self, _nc: &NcclLib) -> bool {
        false
    }
    /// Whether its NCCL calls on one GPU must be grouped (several sends
    /// and receives); one call of one GPU runs alone.
    fn grouped(&self, nc: &NcclLib) -> bool {
        self.stands_in(nc)
    }
    /// Elements in a rank's send and receive buffers.
    fn buffers(&self, count: usize, nranks: usize) -> (usize, usize);
    /// In place, the elements of the one buffer that holds both (the
    /// receive buffer, allocated this large).
    fn one_buffer(&self, count: usize, nranks: usize) -> usize {
        let (s, r) = self.buffers(count, nranks);
        s.max(r)
    }
    /// In place, where the send and the receive buffer start within the one
    /// buffer, in elements (nccl-tests' in-place offsets).
    fn in_place(&self, _rank: usize, _nranks: usize, _count: usize) -> (usize, usize) {
        (0, 0)
    }
    /// The part of the receive buffer whose every element is checked
    /// (offset and length in elements): all of it, but where a rank's
    /// result is only part of the buffer (in-place reduce-scatter), or
    /// none (a rank that is not the root of a reduce).
    fn checked(&self, rank: usize, nranks: usize, count: usize, in_place: bool) -> (usize, usize) {
        let _ = (rank, in_place);
        (0, self.buffers(count, nranks).1)
    }
    /// The elements nccl-tests counts for its sizes and bandwidths, for
    /// `count` elements per rank: the whole gathered buffer of an
    /// all-gather, the whole input of a reduce-scatter.
    fn nccl_tests_count(&self, count: usize, _nranks: usize) -> usize {
        count
    }
    /// Whether it reduces (and takes a reduction); otherwise it moves data.
    fn reduces(&self) -> bool {
        false
    }
    /// Where each element of NCCL rank `rank`'s receive buffer comes from
    /// (every rank's input is its own values, `buffers(..).0` of them).
    fn source(&self, rank: usize, nranks: usize, count: usize) -> Source;
    /// NCCL rank `rank`'s input, made on the host.
    fn input(&self, rule: &Exact, seed: u64, rank: usize, count: usize) -> Vec<u8> {
        data::input(rule, seed, rank, self.buffers(count, rule.nranks).0)
    }
    /// What NCCL rank `rank`'s receive buffer must hold afterwards, made
    /// on the host.
    fn expected(&self, rule: &Exact, seed: u64, rank: usize, count: usize) -> Vec<u8> {
        let n = rule.nranks;
        data::expected(
            rule,
            seed,
            self.source(rank, n, count),
            self.buffers(count, n).1,
        )
    }
    /// nccl-tests' factor from the algorithm bandwidth to the bus
    /// bandwidth, for `nranks` ranks (its `doc/PERFORMANCE.md`).
    fn bus_factor(&self, nranks: usize) -> f64;
    /// Enqueues the collective for one GPU.
    ///
    /// # Safety
    ///
    /// `c.send` and `c.recv` hold the elements [`Collective::buffers`] asks
    /// for at `c.count` (from their offsets, in place) on the GPU of
    /// `c.comm`, and `c.stream` belongs to it; [`Collective::missing`] said
    /// nothing.
    unsafe fn call(&self, nc: &NcclLib, c: &Call) -> NcclResult;
}

/// One call of a collective on one GPU: its two buffers (the same memory
/// in place, at the op's offsets), the elements per rank, the datatype and
/// the reduction, and where it runs.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// What is sent.
    pub send: *const c_void,
    /// What is received.
    pub recv: *mut c_void,
    /// Elements per rank.
    pub count: usize,
    /// The datatype.
    pub t: Dtype,
    /// The reduction (of a collective that reduces).
    pub op: Redop,
    /// NCCL rank.
    pub rank: usize,
    /// NCCL ranks in all.
    pub nranks: usize,
    /// The GPU's communicator.
    pub comm: NcclComm,
    /// Its stream.
    pub stream: CuStream,
}

impl Call {
    /// Enqueues `f`, a function of `ncclAllReduce`'s shape, with `arg` (the
    /// reduction's `ncclRedOp_t`, or the root).
    ///
    /// # Safety
    ///
    /// As [`Collective::call`]'s, for the buffers `f` takes.
    pub(crate) unsafe fn enqueue(&self, f: ReduceLikeFn, arg: i32) -> NcclResult {
        let c = self;
        // SAFETY: the caller's contract.
        unsafe { f(c.send, c.recv, c.count, c.t.nccl().0, arg, c.comm, c.stream) }
    }
}

/// nccl-tests' factor `(n-1)/n`: of the all-gather, reduce-scatter,
/// all-to-all, gather and scatter.
pub(crate) fn spread(nranks: usize) -> f64 {
    let n = nranks as f64;
    (n - 1.0) / n
}

/// "`name` needs `function`, which this NCCL lacks".
pub(crate) fn lacks(nc: &NcclLib, name: &str, function: &str, has: bool) -> Option<String> {
    (!has).then(|| format!("{name} needs {function}, which NCCL {} lacks", nc.version()))
}

/// Every collective, in the order a run of several goes through them.
pub static COLLECTIVES: &[&dyn Collective] = &[
    &AllReduce,
    &AllGather,
    &ReduceScatter,
    &Broadcast,
    &Reduce,
    &AllToAll,
    &Gather,
    &Scatter,
    &SendRecv,
];

/// The collective called `name` (`all-gather`).
pub fn by_name(name: &str) -> Option<&'static dyn Collective> {
    COLLECTIVES.iter().copied().find(|c| c.name() == name)
}

/// The tests' inputs of a collective over `nranks` ranks: every datatype,
/// with every reduction that is exact there where it reduces.
#[cfg(test)]
pub(crate) fn rules(op: &dyn Collective, nranks: usize) -> Vec<Exact> {
    let mut out = Vec::new();
    for t in Dtype::ALL {
        if op.reduces() {
            out.extend(
                Redop::ALL
                    .iter()
                    .filter_map(|&r| Exact::of(t, r, nranks).ok()),
            );
        } else {
            out.push(Exact::copy(t, nranks));
        }
    }
    out
}

/// Every rank's input of `op`, made on the host.
#[cfg(test)]
pub(crate) fn inputs(op: &dyn Collective, rule: &Exact, seed: u64, count: usize) -> Vec<Vec<u8>> {
    (0..rule.nranks)
        .map(|r| op.input(rule, seed, r, count))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nccl-tests' `doc/PERFORMANCE.md`: the factor from algorithm to bus
    /// bandwidth of each of its tests, for n ranks.
    #[test]
    fn the_bus_factors_are_nccl_tests_documented_ones() {
        type Factor = fn(f64) -> f64;
        let documented: [(&str, Factor); 9] = [
            ("all-reduce", |n| 2.0 * (n - 1.0) / n),
            ("all-gather", |n| (n - 1.0) / n),
            ("reduce-scatter", |n| (n - 1.0) / n),
            ("broadcast", |_| 1.0),
            ("reduce", |_| 1.0),
            ("all-to-all", |n| (n - 1.0) / n),
            ("gather", |n| (n - 1.0) / n),
            ("scatter", |n| (n - 1.0) / n),
            ("send-recv", |_| 1.0),
        ];
        assert_eq!(COLLECTIVES.len(), documented.len());
        for (name, factor) in documented {
            let op = by_name(name).unwrap_or_else(|| panic!("{name}"));
            for n in [1, 2, 3, 8, 64] {
                assert_eq!(op.bus_factor(n), factor(n as f64), "{name} × {n}");
            }
        }
    }

    /// Whatever the rank, in place the send and the receive buffer lie
    /// within the one buffer, and what is checked lies within what NCCL
    /// receives.
    #[test]
    fn every_buffer_fits_where_it_is_placed() {
        for op in COLLECTIVES {
            for nranks in [1, 2, 3, 8] {
                for count in [1, 7, 1024] {
                    let (send, recv) = op.buffers(count, nranks);
                    let one = op.one_buffer(count, nranks);
                    for rank in 0..nranks {
                        let (s, r) = op.in_place(rank, nranks, count);
                        let name = format!("{} rank {rank} of {nranks}, {count}", op.name());
                        assert!(s + send <= one && r + recv <= one, "{name}: in place");
                        let (at, len) = op.checked(rank, nranks, count, false);
                        assert!(at + len <= recv, "{name}: checked out of place");
                        let (at, len) = op.checked(rank, nranks, count, true);
                        assert!(at >= r && at + len <= r + recv, "{name}: checked in place");
                        let want = op.expected(&Exact::copy(Dtype::F32, nranks), 1, rank, count);
                        assert!(len * 4 <= want.len(), "{name}: expected too short");
                    }
                }
            }
        }
    }

    #[test]
    fn every_row_has_a_name_of_its_own_and_nccls_function() {
        let mut names = Vec::new();
        for c in COLLECTIVES {
            assert!(!names.contains(&c.name()), "{} twice", c.name());
            names.push(c.name());
            assert!(c.nccl_name().starts_with("nccl"), "{c:?}");
        }
    }
}
