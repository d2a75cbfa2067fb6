//! What a job's log says, line by line. Each `ncclResult_t` of `nccl.h`,
//! by its name, NCCL's own words for it (`ncclGetErrorString`), and the
//! usual cause and fix where a run fails with it ([`RESULTS`]); and the one
//! table of the lines that name or follow a failure ([`MESSAGES`], in
//! `table.rs`): NCCL's own format text, checked against its source at every
//! release tag (`formats.txt`, written by `scripts/nccl-messages`), and the
//! lines of the programs around it. [`Known`] reads a line by the table;
//! `nccl-find smoke` ends a failed call on it, `explain` reads a job's logs
//! by it.

mod table;

pub use table::{MESSAGES, UNKNOWN_WARNING};

use crate::rules::failures::Failure;
use regex::{Regex, RegexSet};

/// One result code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Result {
    /// Its value.
    pub code: i32,
    /// Its name in `nccl.h` (`ncclSystemError`).
    pub name: &'static str,
    /// NCCL's words for it, without the advice NCCL adds.
    pub words: &'static str,
    /// The usual cause and fix, where a run fails with it.
    pub cause: &'static str,
}

/// Every result code of `nccl.h` (`ncclResult_t`), in order: a new one in
/// a release the test command caches fails this module's tests until it is
/// here.
pub const RESULTS: [Result; 9] = [
    Result {
        code: 0,
        name: "ncclSuccess",
        words: "no error",
        cause: "",
    },
    Result {
        code: 1,
        name: "ncclUnhandledCudaError",
        words: "unhandled cuda error",
        cause:
            "a driver or CUDA problem, or out of memory: check nvidia-smi and the driver version \
                (nccl-find doctor)",
    },
    Result {
        code: 2,
        name: "ncclSystemError",
        words: "unhandled system error",
        cause: "NCCL picked a network interface another node cannot reach (docker0, virbr0, an \
                unroutable address), or /dev/shm is too small: set NCCL_SOCKET_IFNAME, \
                NCCL_IB_DISABLE=1 without working RDMA, NCCL_SHM_DISABLE=1 or a larger /dev/shm \
                (nccl-find doctor checks all of these)",
    },
    Result {
        code: 3,
        name: "ncclInternalError",
        words: "internal error",
        cause:
            "no usable network interface (\"no socket interface found\"): set NCCL_SOCKET_IFNAME",
    },
    Result {
        code: 4,
        name: "ncclInvalidArgument",
        words: "invalid argument",
        cause: "a call NCCL refused: NCCL_DEBUG=WARN says which argument",
    },
    Result {
        code: 5,
        name: "ncclInvalidUsage",
        words: "invalid usage",
        cause: "two ranks on one GPU (a wrong local-rank mapping), or no interface for NCCL's \
                bootstrap: give each rank its own GPU; NCCL_DEBUG=WARN says which",
    },
    Result {
        code: 6,
        name: "ncclRemoteError",
        words: "remote process exited or there was a network error",
        cause: "a peer died or the network dropped: check the other ranks' logs",
    },
    Result {
        code: 7,
        name: "ncclInProgress",
        words: "NCCL operation in progress",
        cause: "a non-blocking call not yet finished: poll ncclCommGetAsyncError",
    },
    Result {
        code: 8,
        name: "ncclTimeout",
        words: "timeout",
        cause: "an operation ran past NCCL's own timeout: a rank is stuck or gone; ask NCCL's RAS \
                service which (nccl-find ras)",
    },
];

/// Who prints a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Printer {
    /// NCCL itself: its rows are its source's format text.
    Nccl,
    /// A network plugin, through NCCL's logger.
    Plugin,
    /// PyTorch (and what runs on it: DeepSpeed, Accelerate, torchrun).
    Torch,
    Jax,
    Paddle,
    Vllm,
    /// nccl-tests, and programs that print NCCL's result the same way.
    NcclTests,
    /// The dynamic loader.
    Loader,
    /// Python itself.
    Python,
    /// Slurm.
    Slurm,
    /// The kernel, through the shell or the launcher.
    Kernel,
    /// `lspci -vvv`, pasted into a log.
    Lspci,
}

