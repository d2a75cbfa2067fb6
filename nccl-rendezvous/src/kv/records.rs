//! What the ranks leave in the store beside their hellos, as bytes: rank
//! 0's plan (the unique id, the NCCL ranks in all, each one's first), each
//! rank's outcome, and rank 0's verdict on the job; each read back bounded,
//! anything malformed a failure, never a panic.

use super::{Reply, MAX_GPUS, MAX_MESSAGE};
use crate::pairs::{Pair, MAX_SUSPECTS};
use crate::reach::{put_str, Cursor};
use crate::untrusted::{cut, peer_text};
use crate::words::{fail, PeerOutcome};

pub(super) fn le_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

pub(super) fn le_u64(b: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// A peer's reading of rank 0's plan (and, where the GPU counts differ, of
/// its place): anything malformed is a failure, never a panic.
pub(super) fn read_plan(
    plan: &[u8],
    rank: usize,
    world: usize,
    mut place: impl FnMut(usize) -> Result<Vec<u8>, String>,
) -> Reply<([u8; 128], usize, usize)> {
    let bad = || fail("rank 0's plan is malformed (another program wrote it?)");
    if plan.len() != 128 + 8 + 1 + 4 {
        return Err(bad());
    }
    let mut id = [0u8; 128];
    id.copy_from_slice(&plan[..128]);
    let nranks = le_u64(&plan[128..136]).ok_or_else(bad)?;
    let each = le_u32(&plan[137..141]).ok_or_else(bad)? as u64;
    let limit = world as u64 * u64::from(MAX_GPUS);
    if nranks == 0 || nranks > limit {
        return Err(bad());
    }
    let first = match plan[136] {
        1 => rank as u64 * each,
        0 => le_u64(&place(rank).map_err(fail)?).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if first >= nranks {
        return Err(bad());
    }
    Ok((id, nranks as usize, first as usize))
}

/// The most transfers one rank reports: its ring's, and round two's.
const MAX_PAIRS: usize = 3 * MAX_SUSPECTS + 1;

/// A rank's timed transfers (it sent each): to whom, the round, the bytes
/// counted, the µs, the error (empty: none).
pub(super) fn encode_pairs(pairs: &[Pair]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in pairs.iter().take(MAX_PAIRS) {
        v.extend_from_slice(&(p.to as u32).to_le_bytes());
        v.push(p.round);
        v.extend_from_slice(&p.bytes.to_le_bytes());
        v.extend_from_slice(&p.micros.to_le_bytes());
        put_str(&mut v, p.error.as_deref().unwrap_or(""), 200);
    }
    v
}

/// Rank `from`'s transfers back: `None` when malformed (a rank past the
/// world, a round other than 1 or 2, too many).
pub(super) fn read_pairs(from: usize, b: &[u8], world: usize) -> Option<Vec<Pair>> {
    let mut c = Cursor(b);
    let mut out = Vec::new();
    while !c.0.is_empty() {
        let to = c.u32()? as usize;
        let round = c.byte()?;
        let (bytes, micros) = (c.u64()?, c.u64()?);
        let e = c.text(200)?;
        if to >= world || !(1..=2).contains(&round) || out.len() >= MAX_PAIRS {
            return None;
        }
        let mut p = Pair::new(from, to, round, bytes, micros);
        p.error = (!e.is_empty()).then(|| e.replace('\n', "\\u{a}"));
        out.push(p);
    }
    Some(out)
}

/// Round two's plan: (sender, receiver) pairs.
pub(super) fn encode_round_two(plan: &[(usize, usize)]) -> Vec<u8> {
    let mut v = Vec::new();
    for (a, b) in plan {
        v.extend_from_slice(&(*a as u32).to_le_bytes());
        v.extend_from_slice(&(*b as u32).to_le_bytes());
    }
    v
}

/// Round two's plan back: a failure when malformed.
pub(super) fn read_round_two(b: &[u8], world: usize) -> Reply<Vec<(usize, usize)>> {
    let bad = || fail("rank 0's second round of pairs is malformed (another program wrote it?)");
    if b.len() % 8 != 0 || b.len() / 8 > 3 * MAX_SUSPECTS {
        return Err(bad());
    }
    b.chunks(8)
        .map(|c| {
            let (a, t) = (
                le_u32(&c[..4]).ok_or_else(bad)?,
                le_u32(&c[4..]).ok_or_else(bad)?,
            );
            let (a, t) = (a as usize, t as usize);
            if a >= world || t >= world || a == t {
                return Err(bad());
            }
            Ok((a, t))
        })
        .collect()
}

/// The most times one rank reports.
pub(super) const MAX_TIMES: usize = 8;

/// One rank's outcome, as it leaves it.
pub(super) struct Done<'a> {
    pub(super) ok: bool,
    pub(super) wrong: u64,
    pub(super) message: &'a str,
    pub(super) times_us: &'a [u64],
}

/// An outcome as the store carries it: right (a byte), wrong elements,
/// the count of times and each (little-endian), then the message.
pub(super) fn encode_done(d: &Done) -> Vec<u8> {
    let mut v = vec![u8::from(d.ok)];
    v.extend_from_slice(&d.wrong.to_le_bytes());
    let times = &d.times_us[..d.times_us.len().min(MAX_TIMES)];
    v.push(times.len() as u8);
    for t in times {
        v.extend_from_slice(&t.to_le_bytes());
    }
    v.extend_from_slice(cut(d.message, MAX_MESSAGE).as_bytes());
    v
}

/// How many failed ranks rank 0 tells the others of, and how much of each
/// one's words.
pub(super) const JOB_RANKS: usize = 4;

pub(super) const JOB_MESSAGE: usize = 400;

/// The job's failures as rank 0 tells them: for each of the first
/// [`JOB_RANKS`] ranks that failed or never reported, its rank (u64), 0
/// and its outcome ([`encode_done`], words cut to [`JOB_MESSAGE`]) or 1
/// and why it never reported.
pub(super) fn encode_job(mine: &Done, peers: &[PeerOutcome]) -> Vec<u8> {
    let mut entries: Vec<(usize, u8, Vec<u8>)> = Vec::new();
    if !mine.ok {
        let d = Done {
            message: cut(mine.message, JOB_MESSAGE),
            times_us: &[],
            ..*mine
        };
        entries.push((0, 0, encode_done(&d)));
    }
    for p in peers {
        let entry = match &p.done {
            Some((true, _, _)) => continue,
            Some((ok, wrong, m)) => {
                let d = Done {
                    ok: *ok,
                    wrong: *wrong,
                    message: cut(m, JOB_MESSAGE),
                    times_us: &[],
                };
                (p.rank, 0, encode_done(&d))
            }
            None => (
                p.rank,
                1,
                cut(p.why.as_deref().unwrap_or(""), JOB_MESSAGE)
                    .as_bytes()
                    .to_vec(),
            ),
        };
        entries.push(entry);
    }
    let mut v = Vec::new();
    for (rank, kind, bytes) in entries.into_iter().take(JOB_RANKS) {
        v.extend_from_slice(&(rank as u64).to_le_bytes());
        v.push(kind);
        v.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        v.extend_from_slice(&bytes);
    }
    v
}

/// The job's failures from rank 0, as this rank's `PeerOutcome`s (its
/// own left out); malformed parts are dropped, never a panic.
pub(super) fn read_job(b: &[u8], me: usize) -> Vec<PeerOutcome> {
    let mut out = Vec::new();
    let mut at = 0;
    while out.len() < JOB_RANKS && b.len() >= at + 13 {
        let Some(rank) = le_u64(&b[at..at + 8]) else {
            break;
        };
        let kind = b[at + 8];
        let len = u32::from_le_bytes([b[at + 9], b[at + 10], b[at + 11], b[at + 12]]) as usize;
        let Some(body) = b.get(at + 13..at + 13 + len) else {
            break;
        };
        at += 13 + len;
        let rank = usize::try_from(rank).unwrap_or(usize::MAX);
        if rank == me {
            continue;
        }
        let outcome = match kind {
            0 => match read_done(body) {
                Some((ok, wrong, m, _)) => PeerOutcome {
                    rank,
                    done: Some((ok, wrong, m)),
                    times_us: Vec::new(),
                    why: None,
                },
                None => continue,
            },
            _ => PeerOutcome {
                rank,
                done: None,
                times_us: Vec::new(),
                why: Some(String::from_utf8_lossy(body).into_owned()).filter(|w| !w.is_empty()),
            },
        };
        out.push(outcome);
    }
    out
}

/// An outcome back: `None` when it is malformed.
pub(super) fn read_done(b: &[u8]) -> Option<(bool, u64, String, Vec<u64>)> {
    if b.len() < 10 || b.len() > 10 + 8 * MAX_TIMES + MAX_MESSAGE {
        return None;
    }
    let ok = match b[0] {
        0 => false,
        1 => true,
        _ => return None,
    };
    let wrong = le_u64(&b[1..9])?;
    let n = usize::from(b[9]);
    if n > MAX_TIMES || b.len() < 10 + 8 * n {
        return None;
    }
    let times = b[10..10 + 8 * n].chunks(8).filter_map(le_u64).collect();
    let message = &b[10 + 8 * n..];
    if message.len() > MAX_MESSAGE {
        return None;
    }
    // A peer's words, through a store anyone who reaches it may write:
    // shown escaped, never raw.
    Some((
        ok,
        wrong,
        peer_text(&String::from_utf8_lossy(message)),
        times,
    ))
}
