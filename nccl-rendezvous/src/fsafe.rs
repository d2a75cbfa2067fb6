//! Files in directories other people can write (`/tmp`, a shared
//! rendezvous directory): names nobody can guess, files created only where
//! nothing is (`O_EXCL`), links never followed (`O_NOFOLLOW`), only regular
//! files read, without blocking and within a size bound, and nothing removed
//! unless this run made it (checked by device and inode).

use std::fs::{Metadata, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The open flags, from `libc` for the target.
const O_NONBLOCK: i32 = libc::O_NONBLOCK;
const O_NOFOLLOW: i32 = libc::O_NOFOLLOW;

/// Which file: device and inode, to tell ours from one put in its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    pub fn of(m: &Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// 128 bits from the kernel's random source, in hex: what makes a name
/// or a challenge unguessable. The kernel's source does not fail on
/// Linux; if it ever did, the process stops rather than go on with a
/// guessable nonce.
pub fn nonce() -> String {
    random_bytes().iter().map(|x| format!("{x:02x}")).collect()
}

/// 16 bytes from the kernel's random source (`getrandom(2)`).
pub fn random_bytes() -> [u8; 16] {
    let mut b = [0u8; 16];
    if let Err(e) = getrandom::getrandom(&mut b) {
        panic!("the kernel's random source failed ({e}): no nonce can be made");
    }
    b
}

/// What a file that is not a regular file is, in words.
pub fn kind(m: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// How many times [`read_small`] looks again at a path whose regular file
/// was replaced by another between its look and its open (rank 0 renames a
/// new rendezvous file into place while its peers read the old one).
const SWAPS: usize = 8;

/// Reads `path` if it is a regular file (a link is not followed) of at most
/// `max` bytes. `Ok(None)`: nothing is there. The open never blocks, the
/// read never passes `max`. A regular file replaced by another since the
/// look is looked at again, `SWAPS` times at most.
pub fn read_small(path: &Path, max: u64) -> Small {
    read_checked(path, max, None)
}

/// [`read_small`], for a file that counts only as this user's: one that
/// another user owns is refused, named with its owner, before a byte of it
/// is read (the owner is that of the file opened, not of a look before).
pub fn read_mine(path: &Path, max: u64) -> Small {
    match my_uid() {
        Some(me) => read_checked(path, max, Some(me)),
        None => Err(format!(
            "cannot read {}: this process's user cannot be told (/proc/self is unreadable), so \
             neither can whether the file is its own",
            path.display()
        )),
    }
}

/// [`read_small`], refusing a file whose owner is not `owner` (`None`: any).
fn read_checked(path: &Path, max: u64, owner: Option<u32>) -> Small {
    for _ in 0..SWAPS {
        if let Some(r) = read_once(path, max, owner) {
            return r;
        }
    }
    read_once(path, max, owner).unwrap_or_else(|| {
        Err(format!(
            "{} was replaced {} times while it was read: another program keeps rewriting it",
            path.display(),
            SWAPS + 1
        ))
    })
}

/// What [`read_small`] gives: the bytes and the file they came from, or
/// `None` where nothing is; an error in words.
pub type Small = Result<Option<(Vec<u8>, FileId)>, String>;

/// One look and read; `None`: the regular file looked at was replaced by
/// another regular file before it was opened.
fn read_once(path: &Path, max: u64, owner: Option<u32>) -> Option<Small> {
    let before = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(Ok(None)),
        Err(e) => return Some(Err(format!("cannot read {}: {e}", path.display()))),
    };
    let refuse = |m: &Metadata| {
        format!(
            "{} is {}, not a regular file: it is left alone. Remove it, or choose another path",
            path.display(),
            kind(m)
        )
    };
    if !before.file_type().is_file() {
        return Some(Err(refuse(&before)));
    }
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK | O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        // Gone (or swapped) since the look: as if not there yet.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(Ok(None)),
        Err(e) => return Some(Err(format!("cannot read {}: {e}", path.display()))),
    };
    let after = match file.metadata() {
        Ok(m) => m,
        Err(e) => return Some(Err(format!("cannot read {}: {e}", path.display()))),
    };
    if !after.is_file() {
        return Some(Err(refuse(&after)));
    }
    if FileId::of(&after) != FileId::of(&before) {
        return None;
    }
    if let Some(me) = owner.filter(|me| *me != after.uid()) {
        return Some(Err(format!(
            "{} belongs to uid {}, not to this job's user (uid {me}): another user's file does not \
             count. Remove it, or meet in a directory other users cannot write",
            path.display(),
            after.uid()
        )));
    }
    let mut bytes = Vec::new();
    if let Err(e) = file.take(max + 1).read_to_end(&mut bytes) {
        return Some(Err(format!("cannot read {}: {e}", path.display())));
    }
    if bytes.len() as u64 > max {
        return Some(Err(format!(
            "{} is larger than the {max} bytes a rendezvous file can be: it is not one",
            path.display()
        )));
    }
    Some(Ok(Some((bytes, FileId::of(&after)))))
}

