//! Gather to rank 0: rank 0 ends with every rank's input in rank order
//! (the others' receive buffers are not NCCL's to write, and are not
//! checked). `ncclGather` from NCCL 2.28.3; before, every rank sends to
//! rank 0, which receives from each, in one group.

use super::p2p::{moves, Move};
use super::{spread, Call, Collective, ROOT};
use crate::data::Source;
use crate::nccl::{NcclLib, NcclResult};

/// `ncclGather` to rank 0, or grouped sends and receives.
#[derive(Debug)]
pub struct Gather;

impl Collective for Gather {
    fn name(&self) -> &'static str {
        "gather"
    }

    fn nccl_name(&self) -> &'static str {
        "ncclGather"
    }

    fn missing(&self, nc: &NcclLib) -> Option<String> {
        let has = nc.gather.is_some() || (nc.send.is_some() && nc.recv.is_some());
        super::lacks(nc, self.name(), "ncclGather, or ncclSend and ncclRecv", has)
    }

    fn stands_in(&self, nc: &NcclLib) -> bool {
        nc.gather.is_none()
    }

    fn buffers(&self, count: usize, nranks: usize) -> (usize, usize) {
        (count, count * nranks)
    }

    /// NCCL: in place where the root's send buffer is its own block.
    fn in_place(&self, rank: usize, _nranks: usize, count: usize) -> (usize, usize) {
        (rank * count, 0)
    }

    fn checked(&self, rank: usize, nranks: usize, count: usize, _in_place: bool) -> (usize, usize) {
        (0, if rank == ROOT { count * nranks } else { 0 })
    }

    fn nccl_tests_count(&self, count: usize, nranks: usize) -> usize {
        count * nranks
    }

    fn source(&self, _rank: usize, _nranks: usize, count: usize) -> Source {
        Source::blocks(count, 0)
    }

    /// nccl-tests: `(n-1)/n` of the gathered buffer.
    fn bus_factor(&self, nranks: usize) -> f64 {
        spread(nranks)
    }

    unsafe fn call(&self, nc: &NcclLib, c: &Call) -> NcclResult {
        if let Some(f) = nc.gather {
            // SAFETY: the caller's contract (`Collective::call`).
            return unsafe { c.enqueue(f, ROOT as i32) };
        }
        let mut all = vec![Move::Send {
            buf: c.send,
            offset: 0,
            peer: ROOT,
        }];
        if c.rank == ROOT {
            all.extend((0..c.nranks).map(|peer| Move::Recv {
                buf: c.recv,
                offset: peer * c.count,
                peer,
            }));
        }
        // SAFETY: the caller's contract: the root's receive buffer holds
        // `nranks × c.count`, every send buffer `c.count`.
        unsafe { moves(nc, &all, c) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{inputs, rules};

    #[test]
    fn the_root_gets_every_input_in_rank_order() {
        for nranks in [1, 2, 3, 8] {
            for rule in rules(&Gather, nranks) {
                let all = inputs(&Gather, &rule, 6, 4).concat();
                assert_eq!(Gather.expected(&rule, 6, ROOT, 4), all, "{rule:?}");
            }
        }
        assert_eq!(Gather.checked(0, 3, 4, true), (0, 12));
        assert_eq!(Gather.checked(2, 3, 4, false), (0, 0));
    }
}
