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
        nccl_find::internal::LEVELS.len()
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

#[test]
fn rpath_directive() {
    assert_eq!(
        nccl_find::internal::rpath_directives(Path::new("/opt/nccl,x/lib")).unwrap(),
        [
            "cargo:rustc-link-arg=-Wl,--disable-new-dtags",
            "cargo:rustc-link-arg=-Xlinker",
            "cargo:rustc-link-arg=-rpath",
            "cargo:rustc-link-arg=-Xlinker",
            "cargo:rustc-link-arg=/opt/nccl,x/lib"
        ]
    );
    assert_eq!(
        nccl_find::internal::rpath_directives(Path::new("/opt/a\ncargo:rustc-cfg=evil"))
            .unwrap_err(),
        "/opt/a\\ncargo:rustc-cfg=evil holds a line break, which a cargo directive cannot carry"
    );
    // What the loader would split or expand never reaches RUNPATH.
    for (dir, c, why) in [
        ("/opt/nccl:v2/lib", ':', "the loader splits an rpath at `:`"),
        ("/opt/:/lib", ':', "the loader splits an rpath at `:`"),
        (
            "/opt/$ORIGIN/lib",
            '$',
            "the loader expands `$` in an rpath",
        ),
        ("/opt/nccl$$/lib", '$', "the loader expands `$` in an rpath"),
    ] {
        assert_eq!(
            nccl_find::internal::rpath_directives(Path::new(dir)).unwrap_err(),
            format!(
                "{dir} holds `{c}`, and {why}: move NCCL to a directory without it, or set \
                 LD_LIBRARY_PATH"
            )
        );
    }
}

