//! What a run says and how it ends: its events, its rows and timings, its
//! summary, and why it could not finish.

use std::path::PathBuf;

use nccl_rendezvous::{Failed, Gathered, PeerOutcome};

use crate::data::{Dtype, Redop};
use crate::verdict;

/// Timing and correctness of one mode at one size.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Timing {
    /// Microseconds per call.
    pub time_us: f64,
    /// Bytes / time, GB/s.
    pub algbw: f64,
    /// algbw × the operation's bus factor (all-reduce: 2(n−1)/n), GB/s.
    pub busbw: f64,
    /// Wrong elements on this process.
    pub wrong: usize,
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Row {
    /// The collective, by name (`all-reduce`).
    pub op: &'static str,
    /// Its reduction, where it reduces.
    pub redop: Option<Redop>,
    /// Bytes per rank.
    pub bytes: usize,
    /// Elements.
    pub count: usize,
    /// Datatype.
    pub dtype: Dtype,
    /// Out of place.
    pub oop: Timing,
    /// In place.
    pub ip: Timing,
}

/// What the run says as it goes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// The NCCL file loaded and its version.
    Loaded {
        /// The file.
        path: PathBuf,
        /// `ncclGetVersion`.
        version: String,
    },
    /// The GPUs driven by this process, by name, and the NCCL ranks.
    Devices {
        /// `(ordinal, name)`.
        gpus: Vec<(usize, String)>,
        /// NCCL ranks in all.
        nranks: usize,
        /// This process's first NCCL rank.
        first_rank: usize,
        /// The seed of the inputs.
        seed: u64,
    },
    /// Something worth saying.
    Note(String),
    /// A size finished.
    Row(Row),
    /// Rank 0 only, once the processes have met: what every one brought
    /// (its host, its facts, its addresses) and the connections tested
    /// between hosts.
    Gathered(Gathered),
    /// On every rank, where rank 0 found at the meeting what will make
    /// NCCL fail and the job runs NCCL all the same: the cause, with its
    /// fix. It outranks whatever NCCL then says.
    Cause(String),
}

/// How it went.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Summary {
    /// Every row.
    pub rows: Vec<Row>,
    /// Wrong elements on this process.
    pub wrong: usize,
    /// NCCL ranks in all.
    pub nranks: usize,
    /// The other processes' outcomes (rank 0 only).
    pub peers: Vec<PeerOutcome>,
    /// Whether every element everywhere was right.
    pub ok: bool,
    /// The links of this process's GPUs (for [`verdict::judge`]).
    pub topology: verdict::Topology,
    /// This process's own times, as every rank reports them to rank 0
    /// ([`TIMES`]), in microseconds.
    pub times_us: Vec<u64>,
    /// The transfers between nodes over NCCL, both rounds, by NCCL rank
    /// ([`nccl_rendezvous::pairs`]): on every rank of a job of several
    /// processes (none for one).
    pub pairs: Vec<nccl_rendezvous::pairs::Pair>,
    /// Each NCCL rank's host, as its process said it, where the pairs ran.
    pub hosts: Vec<String>,
}

/// What each rank reports to rank 0 with its outcome, in this order, in
/// microseconds: its setup (the driver loaded and its GPUs' contexts made,
/// before it waits for anyone), the out-of-place time per call at the
/// largest size (0 where none ran).
pub const TIMES: [&str; 2] = ["setup", "time per call at the largest size"];

/// Why the smoke test could not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// No NVIDIA driver.
    NoDriver(String),
    /// A driver, but no GPU.
    NoGpu(String),
    /// Bad options.
    Usage(String),
    /// The NCCL file would not load.
    Load(String),
    /// The processes did not all meet.
    Rendezvous(Failed),
    /// NCCL returned an error: what it means here, and its fix, are the
    /// caller's to say (`ncclResult_t`'s meaning, the interfaces NCCL had).
    NcclLib {
        /// What was being done.
        what: String,
        /// NCCL's words.
        error: String,
        /// NCCL's result code (`ncclResult_t`).
        rc: i32,
    },
    /// A CUDA call failed.
    Cuda(String),
    /// A deadline passed; the communicators were aborted.
    Timeout(String),
    /// Another rank went away.
    PeerGone(String),
    /// The meeting showed that NCCL cannot work (rank 0's ruling, the same
    /// on every rank): the cause, with its fix. NCCL was not started.
    Stopped(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NoDriver(e) => write!(
                f,
                "no NVIDIA driver: libcuda.so.1 cannot be used ({e}). The smoke test needs a GPU; install the driver, \
                 or in a container run with the NVIDIA container toolkit (--gpus all)"
            ),
            Failure::NoGpu(e) => write!(f, "no GPU: {e}. Check CUDA_VISIBLE_DEVICES and nvidia-smi"),
            Failure::Usage(e)
            | Failure::Load(e)
            | Failure::Cuda(e)
            | Failure::Timeout(e)
            | Failure::PeerGone(e)
            | Failure::Stopped(e) => {
                f.write_str(e)
            }
            Failure::Rendezvous(r) => f.write_str(&r.message),
            Failure::NcclLib { what, error, .. } => write!(f, "{what} failed: {error}"),
        }
    }
}

impl Row {
    /// A row as a run makes it: `count` elements of `dtype` per rank.
    pub fn new(
        op: &'static str,
        redop: Option<Redop>,
        dtype: Dtype,
        count: usize,
        oop: Timing,
        ip: Timing,
    ) -> Row {
        Row {
            op,
            redop,
            bytes: count * dtype.size(),
            count,
            dtype,
            oop,
            ip,
        }
    }

    /// The first of `rows` at the largest size (the all-reduce's, where it
    /// ran): the row whose time a run reports and `--min-busbw` judges.
    pub fn first_largest(rows: &[Row]) -> Option<&Row> {
        // `max_by_key` keeps the last of equals: go backwards for the first.
        rows.iter().rev().max_by_key(|r| r.bytes)
    }
}

impl Timing {
    /// The figures of an operation on `bytes` in `secs` per call, its bus
    /// bandwidth `bus_factor` times its algorithm bandwidth (nccl-tests'
    /// factors, documented per collective in `collective/`).
    pub fn of(bytes: usize, secs: f64, bus_factor: f64, wrong: usize) -> Timing {
        let algbw = bytes as f64 / secs / 1e9;
        Timing {
            time_us: secs * 1e6,
            algbw,
            busbw: algbw * bus_factor,
            wrong,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_row_at_the_largest_size_is_judged() {
        let t = Timing::of(1, 1e-6, 1.0, 0);
        let row = |op, count| Row::new(op, None, Dtype::F32, count, t, t);
        let rows = [
            row("all-reduce", 1024),
            row("all-reduce", 1 << 20),
            row("all-gather", 1024),
            row("all-gather", 1 << 20),
        ];
        let first = Row::first_largest(&rows).unwrap();
        assert_eq!((first.op, first.bytes), ("all-reduce", 4 << 20));
        assert_eq!(Row::first_largest(&[]), None);
    }
}
