//! `file:///shared/path`: rank 0 publishes a rendezvous file, each peer
//! leaves a hello file beside it, and rank 0 answers with the unique id.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::owner::{self, Writer};
use super::{
    fail, hex, list, offsets, remove_made, same_token, unhex, Abort, Failed, Job, Joined, Link,
    Made, PeerOutcome,
};
use crate::fsafe::{self, FileId};
use crate::untrusted::peer_text;

pub(super) struct FileLink {
    path: PathBuf,
    run: String,
    pub(super) rank: usize,
    /// Rank 0: each peer's nonce (index = rank). A peer: its own, alone.
    nonces: Vec<String>,
    made: Made,
    cleanup_key: u64,
}

/// The first line of a rendezvous file (format 3: named for a run, with
/// its writer on the fourth line).
pub(super) const FILE_MAGIC: &str = "nccl-find-smoke 3";

/// A hello or done file's size bound.
pub(super) const SMALL_FILE: u64 = 8192;

/// The wait between two looks at a file that is not there yet: short at
/// first, then longer, up to `cap`. A thousand processes that each look
/// every 20 ms keep two cores busy with nothing but opens; growing waits
/// leave the cores to the processes still starting, and add at most `cap`
/// once the file is there.
pub(super) struct Backoff {
    wait: Duration,
    cap: Duration,
}

impl Backoff {
    pub(super) fn new(cap: Duration) -> Backoff {
        Backoff {
            wait: Duration::from_millis(2),
            cap,
        }
    }

    /// Sleeps, never past `deadline`, and lengthens the next wait.
    pub(super) fn sleep(&mut self, deadline: Instant) {
        let left = deadline.saturating_duration_since(Instant::now());
        std::thread::sleep(self.wait.min(left));
        self.wait = (self.wait * 2).min(self.cap);
    }
}

/// The rendezvous file's size bound for a world of `world`.
pub(super) fn rendezvous_max(world: usize) -> u64 {
    4096 + 80 * world as u64
}

/// A file next to the rendezvous file, named for the run:
/// `<path>.<run>.<what>.<rank>`. The run's nonce makes it unguessable.
/// The most bytes [`side`] adds to the rendezvous file's name:
/// `.<run>.new-<nonce>.<rank>`, a rank of up to 20 digits.
pub(super) const SIDE_SUFFIX_MAX: usize = 1 + 32 + 1 + 4 + 32 + 1 + 20;

/// The longest file name Linux filesystems take (`NAME_MAX`).
pub(super) const NAME_MAX: usize = 255;

pub(super) fn side(path: &Path, run: &str, what: &str, rank: usize) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{run}.{what}.{rank}"));
    PathBuf::from(s)
}

