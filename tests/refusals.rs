//! What the probe refuses in the fixture trees, and the words it gives:
//! NCCL 1, a header and a library of other versions, broken links,
//! garbage, half an install, a `.pc` that points elsewhere, `NCCL_HOME`
//! at the wrong directory.

mod common;

use std::path::Path;

use common::fixture::{found, logical, probe, tree};
use nccl_find::explain::{Problem, SourceKind};
use nccl_find::{Config, ErrorKind};

#[test]
fn runtime_only_dpkg_says_install_libnccl_dev() {
    let e = probe("dpkg-runtime-only", &[]).unwrap_err();
    assert_eq!(e.kind(), &ErrorKind::NotFound);
    let c = &e.report().candidates[0];
    match c.problem() {
        Some(Problem::NoHeader { hint, .. }) => assert_eq!(
            hint,
            "Only the runtime package libnccl2 2.28.3-1+cuda13.0 is installed. Install the headers: \
             apt install libnccl-dev=2.28.3-1+cuda13.0"
        ),
        other => panic!("{other:?}"),
    }
    // The package found is named first, with the apt line; no advice to
    // install NCCL some other way.
    let msg = e.to_string();
    assert!(
        msg.starts_with("nccl-find: no NCCL here can be used. The nearest: NCCL 2.28.3 (CUDA 13.0) at /usr/lib/x86_64-linux-gnu"),
        "{msg}"
    );
    assert!(
        msg.lines().nth(1).unwrap().ends_with(
            "Only the runtime package libnccl2 2.28.3-1+cuda13.0 is installed. Install the headers: \
             apt install libnccl-dev=2.28.3-1+cuda13.0"
        ),
        "{msg}"
    );
    assert!(!msg.contains("pip install nvidia-nccl-cu12"), "{msg}");
    assert!(!msg.contains("Looked in ("), "{msg}");
}

#[test]
fn dpkg_version_skew_is_refused_with_both_versions() {
    let e = probe("dpkg-skew", &[]).unwrap_err();
    assert_eq!(e.kind(), &ErrorKind::NotFound);
    assert_eq!(
        e.report().candidates[0].problem(),
        Some(&Problem::DpkgSkew {
            runtime: "2.28.3-1+cuda13.0".into(),
            dev: "2.27.7-1+cuda12.9".into()
        })
    );
}

#[test]
fn stale_nccl1_is_refused_and_probing_goes_on() {
    let n = found("nccl1-and-nccl2", &[("CONDA_PREFIX", "/opt/anaconda3")]);
    assert_eq!(n.version.to_string(), "2.28.3");
    assert_eq!(n.origin.source, SourceKind::System);
    let stale: Vec<_> = n.others().collect();
    assert_eq!(stale.len(), 1);
    match stale[0].problem() {
        Some(Problem::Nccl1 { file, .. }) => {
            assert_eq!(logical(&n.report, file), "/opt/anaconda3/include/nccl.h")
        }
        other => panic!("{other:?}"),
    }
    let text = stale[0].problem().unwrap().to_string();
    assert!(text.contains(
        "is NCCL 1 (no version macros, and NCCL 1's result code ncclInvalidDevicePointer)"
    ));
    assert!(text.contains("torch/lib/tmp_install"));
}

