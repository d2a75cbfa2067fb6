//! `file:///shared/path`: a store in files. Rank 0 publishes a rendezvous
//! file that names the run (an unguessable nonce), the job token and its
//! own process; each rank that finds it, with this job's token and a rank 0
//! that runs, is in. A put is a file beside it, `<path>.<run>.k-<key>.<rank>`,
//! made once (`O_EXCL|O_NOFOLLOW`); a barrier is a file per rank that
//! reaches it, and rank 0's file that opens it (or says who never came).
//! Rank 0 removes every file of the run at the end, or when interrupted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fsafe::{self, FileId};
use crate::fsafe::{remove_made, Made};
use crate::job::Job;
use crate::kv::Kv;
use crate::owner::{self, Writer};
use crate::untrusted::peer_text;
use crate::words::{fail, hex, list, never_came, same_token, unhex, Failed};

/// The first line of a rendezvous file (format 4: a store; named for a
/// run, with its writer on the fourth line).
pub(crate) const FILE_MAGIC: &str = "nccl-find-smoke 4";

/// A value file's size bound: the value in hex, the token, two lines.
pub(crate) const SMALL_FILE: u64 = 2 * crate::wire::MAX_VALUE as u64 + 2048;

/// The wait between two looks at a file that is not there yet: short at
/// first, then longer, up to `cap`. A thousand processes that each look
/// every 20 ms keep two cores busy with nothing but opens; growing waits
/// leave the cores to the processes still starting, and add at most `cap`
/// once the file is there.
pub(crate) struct Backoff {
    wait: Duration,
    cap: Duration,
}

impl Backoff {
    pub(crate) fn new(cap: Duration) -> Backoff {
        Backoff {
            wait: Duration::from_millis(2),
            cap,
        }
    }

    /// Sleeps, never past `deadline`, and lengthens the next wait.
    pub(crate) fn sleep(&mut self, deadline: Instant) {
        let left = deadline.saturating_duration_since(Instant::now());
        std::thread::sleep(self.wait.min(left));
        self.wait = (self.wait * 2).min(self.cap);
    }
}

/// The rendezvous file's size bound: the magic, the token, the run, the
/// writer and `open`.
pub(crate) const RENDEZVOUS_MAX: u64 = 4096;

/// A file next to the rendezvous file, named for the run:
/// `<path>.<run>.<what>.<rank>`; its suffix is at most
/// [`crate::job::SIDE_SUFFIX_MAX`] bytes long. The run's nonce makes its
/// name unguessable.
pub(crate) fn side(path: &Path, run: &str, what: &str, rank: usize) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{run}.{what}.{rank}"));
    PathBuf::from(s)
}

