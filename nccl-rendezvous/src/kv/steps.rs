//! The algorithm's steps over a store ([`super::Kv`]): the meeting (each
//! rank's hello, the tests between hosts, rank 0's ruling and plan), and
//! at the end rank 0's reading of every rank's outcome.

use std::time::Instant;

use super::records::{
    encode_done, encode_job, encode_pairs, encode_round_two, read_done, read_job, read_pairs,
    read_plan, read_round_two, Done,
};
use super::{Brought, Kv, Reply, MAX_GPUS};
use crate::pairs::{self, Pair};
use crate::reach::{self, Gathered, Ruling};
use crate::words::{fail, offsets, PeerOutcome};

pub(super) fn key(what: &str, rank: usize) -> String {
    format!("nccl-find/{what}/{rank}")
}

/// The key rank `rank`'s outcome goes under: a store that sees a rank go
/// before it has put this one has lost that rank.
pub(crate) fn done_key(rank: usize) -> String {
    key("done", rank)
}

pub(super) const PLAN: &str = "nccl-find/plan";

/// What a rank learns by meeting.
pub(super) struct Learned {
    /// NCCL's unique id (zeros where the job stops).
    pub(super) id: [u8; 128],
    /// The NCCL ranks in all.
    pub(super) nranks: usize,
    /// This rank's first.
    pub(super) first_rank: usize,
    /// Rank 0's: what every rank brought.
    pub(super) gathered: Option<Gathered>,
    /// Rank 0's ruling, where it found a cause.
    pub(super) ruling: Option<Ruling>,
}

pub(super) const RULING: &str = "nccl-find/ruling";

/// Rank 0's second round of pairs, where the first found a suspect.
pub(super) const ROUND_TWO: &str = "nccl-find/round2";

/// Steps 1 to 3: the connections between hosts tested ([`crate::reach`]),
/// rank 0's ruling on them, the unique id, the NCCL ranks in all, this
/// rank's first.
pub(super) fn meet(
    kv: &mut dyn Kv,
    rank: usize,
    world: usize,
    ngpus: usize,
    brought: &Brought,
    make_id: &mut dyn FnMut() -> Result<[u8; 128], String>,
    deadline: Instant,
) -> Reply<Learned> {
    let card = &brought.card;
    let n = u32::try_from(ngpus)
        .ok()
        .filter(|n| (1..=MAX_GPUS).contains(n))
        .ok_or_else(|| fail(format!("{ngpus} GPUs is not a GPU count")))?;
    // Open until every test of this rank's addresses is done (the second
    // fence).
    let listening = reach::listen(card);
    kv.put(&key("hello", rank), &reach::hello(n, card, &listening))
        .map_err(fail)?;
    kv.fence(deadline)?;
    let (tested, paired) = test_boundaries(kv, rank, world, &card.host, deadline);
    if !tested.is_empty() {
        kv.put(&key("reach", rank), &reach::results(&tested))
            .map_err(fail)?;
    }
    if let Some(p) = paired {
        kv.put(&key("pair", rank), &encode_pairs(&[p]))
            .map_err(fail)?;
    }
    kv.fence(deadline)?;
    if rank == 0 {
        let ruled = rule(kv, world, brought, make_id, deadline);
        drop(listening);
        return ruled;
    }
    kv.fence(deadline)?;
    // Round two of the pairs, where rank 0 asked for one: this rank's
    // transfers, then a fence for rank 0 to read them, and one for its
    // ruling.
    if let Ok(b) = kv.get(0, ROUND_TWO) {
        let plan = read_round_two(&b, world)?;
        round_two(kv, rank, &plan, deadline)?;
        kv.fence(deadline)?;
        kv.fence(deadline)?;
    }
    drop(listening);
    let ruling = match kv.get(0, RULING) {
        Ok(b) => Some(
            reach::read_ruling(&b)
                .ok_or_else(|| fail("rank 0's ruling is malformed (another program wrote it?)"))?,
        ),
        Err(_) => None,
    };
    if ruling.as_ref().is_some_and(|r| r.stop) {
        return Ok(Learned {
            id: [0u8; 128],
            nranks: 0,
            first_rank: 0,
            gathered: None,
            ruling,
        });
    }
    let plan = kv.get(0, PLAN).map_err(fail)?;
    let (id, nranks, first_rank) = read_plan(&plan, rank, world, |r| kv.get(0, &key("place", r)))?;
    Ok(Learned {
        id,
        nranks,
        first_rank,
        gathered: None,
        ruling,
    })
}

