//! All-reduce with `sum`: every rank ends with the sum of every rank's
//! input. The inputs are chosen so that every sum is exact in every
//! datatype ([`crate::data`]); the GPU's kernels make and check them.

use super::{Call, Collective};
use crate::data::Source;
use crate::nccl::{NcclLib, NcclResult};

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

    fn reduces(&self) -> bool {
        true
    }

    fn source(&self, _rank: usize, _nranks: usize, _count: usize) -> Source {
        Source::reduced(0)
    }

    /// nccl-tests: `2(n-1)/n` (each rank sends and receives every element
    /// but its own share, twice: the reduce-scatter and the all-gather).
    fn bus_factor(&self, nranks: usize) -> f64 {
        let n = nranks as f64;
        2.0 * (n - 1.0) / n
    }

    unsafe fn call(&self, nc: &NcclLib, c: &Call) -> NcclResult {
        // SAFETY: the caller's contract (`Collective::call`): both buffers
        // hold `c.count` elements of `t` on the GPU of `comm` and `stream`.
        unsafe { c.enqueue(nc.all_reduce, c.op.nccl().0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{inputs, rules};
    use crate::data::reference;

    /// Every rank's result against the reference reduction of every rank's
    /// input, for 1, 2, 3 and 8 ranks, in every datatype and reduction.
    #[test]
    fn every_rank_gets_the_reduction_of_every_input() {
        for nranks in [1, 2, 3, 8] {
            for rule in rules(&AllReduce, nranks) {
                let all = inputs(&AllReduce, &rule, 42, 257);
                let want = reference::reduce(rule.t, rule.op, &all);
                for rank in [0, nranks - 1] {
                    assert_eq!(AllReduce.expected(&rule, 42, rank, 257), want, "{rule:?}");
                }
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