#[test]
fn nccl1_alone_says_so() {
    let e = probe(
        "nccl1-only",
        &[
            ("CONDA_PREFIX", "/opt/anaconda3"),
            ("LIBRARY_PATH", "/home/u/pytorch/torch/lib/tmp_install/lib"),
        ],
    )
    .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::OnlyNccl1 { files } if !files.is_empty()));
    assert_eq!(e.report().candidates.len(), 2);
    // The files and the fix, first and last.
    let text = e.to_string();
    assert!(
        text.starts_with("nccl-find: only NCCL 1 was found (")
            && text.contains(
                "), and NCCL 1 is refused: delete those stale copies or take them off your paths, \
             then install NCCL 2 (pip install nvidia-nccl-cu12, or apt install libnccl2 \
             libnccl-dev).\n"
            ),
        "{text}"
    );
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("only NCCL 1 was found ("),
        "{text}"
    );
    assert!(text.contains("  - NCCL 1 at /opt/anaconda3"), "{text}");

    // Named explicitly, NCCL 1 is an error of its own.
    let e = probe(
        "nccl1-only",
        &[("NCCL_HOME", "/home/u/pytorch/torch/lib/tmp_install")],
    )
    .unwrap_err();
    assert!(matches!(
        e.kind(),
        ErrorKind::Explicit {
            problem: Problem::Nccl1 { .. },
            ..
        }
    ));
}

#[test]
fn mismatched_header_and_library_are_refused_with_both() {
    let e = probe("mismatch", &[("NCCL_HOME", "/opt/nccl-mixed")]).unwrap_err();
    match e.kind() {
        ErrorKind::Explicit {
            problem:
                Problem::Mismatch {
                    header,
                    header_version,
                    library,
                    library_version,
                },
            ..
        } => {
            assert_eq!(
                logical(e.report(), header),
                "/opt/nccl-mixed/include/nccl.h"
            );
            assert_eq!(header_version.to_string(), "2.21.5");
            assert_eq!(
                logical(e.report(), library),
                "/opt/nccl-mixed/lib/libnccl.so.2.18.3"
            );
            assert_eq!(library_version.to_string(), "2.18.3");
        }
        other => panic!("{other:?}"),
    }
    // The explicit pair pointing at the same mixed dirs: same refusal.
    let e = probe(
        "mismatch",
        &[
            ("NCCL_INCLUDE_DIR", "/opt/nccl-mixed/include"),
            ("NCCL_LIB_DIR", "/opt/nccl-mixed/lib"),
        ],
    )
    .unwrap_err();
    assert!(matches!(
        e.kind(),
        ErrorKind::Explicit {
            problem: Problem::Mismatch { .. },
            ..
        }
    ));
}

