//! How the processes of one job meet, under any launcher, before NCCL
//! starts: rank 0 makes NCCL's unique id and hands it out, and the
//! processes meet again at the end to say how they did. Every way to meet
//! is a key-value store with a barrier (the shape of PyTorch's
//! c10d `Store`): our own TCP store that rank 0 serves (`tcp://HOST:PORT`),
//! our own store in files (`file:///shared/path`), or a launcher's own
//! (torchrun's agent store, PMIx, PMI-1), recognised from the environment
//! by a table of launchers ([`table_markdown`] shows it). One algorithm runs over all of them. A job token
//! keeps two jobs on one port or one file apart, proven and never sent; a
//! peer that sends garbage is refused, never trusted; every wait has a
//! deadline, and what times out names the ranks that never came.
#![deny(missing_docs)]

pub mod cleanup;
#[doc(hidden)]
pub mod fsafe;
mod job;
mod kv;
mod launch;
mod launchers;
mod meeting;
#[doc(hidden)]
pub mod owner;
pub mod pairs;
mod proof;
mod reach;
mod stores;
pub mod untrusted;
mod wire;
mod words;

pub use job::{Exchange, Init, Job};
pub use kv::Joined;
pub use launch::LaunchEnv;
pub use launchers::table_markdown;
pub use meeting::{Flags, Meeting};
pub use reach::{Addr, Attempt, Card, Gathered, Judge, Ruling};
/// Our TCP store's frames, for the fuzzer and the tests (not part of the API).
#[doc(hidden)]
pub use wire::{decode, decode_header, encode, Msg};
pub use words::{Abort, Failed, PeerOutcome};

use words::{check_token, fail, MAX_WORLD};

/// The README's example, compiled.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[cfg(test)]
use std::path::{Path, PathBuf};
#[cfg(test)]
use std::time::Duration;

