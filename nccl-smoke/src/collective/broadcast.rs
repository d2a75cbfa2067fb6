//! Broadcast from rank 0: every rank ends with rank 0's input.

use super::{lacks, Call, Collective, ROOT};
use crate::data::Source;
use crate::nccl::{NcclLib, NcclResult, INVALID_USAGE};

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

    fn missing(&self, nc: &NcclLib) -> Option<String> {
        lacks(nc, self.name(), self.nccl_name(), nc.broadcast.is_some())
    }

    fn buffers(&self, count: usize, _nranks: usize) -> (usize, usize) {
        (count, count)
    }

    fn source(&self, _rank: usize, _nranks: usize, _count: usize) -> Source {
        Source::copied(ROOT, 0)
    }

    /// nccl-tests: 1.
    fn bus_factor(&self, _nranks: usize) -> f64 {
        1.0
    }

    unsafe fn call(&self, nc: &NcclLib, c: &Call) -> NcclResult {
        let Some(f) = nc.broadcast else {
            return INVALID_USAGE;
        };
        // SAFETY: the caller's contract (`Collective::call`).
        unsafe { c.enqueue(f, ROOT as i32) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{inputs, rules};

    #[test]
    fn every_rank_gets_the_roots_input() {
        for nranks in [1, 2, 3, 8] {
            for rule in rules(&Broadcast, nranks) {
                let all = inputs(&Broadcast, &rule, 1, 6);
                for r in 0..nranks {
                    assert_eq!(Broadcast.expected(&rule, 1, r, 6), all[ROOT], "{rule:?}");
                }
            }
        }
        assert_eq!(Broadcast.bus_factor(8), 1.0);
    }
}