#[test]
fn broken_symlink_names_the_missing_target() {
    // libnccl.so -> libnccl.so.2 -> a file that is gone, made in a copy.
    let root = std::env::temp_dir().join(format!("nccl-find-broken-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    common::copy_tree(&tree("broken-symlinks"), &root);
    let lib = root.join("opt/nccl-broken/lib");
    std::os::unix::fs::symlink("libnccl.so.2.21.5", lib.join("libnccl.so.2")).unwrap();
    std::os::unix::fs::symlink("libnccl.so.2", lib.join("libnccl.so")).unwrap();
    let e = Config::new()
        .root(&root)
        .target("x86_64-unknown-linux-gnu")
        .env_vars([("NCCL_HOME", "/opt/nccl-broken")])
        .probe()
        .unwrap_err();
    let _ = std::fs::remove_dir_all(&root);
    match e.kind() {
        ErrorKind::Explicit {
            problem: Problem::BrokenSymlink { link, target },
            ..
        } => {
            assert_eq!(logical(e.report(), link), "/opt/nccl-broken/lib/libnccl.so");
            assert_eq!(
                logical(e.report(), target),
                "/opt/nccl-broken/lib/libnccl.so.2.21.5"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn garbage_header_not_elf_and_bad_code() {
    let e = probe("garbage-header", &[("NCCL_HOME", "/opt/bad")]).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Explicit { problem: Problem::BadHeader { why, .. }, .. }
            if why == "it defines no NCCL_MAJOR, NCCL_MINOR or NCCL_PATCH: this is not an NCCL header")
    );
    let e = probe("not-elf", &[("NCCL_HOME", "/opt/nccl-text")]).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Explicit { problem: Problem::BadLibrary { why, .. }, .. }
            if why == "it is not an ELF file (no \\x7fELF magic)"),
        "{e}"
    );
    let e = probe("bad-code", &[("NCCL_HOME", "/opt/nccl-code")]).unwrap_err();
    assert!(e.to_string().contains(
        "NCCL_VERSION_CODE is 20804, but NCCL_MAJOR/MINOR/PATCH say 2.8.4, whose code is 2804"
    ));
}

#[test]
fn old_formula_version_code_is_read() {
    let n = found("old-formula", &[]);
    assert_eq!(
        (n.version.to_string(), n.version.code),
        ("2.8.4".into(), 2804)
    );
    assert_eq!(logical(&n.report, &n.lib_dir), "/usr/local/lib");
}

#[test]
fn a_pc_file_with_the_build_machines_prefix_is_named_and_bypassed() {
    let n = found("dpkg-wrong-pc", &[]);
    // Found through its real source.
    assert_eq!(n.origin.source, SourceKind::System);
    assert_eq!(n.version.to_string(), "2.28.3");
    let pc = tree("dpkg-wrong-pc").join("usr/lib/x86_64-linux-gnu/pkgconfig/nccl.pc");
    let named: Vec<(&Path, &str, &str)> = n
        .report
        .misleading_pc
        .iter()
        .map(|m| (m.file.as_path(), m.prefix.as_str(), m.flags.as_str()))
        .collect();
    assert_eq!(
        named,
        [(
            std::fs::canonicalize(&pc).unwrap().as_path(),
            "/usr/local",
            "-I/usr/local/include -L/usr/local/lib"
        )]
    );
    // Bypassed already: a note for --print, no build's warning.
    assert!(n.report.warnings.is_empty(), "{:?}", n.report.warnings);
    assert!(
        n.report.notes.iter().any(|w| w.starts_with(
            "/usr/lib/x86_64-linux-gnu/pkgconfig/nccl.pc says prefix=/usr/local (-I/usr/local/include \
             -L/usr/local/lib), but there is no nccl.h and no libnccl there"
        )),
        "{:?}",
        n.report.warnings
    );
    // A correct .pc (the plain dpkg tree has none) raises nothing.
    assert!(found("dpkg", &[]).report.misleading_pc.is_empty());
}

#[test]
fn a_header_older_than_its_library_is_used_with_a_warning_naming_both() {
    // The explicit pair from two trees: EasyBuild's 2.18.3 header, dpkg's
    // 2.28.3 library. NCCL runs programs built against older headers.
    let inc = "/easybuild/apps/software/NCCL/2.18.3-GCCcore-12.3.0-CUDA-12.1.1/include";
    let n = found(
        "",
        &[
            ("NCCL_INCLUDE_DIR", inc),
            ("NCCL_LIB_DIR", "/dpkg/usr/lib/x86_64-linux-gnu"),
        ],
    );
    assert_eq!(n.version.to_string(), "2.18.3");
    assert_eq!(n.library_version.to_string(), "2.28.3");
    let warning = format!(
        "the header {inc}/nccl.h is NCCL 2.18.3, older than the library \
         /dpkg/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3 (NCCL 2.28.3): programs built against \
         it run, but what NCCL added after 2.18.3 is not declared. Use the header that came with \
         the library (NCCL_INCLUDE_DIR), if that is not what you meant."
    );
    let shown: Vec<String> = n
        .report
        .warnings
        .iter()
        .map(|w| w.replace(&tree("x").parent().unwrap().display().to_string(), ""))
        .filter(|w| w.starts_with("the header"))
        .collect();
    // (The other warning is the run-time loader's: no libnccl.so.2 here.)
    assert_eq!(shown, [warning.as_str()]);
    let directives = n.cargo_directives();
    let printed = format!("cargo:warning=nccl-find: {}", n.report.warnings[0]);
    assert!(directives.contains(&printed), "{directives:#?}");
    // The selected line names the library's version, and the header's beside it.
    #[cfg(feature = "command")]
    {
        let text = nccl_find::internal::report(&n.report, None, &[], None);
        assert!(
            text.contains("Selected: NCCL 2.28.3 (CUDA 13.0) with header 2.18.3 at /dpkg/usr/lib/x86_64-linux-gnu"),
            "{text}"
        );
    }
    // The same versions from one install: no warning.
    let same = found("dpkg", &[]);
    assert!(
        same.report.warnings.is_empty(),
        "{:?}",
        same.report.warnings
    );
}

#[test]
fn a_source_builds_nccl_pc_names_the_tree_that_holds_nccl() {
    // `make src.build` writes build/lib/pkgconfig/nccl.pc with
    // prefix=/usr/local, where there is no NCCL.
    let pc_dir = "/src/nccl/build/lib/pkgconfig";
    let e = probe("source-build", &[("PKG_CONFIG_PATH", pc_dir)]).unwrap_err();
    assert_eq!(*e.kind(), ErrorKind::NotFound);
    let r = e.report();
    assert_eq!(r.misleading_pc.len(), 1);
    let pc = &r.misleading_pc[0];
    assert_eq!(logical(r, &pc.file), format!("{pc_dir}/nccl.pc"));
    assert_eq!(pc.prefix, "/usr/local");
    assert_eq!(
        pc.tree.as_deref().map(|t| logical(r, t)).as_deref(),
        Some("/src/nccl/build")
    );
    assert_eq!(
        r.warnings,
        [format!(
            "{pc_dir}/nccl.pc says prefix=/usr/local (-I/usr/local/include -L/usr/local/lib), but \
             there is no nccl.h and no libnccl there: the file describes the machine NCCL was built \
             on, or where `make install` would put it. `pkg-config --cflags --libs nccl` gives C \
             and CMake builds wrong flags here; nccl-find ignores the file. Fix its prefix= line, or \
             use `nccl-find --cflags --libs`. The tree it sits in, /src/nccl/build, holds an NCCL \
             (as `pkg-config --define-prefix` finds it): use it with NCCL_HOME=/src/nccl/build."
        )]
    );
    // Following the advice works.
    let n = found("source-build", &[("NCCL_HOME", "/src/nccl/build")]);
    assert_eq!(n.version.to_string(), "2.23.4");
    // A distro's misleading nccl.pc sits in no such tree: no advice, and
    // no build's warning (a note for --print).
    let n = found("dpkg-wrong-pc", &[]);
    assert_eq!(n.report.misleading_pc[0].tree, None);
    assert!(n.report.warnings.is_empty(), "{:?}", n.report.warnings);
    assert!(!n.report.notes[0].contains("NCCL_HOME"));
}

#[test]
fn nccl_home_at_a_site_packages_or_a_venv_asks_for_the_wheels_dir() {
    let sp = "/venv/lib/python3.11/site-packages";
    for home in [sp, "/venv"] {
        let e = probe("wheel-venv", &[("NCCL_HOME", home)]).unwrap_err();
        let ErrorKind::Explicit { variable, problem } = e.kind() else {
            panic!("{home}: {:?}", e.kind());
        };
        assert_eq!(variable, &format!("NCCL_HOME={home}"));
        let Problem::WheelBelow { var, path, wheel } = problem else {
            panic!("{home}: {problem:?}");
        };
        assert_eq!(var, "NCCL_HOME");
        assert_eq!(logical(e.report(), path), home);
        assert_eq!(logical(e.report(), wheel), format!("{sp}/nvidia/nccl"));
        let real = tree("wheel-venv").display().to_string();
        assert_eq!(
            problem.to_string(),
            format!(
                "{real}{home} is not an NCCL install, but a pip wheel's NCCL is below it: did you \
                 mean NCCL_HOME={real}{sp}/nvidia/nccl?"
            )
        );
    }
    // The directory it suggests is the install.
    let n = found("wheel-venv", &[("NCCL_HOME", &format!("{sp}/nvidia/nccl"))]);
    assert_eq!(n.version.to_string(), "2.21.5");
    // A directory with no wheel below it keeps the plain message.
    let e = probe("wheel-venv", &[("NCCL_HOME", "/venv/lib")]).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Explicit {
                problem: Problem::NoNccl { .. },
                ..
            }
        ),
        "{:?}",
        e.kind()
    );
}

