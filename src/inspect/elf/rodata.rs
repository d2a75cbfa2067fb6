//! What a library's read-only data says of it: the version text
//! (`NCCL version 2.21.5+cuda12.4`) that every `libnccl.so.2` carries, and
//! from NCCL 2.29 on its git version, both read in one pass over
//! `.rodata`.

use super::{parse_u32, Reader};
use crate::version::{CudaVersion, Version};

const MARKER: &[u8] = b"NCCL version ";
const GIT_MARKER: &[u8] = b"NCCL git version ";

/// Looks for the version text in a range of the file, 1 MiB at a time:
/// `NCCL version ` followed by `X.Y.Z[suffix][+cudaA.B]` and the string's
/// end. Texts that merely start with the words ("NCCL version information",
/// "NCCL version %s") are passed over. When no string is exactly a version,
/// the first `NCCL version X.Y.Z ...` sentence is taken. In the same pass,
/// the git version: the whole string after `NCCL git version ` (printable,
/// at most [`GIT_MAX`] bytes). Both, where found.
pub(super) fn scan(
    r: &mut Reader,
    start: u64,
    size: u64,
) -> Result<(Option<String>, Option<String>), String> {
    const CHUNK: u64 = 1 << 20;
    const TAIL: u64 = 160;
    let mut pos = 0;
    let (mut exact, mut loose, mut git) = (None, None, None);
    while pos < size {
        let n = (size - pos).min(CHUNK + TAIL);
        let buf = r.bytes(start + pos, n, "the .rodata section")?;
        for at in 0..buf.len() {
            if buf[at] != b'N' {
                continue;
            }
            if at as u64 >= CHUNK && pos + CHUNK < size {
                break; // the overlap: the next chunk looks at it again
            }
            if git.is_none() && buf[at..].starts_with(GIT_MARKER) {
                git = git_text(&buf[at + GIT_MARKER.len()..]);
            } else if exact.is_none() && buf[at..].starts_with(MARKER) {
                match version_at(&buf[at + MARKER.len()..]) {
                    Some((token, true)) => exact = Some(token),
                    Some((token, false)) => loose = loose.or(Some(token)),
                    None => {}
                }
            }
            if exact.is_some() && git.is_some() {
                return Ok((exact, git));
            }
        }
        pos += CHUNK;
    }
    Ok((exact.or(loose), git))
}

/// The version after `NCCL version ` at the start of `rest`, and whether
/// the string ends there (else a sentence goes on after a space); `None`
/// where it is no version, or the buffer ends first.
fn version_at(rest: &[u8]) -> Option<(String, bool)> {
    let mut end = 0;
    while end < rest.len() && rest[end] != 0 && rest[end].is_ascii_graphic() {
        end += 1;
    }
    if end == 0 || end == rest.len() {
        return None;
    }
    let token = String::from_utf8_lossy(&rest[..end]);
    parse_version_text(&token)?;
    match rest[end] {
        0 => Some((token.into_owned(), true)),
        b' ' => Some((token.into_owned(), false)),
        _ => None,
    }
}

/// The longest git version text taken (a branch, a space, `git describe`).
const GIT_MAX: usize = 128;

/// The git version: printable bytes up to the string's end, at most
/// [`GIT_MAX`]; `None` where the string is empty, longer, or not printable.
fn git_text(rest: &[u8]) -> Option<String> {
    let end = rest.iter().take(GIT_MAX + 1).position(|&b| b == 0)?;
    let text = &rest[..end];
    (!text.is_empty() && text.iter().all(|b| *b == b' ' || b.is_ascii_graphic()))
        .then(|| String::from_utf8_lossy(text).into_owned())
}

/// Parses `2.21.5+cuda12.4` (the text after `NCCL version `).
pub fn parse_version_text(text: &str) -> Option<(Version, Option<CudaVersion>)> {
    const CUDA: &str = "+cuda";
    let (ver, cuda) = match text.find(CUDA) {
        Some(i) => (&text[..i], Some(&text[i + CUDA.len()..])),
        None => (text, None),
    };
    let mut digits_end = ver.len();
    for (i, c) in ver.char_indices() {
        if !(c.is_ascii_digit() || c == '.') {
            digits_end = i;
            break;
        }
    }
    let (nums, suffix) = ver.split_at(digits_end);
    for c in suffix.chars() {
        if !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '~')) {
            return None;
        }
    }
    let mut it = nums.split('.');
    let (Some(x), Some(y), Some(z), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return None;
    };
    let (Some(x), Some(y), Some(z)) = (parse_u32(x), parse_u32(y), parse_u32(z)) else {
        return None;
    };
    let cuda = match cuda {
        None => None,
        Some(c) => {
            let mut it = c.split('.');
            let (major, minor) = match (it.next(), it.next(), it.next()) {
                (Some(major), Some(minor), None) => (major, minor),
                // `+cuda12` is CUDA 12.0.
                (Some(major), None, None) => (major, "0"),
                _ => return None,
            };
            match (parse_u32(major), parse_u32(minor)) {
                (Some(major), Some(minor)) => Some(CudaVersion { major, minor }),
                _ => return None,
            }
        }
    };
    Some((Version::new(x, y, z, suffix), cuda))
}