impl Printer {
    /// Its name in `--json`.
    pub fn id(self) -> &'static str {
        match self {
            Printer::Nccl => "nccl",
            Printer::Plugin => "plugin",
            Printer::Torch => "torch",
            Printer::Jax => "jax",
            Printer::Paddle => "paddle",
            Printer::Vllm => "vllm",
            Printer::NcclTests => "nccl-tests",
            Printer::Loader => "loader",
            Printer::Python => "python",
            Printer::Slurm => "slurm",
            Printer::Kernel => "kernel",
            Printer::Lspci => "lspci",
        }
    }
}

/// A fact of the run a line states: what ranks must share, or how far a
/// rank came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fact {
    /// NCCL's release (`version`).
    Version,
    /// The interfaces NCCL's bootstrap took (`ifaces`: ` eth0:10.0.0.1<0>`).
    Bootstrap,
    /// The interfaces NCCL's socket transport took (`ifaces`).
    SocketIfaces,
    /// The RDMA devices NCCL took (`devices`: ` [0]mlx5_0:1/RoCE`).
    IbDevices,
    /// `NCCL_SOCKET_IFNAME` as NCCL read it (`ifname`).
    Ifname,
    /// The network NCCL uses (`network`: IB, Socket, a plugin's).
    Network,
    /// A network plugin loaded (`plugin`).
    NetPlugin,
    /// No network plugin: NCCL's own.
    NoNetPlugin,
    /// The driver's CUDA version (`driver`).
    Driver,
    /// A communicator began (`rank`, `nranks`).
    InitStart,
    /// A communicator is ready (`rank`, `nranks`).
    InitDone,
    /// A process exited (`exit`).
    Exited,
    /// A Python traceback began.
    Traceback,
    /// A process crashed.
    Crash,
    /// A warning of NCCL's that no row knows (`words`).
    Warning,
    /// NCCL passed over something and went on (a network plugin that did
    /// not start on a host without its hardware).
    Passed,
}

/// What a line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Says {
    /// The cause of a failure.
    Cause(Failure),
    /// What follows from a failure elsewhere; the failure where no cause
    /// shows.
    Symptom(Failure),
    /// A fact of the run.
    Fact(Fact),
}

/// Where a field's words change what a line says: `(field, words, says)`.
/// `words` is found in the field's value, or, after `=`, is all of it. The
/// fields `level` (`WARN`, `INFO`) and `file` (NCCL's source file) are the
/// line's own.
pub type Refine = (&'static str, &'static str, Says);

/// One row: the lines a program prints, and what they say.
#[derive(Debug, Clone, Copy)]
pub struct Message {
    pub printer: Printer,
    /// The format text of each variant, in C's `printf` notation (`%s`,
    /// `%d` … for what each line fills in), as the program's source has it.
    pub formats: &'static [&'static str],
    /// Names for what a line fills in: `(text, name)` names each conversion
    /// right after `text` (`""`: one at the start of the format).
    pub fields: &'static [(&'static str, &'static str)],
    pub says: Says,
    /// Field values that change what the line says.
    pub refine: &'static [Refine],
    /// Where set, only lines whose field holds these words are this row.
    pub only: Option<(&'static str, &'static str)>,
}

impl Message {
    const fn refined(mut self, refine: &'static [Refine]) -> Message {
        self.refine = refine;
        self
    }

    const fn only(mut self, only: (&'static str, &'static str)) -> Message {
        self.only = Some(only);
        self
    }
}

/// Whether a field's `value` holds `words` (after `=`: is them).
fn holds(value: &str, words: &str) -> bool {
    match words.strip_prefix('=') {
        Some(exact) => value == exact,
        None => value.contains(words),
    }
}

/// A `printf` format's fixed texts and conversions, alternating: the
/// fixed text before each conversion, then the text after the last.
pub fn split_format(format: &str) -> (Vec<String>, Vec<&str>) {
    let b = format.as_bytes();
    let (mut fixed, mut convs) = (Vec::new(), Vec::new());
    let mut lit = String::new();
    let (mut at, mut from) = (0, 0);
    while at < b.len() {
        if b[at] != b'%' {
            at += 1;
            continue;
        }
        lit.push_str(&format[from..at]);
        if b.get(at + 1) == Some(&b'%') {
            lit.push('%');
            at += 2;
            from = at;
            continue;
        }
        let mut end = at + 1;
        while end < b.len() && b"-+ #0123456789.*".contains(&b[end]) {
            end += 1;
        }
        while end < b.len() && b"hlLqjzt".contains(&b[end]) {
            end += 1;
        }
        end = (end + 1).min(b.len());
        fixed.push(std::mem::take(&mut lit));
        convs.push(&format[at..end]);
        at = end;
        from = end;
    }
    lit.push_str(&format[from..]);
    fixed.push(lit);
    (fixed, convs)
}

