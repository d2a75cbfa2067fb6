//! The meeting's tests: the algorithm over every store, the outcomes, hostile values.

use super::records::{encode_job, read_done, read_job, read_plan, JOB_MESSAGE, JOB_RANKS};
use super::*;
use crate::reach;
use std::sync::{Barrier, Mutex};

/// An in-memory store shared by threads: the algorithm's test double
/// (the real stores are tested against the real launchers).
#[derive(Debug)]
struct Shared {
    map: Mutex<Vec<(usize, String, Vec<u8>)>>,
    barrier: Barrier,
    /// A rank that never reaches a fence.
    absent: Option<usize>,
}

struct Mem(Arc<Shared>, usize);

impl Kv for Mem {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        self.0
            .map
            .lock()
            .unwrap()
            .push((self.1, key.into(), value.into()));
        Ok(())
    }
    fn fence(&mut self, _: Instant) -> Result<(), Failed> {
        self.0.barrier.wait();
        Ok(())
    }
    fn get(&mut self, from: usize, key: &str) -> Result<Vec<u8>, String> {
        let m = self.0.map.lock().unwrap();
        m.iter()
            .rev()
            .find(|(r, k, _)| *r == from && k == key)
            .map(|e| e.2.clone())
            .ok_or_else(|| format!("no {key}"))
    }
}

#[derive(Debug)]
struct MemConnect(Arc<Shared>);

impl Connect for MemConnect {
    fn connect(&self, rank: usize, _: usize, _: Instant) -> Result<Box<dyn Kv>, String> {
        if self.0.absent == Some(rank) {
            std::thread::sleep(Duration::from_secs(3600));
        }
        Ok(Box::new(Mem(self.0.clone(), rank)))
    }
    fn describe(&self) -> String {
        "memory".into()
    }
    fn launcher(&self) -> &'static str {
        "test launcher"
    }
}

/// Each rank's NCCL ranks in all, first rank, (rank 0) peers' outcomes
/// and what rank 0 gathered.
type Got = Result<(usize, usize, Vec<PeerOutcome>, Option<Gathered>), String>;

fn run(counts: &[usize], absent: Option<usize>, secs: u64) -> Vec<Got> {
    run_saying(
        counts,
        absent,
        secs,
        |r| format!("rank {r}"),
        |_| Card::default(),
    )
}

/// [`run`], each rank bringing `card(rank)` and finishing with
/// `says(rank)`.
fn run_saying(
    counts: &[usize],
    absent: Option<usize>,
    secs: u64,
    says: fn(usize) -> String,
    card: fn(usize) -> Card,
) -> Vec<Got> {
    run_judged(counts, absent, secs, says, card, None)
}

