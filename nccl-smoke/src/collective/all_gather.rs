//! All-gather: every rank ends with every rank's input, in rank order.

use super::{lacks, spread, Call, Collective};
use crate::data::Source;
use crate::nccl::{NcclLib, NcclResult, INVALID_USAGE};

/// `ncclAllGather`.
#[derive(Debug)]
pub struct AllGather;

impl Collective for AllGather {
    fn name(&self) -> &'static str {
        "all-gather"
    }

    fn nccl_name(&self) -> &'static str {
        "ncclAllGather"
    }

    fn missing(&self, nc: &NcclLib) -> Option<String> {
        lacks(nc, self.name(), self.nccl_name(), nc.all_gather.is_some())
    }

    fn buffers(&self, count: usize, nranks: usize) -> (usize, usize) {
        (count, count * nranks)
    }

    /// nccl-tests: the send buffer sits at the rank's own place.
    fn in_place(&self, rank: usize, _nranks: usize, count: usize) -> (usize, usize) {
        (rank * count, 0)
    }

    fn nccl_tests_count(&self, count: usize, nranks: usize) -> usize {
        count * nranks
    }

    fn source(&self, _rank: usize, _nranks: usize, count: usize) -> Source {
        Source::blocks(count, 0)
    }

    /// nccl-tests: `(n-1)/n` of the gathered size.
    fn bus_factor(&self, nranks: usize) -> f64 {
        spread(nranks)
    }

    unsafe fn call(&self, nc: &NcclLib, c: &Call) -> NcclResult {
        let Some(f) = nc.all_gather else {
            return INVALID_USAGE;
        };
        // SAFETY: the caller's contract (`Collective::call`).
        unsafe { f(c.send, c.recv, c.count, c.t.nccl().0, c.comm, c.stream) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{inputs, rules};

    #[test]
    fn every_rank_gets_every_input_in_rank_order() {
        for nranks in [1, 2, 3, 8] {
            for rule in rules(&AllGather, nranks) {
                let all = inputs(&AllGather, &rule, 7, 5).concat();
                for r in 0..nranks {
                    assert_eq!(AllGather.expected(&rule, 7, r, 5), all, "{rule:?} {r}");
                }
            }
        }
        assert_eq!(AllGather.bus_factor(8), 0.875);
        assert_eq!(AllGather.in_place(3, 4, 10), (30, 0));
    }
}