/// Meets the other processes. `make_id` runs on rank 0 only; `log` hears
/// about refused peers and the like.
pub fn join(
    job: &Job,
    make_id: &dyn Fn() -> Result<[u8; 128], String>,
    log: &mut dyn FnMut(String),
) -> Result<Joined, Failed> {
    if job.world == 0 || job.rank >= job.world {
        return Err(fail(format!(
            "rank {} is outside a world of {}",
            job.rank, job.world
        )));
    }
    if job.world > MAX_WORLD {
        return Err(fail(format!(
            "a world of {} processes is more than the {MAX_WORLD} the rendezvous takes",
            job.world
        )));
    }
    check_token(&job.token).map_err(fail)?;
    let (open, whose): (kv::Opener, kv::Whose) = match &job.exchange {
        Exchange::Ours(Init::Tcp { host, port }) => {
            let (job, host, port) = (job.clone(), host.clone(), *port);
            let open: kv::Opener = Box::new(move |deadline, log| {
                if job.rank == 0 {
                    stores::tcp::serve_root(&job, &host, port, deadline, log)
                } else {
                    stores::tcp::tcp_peer(&job, &host, port, deadline)
                }
            });
            (open, kv::Whose::Ours)
        }
        Exchange::Ours(Init::File { path }) => {
            let (job, path) = (job.clone(), path.clone());
            let open: kv::Opener =
                Box::new(move |deadline, log| stores::file::open(&job, &path, deadline, log));
            (open, kv::Whose::Ours)
        }
        Exchange::Launcher(via) => (
            kv::launcher_opener(via.clone(), job.rank, job.world),
            kv::Whose::Launcher(via.launcher(), via.describe()),
        ),
    };
    kv::join(
        open,
        whose,
        job.rank,
        job.world,
        job.ngpus,
        kv::Brought {
            card: job.card.clone(),
            judge: job.judge,
            run_anyway: job.run_anyway,
        },
        make_id,
        job.timeout,
        log,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::{list, offsets};

    #[test]
    fn rank_lists_run_together() {
        assert_eq!(list(&[]), "");
        assert_eq!(list(&[4]), "4");
        assert_eq!(list(&[2, 1]), "1, 2");
        assert_eq!(list(&[9, 3, 4, 5, 6, 7, 1, 5]), "1, 3-7, 9");
        let every: Vec<usize> = (1..1024).collect();
        assert_eq!(list(&every), "1-1023");
        assert_eq!(list(&[0, 1, 2, 4, 5, 7, 8, 9]), "0-2, 4, 5, 7-9");
    }

    /// One message of every kind.
    fn every_kind() -> Vec<Msg> {
        vec![
            Msg::Challenge { nonce: [3; 16] },
            Msg::Hello {
                rank: 3,
                world: 4,
                ngpus: 2,
                nonce: [1; 16],
                proof: [2; 32],
            },
            Msg::Welcome { proof: [4; 32] },
            Msg::Refused {
                reason: "token mismatch".into(),
            },
            Msg::Abort {
                reason: "rank 2 died".into(),
            },
            Msg::Put {
                key: "nccl-find/hello/3".into(),
                value: 2u32.to_le_bytes().to_vec(),
            },
            Msg::Get {
                from: 3,
                key: "nccl-find/done/3".into(),
            },
            Msg::Value { value: None },
            Msg::Value {
                value: Some(vec![0, 1, 2]),
            },
            Msg::Arrive { n: 2 },
            Msg::Pass { n: 2 },
            Msg::Stop {
                reason: "rank(s) 2 never came".into(),
                missing: vec![2],
            },
        ]
    }

    #[test]
    fn messages_round_trip() {
        for m in every_kind() {
            let f = encode(&m);
            let (kind, len) = decode_header(f[..10].try_into().unwrap()).unwrap();
            assert_eq!(len, f.len() - 10);
            assert_eq!(decode(kind, &f[10..]).unwrap(), m);
            // Every truncation is an error, not a panic.
            for cut in 0..f.len() - 10 {
                assert!(
                    decode(kind, &f[10..10 + cut]).is_err(),
                    "{m:?} cut at {cut}"
                );
            }
        }
        assert_eq!(
            decode_header(b"GET / HTTP").unwrap_err(),
            "not an nccl-find rendezvous message (bad magic)"
        );
        assert!(decode(9, &[]).is_err());
        // Version 2 (the unique id in the welcome) is named, not misread.
        assert_eq!(
            decode_header(b"NCFS\x02\x02\x00\x00\x00\x00").unwrap_err(),
            "protocol version 2 (this nccl-find speaks 3)"
        );
        // A value or a list of ranks longer than allowed is refused before
        // anything is taken for it.
        let mut v = vec![1u8];
        v.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode(9, &v).unwrap_err(),
            "a value of 4294967295 bytes is too long"
        );
        let mut stop = vec![0, 0];
        stop.extend_from_slice(&100_000u32.to_le_bytes());
        assert_eq!(
            decode(12, &stop).unwrap_err(),
            "100000 missing ranks listed (at most 4096)"
        );
    }

    #[test]
    fn fuzz_seeds_are_real_frames() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/rendezvous");
        if !dir.is_dir() {
            // The crate as packaged has no fuzz seeds beside it.
            eprintln!("skipped: {} is not there (a packaged crate)", dir.display());
            return;
        }
        let every = every_kind();
        for (name, m) in [
            ("challenge", &every[0]),
            ("hello", &every[1]),
            ("welcome", &every[2]),
            ("refused", &every[3]),
            ("put", &every[5]),
            ("stop", &every[11]),
        ] {
            let seed = std::fs::read(dir.join(name)).unwrap();
            assert_eq!(encode(m), seed, "{name}");
        }
    }

    #[test]
    fn init_urls() {
        assert_eq!(
            Init::parse("tcp://127.0.0.1:29500").unwrap(),
            Init::Tcp {
                host: "127.0.0.1".into(),
                port: 29500
            }
        );
        assert_eq!(
            Init::parse("tcp://[::1]:80").unwrap(),
            Init::Tcp {
                host: "::1".into(),
                port: 80
            }
        );
        assert_eq!(
            Init::parse("file:///shared/x").unwrap(),
            Init::File {
                path: "/shared/x".into()
            }
        );
        assert!(Init::parse("tcp://host")
            .unwrap_err()
            .contains("has no port"));
        assert_eq!(
            Init::parse("tcp://10.0.0.1:0").unwrap_err(),
            "\"tcp://10.0.0.1:0\": name a port every rank can reach, as in tcp://HOST:29500 (port 0 is one the kernel picks, which no peer could know)"
        );
        let long = format!("file:///shared/{}", "r".repeat(165));
        assert_eq!(
            Init::parse(&long).unwrap_err(),
            format!("{long:?}: the file's name is 165 bytes long; name one of at most 164 bytes (the rendezvous writes files beside it whose names add up to 91 bytes, and a name may have 255)")
        );
        let fits = format!("file:///shared/{}", "r".repeat(164));
        assert!(Init::parse(&fits).is_ok());
        assert!(Init::parse("file://relative")
            .unwrap_err()
            .contains("absolute path"));
        assert!(Init::parse("env://").unwrap_err().contains("neither"));
    }

    #[test]
    fn offsets_follow_gpu_counts() {
        assert_eq!(offsets(&[2, 1, 3]), (vec![0, 2, 3], 6));
    }
}

/// What the tests of each exchange share.
#[cfg(test)]
pub(crate) mod testutil {
    use super::*;
    use std::path::Path;

