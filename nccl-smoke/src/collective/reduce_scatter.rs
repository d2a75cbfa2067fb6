//! Reduce-scatter with `sum`: rank `r` ends with the sum of every rank's
//! `r`-th block. The inputs are those of the all-reduce over the whole
//! buffer, so every sum is exact.

use super::{lacks, spread, Buffers, Collective, Place, SUM};
use crate::data::{self, Dtype};
use crate::nccl::{Nccl, NcclResult, INVALID_USAGE};

/// `ncclReduceScatter` with `ncclSum`.
#[derive(Debug)]
pub struct ReduceScatter;

impl Collective for ReduceScatter {
    fn name(&self) -> &'static str {
        "reduce-scatter"
    }

    fn nccl_name(&self) -> &'static str {
        "ncclReduceScatter"
    }

    fn missing(&self, nc: &Nccl) -> Option<String> {
        lacks(
            nc,
            self.name(),
            self.nccl_name(),
            nc.reduce_scatter.is_some(),
        )
    }

    fn buffers(&self, count: usize, nranks: usize) -> (usize, usize) {
        (count * nranks, count)
    }

    /// nccl-tests: the result lands in the rank's own block of the input.
    fn in_place(&self, rank: usize, _nranks: usize, count: usize) -> (usize, usize) {
        (0, rank * count)
    }

    fn checked(&self, rank: usize, nranks: usize, count: usize, in_place: bool) -> (usize, usize) {
        let _ = nranks;
        if in_place {
            (rank * count, count)
        } else {
            (0, count)
        }
    }

    fn nccl_tests_count(&self, count: usize, nranks: usize) -> usize {
        count * nranks
    }

    fn input(&self, t: Dtype, seed: u64, rank: usize, nranks: usize, count: usize) -> Vec<u8> {
        data::input(t, seed, rank, nranks, count * nranks)
    }

    fn expected(&self, t: Dtype, seed: u64, rank: usize, nranks: usize, count: usize) -> Vec<u8> {
        let all = data::expected(t, seed, nranks, count * nranks);
        all[rank * count * t.size()..(rank + 1) * count * t.size()].to_vec()
    }

    /// nccl-tests: `(n-1)/n` of the whole input.
    fn bus_factor(&self, nranks: usize) -> f64 {
        spread(nranks)
    }

    unsafe fn call(&self, nc: &Nccl, b: Buffers, count: usize, t: Dtype, at: Place) -> NcclResult {
        let Some(f) = nc.reduce_scatter else {
            return INVALID_USAGE;
        };
        // SAFETY: the caller's contract (`Collective::call`).
        unsafe { f(b.send, b.recv, count, t.nccl(), SUM, at.comm, at.stream) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rank_gets_the_host_sum_of_its_block() {
        for nranks in [1, 2, 3, 8] {
            for t in Dtype::ALL {
                let count = 9;
                let inputs: Vec<Vec<u8>> = (0..nranks)
                    .map(|r| ReduceScatter.input(t, 3, r, nranks, count))
                    .collect();
                let sum = data::sum_on_host(t, &inputs);
                for r in 0..nranks {
                    let block = &sum[r * count * t.size()..(r + 1) * count * t.size()];
                    let want = ReduceScatter.expected(t, 3, r, nranks, count);
                    assert_eq!(data::check(t, block, &want).wrong, 0, "{t:?} {r}/{nranks}");
                }
            }
        }
        assert_eq!(ReduceScatter.checked(2, 4, 10, true), (20, 10));
        assert_eq!(ReduceScatter.checked(2, 4, 10, false), (0, 10));
    }
}