pub(super) fn is_nonce(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What is at the rendezvous path before rank 0 publishes.
pub(super) enum Previous {
    /// Not a rendezvous file of this user's.
    Foreign,
    /// One of this user's, whose rank 0 is provably gone: its run's nonce,
    /// its file, and its writer in words.
    Dead(Option<String>, FileId, String),
    /// One whose rank 0 runs, or may: the error to give.
    Busy(String),
}

/// Whether `path` holds a rendezvous file of this user's (a regular file,
/// ours, that starts like one), and whether its writer is provably gone.
pub(super) fn previous(path: &Path, world: usize) -> Previous {
    let Ok(Some((bytes, id))) = fsafe::read_small(path, rendezvous_max(world)) else {
        return Previous::Foreign;
    };
    let mine = std::fs::symlink_metadata(path)
        .ok()
        .zip(std::fs::metadata("/proc/self").ok())
        .is_some_and(|(f, me)| {
            use std::os::unix::fs::MetadataExt;
            f.uid() == me.uid()
        });
    if !mine || !bytes.starts_with(b"nccl-find-smoke ") {
        return Previous::Foreign;
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let writer = match lines[..] {
        [FILE_MAGIC, _, _, w, ..] => owner::writer(w),
        _ => Writer::Unknown("it was written by another version of nccl-find".into()),
    };
    let run = lines
        .get(2)
        .filter(|r| lines[0] == FILE_MAGIC && is_nonce(r))
        .map(|r| r.to_string());
    match writer {
        Writer::Gone(who) => Previous::Dead(run, id, who),
        Writer::Alive(who) => Previous::Busy(format!(
            "{} is in use by a live job: its rank 0 is {who}. Choose another path (or stop that job)",
            path.display()
        )),
        Writer::Unknown(why) => Previous::Busy(format!(
            "{} is a rendezvous file whose rank 0 may still run ({why}): it is left alone. If that job is \
             over, remove the file; or choose another path",
            path.display()
        )),
    }
}

/// Removes what a dead run left beside `path`: its side files
/// `<path>.<run>.<what>.<rank>` that are this user's regular files. `run`
/// is that run's nonce (checked: hex digits only).
pub(super) fn remove_dead_run(path: &Path, run: &str) -> usize {
    use std::os::unix::fs::MetadataExt;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return 0;
    };
    let Some(me) = std::fs::metadata("/proc/self").ok().map(|m| m.uid()) else {
        return 0;
    };
    if !is_nonce(run) {
        return 0;
    }
    let prefix = format!("{}.{run}.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    // A directory of any size is looked at once, up to a bound.
    for e in entries.take(1 << 16).flatten() {
        let n = e.file_name();
        let Some(rest) = n.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Some((what, rank)) = rest.rsplit_once('.') else {
            continue;
        };
        let ours =
            matches!(what, "hello" | "done") || what.strip_prefix("new-").is_some_and(is_nonce);
        if !ours || rank.is_empty() || !rank.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let p = dir.join(&n);
        if let Ok(m) = std::fs::symlink_metadata(&p) {
            if m.file_type().is_file() && m.uid() == me && fsafe::remove_if_ours(&p, FileId::of(&m))
            {
                removed += 1;
            }
        }
    }
    removed
}

/// Whether rank 0 may put its file at `path` (see [`publish`]): `Err(Ok)`
/// a refusal in words, `Err(Err)` an error of the file system.
fn may_publish(
    path: &Path,
    prev: Option<FileId>,
    world: usize,
    log: &mut dyn FnMut(String),
) -> Result<(), Result<String, std::io::Error>> {
    match (std::fs::symlink_metadata(path), prev) {
        (Err(e), None) if e.kind() == std::io::ErrorKind::NotFound => {}
        (Ok(m), Some(id)) if m.file_type().is_file() && FileId::of(&m) == id => {}
        (Ok(m), None) => match previous(path, world) {
            Previous::Dead(old_run, old_id, who) => {
                let gone = old_run.map_or(0, |r| remove_dead_run(path, &r));
                if !fsafe::remove_if_ours(path, old_id) {
                    return Err(Ok(format!(
                        "{} was replaced by someone else while it was being taken over",
                        path.display()
                    )));
                }
                log(format!(
                    "replaced {}: a rendezvous file an earlier run left (its rank 0, {who}, is gone); \
                     {gone} file(s) of that run beside it removed",
                    path.display()
                ));
            }
            Previous::Busy(e) => return Err(Ok(e)),
            Previous::Foreign => {
                return Err(Ok(format!(
                    "{} already exists and is not a rendezvous file of yours ({}): it is left alone. Remove \
                     it, or choose another path",
                    path.display(),
                    fsafe::kind(&m)
                )))
            }
        },
        (_, Some(_)) => {
            return Err(Ok(format!(
                "{} was removed or replaced by someone else during the rendezvous",
                path.display()
            )))
        }
        (Err(e), None) => return Err(Err(e)),
    }
    Ok(())
}

/// Rank 0 puts `text` at `path`: a new file with an unguessable name,
/// renamed over `path` (a rename replaces a link, never writes through it),
/// or the first time linked there (which fails where anything is, so two
/// rank 0s starting at once cannot both take the path). `prev`: the file
/// this run put there before, which must still be there; `None`: only
/// nothing, or the file of a run whose rank 0 is provably gone, may be
/// there (its side files are removed too). The new file goes into `made`
/// before it appears at `path`, so an interrupt never misses it.
pub(super) fn publish(
    path: &Path,
    run: &str,
    text: &str,
    prev: Option<FileId>,
    world: usize,
    made: &Made,
    log: &mut dyn FnMut(String),
) -> Result<FileId, String> {
    let cannot = |e: &dyn std::fmt::Display| {
        format!(
            "cannot write {}: {e}. The rendezvous file must be in a directory every rank can write",
            path.display()
        )
    };
    may_publish(path, prev, world, log).map_err(|e| e.unwrap_or_else(|e| cannot(&e)))?;
    let tmp = side(path, run, &format!("new-{}", fsafe::nonce()), 0);
    let id = fsafe::create_new(&tmp, text.as_bytes()).map_err(|e| cannot(&e))?;
    {
        let mut m = made.lock().unwrap_or_else(|e| e.into_inner());
        m.push((tmp.clone(), id));
        m.push((path.to_path_buf(), id));
    }
    let placed = match prev {
        Some(_) => std::fs::rename(&tmp, path),
        None => match std::fs::hard_link(&tmp, path) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                fsafe::remove_if_ours(&tmp, id);
                return Err(format!(
                    "{} was just made by another process (another job's rank 0?): it is left alone. Choose \
                     another path",
                    path.display()
                ));
            }
            // A file system without hard links: the check above stands.
            Err(_) => std::fs::rename(&tmp, path),
            Ok(()) => {
                fsafe::remove_if_ours(&tmp, id);
                Ok(())
            }
        },
    };
    if let Err(e) = placed {
        fsafe::remove_if_ours(&tmp, id);
        return Err(cannot(&e));
    }
    Ok(id)
}

