//! Reading the logs: each file (or standard input) streamed in chunks of
//! fixed size, never whole, and only the lines that hold a known message's
//! words handed on. A line longer than a chunk is read to a chunk's length;
//! a file that is not text, a directory, or one that cannot be opened is
//! skipped with a note. Memory stays within a chunk and one line, whatever
//! the size of the files.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use regex::bytes::Regex;

/// How much of a file is read at a time; also the most of one line kept.
const CHUNK: usize = 1 << 20;

/// One input, as read.
#[derive(Debug, Clone, Default)]
pub struct Input {
    /// Its name as the user gave it (`-` for standard input), escaped.
    pub name: String,
    /// Lines and bytes read.
    pub lines: u64,
    pub bytes: u64,
    /// Why it was skipped or read in part, where it was.
    pub note: Option<String>,
    /// Whether any of it was read.
    pub read: bool,
}

/// A line that holds a known message's words: its input, its number (from
/// 1), and its text (invalid UTF-8 replaced, a carriage return dropped).
#[derive(Debug, Clone)]
pub struct Candidate {
    pub input: usize,
    pub line: u64,
    pub text: String,
}

/// The words every known line holds, as one expression to find them by.
pub fn finder(anchors: &[String]) -> Regex {
    let alts: Vec<String> = anchors.iter().map(|a| regex::escape(a)).collect();
    Regex::new(&alts.join("|")).expect("an alternation of literals")
}

/// Reads `names` in order (`-` is standard input), handing each candidate
/// line to `take`; returns what each input was.
pub fn read_all(names: &[String], finder: &Regex, take: &mut dyn FnMut(Candidate)) -> Vec<Input> {
    let mut out = Vec::with_capacity(names.len());
    // One buffer for every input: a chunk, made once.
    let mut buf = vec![0u8; CHUNK];
    for (i, name) in names.iter().enumerate() {
        let mut input = Input {
            name: nccl_rendezvous::untrusted::shown(name, 200),
            ..Input::default()
        };
        if name == "-" {
            let stdin = std::io::stdin();
            let mut lock = stdin.lock();
            stream(&mut lock, &mut buf, i, finder, &mut input, take);
        } else {
            match open(Path::new(name)) {
                Ok(mut f) => stream(&mut f, &mut buf, i, finder, &mut input, take),
                Err(why) => input.note = Some(why),
            }
        }
        out.push(input);
    }
    out
}

/// Opens `path` if it is a regular file: never following a link into a
/// device, never waiting on a pipe.
fn open(path: &Path) -> Result<File, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot be read ({e})"))?;
    if meta.is_dir() {
        return Err("a directory: name its files (dir/*.out)".into());
    }
    if !meta.is_file() {
        return Err("not a regular file: pipe it in (… | nccl-find explain -)".into());
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("cannot be read ({e})"))?;
    match f.metadata() {
        Ok(m) if m.is_file() => Ok(f),
        _ => Err("not a regular file: pipe it in (… | nccl-find explain -)".into()),
    }
}

/// What the first bytes of a file say it is, where it is no log.
fn not_text(head: &[u8]) -> Option<&'static str> {
    const MAGIC: [(&[u8], &str); 5] = [
        (
            b"\x1f\x8b",
            "gzip-compressed: zcat it | nccl-find explain -",
        ),
        (
            b"\x28\xb5\x2f\xfd",
            "zstd-compressed: zstdcat it | nccl-find explain -",
        ),
        (b"\xfd7zXZ", "xz-compressed: xzcat it | nccl-find explain -"),
        (b"BZh", "bzip2-compressed: bzcat it | nccl-find explain -"),
        (b"\x7fELF", "a program, not a log: skipped"),
    ];
    if let Some((_, why)) = MAGIC.iter().find(|(m, _)| head.starts_with(m)) {
        return Some(why);
    }
    let sample = &head[..head.len().min(8192)];
    let odd = sample
        .iter()
        .filter(|&&b| b < 0x20 && !matches!(b, b'\n' | b'\r' | b'\t' | 0x1b | 0x08))
        .count();
    (sample.len() >= 64 && odd * 10 > sample.len()).then_some("binary, not a log: skipped")
}

/// Where a stream is: bytes carried over in the buffer (the start of a
/// line), whether that line began in a chunk that was cut, the newlines
/// seen, the last byte, and what to note.
#[derive(Default)]
struct Place {
    kept: usize,
    skipping: bool,
    line_no: u64,
    last: u8,
    nul: bool,
    long_lines: u64,
}

