//! The pairs of nodes over NCCL itself, in the two rounds of
//! [`nccl_rendezvous::pairs`]: each transfer one `ncclSend` on one GPU and
//! one `ncclRecv` on another, checked, and timed by the receiver while no
//! other transfer touches either host. Round one is the ring across hosts
//! (on one host, across its GPUs); round two, only where round one found a
//! slow link, pairs each of its ends with a node that did well.
//!
//! Every rank learns each rank's host (one all-reduce of their names) and
//! every transfer's time (one all-reduce a round): every rank plans round
//! two alike, and every rank can name the node at fault.

use std::ops::Range;

use nccl_rendezvous::pairs::{self, Pair};

use crate::collective::{Call, Collective, SendRecv};
use crate::data::{Redop, Source};
use crate::gpu::{Data, Run};
use crate::nccl::{NcclLib, NcclResult, SUCCESS};
use crate::report::{Event, Failure};
use crate::verdict;

/// Timed calls of each transfer.
const CALLS: usize = 5;

/// The bytes of its host's name each rank shares, at most.
pub(crate) const NAME: usize = 64;

/// What the pairs over NCCL found: every transfer of both rounds (by NCCL
/// rank), and each NCCL rank's host.
pub(crate) type Found = (Vec<Pair>, Vec<String>);

/// Runs both rounds between the ranks of `d` (this process's GPUs hold
/// those from `first_rank`, on `host`), each transfer `d`'s elements: the
/// wrong elements received here, and what was found.
pub(crate) fn run(
    run: &Run,
    d: &Data,
    host: &str,
    first_rank: usize,
    on: &mut dyn FnMut(Event),
) -> Result<(usize, Found), Failure> {
    let nranks = d.rule.nranks;
    let start = std::time::Instant::now();
    let hosts = share_hosts(run, host, nranks, first_rank)?;
    let unit = pairs::units(&hosts);
    let by_unit = |r: usize| unit.get(r).map_or(r, |u| *u).to_string();
    let (mut wrong, mut all) = round(run, &pairs::ring(&unit), 1, &unit, d, first_rank)?;
    let again = pairs::round_two(&all, &by_unit);
    if !again.is_empty() {
        let (w, second) = round(run, &again, 2, &unit, d, first_rank)?;
        wrong += w;
        all.extend(second);
    }
    let median = pairs::median(&all).map_or("-".into(), pairs::shown_rate);
    on(Event::Note(format!(
        "pairs over NCCL: {} transfer(s) of {} (ncclSend on one GPU, ncclRecv on another), each \
         timed alone, in {} ({:.2} s): median {median}, {}",
        all.len(),
        verdict::human(d.count * d.rule.t.size()),
        if again.is_empty() {
            "one round"
        } else {
            "two rounds"
        },
        start.elapsed().as_secs_f64(),
        match wrong {
            0 => "every element right".to_string(),
            w => format!("{w} wrong elements"),
        }
    )));
    Ok((wrong, (all, hosts)))
}

/// Each NCCL rank's host, as its process says it: one `int32` sum
/// all-reduce of [`NAME`] slots a rank, each process filling its ranks'.
/// What a peer sent is shown as printable ASCII only.
fn share_hosts(
    run: &Run,
    host: &str,
    nranks: usize,
    first_rank: usize,
) -> Result<Vec<String>, Failure> {
    let mut mine = vec![0i32; nranks * NAME];
    for r in mine_of(run, first_rank, nranks) {
        for (i, b) in host.bytes().take(NAME).enumerate() {
            mine[r * NAME + i] = i32::from(b);
        }
    }
    let all = run.agree(&mine, Redop::Sum, nranks, first_rank, "the hosts' names")?;
    Ok(all
        .chunks(NAME)
        .map(|c| {
            c.iter()
                .take_while(|v| **v != 0)
                .map(|v| match u8::try_from(*v) {
                    Ok(b) if b.is_ascii_graphic() => char::from(b),
                    _ => '?',
                })
                .collect()
        })
        .collect())
}

/// The NCCL ranks this process's GPUs hold.
fn mine_of(run: &Run, first_rank: usize, nranks: usize) -> Range<usize> {
    first_rank.min(nranks)..(first_rank + run.gpus.len()).min(nranks)
}

