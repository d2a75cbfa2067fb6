//! Send/receive in a ring: rank `r` sends its input to `r+1` and receives
//! `r-1`'s (nccl-tests' `sendrecv`), both in one group. In place, the two
//! are halves of one buffer: one region sent from and received into at
//! once is a race NCCL does not promise to win (on H100s over NVLink it
//! loses, element by element).

use super::{lacks, Call, Collective};
use crate::data::Source;
use crate::nccl::{NcclLib, NcclResult, INVALID_USAGE, SUCCESS};

/// `ncclSend` and `ncclRecv`, in a ring.
#[derive(Debug)]
pub struct SendRecv;

impl Collective for SendRecv {
    fn name(&self) -> &'static str {
        "send-recv"
    }

    fn nccl_name(&self) -> &'static str {
        "ncclSend/ncclRecv"
    }

    fn missing(&self, nc: &NcclLib) -> Option<String> {
        lacks(
            nc,
            self.name(),
            "ncclSend and ncclRecv (NCCL 2.7)",
            nc.send.is_some() && nc.recv.is_some(),
        )
    }

    fn grouped(&self, _nc: &NcclLib) -> bool {
        true
    }

    fn buffers(&self, count: usize, _nranks: usize) -> (usize, usize) {
        (count, count)
    }

    fn one_buffer(&self, count: usize, _nranks: usize) -> usize {
        2 * count
    }

    fn in_place(&self, _rank: usize, _nranks: usize, count: usize) -> (usize, usize) {
        (0, count)
    }

    fn checked(
        &self,
        _rank: usize,
        _nranks: usize,
        count: usize,
        in_place: bool,
    ) -> (usize, usize) {
        (if in_place { count } else { 0 }, count)
    }

    fn source(&self, rank: usize, nranks: usize, _count: usize) -> Source {
        Source::copied((rank + nranks - 1) % nranks, 0)
    }

    /// nccl-tests: 1.
    fn bus_factor(&self, _nranks: usize) -> f64 {
        1.0
    }

    unsafe fn call(&self, nc: &NcclLib, c: &Call) -> NcclResult {
        let (Some(send), Some(recv)) = (nc.send, nc.recv) else {
            return INVALID_USAGE;
        };
        let n = c.nranks;
        let (to, from) = ((c.rank + 1) % n, (c.rank + n - 1) % n);
        // SAFETY: the caller's contract (`Collective::call`); the caller's
        // group holds the pair together.
        let rc = unsafe { send(c.send, c.count, c.t.nccl().0, to as i32, c.comm, c.stream) };
        if rc != SUCCESS {
            return rc;
        }
        // SAFETY: as above.
        unsafe { recv(c.recv, c.count, c.t.nccl().0, from as i32, c.comm, c.stream) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{inputs, rules};

    #[test]
    fn each_rank_gets_the_previous_ranks_input() {
        for nranks in [1, 2, 3, 8] {
            for rule in rules(&SendRecv, nranks) {
                let all = inputs(&SendRecv, &rule, 2, 4);
                for r in 0..nranks {
                    let from = (r + nranks - 1) % nranks;
                    assert_eq!(SendRecv.expected(&rule, 2, r, 4), all[from], "{rule:?}");
                }
            }
        }
        assert_eq!(SendRecv.bus_factor(8), 1.0);
        // In place, the halves of one buffer: sent from the first, received
        // into (and checked in) the second.
        assert_eq!(SendRecv.in_place(3, 4, 10), (0, 10));
        assert_eq!(SendRecv.checked(3, 4, 10, true), (10, 10));
        assert_eq!(SendRecv.checked(3, 4, 10, false), (0, 10));
    }
}
