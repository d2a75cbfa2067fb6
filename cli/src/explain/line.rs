//! One log line, taken apart: the launchers' prefixes (torchrun's
//! `[rank3]:` and `[default0]:`, `srun --label`'s `3: `, `mpirun
//! --tag-output`'s `[1,3]<stderr>:`, pdsh's `host: `), a timestamp (NCCL's
//! `[2026-11-29 10:00:00]`, Python logging's, glog's `[E1129 10:00:00.1
//! file.cpp:12]`), and NCCL's own shape (`host:pid:tid [dev] file.cc:line
//! NCCL WARN …`), leaving the message.

use std::sync::OnceLock;

use regex::Regex;

/// What a line's prefixes say of where it came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Line<'a> {
    /// The global rank, from a launcher's prefix or the message.
    pub rank: Option<u32>,
    /// A local rank, from torchrun's `[default0]:`.
    pub local_rank: Option<u32>,
    /// The host: NCCL's, or a launcher's.
    pub host: Option<&'a str>,
    /// NCCL's process id.
    pub pid: Option<u32>,
    /// When, where the line says.
    pub time: Option<Stamp>,
    /// NCCL's level (`WARN`, `INFO`, `TRACE`), and its source file.
    pub level: Option<&'a str>,
    pub file: Option<&'a str>,
    /// The message, after every prefix.
    pub text: &'a str,
}

/// A time of day on a date, as a log line gives it (without a zone). A
/// year is not always there (glog's): then only the rest compares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stamp {
    pub year: Option<u32>,
    /// Seconds from the start of the year (months of 31 days: an order,
    /// not a duration).
    pub secs: f64,
}

impl Stamp {
    /// Whether `self` is before `other`, where the two compare.
    pub fn before(&self, other: &Stamp) -> bool {
        match (self.year, other.year) {
            (Some(a), Some(b)) if a != b => a < b,
            _ => self.secs < other.secs,
        }
    }

    fn new(year: Option<u32>, month: u32, day: u32, h: u32, m: u32, s: f64) -> Stamp {
        let secs = (((month * 31 + day) * 24 + h) * 60 + m) as f64 * 60.0 + s;
        Stamp { year, secs }
    }
}

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("a fixed expression"))
}

/// What a launcher's prefix says: the rank, a local rank, a host.
struct Prefix<'a> {
    rest: &'a str,
    rank: Option<u32>,
    local_rank: Option<u32>,
    host: Option<&'a str>,
}

/// A launcher's prefix: `[rank3]:`, `[default0]:`, `[1,3]<stderr>:`,
/// `3: `, or an address and `: ` (pdsh's).
fn launcher(text: &str) -> Option<Prefix<'_>> {
    static P: OnceLock<Regex> = OnceLock::new();
    let p = re(
        &P,
        r"^\s*(?:\[rank(\d+)\]:|\[[A-Za-z_]*?(\d+)\]:|\[\d+,(\d+)\]<std(?:out|err)>:|(\d{1,6}): |(\d{1,3}(?:\.\d{1,3}){3}): )\s?",
    );
    let c = p.captures(text)?;
    let num = |i| c.get(i).and_then(|m| m.as_str().parse().ok());
    Some(Prefix {
        rest: &text[c.get(0)?.end()..],
        rank: num(1).or(num(3)).or(num(4)),
        local_rank: num(2),
        host: c.get(5).map(|m| m.as_str()),
    })
}

/// A timestamp at the start: `[2026-11-29 10:00:00]`, `2026-11-29
/// 10:00:00,123`, `[2026-11-29 10:00:00 TP12]`, glog's `[E1129
/// 10:00:00.123 file.cpp:12]` or `E1129 10:00:00.123 …]`.
fn timestamp(text: &str) -> Option<(&str, Stamp)> {
    static P: OnceLock<Regex> = OnceLock::new();
    let p = re(
        &P,
        r"^\s*\[?(?:(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d(?:[.,]\d+)?)[^\]\s]*(?:\s[^\]\s]*)?\]?|[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?)[^\]]*\])\s?",
    );
    let c = p.captures(text)?;
    let n = |i| c.get(i).and_then(|m| m.as_str().parse::<u32>().ok());
    let stamp = if c.get(1).is_some() {
        let s = c.get(6)?.as_str().replace(',', ".").parse().ok()?;
        Stamp::new(n(1), n(2)?, n(3)?, n(4)?, n(5)?, s)
    } else {
        let s = c.get(11)?.as_str().parse().ok()?;
        Stamp::new(None, n(7)?, n(8)?, n(9)?, n(10)?, s)
    };
    Some((&text[c.get(0)?.end()..], stamp))
}

/// NCCL's own shape: `host:pid:tid [dev] file.cc:line (func) NCCL WARN
/// msg`, `host:pid:tid [dev] NCCL INFO msg`, the old `… file.cu:61 WARN`,
/// and TRACE's `[dev] 12.5 func:line NCCL TRACE`.
struct Nccl<'a> {
    host: Option<&'a str>,
    pid: Option<u32>,
    level: &'a str,
    file: Option<&'a str>,
    text: &'a str,
}

