//! Getting the ranks together: rank 0 makes NCCL's unique id and hands it
//! out, and the processes meet before and after the run. How they meet is
//! one of several exchanges ([`BACKENDS`]): our own TCP (`tcp://HOST:PORT`)
//! or file (`file:///shared/path`) rendezvous, or the launcher's own
//! channel. A job token keeps two jobs on one port or one file apart; a
//! peer that sends garbage is refused, never trusted; every wait has a
//! deadline, and what times out names the ranks that never came.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::fsafe::{self, FileId};

mod file;
pub mod kv;
pub mod launch;
pub(crate) mod owner;
mod pmi1;
mod pmix;
mod proof;
mod slurm;
mod tcp;
mod tcpstore;
mod torchrun;
mod wire;

pub use launch::{detect, Backend, LaunchEnv, Plan, BACKENDS};

pub use wire::{decode, decode_header, encode, Msg};

/// How the ranks meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Init {
    /// Rank 0 listens at `host:port`.
    Tcp {
        /// Host to listen at / connect to.
        host: String,
        /// Port.
        port: u16,
    },
    /// Everyone reads and writes files next to this path.
    File {
        /// The rendezvous file.
        path: PathBuf,
    },
}

impl Init {
    /// Parses `tcp://HOST:PORT` or `file:///path`.
    pub fn parse(s: &str) -> Result<Init, String> {
        if let Some(rest) = s.strip_prefix("tcp://") {
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| format!("{s:?} has no port: write tcp://HOST:PORT"))?;
            let port: u16 = port
                .parse()
                .map_err(|_| format!("{s:?}: {port:?} is not a port number"))?;
            // Port 0 would make rank 0 listen on a port of the kernel's
            // choosing, which no peer could know.
            if port == 0 {
                return Err(format!(
                    "{s:?}: name a port every rank can reach, as in tcp://HOST:29500 (port 0 is one the kernel picks, which no peer could know)"
                ));
            }
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() {
                return Err(format!("{s:?} has no host: write tcp://HOST:PORT"));
            }
            Ok(Init::Tcp {
                host: host.to_string(),
                port,
            })
        } else if let Some(rest) = s.strip_prefix("file://") {
            if !rest.starts_with('/') {
                return Err(format!(
                    "{s:?}: the file must be an absolute path, as in file:///shared/smoke"
                ));
            }
            // The side files beside it get longer names: say so now, not
            // as a failed write at the deadline.
            let name = Path::new(rest).file_name().map_or(0, |n| n.len());
            let most = file::NAME_MAX - file::SIDE_SUFFIX_MAX;
            if name > most {
                return Err(format!(
                    "{s:?}: the file's name is {name} bytes long; name one of at most {most} bytes (the rendezvous writes files beside it whose names add up to {} bytes, and a name may have {})",
                    file::SIDE_SUFFIX_MAX,
                    file::NAME_MAX
                ));
            }
            Ok(Init::File {
                path: PathBuf::from(rest),
            })
        } else {
            Err(format!("{s:?} is neither tcp://HOST:PORT nor file:///path"))
        }
    }
}

/// How the processes meet: our own rendezvous, or a launcher's channel.
#[derive(Debug, Clone)]
pub enum Exchange {
    /// Our TCP or file rendezvous.
    Ours(Init),
    /// A launcher's key-value store and barrier (torchrun's agent store, a
    /// PMI or PMIx server).
    Launcher(Arc<dyn kv::Connect>),
}

impl PartialEq for Exchange {
    fn eq(&self, other: &Exchange) -> bool {
        match (self, other) {
            (Exchange::Ours(a), Exchange::Ours(b)) => a == b,
            (Exchange::Launcher(a), Exchange::Launcher(b)) => {
                a.launcher() == b.launcher() && a.describe() == b.describe()
            }
            _ => false,
        }
    }
}

/// `host:port`, an IPv6 address in brackets.
pub(crate) fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl Exchange {
    /// Where the processes meet, in words (never a secret).
    pub fn describe(&self) -> String {
        match self {
            Exchange::Ours(Init::Tcp { host, port }) => format!("tcp://{}", host_port(host, *port)),
            Exchange::Ours(Init::File { path }) => format!("file://{}", path.display()),
            Exchange::Launcher(c) => c.describe(),
        }
    }
}

/// One process's place in the job.
#[derive(Debug, Clone)]
pub struct Job {
    /// This process's rank among the processes.
    pub rank: usize,
    /// How many processes.
    pub world: usize,
    /// GPUs this process drives.
    pub ngpus: usize,
    /// Keeps jobs apart.
    pub token: String,
    /// How to meet.
    pub exchange: Exchange,
    /// Deadline for each wait.
    pub timeout: Duration,
    /// Where our TCP rendezvous' address came from, when a launcher gave
    /// it, and how to choose another (`MASTER_ADDR and MASTER_PORT, from
    /// torchrun …`): a failure to reach or hold it says so. `None`: the
    /// flags gave it.
    pub origin: Option<String>,
}

/// The most processes a job may have: every per-rank table is bounded by it.
pub const MAX_WORLD: usize = 1 << 20;

/// The longest job token, in bytes.
pub const MAX_TOKEN: usize = 1024;

