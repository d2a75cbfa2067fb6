//! All-reduce with `sum`: every rank ends with the sum of every rank's
//! input. The inputs are chosen so that every sum is exact in every
//! datatype ([`crate::data`]); the GPU's kernels make and check them.

use super::{Buffers, Collective, Place, SUM};
use crate::data::{self, Dtype};
use crate::nccl::{Nccl, NcclResult};

/// `ncclAllReduce` with `ncclSum`.
#[derive(Debug)]
pub struct AllReduce;

impl Collective for AllReduce {
    fn name(&self) -> &'static str {
        "all-reduce"
    }

    fn nccl_name(&self) -> &'static str {
        "ncclAllReduce"
    }

    fn buffers(&self, count: usize, _nranks: usize) -> (usize, usize) {
        (count, count)
    }

    fn input(&self, t: Dtype, seed: u64, rank: usize, nranks: usize, count: usize) -> Vec<u8> {
        data::input(t, seed, rank, nranks, count)
    }

    fn expected(&self, t: Dtype, seed: u64, _rank: usize, nranks: usize, count: usize) -> Vec<u8> {
        data::expected(t, seed, nranks, count)
    }

    fn on_gpu(&self) -> bool {
        true
    }

    /// nccl-tests: `2(n-1)/n` (each rank sends and receives every element
    /// but its own share, twice: the reduce-scatter and the all-gather).
    fn bus_factor(&self, nranks: usize) -> f64 {
        let n = nranks as f64;
        2.0 * (n - 1.0) / n
    }

    unsafe fn call(&self, nc: &Nccl, b: Buffers, count: usize, t: Dtype, at: Place) -> NcclResult {
        // SAFETY: the caller's contract (`Collective::call`): both buffers
        // hold `count` elements of `t` on the GPU of `comm` and `stream`.
        unsafe { (nc.all_reduce)(b.send, b.recv, count, t.nccl(), SUM, at.comm, at.stream) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The expected result against a host sum of every rank's input, for
    /// 1, 2, 3 and 8 ranks, in every datatype: the same for every rank.
    #[test]
    fn the_expected_sum_is_the_host_sum_of_every_input() {
        for nranks in [1, 2, 3, 8] {
            for t in Dtype::ALL {
                let count = 257;
                let want = AllReduce.expected(t, 42, 0, nranks, count);
                assert_eq!(want, AllReduce.expected(t, 42, nranks - 1, nranks, count));
                let inputs: Vec<Vec<u8>> = (0..nranks)
                    .map(|r| AllReduce.input(t, 42, r, nranks, count))
                    .collect();
                let sum = data::sum_on_host(t, &inputs);
                assert_eq!(data::check(t, &sum, &want).wrong, 0, "{t:?} × {nranks}");
            }
        }
    }

    #[test]
    fn the_bus_factor_is_nccl_tests() {
        assert_eq!(AllReduce.bus_factor(1), 0.0);
        assert_eq!(AllReduce.bus_factor(2), 1.0);
        assert_eq!(AllReduce.bus_factor(8), 1.75);
    }
}