pub(crate) fn is_nonce(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What is at the rendezvous path before rank 0 publishes.
pub(crate) enum Previous {
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
pub(crate) fn previous(path: &Path) -> Previous {
    // Another user's file is an error here: not ours.
    let Ok(Some((bytes, id))) = fsafe::read_mine(path, RENDEZVOUS_MAX) else {
        return Previous::Foreign;
    };
    if !bytes.starts_with(b"nccl-find-smoke ") {
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
pub(crate) fn remove_dead_run(path: &Path, run: &str) -> usize {
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
        let ours = ours_by_name(what);
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

/// Whether rank 0 may put its file at `path`: nothing is there, or the
/// file of a run whose rank 0 is provably gone (removed here, with that
/// run's files beside it). `Err(Ok)` a refusal in words, `Err(Err)` an
/// error of the file system.
fn may_publish(
    path: &Path,
    log: &mut dyn FnMut(String),
) -> Result<(), Result<String, std::io::Error>> {
    let m = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Err(e)),
        Ok(m) => m,
    };
    match previous(path) {
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
            Ok(())
        }
        Previous::Busy(e) => Err(Ok(e)),
        Previous::Foreign => Err(Ok(format!(
            "{} already exists and is not a rendezvous file of yours ({}): it is left alone. Remove \
             it, or choose another path",
            path.display(),
            fsafe::kind(&m)
        ))),
    }
}

/// Rank 0 puts `text` at `path`: a new file with an unguessable name,
/// linked there (which fails where anything is, so two rank 0s starting at
/// once cannot both take the path; a file system without hard links
/// renames it there, after the check). The new file goes into `made`
/// before it appears at `path`, so an interrupt never misses it.
pub(crate) fn publish(
    path: &Path,
    run: &str,
    text: &str,
    made: &Made,
    log: &mut dyn FnMut(String),
) -> Result<FileId, String> {
    let cannot = |e: &dyn std::fmt::Display| cannot_write(path, e);
    may_publish(path, log).map_err(|e| e.unwrap_or_else(|e| cannot(&e)))?;
    let tmp = side(path, run, &format!("new-{}", fsafe::nonce()), 0);
    let id = fsafe::create_new(&tmp, text.as_bytes()).map_err(|e| cannot(&e))?;
    {
        let mut m = made.lock().unwrap_or_else(|e| e.into_inner());
        m.push((tmp.clone(), id));
        m.push((path.to_path_buf(), id));
    }
    let placed = match std::fs::hard_link(&tmp, path) {
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
    };
    if let Err(e) = placed {
        fsafe::remove_if_ours(&tmp, id);
        return Err(cannot(&e));
    }
    Ok(id)
}

/// Whether `what` (of `<path>.<run>.<what>.<rank>`) names a file of ours:
/// a value, a barrier's arrival, opening or failure, an abort, or one
/// being written.
fn ours_by_name(what: &str) -> bool {
    let word = |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    what == "abort"
        || what.strip_prefix("k-").is_some_and(word)
        || ["f", "open", "stop"]
            .iter()
            .any(|p| what.strip_prefix(p).is_some_and(digits))
        || what.strip_prefix("new-").is_some_and(is_nonce)
}

/// Opens the file store at `path`: rank 0 publishes the run, every other
/// rank waits for it.
pub(crate) fn open(
    job: &Job,
    path: &Path,
    deadline: Instant,
    log: &mut dyn FnMut(String),
) -> Result<Box<dyn Kv>, Failed> {
    if job.rank == 0 {
        return publish_run(job, path, log).map(|s| Box::new(s) as Box<dyn Kv>);
    }
    // Can this rank write there at all? Say so now, not at the deadline.
    let probe = side(path, &fsafe::nonce(), "probe", job.rank);
    match fsafe::create_new(&probe, b"") {
        Ok(id) => {
            fsafe::remove_if_ours(&probe, id);
        }
        Err(e) => return Err(fail(cannot_write(&probe, &e))),
    }
    let run = wait_for_run(job, path, deadline)?;
    Ok(Box::new(FileStore::new(job, path, run, 0)))
}

fn cannot_write(p: &Path, e: &dyn std::fmt::Display) -> String {
    format!(
        "cannot write {}: {e}. The rendezvous file must be in a directory every rank can write",
        p.display()
    )
}

/// Rank 0 publishes a new run at `path` (taking over one whose rank 0 is
/// provably gone).
fn publish_run(job: &Job, path: &Path, log: &mut dyn FnMut(String)) -> Result<FileStore, Failed> {
    if !job.token_secret {
        if let Some(w) = shared_dir(path) {
            log(w);
        }
    }
    let run = fsafe::nonce();
    let made: Made = Arc::default();
    // Interrupted, rank 0 removes what this run made and every file of the
    // run beside it, each only if it is still this user's regular file.
    let key = {
        let (made, path, run) = (made.clone(), path.to_path_buf(), run.clone());
        crate::cleanup::on_interrupt(move || {
            remove_dead_run(&path, &run);
            remove_made(&made);
        })
    };
    let head = format!(
        "{FILE_MAGIC}\n{}\n{run}\n{}\nopen\n",
        job.token,
        owner::line()
    );
    if let Err(e) = publish(path, &run, &head, &made, log) {
        remove_made(&made);
        crate::cleanup::forget_cleanup(key);
        return Err(fail(e));
    }
    let mut s = FileStore::new(job, path, run, key);
    s.made = made;
    Ok(s)
}

/// Rank 0's warning where `path` is in a directory other users can write
/// (world-writable, or sticky as `/tmp`) and the job token is public.
fn shared_dir(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dir = path.parent()?;
    let mode = std::fs::metadata(dir).ok()?.mode();
    let how = match (mode & 0o002 != 0, mode & 0o1000 != 0) {
        (true, true) => "world-writable and sticky",
        (true, false) => "world-writable",
        (false, true) => "sticky",
        (false, false) => return None,
    };
    Some(format!(
        "the file rendezvous is in {}, a directory other users can write ({how}), and the job token \
         is public (no --token or NCCL_FIND_TOKEN: it is the default or the launcher's job id). \
         Another user's files there are refused, but they see this run's file names and can block \
         it, and any process of this user's that uses the same path joins this job. Pass --token \
         (or set NCCL_FIND_TOKEN) to a secret every rank shares, and meet in a directory only this \
         user can write",
        dir.display()
    ))
}

/// A peer waits for rank 0's run: a rendezvous file of this version, with
/// this job's token, whose rank 0 is not provably gone. Its run's nonce.
fn wait_for_run(job: &Job, path: &Path, deadline: Instant) -> Result<String, Failed> {
    let mut other = None;
    let mut pause = Backoff::new(Duration::from_millis(100));
    loop {
        // Another user's file at the path stops this rank at once: rank 0
        // cannot take the path over either.
        let got = fsafe::read_mine(path, RENDEZVOUS_MAX)
            .map_err(|e| fail(format!("rank {}: {e}", job.rank)))?;
        if let Some((bytes, _)) = got {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            other = match lines[..] {
                [FILE_MAGIC, token, run, writer, "open"] if is_nonce(run) => {
                    if !same_token(token, &job.token) {
                        Some("it holds another job's token")
                    } else if let Writer::Gone(_) = owner::writer(writer) {
                        Some("its rank 0 is gone: a new one will replace it")
                    } else {
                        return Ok(run.to_string());
                    }
                }
                _ => Some("it is not a rendezvous file of this nccl-find version"),
            };
        }
        if Instant::now() >= deadline {
            return Err(fail(format!(
                "rank {} waited {:.0} s for rank 0's unique id in {}{}. Is rank 0 running with the same file?",
                job.rank,
                job.timeout.as_secs_f64(),
                path.display(),
                other.map(|t| format!(" ({t})")).unwrap_or_default()
            )));
        }
        pause.sleep(deadline);
    }
}

/// One rank's side of the file store.
struct FileStore {
    path: PathBuf,
    run: String,
    rank: usize,
    world: usize,
    token: String,
    timeout: Duration,
    /// The files this rank made (rank 0: the rendezvous file too).
    made: Made,
    /// Rank 0's cleanup on an interrupt.
    cleanup_key: u64,
    fences: u32,
    /// This user's id: a barrier's arrival counts only as this user's file.
    uid: Option<u32>,
    /// Rank 0's puts, written when the next barrier opens (no peer reads
    /// one before): a rank 0 killed while it waits leaves only its file.
    held: Vec<(String, String)>,
    /// Rank 0: the peers seen at the latest barrier.
    last_here: Vec<usize>,
}

impl FileStore {
    fn new(job: &Job, path: &Path, run: String, cleanup_key: u64) -> FileStore {
        FileStore {
            path: path.to_path_buf(),
            run,
            rank: job.rank,
            world: job.world,
            token: job.token.clone(),
            timeout: job.timeout,
            made: Made::default(),
            cleanup_key,
            fences: 0,
            uid: fsafe::my_uid(),
            held: Vec::new(),
            last_here: Vec::new(),
        }
    }

    fn side(&self, what: &str, rank: usize) -> PathBuf {
        side(&self.path, &self.run, what, rank)
    }

    /// Makes this rank's file `what`, holding the token and `text`.
    fn make(&mut self, what: &str, text: &str) -> Result<(), std::io::Error> {
        let f = self.side(what, self.rank);
        let id = fsafe::create_new(&f, format!("{}\n{text}\nend\n", self.token).as_bytes())?;
        self.made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((f, id));
        Ok(())
    }

    /// What rank `rank` wrote in its file `what`: `Ok(None)` while it is
    /// not there; an error for one that is not this job's (another user's,
    /// or another token's).
    fn read(&self, what: &str, rank: usize) -> Result<Option<String>, String> {
        let f = self.side(what, rank);
        let Some((bytes, _)) = fsafe::read_mine(&f, SMALL_FILE)? else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(&bytes);
        match text.lines().collect::<Vec<_>>()[..] {
            [token, body, "end"] if same_token(token, &self.token) => Ok(Some(body.to_string())),
            [_, _, "end"] => Err(format!("{} holds another job's token", f.display())),
            // Still being written: as if not there yet.
            _ if !text.contains("\nend\n") && bytes.len() < 4096 => Ok(None),
            _ => Err(format!("{} is not a file of this rendezvous", f.display())),
        }
    }

    /// Whether rank `rank`'s arrival at barrier `n` is there: this user's
    /// regular file.
    fn arrived(&self, n: u32, rank: usize) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(self.side(&format!("f{n}"), rank))
            .is_ok_and(|m| m.file_type().is_file() && Some(m.uid()) == self.uid)
    }

    /// Rank 0 at barrier `n`: waits for every other rank's arrival, then
    /// opens it; at the deadline, says who never came.
    fn open_barrier(&mut self, n: u32, deadline: Instant) -> Result<(), Failed> {
        let mut here = vec![false; self.world];
        here[0] = true;
        let mut left = self.world - 1;
        let mut pause = Backoff::new(Duration::from_millis(50));
        loop {
            for (r, seen) in here.iter_mut().enumerate().skip(1) {
                // A world of a million ranks is a million looks: the
                // deadline is kept between them, not only between rounds.
                if r % 1024 == 0 && Instant::now() >= deadline {
                    break;
                }
                if !*seen && self.arrived(n, r) {
                    *seen = true;
                    left -= 1;
                }
            }
            let late = Instant::now() >= deadline;
            if left == 0 || late {
                // The peers that will remove their arrival at the end.
                self.last_here = (1..self.world).filter(|r| here[*r]).collect();
            }
            if left == 0 {
                for (what, text) in std::mem::take(&mut self.held) {
                    self.make(&what, &text)
                        .map_err(|e| fail(cannot_write(&self.side(&what, 0), &e)))?;
                }
                return self
                    .make(&format!("open{n}"), "open")
                    .map_err(|e| fail(cannot_write(&self.side(&format!("open{n}"), 0), &e)));
            }
            if late {
                let missing: Vec<usize> = (0..self.world).filter(|r| !here[*r]).collect();
                let f = self.never_came(n, missing);
                let _ = self.make(&format!("stop{n}"), &f.message.replace('\n', " "));
                return Err(f);
            }
            pause.sleep(deadline);
        }
    }

    /// The failure of barrier `n` at its deadline: who never came.
    fn never_came(&self, n: u32, missing: Vec<usize>) -> Failed {
        let (secs, path) = (self.timeout.as_secs_f64(), self.path.display());
        let (came, world) = (self.world - missing.len(), self.world);
        let message = if n == 0 {
            never_came(&missing, world, self.timeout, &format!("{path}"), "")
        } else {
            format!(
                "rank(s) {} never reached barrier {n} of the rendezvous at {path} within {secs:.0} s ({came} \
                 of {world} processes did). Check every rank's output, or raise --timeout",
                list(&missing)
            )
        };
        Failed { message, missing }
    }

    /// A peer at barrier `n`: waits for rank 0 to open it, or to say why
    /// it failed.
    fn wait_barrier(&mut self, n: u32, deadline: Instant) -> Result<(), Failed> {
        let mut pause = Backoff::new(Duration::from_millis(100));
        // Rank 0 says at its own deadline (a little later, maybe) who never
        // came: a while past this rank's own for it.
        let deadline = deadline + PEER_GRACE;
        loop {
            if self.read(&format!("open{n}"), 0).map_err(fail)?.is_some() {
                return Ok(());
            }
            if let Some(why) = self.read(&format!("stop{n}"), 0).map_err(fail)? {
                return Err(fail(peer_text(&why)));
            }
            if Instant::now() >= deadline {
                let (r, secs, path) = (self.rank, self.timeout.as_secs_f64(), self.path.display());
                return Err(fail(if n == 0 {
                    format!(
                        "rank {r} waited {secs:.0} s for rank 0's unique id in {path}. Is rank 0 running with \
                         the same file?"
                    )
                } else {
                    format!(
                        "rank {r} waited {secs:.0} s at barrier {n} of the rendezvous at {path}, and rank 0 \
                         never opened it: is rank 0 still running? Check its output"
                    )
                }));
            }
            pause.sleep(deadline);
        }
    }
}

/// How long past its deadline a peer waits for rank 0's word on how a
/// barrier ended (within the meeting's grace, `kv::GRACE`).
const PEER_GRACE: Duration = Duration::from_secs(1);

/// A key as part of a file name: `nccl-find/` dropped, `/` as `-`.
fn key_name(key: &str) -> Result<String, String> {
    let k = key
        .strip_prefix("nccl-find/")
        .unwrap_or(key)
        .replace('/', "-");
    if k.is_empty() || k.len() > 30 || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(format!("{key:?} is not a key the file store takes"));
    }
    Ok(format!("k-{k}"))
}