pub(super) fn file_root(
    job: &Job,
    path: &Path,
    deadline: Instant,
    make_id: &dyn Fn() -> Result<[u8; 128], String>,
    log: &mut dyn FnMut(String),
) -> Result<Joined, Failed> {
    let run = fsafe::nonce();
    let made: Made = Arc::default();
    // Interrupted, rank 0 removes what this run made (its peers' files
    // included), each only if it is still the file that was made.
    let key = {
        let made = made.clone();
        crate::on_interrupt(move || remove_made(&made))
    };
    let give_up = |f: Failed| {
        remove_made(&made);
        crate::forget_cleanup(key);
        f
    };
    let head = format!("{FILE_MAGIC}\n{}\n{run}\n{}\n", job.token, owner::line());
    let prev = publish(
        path,
        &run,
        &format!("{head}waiting\n"),
        None,
        job.world,
        &made,
        log,
    )
    .map_err(|e| give_up(fail(e)))?;
    let mut arrived: Vec<Option<(usize, String)>> = vec![None; job.world];
    let mut warned = std::collections::HashSet::new();
    let mut left = job.world - 1;
    let mut pause = Backoff::new(Duration::from_millis(50));
    while left > 0 {
        left -= take_hellos(job, path, &run, &mut arrived, &made, &mut warned, log);
        if left == 0 {
            break;
        }
        if Instant::now() >= deadline {
            return Err(give_up(file_timed_out(job, path, &arrived)));
        }
        pause.sleep(deadline);
    }
    let id = make_id().map_err(|e| give_up(fail(e)))?;
    let (answer, nranks) = answer(&head, job.ngpus, &arrived, &id);
    publish(path, &run, &answer, Some(prev), job.world, &made, log)
        .map_err(|e| give_up(fail(e)))?;
    made.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|m| m.1 != prev);
    let nonces = arrived
        .into_iter()
        .map(|a| a.map(|x| x.1).unwrap_or_default())
        .collect();
    Ok(Joined {
        id,
        nranks,
        first_rank: 0,
        abort: Arc::new(Abort::default()),
        link: Link::File(FileLink {
            path: path.to_path_buf(),
            run,
            rank: 0,
            nonces,
            made,
            cleanup_key: key,
        }),
    })
}