#[test]
fn emit_rpath_from_dep_reads_the_sys_crates_or_a_wrappers_metadata_and_is_never_silent() {
    use std::ffi::OsString;
    let rpath = |d: &str| {
        vec![
            "cargo:rustc-link-arg=-Wl,--disable-new-dtags".to_string(),
            "cargo:rustc-link-arg=-Xlinker".to_string(),
            "cargo:rustc-link-arg=-rpath".to_string(),
            "cargo:rustc-link-arg=-Xlinker".to_string(),
            format!("cargo:rustc-link-arg={d}"),
        ]
    };
    let run = |vars: &[(&str, &str)]| {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        nccl_find::internal::rpath_from_vars(&vars)
    };
    let rerun = [
        "cargo:rerun-if-env-changed=DEP_NCCL_LIB_DIR".to_string(),
        "cargo:rerun-if-env-changed=DEP_NCCL_RUN_LIB_DIR".to_string(),
    ];
    // A direct dependent of the -sys crate.
    let (lines, dir) = run(&[("DEP_NCCL_LIB_DIR", "/opt/nccl/lib"), ("PATH", "/bin")]);
    assert_eq!(dir.as_deref(), Some(Path::new("/opt/nccl/lib")));
    assert_eq!(lines, [rerun.to_vec(), rpath("/opt/nccl/lib")].concat());
    // Through a wrapper that re-emits it under its own links key.
    let (lines, dir) = run(&[("DEP_MYWRAP_NCCL_LIB_DIR", "/w/lib")]);
    assert_eq!(dir.as_deref(), Some(Path::new("/w/lib")));
    let wrap = "cargo:rerun-if-env-changed=DEP_MYWRAP_NCCL_LIB_DIR".to_string();
    assert_eq!(
        lines,
        [rerun.to_vec(), vec![wrap.clone()], rpath("/w/lib")].concat()
    );
    // Two wrappers that agree, and two that do not.
    let (_, dir) = run(&[
        ("DEP_A_NCCL_LIB_DIR", "/w/lib"),
        ("DEP_B_NCCL_LIB_DIR", "/w/lib"),
    ]);
    assert_eq!(dir.as_deref(), Some(Path::new("/w/lib")));
    let (lines, dir) = run(&[("DEP_A_NCCL_LIB_DIR", "/a"), ("DEP_B_NCCL_LIB_DIR", "/b")]);
    assert_eq!(dir, None);
    assert_eq!(
        lines.last().unwrap(),
        "cargo:warning=nccl-find: no rpath was given: DEP_A_NCCL_LIB_DIR, DEP_B_NCCL_LIB_DIR \
         disagree: keep one NCCL in the build"
    );
    // Under docs.rs the -sys crate probes nothing, so nothing reaches it:
    // nothing to say, and no blame on the dependency graph.
    let (lines, dir) = run(&[("DOCS_RS", "1"), ("PATH", "/bin")]);
    assert_eq!((lines, dir), (Vec::<String>::new(), None));
    // Nothing reaches it: a warning that says why and what to do.
    let (lines, dir) = run(&[("PATH", "/bin")]);
    assert_eq!(dir, None);
    assert_eq!(
        lines,
        [
            rerun[0].clone(),
            rerun[1].clone(),
            "cargo:warning=nccl-find: no rpath was given: DEP_NCCL_LIB_DIR is not set: cargo passes \
             it only to packages that depend directly on the `links = \"nccl\"` -sys crate, so the \
             binary will need LD_LIBRARY_PATH to start. Add that -sys crate to this package's \
             [dependencies], or have the crate in between re-emit it (a `links` key of its own, and \
             `cargo:nccl_lib_dir=<its DEP_NCCL_LIB_DIR>` in its build script)."
                .to_string()
        ]
    );
    // A directory the loader would split.
    let (lines, dir) = run(&[("DEP_NCCL_LIB_DIR", "/x/nccl:v2/lib")]);
    assert_eq!(dir, None);
    assert_eq!(
        lines.last().unwrap(),
        "cargo:warning=nccl-find: no rpath was given: DEP_NCCL_LIB_DIR: /x/nccl:v2/lib holds `:`, \
         and the loader splits an rpath at `:`: move NCCL to a directory without it, or set \
         LD_LIBRARY_PATH"
    );
    // Under a sysroot the -sys crate says where the target has it; a
    // wrapper passes that on beside the lib dir.
    let (lines, dir) = run(&[
        ("DEP_NCCL_LIB_DIR", "/sysroot/opt/nccl/lib"),
        ("DEP_NCCL_RUN_LIB_DIR", "/opt/nccl/lib"),
    ]);
    assert_eq!(dir.as_deref(), Some(Path::new("/opt/nccl/lib")));
    assert_eq!(lines, [rerun.to_vec(), rpath("/opt/nccl/lib")].concat());
    let (_, dir) = run(&[
        ("DEP_W_NCCL_LIB_DIR", "/sysroot/opt/nccl/lib"),
        ("DEP_W_NCCL_RUN_LIB_DIR", "/opt/nccl/lib"),
    ]);
    assert_eq!(dir.as_deref(), Some(Path::new("/opt/nccl/lib")));
    // A directory the loader searches by default gets no rpath: it needs
    // none, and one there would put every library in it ahead of
    // LD_LIBRARY_PATH.
    for d in ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/lib"] {
        let (lines, dir) = run(&[
            ("DEP_NCCL_LIB_DIR", d),
            ("TARGET", "x86_64-unknown-linux-gnu"),
        ]);
        assert_eq!(
            (lines, dir.as_deref()),
            (rerun.to_vec(), Some(Path::new(d)))
        );
    }
    // A directory another user could make again once it is gone: no
    // rpath, and a warning that says why and what to do.
    for (d, why) in [
        (
            "/tmp/venv/lib/python3.11/site-packages/nvidia/nccl/lib",
            "/tmp/venv/lib/python3.11/site-packages/nvidia/nccl/lib lies in the temporary \
             directory /tmp, which is cleaned, and where another user could re-create it once it \
             is gone",
        ),
        (
            "/home/u/cargo-installQ1w2E3/release/build/x/out/nccl-loader",
            "/home/u/cargo-installQ1w2E3/release/build/x/out/nccl-loader is inside \
             /home/u/cargo-installQ1w2E3, the temporary build directory of `cargo install`, which \
             is deleted when the install ends",
        ),
    ] {
        let (lines, dir) = run(&[("DEP_NCCL_LIB_DIR", d)]);
        assert_eq!(dir, None);
        assert_eq!(
            lines.last().unwrap(),
            &format!(
                "cargo:warning=nccl-find: no rpath was given: {why}. Install NCCL in a directory of \
                 your own outside any temporary or shared directory (a virtualenv under your home, \
                 say), or start the program with LD_LIBRARY_PATH naming it"
            )
        );
    }
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
