//! Reduce-scatter with `sum`: rank `r` ends with the sum of every rank's
//! `r`-th block. The inputs are those of the all-reduce over the whole
//! buffer, so every sum is exact.

use super::{lacks, spread, Call, Collective};
use crate::data::Source;
use crate::nccl::{NcclLib, NcclResult, INVALID_USAGE};

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

    fn missing(&self, nc: &NcclLib) -> Option<String> {
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

    fn reduces(&self) -> bool {
        true
    }

    fn source(&self, rank: usize, _nranks: usize, count: usize) -> Source {
        Source::reduced((rank * count) as u64)
    }

    /// nccl-tests: `(n-1)/n` of the whole input.
    fn bus_factor(&self, nranks: usize) -> f64 {
        spread(nranks)
    }

    unsafe fn call(&self, nc: &NcclLib, c: &Call) -> NcclResult {
        let Some(f) = nc.reduce_scatter else {
            return INVALID_USAGE;
        };
        // SAFETY: the caller's contract (`Collective::call`).
        unsafe { c.enqueue(f, c.op.nccl().0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{inputs, rules};
    use crate::data::reference;

    #[test]
    fn each_rank_gets_the_reduction_of_its_block() {
        for nranks in [1, 2, 3, 8] {
            for rule in rules(&ReduceScatter, nranks) {
                let (count, e) = (9, rule.t.size());
                let all = inputs(&ReduceScatter, &rule, 3, count);
                let whole = reference::reduce(rule.t, rule.op, &all);
                for r in 0..nranks {
                    let block = &whole[r * count * e..(r + 1) * count * e];
                    let want = ReduceScatter.expected(&rule, 3, r, count);
                    assert_eq!(want, block, "{rule:?} rank {r}");
                }
            }
        }
        assert_eq!(ReduceScatter.checked(2, 4, 10, true), (20, 10));
        assert_eq!(ReduceScatter.checked(2, 4, 10, false), (0, 10));
    }
}
