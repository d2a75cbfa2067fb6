//! Reduce with `sum` to rank 0: rank 0 ends with the sum of every rank's
//! input (exact, as the all-reduce's); the other ranks' receive buffers
//! are not NCCL's to write, and are not checked.

use super::{lacks, Buffers, Collective, Place, ROOT, SUM};
use crate::data::{self, Dtype};
use crate::nccl::{Nccl, NcclResult, INVALID_USAGE};

/// `ncclReduce` with `ncclSum` to rank 0.
#[derive(Debug)]
pub struct Reduce;

impl Collective for Reduce {
    fn name(&self) -> &'static str {
        "reduce"
    }

    fn nccl_name(&self) -> &'static str {
        "ncclReduce"
    }

    fn missing(&self, nc: &Nccl) -> Option<String> {
        lacks(nc, self.name(), self.nccl_name(), nc.reduce.is_some())
    }

    fn buffers(&self, count: usize, _nranks: usize) -> (usize, usize) {
        (count, count)
    }

    fn checked(
        &self,
        rank: usize,
        _nranks: usize,
        count: usize,
        _in_place: bool,
    ) -> (usize, usize) {
        (0, if rank == ROOT { count } else { 0 })
    }

    fn input(&self, t: Dtype, seed: u64, rank: usize, nranks: usize, count: usize) -> Vec<u8> {
        data::input(t, seed, rank, nranks, count)
    }

    fn expected(&self, t: Dtype, seed: u64, _rank: usize, nranks: usize, count: usize) -> Vec<u8> {
        data::expected(t, seed, nranks, count)
    }

    /// nccl-tests: 1.
    fn bus_factor(&self, _nranks: usize) -> f64 {
        1.0
    }

    unsafe fn call(&self, nc: &Nccl, b: Buffers, count: usize, t: Dtype, at: Place) -> NcclResult {
        let Some(f) = nc.reduce else {
            return INVALID_USAGE;
        };
        // SAFETY: the caller's contract (`Collective::call`).
        unsafe {
            f(
                b.send,
                b.recv,
                count,
                t.nccl(),
                SUM,
                ROOT as i32,
                at.comm,
                at.stream,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_gets_the_host_sum_and_the_others_are_not_checked() {
        for nranks in [1, 2, 3, 8] {
            for t in Dtype::ALL {
                let inputs: Vec<Vec<u8>> = (0..nranks)
                    .map(|r| Reduce.input(t, 5, r, nranks, 11))
                    .collect();
                let sum = data::sum_on_host(t, &inputs);
                let want = Reduce.expected(t, 5, ROOT, nranks, 11);
                assert_eq!(data::check(t, &sum, &want).wrong, 0, "{t:?} {nranks}");
            }
        }
        assert_eq!(Reduce.checked(0, 4, 10, false), (0, 10));
        assert_eq!(Reduce.checked(3, 4, 10, true), (0, 0));
    }
}