/// Creates `path` with `text`, readable by this user only, where nothing is
/// (not even a dangling link): `O_CREAT | O_EXCL | O_NOFOLLOW`.
pub fn create_new(path: &Path, text: &[u8]) -> io::Result<FileId> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(O_NOFOLLOW)
        .open(path)?;
    let id = FileId::of(&f.metadata()?);
    if let Err(e) = f.write_all(text) {
        drop(f);
        remove_if_ours(path, id);
        return Err(e);
    }
    Ok(id)
}

/// Removes `path` only if it is still the file this run made.
pub fn remove_if_ours(path: &Path, id: FileId) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() && FileId::of(&m) == id => {
            std::fs::remove_file(path).is_ok()
        }
        _ => false,
    }
}

/// This process's effective user id, from `/proc/self` (owned by it).
pub fn my_uid() -> Option<u32> {
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// Makes a directory for this run alone, like `mkdtemp`: a new name
/// `<parent>/<prefix><pid>-<nonce>`, mode 0700, never one that already
/// exists, and checked after creation (a real directory, ours, 0700).
pub fn private_dir(parent: &Path, prefix: &str) -> Result<PathBuf, String> {
    let mut last = String::new();
    for _ in 0..8 {
        let dir = parent.join(format!("{prefix}{}-{}", std::process::id(), nonce()));
        match make_private_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Makes exactly `dir`, refusing whatever is already there.
pub fn make_private_dir(dir: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            format!(
                "cannot make the private directory {}: {e}{}",
                dir.display(),
                if e.kind() == io::ErrorKind::AlreadyExists {
                    " (something is already there; it is not reused)"
                } else {
                    ""
                }
            )
        })?;
    // A umask may have taken bits away: exactly 0700.
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    let m = std::fs::symlink_metadata(dir)
        .map_err(|e| format!("cannot check {}: {e}", dir.display()))?;
    let owner_ok = my_uid().map_or(true, |u| u == m.uid());
    if !m.file_type().is_dir() || !owner_ok || m.mode() & 0o777 != 0o700 {
        return Err(format!(
            "{} is not the private directory just made (it is {}, owner {}, mode {:o}): not used",
            dir.display(),
            kind(&m),
            m.uid(),
            m.mode() & 0o777
        ));
    }
    Ok(())
}

/// The files a run made, to remove (each only if it is still the one made).
pub type Made = std::sync::Arc<std::sync::Mutex<Vec<(PathBuf, FileId)>>>;

pub fn remove_made(made: &Made) {
    for (p, id) in std::mem::take(&mut *made.lock().unwrap_or_else(|e| e.into_inner())) {
        remove_if_ours(&p, id);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A reader never fails on a file that another process keeps renaming
    /// new copies over (as rank 0 does while its peers poll): it reads one
    /// whole copy or the other. One reader in several thousand used to be
    /// told the file was "a regular file, not a regular file".
    #[test]
    fn a_file_renamed_over_while_read_is_read_again() {
        let d = std::env::temp_dir().join(format!("nccl-find-swap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        let path = d.join("rdv");
        std::fs::write(&path, b"0").unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (d, path, stop) = (d.clone(), path.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let tmp = d.join(format!("tmp{n}"));
                    std::fs::write(&tmp, n.to_string()).unwrap();
                    std::fs::rename(&tmp, &path).unwrap();
                    n += 1;
                }
                n
            })
        };
        let mut reads = 0;
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::time::Instant::now() < until {
            let got = read_small(&path, 100);
            let (bytes, _) = got.unwrap().unwrap();
            assert!(std::str::from_utf8(&bytes).unwrap().parse::<u64>().is_ok());
            reads += 1;
        }
        stop.store(true, Ordering::SeqCst);
        let renames = writer.join().unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        assert!(
            reads > 100 && renames > 100,
            "{reads} reads, {renames} renames"
        );
    }

    use super::*;
    use crate::testutil::scratch;

    #[test]
    fn nonces_differ_and_look_random() {
        let a = nonce();
        let b = nonce();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn create_new_never_follows_a_planted_link() {
        let d = scratch("link");
        let victim = d.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let at = d.join("planted");
        std::os::unix::fs::symlink(&victim, &at).unwrap();
        let e = create_new(&at, b"clobber").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        // A dangling link is refused too (O_EXCL).
        let dangling = d.join("dangling");
        std::os::unix::fs::symlink(d.join("nothing"), &dangling).unwrap();
        assert!(create_new(&dangling, b"x").is_err());
        assert!(!d.join("nothing").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn reads_only_small_regular_files_without_blocking() {
        let d = scratch("read");
        let fifo = d.join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let t = std::time::Instant::now();
        assert!(read_small(&fifo, 100)
            .unwrap_err()
            .contains("is a FIFO (named pipe), not a regular file"));
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        let zero = d.join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(read_small(&zero, 100)
            .unwrap_err()
            .contains("is a symbolic link, not a regular file"));
        let big = d.join("big");
        std::fs::write(&big, vec![b'x'; 101]).unwrap();
        assert!(read_small(&big, 100)
            .unwrap_err()
            .contains("larger than the 100 bytes"));
        assert_eq!(read_small(&d.join("absent"), 100).unwrap(), None);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn only_our_own_file_is_removed() {
        let d = scratch("rm");
        let f = d.join("f");
        let id = create_new(&f, b"ours").unwrap();
        // Someone replaces it: theirs stays.
        std::fs::write(d.join("t"), "theirs").unwrap();
        std::fs::rename(d.join("t"), &f).unwrap();
        assert!(!remove_if_ours(&f, id));
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "theirs");
        let g = d.join("g");
        let id = create_new(&g, b"ours").unwrap();
        assert!(remove_if_ours(&g, id));
        assert!(!g.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_private_dir_is_new_and_0700_and_an_existing_one_is_never_reused() {
        let d = scratch("dir");
        let p = private_dir(&d, "x-").unwrap();
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.mode() & 0o777, 0o700);
        // Someone else's directory (or a link to one) at the name: refused.
        let foreign = d.join("foreign");
        std::fs::create_dir(&foreign).unwrap();
        std::fs::write(foreign.join("log"), "theirs").unwrap();
        assert!(make_private_dir(&foreign)
            .unwrap_err()
            .contains("it is not reused"));
        let link = d.join("link");
        std::os::unix::fs::symlink(&foreign, &link).unwrap();
        assert!(make_private_dir(&link)
            .unwrap_err()
            .contains("it is not reused"));
        assert_eq!(
            std::fs::read_to_string(foreign.join("log")).unwrap(),
            "theirs"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
