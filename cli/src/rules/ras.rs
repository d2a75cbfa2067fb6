//! NCCL's RAS service as the NCCL that runs has it (`src/ras/` of its
//! source): whether it answers at all (every process of a job serves it,
//! from 2.24.3, unless `NCCL_RAS_ENABLE=0`), where (`NCCL_RAS_ADDR`,
//! `localhost:28028` by default), what may see it (anyone who reaches the
//! address), and which questions it takes (`SET FORMAT json` from 2.28.7;
//! before, it answers `ERROR` and the report comes as text); and which of
//! those questions have crashed the job they asked about, release by
//! release ([`HAZARDS`]), so that asking never does.

use nccl_find::explain::Change;
use nccl_find::Version;

/// Where NCCL's RAS service listens unless `NCCL_RAS_ADDR` says otherwise.
pub const DEFAULT_HOST: &str = "localhost";
pub const DEFAULT_PORT: u16 = 28028;

/// `HOST:PORT` (as `NCCL_RAS_ADDR` gives it, an IPv6 host in brackets) as
/// its host, brackets taken off, and its port where it names one.
pub fn split_addr(addr: &str) -> (&str, Option<u16>) {
    match addr.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => (
            h.trim_start_matches('[').trim_end_matches(']'),
            p.parse().ok(),
        ),
        _ => (addr.trim_start_matches('[').trim_end_matches(']'), None),
    }
}

/// NCCL reads `NCCL_RAS_ENABLE` as a number: 0 turns the service off.
pub fn turned_off(v: Option<&str>) -> bool {
    v.is_some_and(|v| v.trim().parse::<i64>() == Ok(0))
}

/// Whether NCCL's RAS service at `addr` (`NCCL_RAS_ADDR`'s `HOST:PORT`)
/// listens beyond this host: any host but `localhost` and the loopback
/// addresses (`0.0.0.0` is every interface).
pub fn listens_beyond_this_host(addr: &str) -> bool {
    let (host, _) = split_addr(addr);
    if host.eq_ignore_ascii_case("localhost") {
        return false;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => !ip.is_loopback(),
        Err(_) => true,
    }
}

/// The first release that serves it (`2.24.3`), for messages.
pub fn first_release() -> Version {
    Change::RasService.since()
}

/// A question `nccl-find ras` can put to the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Question {
    /// `SET FORMAT json`, then `STATUS` (2.28.7 and newer).
    Json,
    /// `STATUS`, the report as text.
    Text,
    /// `VERBOSE STATUS`: the text report with every rank listed.
    Verbose,
    /// A second report, a few seconds after the first.
    Again,
}

impl Question {
    /// What goes on the wire.
    pub fn words(self) -> &'static str {
        match self {
            Question::Json => "SET FORMAT json + STATUS",
            Question::Text => "STATUS",
            Question::Verbose => "VERBOSE STATUS",
            Question::Again => "a second STATUS",
        }
    }
}

/// How a hazard's last release is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// No release fixes it yet.
    Open,
    /// This release's notes fix it.
    Fixed((u32, u32, u32)),
    /// This release rewrote the code it is in; nothing says it is fixed.
    Rewritten((u32, u32, u32)),
}

/// A way NCCL's RAS service has crashed the job it serves.
#[derive(Debug)]
pub struct Hazard {
    /// The thread that reports it: `NVIDIA/nccl#N`.
    pub thread: u32,
    /// The release the thread reports it on.
    pub seen: &'static str,
    /// The first release with the code it comes from.
    pub from: (u32, u32, u32),
    /// Its end.
    pub until: Until,
    /// The questions that set it off; none: it crashes with no question.
    pub asks: &'static [Question],
    /// What happens, in a few words.
    pub what: &'static str,
}

/// Every RAS hazard known, from the threads that report them, NCCL's
/// release notes (`fixes.txt`) and its source at each tag
/// (`ras-source.txt`, both written by `scripts/nccl-messages`). The tests
/// turn red when a release's notes fix a hazard this table calls open, or
/// when a release changes the service's source after the last one the
/// table was checked against (`REVIEWED`, in the tests).
pub const HAZARDS: &[Hazard] = &[
    Hazard {
        thread: 1669,
        seen: "2.26.2",
        from: (2, 24, 3),
        until: Until::Fixed((2, 27, 3)),
        asks: &[Question::Text, Question::Verbose, Question::Again],
        what: "a report asked for while a communicator is being made crashes the process",
    },
    Hazard {
        thread: 1718,
        seen: "2.26.5",
        from: (2, 24, 3),
        until: Until::Fixed((2, 27, 3)),
        asks: &[Question::Text, Question::Verbose, Question::Again],
        what: "asking again and again, even every 5 s, crashes the job",
    },
    Hazard {
        thread: 1762,
        seen: "2.27.3",
        from: (2, 27, 3),
        until: Until::Open,
        asks: &[Question::Verbose],
        what: "VERBOSE STATUS crashes a 128-GPU job with a high chance (memory corruption)",
    },
    Hazard {
        thread: 2346,
        seen: "2.29.7",
        from: (2, 27, 3),
        until: Until::Open,
        asks: &[Question::Text, Question::Verbose],
        what:
            "a communicator being made leaves an empty status in the report, and the text report \
               segfaults formatting it (seen at 256 GPUs; the JSON report is written without that \
               step)",
    },
    Hazard {
        thread: 1996,
        seen: "2.27.7",
        from: (2, 26, 2),
        until: Until::Rewritten((2, 29, 2)),
        asks: &[],
        what: "a segfault in rasMsgHandlePeersUpdate, with no question asked; every release from \
               2.26.2 to 2.28.9 has that code",
    },
];