/// One round: `plan`'s transfers in [`pairs::steps`], each step begun by
/// every rank together; the wrong elements received here, and each
/// transfer timed, as its receiver measured it.
fn round(
    run: &Run,
    plan: &[(usize, usize)],
    n: u8,
    unit: &[usize],
    d: &Data,
    first_rank: usize,
) -> Result<(usize, Vec<Pair>), Failure> {
    let nranks = d.rule.nranks;
    let mine = mine_of(run, first_rank, nranks);
    let mut micros = vec![0i32; plan.len()];
    let mut wrong = 0;
    for step in pairs::steps(plan, unit) {
        // Every rank comes to the step together: no transfer of the step
        // before still runs.
        run.agree_min(0, nranks, first_rank)?;
        let t = run.one(&Step(&step), d, first_rank, false, CALLS)?;
        wrong += t.wrong;
        for (i, p) in plan.iter().enumerate() {
            if step.contains(p) && mine.contains(&p.1) {
                micros[i] = t.time_us.round().clamp(1.0, f64::from(i32::MAX)) as i32;
            }
        }
    }
    let all = run.agree(&micros, Redop::Sum, nranks, first_rank, "the pairs' times")?;
    let bytes = (d.count * d.rule.t.size()) as u64;
    Ok((
        wrong,
        plan.iter()
            .zip(all)
            .map(|(&(a, b), us)| Pair::new(a, b, n, bytes, u64::try_from(us).unwrap_or(0)))
            .collect(),
    ))
}

/// One step of a round: each transfer's sender calls `ncclSend`, its
/// receiver `ncclRecv`; a rank in none calls nothing. No rank is in two.
#[derive(Debug)]
struct Step<'a>(&'a [(usize, usize)]);

impl Step<'_> {
    fn to(&self, rank: usize) -> Option<usize> {
        self.0.iter().find(|p| p.0 == rank).map(|p| p.1)
    }

    fn from(&self, rank: usize) -> Option<usize> {
        self.0.iter().find(|p| p.1 == rank).map(|p| p.0)
    }
}

impl Collective for Step<'_> {
    fn name(&self) -> &'static str {
        "pair"
    }

    fn nccl_name(&self) -> &'static str {
        "ncclSend/ncclRecv"
    }

    fn missing(&self, nc: &NcclLib) -> Option<String> {
        SendRecv.missing(nc)
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
        (0, if self.from(rank).is_some() { count } else { 0 })
    }

    fn source(&self, rank: usize, _nranks: usize, _count: usize) -> Source {
        Source::copied(self.from(rank).unwrap_or(rank), 0)
    }

    fn bus_factor(&self, _nranks: usize) -> f64 {
        1.0
    }

    unsafe fn call(&self, nc: &NcclLib, c: &Call) -> NcclResult {
        let (Some(send), Some(recv)) = (nc.send, nc.recv) else {
            return crate::nccl::INVALID_USAGE;
        };
        if let Some(to) = self.to(c.rank) {
            // SAFETY: the caller's contract (`Collective::call`).
            return unsafe { send(c.send, c.count, c.t.nccl().0, to as i32, c.comm, c.stream) };
        }
        match self.from(c.rank) {
            // SAFETY: as above.
            Some(from) => unsafe {
                recv(c.recv, c.count, c.t.nccl().0, from as i32, c.comm, c.stream)
            },
            None => SUCCESS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{inputs, rules};

    #[test]
    fn a_receiver_gets_its_senders_input_and_a_rank_in_no_transfer_checks_nothing() {
        let plan = [(1, 2), (3, 0)];
        let step = Step(&plan);
        for rule in rules(&step, 4) {
            let all = inputs(&step, &rule, 7, 16);
            assert_eq!(step.expected(&rule, 7, 2, 16), all[1], "{rule:?}");
            assert_eq!(step.expected(&rule, 7, 0, 16), all[3], "{rule:?}");
        }
        assert_eq!(step.checked(2, 4, 16, false), (0, 16));
        assert_eq!(step.checked(1, 4, 16, false), (0, 0));
        assert_eq!((step.to(1), step.from(1)), (Some(2), None));
    }
}
