//! What NCCL's results and messages mean. Each `ncclResult_t` of `nccl.h`,
//! by its name, NCCL's own words for it (`ncclGetErrorString`), and the
//! usual cause and fix where a run fails with it; and the warnings NCCL
//! prints where the cause is known ([`MESSAGES`]: NCCL's own format text,
//! the releases that print it, what it means and the fix). `nccl-find
//! smoke` ends a failed call on them; `explain` reads a job's log by them.

use nccl_find::explain::Change;
use nccl_find::Version;

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

/// A warning NCCL prints whose cause is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// NCCL's format text, as its library holds it (`%s`, `%d` … stand
    /// for what each line fills in).
    pub format: &'static str,
    /// The releases that print it: from the one with `since`, and before
    /// the one with `until` (`None`: every release nccl-find reads).
    pub since: Option<Change>,
    pub until: Option<Change>,
    /// What it means, and the fix.
    pub means: &'static str,
    pub fix: &'static str,
}

/// NCCL's warnings whose cause is known, read from its source (the file
/// in each row's comment); the releases that print each are checked
/// against every library the test command caches.
pub const MESSAGES: [Message; 9] = [
    // src/bootstrap.cc
    Message {
        format: "Bootstrap : no socket interface found",
        since: None,
        until: None,
        means: "NCCL found no network interface to bootstrap on: NCCL_SOCKET_IFNAME names none here, or none is up with an address",
        fix: "set NCCL_SOCKET_IFNAME to an interface every node has (nccl-find doctor names them)",
    },
    // src/bootstrap.cc
    Message {
        format: "NET/Socket : No usable listening interface found",
        since: None,
        until: None,
        means: "no interface of this host is on the subnet of NCCL_COMM_ID's address, where NCCL's bootstrap must listen",
        fix: "set NCCL_COMM_ID to the address of a node on this network, or unset it",
    },
    // src/misc/socket.cc
    Message {
        format: "Invalid NCCL_COMM_ID, please use format",
        since: None,
        until: None,
        means: "NCCL_COMM_ID is not <ip>:<port>, [<ipv6>]:<port> or <host>:<port>",
        fix: "set NCCL_COMM_ID to <ip>:<port>, or unset it",
    },
    // src/init.cc
    Message {
        format: "Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx",
        since: None,
        until: Some(Change::MultiRankGpu),
        means: "two ranks use one GPU: the launcher's local ranks do not map one to a GPU",
        fix: "give each rank its own GPU (torch.cuda.set_device(LOCAL_RANK), or one CUDA_VISIBLE_DEVICES each)",
    },
    // src/graph/topo.cc
    Message {
        format: "Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration.",
        since: Some(Change::MultiRankGpu),
        until: None,
        means: "two ranks use one GPU: the launcher's local ranks do not map one to a GPU",
        fix: "give each rank its own GPU (torch.cuda.set_device(LOCAL_RANK)); NCCL_MULTI_RANK_GPU_ENABLE=1 where sharing is meant",
    },
    // src/bootstrap.cc
    Message {
        format: "Message truncated : received %d bytes instead of %d",
        since: None,
        until: None,
        means: "the ranks did not call the same collectives with the same sizes, in the same order",
        fix: "make every rank issue the same collectives with the same counts and datatypes",
    },
    // src/misc/shmutils.cc
    Message {
        format: "Error while %s shared memory segment %s (size ",
        since: None,
        until: None,
        means: "/dev/shm is too small or full for NCCL's shared-memory transport",
        fix: "docker run --shm-size=1g (or --ipc=host), or NCCL_SHM_DISABLE=1",
    },
    // src/misc/socket.cc
    Message {
        format: "Connection closed by remote peer %s",
        since: None,
        until: None,
        means: "a peer closed its connection: its process died or was killed",
        fix: "read the first rank that failed (its own log), or ask NCCL's RAS service (nccl-find ras)",
    },
    // src/include/checks.h
    Message {
        format: "Cuda failure '%s'",
        since: None,
        until: None,
        means: "a CUDA call inside NCCL failed (the words in quotes say which: out of memory, an illegal address, a driver too old)",
        fix: "nccl-find doctor checks the driver; for out of memory, free GPU memory or run less at once",
    },
];

impl Message {
    /// Whether NCCL `release` prints it (an unknown release is the newest).
    pub fn printed_by(&self, release: Option<&Version>) -> bool {
        self.since.is_none_or(|c| c.in_release(release))
            && self.until.is_none_or(|c| !c.in_release(release))
    }

    /// Whether `line` (of a log) is this message: its format's fixed
    /// parts, in order.
    pub fn matches(&self, line: &str) -> bool {
        let mut rest = line;
        for part in fixed_parts(self.format) {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// A format's fixed parts: the text between its `%` conversions.
fn fixed_parts(format: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = format;
    while let Some(at) = rest.find('%') {
        parts.push(&rest[..at]);
        // A conversion: flags, width, length, then one letter.
        let after = &rest[at + 1..];
        let len = after
            .find(|c: char| c.is_ascii_alphabetic() && !"hlLqjzt".contains(c))
            .map_or(after.len(), |i| i + 1);
        rest = &after[len..];
    }
    parts.push(rest);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// The first of `lines` that is a message NCCL `release` prints whose
/// cause is known, and the message.
pub fn first_known<'a>(
    lines: &'a [String],
    release: Option<&Version>,
) -> Option<(&'a str, &'static Message)> {
    for l in lines {
        if let Some(m) = MESSAGES
            .iter()
            .find(|m| m.printed_by(release) && m.matches(l))
        {
            return Some((l.as_str(), m));
        }
    }
    None
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
mod tests {
    use super::*;

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

    #[test]
    fn a_log_line_is_known_by_its_formats_fixed_parts() {
        let dup = &MESSAGES[3];
        assert!(dup.matches(
            "node1:42:42 [1] init.cc:943 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60"
        ));
        assert!(!dup.matches("Duplicate GPU detected"));
        assert_eq!(
            fixed_parts("Error while %s shared memory segment %s (size %ld)"),
            ["Error while ", " shared memory segment ", " (size ", ")"]
        );
        let lines = vec![
            "x NCCL INFO Bootstrap: Using eth0:10.0.0.1<0>".to_string(),
            "x NCCL WARN Cuda failure 'out of memory'".to_string(),
        ];
        assert_eq!(
            first_known(&lines, None).map(|(_, m)| m.format),
            Some("Cuda failure '%s'")
        );
        let v = |a, b, c| Version::new(a, b, c, "");
        assert!(dup.printed_by(Some(&v(2, 29, 7))) && !dup.printed_by(Some(&v(2, 30, 3))));
        assert!(MESSAGES[4].printed_by(None) && !MESSAGES[4].printed_by(Some(&v(2, 28, 9))));
    }

    /// Each message's format text is in the libraries of the releases that
    /// print it by the table, and in no other: a release that rewords one
    /// turns this red.
    #[test]
    fn each_message_is_printed_by_the_releases_the_table_says() {
        for (dir, v) in crate::rules::cached_releases() {
            let lib = dir.join("lib/libnccl.so.2");
            let mut grep = std::process::Command::new("grep");
            grep.arg("-aoF");
            for m in &MESSAGES {
                grep.args(["-e", m.format]);
            }
            let out = grep.arg(&lib).output().unwrap();
            let found = String::from_utf8_lossy(&out.stdout).into_owned();
            for m in &MESSAGES {
                let has = found.lines().any(|l| l == m.format);
                assert_eq!(has, m.printed_by(Some(&v)), "NCCL {v}: {:?}", m.format);
            }
        }
    }
}