/// A release as numbers: `(2, 28, 9)`.
type Triple = (u32, u32, u32);

/// The releases one service may be: exactly one, or a span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Releases {
    /// Read from the library its process maps.
    Exactly(Version),
    /// Known only to lie in `[from, to)` (`to`: none known above).
    Between((u32, u32, u32), Option<(u32, u32, u32)>),
}

impl Releases {
    /// Any release that serves RAS, before the service was asked.
    pub fn any() -> Releases {
        let v = Change::RasService.since();
        Releases::Between((v.major, v.minor, v.patch), None)
    }

    /// What answering `SET FORMAT json` with `OK` (`json`) or `ERROR` says.
    pub fn by_format(json: bool) -> Releases {
        let v = Change::RasJson.since();
        let j = (v.major, v.minor, v.patch);
        match json {
            true => Releases::Between(j, None),
            false => Releases::Between(Releases::any().span().0, Some(j)),
        }
    }

    /// These releases, narrowed by what `SET FORMAT json` was answered
    /// (`json`: `OK`); where none of them answers so, what the answer says.
    pub fn narrowed(&self, json: bool) -> Releases {
        let by = Releases::by_format(json);
        let ((a, b), (c, d)) = (self.span(), by.span());
        let lo = a.max(c);
        let hi = match (b, d) {
            (Some(b), Some(d)) => Some(b.min(d)),
            (b, d) => b.or(d),
        };
        if hi.is_some_and(|h| h <= lo) {
            return by;
        }
        match self {
            Releases::Exactly(_) => self.clone(),
            _ => Releases::Between(lo, hi),
        }
    }

    /// As a span `[from, to)` (`to`: none known above).
    fn span(&self) -> (Triple, Option<Triple>) {
        match self {
            Releases::Exactly(v) => {
                let t = (v.major, v.minor, v.patch);
                (t, Some((t.0, t.1, t.2 + 1)))
            }
            Releases::Between(a, b) => (*a, *b),
        }
    }

    /// Whether every release here takes `SET FORMAT json`; `None`: some do.
    pub fn json(&self) -> Option<bool> {
        let v = Change::RasJson.since();
        let j = (v.major, v.minor, v.patch);
        match self {
            Releases::Exactly(v) => Some(Change::RasJson.in_release(Some(v))),
            Releases::Between(a, _) if *a >= j => Some(true),
            Releases::Between(_, Some(b)) if *b <= j => Some(false),
            Releases::Between(..) => None,
        }
    }

    /// Whether a release here can have `h`.
    fn meets(&self, h: &Hazard) -> bool {
        let end = match h.until {
            Until::Open => None,
            Until::Fixed(v) | Until::Rewritten(v) => Some(v),
        };
        let (lo, hi) = self.span();
        hi.is_none_or(|hi| h.from < hi) && end.is_none_or(|e| lo < e)
    }
}

/// The hazards `q` sets off in any of `releases`.
pub fn hazards_of(releases: &Releases, q: Question) -> Vec<&'static Hazard> {
    HAZARDS
        .iter()
        .filter(|h| h.asks.contains(&q) && releases.meets(h))
        .collect()
}

/// The hazards of `releases` that need no question: the service crashes
/// the job by itself.
pub fn crashes_by_itself(releases: &Releases) -> Vec<&'static Hazard> {
    HAZARDS
        .iter()
        .filter(|h| h.asks.is_empty() && releases.meets(h))
        .collect()
}