/// One look at the hello files of the ranks not yet arrived: the good
/// ones are taken (GPU count and nonce into `arrived`, the file into
/// `made`), the bad ones named once each. How many arrived.
pub(super) fn take_hellos(
    job: &Job,
    path: &Path,
    run: &str,
    arrived: &mut [Option<(usize, String)>],
    made: &Made,
    warned: &mut std::collections::HashSet<PathBuf>,
    log: &mut dyn FnMut(String),
) -> usize {
    let mut came = 0;
    for (r, slot) in arrived.iter_mut().enumerate().skip(1) {
        if slot.is_some() {
            continue;
        }
        let f = side(path, run, "hello", r);
        let (bytes, id) = match fsafe::read_small(&f, SMALL_FILE) {
            Ok(Some(x)) => x,
            Ok(None) => continue,
            Err(e) => {
                if warned.insert(f.clone()) {
                    log(format!("ignored a hello: {e}"));
                }
                continue;
            }
        };
        let why = match hello_file(job, &bytes) {
            Hello::Good(n, nonce) => {
                *slot = Some((n, nonce));
                came += 1;
                made.lock().unwrap_or_else(|e| e.into_inner()).push((f, id));
                continue;
            }
            Hello::Partial => continue,
            Hello::Bad(why) => why,
        };
        if warned.insert(f.clone()) {
            log(format!("ignored {}: {why}", f.display()));
        }
    }
    came
}