/// [`run_saying`], rank 0 judging with `judge`.
fn run_judged(
    counts: &[usize],
    absent: Option<usize>,
    secs: u64,
    says: fn(usize) -> String,
    card: fn(usize) -> Card,
    judge: Option<Judge>,
) -> Vec<Got> {
    let world = counts.len();
    let shared = Arc::new(Shared {
        map: Mutex::default(),
        barrier: Barrier::new(world),
        absent,
    });
    let via: Arc<dyn Connect> = Arc::new(MemConnect(shared));
    let hs: Vec<_> = counts
        .iter()
        .enumerate()
        .filter(|(r, _)| Some(*r) != absent)
        .map(|(r, &n)| {
            let via = via.clone();
            std::thread::spawn(move || {
                let j = join(
                    launcher_opener(via.clone(), r, world),
                    Whose::Launcher(via.launcher(), via.describe()),
                    r,
                    world,
                    n,
                    Brought {
                        card: card(r),
                        judge,
                        run_anyway: false,
                    },
                    &|| Ok([5u8; 128]),
                    Duration::from_secs(secs),
                    &mut |_| {},
                )
                .map_err(|f| f.message)?;
                if let Some(r) = j.ruling.as_ref().filter(|r| r.stop) {
                    let cause = r.cause.clone();
                    j.finish(true, 0, "stopped", Duration::from_secs(secs));
                    return Err(format!("stopped: {cause}"));
                }
                assert_eq!(j.id, [5u8; 128]);
                let (nranks, first, gathered) = (j.nranks, j.first_rank, j.gathered.clone());
                let mut j = j;
                j.report_times(&[r as u64, 10 * r as u64]);
                let peers = j.finish(r != 2, r as u64, &says(r), Duration::from_secs(secs));
                Ok((nranks, first, peers, gathered))
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn equal_gpu_counts_meet_in_three_fences() {
    let got = run(&[2, 2, 2], None, 30);
    let places: Vec<(usize, usize)> = got
        .iter()
        .map(|g| (g.as_ref().unwrap().0, g.as_ref().unwrap().1))
        .collect();
    assert_eq!(places, [(6, 0), (6, 2), (6, 4)]);
    let peers = &got[0].as_ref().unwrap().2;
    assert_eq!(
        peers,
        &vec![
            PeerOutcome {
                rank: 1,
                done: Some((true, 1, "rank 1".into())),
                times_us: vec![1, 10],
                why: None,
            },
            PeerOutcome {
                rank: 2,
                done: Some((false, 2, "rank 2".into())),
                times_us: vec![2, 20],
                why: None,
            },
        ]
    );
    // Rank 0 tells the others how the job went: rank 1, right itself,
    // hears that rank 2 failed; rank 2 hears nothing of itself.
    assert_eq!(
        got[1].as_ref().unwrap().2,
        vec![PeerOutcome {
            rank: 2,
            done: Some((false, 2, "rank 2".into())),
            times_us: Vec::new(),
            why: None,
        }]
    );
    assert_eq!(got[2].as_ref().unwrap().2, vec![]);
}

/// The job's failures as rank 0 sends them: at most four ranks, each
/// one's words cut, a rank that never reported with why; malformed
/// bytes give what could be read, never a panic.
#[test]
fn the_jobs_failures_travel_bounded() {
    let long = "x".repeat(5000);
    let mine = Done {
        ok: false,
        wrong: 0,
        message: &long,
        times_us: &[1, 2],
    };
    let mut peers: Vec<PeerOutcome> = (1..8)
        .map(|r| PeerOutcome {
            rank: r,
            done: Some((r % 2 == 0, r as u64, format!("rank {r}"))),
            times_us: vec![7],
            why: None,
        })
        .collect();
    peers[2].done = None;
    peers[2].why = Some("went away".into());
    let b = encode_job(&mine, &peers);
    let got = read_job(&b, 5);
    type Shown<'a> = (usize, Option<(bool, u64, usize)>, Option<&'a str>);
    let shown: Vec<Shown> = got
        .iter()
        .map(|p| {
            (
                p.rank,
                p.done.as_ref().map(|(ok, w, m)| (*ok, *w, m.len())),
                p.why.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (0, Some((false, 0, JOB_MESSAGE)), None),
            (1, Some((false, 1, 6)), None),
            (3, None, Some("went away")),
        ]
    );
    for cut in 0..b.len() {
        assert!(read_job(&b[..cut], 9).len() <= JOB_RANKS);
    }
}

/// What a peer says reaches rank 0's report escaped: a terminal
/// escape, a line break and a forged verdict stay one visible line.
#[test]
fn a_peers_words_through_the_store_are_escaped() {
    let got = run_saying(
        &[1, 1],
        None,
        30,
        |r| {
            if r == 1 {
                "\x1b]0;pwned\x07\nOK: fake \\ \u{202e}".into()
            } else {
                String::new()
            }
        },
        |_| Card::default(),
    );
    assert_eq!(
        got[0].as_ref().unwrap().2,
        vec![PeerOutcome {
            rank: 1,
            done: Some((
                true,
                1,
                "\\u{1b}]0;pwned\\u{7}\\u{a}OK: fake \\\\ \\u{202e}".into()
            )),
            times_us: vec![1, 10],
            why: None,
        }]
    );
    // Bytes that are not UTF-8 are shown, not passed on.
    assert_eq!(
        read_done(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, b'\r']),
        Some((false, 0, "\u{fffd}\\u{d}".into(), vec![]))
    );
}

/// Five ranks on three hosts: rank 0 gets every card, and only the
/// last rank of each host tests the next host and rank 0's.
#[test]
fn rank_0_gathers_every_card_and_the_boundaries_are_tested() {
    fn card(r: usize) -> Card {
        let (host, ips): (&str, &[&str]) = match r {
            0 | 1 => ("a", &["127.0.0.1"]),
            2 | 3 => ("b", &["127.0.0.2", "127.0.0.3"]),
            _ => ("c", &["127.0.0.4"]),
        };
        let addrs = ips
            .iter()
            .enumerate()
            .map(|(i, ip)| reach::Addr::new(format!("eth{i}"), ip.parse().unwrap(), i == 0))
            .collect();
        Card::new(host.into(), format!("rank={r}\nnccl=2.21.5"), addrs)
    }
    let got = run_saying(&[1; 5], None, 30, |_| String::new(), card);
    for g in &got[1..] {
        assert_eq!(g.as_ref().unwrap().3, None);
    }
    let g = got[0].as_ref().unwrap().3.clone().unwrap();
    assert_eq!(g.cards, (0..5).map(card).collect::<Vec<_>>());
    let tried: Vec<(usize, usize, String, Option<String>)> = g
        .probes
        .iter()
        .map(|p| (p.from, p.to, p.addr.ip.to_string(), p.error.clone()))
        .collect();
    let ok = |from, to, ip: &str| (from, to, ip.to_string(), None);
    assert_eq!(
        tried,
        [
            ok(1, 2, "127.0.0.2"),
            ok(1, 2, "127.0.0.3"),
            ok(3, 4, "127.0.0.4"),
            ok(3, 0, "127.0.0.1"),
            ok(4, 0, "127.0.0.1"),
        ]
    );
}

/// A cause rank 0 finds reaches every rank, which stops before NCCL:
/// no unique id is made.
#[test]
fn rank_0s_ruling_stops_every_rank() {
    fn judge(g: &Gathered) -> Option<String> {
        Some(format!("{} cards; the fix", g.cards.len()))
    }
    let got = run_judged(
        &[1, 1, 1],
        None,
        30,
        |_| String::new(),
        |_| Card::default(),
        Some(judge),
    );
    for g in got {
        assert_eq!(g.unwrap_err(), "stopped: 3 cards; the fix");
    }
    let r = Ruling {
        cause: "a cause; the fix".into(),
        stop: false,
    };
    assert_eq!(read_ruling_back(&r), Some(r.clone()));
    assert_eq!(reach::read_ruling(&[2]), None);
}

fn read_ruling_back(r: &Ruling) -> Option<Ruling> {
    reach::read_ruling(&reach::ruling_bytes(r))
}

#[test]
fn unequal_gpu_counts_get_their_places() {
    let got = run(&[1, 3, 2, 1], None, 30);
    let firsts: Vec<(usize, usize)> = got
        .iter()
        .map(|g| (g.as_ref().unwrap().0, g.as_ref().unwrap().1))
        .collect();
    assert_eq!(firsts, [(7, 0), (7, 1), (7, 4), (7, 6)]);
}

#[test]
fn a_rank_that_never_comes_ends_at_the_deadline() {
    let t = Instant::now();
    let got = run(&[1, 1], Some(1), 1);
    let e = got[0].as_ref().unwrap_err();
    assert_eq!(
        e,
        "test launcher: the processes did not all meet through memory within 1 s: a rank never came \
         (it failed to start, or was started outside this job), or the launcher's server stopped \
         answering. Check every rank's output, or raise --timeout"
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
}

#[test]
fn malformed_plans_are_refused() {
    let mut plan = vec![1u8; 128];
    plan.extend_from_slice(&4u64.to_le_bytes());
    plan.push(1);
    plan.extend_from_slice(&2u32.to_le_bytes());
    let none = |_| Err("no place".to_string());
    let (id, nranks, first) = read_plan(&plan, 1, 2, none).unwrap();
    assert_eq!((id, nranks, first), ([1u8; 128], 4, 2));
    for bad in [
        plan[..100].to_vec(),
        [&plan[..136], &[7], &plan[137..]].concat(),
        [&plan[..128], &0u64.to_le_bytes()[..], &plan[136..]].concat(),
        [&plan[..128], &u64::MAX.to_le_bytes()[..], &plan[136..]].concat(),
    ] {
        assert_eq!(
            read_plan(&bad, 1, 2, none).unwrap_err().message,
            "rank 0's plan is malformed (another program wrote it?)"
        );
    }
    // A rank whose first NCCL rank would lie past the end.
    assert!(read_plan(&plan, 2, 2, none).is_err());
    assert_eq!(
        read_done(&[1, 3, 0, 0, 0, 0, 0, 0, 0, 0, b'h']),
        Some((true, 3, "h".into(), vec![]))
    );
    assert_eq!(
        read_done(&[1, 3, 0, 0, 0, 0, 0, 0, 0, 1, 5, 0, 0, 0, 0, 0, 0, 0, b'h']),
        Some((true, 3, "h".into(), vec![5]))
    );
    assert_eq!(read_done(&[2, 0, 0, 0, 0, 0, 0, 0, 0, 0]), None);
    assert_eq!(read_done(&[1]), None);
    // More times than a rank sends, or fewer bytes than it says.
    assert_eq!(read_done(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 9]), None);
    assert_eq!(read_done(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]), None);
}

/// A store for one peer whose fences and rank 0's word go as scripted.
struct Scripted {
    fences: Vec<Result<(), Failed>>,
    job: Option<Vec<u8>>,
}

impl Kv for Scripted {
    fn put(&mut self, _: &str, _: &[u8]) -> Result<(), String> {
        Ok(())
    }
    fn fence(&mut self, _: Instant) -> Result<(), Failed> {
        if self.fences.is_empty() {
            return Ok(());
        }
        self.fences.remove(0)
    }
    fn get(&mut self, _: usize, key: &str) -> Result<Vec<u8>, String> {
        self.job.clone().ok_or_else(|| format!("no {key}"))
    }
}

/// A peer whose own run was right does not end OK where rank 0's word on
/// the job never came: rank 0 died or hung at the end-of-job fences, or
/// its word could not be read. The peer names rank 0, never itself.
#[test]
fn a_peer_without_rank_0s_word_does_not_end_ok() {
    let gone = || Failed {
        message: "rank(s) 0 did not arrive in 20 s".into(),
        missing: vec![0],
    };
    let mine = records::Done {
        ok: true,
        wrong: 0,
        message: "fine",
        times_us: &[],
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    for (fences, job, why) in [
        (vec![Err(gone())], None, "at the end of the job: rank(s) 0 did not arrive in 20 s"),
        (vec![Ok(()), Err(gone())], None, "at the end of the job: rank(s) 0 did not arrive in 20 s"),
        (
            vec![Ok(()), Ok(())],
            None,
            "at the end of the job: its word on how the job went could not be read (no nccl-find/job/0)",
        ),
    ] {
        let mut kv = Scripted { fences, job };
        let got = outcomes(&mut kv, 1, 2, &mine, deadline);
        assert_eq!(
            got,
            vec![PeerOutcome {
                rank: 0,
                done: None,
                times_us: Vec::new(),
                why: Some(why.into()),
            }]
        );
    }
    // The word came, and the job went well: nothing to say (one byte, as
    // rank 0 puts it: PMI takes no empty value).
    assert_eq!(encode_job(&mine, &[]), Vec::<u8>::new());
    let word = vec![0u8];
    let mut kv = Scripted {
        fences: vec![],
        job: Some(word),
    };
    assert_eq!(outcomes(&mut kv, 1, 2, &mine, deadline), Vec::new());
}