/// The regular expression of a format: its fixed texts as they are, each
/// conversion as what it prints, each captured; with the name `fields`
/// gives each capture, in order.
fn pattern(
    format: &str,
    fields: &'static [(&'static str, &'static str)],
) -> (String, Vec<Option<&'static str>>) {
    let (fixed, convs) = split_format(format);
    let (mut re, mut names) = (String::new(), Vec::new());
    for (i, f) in fixed.iter().enumerate() {
        re.push_str(&regex::escape(f));
        let Some(conv) = convs.get(i) else { break };
        let last = i + 1 == convs.len() && fixed[i + 1].is_empty();
        let class = match conv.as_bytes()[conv.len() - 1] {
            b'd' | b'i' => r"-?\d+",
            b'u' => r"\d+",
            b'x' | b'X' => r"[0-9a-fA-F]+",
            b'c' => ".",
            b'p' | b'f' | b'g' | b'e' => r"\S+",
            _ if last => ".*",
            _ => ".*?",
        };
        re.push('(');
        re.push_str(class);
        re.push(')');
        names.push(
            fields
                .iter()
                .find(|(key, _)| match key.is_empty() {
                    true => f.is_empty(),
                    false => f.ends_with(key),
                })
                .map(|(_, n)| *n),
        );
    }
    (re, names)
}

/// The line's own fields, which [`Refine`] may ask for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shape<'a> {
    /// NCCL's level: `WARN`, `INFO`, `TRACE`.
    pub level: Option<&'a str>,
    /// NCCL's source file (`misc/socket.cc`).
    pub file: Option<&'a str>,
}

/// A line known by the table: its row, what it says, and the fields it
/// filled in.
#[derive(Debug, Clone)]
pub struct Hit {
    pub row: &'static Message,
    pub says: Says,
    pub fields: Vec<(&'static str, String)>,
}

impl Hit {
    /// The value of field `name`.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The table, made ready to read lines: one [`RegexSet`] over every
/// format of every row.
pub struct Known {
    set: RegexSet,
    /// Each pattern of `set`: its row, its own expression (for the
    /// fields; built when a line first needs it), and the names of its
    /// captures.
    each: Vec<Pattern>,
}

/// A pattern of [`Known`]'s set: its row, its expression (the text, and
/// the expression built from it once a line needs it), and the names of
/// its captures.
type Pattern = (
    usize,
    (String, std::sync::OnceLock<Regex>),
    Vec<Option<&'static str>>,
);

/// A field's value is kept to this many bytes.
const FIELD_MAX: usize = 256;

impl Known {
    /// The table's expressions, built.
    pub fn new() -> Known {
        let mut each = Vec::new();
        let mut all = Vec::new();
        for (r, m) in MESSAGES.iter().enumerate() {
            for f in m.formats {
                let (re, names) = pattern(f, m.fields);
                all.push(re.clone());
                each.push((r, (re, std::sync::OnceLock::new()), names));
            }
        }
        let set = RegexSet::new(&all).expect("the table's expressions");
        Known { set, each }
    }

