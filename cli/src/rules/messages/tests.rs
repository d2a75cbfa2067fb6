//! The table against NCCL itself: its source at every release tag
//! (`formats.txt`) and the libraries the test command caches.

use super::*;

/// The longest fixed text of a format: a line that holds it may be one of
/// its lines, and one that does not is not.
pub fn anchor(format: &str) -> String {
    let (fixed, _) = split_format(format);
    fixed
        .into_iter()
        .max_by_key(|f| f.len())
        .unwrap_or_default()
}

#[test]
fn each_code_once_in_order_with_its_name() {
    for (i, r) in RESULTS.iter().enumerate() {
        assert_eq!(r.code, i as i32, "{r:?}");
        assert!(r.name.starts_with("nccl"), "{r:?}");
    }
    assert_eq!(result(8).map(|r| r.name), Some("ncclTimeout"));
    assert_eq!(result(42), None);
    assert!(likely(2).starts_with("Likely cause (ncclSystemError): NCCL picked"));
    assert_eq!(
        likely(99),
        "Run with NCCL_DEBUG=INFO for NCCL's own account."
    );
}

/// Every result code the cached releases' `nccl.h` declares is here,
/// by its name and value: a release with a new one turns this red.
#[test]
fn every_result_the_releases_declare_is_here() {
    for (dir, v) in crate::rules::cached_releases() {
        let header = std::fs::read_to_string(dir.join("include/nccl.h")).unwrap();
        let start = header.find("ncclSuccess").expect("ncclResult_t");
        let end = start + header[start..].find("ncclResult_t").unwrap();
        for entry in header[start..end].split(',') {
            let entry = entry.split("/*").next().unwrap_or(entry);
            let Some((name, value)) = entry.split_once('=') else {
                continue;
            };
            let name = name.trim();
            let value = value.trim().trim_end_matches('}').trim();
            if name == "ncclNumResults" {
                continue;
            }
            let code: i32 = value
                .parse()
                .unwrap_or_else(|_| panic!("{name} = {value:?}"));
            assert_eq!(
                result(code).map(|r| r.name),
                Some(name),
                "NCCL {v}'s nccl.h: {name} = {code}"
            );
        }
    }
}

/// `formats.txt`: the releases read, and each format with the first and
/// the last release whose source has it.
struct Source {
    releases: Vec<Release>,
    formats: Vec<(Release, Release, &'static str)>,
}

type Release = (u32, u32, u32);

fn triple(v: &str) -> (u32, u32, u32) {
    let n: Vec<u32> = v.split('.').map(|x| x.parse().unwrap()).collect();
    (n[0], n[1], n[2])
}

fn source() -> Source {
    let text = include_str!("../formats.txt");
    let mut s = Source {
        releases: Vec::new(),
        formats: Vec::new(),
    };
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut cols = line.splitn(3, '\t');
        let (a, b) = (cols.next().unwrap(), cols.next().unwrap());
        if a == "releases" {
            s.releases = b.split(' ').map(triple).collect();
            continue;
        }
        s.formats.push((triple(a), triple(b), cols.next().unwrap()));
    }
    s
}

/// Formats of releases older than NCCL's public source (2.0 to 2.2),
/// as their logs show them.
const BEFORE_THE_SOURCE: &[&str] = &["Socket creation failed : %s"];

/// NCCL rows whose text is no format of NCCL's source as the script reads
/// it: the version line (`VERSION_STRING`), and a macro's text with the
/// name it stringifies (`"Call to " #call " failed : %s"`), whose first
/// literal the source has.
fn macro_made(format: &str, s: &Source) -> bool {
    BEFORE_THE_SOURCE.contains(&format)
        || format == "NCCL version %s"
        || s.formats.iter().any(|(_, _, f)| {
            f.len() >= 8 && !f.contains('%') && format.starts_with(f) && format != *f
        })
}

/// Every NCCL row's formats are in NCCL's source, word for word.
#[test]
fn every_nccl_format_is_in_nccls_source() {
    let s = source();
    assert!(s.releases.len() >= 60, "{:?}", s.releases.len());
    for m in MESSAGES.iter().filter(|m| m.printer == Printer::Nccl) {
        for f in m.formats {
            let known = s.formats.iter().any(|(_, _, g)| g == f);
            assert!(known || macro_made(f, &s), "not in NCCL's source: {f:?}");
        }
    }
}

/// Formats of NCCL's that hold a row's words but that no row has, on
/// purpose: they say nothing of a failure.
const NOT_FAILURES: &[&str] = &[
    "Bootstrap: Using %s:%d",
    "NET/IB : Using interface %s for sideband communication",
];