/// What a hello file says.
pub(super) enum Hello {
    /// This job's: the peer's GPU count and nonce.
    Good(usize, String),
    /// Still being written.
    Partial,
    /// Not a hello of this job, and why.
    Bad(&'static str),
}

/// Reads a hello file: `token`, GPU count, nonce, `end`, one a line.
pub(super) fn hello_file(job: &Job, bytes: &[u8]) -> Hello {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    match lines[..] {
        [token, ngpus, nonce, "end"] => match ngpus.parse::<usize>() {
            _ if !same_token(token, &job.token) => Hello::Bad("it holds another job's token"),
            _ if !is_nonce(nonce) => Hello::Bad("it is not a hello file"),
            Ok(n) if (1..=1024).contains(&n) => Hello::Good(n, nonce.to_string()),
            _ => Hello::Bad("its GPU count is not a number from 1 to 1024"),
        },
        _ if !text.contains("\nend\n") && bytes.len() < 4096 => Hello::Partial,
        _ => Hello::Bad("it is not a hello file"),
    }
}

/// The failure at the deadline of a file rendezvous: who never came.
pub(super) fn file_timed_out(
    job: &Job,
    path: &Path,
    arrived: &[Option<(usize, String)>],
) -> Failed {
    let missing: Vec<usize> = (1..job.world).filter(|r| arrived[*r].is_none()).collect();
    Failed {
        message: format!(
            "the rendezvous timed out after {:.0} s: rank(s) {} never arrived at {} ({} of {} \
             processes did). Start them with the same file and token, or raise --timeout",
            job.timeout.as_secs_f64(),
            list(&missing),
            path.display(),
            job.world - missing.len(),
            job.world
        ),
        missing,
    }
}

/// Rank 0's answer in the rendezvous file, after `head`: the NCCL ranks
/// in all, the unique id, and each peer's first rank and nonce. Also the
/// NCCL ranks in all.
pub(super) fn answer(
    head: &str,
    ngpus: usize,
    arrived: &[Option<(usize, String)>],
    id: &[u8; 128],
) -> (String, usize) {
    let mut counts = vec![ngpus];
    counts.extend(
        arrived
            .iter()
            .skip(1)
            .map(|a| a.as_ref().map_or(0, |x| x.0)),
    );
    let (first, nranks) = offsets(&counts);
    let mut text = format!("{head}{nranks}\n{}\n", hex(id));
    for (r, a) in arrived.iter().enumerate().skip(1) {
        if let Some((_, n)) = a {
            text.push_str(&format!("{r} {} {n}\n", first[r]));
        }
    }
    (text, nranks)
}

pub(super) fn file_peer(job: &Job, path: &Path, deadline: Instant) -> Result<Joined, Failed> {
    // Can this rank write there at all? Say so now, not at the deadline.
    let probe = side(path, &fsafe::nonce(), "probe", job.rank);
    match fsafe::create_new(&probe, b"") {
        Ok(id) => {
            fsafe::remove_if_ours(&probe, id);
        }
        Err(e) => {
            return Err(fail(format!(
            "cannot write {}: {e}. The rendezvous file must be in a directory every rank can write",
            probe.display()
        )))
        }
    }
    let me = fsafe::nonce();
    let made: Made = Arc::default();
    let key = {
        let made = made.clone();
        crate::on_interrupt(move || remove_made(&made))
    };
    let result = file_peer_wait(job, path, deadline, &me, &made);
    // Joined, the hello is rank 0's to remove; failed, this rank's.
    if result.is_err() {
        remove_made(&made);
    }
    crate::forget_cleanup(key);
    result
}

pub(super) fn file_peer_wait(
    job: &Job,
    path: &Path,
    deadline: Instant,
    me: &str,
    made: &Made,
) -> Result<Joined, Failed> {
    let mut other = None;
    let mut taken: Option<PathBuf> = None;
    // The run this rank said hello to, and its hello file.
    let mut greeted: Option<(String, PathBuf, FileId)> = None;
    let mut pause = Backoff::new(Duration::from_millis(100));
    loop {
        let got = fsafe::read_small(path, rendezvous_max(job.world))
            .map_err(|e| fail(format!("rank {}: {e}", job.rank)))?;
        if let Some((bytes, _)) = got {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            if lines.len() < 5 || lines[0] != FILE_MAGIC {
                other = Some("it is not a rendezvous file of this nccl-find version");
            } else if !same_token(lines[1], &job.token) {
                other = Some("it holds another job's token");
            } else if !is_nonce(lines[2]) {
                other = Some("it is not a rendezvous file of this nccl-find version");
            } else if lines[4] == "waiting" {
                other = None;
                let run = lines[2];
                if greeted.as_ref().map(|g| g.0.as_str()) != Some(run) {
                    greet(job, path, run, me, made, &mut greeted, &mut taken)?;
                }
            } else if greeted.as_ref().map(|g| g.0.as_str()) == Some(lines[2]) {
                if let Some((id, nranks, first_rank)) = my_place(job, &lines, me) {
                    return Ok(Joined {
                        id,
                        nranks,
                        first_rank,
                        abort: Arc::new(Abort::default()),
                        link: Link::File(FileLink {
                            path: path.to_path_buf(),
                            run: lines[2].to_string(),
                            rank: job.rank,
                            nonces: vec![me.to_string()],
                            made: made.clone(),
                            cleanup_key: 0,
                        }),
                    });
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(peer_timed_out(job, path, taken, other));
        }
        pause.sleep(deadline);
    }
}

/// A new run of rank 0 (the one before was killed, or this is the first):
/// removes the hello this rank left the run before, if any, and says hello
/// to this one. A hello already there is `taken`, not an error.
pub(super) fn greet(
    job: &Job,
    path: &Path,
    run: &str,
    me: &str,
    made: &Made,
    greeted: &mut Option<(String, PathBuf, FileId)>,
    taken: &mut Option<PathBuf>,
) -> Result<(), Failed> {
    if let Some((_, f, id)) = greeted.take() {
        fsafe::remove_if_ours(&f, id);
        made.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|m| m.1 != id);
    }
    let f = side(path, run, "hello", job.rank);
    let hello = format!("{}\n{}\n{me}\nend\n", job.token, job.ngpus);
    match fsafe::create_new(&f, hello.as_bytes()) {
        Ok(id) => {
            made.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((f.clone(), id));
            *greeted = Some((run.to_string(), f, id));
        }
        // Another process took this rank in this run, or an earlier run of
        // rank 0 left it: wait, in case rank 0 starts over, and say so at
        // the deadline.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            *taken = Some(f);
        }
        Err(e) => {
            return Err(fail(format!(
            "cannot write {}: {e}. The rendezvous file must be in a directory every rank can write",
            f.display()
        )))
        }
    }
    Ok(())
}

/// This rank's place in rank 0's answer (`lines` of the rendezvous file):
/// the unique id, the NCCL ranks in all and this rank's first one; `None`
/// while the answer does not name this rank with this rank's nonce.
pub(super) fn my_place(job: &Job, lines: &[&str], me: &str) -> Option<([u8; 128], usize, usize)> {
    let (Some(Ok(nranks)), Some(id), Some(line)) = (
        lines.get(4).map(|l| l.parse::<usize>()),
        lines.get(5).and_then(|l| unhex(l)),
        lines.get(6..),
    ) else {
        return None;
    };
    let mine = line.iter().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.len() == 3 && f[0] == job.rank.to_string() && f[2] == me)
            .then(|| f[1].parse::<usize>().ok())?
    });
    match (mine, id.len()) {
        (Some(first_rank), 128) => {
            let mut out = [0u8; 128];
            out.copy_from_slice(&id);
            Some((out, nranks, first_rank))
        }
        _ => None,
    }
}