impl Place {
    /// Takes in `n` more bytes read into `buf` after the ones kept (0: the
    /// end of input), handing on the candidates of the whole lines among
    /// them. Whether to read on.
    fn feed(
        &mut self,
        buf: &mut [u8],
        n: usize,
        input: usize,
        finder: &Regex,
        take: &mut dyn FnMut(Candidate),
    ) -> bool {
        let end = self.kept + n;
        let eof = n == 0;
        if end == 0 {
            return false;
        }
        let data = &buf[..end];
        self.last = data[end - 1];
        self.nul |= memchr::memchr(0, &data[self.kept..]).is_some();
        // The whole lines in `data`; at the end of input, the rest too.
        let last_nl = memchr::memrchr(b'\n', data);
        let whole = match (last_nl, eof) {
            (_, true) => end,
            (Some(p), false) => p + 1,
            (None, false) if end == buf.len() => {
                // A line longer than a chunk: read its first chunk, and
                // drop the rest of it.
                self.long_lines += u64::from(!self.skipping);
                end
            }
            (None, false) => {
                self.kept = end;
                return true;
            }
        };
        scan(
            &data[..whole],
            self.skipping,
            &mut self.line_no,
            input,
            finder,
            take,
        );
        self.skipping = !eof && last_nl.is_none();
        buf.copy_within(whole..end, 0);
        self.kept = end - whole;
        !eof
    }

    /// What to note of the input, where anything.
    fn note(&self) -> Option<String> {
        let mut notes = Vec::new();
        if self.long_lines > 0 {
            notes.push(format!(
                "{} line(s) longer than {} MiB: their first MiB read",
                self.long_lines,
                CHUNK >> 20
            ));
        }
        if self.nul {
            notes.push("holds NUL bytes: read as text".to_string());
        }
        (!notes.is_empty()).then(|| notes.join("; "))
    }
}

/// Streams one input.
fn stream(
    r: &mut dyn Read,
    buf: &mut [u8],
    input_no: usize,
    finder: &Regex,
    input: &mut Input,
    take: &mut dyn FnMut(Candidate),
) {
    let mut place = Place {
        last: b'\n',
        ..Place::default()
    };
    loop {
        let n = match read_some(r, &mut buf[place.kept..]) {
            Ok(n) => n,
            Err(e) => {
                input.note = Some(format!("read failed after {} bytes ({e})", input.bytes));
                break;
            }
        };
        if input.bytes == 0 && place.kept == 0 {
            if let Some(why) = not_text(&buf[..n]) {
                input.note = Some(why.into());
                return;
            }
        }
        input.read |= n > 0;
        input.bytes += n as u64;
        if !place.feed(buf, n, input_no, finder, take) {
            break;
        }
    }
    // A last line without a newline is a line too.
    input.lines = place.line_no + u64::from(place.last != b'\n');
    if input.note.is_none() {
        input.note = place.note();
    }
}

/// Reads what is there, retrying on interruption and on a non-blocking
/// file's `WouldBlock` (a regular file never blocks).
fn read_some(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Hands on the lines of `data` (whole lines, or a cut one at its end)
/// that hold a known message's words. `continued`: the first line of
/// `data` is the rest of a line already cut, and not a line of its own.
fn scan(
    data: &[u8],
    continued: bool,
    line_no: &mut u64,
    input: usize,
    finder: &Regex,
    take: &mut dyn FnMut(Candidate),
) {
    let (mut counted, mut from) = (0usize, 0usize);
    if continued {
        match memchr::memchr(b'\n', data) {
            Some(p) => from = p + 1,
            None => return,
        }
    }
    let mut next_line_start = from;
    while let Some(m) = finder.find_at(data, from) {
        let start = memchr::memrchr(b'\n', &data[..m.start()]).map_or(0, |p| p + 1);
        if start < next_line_start {
            from = next_line_start.max(m.end());
            if from >= data.len() {
                break;
            }
            continue;
        }
        let end = memchr::memchr(b'\n', &data[m.start()..]).map_or(data.len(), |p| m.start() + p);
        *line_no += memchr::memchr_iter(b'\n', &data[counted..start]).count() as u64;
        counted = start;
        let mut line = &data[start..end];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        take(Candidate {
            input,
            line: *line_no + 1,
            text: String::from_utf8_lossy(line).into_owned(),
        });
        next_line_start = end + 1;
        from = next_line_start;
        if from >= data.len() {
            break;
        }
    }
    *line_no += memchr::memchr_iter(b'\n', &data[counted..]).count() as u64;
}