    /// Words that find every known line: each format of the table, and
    /// each of `more`, holds one of them, so a line that holds none is no
    /// row's. Few words search fast (a log's bytes are mostly lines that
    /// are no row's): chosen greedily, the word of 8 to 12 bytes that the
    /// most formats not yet found hold, the longer on a tie.
    pub fn words(more: &[&str]) -> Vec<String> {
        // Each format's fixed texts (each of `more` is one).
        let mut formats: Vec<Vec<String>> = MESSAGES
            .iter()
            .flat_map(|m| m.formats.iter().map(|f| split_format(f).0))
            .collect();
        formats.extend(more.iter().map(|w| vec![w.to_string()]));
        let n = formats.len();
        assert!(n <= 256, "the finder's sets hold 256 formats");
        type Bits = [u64; 4];
        // Each candidate word, with the formats that hold it: the windows
        // of 8 to 12 bytes of its texts; a format whose texts are all
        // shorter, by its longest.
        let mut held: std::collections::HashMap<&str, Bits> = Default::default();
        for (o, texts) in formats.iter().enumerate() {
            let mut mark = |word| held.entry(word).or_insert([0; 4])[o / 64] |= 1 << (o % 64);
            let longest = texts
                .iter()
                .max_by_key(|t| t.len())
                .map_or("", String::as_str);
            if longest.len() < 8 {
                mark(longest);
                continue;
            }
            for t in texts {
                for len in 8..=12.min(t.len()) {
                    for at in 0..=t.len() - len {
                        if let Some(word) = t.get(at..at + len) {
                            mark(word);
                        }
                    }
                }
            }
        }
        let mut left: Bits = [0; 4];
        for o in 0..n {
            left[o / 64] |= 1 << (o % 64);
        }
        let count = |bits: &Bits, left: &Bits| -> u32 {
            bits.iter()
                .zip(left)
                .map(|(a, b)| (a & b).count_ones())
                .sum()
        };
        let mut out = Vec::new();
        while left != [0; 4] {
            let Some((word, bits)) = held
                .iter()
                .max_by_key(|(w, bits)| (count(bits, &left), w.len(), std::cmp::Reverse(**w)))
            else {
                break;
            };
            if count(bits, &left) == 0 {
                break;
            }
            for (l, b) in left.iter_mut().zip(bits.iter()) {
                *l &= !b;
            }
            out.push(word.to_string());
        }
        out
    }

    /// What `text` (a line without its prefixes) says, by the first row
    /// that knows it.
    pub fn read(&self, text: &str, shape: Shape) -> Option<Hit> {
        for i in self.set.matches(text).iter() {
            let (r, (pattern, built), names) = &self.each[i];
            let re = built.get_or_init(|| Regex::new(pattern).expect("a format's expression"));
            let row = &MESSAGES[*r];
            let Some(caps) = re.captures(text) else {
                continue;
            };
            let mut fields = Vec::new();
            for (g, name) in names.iter().enumerate() {
                if let (Some(n), Some(m)) = (name, caps.get(g + 1)) {
                    if fields.iter().any(|(k, _): &(&str, String)| k == n) {
                        continue;
                    }
                    let mut v = m.as_str().trim();
                    if v.len() > FIELD_MAX {
                        let mut cut = FIELD_MAX;
                        while !v.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        v = &v[..cut];
                    }
                    fields.push((*n, v.to_string()));
                }
            }
            let value = |name: &str| match name {
                "level" => shape.level,
                "file" => shape.file,
                _ => fields
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.as_str()),
            };
            if let Some((f, words)) = row.only {
                if !value(f).is_some_and(|v| holds(v, words)) {
                    continue;
                }
            }
            let says = row
                .refine
                .iter()
                .find(|(f, words, _)| value(f).is_some_and(|v| holds(v, words)))
                .map_or(row.says, |(_, _, s)| *s);
            return Some(Hit { row, says, fields });
        }
        None
    }
}

/// The first of `lines` (NCCL's, from a failed call) that names a cause or
/// a failure, and what it says.
pub fn first_known<'a>(known: &Known, lines: &'a [String]) -> Option<(&'a str, Hit)> {
    lines.iter().find_map(|l| {
        let text = l.split(" NCCL WARN ").last().unwrap_or(l).trim();
        let hit = known.read(text, Shape::default())?;
        (!matches!(hit.says, Says::Fact(_))).then_some((text, hit))
    })
}

/// The result whose words (`ncclGetErrorString`) begin `words`.
pub fn result_by_words(words: &str) -> Option<&'static Result> {
    RESULTS
        .iter()
        .skip(1)
        .find(|r| words.trim_start().starts_with(r.words))
}

/// The result `code`, where `nccl.h` has it.
pub fn result(code: i32) -> Option<&'static Result> {
    RESULTS.iter().find(|r| r.code == code)
}

/// What to do after a call failed with `code`, in one sentence that leads
/// with the likely cause.
pub fn likely(code: i32) -> String {
    match result(code) {
        Some(r) if !r.cause.is_empty() => format!("Likely cause ({}): {}.", r.name, r.cause),
        _ => "Run with NCCL_DEBUG=INFO for NCCL's own account.".into(),
    }
}

#[cfg(test)]
mod tests;