/// Rank 0, step 3: every hello and every test read and judged; the
/// ruling, where there is a cause, and the plan, unless the ruling stops
/// the job; the fence.
pub(super) fn rule(
    kv: &mut dyn Kv,
    world: usize,
    brought: &Brought,
    make_id: &mut dyn FnMut() -> Result<[u8; 128], String>,
    deadline: Instant,
) -> Reply<Learned> {
    let mut hellos = Vec::with_capacity(world);
    for r in 0..world {
        let b = kv.get(r, &key("hello", r)).map_err(fail)?;
        let h = reach::read_hello(&b)
            .filter(|h| (1..=MAX_GPUS).contains(&h.ngpus))
            .ok_or_else(|| {
                fail(format!(
                    "rank {r} left a hello that is malformed (another program wrote it?)"
                ))
            })?;
        hellos.push(h);
    }
    let counts: Vec<usize> = hellos.iter().map(|h| h.ngpus as usize).collect();
    let mut gathered = gather(kv, hellos);
    second_round(kv, &mut gathered, world, deadline)?;
    let mut ruling = brought
        .judge
        .and_then(|j| j(&gathered))
        .map(|cause| Ruling {
            cause,
            stop: !brought.run_anyway,
        });
    // Made once every rank is here and nothing known stops the job:
    // NCCL's side of it (its bootstrap root) starts only for a job that
    // can run. Where it cannot be made, that is the job's cause.
    let id = match &ruling {
        Some(r) if r.stop => [0u8; 128],
        _ => match make_id() {
            Ok(id) => id,
            Err(e) => {
                ruling = Some(Ruling {
                    cause: format!("rank 0 could not make NCCL's unique id: {e}"),
                    stop: true,
                });
                [0u8; 128]
            }
        },
    };
    if let Some(r) = &ruling {
        kv.put(RULING, &reach::ruling_bytes(r)).map_err(fail)?;
    }
    let (first, nranks) = offsets(&counts);
    if !ruling.as_ref().is_some_and(|r| r.stop) {
        let uniform = counts.iter().all(|c| *c == counts[0]);
        let mut plan = id.to_vec();
        plan.extend_from_slice(&(nranks as u64).to_le_bytes());
        plan.push(u8::from(uniform));
        plan.extend_from_slice(&(counts[0] as u32).to_le_bytes());
        kv.put(PLAN, &plan).map_err(fail)?;
        if !uniform {
            for (r, f) in first.iter().enumerate().skip(1) {
                kv.put(&key("place", r), &(*f as u64).to_le_bytes())
                    .map_err(fail)?;
            }
        }
    }
    kv.fence(deadline)?;
    Ok(Learned {
        id,
        nranks,
        first_rank: 0,
        gathered: Some(gathered),
        ruling,
    })
}

/// Rank 0, where round one of the pairs found a suspect link: round two
/// asked for, run, and its transfers added to `gathered`.
fn second_round(
    kv: &mut dyn Kv,
    gathered: &mut Gathered,
    world: usize,
    deadline: Instant,
) -> Reply<()> {
    let plan = pairs::round_two(&gathered.pairs, &|r| gathered.cards[r].host.clone());
    if !plan.is_empty() {
        kv.put(ROUND_TWO, &encode_round_two(&plan)).map_err(fail)?;
        kv.fence(deadline)?;
        round_two(kv, 0, &plan, deadline)?;
        kv.fence(deadline)?;
        let mut senders: Vec<usize> = plan.iter().map(|(a, _)| *a).collect();
        senders.sort_unstable();
        senders.dedup();
        for r in senders {
            if let Some(mut got) = kv
                .get(r, &key("pair2", r))
                .ok()
                .and_then(|b| read_pairs(r, &b, world))
            {
                got.retain(|p| p.round == 2);
                gathered.pairs.append(&mut got);
            }
        }
    }
    Ok(())
}

/// The tests this rank makes: where it is the last of its host's, every
/// address of the next rank's, and of rank 0's unless rank 0 is on this
/// host or next. Each result by the rank tried; and round one of the
/// pairs: a timed transfer to the next rank's address that NCCL will use,
/// where it was reached.
pub(super) fn test_boundaries(
    kv: &mut dyn Kv,
    rank: usize,
    world: usize,
    host: &str,
    deadline: Instant,
) -> (Vec<(usize, reach::Tries)>, Option<Pair>) {
    let mut hello_of = |r: usize| {
        kv.get(r, &key("hello", r))
            .ok()
            .and_then(|b| reach::read_hello(&b))
    };
    let next = (rank + 1) % world;
    let Some(h) = hello_of(next).filter(|h| world > 1 && reach::at_boundary(host, &h.card.host))
    else {
        return (Vec::new(), None);
    };
    let tries = reach::probe(&h, deadline);
    let paired = reach::nccl_target(&h)
        .filter(|(i, _)| {
            tries
                .iter()
                .any(|(j, e)| usize::from(*j) == *i && e.is_none())
        })
        .map(|(_, at)| timed(rank, next, 1, at, h.tag, deadline));
    let mut out = vec![(next, tries)];
    if rank != 0 && next != 0 {
        if let Some(h0) = hello_of(0).filter(|h0| reach::at_boundary(host, &h0.card.host)) {
            out.push((0, reach::probe(&h0, deadline)));
        }
    }
    (out, paired)
}

/// One timed transfer as a record.
fn timed(
    from: usize,
    to: usize,
    round: u8,
    at: std::net::SocketAddr,
    tag: [u8; 16],
    until: Instant,
) -> Pair {
    match pairs::send(at, tag, until) {
        Ok((bytes, micros)) => Pair::new(from, to, round, bytes, micros),
        Err(e) => Pair::failed(from, to, round, e),
    }
}

