//! The smoke test's datatypes and reductions against NCCL's own: the
//! `ncclDataType_t` and `ncclRedOp_t` of the newest `nccl.h` the test
//! command caches, and the first release of each name that
//! `scripts/nccl-catalog` read from every release. A release that adds a
//! datatype or a reduction turns this red.

use std::path::{Path, PathBuf};

use nccl_smoke::{Dtype, Redop};

/// The `nccl.h` of each cached NCCL wheel, newest last.
fn headers() -> Vec<((u32, u32, u32), PathBuf)> {
    let Some(site) = std::env::var_os("NCCL_FIND_WHEELS") else {
        assert!(
            std::env::var_os("NCCL_FIND_REQUIRE_WHEELS").is_none(),
            "NCCL_FIND_WHEELS is unset; run scripts/test"
        );
        eprintln!(
            "skipped: NCCL_FIND_WHEELS is unset (scripts/test downloads the wheels and sets it)"
        );
        return Vec::new();
    };
    let mut out: Vec<_> = std::fs::read_dir(site)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let (_, v) = name.strip_prefix("nvidia_nccl_cu")?.split_once('-')?;
            Some((triple(v)?, e.path().join("nvidia/nccl/include/nccl.h")))
        })
        .collect();
    out.sort();
    out
}

fn triple(v: &str) -> Option<(u32, u32, u32)> {
    let mut it = v.split(['.', '-']);
    let mut n = || it.next()?.parse::<u32>().ok();
    Some((n()?, n()?, n()?))
}

/// The `name = value` pairs of the `typedef enum { … } <name>;` in `text`,
/// comments left out.
fn enum_values(text: &str, name: &str) -> Vec<(String, i64)> {
    let end = text
        .find(&format!("}} {name};"))
        .unwrap_or_else(|| panic!("no {name}"));
    let start = text[..end].rfind("typedef enum").unwrap();
    let mut body = String::new();
    let mut rest = &text[start..end];
    while let Some(i) = rest.find("/*") {
        body.push_str(&rest[..i]);
        rest = rest[i..].split_once("*/").map_or("", |(_, after)| after);
    }
    body.push_str(rest);
    body.split(['{', ','])
        .filter_map(|item| {
            let (k, v) = item.split_once('=')?;
            Some((k.trim().to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

#[test]
fn every_datatype_and_reduction_of_the_newest_nccl_is_ours() {
    let Some((version, header)) = headers().pop() else {
        return;
    };
    let text = std::fs::read_to_string(&header).unwrap();
    let ours: Vec<(i32, &str)> = Dtype::ALL.iter().map(|d| d.nccl()).collect();
    for (name, value) in enum_values(&text, "ncclDataType_t") {
        if name == "ncclNumTypes" || ours.iter().any(|(v, _)| i64::from(*v) == value) {
            continue;
        }
        panic!("NCCL {version:?} has the datatype {name} = {value}, which the smoke test lacks");
    }
    for (v, name) in &ours {
        assert!(
            text.contains(&format!("{name} ")),
            "{name} is not in NCCL {version:?}"
        );
        let declared = enum_values(&text, "ncclDataType_t");
        assert!(
            declared.contains(&(name.to_string(), i64::from(*v))),
            "{name} = {v}"
        );
    }
    let ours: Vec<(i32, &str)> = Redop::ALL.iter().map(|r| r.nccl()).collect();
    let declared = enum_values(&text, "ncclRedOp_t");
    for (name, value) in &declared {
        if name == "ncclNumOps"
            || ours
                .iter()
                .any(|(v, n)| i64::from(*v) == *value && n == name)
        {
            continue;
        }
        panic!("NCCL {version:?} has the reduction {name} = {value}, which the smoke test lacks");
    }
    assert_eq!(declared.len(), ours.len() + 1, "{declared:?}");
}

#[test]
fn each_names_first_release_is_the_catalogs() {
    let names = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/catalog-names.txt");
    let Ok(text) = std::fs::read_to_string(&names) else {
        eprintln!(
            "skipped: {} is not here (a packaged crate)",
            names.display()
        );
        return;
    };
    let first = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(triple)
            .unwrap_or_else(|| panic!("{name} is not in the catalog"))
    };
    // The catalog's oldest release is the first open-source one; what it
    // has is older.
    let oldest = (2, 3, 5);
    let since = Dtype::ALL
        .iter()
        .map(|d| (d.nccl().1, d.since()))
        .chain(Redop::ALL.iter().map(|r| (r.nccl().1, r.since())));
    for (name, ours) in since {
        let theirs = first(name);
        if theirs == oldest {
            assert!(ours <= oldest, "{name}: {ours:?}");
        } else {
            assert_eq!(ours, theirs, "{name}");
        }
    }
}
