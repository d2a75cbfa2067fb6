//! The words every part of the rendezvous shares: the bounds of a job,
//! why a meeting failed, the abort flag, a peer's outcome, and text made
//! safe to show.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most processes a job may have: every per-rank table is bounded by it.
pub const MAX_WORLD: usize = 1 << 20;

/// The longest job token, in bytes.
pub const MAX_TOKEN: usize = 1024;

/// The longest `--timeout` the rendezvous takes: a year. Longer ones are a
/// mistake (and would overflow the clock).
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

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
pub(crate) fn same_token(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

/// `now + t`, or a year from now where that overflows.
pub(crate) fn deadline_after(t: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(t.min(MAX_TIMEOUT))
        .or_else(|| now.checked_add(Duration::from_secs(3600)))
        .unwrap_or(now)
}

/// Why the rendezvous failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Failed {
    /// In words, with what to do.
    pub message: String,
    /// Process ranks that never arrived.
    pub missing: Vec<usize>,
}

/// Two sentences: `first` (ended with a full stop where it has no end of
/// its own), then `next`.
pub(crate) fn then(first: &str, next: &str) -> String {
    if first.ends_with(['.', '?', '!']) {
        format!("{first} {next}")
    } else {
        format!("{first}. {next}")
    }
}

pub(crate) fn fail(message: impl Into<String>) -> Failed {
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

/// Each process's first NCCL rank, and the NCCL ranks in all, from the
/// GPU counts of processes 0, 1, … in order.
pub(crate) fn offsets(ngpus: &[usize]) -> (Vec<usize>, usize) {
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

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
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
#[non_exhaustive]
pub struct PeerOutcome {
    /// Process rank.
    pub rank: usize,
    /// Right, wrong elements, message; or `None` when it never reported.
    pub done: Option<(bool, u64, String)>,
    /// The times it reported, in microseconds (what each is, the caller
    /// says: [`crate::Joined::report_times`]); empty when none came.
    pub times_us: Vec<u64>,
    /// Why it never reported, where the store could tell (`rank(s) 1 went
    /// away before barrier 2 …`).
    pub why: Option<String>,
}

/// Text from outside (a launcher's variable, a server's answer) as it may
/// be shown: escaped by [`crate::untrusted::shown`], at most `max`
/// characters, in quotes.
pub fn printable(s: &str, max: usize) -> String {
    format!("\"{}\"", crate::untrusted::shown(s, max))
}

/// Ranks that never came to the meeting at `at`, in words, with how long
/// rank 0 waited, the ranks of `world` that are here, and the fix:
/// `rank 2 never came to tcp://10.0.0.1:29500 (waited 5 s); ranks 0, 1
/// are here. Start it …`. `extra` goes after who is here.
pub(crate) fn never_came(
    missing: &[usize],
    world: usize,
    waited: Duration,
    at: &str,
    extra: &str,
) -> String {
    let mut away = vec![false; world];
    for r in missing.iter().filter(|r| **r < world) {
        away[*r] = true;
    }
    let here: Vec<usize> = (0..world).filter(|r| !away[*r]).collect();
    let one = |v: &[usize], a: &'static str, b: &'static str| if v.len() == 1 { a } else { b };
    format!(
        "{} {} never came to {at} (waited {:.0} s); {} {} {} here{extra}. Start {}, with the same \
         rendezvous and token, check that {} can reach {at}, or raise --timeout",
        one(missing, "rank", "ranks"),
        list(missing),
        waited.as_secs_f64(),
        one(&here, "rank", "ranks"),
        list(&here),
        one(&here, "is", "are"),
        one(missing, "it", "them"),
        one(missing, "it", "they"),
    )
}

/// Ranks in words, in order, each once: runs of three or more as
/// `first-last` (`1, 3-7, 9`), so that a list of a thousand ranks stays a
/// few words where they run together.
pub(crate) fn list(v: &[usize]) -> String {
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
