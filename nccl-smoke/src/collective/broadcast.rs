//! Broadcast from rank 0: every rank ends with rank 0's input.

use super::{lacks, Buffers, Collective, Place, ROOT};
use crate::data::{self, Dtype};
use crate::nccl::{Nccl, NcclResult, INVALID_USAGE};

/// `ncclBroadcast` from rank 0.
#[derive(Debug)]
pub struct Broadcast;

impl Collective for Broadcast {
    fn name(&self) -> &'static str {
        "broadcast"
    }

    fn nccl_name(&self) -> &'static str {
        "ncclBroadcast"
    }

    fn missing(&self, nc: &Nccl) -> Option<String> {
        lacks(nc, self.name(), self.nccl_name(), nc.broadcast.is_some())
    }

    fn buffers(&self, count: usize, _nranks: usize) -> (usize, usize) {
        (count, count)
    }

    fn input(&self, t: Dtype, seed: u64, rank: usize, nranks: usize, count: usize) -> Vec<u8> {
        data::input(t, seed, rank, nranks, count)
    }

    fn expected(&self, t: Dtype, seed: u64, _rank: usize, nranks: usize, count: usize) -> Vec<u8> {
        data::input(t, seed, ROOT, nranks, count)
    }

    /// nccl-tests: 1.
    fn bus_factor(&self, _nranks: usize) -> f64 {
        1.0
    }

    unsafe fn call(&self, nc: &Nccl, b: Buffers, count: usize, t: Dtype, at: Place) -> NcclResult {
        let Some(f) = nc.broadcast else {
            return INVALID_USAGE;
        };
        // SAFETY: the caller's contract (`Collective::call`).
        unsafe {
            f(
                b.send,
                b.recv,
                count,
                t.nccl(),
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
    fn every_rank_gets_the_roots_input() {
        for nranks in [1, 2, 3, 8] {
            for t in Dtype::ALL {
                for r in 0..nranks {
                    assert_eq!(
                        Broadcast.expected(t, 1, r, nranks, 6),
                        Broadcast.input(t, 1, ROOT, nranks, 6)
                    );
                }
            }
        }
        assert_eq!(Broadcast.bus_factor(8), 1.0);
    }
}