fn nccl(text: &str) -> Option<Nccl<'_>> {
    static P: OnceLock<Regex> = OnceLock::new();
    let p = re(
        &P,
        r"^(?:([^\s:\[\]]+):(\d+):\d+ )?\[\d+\] (?:[\d.]+ )?(?:([\w./<>-]+):\d+ (?:\([^)]*\) )?)?(?:NCCL )?(WARN|INFO|TRACE|CALL)\b ?",
    );
    let c = p.captures(text)?;
    Some(Nccl {
        host: c.get(1).map(|m| m.as_str()),
        pid: c.get(2).and_then(|m| m.as_str().parse().ok()),
        file: c.get(3).map(|m| m.as_str()),
        level: c.get(4)?.as_str(),
        text: &text[c.get(0)?.end()..],
    })
}

/// torch's `[Rank 3]` and `[PG ID 0 PG GUID 0(default_pg) Rank 3]`.
fn torch_rank(text: &str) -> Option<u32> {
    static P: OnceLock<Regex> = OnceLock::new();
    let p = re(&P, r"\bRank (\d+)\]");
    p.captures(text)?.get(1)?.as_str().parse().ok()
}

/// Takes `text` apart.
pub fn parse(text: &str) -> Line<'_> {
    let mut line = Line {
        text: text.trim_start(),
        ..Line::default()
    };
    // Prefixes nest (a launcher's around a timestamp around NCCL's): take
    // them off in turn, a few at most.
    for _ in 0..4 {
        let t = line.text;
        if let Some(p) = launcher(t) {
            line.rank = line.rank.or(p.rank);
            line.local_rank = line.local_rank.or(p.local_rank);
            line.host = line.host.or(p.host);
            line.text = p.rest;
            continue;
        }
        if let Some((rest, stamp)) = timestamp(t) {
            line.time = line.time.or(Some(stamp));
            line.text = rest;
            continue;
        }
        break;
    }
    if let Some(n) = nccl(line.text) {
        line.host = n.host.or(line.host);
        line.pid = n.pid;
        line.level = Some(n.level);
        line.file = n.file;
        line.text = n.text;
    }
    if line.rank.is_none() {
        line.rank = torch_rank(line.text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launchers_prefixes_come_off() {
        let l = parse(
            "[rank3]: torch.distributed.DistBackendError: NCCL error in: x.cpp:1, internal error",
        );
        assert_eq!(
            (l.rank, l.text.starts_with("torch.distributed")),
            (Some(3), true)
        );
        let l = parse("[default1]:node2:42:43 [1] NCCL INFO Bootstrap: Using eth0:10.0.0.2<0>");
        assert_eq!(
            (l.local_rank, l.host, l.pid, l.level, l.text),
            (
                Some(1),
                Some("node2"),
                Some(42),
                Some("INFO"),
                "Bootstrap: Using eth0:10.0.0.2<0>"
            )
        );
        let l = parse("[1,3]<stderr>:node4:7:8 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer node1<1>");
        assert_eq!(
            (l.rank, l.host, l.file, l.level),
            (Some(3), Some("node4"), Some("misc/socket.cc"), Some("WARN"))
        );
        let l = parse("12: node3:1:2 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth9");
        assert_eq!((l.rank, l.host), (Some(12), Some("node3")));
        let l = parse(
            "10.0.23.10: node2:307367:307586 [0] transport/net_ib.cc:1038 NCCL WARN NET/IB : x",
        );
        assert_eq!(
            (l.host, l.file, l.text),
            (Some("node2"), Some("transport/net_ib.cc"), "NET/IB : x")
        );
    }

    #[test]
    fn timestamps_and_ncclss_shapes() {
        let l = parse("[2026-11-29 10:00:01] node1:5:6 [0] init.cc:943 (initTransportsRank) NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60");
        assert_eq!(l.time.map(|t| t.year), Some(Some(2026)));
        assert_eq!(
            (l.file, l.text.starts_with("Duplicate")),
            (Some("init.cc"), true)
        );
        let a = parse("[rank0]:[E1129 10:00:00.123456789 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 0] Watchdog caught collective operation timeout");
        assert_eq!((a.rank, a.time.is_some()), (Some(0), true));
        assert!(a.text.starts_with("[PG ID 0"));
        let b = parse("[E ProcessGroupNCCL.cpp:474] [Rank 2] Watchdog caught");
        assert_eq!(b.rank, Some(2));
        let old =
            parse("node1:4826:4826 [0] misc/ibvwrap.cu:61 WARN Failed to open libibverbs.so[.1]");
        assert_eq!(
            (old.level, old.file),
            (Some("WARN"), Some("misc/ibvwrap.cu"))
        );
        let t1 = parse("2024-02-09 09:09:15,164 x").time.unwrap();
        let t2 = parse("[2024-02-09 09:09:16] x").time.unwrap();
        assert!(t1.before(&t2) && !t2.before(&t1));
        assert_eq!(
            parse("ImportError: x: undefined symbol: ncclCommRegister").host,
            None
        );
        assert_eq!(
            parse("NCCL version 2.28.9+cuda13.0").text,
            "NCCL version 2.28.9+cuda13.0"
        );
    }
}