    pub(crate) fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "nccl-find-rdv-{name}-{}-{}",
            std::process::id(),
            fsafe::nonce()
        ));
        std::fs::create_dir(&d).unwrap();
        d
    }

    pub(crate) fn job(rank: usize, world: usize, token: &str, init: Init, secs: u64) -> Job {
        Job {
            rank,
            world,
            ngpus: 1,
            token: token.into(),
            token_secret: true,
            exchange: Exchange::Ours(init),
            timeout: Duration::from_secs(secs),
            origin: None,
            card: Card::default(),
            judge: None,
            run_anyway: false,
        }
    }

    pub(crate) fn id() -> Result<[u8; 128], String> {
        Ok([7; 128])
    }

    /// Runs every rank of a job on its own thread (one PID for all, as in
    /// a container): each rank's outcome, rank 0 first.
    pub(crate) fn run_job(jobs: Vec<Job>) -> Vec<Result<(usize, usize), String>> {
        let hs: Vec<_> = jobs
            .into_iter()
            .map(|j| {
                std::thread::spawn(move || {
                    let r = join(&j, &id, &mut |_| {});
                    r.map(|x| {
                        assert_eq!(x.id, [7; 128]);
                        let out = (x.nranks, x.first_rank);
                        x.finish(true, 0, "fine", Duration::from_secs(10));
                        out
                    })
                    .map_err(|f| f.message)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    }

    /// Rank 0 and rank 1 of `init`, met.
    pub(crate) fn pair(init: Init) -> (Joined, Joined) {
        let peer = {
            let init = init.clone();
            std::thread::spawn(move || join(&job(1, 2, "t", init, 20), &id, &mut |_| {}).unwrap())
        };
        let j0 = join(&job(0, 2, "t", init, 20), &id, &mut |_| {}).unwrap();
        (j0, peer.join().unwrap())
    }

    /// The reason `abort` is raised with, waited for (at most 10 s).
    pub(crate) fn raised(abort: &Abort) -> String {
        let t = std::time::Instant::now();
        loop {
            if let Some(why) = abort.raised() {
                return why;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "no abort");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod join_tests {
    use super::testutil::*;
    use super::*;

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// Over our TCP store, a peer whose process goes away while the ranks
    /// run stops rank 0 at once, and rank 0's end says why the peer never
    /// reported; rank 0's going away stops the peer.
    #[test]
    fn a_peer_or_rank_0_going_away_stops_the_others() {
        let port = free_port();
        let init = Init::Tcp {
            host: "127.0.0.1".into(),
            port,
        };
        let (j0, j1) = pair(init.clone());
        drop(j1);
        assert_eq!(
            raised(&j0.abort),
            "rank 1's process went away (the connection closed)"
        );
        assert_eq!(
            j0.finish(true, 0, "", Duration::from_secs(5)),
            vec![PeerOutcome {
                rank: 1,
                done: None,
                times_us: Vec::new(),
                why: Some(format!(
                    "rank(s) 1 went away before barrier 3 of the rendezvous at tcp://127.0.0.1:{port}: check \
                     their output"
                )),
            }]
        );
        let (j0, j1) = pair(init);
        drop(j0);
        assert_eq!(
            raised(&j1.abort),
            "rank 0's process went away (the connection closed)"
        );
    }

    /// A rank that fails tells the others through the store, whichever
    /// store it is: here our file store, where rank 0 hears it while it runs
    /// and still gets the rank's outcome.
    #[test]
    fn a_rank_that_fails_stops_the_others_through_the_file_store() {
        let d = scratch("abort");
        let (j0, j1) = pair(Init::File {
            path: d.join("rdv"),
        });
        let peer = std::thread::spawn(move || j1.finish(false, 3, "boom", Duration::from_secs(20)));
        assert_eq!(raised(&j0.abort), "rank 1 stopped the job: boom");
        let got = j0.finish(true, 0, "", Duration::from_secs(20));
        assert_eq!(peer.join().unwrap(), vec![]);
        assert_eq!(
            got,
            vec![PeerOutcome {
                rank: 1,
                done: Some((false, 3, "boom".into())),
                times_us: Vec::new(),
                why: None,
            }]
        );
        assert_eq!(names(&d), Vec::<String>::new());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_jobs_are_refused_before_anything_is_made() {
        let d = scratch("bad");
        let init = Init::File {
            path: d.join("rdv"),
        };
        let e = join(
            &job(0, MAX_WORLD + 1, "t", init.clone(), 1),
            &id,
            &mut |_| {},
        );
        assert!(e.err().unwrap().message.contains("more than the 1048576"));
        let e = join(&job(0, 2, "a\nb", init, 1), &id, &mut |_| {});
        assert!(e.err().unwrap().message.contains("line break"));
        assert_eq!(names(&d), Vec::<String>::new());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
