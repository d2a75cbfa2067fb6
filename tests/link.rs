//! What a build script gets: directives, static linking, required symbols,
//! the run-time loader check, docs.rs, cross-compiling. Fixture trees and a
//! fixed environment only; the real wheels are in tests/wheels.rs.

mod common;

use std::path::{Path, PathBuf};

use nccl_find::explain::Problem;
use nccl_find::{Config, Error, ErrorKind, Linking, Nccl};

fn tree(name: &str) -> PathBuf {
    common::trees().join(name)
}

use common::config;

fn probe(name: &str, vars: &[(&str, &str)]) -> Result<Nccl, Error> {
    config(&tree(name), vars).probe()
}

/// The directives other than `rerun-if-env-changed`, which are checked apart.
fn directives(n: &Nccl) -> Vec<String> {
    n.cargo_directives()
        .into_iter()
        .filter(|d| {
            !d.starts_with("cargo:rerun-if-env-changed=")
                && !d.starts_with("cargo:rustc-check-cfg=")
        })
        .collect()
}

const TARBALL: &str = "opt/nccl_2.21.5-1+cuda12.4_x86_64";

#[test]
fn dynamic_directives_are_exact() {
    let root = tree("tarball");
    let n = probe("tarball", &[("NCCL_HOME", &format!("/{TARBALL}"))]).unwrap();
    let home = root.join(TARBALL);
    let d = |s: &str| s.replace("{home}", &home.display().to_string());
    assert_eq!(n.linking, Linking::Dynamic);
    assert_eq!(
        directives(&n),
        [
            "cargo:rustc-link-search=native={home}/lib",
            "cargo:rustc-link-lib=dylib=nccl",
            "cargo:rerun-if-changed={home}/include/nccl.h",
            "cargo:rerun-if-changed={home}/lib/libnccl.so",
            "cargo:rerun-if-changed={home}/lib/libnccl.so.2.21.5",
            "cargo:include={home}/include",
            "cargo:lib_dir={home}/lib",
            // The probe ran under a root (the fixture tree): the directory
            // the target will have, for the final binary's rpath.
            &format!("cargo:run_lib_dir=/{TARBALL}/lib"),
            "cargo:root={home}",
            "cargo:version=2.21.5",
            "cargo:version_code=22105",
            "cargo:cuda_version=12.4",
            "cargo:rustc-cfg=nccl_2_0",
            "cargo:rustc-cfg=nccl_2_2",
            "cargo:rustc-cfg=nccl_2_3_4",
            "cargo:rustc-cfg=nccl_2_4",
            "cargo:rustc-cfg=nccl_2_7",
            "cargo:rustc-cfg=nccl_2_10",
            "cargo:rustc-cfg=nccl_2_11",
            "cargo:rustc-cfg=nccl_2_13",
            "cargo:rustc-cfg=nccl_2_14",
            "cargo:rustc-cfg=nccl_2_17_1",
            "cargo:rustc-cfg=nccl_2_18",
            "cargo:rustc-cfg=nccl_2_19",
        ]
        .map(d)
    );
    // Every variable read that decides gets a rerun line, and none that
    // only locates or informs (PATH, HOME, LD_LIBRARY_PATH); every API level
    // is declared.
    let all = n.cargo_directives();
    for r in n.report.env.iter() {
        let line = format!("cargo:rerun-if-env-changed={}", r.name);
        if !r.decides() {
            assert!(!all.contains(&line), "{}", r.name);
        }
    }
    for r in n
        .report
        .env
        .iter()
        .filter(|r| r.name != "TARGET" && r.name != "HOST" && r.decides())
    {
        assert!(
            all.contains(&format!("cargo:rerun-if-env-changed={}", r.name)),
            "{}",
            r.name
        );
    }
    assert!(all
        .contains(&"cargo:rerun-if-env-changed=X86_64_UNKNOWN_LINUX_GNU_NCCL_STATIC".to_string()));
    assert_eq!(
        all.iter()
            .filter(|d| d.starts_with("cargo:rustc-check-cfg=cfg(nccl_"))
            .count(),
        common::levels().len()
    );
}