/// The failure at a file peer's deadline: its hello was taken, or rank 0
/// never answered (and what was at the path instead).
pub(super) fn peer_timed_out(
    job: &Job,
    path: &Path,
    taken: Option<PathBuf>,
    other: Option<&str>,
) -> Failed {
    if let Some(f) = taken {
        return fail(format!(
            "rank {r} waited {:.0} s for rank 0's unique id in {}, but could not say hello: {} \
             exists. Two processes were given rank {r}, or a rank 0 that was killed left it",
            job.timeout.as_secs_f64(),
            path.display(),
            f.display(),
            r = job.rank
        ));
    }
    fail(format!(
        "rank {} waited {:.0} s for rank 0's unique id in {}{}. Is rank 0 running with the same file?",
        job.rank,
        job.timeout.as_secs_f64(),
        path.display(),
        other.map(|t| format!(" ({t})")).unwrap_or_default()
    ))
}

impl FileLink {
    /// A peer leaves its outcome in a done file, on one line.
    pub(super) fn report(&self, ok: bool, wrong: u64, message: &str) {
        let one_line: String = message
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(2000)
            .collect();
        let text = format!(
            "{}\n{} {wrong} {one_line}\nend\n",
            self.nonces[0],
            if ok { "ok" } else { "fail" }
        );
        // Rank 0 removes it (and the hello) once read.
        let _ = fsafe::create_new(
            &side(&self.path, &self.run, "done", self.rank),
            text.as_bytes(),
        );
    }

    /// Rank 0 reads every peer's done file (waiting until `deadline`), then
    /// removes this run's files.
    pub(super) fn outcomes(self, deadline: Instant) -> Vec<PeerOutcome> {
        let mut out = Vec::new();
        for (rank, nonce) in self.nonces.iter().enumerate().skip(1) {
            let done = self.wait_done(rank, nonce, deadline);
            out.push(PeerOutcome { rank, done });
        }
        remove_made(&self.made);
        crate::forget_cleanup(self.cleanup_key);
        out
    }