/// This rank's transfers of round two, all at once, put for rank 0 (where
/// it has any).
fn round_two(kv: &mut dyn Kv, rank: usize, plan: &[(usize, usize)], until: Instant) -> Reply<()> {
    let mine = transfers(kv, rank, plan, until);
    if !mine.is_empty() {
        kv.put(&key("pair2", rank), &encode_pairs(&mine))
            .map_err(fail)?;
    }
    Ok(())
}

/// This rank's transfers of round two, run at once.
fn transfers(kv: &mut dyn Kv, rank: usize, plan: &[(usize, usize)], until: Instant) -> Vec<Pair> {
    let mut runs = Vec::new();
    for &(_, to) in plan.iter().filter(|(a, _)| *a == rank) {
        let h = kv
            .get(to, &key("hello", to))
            .ok()
            .and_then(|b| reach::read_hello(&b));
        let run = match h.and_then(|h| Some((h.tag, reach::nccl_target(&h)?.1))) {
            Some((tag, at)) => Ok(std::thread::spawn(move || {
                timed(rank, to, 2, at, tag, until)
            })),
            None => Err("its hello names no address NCCL will use".to_string()),
        };
        runs.push((to, run));
    }
    runs.into_iter()
        .map(|(to, run)| {
            run.and_then(|t| t.join().map_err(|_| "the test failed".to_string()))
                .unwrap_or_else(|why| Pair::failed(rank, to, 2, why))
        })
        .collect()
}

/// Rank 0, once the ranks have met: every card, and the results of every
/// rank at a boundary (one whose results are missing or malformed is left
/// out).
pub(super) fn gather(kv: &mut dyn Kv, hellos: Vec<reach::Hello>) -> Gathered {
    let world = hellos.len();
    let (mut probes, mut pairs) = (Vec::new(), Vec::new());
    for r in 0..world {
        let next = &hellos[(r + 1) % world].card.host;
        if world < 2 || !reach::at_boundary(&hellos[r].card.host, next) {
            continue;
        }
        if let Some(mut p) = kv
            .get(r, &key("reach", r))
            .ok()
            .and_then(|b| reach::read_results(r, &b, &hellos))
        {
            probes.append(&mut p);
        }
        if let Some(p) = kv
            .get(r, &key("pair", r))
            .ok()
            .and_then(|b| read_pairs(r, &b, world))
        {
            pairs.extend(p.into_iter().filter(|p| p.round == 1).take(1));
        }
    }
    let mut g = Gathered::new(hellos.into_iter().map(|h| h.card).collect(), probes);
    g.pairs = pairs;
    g
}

/// Step 3: this rank's outcome for rank 0; rank 0 gets every peer's.
pub(super) fn outcomes(
    kv: &mut dyn Kv,
    rank: usize,
    world: usize,
    mine: &Done,
    deadline: Instant,
) -> Vec<PeerOutcome> {
    let fenced = kv
        .put(&key("done", rank), &encode_done(mine))
        .map_err(|e| e.to_string())
        .and_then(|()| kv.fence(deadline).map_err(|f| f.message));
    let got = if rank == 0 {
        (1..world)
            .map(|r| match &fenced {
                Ok(()) => {
                    let read = kv.get(r, &key("done", r)).ok().and_then(|b| read_done(&b));
                    PeerOutcome {
                        rank: r,
                        times_us: read.as_ref().map(|d| d.3.clone()).unwrap_or_default(),
                        done: read.map(|(ok, wrong, m, _)| (ok, wrong, m)),
                        why: None,
                    }
                }
                Err(why) => PeerOutcome {
                    rank: r,
                    done: None,
                    times_us: Vec::new(),
                    why: Some(why.clone()),
                },
            })
            .collect()
    } else {
        Vec::new()
    };
    // Rank 0 tells every rank how the job went: the ranks that failed or
    // never reported (rank 0 among them), so that a rank whose own run was
    // right does not end "OK" in a job that failed.
    if fenced.is_ok() && rank == 0 {
        // A job that went well is no record at all; PMI takes no empty
        // value, so it is one byte that holds none.
        let mut word = encode_job(mine, &got);
        if word.is_empty() {
            word.push(0);
        }
        let _ = kv.put(&key("job", 0), &word);
    }
    // Nobody leaves the store before rank 0 has read every outcome: a
    // launcher may drop what a process put once that process is gone.
    let second = fenced.and_then(|()| kv.fence(deadline).map_err(|f| f.message));
    if rank == 0 {
        return got;
    }
    // A rank that has not heard rank 0's word on the job does not know it
    // went well: rank 0 died or hung at the end, or the word could not be
    // passed; that is the job's failure, named as rank 0's.
    let word = second.and_then(|()| {
        kv.get(0, &key("job", 0))
            .map_err(|e| format!("its word on how the job went could not be read ({e})"))
    });
    match word {
        Ok(b) => read_job(&b, rank),
        Err(why) => vec![PeerOutcome {
            rank: 0,
            done: None,
            times_us: Vec::new(),
            why: Some(format!("at the end of the job: {why}")),
        }],
    }
}