#[test]
fn a_wheel_without_libnccl_so_links_verbatim() {
    let n = probe("wheel-venv", &[("VIRTUAL_ENV", "/venv")]).unwrap();
    assert_eq!(n.linking, Linking::DynamicVerbatim);
    let d = directives(&n);
    assert_eq!(d[1], "cargo:rustc-link-lib=dylib:+verbatim=libnccl.so.2");
    assert!(d.contains(&"cargo:rustc-cfg=nccl_2_19".to_string()));
    assert!(!d.contains(&"cargo:rustc-cfg=nccl_2_23".to_string()));
}

/// A copy of the tarball fixture plus a CUDA dir with `libcudart_static.a`.
struct StaticTree(PathBuf);

impl StaticTree {
    fn new(tag: &str, with_cudart: bool) -> StaticTree {
        let root =
            std::env::temp_dir().join(format!("nccl-find-static-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(tree("tarball"))
            .arg(&root)
            .status()
            .unwrap();
        assert!(status.success());
        if with_cudart {
            let lib = root.join("usr/local/cuda-12.4/targets/x86_64-linux/lib");
            std::fs::create_dir_all(&lib).unwrap();
            std::fs::write(lib.join("libcudart_static.a"), "!<arch>\n").unwrap();
        }
        StaticTree(root)
    }
}

impl Drop for StaticTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn static_linking_links_the_archive_and_the_static_cuda_runtime() {
    let t = StaticTree::new("ok", true);
    let home = format!("/{TARBALL}");
    let n = config(&t.0, &[("NCCL_HOME", &home), ("NCCL_STATIC", "1")])
        .probe()
        .unwrap();
    let cudart_dir = t.0.join("usr/local/cuda-12.4/targets/x86_64-linux/lib");
    assert_eq!(
        n.linking,
        Linking::Static {
            archive: t.0.join(TARBALL).join("lib/libnccl_static.a"),
            cudart: cudart_dir.join("libcudart_static.a"),
        }
    );
    let d = directives(&n);
    assert_eq!(
        d[..8],
        [
            format!(
                "cargo:rustc-link-search=native={}",
                t.0.join(TARBALL).join("lib").display()
            ),
            "cargo:rustc-link-lib=static=nccl_static".into(),
            format!("cargo:rustc-link-search=native={}", cudart_dir.display()),
            "cargo:rustc-link-lib=static=cudart_static".into(),
            "cargo:rustc-link-lib=dylib=stdc++".into(),
            "cargo:rustc-link-lib=dylib=pthread".into(),
            "cargo:rustc-link-lib=dylib=dl".into(),
            "cargo:rustc-link-lib=dylib=rt".into(),
        ]
    );
    assert!(d.contains(&format!(
        "cargo:rerun-if-changed={}",
        cudart_dir.join("libcudart_static.a").display()
    )));
    // No loader warning: nothing is loaded at run time.
    assert!(!d.iter().any(|l| l.starts_with("cargo:warning")), "{d:?}");
    // The builder switch does the same as the variable, and wins over it.
    let n = config(&t.0, &[("NCCL_HOME", &home), ("NCCL_STATIC", "0")])
        .statik(true)
        .probe()
        .unwrap();
    assert!(matches!(n.linking, Linking::Static { .. }));
}

#[test]
fn static_failures_are_clear() {
    // No libnccl_static.a in a wheel.
    let e = probe(
        "wheel-venv",
        &[("VIRTUAL_ENV", "/venv"), ("NCCL_STATIC", "1")],
    )
    .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::StaticMissing { .. }));
    assert!(
        e.headline()
            .contains("has no libnccl_static.a: pip wheels ship no static library"),
        "{e}"
    );
    // libnccl_static.a but no static CUDA runtime anywhere.
    let t = StaticTree::new("nocudart", false);
    let e = config(
        &t.0,
        &[
            ("NCCL_HOME", &format!("/{TARBALL}")),
            ("NCCL_STATIC", "yes"),
        ],
    )
    .probe()
    .unwrap_err();
    match e.kind() {
        ErrorKind::CudartStaticMissing { looked, cuda } => {
            assert_eq!(cuda.unwrap().to_string(), "12.4");
            assert!(
                looked.contains(&t.0.join("usr/local/cuda/lib64")),
                "{looked:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(e.headline().starts_with(
        "static NCCL needs the static CUDA runtime libcudart_static.a (NCCL was built for CUDA 12.4), and none was found"
    ));
    // A value that means nothing.
    let e = probe("dpkg", &[("NCCL_STATIC", "maybe")]).unwrap_err();
    assert_eq!(
        e.headline(),
        "NCCL_STATIC=maybe means nothing here: set it to 1 (static) or 0 (shared)."
    );
}

#[test]
fn required_symbols_are_checked_in_the_library_file() {
    // The fixture libraries export ncclGetVersion and nothing else.
    let n = config(&tree("dpkg"), &[])
        .require_symbols(&["ncclGetVersion"])
        .probe()
        .unwrap();
    assert_eq!(n.version.to_string(), "2.28.3");
    let e = config(&tree("dpkg"), &[])
        .require_symbols(&[
            "ncclGetVersion",
            "ncclCommSplit",
            "ncclMemFree",
            "myOwnThing",
        ])
        .probe()
        .unwrap_err();
    match e.kind() {
        ErrorKind::MissingSymbols {
            missing, version, ..
        } => {
            assert_eq!(version.to_string(), "2.28.3");
            let names: Vec<_> = missing
                .iter()
                .map(|m| (m.name.as_str(), m.introduced_in))
                .collect();
            assert_eq!(
                names,
                [
                    ("ncclCommSplit", Some("2.18.1")),
                    ("ncclMemFree", Some("2.19.1")),
                    ("myOwnThing", None)
                ]
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(e.headline().ends_with(
        "is NCCL 2.28.3, which lacks ncclCommSplit (added in NCCL 2.18.1), ncclMemFree (added in NCCL \
         2.19.1), myOwnThing (not an NCCL function nccl-find knows). Install NCCL 2.19.1 or newer (e.g. pip \
         install nvidia-nccl-cu12), or point NCCL_HOME at one."
    ), "{}", e.headline());
}

#[test]
fn docs_rs_probes_nothing() {
    let e = probe("dpkg", &[("DOCS_RS", "1"), ("NCCL_HOME", "/nope")]).unwrap_err();
    assert_eq!(e.kind(), &ErrorKind::DocsRs);
    assert!(e.is_docs_rs());
    assert!(e.report().candidates.is_empty() && e.report().looked.is_empty());
    // Any other error is not.
    let other = probe("empty", &[("NCCL_HOME", "/nope")]).unwrap_err();
    assert!(!other.is_docs_rs(), "{other}");
    let read: Vec<&str> = e.report().env.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(read, ["DOCS_RS"]);
    assert!(config(&tree("dpkg"), &[("DOCS_RS", "1")])
        .probe_or_exit()
        .is_none());
}

#[test]
fn cross_compiling_reads_files_only() {
    let cross = [
        ("TARGET", "aarch64-unknown-linux-gnu"),
        ("HOST", "x86_64-unknown-linux-gnu"),
    ];
    let run = |root: &Path, extra: &[(&str, &str)]| {
        let mut vars: Vec<(&str, &str)> = cross.to_vec();
        vars.extend_from_slice(extra);
        let mut c = Config::new();
        c.root(root)
            .cargo_metadata(false)
            .env_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        c.probe()
    };
    // A target with no NCCL.
    let e = run(&tree("empty"), &[("LD_LIBRARY_PATH", "/x")]).unwrap_err();
    assert_eq!(e.kind(), &ErrorKind::NotFound);
    assert!(e.report().cross);
    assert_eq!(e.report().target, "aarch64-unknown-linux-gnu");
    assert!(!e.report().loader.used_ld_library_path);
    assert!(e
        .report()
        .env
        .iter()
        .any(|r| r.to_string() == "AARCH64_UNKNOWN_LINUX_GNU_NCCL_HOME unset"));
    // An x86-64 library named for an aarch64 target.
    let e = run(
        &tree("dpkg"),
        &[
            ("NCCL_INCLUDE_DIR", "/usr/include"),
            ("NCCL_LIB_DIR", "/usr/lib/x86_64-linux-gnu"),
        ],
    )
    .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Explicit {
                problem: Problem::WrongArch { machine: 62, .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.headline().contains("is built for another machine (ELF machine 62, x86-64), not for AArch64 (aarch64-unknown-linux-gnu)"));
}

#[test]
fn a_sysroot_is_honoured() {
    let vars = |sysroot: &str| {
        [
            ("TARGET", "x86_64-unknown-linux-gnu".to_string()),
            ("HOST", "aarch64-unknown-linux-gnu".to_string()),
            ("NCCL_SYSROOT", sysroot.to_string()),
        ]
    };
    let n = Config::new()
        .cargo_metadata(false)
        .env_vars(vars(tree("dpkg").to_str().unwrap()))
        .probe()
        .unwrap();
    assert_eq!(n.report.root, std::fs::canonicalize(tree("dpkg")).unwrap());
    assert_eq!(n.version.to_string(), "2.28.3");
    let e = Config::new()
        .cargo_metadata(false)
        .env_vars(vars("/no/such/sysroot"))
        .probe()
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Explicit {
                problem: Problem::Missing { .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(e
        .headline()
        .starts_with("NCCL_SYSROOT=/no/such/sysroot was set"));
}

#[test]
fn the_run_time_loader_check() {
    // dpkg's own library is what the loader finds: no warning.
    let n = probe("dpkg", &[]).unwrap();
    let pick = n.report.loader.pick.as_ref().unwrap();
    assert_eq!(pick.real, n.library_real);
    assert_eq!(pick.via, "default dir");
    assert!(n.report.warnings.is_empty(), "{:?}", n.report.warnings);

    // The GPU image: the venv's wheel is linked, dpkg's older patch of the
    // same minor is loaded (the same API): a note, not a build's warning.
    let n = probe("gpu-image", &[("VIRTUAL_ENV", "/opt/torch/.venv")]).unwrap();
    let pick = n.report.loader.pick.as_ref().unwrap();
    assert_eq!(pick.version.as_ref().unwrap().to_string(), "2.28.3");
    assert!(n.report.warnings.is_empty(), "{:?}", n.report.warnings);
    let w = n
        .report
        .notes
        .iter()
        .find(|w| w.starts_with("at run time the loader picks"))
        .unwrap();
    assert!(
        w.contains("(NCCL 2.28.3, via default dir), not the linked"),
        "{w}"
    );
    assert!(
        w.contains(
            "(NCCL 2.28.9): the same minor version has the same API, so the program runs, with \
             that file's fixes. Put "
        ),
        "{w}"
    );

    // LD_LIBRARY_PATH puts the wheel first, and then all is well.
    let lib = "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib";
    let n = probe(
        "gpu-image",
        &[
            ("VIRTUAL_ENV", "/opt/torch/.venv"),
            ("LD_LIBRARY_PATH", lib),
        ],
    )
    .unwrap();
    assert_eq!(
        n.report.loader.pick.as_ref().unwrap().via,
        "LD_LIBRARY_PATH"
    );
    assert_eq!(n.report.loader.visible.len(), 2);
    assert!(!n
        .report
        .warnings
        .iter()
        .chain(&n.report.notes)
        .any(|w| w.starts_with("at run time")));

    // So does a RUNPATH the final binary will carry.
    let n = config(&tree("gpu-image"), &[("VIRTUAL_ENV", "/opt/torch/.venv")])
        .runpath(tree("gpu-image").join(&lib[1..]))
        .probe()
        .unwrap();
    assert_eq!(n.report.loader.pick.as_ref().unwrap().via, "RUNPATH");
    assert!(!n
        .report
        .warnings
        .iter()
        .chain(&n.report.notes)
        .any(|w| w.starts_with("at run time")));

    // Found through the loader cache.
    let n = probe("ldcache", &[]).unwrap();
    assert_eq!(n.report.loader.pick.as_ref().unwrap().via, "loader cache");
}

#[cfg(feature = "cc")]
#[test]
fn compile_and_run_check_against_fixture_libraries() {
    // -lnccl against libnccl.so, and libnccl.so.2 by file name.
    for (name, vars, code) in [
        ("tarball", vec![("NCCL_HOME", format!("/{TARBALL}"))], 22105),
        (
            "wheel-venv",
            vec![("VIRTUAL_ENV", "/venv".to_string())],
            22105,
        ),
        ("dpkg", vec![], 22803),
    ] {
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let n = config(&tree(name), &vars)
            .compile_check(true)
            .probe()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let c = n.compile_check.expect("the check ran");
        assert_eq!((c.runtime_code, c.header_code), (code, code), "{name}");
    }
    // Cross-compiling: skipped, with a warning.
    let n = config(&tree("dpkg"), &[("HOST", "aarch64-unknown-linux-gnu")])
        .compile_check(true)
        .probe()
        .unwrap();
    assert_eq!(n.compile_check, None);
    assert!(n
        .report
        .warnings
        .iter()
        .any(|w| w.contains("runs only where host == target")));
}