impl Kv for FileStore {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        let what = key_name(key)?;
        if self.rank == 0 {
            self.held.push((what, hex(value)));
            return Ok(());
        }
        match self.make(&what, &hex(value)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                use std::os::unix::fs::MetadataExt;
                let side = self.side(&what, self.rank);
                let owner = std::fs::symlink_metadata(&side).ok().map(|m| m.uid());
                Err(match owner {
                    // Another user's file: not another rank of this job.
                    Some(u) if owner != fsafe::my_uid() => format!(
                        "rank {r} could not say {key} in {}: {} exists, and user {u} made it, not \
                         this job: meet in a directory only you can write, or remove that \
                         user's file",
                        self.path.display(),
                        side.display(),
                        r = self.rank
                    ),
                    _ => format!(
                        "rank {r} could not say {key} in {}: {} exists. Two processes were given \
                         rank {r}",
                        self.path.display(),
                        side.display(),
                        r = self.rank
                    ),
                })
            }
            Err(e) => Err(cannot_write(&self.side(&what, self.rank), &e)),
        }
    }

    fn fence(&mut self, deadline: Instant) -> Result<(), Failed> {
        let n = self.fences;
        self.fences += 1;
        if self.rank == 0 {
            return self.open_barrier(n, deadline);
        }
        let what = format!("f{n}");
        self.make(&what, "here")
            .map_err(|e| fail(cannot_write(&self.side(&what, self.rank), &e)))?;
        self.wait_barrier(n, deadline)
    }

    fn get(&mut self, from: usize, key: &str) -> Result<Vec<u8>, String> {
        let what = key_name(key)?;
        let held = (from == 0 && self.rank == 0)
            .then(|| {
                self.held
                    .iter()
                    .find(|(w, _)| *w == what)
                    .map(|h| h.1.clone())
            })
            .flatten();
        let got = match held {
            Some(h) => Some(h),
            None => self.read(&what, from)?,
        };
        match got {
            Some(h) => unhex(&h).ok_or_else(|| format!("rank {from}'s {key} is not hex")),
            None => Err(format!("rank {from} left no {key}")),
        }
    }

    fn watch(&mut self) -> Option<String> {
        if let Ok(Some(why)) = self.read("abort", 0) {
            return Some(peer_text(&why));
        }
        if self.rank != 0 {
            if let Ok(Some((bytes, _))) = fsafe::read_mine(&self.path, RENDEZVOUS_MAX) {
                let text = String::from_utf8_lossy(&bytes);
                if let [FILE_MAGIC, _, run, writer, ..] = text.lines().collect::<Vec<_>>()[..] {
                    if run == self.run {
                        if let Writer::Gone(who) = owner::writer(writer) {
                            return Some(format!("rank 0's process went away ({who})"));
                        }
                    }
                }
            }
        }
        None
    }

    fn abort(&mut self, why: &str) {
        // The first rank to stop the job names it; the file is rank 0's
        // name, whoever makes it.
        let text = format!(
            "rank {} stopped the job: {}",
            self.rank,
            why.replace('\n', " ")
        );
        let f = self.side("abort", 0);
        if let Ok(id) = fsafe::create_new(&f, format!("{}\n{text}\nend\n", self.token).as_bytes()) {
            self.made
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((f, id));
        }
    }

    fn close(&mut self, until: Instant) {
        if self.rank == 0 {
            // Every peer removes its own files once it has passed the last
            // barrier: wait (briefly, and never past `until`) for their
            // last arrivals to go, so that no peer misses the opening, then
            // remove the run.
            if let Some(last) = self.fences.checked_sub(1) {
                let until = until.min(Instant::now() + Duration::from_secs(5));
                let mut pause = Backoff::new(Duration::from_millis(20));
                while self.last_here.iter().any(|r| self.arrived(last, *r))
                    && Instant::now() < until
                {
                    pause.sleep(until);
                }
            }
            remove_dead_run(&self.path, &self.run);
        }
        remove_made(&self.made);
        if self.rank == 0 {
            crate::cleanup::forget_cleanup(self.cleanup_key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use crate::*;

    /// Another local user (uid 65534) plants a whole run in a shared
    /// sticky directory before the job starts: the rendezvous file with the
    /// public token, every barrier's opening, and a plan with a unique id
    /// of their choosing. The rank counts none of it: it stops at once,
    /// naming the file and its owner. (As root: only root can make a file
    /// another user owns.)
    #[test]
    fn another_users_files_do_not_count() {
        if fsafe::my_uid() != Some(0) {
            eprintln!("skipped: making a file another user owns needs root");
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let d = scratch("owner");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let rdv = d.join("rdv");
        let run = "deadbeefdeadbeefdeadbeefdeadbeef";
        let token = "nccl-find";
        let mut plan = vec![0xde; 128];
        plan.extend_from_slice(&2u64.to_le_bytes());
        plan.push(1);
        plan.extend_from_slice(&1u32.to_le_bytes());
        let mut planted = vec![(
            rdv.clone(),
            format!("{FILE_MAGIC}\n{token}\n{run}\n{}\nopen\n", owner::line()),
        )];
        for n in 0..5 {
            planted.push((
                side(&rdv, run, &format!("open{n}"), 0),
                format!("{token}\nopen\nend\n"),
            ));
        }
        planted.push((
            side(&rdv, run, "k-plan", 0),
            format!("{token}\n{}\nend\n", hex(&plan)),
        ));
        for (f, text) in &planted {
            std::fs::write(f, text).unwrap();
            std::os::unix::fs::chown(f, Some(65534), Some(65534)).unwrap();
        }
        let t = Instant::now();
        let got = join(
            &job(1, 2, token, Init::File { path: rdv.clone() }, 20),
            &id,
            &mut |_| {},
        )
        .map(|j| j.id[0])
        .map_err(|f| f.message);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert_eq!(
            got,
            Err(format!(
                "rank 1: {} belongs to uid 65534, not to this job's user (uid 0): another user's file does \
                 not count. Remove it, or meet in a directory other users cannot write",
                rdv.display()
            ))
        );
        // The rendezvous file is the job's own (its rank 0's), and the
        // other user planted the files beside it, having read the run's
        // nonce in the directory's listing: the first one read stops the
        // rank.
        std::os::unix::fs::chown(&rdv, Some(0), Some(0)).unwrap();
        let got = join(
            &job(1, 2, token, Init::File { path: rdv.clone() }, 20),
            &id,
            &mut |_| {},
        )
        .map(|j| j.id[0])
        .map_err(|f| f.message);
        assert_eq!(
            got,
            Err(format!(
                "{} belongs to uid 65534, not to this job's user (uid 0): another user's file does not \
                 count. Remove it, or meet in a directory other users cannot write",
                side(&rdv, run, "open0", 0).display()
            ))
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Another user plants a rank's hello file beside the job's own
    /// rendezvous file: the rank stops, naming the file and its owner, not
    /// "two processes were given rank 1". (As root, as above.)
    #[test]
    fn another_users_hello_file_is_named_as_theirs() {
        if fsafe::my_uid() != Some(0) {
            eprintln!("skipped: making a file another user owns needs root");
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let d = scratch("hello-owner");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let rdv = d.join("rdv");
        let run = "feedfacefeedfacefeedfacefeedface";
        let token = "nccl-find";
        std::fs::write(
            &rdv,
            format!("{FILE_MAGIC}\n{token}\n{run}\n{}\nopen\n", owner::line()),
        )
        .unwrap();
        let hello = side(&rdv, run, "k-hello-1", 1);
        std::fs::write(&hello, "planted").unwrap();
        std::os::unix::fs::chown(&hello, Some(65534), Some(65534)).unwrap();
        let got = join(
            &job(1, 2, token, Init::File { path: rdv.clone() }, 5),
            &id,
            &mut |_| {},
        )
        .map(|j| j.id[0])
        .map_err(|f| f.message);
        let _ = std::fs::remove_dir_all(&d);
        let got = got.unwrap_err();
        assert!(
            got.contains(&format!(
                "{} exists, and user 65534 made it, not this job: meet in a directory only you \
                 can write, or remove that user's file",
                hello.display()
            )),
            "{got}"
        );
        assert!(!got.contains("Two processes were given"), "{got}");
    }

    /// Rank 0 of a file rendezvous in a directory other users can write,
    /// with a public token, says so, naming --token; with a secret token,
    /// or in a directory only this user can write, it says nothing. The
    /// job goes on either way.
    #[test]
    fn a_shared_directory_with_a_public_token_is_named_on_rank_0() {
        use std::os::unix::fs::PermissionsExt;
        let d = scratch("shared");
        let init = Init::File {
            path: d.join("rdv"),
        };
        let warning = format!(
            "the file rendezvous is in {}, a directory other users can write (world-writable and \
             sticky), and the job token is public (no --token or NCCL_FIND_TOKEN: it is the default \
             or the launcher's job id). Another user's files there are refused, but they see this \
             run's file names and can block it, and any process of this user's that uses the same \
             path joins this job. Pass --token (or set NCCL_FIND_TOKEN) to a secret every rank \
             shares, and meet in a directory only this user can write",
            d.display()
        );
        for (mode, secret, said) in [
            (0o1777, false, vec![warning]),
            (0o1777, true, vec![]),
            (0o700, false, vec![]),
        ] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
            let mut jobs: Vec<Job> = (0..2)
                .map(|r| job(r, 2, "nccl-find", init.clone(), 20))
                .collect();
            for j in &mut jobs {
                j.token_secret = secret;
            }
            let j1 = jobs.pop().unwrap();
            let peer = std::thread::spawn(move || {
                let mut notes = Vec::new();
                let j = join(&j1, &id, &mut |m| notes.push(m)).unwrap();
                j.finish(true, 0, "", Duration::from_secs(20));
                notes
            });
            let mut notes = Vec::new();
            let j0 = join(&jobs[0], &id, &mut |m| notes.push(m)).unwrap();
            assert_eq!(j0.id, [7; 128]);
            j0.finish(true, 0, "", Duration::from_secs(20));
            assert_eq!(peer.join().unwrap(), Vec::<String>::new());
            assert_eq!(notes, said, "mode {mode:o}, secret {secret}");
        }
        assert_eq!(names(&d), Vec::<String>::new());
        std::fs::remove_dir_all(&d).unwrap();
    }

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

    /// A peer's outcome is read by rank 0 escaped: a terminal escape, a
    /// line break and a forged verdict stay one visible line.
    #[test]
    fn a_peers_done_message_is_escaped() {
        let d = scratch("done-words");
        let init = Init::File {
            path: d.join("rdv"),
        };
        let (j0, j1) = pair(init);
        let peer = std::thread::spawn(move || {
            j1.finish(
                false,
                7,
                "\x1b[2Jfine\u{85}rank 9: OK\u{202e}\nend\nok 0 fake",
                Duration::from_secs(20),
            )
        });
        let got = j0.finish(true, 0, "", Duration::from_secs(20));
        peer.join().unwrap();
        assert_eq!(
            got,
            vec![PeerOutcome {
                rank: 1,
                done: Some((
                    false,
                    7,
                    "\\u{1b}[2Jfine\\u{85}rank 9: OK\\u{202e}\\u{a}end\\u{a}ok 0 fake".into()
                )),
                times_us: Vec::new(),
                why: None,
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
        std::fs::write(&rdv, format!("{FILE_MAGIC}\nt\n{old}\n{line}\nopen\n")).unwrap();
        let stale_hello = side(&rdv, old, "k-hello-1", 1);
        std::fs::write(&stale_hello, "t\n01000000\nend\n").unwrap();
        let stale_new = side(&rdv, old, &format!("new-{old}"), 0);
        std::fs::write(&stale_new, "x").unwrap();
        // Not that run's: another run's, an odd name, a link.
        let other = side(&rdv, "fedcba9876543210fedcba9876543210", "k-hello-1", 1);
        std::fs::write(&other, "x").unwrap();
        std::fs::write(d.join(format!("rdv.{old}.k-hello-1.1.x")), "x").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", side(&rdv, old, "k-done-1", 1)).unwrap();
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
            format!("rdv.{old}.k-done-1.1"),
            format!("rdv.{old}.k-hello-1.1.x"),
            "rdv.fedcba9876543210fedcba9876543210.k-hello-1.1".to_string(),
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
        assert!(e.message.contains("rank 1 never came to "), "{}", e.message);
        assert_eq!(names(&d), ["theirs"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A world of a million ranks, none of whom comes: rank 0 keeps its
    /// deadline between the looks at their arrivals, not only between
    /// rounds of a million looks.
    #[test]
    fn a_huge_world_ends_at_the_deadline() {
        let d = scratch("huge");
        let t = Instant::now();
        let e = join(
            &job(
                0,
                MAX_WORLD,
                "t",
                Init::File {
                    path: d.join("rdv"),
                },
                1,
            ),
            &id,
            &mut |_| {},
        )
        .err()
        .unwrap();
        let took = t.elapsed();
        assert_eq!(
            e.message,
            format!(
                "ranks 1-{} never came to {at} (waited 1 s); rank 0 is here. Start them, with the same \
                 rendezvous and token, check that they can reach {at}, or raise --timeout",
                MAX_WORLD - 1,
                at = d.join("rdv").display()
            )
        );
        assert_eq!(e.missing.len(), MAX_WORLD - 1);
        assert!(took < Duration::from_millis(2500), "{took:?}");
        assert_eq!(names(&d), Vec::<String>::new());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
