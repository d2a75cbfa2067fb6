//! The API catalog (`src/api/catalog.rs`, `tests/catalog-names.txt`,
//! written by `scripts/nccl-catalog` from every release) against the real
//! releases the test command caches, the newest of each series on PyPI
//! among them: a release whose `libnccl.so.2` exports, or whose `nccl.h`
//! declares, a function or a name the catalog does not know, or has one
//! earlier than the catalog says, fails here. A new NCCL release that
//! knows more than the catalog turns this red; `scripts/nccl-catalog`
//! mends it. (That the README and the crate docs list every level is a
//! unit test of `src/api.rs`.)

use std::path::Path;

mod common;
use common::wheels;

fn key(v: &str) -> Vec<u32> {
    v.split('.').map(|x| x.parse().unwrap()).collect()
}

/// `nccl.h`'s names (`nccl` and a capital) and the functions among them,
/// comments left out.
fn header_names(text: &str) -> (Vec<String>, Vec<String>) {
    let mut code = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("/*") {
            rest = r.split_once("*/").map_or("", |(_, after)| after);
            code.push(' ');
        } else if let Some(r) = rest.strip_prefix("//") {
            rest = r.split_once('\n').map_or("", |(_, after)| after);
            code.push('\n');
        } else {
            let c = rest.chars().next().unwrap();
            code.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    let (mut names, mut functions) = (Vec::new(), Vec::new());
    let bytes = code.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !word(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && word(bytes[i]) {
            i += 1;
        }
        let w = &code[start..i];
        if w.len() > 4 && w.starts_with("nccl") && w.as_bytes()[4].is_ascii_uppercase() {
            names.push(w.to_string());
            if code[i..].trim_start().starts_with('(') {
                functions.push(w.to_string());
            }
        }
    }
    names.sort();
    names.dedup();
    functions.sort();
    functions.dedup();
    (names, functions)
}

/// `tests/catalog-names.txt`: every name `nccl.h` declares, and its first
/// release.
fn catalog_names() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/catalog-names.txt"),
    )
    .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (n, v) = l.split_once(' ').unwrap();
            (n.to_string(), v.to_string())
        })
        .collect()
}

/// Where a release knows more than the catalog, or something earlier.
fn disagreements(version: &str, functions: &[String], names: &[String]) -> Vec<String> {
    let known = catalog_names();
    let mut out = Vec::new();
    for f in functions {
        match nccl_find::explain::introduced_in(f) {
            None => out.push(format!("{f}: not in the catalog")),
            Some(v) if key(v) > key(version) => out.push(format!("{f}: the catalog says {v}")),
            Some(_) => {}
        }
    }
    for n in names {
        match known.iter().find(|(k, _)| k == n) {
            None => out.push(format!("{n} (in nccl.h): not in the catalog")),
            Some((_, v)) if key(v) > key(version) => {
                out.push(format!("{n} (in nccl.h): the catalog says {v}"))
            }
            Some(_) => {}
        }
    }
    out
}

#[test]
fn every_cached_release_is_known_to_the_catalog() {
    let wheels = wheels();
    let mut bad = Vec::new();
    for (dir, version) in &wheels {
        let nccl = dir.join("nvidia/nccl");
        let header = std::fs::read_to_string(nccl.join("include/nccl.h")).unwrap();
        let (names, mut functions) = header_names(&header);
        let lib = nccl.join("lib/libnccl.so.2");
        for s in nccl_find::internal::dynamic_symbols(&lib).unwrap() {
            if s.len() > 4 && s.starts_with("nccl") && s.as_bytes()[4].is_ascii_uppercase() {
                functions.push(s);
            }
        }
        functions.sort();
        functions.dedup();
        assert!(functions.len() > 20, "{}: {functions:?}", dir.display());
        for d in disagreements(version, &functions, &names) {
            bad.push(format!("NCCL {version} ({}): {d}", dir.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "a release knows more than the catalog: run scripts/nccl-catalog and commit what it writes\n{}",
        bad.join("\n")
    );
    // The newest release cached was read by the catalog, or is older.
    if let Some(newest) = wheels.iter().map(|(_, v)| v).max_by_key(|v| key(v)) {
        let read = nccl_find::explain::known_releases();
        assert!(
            read.iter().any(|r| key(r) >= key(newest)),
            "NCCL {newest} is newer than every release the catalog read ({:?}): run scripts/nccl-catalog",
            read.last()
        );
    }
}

/// The check itself: the table as it was before it was learned from the
/// releases (it stopped at 2.28.3) fails against 2.29's functions, and a
/// function given a later release than a release that has it fails.
#[test]
fn the_check_fails_on_a_table_that_knows_less() {
    let functions = vec!["ncclCommResume".to_string(), "ncclCommSplit".to_string()];
    assert_eq!(
        disagreements("2.29.7", &functions, &[]),
        Vec::<String>::new()
    );
    assert_eq!(
        disagreements("2.29.7", &["ncclCommFromTheFuture".to_string()], &[]),
        ["ncclCommFromTheFuture: not in the catalog"]
    );
    assert_eq!(
        disagreements("2.17.0", &functions, &["ncclConfig_v21700".into()]),
        [
            "ncclCommResume: the catalog says 2.29.7",
            "ncclCommSplit: the catalog says 2.18.1",
            "ncclConfig_v21700 (in nccl.h): the catalog says 2.17.1"
        ]
    );
    let (names, functions) = header_names(
        "/* ncclNotThis(x) */\nncclResult_t  ncclGetVersion(int *v); // ncclNorThis()\n\
         typedef enum { ncclSum = 0 } ncclRedOp_t;\n",
    );
    assert_eq!(
        names,
        ["ncclGetVersion", "ncclRedOp_t", "ncclResult_t", "ncclSum"]
    );
    assert_eq!(functions, ["ncclGetVersion"]);
}
