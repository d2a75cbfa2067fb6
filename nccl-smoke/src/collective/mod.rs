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
use crate::data::Dtype;
use crate::nccl::{Nccl, NcclComm, NcclResult};

mod all_reduce;

pub use all_reduce::AllReduce;

/// One NCCL collective, as the smoke test runs it. Every rank runs it over
/// `count` elements per rank (the size a row of the report names).
pub trait Collective: Sync + std::fmt::Debug {
    /// Its name, as the report gives it (`all-reduce`).
    fn name(&self) -> &'static str;
    /// NCCL's function.
    fn nccl_name(&self) -> &'static str;
    /// Elements in a rank's send and receive buffers.
    fn buffers(&self, count: usize, nranks: usize) -> (usize, usize);
    /// NCCL rank `rank`'s input: `buffers(..).0` elements, made on the host.
    fn input(&self, t: Dtype, seed: u64, rank: usize, nranks: usize, count: usize) -> Vec<u8>;
    /// What NCCL rank `rank`'s receive buffer must hold afterwards.
    fn expected(&self, t: Dtype, seed: u64, rank: usize, nranks: usize, count: usize) -> Vec<u8>;
    /// Whether the GPU's fill and check kernels make its inputs and check
    /// its result (they compute the all-reduce's); otherwise the host does,
    /// as exactly and more slowly.
    fn on_gpu(&self) -> bool {
        false
    }
    /// nccl-tests' factor from the algorithm bandwidth to the bus
    /// bandwidth, for `nranks` ranks (its `doc/PERFORMANCE.md`).
    fn bus_factor(&self, nranks: usize) -> f64;
    /// Enqueues the collective for one GPU.
    ///
    /// # Safety
    ///
    /// `send` and `recv` hold the elements [`Collective::buffers`] asks for
    /// on the GPU of `comm`, and `stream` belongs to it.
    #[allow(clippy::too_many_arguments)]
    unsafe fn call(
        &self,
        nc: &Nccl,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        t: Dtype,
        comm: NcclComm,
        stream: CuStream,
    ) -> NcclResult;
}

/// Every collective, in the order a run of several goes through them.
pub static COLLECTIVES: &[&dyn Collective] = &[&AllReduce];

#[cfg(test)]
mod tests {
    use super::*;

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
