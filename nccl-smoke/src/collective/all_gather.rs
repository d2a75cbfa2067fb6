//! All-gather: every rank ends with every rank's input, in rank order.

use super::{in_rank_order, lacks, spread, Buffers, Collective, Place};
use crate::data::{self, Dtype};
use crate::nccl::{Nccl, NcclResult, INVALID_USAGE};

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

    fn missing(&self, nc: &Nccl) -> Option<String> {
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

    fn input(&self, t: Dtype, seed: u64, rank: usize, nranks: usize, count: usize) -> Vec<u8> {
        data::input(t, seed, rank, nranks, count)
    }

    fn expected(&self, t: Dtype, seed: u64, _rank: usize, nranks: usize, count: usize) -> Vec<u8> {
        in_rank_order(t, seed, nranks, count)
    }

    /// nccl-tests: `(n-1)/n` of the gathered size.
    fn bus_factor(&self, nranks: usize) -> f64 {
        spread(nranks)
    }

    unsafe fn call(&self, nc: &Nccl, b: Buffers, count: usize, t: Dtype, at: Place) -> NcclResult {
        let Some(f) = nc.all_gather else {
            return INVALID_USAGE;
        };
        // SAFETY: the caller's contract (`Collective::call`).
        unsafe { f(b.send, b.recv, count, t.nccl(), at.comm, at.stream) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_gets_every_input_in_rank_order() {
        for nranks in [1, 2, 3, 8] {
            for t in Dtype::ALL {
                let got = AllGather.expected(t, 7, 0, nranks, 5);
                assert_eq!(got.len(), 5 * nranks * t.size());
                for r in 0..nranks {
                    let part = &got[r * 5 * t.size()..(r + 1) * 5 * t.size()];
                    assert_eq!(
                        part,
                        AllGather.input(t, 7, r, nranks, 5),
                        "{t:?} {r}/{nranks}"
                    );
                }
            }
        }
        assert_eq!(AllGather.bus_factor(8), 0.875);
        assert_eq!(AllGather.in_place(3, 4, 10), (30, 0));
    }
}