/// `NVIDIA/nccl#N (seen on 2.x.y): what`, for each hazard.
pub fn cited(hazards: &[&Hazard]) -> String {
    hazards
        .iter()
        .map(|h| format!("NVIDIA/nccl#{} (seen on {}): {}", h.thread, h.seen, h.what))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last release whose RAS source and notes the table was checked
    /// against.
    const REVIEWED: &str = "2.30.7";

    fn v(s: &str) -> Releases {
        let n: Vec<u32> = s.split('.').map(|x| x.parse().unwrap()).collect();
        Releases::Exactly(Version::new(n[0], n[1], n[2], ""))
    }

    fn threads(r: &Releases, q: Question) -> Vec<u32> {
        hazards_of(r, q).iter().map(|h| h.thread).collect()
    }

    #[test]
    fn each_release_has_the_hazards_its_threads_and_source_say() {
        use Question::*;
        assert_eq!(threads(&v("2.24.3"), Text), [1669, 1718]);
        assert_eq!(threads(&v("2.26.6"), Again), [1669, 1718]);
        assert_eq!(threads(&v("2.27.3"), Verbose), [1762, 2346]);
        assert_eq!(threads(&v("2.27.3"), Text), [2346]);
        assert_eq!(threads(&v("2.27.3"), Again), [0u32; 0]);
        assert_eq!(threads(&v("2.28.9"), Json), [0u32; 0]);
        assert_eq!(threads(&v("2.32.3"), Text), [2346]);
        let by_itself =
            |r: &Releases| -> Vec<u32> { crashes_by_itself(r).iter().map(|h| h.thread).collect() };
        assert_eq!(by_itself(&v("2.26.2")), [1996]);
        assert_eq!(by_itself(&v("2.28.9")), [1996]);
        assert_eq!(by_itself(&v("2.29.2")), [0u32; 0]);
        assert_eq!(by_itself(&v("2.25.1")), [0u32; 0]);
        // What the format question says of a release it cannot read.
        let old = Releases::by_format(false);
        assert_eq!(old.json(), Some(false));
        assert_eq!(threads(&old, Text), [1669, 1718, 2346]);
        assert_eq!(threads(&Releases::by_format(true), Json), [0u32; 0]);
        assert_eq!(Releases::any().json(), None);
        // A process that maps 2.28.3 and 2.28.9, and answers `ERROR`: 2.28.3.
        let both = Releases::Between((2, 28, 3), Some((2, 28, 10)));
        assert_eq!(both.json(), None);
        let old = both.narrowed(false);
        assert_eq!(old, Releases::Between((2, 28, 3), Some((2, 28, 7))));
        assert_eq!(threads(&old, Text), [2346]);
        assert_eq!(
            both.narrowed(true),
            Releases::Between((2, 28, 7), Some((2, 28, 10)))
        );
        // An exact release that answers against its kind: the answer wins.
        assert_eq!(v("2.28.9").narrowed(false), Releases::by_format(false));
        assert_eq!(v("2.28.9").narrowed(true), v("2.28.9"));
    }

    /// A hazard the table calls open that a release's notes fix, or one
    /// it calls fixed there that those notes do not name; and a release
    /// after [`REVIEWED`] that changed the service's source: each turns
    /// this red until the table knows it.
    #[test]
    fn the_table_knows_every_fix_and_every_change_to_the_source() {
        let fixes = include_str!("fixes.txt");
        for h in HAZARDS {
            let named: Vec<&str> = fixes
                .lines()
                .filter(|l| l.contains(&format!("#{}", h.thread)))
                .filter_map(|l| l.split('\t').next())
                .collect();
            match h.until {
                Until::Fixed((a, b, c)) => {
                    assert_eq!(named, [format!("{a}.{b}.{c}")], "#{}", h.thread)
                }
                _ => assert!(named.is_empty(), "#{}: fixed in {named:?}", h.thread),
            }
        }
        let source = include_str!("ras-source.txt");
        let mut last_tree = "";
        let mut reviewed = false;
        for l in source.lines().filter(|l| !l.starts_with('#')) {
            let (release, tree) = l.split_once('\t').unwrap();
            if reviewed && tree != last_tree {
                panic!(
                    "NCCL {release} changed the RAS service's source after {REVIEWED}: read its \
                     src/ras and notes, update HAZARDS, then REVIEWED"
                );
            }
            reviewed |= release == REVIEWED;
            last_tree = tree;
        }
        assert!(reviewed, "{REVIEWED} is not in ras-source.txt");
        // Each hazard starts at a release that changed the source.
        for h in HAZARDS {
            let (a, b, c) = h.from;
            assert!(source.contains(&format!("{a}.{b}.{c}\t")), "#{}", h.thread);
        }
    }

    #[test]
    fn a_loopback_address_stays_on_this_host() {
        for a in [
            "localhost:28028",
            "127.0.0.1:28028",
            "[::1]:28028",
            "127.1.2.3:1",
            "LOCALHOST:9",
        ] {
            assert!(!listens_beyond_this_host(a), "{a}");
        }
        for a in [
            "0.0.0.0:28028",
            "10.0.0.5:28028",
            "node7:28028",
            "[::]:28028",
            "[fe80::1]:28028",
        ] {
            assert!(listens_beyond_this_host(a), "{a}");
        }
        assert!(turned_off(Some("0")) && turned_off(Some(" 0")) && !turned_off(Some("1")));
        assert!(!turned_off(Some("no")) && !turned_off(None));
        assert_eq!(split_addr("[::1]:28028"), ("::1", Some(28028)));
        assert_eq!(split_addr("node7"), ("node7", None));
    }

    #[test]
    fn the_first_release_that_serves_it() {
        assert_eq!(first_release().to_string(), "2.24.3");
    }
}
