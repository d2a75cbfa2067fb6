//! Opening what the probe reads: only regular files, checked without
//! blocking, and every read bounded. A FIFO, a device (`/dev/zero`), a
//! socket or a directory where a header, a library, a `.pc` file, the dpkg
//! status file or `ld.so.cache` should be gives an error that names it,
//! never a hang or an unbounded read.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// `O_NONBLOCK` where its value is known (0o4000 on Linux for these
/// architectures), so that even a FIFO swapped in between the check and the
/// open cannot block the open. Elsewhere 0: the type is still checked
/// before and after the open.
const O_NONBLOCK: i32 = if cfg!(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "aarch64",
        target_arch = "arm",
        target_arch = "riscv64",
        target_arch = "powerpc64",
        target_arch = "s390x",
        target_arch = "loongarch64"
    )
)) {
    0o4000
} else {
    0
};

/// What a file that is not a regular file is, in words.
fn kind(m: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

fn not_regular(m: &Metadata) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {}, not a regular file", kind(m)),
    )
}

/// Opens `path` (following links) only if it is a regular file, and
/// returns it with its length.
pub(crate) fn open_regular(path: &Path) -> io::Result<(File, u64)> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let before = std::fs::metadata(path)?;
    if !before.is_file() {
        return Err(not_regular(&before));
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)?;
    let after = file.metadata()?;
    if !after.is_file() || after.ino() != before.ino() || after.dev() != before.dev() {
        return Err(not_regular(&after));
    }
    Ok((file, after.len()))
}

/// Reads a whole regular file of at most `max` bytes.
pub fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it is {len} bytes, more than the {max} bytes such a file can be"),
        ));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it grew past {max} bytes while being read"),
        ));
    }
    Ok(bytes)
}

/// How many symbolic links one resolution may follow, as the kernel's own
/// limit (`ELOOP` past it).
const MAX_LINKS: u32 = 40;

/// Resolves `path` (which lies under `root`) the way a chroot or a sysroot
/// would: every symbolic link is followed inside `root`, an absolute target
/// is taken from `root`, and `..` never climbs above it. With `strict`, a
/// missing component is an error (as `canonicalize`); without, the rest of
/// the path is appended as it is. Under the root `/` this is
/// `std::fs::canonicalize`.
pub(crate) fn resolve_in(root: &Path, path: &Path, strict: bool) -> io::Result<PathBuf> {
    use std::path::Component;
    if root == Path::new("/") {
        return match std::fs::canonicalize(path) {
            Err(e) if !strict && e.kind() == io::ErrorKind::NotFound => Ok(path.to_path_buf()),
            r => r,
        };
    }
    let rel = path.strip_prefix(root).unwrap_or(path);
    let mut todo: Vec<std::ffi::OsString> = Vec::new();
    for c in rel.components().rev() {
        match c {
            Component::Normal(n) => todo.push(n.to_os_string()),
            Component::ParentDir => todo.push("..".into()),
            _ => {}
        }
    }
    let mut cur = root.to_path_buf();
    let mut links = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            if cur != root {
                cur.pop();
            }
            continue;
        }
        let next = cur.join(&name);
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::other(
                        "symbolic links loop (more than 40 followed)",
                    ));
                }
                let target = std::fs::read_link(&next)?;
                if target.is_absolute() {
                    cur = root.to_path_buf();
                }
                for c in target.components().rev() {
                    match c {
                        Component::Normal(n) => todo.push(n.to_os_string()),
                        Component::ParentDir => todo.push("..".into()),
                        _ => {}
                    }
                }
            }
            Ok(_) => cur = next,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !strict => {
                cur = next;
                while let Some(rest) = todo.pop() {
                    cur.push(rest);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_are_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("nccl-find-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let st = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(st.success());
        assert_eq!(
            read_bounded(&fifo, 10).unwrap_err().to_string(),
            "it is a FIFO (named pipe), not a regular file"
        );
        assert_eq!(
            read_bounded(Path::new("/dev/zero"), 10)
                .unwrap_err()
                .to_string(),
            "it is a character device, not a regular file"
        );
        assert_eq!(
            read_bounded(&dir, 10).unwrap_err().to_string(),
            "it is a directory, not a regular file"
        );
        let big = dir.join("big");
        std::fs::write(&big, [b'x'; 11]).unwrap();
        assert_eq!(
            read_bounded(&big, 10).unwrap_err().to_string(),
            "it is 11 bytes, more than the 10 bytes such a file can be"
        );
        assert_eq!(read_bounded(&big, 11).unwrap(), [b'x'; 11]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn links_resolve_inside_the_root() {
        use std::os::unix::fs::symlink;
        let root = std::env::temp_dir().join(format!("nccl-find-resolve-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("usr/lib/real")).unwrap();
        std::fs::write(root.join("usr/lib/real/f"), "x").unwrap();
        // An absolute link, as a sysroot has them: taken from the root.
        symlink("/usr/lib/real", root.join("usr/lib/abs")).unwrap();
        // A relative link that climbs past the root stays inside it.
        symlink("../../../../../usr/lib/real", root.join("usr/lib/up")).unwrap();
        // A link to /etc: /etc under the root, which does not exist.
        symlink("/etc", root.join("etc-link")).unwrap();
        symlink("loop", root.join("loop")).unwrap();
        let r = |p: &str, strict| resolve_in(&root, &root.join(p), strict);
        assert_eq!(
            r("usr/lib/abs/f", true).unwrap(),
            root.join("usr/lib/real/f")
        );
        assert_eq!(
            r("usr/lib/up/f", true).unwrap(),
            root.join("usr/lib/real/f")
        );
        assert_eq!(
            r("etc-link/passwd", true).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            r("etc-link/passwd", false).unwrap(),
            root.join("etc/passwd")
        );
        assert!(r("loop", true).unwrap_err().to_string().contains("loop"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
