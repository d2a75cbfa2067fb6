//! The table of releases (`src/changes.rs`, `explain::Change`) against the
//! real libraries the test command caches (the wheels, the newest of each
//! series on PyPI among them, and Debian's own package): where a change
//! leaves a trace in `libnccl.so.2` (a string it holds, a function it
//! imports), the trace is there exactly in the releases the table says do
//! it. A row read wrong, or a release that moved a change, fails here.

use std::path::{Path, PathBuf};

use nccl_find::explain::Change;
use nccl_find::Version;

mod common;

/// Each change with a trace, and that trace: a string of NCCL's own, or
/// the name of a function it imports.
const TRACES: [(Change, &str); 11] = [
    // The default rule's list once virbr* came last (src/misc/socket.cc).
    (Change::LibvirtBridgesLast, "^docker,lo,virbr"),
    (Change::ConfFileVariable, "NCCL_CONF_FILE"),
    // `~` from the user database: getpwuid, imported until 2.30.3.
    (Change::HomeFromEnvironment, "getpwuid"),
    (Change::RasService, "NCCL_RAS_ENABLE"),
    (Change::RasJson, "set format "),
    (Change::TunerPlugins, "NCCL_TUNER_PLUGIN"),
    (Change::ProfilerPlugins, "NCCL_PROFILER_PLUGIN"),
    (Change::GinPlugins, "NCCL_GIN_PLUGIN"),
    (Change::RmaPlugins, "NCCL_RMA_PLUGIN"),
    (Change::MultiRankGpu, "NCCL_MULTI_RANK_GPU_ENABLE"),
    (Change::RoceGidChosen, "NCCL_IB_ROCE_VERSION_NUM"),
];

/// Whether each needle is in the file (a library is hundreds of MB: grep
/// reads it at the disk's speed).
fn holds(path: &Path, needles: &[&str]) -> Vec<bool> {
    let mut grep = std::process::Command::new("grep");
    grep.args(["-aoF"]);
    for n in needles {
        grep.args(["-e", n]);
    }
    let out = grep.arg(path).output().expect("grep");
    let text = String::from_utf8_lossy(&out.stdout);
    let found: Vec<&str> = text.lines().collect();
    needles.iter().map(|n| found.contains(n)).collect()
}

/// Every cached `libnccl.so.2`, and its release.
fn libraries() -> Vec<(PathBuf, Version)> {
    let mut libs: Vec<PathBuf> = common::wheels()
        .into_iter()
        .map(|(dir, _)| dir.join("nvidia/nccl/lib/libnccl.so.2"))
        .collect();
    if let Some(root) = std::env::var_os("NCCL_FIND_DEBIAN") {
        libs.push(Path::new(&root).join("usr/lib/x86_64-linux-gnu/libnccl.so.2"));
    }
    let mut out = Vec::new();
    for lib in libs {
        let elf = nccl_find::internal::read_elf(&lib).unwrap();
        let (v, _) = elf
            .version()
            .unwrap_or_else(|| panic!("{}: no version", lib.display()));
        out.push((lib, Version::new(v.major, v.minor, v.patch, "")));
    }
    out
}

#[test]
fn each_change_is_in_the_releases_the_table_says() {
    let libs = libraries();
    if libs.is_empty() {
        return;
    }
    let needles: Vec<&str> = TRACES.iter().map(|(_, n)| *n).collect();
    let mut wrong = Vec::new();
    let mut seen = Vec::new();
    for (lib, v) in &libs {
        let found = holds(lib, &needles);
        for ((change, needle), has) in TRACES.iter().zip(found) {
            // HomeFromEnvironment's trace is what it took away.
            let does = match change {
                Change::HomeFromEnvironment => !has,
                _ => has,
            };
            if does != change.in_release(Some(v)) {
                wrong.push(format!(
                    "NCCL {v} ({}): {change:?} (since {}) {} {:?}",
                    lib.display(),
                    change.since(),
                    if has { "holds" } else { "lacks" },
                    needle
                ));
            }
        }
        seen.push(v.to_string());
    }
    eprintln!("releases read: {}", seen.join(", "));
    assert!(
        wrong.is_empty(),
        "the table of releases is wrong:\n{}",
        wrong.join("\n")
    );
}
