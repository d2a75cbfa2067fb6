//! Scatter from rank 0: rank `r` ends with block `r` of rank 0's input.
//! `ncclScatter` from NCCL 2.28.3; before, rank 0 sends each its block and
//! every rank receives, in one group.

use super::p2p::{moves, Move};
use super::{spread, Call, Collective, ROOT};
use crate::data::Source;
use crate::nccl::{NcclLib, NcclResult};

/// `ncclScatter` from rank 0, or grouped sends and receives.
#[derive(Debug)]
pub struct Scatter;

impl Collective for Scatter {
    fn name(&self) -> &'static str {
        "scatter"
    }

    fn nccl_name(&self) -> &'static str {
        "ncclScatter"
    }

    fn missing(&self, nc: &NcclLib) -> Option<String> {
        let has = nc.scatter.is_some() || (nc.send.is_some() && nc.recv.is_some());
        super::lacks(
            nc,
            self.name(),
            "ncclScatter, or ncclSend and ncclRecv",
            has,
        )
    }

    fn stands_in(&self, nc: &NcclLib) -> bool {
        nc.scatter.is_none()
    }

    fn buffers(&self, count: usize, nranks: usize) -> (usize, usize) {
        (count * nranks, count)
    }

    /// NCCL: in place where the root's receive buffer is its own block of
    /// what it sends.
    fn in_place(&self, rank: usize, _nranks: usize, count: usize) -> (usize, usize) {
        (0, rank * count)
    }

    fn checked(&self, rank: usize, _nranks: usize, count: usize, in_place: bool) -> (usize, usize) {
        (if in_place { rank * count } else { 0 }, count)
    }

    fn nccl_tests_count(&self, count: usize, nranks: usize) -> usize {
        count * nranks
    }

    fn source(&self, rank: usize, _nranks: usize, count: usize) -> Source {
        Source::copied(ROOT, (rank * count) as u64)
    }

    /// nccl-tests: `(n-1)/n` of the root's buffer.
    fn bus_factor(&self, nranks: usize) -> f64 {
        spread(nranks)
    }

    unsafe fn call(&self, nc: &NcclLib, c: &Call) -> NcclResult {
        if let Some(f) = nc.scatter {
            // SAFETY: the caller's contract (`Collective::call`).
            return unsafe { c.enqueue(f, ROOT as i32) };
        }
        let mut all = Vec::new();
        if c.rank == ROOT {
            all.extend((0..c.nranks).map(|peer| Move::Send {
                buf: c.send,
                offset: peer * c.count,
                peer,
            }));
        }
        all.push(Move::Recv {
            buf: c.recv,
            offset: 0,
            peer: ROOT,
        });
        // SAFETY: the caller's contract: the root's send buffer holds
        // `nranks × c.count`, every receive buffer `c.count`.
        unsafe { moves(nc, &all, c) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{inputs, rules};

    #[test]
    fn each_rank_gets_its_block_of_the_roots_input() {
        for nranks in [1, 2, 3, 8] {
            for rule in rules(&Scatter, nranks) {
                let e = rule.t.size();
                let root = &inputs(&Scatter, &rule, 8, 5)[ROOT];
                for r in 0..nranks {
                    let want = &root[r * 5 * e..(r + 1) * 5 * e];
                    assert_eq!(Scatter.expected(&rule, 8, r, 5), want, "{rule:?}");
                }
            }
        }
        assert_eq!(Scatter.checked(2, 3, 5, true), (10, 5));
    }
}
