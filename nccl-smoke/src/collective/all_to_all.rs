//! All-to-all: rank `r`'s block `j` goes to rank `j`, which keeps it as
//! its block `r`. `ncclAlltoAll` from NCCL 2.28.3; before, a send and a
//! receive to and from every rank in one group, as nccl-tests does. In
//! place (which NCCL does not take), the two halves of one buffer.

use super::p2p::{moves, Move};
use super::{spread, Call, Collective};
use crate::data::Source;
use crate::nccl::{NcclLib, NcclResult};

/// `ncclAlltoAll`, or grouped sends and receives.
#[derive(Debug)]
pub struct AllToAll;

impl Collective for AllToAll {
    fn name(&self) -> &'static str {
        "all-to-all"
    }

    fn nccl_name(&self) -> &'static str {
        "ncclAlltoAll"
    }

    fn missing(&self, nc: &NcclLib) -> Option<String> {
        let has = nc.all_to_all.is_some() || (nc.send.is_some() && nc.recv.is_some());
        super::lacks(
            nc,
            self.name(),
            "ncclAlltoAll, or ncclSend and ncclRecv",
            has,
        )
    }

    fn stands_in(&self, nc: &NcclLib) -> bool {
        nc.all_to_all.is_none()
    }

    fn buffers(&self, count: usize, nranks: usize) -> (usize, usize) {
        (count * nranks, count * nranks)
    }

    fn one_buffer(&self, count: usize, nranks: usize) -> usize {
        2 * count * nranks
    }

    fn in_place(&self, _rank: usize, nranks: usize, count: usize) -> (usize, usize) {
        (0, count * nranks)
    }

    fn checked(&self, _rank: usize, nranks: usize, count: usize, in_place: bool) -> (usize, usize) {
        (if in_place { count * nranks } else { 0 }, count * nranks)
    }

    fn nccl_tests_count(&self, count: usize, nranks: usize) -> usize {
        count * nranks
    }

    fn source(&self, rank: usize, _nranks: usize, count: usize) -> Source {
        Source::blocks(count, (rank * count) as u64)
    }

    /// nccl-tests: `(n-1)/n` of the whole buffer.
    fn bus_factor(&self, nranks: usize) -> f64 {
        spread(nranks)
    }

    unsafe fn call(&self, nc: &NcclLib, c: &Call) -> NcclResult {
        if let Some(f) = nc.all_to_all {
            // SAFETY: the caller's contract (`Collective::call`).
            return unsafe { f(c.send, c.recv, c.count, c.t.nccl().0, c.comm, c.stream) };
        }
        let all: Vec<Move> = (0..c.nranks)
            .flat_map(|peer| {
                [
                    Move::Send {
                        buf: c.send,
                        offset: peer * c.count,
                        peer,
                    },
                    Move::Recv {
                        buf: c.recv,
                        offset: peer * c.count,
                        peer,
                    },
                ]
            })
            .collect();
        // SAFETY: the caller's contract: both buffers hold `nranks × c.count`.
        unsafe { moves(nc, &all, c) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{inputs, rules};

    #[test]
    fn in_place_the_halves_of_one_buffer() {
        assert_eq!(AllToAll.in_place(1, 4, 10), (0, 40));
        assert_eq!(AllToAll.checked(1, 4, 10, true), (40, 40));
        assert_eq!(AllToAll.one_buffer(10, 4), 80);
    }

    #[test]
    fn each_rank_gets_its_block_of_every_input() {
        for nranks in [1, 2, 3, 8] {
            for rule in rules(&AllToAll, nranks) {
                let e = rule.t.size();
                let sent = inputs(&AllToAll, &rule, 4, 3);
                for r in 0..nranks {
                    let got = AllToAll.expected(&rule, 4, r, 3);
                    for from in 0..nranks {
                        assert_eq!(
                            &got[from * 3 * e..(from + 1) * 3 * e],
                            &sent[from][r * 3 * e..(r + 1) * 3 * e],
                            "{rule:?}"
                        );
                    }
                }
            }
        }
    }
}