/// The longest `--timeout` the rendezvous takes: a year. Longer ones are a
/// mistake (and would overflow the clock).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Checks a job token: at most [`MAX_TOKEN`] bytes, no line break (the file
/// rendezvous keeps one per line).
pub fn check_token(token: &str) -> Result<(), String> {
    if token.len() > MAX_TOKEN {
        return Err(format!(
            "the token is {} bytes long; at most {MAX_TOKEN} bytes",
            token.len()
        ));
    }
    if token.contains(['\n', '\r', '\0']) {
        return Err("the token holds a line break or a NUL byte: use one line of text".into());
    }
    Ok(())
}

/// Compares two tokens in time that depends on their lengths only, never
/// on where they first differ.
fn same_token(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut diff = u64::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= u64::from(std::hint::black_box(x ^ y));
    }
    diff == 0
}

/// `now + t`, or a year from now where that overflows.
fn deadline_after(t: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(t.min(MAX_TIMEOUT))
        .or_else(|| now.checked_add(Duration::from_secs(3600)))
        .unwrap_or(now)
}

/// Why the rendezvous failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// In words, with what to do.
    pub message: String,
    /// Process ranks that never arrived.
    pub missing: Vec<usize>,
}

/// Two sentences: `first` (ended with a full stop where it has no end of
/// its own), then `next`.
fn then(first: &str, next: &str) -> String {
    if first.ends_with(['.', '?', '!']) {
        format!("{first} {next}")
    } else {
        format!("{first}. {next}")
    }
}

fn fail(message: impl Into<String>) -> Failed {
    Failed {
        message: message.into(),
        missing: Vec::new(),
    }
}

/// Shared between the run and the threads that watch the other ranks.
#[derive(Debug, Default)]
pub struct Abort {
    flag: AtomicBool,
    reason: Mutex<Option<String>>,
}

impl Abort {
    /// Raises the flag, keeping the first reason.
    pub fn raise(&self, why: String) {
        let mut r = self.reason.lock().unwrap_or_else(|e| e.into_inner());
        if r.is_none() {
            *r = Some(why);
        }
        self.flag.store(true, Ordering::SeqCst);
    }
    /// The reason, when raised.
    pub fn raised(&self) -> Option<String> {
        if self.flag.load(Ordering::SeqCst) {
            self.reason
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        } else {
            None
        }
    }
}

/// What the rendezvous gives a process.
pub struct Joined {
    /// NCCL's unique id.
    pub id: [u8; 128],
    /// NCCL ranks in all.
    pub nranks: usize,
    /// This process's first NCCL rank.
    pub first_rank: usize,
    /// Raised when another rank goes away, or stops the job.
    pub abort: Arc<Abort>,
    link: kv::KvLink,
}

/// The files a run made, to remove (each only if it is still the one made).
type Made = Arc<Mutex<Vec<(PathBuf, FileId)>>>;

fn remove_made(made: &Made) {
    for (p, id) in std::mem::take(&mut *made.lock().unwrap_or_else(|e| e.into_inner())) {
        fsafe::remove_if_ours(&p, id);
    }
}

/// Each process's first NCCL rank, and the NCCL ranks in all, from the
/// GPU counts of processes 0, 1, … in order.
fn offsets(ngpus: &[usize]) -> (Vec<usize>, usize) {
    let mut acc = 0;
    let first = ngpus
        .iter()
        .map(|n| {
            let f = acc;
            acc += n;
            f
        })
        .collect();
    (first, acc)
}

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
                    tcp::serve_root(&job, &host, port, deadline, log)
                } else {
                    tcp::tcp_peer(&job, &host, port, deadline)
                }
            });
            (open, kv::Whose::Ours)
        }
        Exchange::Ours(Init::File { path }) => {
            let (job, path) = (job.clone(), path.clone());
            let open: kv::Opener =
                Box::new(move |deadline, log| file::open(&job, &path, deadline, log));
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
        make_id,
        job.timeout,
        log,
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A peer's outcome as rank 0 heard it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerOutcome {
    /// Process rank.
    pub rank: usize,
    /// Right, wrong elements, message; or `None` when it never reported.
    pub done: Option<(bool, u64, String)>,
}

impl Joined {
    /// Every rank leaves its outcome; rank 0 collects everyone's (waiting
    /// until `timeout` from now), and the store is closed (our file store's
    /// files removed).
    pub fn finish(
        self,
        ok: bool,
        wrong: u64,
        message: &str,
        timeout: Duration,
    ) -> Vec<PeerOutcome> {
        self.link
            .finish(ok, wrong, message, deadline_after(timeout))
    }
}

/// Text from outside (a launcher's variable, a server's answer) as it may
/// be shown: escaped by [`crate::untrusted::shown`], at most `max`
/// characters, in quotes.
pub fn printable(s: &str, max: usize) -> String {
    format!("\"{}\"", crate::untrusted::shown(s, max))
}

/// Ranks in words, in order, each once: runs of three or more as
/// `first-last` (`1, 3-7, 9`), so that a list of a thousand ranks stays a
/// few words where they run together.
fn list(v: &[usize]) -> String {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        if j >= i + 2 {
            out.push(format!("{}-{}", v[i], v[j]));
        } else {
            out.extend(v[i..=j].iter().map(|r| r.to_string()));
        }
        i = j + 1;
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

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
            exchange: Exchange::Ours(init),
            timeout: Duration::from_secs(secs),
            origin: None,
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