/// A message NCCL rewords in a new release, or says in a new variant,
/// turns this red until the table has it: every format of the source that
/// holds the words of a row's (its anchor) is some row's, or is listed as
/// saying nothing of a failure.
#[test]
fn every_wording_of_a_known_message_is_a_row() {
    let s = source();
    let ours: std::collections::BTreeSet<&str> = MESSAGES
        .iter()
        .flat_map(|m| m.formats.iter().copied())
        .collect();
    let families: std::collections::BTreeSet<String> = MESSAGES
        .iter()
        .filter(|m| m.printer == Printer::Nccl)
        .flat_map(|m| m.formats.iter().map(|f| anchor(f)))
        .collect();
    let mut missing = Vec::new();
    for (_, last, f) in &s.formats {
        if ours.contains(f) || NOT_FAILURES.contains(f) {
            continue;
        }
        if let Some(fam) = families.iter().find(|fam| f.contains(fam.as_str())) {
            missing.push(format!("{f:?} (last in {last:?}; holds {fam:?})"));
        }
    }
    assert!(
        missing.is_empty(),
        "formats of NCCL's no row has:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_format_has_words_of_its_own_to_find_it_by() {
    for m in &MESSAGES {
        for f in m.formats {
            assert!(anchor(f).len() >= 6, "{f:?}");
        }
    }
    let known = Known::new();
    assert_eq!(
        known.each.len(),
        MESSAGES.iter().map(|m| m.formats.len()).sum::<usize>()
    );
}

/// Each NCCL format a cached release's library holds is in that release's
/// source by `formats.txt`; a release newer than the last tag read
/// must still print every format the last tag has (else it reworded one:
/// rerun scripts/nccl-messages on a newer clone, and add its rows).
#[test]
fn each_format_is_in_the_libraries_of_the_releases_that_print_it() {
    let s = source();
    let newest = *s.releases.last().unwrap();
    for (dir, v) in crate::rules::cached_releases() {
        let v = (v.major, v.minor, v.patch);
        let lib = dir.join("lib/libnccl.so.2");
        let formats: Vec<&str> = MESSAGES
            .iter()
            .filter(|m| m.printer == Printer::Nccl)
            .flat_map(|m| m.formats.iter().copied())
            .filter(|f| s.formats.iter().any(|(_, _, g)| g == f))
            .collect();
        let mut grep = std::process::Command::new("grep");
        grep.arg("-aoF");
        for f in &formats {
            grep.args(["-e", f]);
        }
        let out = grep.arg(&lib).output().unwrap();
        let found = String::from_utf8_lossy(&out.stdout).into_owned();
        for f in formats {
            let has = found.lines().any(|l| l.contains(f));
            // Printed by v: the source of v has it, or a longer format
            // that holds it (grep finds it inside that one).
            let printed = |at: (u32, u32, u32)| {
                s.formats
                    .iter()
                    .any(|(a, b, g)| g.contains(f) && *a <= at && at <= *b)
            };
            if v > newest {
                if printed(newest) {
                    assert!(
                        has,
                        "NCCL {v:?} no longer prints {f:?}: rerun scripts/nccl-messages"
                    );
                }
            } else if s.releases.contains(&v) && has {
                // Not the other way: a macro no code of a release uses
                // is in its source but not in its library.
                assert!(printed(v), "NCCL {v:?} prints {f:?}; formats.txt says not");
            }
        }
    }
}

#[test]
fn lines_from_real_logs_are_read_by_their_rows() {
    let known = Known::new();
    let read = |l: &str| known.read(l, Shape::default()).unwrap();
    let h = read("socketPollConnect: connect to 10.99.0.1<43133> returned No route to host, retrying (20/34) after sleep for 2000 msec");
    assert_eq!(h.says, Says::Cause(Failure::Unreachable));
    assert_eq!(h.field("peer"), Some("10.99.0.1<43133>"));
    assert_eq!(h.field("err"), Some("No route to host"));
    let h = read("socketStartConnect: Connect to 10.0.0.2<1234> failed : Connection refused");
    assert_eq!(h.says, Says::Cause(Failure::Refused));
    let h = read("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60");
    assert_eq!(h.says, Says::Cause(Failure::DuplicateGpu));
    assert_eq!(
        (h.field("rank_a"), h.field("rank_b"), h.field("device")),
        (Some("1"), Some("0"), Some("60"))
    );
    let h = read("Cuda failure 'out of memory'");
    assert_eq!(h.says, Says::Cause(Failure::Oom));
    let nvls = Shape {
        level: Some("WARN"),
        file: Some("transport/nvls.cc"),
    };
    let h = known
        .read("Cuda failure 1 'invalid argument'", nvls)
        .unwrap();
    assert_eq!(h.says, Says::Cause(Failure::Nvls));
    let h = read("NET/IB : Got completion from peer 10.0.0.7<38560> with error 12, opcode 0, len 0, vendor err 129");
    assert_eq!(
        (h.says, h.field("status")),
        (Says::Cause(Failure::IbLink), Some("12"))
    );
    let h = read("NET/IB : Got completion from peer 10.0.0.7<38560> with error 5, opcode 0, len 0, vendor err 249");
    assert_eq!(h.says, Says::Symptom(Failure::RemoteError));
    let h = read("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5");
    assert_eq!(h.says, Says::Symptom(Failure::NcclError));
    assert_eq!(h.field("version"), Some("2.20.5"));
    assert_eq!(
        result_by_words(h.field("words").unwrap()).map(|r| r.name),
        Some("ncclSystemError")
    );
    let h = read("NCCL version 2.28.9+cuda13.0");
    assert_eq!(
        (h.says, h.field("version")),
        (Says::Fact(Fact::Version), Some("2.28.9+cuda13.0"))
    );
    let h = read("ImportError: /x/libtorch_cuda.so: undefined symbol: ncclCommRegister");
    assert_eq!(
        (h.says, h.field("symbol")),
        (
            Says::Cause(Failure::UndefinedSymbol),
            Some("ncclCommRegister")
        )
    );
    assert!(known
        .read(
            "libcudnn.so.9: cannot open shared object file: No such file or directory",
            Shape::default()
        )
        .is_none());
    let h = read("libnccl.so.2: cannot open shared object file: No such file or directory");
    assert_eq!(h.says, Says::Cause(Failure::NcclMissing));
    assert!(known.read("all is well", Shape::default()).is_none());
}

#[test]
fn formats_split_into_fixed_texts_and_conversions() {
    let (fixed, convs) = split_format("Error while %s shared memory segment %s (size %ld) 100%%");
    assert_eq!(
        fixed,
        [
            "Error while ",
            " shared memory segment ",
            " (size ",
            ") 100%"
        ]
    );
    assert_eq!(convs, ["%s", "%s", "%ld"]);
    assert_eq!(
        anchor("%s: connect to %s returned %s, retrying (%d/%ld) after sleep for %u msec"),
        ") after sleep for "
    );
}

/// The frameworks' words for NCCL's failures, as they print them.
#[test]
fn the_frameworks_lines_are_read() {
    let known = Known::new();
    let says = |l: &str| {
        known
            .read(l, Shape::default())
            .map(|h| (h.says, h.field("words").map(str::to_string)))
    };
    let nccl = |w: &str| Some((Says::Symptom(Failure::NcclError), Some(w.to_string())));
    assert_eq!(
        says("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:297: NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled system error"),
        nccl("unhandled system error")
    );
    assert_eq!(
        says("OSError: (External) NCCL error(2), unhandled system error."),
        nccl("unhandled system error.")
    );
    assert_eq!(
        says(
            "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
        ),
        nccl("unhandled cuda error (run with NCCL_DEBUG=INFO for details)")
    );
    let h = known.read("torch.distributed.DistNetworkError: The client socket has failed to connect to [node-a]:29500 (errno: 113 - No route to host).", Shape::default()).unwrap();
    assert_eq!(
        (h.says, h.field("err")),
        (Says::Cause(Failure::Rendezvous), Some("No route to host"))
    );
    let h = known.read("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 3/4 clients joined.", Shape::default()).unwrap();
    assert_eq!(
        (h.says, h.field("joined")),
        (Says::Cause(Failure::Rendezvous), Some("3"))
    );
    let h = known.read("RuntimeError: The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).", Shape::default()).unwrap();
    assert_eq!(
        (h.says, h.field("err")),
        (
            Says::Cause(Failure::PortInUse),
            Some("Address already in use")
        )
    );
    let h = known.read("slurmstepd: error: *** JOB 4711 ON node7 CANCELLED AT 2026-11-29T10:00:00 DUE TO TIME LIMIT ***", Shape::default()).unwrap();
    assert_eq!(
        (h.says, h.field("host")),
        (Says::Symptom(Failure::TimeLimit), Some("node7"))
    );
}
