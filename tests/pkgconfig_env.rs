//! The variables people already set for the `pkg-config` crate:
//! `PKG_CONFIG_PATH_<target>`, `PKG_CONFIG_PATH_<target_with_underscores>`,
//! `HOST_`/`TARGET_PKG_CONFIG_PATH`, `NCCL_NO_PKG_CONFIG`,
//! `PKG_CONFIG_ALL_STATIC`, `NCCL_STATIC` and `NCCL_DYNAMIC`.

mod common;

use std::path::PathBuf;

use nccl_find::explain::SourceKind;
use nccl_find::{Config, Linking};

fn tree(name: &str) -> PathBuf {
    common::trees().join(name)
}

const PC_DIR: &str = "/opt/nccl_2.21.5-1+cuda12.4_x86_64/lib/pkgconfig";
const TRIPLE: &str = "x86_64-unknown-linux-gnu";

fn report(name: &str, vars: &[(&str, &str)]) -> nccl_find::Report {
    Config::new()
        .root(tree(name))
        .target(TRIPLE)
        .cargo_metadata(false)
        .env_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .report()
        .0
}

/// The variable the pkg-config source says it found `nccl.pc` through.
fn found_through(vars: &[(&str, &str)]) -> Option<String> {
    let r = report("tarball", vars);
    let c = r.selected()?;
    assert_eq!(c.origin.source, SourceKind::PkgConfig, "{:?}", c.origin);
    let d = &c.origin.detail;
    Some(d[d.rfind("; ").unwrap() + 2..d.len() - 1].to_string())
}

#[test]
fn target_specific_pkg_config_paths_come_first_in_the_crates_order() {
    let with_target = format!("PKG_CONFIG_PATH_{TRIPLE}");
    let underscored = format!("PKG_CONFIG_PATH_{}", TRIPLE.replace('-', "_"));
    let nowhere = "/nowhere";
    // Each form alone is honoured.
    for name in [
        with_target.as_str(),
        underscored.as_str(),
        "PKG_CONFIG_PATH",
    ] {
        assert_eq!(
            found_through(&[(name, PC_DIR)]).as_deref(),
            Some(name),
            "{name}"
        );
    }
    // HOST_ when host == target, TARGET_ when cross-compiling.
    assert_eq!(
        found_through(&[("HOST", TRIPLE), ("HOST_PKG_CONFIG_PATH", PC_DIR)]).as_deref(),
        Some("HOST_PKG_CONFIG_PATH")
    );
    assert_eq!(
        found_through(&[
            ("HOST", "aarch64-unknown-linux-gnu"),
            ("TARGET_PKG_CONFIG_PATH", PC_DIR)
        ])
        .as_deref(),
        Some("TARGET_PKG_CONFIG_PATH")
    );
    // The more specific wins; the plain one is then not used.
    assert_eq!(
        found_through(&[(with_target.as_str(), PC_DIR), ("PKG_CONFIG_PATH", nowhere)]).as_deref(),
        Some(with_target.as_str())
    );
    assert_eq!(
        found_through(&[(underscored.as_str(), PC_DIR), ("PKG_CONFIG_PATH", nowhere)]).as_deref(),
        Some(underscored.as_str())
    );
}

#[test]
fn nccl_no_pkg_config_skips_the_source_and_says_so() {
    let r = report(
        "tarball",
        &[("PKG_CONFIG_PATH", PC_DIR), ("NCCL_NO_PKG_CONFIG", "1")],
    );
    assert!(r.selected().is_none(), "{:?}", r.selected());
    let l = r
        .looked
        .iter()
        .find(|l| l.source == SourceKind::PkgConfig)
        .unwrap();
    assert_eq!(l.outcome, "not looked for: NCCL_NO_PKG_CONFIG is set");
    assert_eq!(
        r.looked
            .iter()
            .filter(|l| l.source == SourceKind::PkgConfig)
            .count(),
        1
    );
}

fn linking(name: &str, vars: &[(&str, &str)]) -> Result<(Linking, Vec<String>), String> {
    Config::new()
        .root(tree(name))
        .target(TRIPLE)
        .cargo_metadata(false)
        .env_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .probe()
        .map(|n| (n.linking.clone(), n.report.warnings.clone()))
        .map_err(|e| e.headline())
}

#[test]
fn static_and_dynamic_variables() {
    let home = ("NCCL_HOME", "/opt/nccl_2.21.5-1+cuda12.4_x86_64");
    let cuda = ("CUDA_HOME", "/usr/local/cuda");
    let is_static =
        |r: &Result<(Linking, Vec<String>), String>| matches!(r, Ok((Linking::Static { .. }, _)));
    // The tarball has libnccl_static.a but no static CUDA runtime here, so
    // a static request fails for the runtime, which shows it was taken.
    let r = linking("tarball", &[home, ("NCCL_STATIC", "1")]);
    assert!(
        r.as_ref().is_err_and(|e| e.contains("libcudart_static.a")),
        "{r:?}"
    );
    let r = linking("tarball", &[home, ("PKG_CONFIG_ALL_STATIC", "1")]);
    assert!(
        r.as_ref().is_err_and(|e| e.contains("libcudart_static.a")),
        "{r:?}"
    );
    // NCCL_DYNAMIC and NCCL_STATIC=0 win over the global request.
    for v in [("NCCL_DYNAMIC", "1"), ("NCCL_STATIC", "0")] {
        let r = linking("tarball", &[home, cuda, ("PKG_CONFIG_ALL_STATIC", "1"), v]);
        assert!(matches!(r, Ok((Linking::Dynamic, _))), "{v:?}: {r:?}");
        assert!(!is_static(&r));
    }
    // A wheel has no static library: the global request links it shared
    // and says so; NCCL_STATIC=1 is an error.
    let venv = ("VIRTUAL_ENV", "/venv");
    let (l, warnings) = linking("wheel-venv", &[venv, ("PKG_CONFIG_ALL_STATIC", "1")]).unwrap();
    assert_eq!(l, Linking::DynamicVerbatim);
    assert!(
        warnings.iter().any(|w| w.starts_with(
            "PKG_CONFIG_ALL_STATIC is set, but this install has no libnccl_static.a: NCCL is linked shared."
        )),
        "{warnings:?}"
    );
    let e = linking("wheel-venv", &[venv, ("NCCL_STATIC", "1")]).unwrap_err();
    assert!(e.contains("has no libnccl_static.a"), "{e}");
}
