//! What a -sys crate's build script says, in real cargo builds: only what
//! is true at build time. No run-time loader verdict (the build's
//! `LD_LIBRARY_PATH` is not the run's); under docs.rs every level's
//! `rustc-check-cfg` and cfg; an unmet requirement that leads with the
//! exact fix.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A scratch workspace holding one probing crate whose build script is
/// `build_rs` and whose `src/lib.rs` is `lib_rs`.
fn workspace(tag: &str, build_rs: &str, lib_rs: &str) -> PathBuf {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("target/build-script-{tag}"));
    common::probe_crate(&ws, &format!("probe-{tag}"), build_rs);
    std::fs::write(ws.join("src/lib.rs"), lib_rs).unwrap();
    ws
}

/// `cargo build` in `ws` with no `NCCL_*` variable but `vars`.
fn build(ws: &Path, vars: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(ws)
        .args(["build", "-v"])
        .env("CARGO_TARGET_DIR", ws.join("target"))
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("VIRTUAL_ENV")
        .env_remove("CONDA_PREFIX");
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL_") || k == "DOCS_RS" {
            cmd.env_remove(k);
        }
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// What the build script printed (its `output` file).
fn printed(ws: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(ws.join("target/debug/build")).unwrap() {
        let f = e.unwrap().path().join("output");
        if let Ok(text) = std::fs::read_to_string(f) {
            out.extend(text.lines().map(str::to_string));
        }
    }
    out
}

/// The build script's stderr, as cargo shows it for a failed build.
fn script_stderr(out: &Output) -> Vec<String> {
    let err = String::from_utf8_lossy(&out.stderr);
    let section = err
        .split("--- stderr\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no build-script stderr in:\n{err}"));
    section
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with("  "))
        .map(|l| l.trim_start().to_string())
        .collect()
}

/// docs.rs: nothing is probed (an `NCCL_HOME` naming nothing does not
/// fail), and the build script prints exactly every level's
/// `rustc-check-cfg` and `rustc-cfg`, so that a crate built with warnings
/// denied compiles its version-gated items, all of them.
#[test]
fn docs_rs_gets_every_levels_check_cfg_and_cfg() {
    let levels = common::levels();
    let newest = &levels[levels.len() - 1];
    let lib_rs = format!(
        "#![deny(warnings)]\n\
         #[cfg(nccl_2_18)]\npub fn split() {{}}\n\
         #[cfg(not({newest}))]\ncompile_error!(\"the newest level's cfg is not set\");\n"
    );
    let ws = workspace(
        "docs-rs",
        "fn main() { nccl_find::Config::new().probe_or_exit(); }\n",
        &lib_rs,
    );
    let out = build(
        &ws,
        &[
            ("DOCS_RS", Path::new("1")),
            ("NCCL_HOME", Path::new("/does-not-exist")),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("unexpected `cfg`"), "{err}");
    let mut want = Vec::new();
    for name in &levels {
        want.push(format!("cargo:rustc-check-cfg=cfg({name})"));
    }
    for name in &levels {
        want.push(format!("cargo:rustc-cfg={name}"));
    }
    assert_eq!(printed(&ws), want);
    let _ = std::fs::remove_dir_all(&ws);
}

/// An older NCCL first on the build's `LD_LIBRARY_PATH`: the build says
/// nothing of the loader (the run's path is another; the final binary's
/// rpath and `doctor` settle it), and links the selected NCCL.
#[test]
fn no_loader_verdict_from_a_build_script() {
    let ws = workspace(
        "loader",
        "fn main() { nccl_find::Config::new().probe_or_exit(); }\n",
        "",
    );
    let home = ws.join("nccl");
    common::copy_tree(
        &common::tree("tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64"),
        &home,
    );
    let older = common::tree("old-formula/usr/local/lib");
    assert!(older.join("libnccl.so.2").exists());
    let out = build(&ws, &[("NCCL_HOME", &home), ("LD_LIBRARY_PATH", &older)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lines = printed(&ws);
    assert!(
        lines.contains(&"cargo:version=2.21.5".to_string()),
        "{lines:?}"
    );
    let warnings: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("cargo:warning"))
        .collect();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(!err.contains("warning: probe-loader"), "{err}");
    let _ = std::fs::remove_dir_all(&ws);
}

/// An unmet requirement leads with the exact fix: the pip pin of the first
/// release that meets it, for the wheel in use; an `NCCL_HOME` that is too
/// old names the version it needs. Each is the build's first line.
#[test]
fn an_unmet_requirement_leads_with_the_pin() {
    let ws = workspace(
        "unmet",
        "fn main() { nccl_find::Config::new().atleast_version(\"2.29\").probe_or_exit(); }\n",
        "",
    );
    // The wheel venv as the target's whole filesystem: the same answer on
    // every machine.
    let root = ws.join("root");
    common::copy_tree(&common::tree("wheel-venv"), &root);
    let out = build(
        &ws,
        &[("NCCL_SYSROOT", &root), ("VIRTUAL_ENV", Path::new("/venv"))],
    );
    assert!(!out.status.success());
    assert_eq!(
        script_stderr(&out)[0],
        "nccl-find: pip install -U 'nvidia-nccl-cu12>=2.29.2', or point NCCL_HOME at an install of \
         NCCL 2.29.2 or newer: no install here satisfies the requirement >=2.29.0 (the newest here \
         is NCCL 2.21.5)."
    );
    let out = build(
        &ws,
        &[
            ("NCCL_SYSROOT", &root),
            (
                "NCCL_HOME",
                Path::new("/venv/lib/python3.11/site-packages/nvidia/nccl"),
            ),
        ],
    );
    assert!(!out.status.success());
    let lines = script_stderr(&out);
    assert_eq!(
        lines[0],
        "nccl-find: NCCL_HOME=/venv/lib/python3.11/site-packages/nvidia/nccl was set, but that \
         install cannot be used (there is no fallback for an explicitly named install): NCCL 2.21.5 \
         does not satisfy the requirement >=2.29.0: it needs NCCL 2.29.2 or newer."
    );
    assert!(
        lines.contains(
            &"- point NCCL_HOME at an install of NCCL 2.29.2 or newer, or unset NCCL_HOME to let \
              nccl-find search."
                .to_string()
        ),
        "{lines:?}"
    );
    let _ = std::fs::remove_dir_all(&ws);
}
