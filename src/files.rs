//! Opening what the probe reads: only regular files, checked without
//! blocking, and every read bounded. A FIFO, a device (`/dev/zero`), a
//! socket or a directory where a header, a library, a `.pc` file, the dpkg
//! status file or `ld.so.cache` should be gives an error that names it,
//! never a hang or an unbounded read.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::path::Path;

/// `O_NONBLOCK` where its value is known, so that even a FIFO swapped in
/// between the check and the open cannot block the open.
#[cfg(all(
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
))]
const O_NONBLOCK: i32 = 0o4000;
#[cfg(not(all(
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
)))]
const O_NONBLOCK: i32 = 0;

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
pub(crate) fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
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
}
