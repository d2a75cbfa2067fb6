//! Reduce with `sum` to rank 0: rank 0 ends with the sum of every rank's
//! input (exact, as the all-reduce's); the other ranks' receive buffers
//! are not NCCL's to write, and are not checked.

use super::{lacks, Call, Collective, ROOT};
use crate::data::Source;
use crate::nccl::{NcclLib, NcclResult, INVALID_USAGE};

/// `ncclReduce` with `ncclSum` to rank 0.
#[derive(Debug)]
pub struct Reduce;

impl Collective for Reduce {
    fn name(&self) -> &'static str {
        "reduce"
    }

    fn nccl_name(&self) -> &'static str {
        "ncclReduce"
    }

    fn missing(&self, nc: &NcclLib) -> Option<String> {
        lacks(nc, self.name(), self.nccl_name(), nc.reduce.is_some())
    }

    fn buffers(&self, count: usize, _nranks: usize) -> (usize, usize) {
        (count, count)
    }

    fn checked(
        &self,
        rank: usize,
        _nranks: usize,
        count: usize,
        _in_place: bool,
    ) -> (usize, usize) {
        (0, if rank == ROOT { count } else { 0 })
    }

    fn reduces(&self) -> bool {
        true
    }

    fn source(&self, _rank: usize, _nranks: usize, _count: usize) -> Source {
        Source::reduced(0)
    }

    /// nccl-tests: 1.
    fn bus_factor(&self, _nranks: usize) -> f64 {
        1.0
    }

    unsafe fn call(&self, nc: &NcclLib, c: &Call) -> NcclResult {
        let Some(f) = nc.reduce else {
            return INVALID_USAGE;
        };
        // SAFETY: the caller's contract (`Collective::call`).
        unsafe {
            f(
                c.send,
                c.recv,
                c.count,
                c.t.nccl().0,
                c.op.nccl().0,
                ROOT as i32,
                c.comm,
                c.stream,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{inputs, rules};
    use crate::data::reference;

    #[test]
    fn the_root_gets_the_reduction_and_the_others_are_not_checked() {
        for nranks in [1, 2, 3, 8] {
            for rule in rules(&Reduce, nranks) {
                let all = inputs(&Reduce, &rule, 5, 11);
                let want = reference::reduce(rule.t, rule.op, &all);
                assert_eq!(Reduce.expected(&rule, 5, ROOT, 11), want, "{rule:?}");
            }
        }
        assert_eq!(Reduce.checked(0, 4, 10, false), (0, 10));
        assert_eq!(Reduce.checked(3, 4, 10, true), (0, 0));
    }
}