/// An NCCL 1 header left beside an NCCL 2 library (the library upgraded,
/// the header not): named as a stale header, both files and both
/// versions, with the fix; not "only NCCL 1 was found".
#[test]
fn a_stale_nccl1_header_beside_an_nccl2_library_is_named_so() {
    let dir = std::env::temp_dir().join(format!("nf-stale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("include")).unwrap();
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::fs::copy(
        tree("nccl1-only").join("opt/anaconda3/include/nccl.h"),
        dir.join("include/nccl.h"),
    )
    .unwrap();
    std::fs::copy(
        tree("dpkg").join("usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3"),
        dir.join("lib/libnccl.so.2.28.3"),
    )
    .unwrap();
    std::os::unix::fs::symlink("libnccl.so.2.28.3", dir.join("lib/libnccl.so.2")).unwrap();
    std::os::unix::fs::symlink("libnccl.so.2", dir.join("lib/libnccl.so")).unwrap();
    let e = common::config(Path::new("/"), &[("NCCL_HOME", dir.to_str().unwrap())])
        .probe()
        .unwrap_err();
    let text = e.to_string();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        text.contains(&format!(
            "the header {}/include/nccl.h is NCCL 1 (no version macros, and NCCL 1's result code \
             ncclInvalidDevicePointer), but the library {}/lib/libnccl.so beside it is NCCL \
             2.28.3: the header is a stale copy. Replace it with NCCL 2.28.3's nccl.h",
            dir.display(),
            dir.display()
        )),
        "{text}"
    );
    assert!(!text.contains("only NCCL 1 was found"), "{text}");
}

/// The commonest slips with `NCCL_HOME`, each with the fix its case
/// needs: the wheel's `lib/` named instead of its prefix, the `build/` of
/// a checkout never built, a relative path that does not exist from the
/// directory a build script runs in.
#[test]
fn nccl_home_slips_get_the_fix_they_need() {
    let wheel = tree("wheel-venv");
    let sp = "/venv/lib/python3.11/site-packages/nvidia/nccl";
    let e = common::config(&wheel, &[("NCCL_HOME", &format!("{sp}/lib"))])
        .probe()
        .unwrap_err();
    assert!(
        e.to_string().lines().last().unwrap().ends_with(&format!(
            "is a library directory (it holds libnccl.so*), and NCCL_HOME names the prefix above \
             it: did you mean NCCL_HOME={}{sp}?",
            wheel.display()
        )),
        "{e}"
    );
    let source = tree("source-unbuilt");
    let e = common::config(&source, &[("NCCL_HOME", "/src/nccl/build")])
        .probe()
        .unwrap_err();
    assert!(
        e.to_string().lines().last().unwrap().ends_with(
            "is the template of an NCCL source checkout that was never built. Build it first \
             (`make -j src.build` in the checkout), then set NCCL_HOME to its build/ directory."
        ),
        "{e}"
    );
    let e = common::config(Path::new("/"), &[("NCCL_HOME", "no/such/nccl")])
        .probe()
        .unwrap_err();
    let cwd = std::env::current_dir().unwrap();
    assert!(
        e.to_string().lines().last().unwrap().ends_with(&format!(
            "NCCL_HOME=no/such/nccl is a relative path, taken from the current directory as \
             {}/no/such/nccl, which does not exist: a build script runs in its package's \
             directory, not where cargo was started. Give an absolute path \
             (NCCL_HOME=\"$PWD/no/such/nccl\" where it exists).",
            cwd.display()
        )),
        "{e}"
    );
}