    /// Rank `rank`'s outcome from its done file, once it is there and holds
    /// the peer's nonce; `None` at the deadline, or for a file of another.
    fn wait_done(
        &self,
        rank: usize,
        nonce: &str,
        deadline: Instant,
    ) -> Option<(bool, u64, String)> {
        let p = side(&self.path, &self.run, "done", rank);
        let mut pause = Backoff::new(Duration::from_millis(20));
        loop {
            match fsafe::read_small(&p, SMALL_FILE) {
                Ok(Some((bytes, id))) => {
                    let t = String::from_utf8_lossy(&bytes);
                    let lines: Vec<&str> = t.lines().collect();
                    if let [n, result, "end"] = lines[..] {
                        if n != nonce {
                            return None;
                        }
                        self.made
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((p.clone(), id));
                        let mut it = result.splitn(3, ' ');
                        let (o, w, m) = (it.next(), it.next(), it.next());
                        return Some((
                            o == Some("ok"),
                            w.and_then(|w| w.parse().ok()).unwrap_or(0),
                            peer_text(m.unwrap_or("").trim()),
                        ));
                    }
                }
                Ok(None) => {}
                Err(_) => return None,
            }
            if Instant::now() >= deadline {
                return None;
            }
            pause.sleep(deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::*;
    use super::*;

    #[test]
    fn ranks_sharing_a_pid_meet_through_a_file_and_leave_nothing() {
        let d = scratch("pid");
        let init = Init::File {
            path: d.join("rdv"),
        };
        let got = run_job(
            (0..3)
                .map(|r| job(r, 3, "t", init.clone(), 20))
                .rev()
                .collect(),
        );
        assert_eq!(got, vec![Ok((3, 2)), Ok((3, 1)), Ok((3, 0))]);
        assert_eq!(names(&d), Vec::<String>::new());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A peer's done file is read by rank 0 escaped: a terminal escape, a
    /// line break and a forged verdict stay one visible line.
    #[test]
    fn a_peers_done_message_is_escaped() {
        let d = scratch("done-words");
        let init = Init::File {
            path: d.join("rdv"),
        };
        // The peer writes its done file by hand, as a hostile one would
        // (ours writes one line, its control characters blanked).
        let peer = {
            let init = init.clone();
            std::thread::spawn(move || {
                let j = join(&job(1, 2, "t", init, 20), &id, &mut |_| {}).unwrap();
                let Link::File(f) = &j.link else {
                    panic!("not a file link")
                };
                let text = format!(
                    "{}\nfail 7 \x1b[2Jfine\u{85}rank 9: OK\u{202e}\nend\n",
                    f.nonces[0]
                );
                fsafe::create_new(&side(&f.path, &f.run, "done", 1), text.as_bytes()).unwrap();
            })
        };
        let j = join(&job(0, 2, "t", init, 20), &id, &mut |_| {}).unwrap();
        let got = j.finish(true, 0, "", Duration::from_secs(20));
        peer.join().unwrap();
        assert_eq!(
            got,
            vec![PeerOutcome {
                rank: 1,
                done: Some((false, 7, "\\u{1b}[2Jfine\\u{85}rank 9: OK\\u{202e}".into()))
            }]
        );
        assert_eq!(names(&d), Vec::<String>::new());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn planted_links_at_the_old_predictable_names_are_never_followed_or_removed() {
        let d = scratch("links");
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let pid = std::process::id();
        let planted = [
            format!("rdv.tmp{pid}"),
            format!("rdv.hello.1.tmp{pid}"),
            "rdv.hello.1".into(),
            "rdv.done.1".into(),
        ];
        for n in &planted {
            std::os::unix::fs::symlink(&victim, d.join(n)).unwrap();
        }
        let init = Init::File {
            path: d.join("rdv"),
        };
        let got = run_job(vec![
            job(0, 2, "t", init.clone(), 20),
            job(1, 2, "t", init, 20),
        ]);
        assert_eq!(got, vec![Ok((2, 0)), Ok((2, 1))]);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let mut want: Vec<String> = planted.to_vec();
        want.push("victim".into());
        want.sort();
        assert_eq!(names(&d), want);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_foreign_file_or_link_at_the_rendezvous_path_is_left_alone() {
        let d = scratch("foreign");
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for (path, what) in [(&victim, "a regular file"), (&link, "a symbolic link")] {
            let j = job(0, 2, "t", Init::File { path: path.clone() }, 20);
            let t = Instant::now();
            let e = join(&j, &id, &mut |_| {}).err().unwrap().message;
            assert!(t.elapsed() < Duration::from_secs(2));
            assert!(
                e.contains("already exists and is not a rendezvous file of yours")
                    && e.contains(what),
                "{e}"
            );
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(names(&d), ["link", "victim"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_fifo_or_a_link_to_dev_zero_at_the_rendezvous_path_ends_at_once() {
        let d = scratch("fifo");
        let fifo = d.join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let zero = d.join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let big = d.join("big");
        std::fs::write(&big, vec![b'n'; 1 << 20]).unwrap();
        for (path, says) in [
            (&fifo, "is a FIFO (named pipe), not a regular file"),
            (&zero, "is a symbolic link, not a regular file"),
            (&big, "is larger than the"),
        ] {
            let t = Instant::now();
            let j = job(1, 2, "t", Init::File { path: path.clone() }, 30);
            let e = join(&j, &id, &mut |_| {}).err().unwrap().message;
            assert!(t.elapsed() < Duration::from_secs(2), "{e}");
            assert!(e.contains(says), "{e}");
            assert!(e.contains(&path.display().to_string()), "{e}");
            // Rank 0 does not take it over either.
            let j = job(0, 2, "t", Init::File { path: path.clone() }, 30);
            let e = join(&j, &id, &mut |_| {}).err().unwrap().message;
            assert!(e.contains("is left alone"), "{e}");
        }
        assert!(std::fs::symlink_metadata(&fifo).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn files_a_killed_run_left_do_not_shut_out_a_new_one() {
        let d = scratch("stale");
        let rdv = d.join("rdv");
        let old = "0123456789abcdef0123456789abcdef";
        // Its rank 0 was a process that has exited.
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let dead = c.id();
        c.wait().unwrap();
        let line = owner::line_for(dead, Some(1));
        std::fs::write(&rdv, format!("{FILE_MAGIC}\nt\n{old}\n{line}\nwaiting\n")).unwrap();
        let stale_hello = side(&rdv, old, "hello", 1);
        std::fs::write(&stale_hello, format!("t\n1\n{old}\nend\n")).unwrap();
        let stale_new = side(&rdv, old, &format!("new-{old}"), 0);
        std::fs::write(&stale_new, "x").unwrap();
        // Not that run's: another run's, an odd name, a link.
        let other = side(&rdv, "fedcba9876543210fedcba9876543210", "hello", 1);
        std::fs::write(&other, "x").unwrap();
        std::fs::write(d.join(format!("rdv.{old}.hello.1.x")), "x").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", side(&rdv, old, "done", 1)).unwrap();
        std::fs::write(d.join("rdv.hello.1"), "t\n1\n42\n").unwrap();
        let init = Init::File { path: rdv.clone() };
        // The peer first: it finds the dead run's file and waits.
        let peer = {
            let j = job(1, 2, "t", init.clone(), 20);
            std::thread::spawn(move || run_job(vec![j]))
        };
        std::thread::sleep(Duration::from_millis(300));
        let mut notes = Vec::new();
        let j0 = join(&job(0, 2, "t", init, 20), &id, &mut |m| notes.push(m)).unwrap();
        assert_eq!(
            j0.finish(true, 0, "", Duration::from_secs(10))[0]
                .done
                .as_ref()
                .map(|d| d.0),
            Some(true)
        );
        assert_eq!(peer.join().unwrap(), vec![Ok((2, 1))]);
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(
            notes,
            [format!(
                "replaced {}: a rendezvous file an earlier run left (its rank 0, pid {dead} on {}, is \
                 gone); 2 file(s) of that run beside it removed",
                rdv.display(),
                host.trim()
            )]
        );
        // The dead run's own files went; nothing else did.
        let mut want = vec![
            format!("rdv.{old}.done.1"),
            format!("rdv.{old}.hello.1.x"),
            "rdv.fedcba9876543210fedcba9876543210.hello.1".to_string(),
            "rdv.hello.1".to_string(),
        ];
        want.sort();
        assert_eq!(names(&d), want);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_second_job_on_a_live_path_fails_at_once_naming_the_first() {
        let d = scratch("live");
        let init = Init::File {
            path: d.join("rdv"),
        };
        let first = {
            let j = job(0, 2, "a", init.clone(), 30);
            std::thread::spawn(move || run_job(vec![j]))
        };
        let t = Instant::now();
        while !d.join("rdv").exists() {
            assert!(t.elapsed() < Duration::from_secs(20));
            std::thread::sleep(Duration::from_millis(10));
        }
        let t = Instant::now();
        let e = join(&job(0, 2, "b", init.clone(), 30), &id, &mut |_| {})
            .err()
            .unwrap()
            .message;
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(
            e,
            format!(
                "{} is in use by a live job: its rank 0 is pid {} on {}. Choose another path (or stop \
                 that job)",
                d.join("rdv").display(),
                std::process::id(),
                host.trim()
            )
        );
        // The first job goes on as if nothing happened.
        assert_eq!(run_job(vec![job(1, 2, "a", init, 30)]), vec![Ok((2, 1))]);
        assert_eq!(first.join().unwrap(), vec![Ok((2, 0))]);
        assert_eq!(names(&d), Vec::<String>::new());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_rank_that_never_comes_ends_at_the_deadline_and_only_our_files_go() {
        let d = scratch("late");
        let rdv = d.join("rdv");
        std::fs::write(d.join("theirs"), "x").unwrap();
        let t = Instant::now();
        let e = join(
            &job(0, 2, "t", Init::File { path: rdv }, 1),
            &id,
            &mut |_| {},
        )
        .err()
        .unwrap();
        assert!(t.elapsed() < Duration::from_secs(3));
        assert_eq!(e.missing, [1]);
        assert!(
            e.message.contains("rank(s) 1 never arrived at "),
            "{}",
            e.message
        );
        assert_eq!(names(&d), ["theirs"]);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
