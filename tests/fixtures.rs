//! The whole probe against the fixture trees in `fixtures/trees`, each with
//! a fixed environment: nothing here depends on what this machine has.

mod common;

use std::path::{Path, PathBuf};

use nccl_find::explain::{Package, Problem, SourceKind, Status};
use nccl_find::{Config, Error, ErrorKind, Nccl, Report};

fn tree(name: &str) -> PathBuf {
    common::trees().join(name)
}

fn config(name: &str, vars: &[(&str, &str)]) -> Config {
    let mut c = Config::new();
    c.root(tree(name))
        .target("x86_64-unknown-linux-gnu")
        .env_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    c
}

fn probe(name: &str, vars: &[(&str, &str)]) -> Result<Nccl, Error> {
    config(name, vars).probe()
}

/// A path as seen inside the fixture root.
fn logical(r: &Report, p: &Path) -> String {
    r.logical(p).display().to_string()
}

fn found(name: &str, vars: &[(&str, &str)]) -> Nccl {
    match probe(name, vars) {
        Ok(n) => n,
        Err(e) => panic!("{name}: expected NCCL, got:\n{e}"),
    }
}

#[test]
fn dpkg_packages_are_found_named_and_versioned() {
    let n = found("dpkg", &[]);
    let r = &n.report;
    assert_eq!(n.version.to_string(), "2.28.3");
    assert_eq!(n.version.code, 22803);
    assert_eq!(
        (n.version.major, n.version.minor, n.version.patch),
        (2, 28, 3)
    );
    assert_eq!(n.version.matches(">=2.18, <3"), Ok(true));
    assert_eq!(n.library_version.to_string(), "2.28.3");
    assert_eq!(n.cuda_version.unwrap().to_string(), "13.0");
    assert_eq!(n.origin.source, SourceKind::System);
    assert_eq!(
        n.origin.package,
        Some(Package::Dpkg {
            runtime: Some("2.28.3-1+cuda13.0".into()),
            dev: Some("2.28.3-1+cuda13.0".into())
        })
    );
    assert_eq!(logical(r, &n.include_paths[0]), "/usr/include");
    assert_eq!(logical(r, &n.lib_dir), "/usr/lib/x86_64-linux-gnu");
    assert_eq!(
        logical(r, &n.library),
        "/usr/lib/x86_64-linux-gnu/libnccl.so"
    );
    assert_eq!(
        logical(r, &n.library_real),
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3"
    );
    assert!(n.has_dev_link);
    assert_eq!(n.soname.as_deref(), Some("libnccl.so.2"));
    assert_eq!(
        logical(r, n.static_library.as_ref().unwrap()),
        "/usr/lib/x86_64-linux-gnu/libnccl_static.a"
    );
    // /usr/include + /usr/lib (system dirs) holds no library: not a candidate.
    assert_eq!(n.others().count(), 0);
}

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
fn rpm_layout() {
    let n = found("rpm", &[]);
    assert_eq!(n.version.to_string(), "2.26.2");
    assert_eq!(logical(&n.report, &n.lib_dir), "/usr/lib64");
    assert_eq!(n.cuda_version.unwrap().to_string(), "12.8");
}

#[test]
fn tarball_through_nccl_home_and_through_pkg_config() {
    let home = "/opt/nccl_2.21.5-1+cuda12.4_x86_64";
    let n = found("tarball", &[("NCCL_HOME", home)]);
    assert_eq!(n.origin.source, SourceKind::Home);
    assert_eq!(
        n.origin.variable.as_deref(),
        Some(&*format!("NCCL_HOME={home}"))
    );
    assert_eq!(n.version.to_string(), "2.21.5");
    assert_eq!(logical(&n.report, n.root.as_ref().unwrap()), home);
    // The same files via pkg-config are the same install, not a second one.
    let n = found(
        "tarball",
        &[
            ("NCCL_HOME", home),
            ("PKG_CONFIG_PATH", &format!("{home}/lib/pkgconfig")),
        ],
    );
    assert_eq!(n.others().count(), 0);
    assert_eq!(
        n.report.candidates[0].also_found_by[0].source,
        SourceKind::PkgConfig
    );

    let n = found(
        "tarball",
        &[("PKG_CONFIG_PATH", &format!("{home}/lib/pkgconfig"))],
    );
    assert_eq!(n.origin.source, SourceKind::PkgConfig);
    assert!(
        n.origin
            .detail
            .contains("(Version 2.21.5; PKG_CONFIG_PATH)"),
        "{}",
        n.origin.detail
    );
    assert_eq!(
        logical(&n.report, &n.include_paths[0]),
        format!("{home}/include")
    );
}

#[test]
fn source_build_layout_and_unbuilt_checkout() {
    let n = found("source-build", &[("NCCL_HOME", "/src/nccl")]);
    assert_eq!(
        logical(&n.report, &n.include_paths[0]),
        "/src/nccl/build/include"
    );
    assert_eq!(logical(&n.report, &n.lib_dir), "/src/nccl/build/lib");
    assert_eq!(n.version.to_string(), "2.23.4");
    // Source builds are often used with NCCL_HOME at build/ directly.
    let n = found("source-build", &[("NCCL_HOME", "/src/nccl/build")]);
    assert_eq!(logical(&n.report, &n.lib_dir), "/src/nccl/build/lib");

    let e = probe("source-unbuilt", &[("NCCL_HOME", "/src/nccl")]).unwrap_err();
    match e.kind() {
        ErrorKind::Explicit {
            variable,
            problem: Problem::UnbuiltSource { template },
        } => {
            assert_eq!(variable, "NCCL_HOME=/src/nccl");
            assert_eq!(logical(e.report(), template), "/src/nccl/src/nccl.h.in");
        }
        other => panic!("{other:?}"),
    }
    assert!(e
        .to_string()
        .contains("never built. Build it first (`make -j src.build`"));
}

/// `NCCL_SOURCE_DIR`, as NVIDIA's own Rust bindings name a checkout: a
/// built one's `build/` is selected, named by that variable; an unbuilt
/// one is named as unbuilt.
#[test]
fn nccl_source_dir_names_a_checkout() {
    let n = found("source-build", &[("NCCL_SOURCE_DIR", "/src/nccl")]);
    assert_eq!(
        logical(&n.report, &n.include_paths[0]),
        "/src/nccl/build/include"
    );
    assert_eq!(logical(&n.report, &n.lib_dir), "/src/nccl/build/lib");
    assert_eq!(n.version.to_string(), "2.23.4");
    let selected = n.report.selected().unwrap();
    assert_eq!(
        selected.origin.variable.as_deref(),
        Some("NCCL_SOURCE_DIR=/src/nccl")
    );
    let e = probe("source-unbuilt", &[("NCCL_SOURCE_DIR", "/src/nccl")]).unwrap_err();
    match e.kind() {
        ErrorKind::Explicit {
            variable,
            problem: Problem::UnbuiltSource { template },
        } => {
            assert_eq!(variable, "NCCL_SOURCE_DIR=/src/nccl");
            assert_eq!(logical(e.report(), template), "/src/nccl/src/nccl.h.in");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn wheel_in_a_virtualenv_names_the_distribution() {
    let n = found("wheel-venv", &[("VIRTUAL_ENV", "/venv")]);
    assert_eq!(n.origin.source, SourceKind::Pip);
    assert_eq!(
        n.origin.package,
        Some(Package::Pip {
            name: "nvidia-nccl-cu12".into(),
            version: "2.21.5".into()
        })
    );
    assert!(!n.has_dev_link, "wheels have no libnccl.so");
    assert_eq!(
        logical(&n.report, &n.library),
        "/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"
    );
    assert_eq!(n.static_library, None);
    assert_eq!(n.cuda_version.unwrap().to_string(), "12.4");
    // Without VIRTUAL_ENV, the venv's python on PATH finds it too.
    let n = found("wheel-venv", &[("PATH", "/venv/bin:/usr/bin")]);
    assert!(
        n.origin.detail.contains("python in "),
        "{}",
        n.origin.detail
    );
}

#[test]
fn conda_hpcsdk_easybuild_and_cuda() {
    let n = found("conda", &[("CONDA_PREFIX", "/opt/conda/envs/ml")]);
    assert_eq!(
        (n.origin.source, n.version.to_string()),
        (SourceKind::Prefix, "2.19.3".into())
    );
    assert_eq!(
        n.origin.variable.as_deref(),
        Some("CONDA_PREFIX=/opt/conda/envs/ml")
    );

    let n = found("hpcsdk", &[]);
    assert_eq!(n.origin.source, SourceKind::Prefix);
    assert_eq!(
        logical(&n.report, &n.lib_dir),
        "/opt/nvidia/hpc_sdk/Linux_x86_64/24.5/comm_libs/12.4/nccl/lib"
    );

    let eb = "/apps/software/NCCL/2.18.3-GCCcore-12.3.0-CUDA-12.1.1";
    let n = found("easybuild", &[("EBROOTNCCL", eb)]);
    assert_eq!(n.origin.detail, format!("EasyBuild module EBROOTNCCL={eb}"));

    let n = found("cuda", &[]);
    assert_eq!(n.origin.source, SourceKind::Cuda);
    assert_eq!(n.version.to_string(), "2.18.5");
    // /usr/local/cuda, its include/lib64 links, /usr/local/cuda-12.4 and the
    // targets/ dir are one install, not four.
    assert_eq!(n.others().count(), 0);
    assert!(!n.report.candidates[0].also_found_by.is_empty());
}

const SPACK_NEW: &str =
    "/home/u/spack/opt/spack/linux-x86_64_v3/nccl-2.22.3-1-r6w2xmbjzc4lkh3pqtfe7vnoiyudsga5";
const SPACK_OLD: &str = "/home/u/spack/opt/spack/linux-ubuntu22.04-x86_64_v3/gcc-11.4.0/\
                         nccl-2.21.5-1-k3zqdpx4hq7lfdm2vawjz6bhgcnoe5ty";

#[test]
fn spack_prefixes_of_both_layouts_newest_first() {
    let n = found("spack", &[("SPACK_ROOT", "/home/u/spack")]);
    let r = &n.report;
    assert_eq!(n.version.to_string(), "2.22.3");
    assert_eq!(n.origin.source, SourceKind::Spack);
    assert_eq!(n.origin.source.id(), "spack");
    assert_eq!(
        n.origin.detail,
        "Spack nccl@2.22.3-1/r6w2xmb under SPACK_ROOT=/home/u/spack"
    );
    assert_eq!(
        n.origin.variable.as_deref(),
        Some("SPACK_ROOT=/home/u/spack")
    );
    assert_eq!(
        n.origin.package,
        Some(Package::Spack {
            version: "2.22.3-1".into(),
            hash: "r6w2xmbjzc4lkh3pqtfe7vnoiyudsga5".into()
        })
    );
    assert_eq!(logical(r, &n.lib_dir), format!("{SPACK_NEW}/lib"));
    assert_eq!(
        logical(r, &n.include_paths[0]),
        format!("{SPACK_NEW}/include")
    );
    assert_eq!(logical(r, n.root.as_ref().unwrap()), SPACK_NEW);
    // The older one, in the layout before Spack 1.0 (listed first), loses.
    let others: Vec<_> = n.others().collect();
    assert_eq!(others.len(), 1);
    assert_eq!(others[0].version().unwrap().to_string(), "2.21.5");
    assert_eq!(
        logical(r, others[0].lib_dir.as_ref().unwrap()),
        format!("{SPACK_OLD}/lib")
    );
    assert_eq!(
        others[0].origin.package,
        Some(Package::Spack {
            version: "2.21.5-1".into(),
            hash: "k3zqdpx4hq7lfdm2vawjz6bhgcnoe5ty".into()
        })
    );
    assert_eq!(
        others[0].status,
        Status::Lost(
            "Spack nccl@2.22.3-1/r6w2xmb under SPACK_ROOT=/home/u/spack came first within Spack"
                .into()
        )
    );
    // The CUDA package beside it is neither a compiler dir nor NCCL.
    assert!(r
        .looked
        .iter()
        .all(|l| !l.path.to_string_lossy().contains("cuda-12.4.0")));
    // The target-prefixed variable works as for every other variable.
    let n = found(
        "spack",
        &[("X86_64_UNKNOWN_LINUX_GNU_SPACK_ROOT", "/home/u/spack")],
    );
    assert_eq!(n.origin.source, SourceKind::Spack);
    // Without SPACK_ROOT the instance is not looked at.
    let e = probe("spack", &[]).unwrap_err();
    assert_eq!(e.kind(), &ErrorKind::NotFound);
    assert!(e
        .report()
        .looked
        .iter()
        .all(|l| l.source != SourceKind::Spack));
}

#[test]
fn spack_spec_json_that_is_garbage_huge_or_a_fifo_is_passed_over() {
    // Made in a copy: a crate package cannot hold a FIFO.
    let root = std::env::temp_dir().join(format!("nccl-find-spack-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    common::copy_tree(&tree("spack"), &root);
    let spec = root
        .join(SPACK_NEW.trim_start_matches('/'))
        .join(".spack/spec.json");
    fn garbage(f: &Path) {
        let mut junk =
            b"{\"spec\":{\"nodes\":[{\"name\":\"nccl\",\"version\":\"9.9\\\xff\"".to_vec();
        junk.extend(vec![b'['; 100_000]);
        junk.extend(b"\"\\");
        std::fs::write(f, junk).unwrap();
    }
    fn huge(f: &Path) {
        std::fs::File::create(f).unwrap().set_len(8 << 30).unwrap();
    }
    fn fifo(f: &Path) {
        assert!(std::process::Command::new("mkfifo")
            .arg(f)
            .status()
            .unwrap()
            .success());
    }
    type Make = fn(&Path);
    let cases: [(&str, Make); 3] = [
        ("it holds no nccl node", garbage),
        ("more than the 1048576 bytes", huge),
        ("it is a FIFO (named pipe), not a regular file", fifo),
    ];
    for (why, make) in cases {
        std::fs::remove_file(&spec).unwrap();
        make(&spec);
        let n = Config::new()
            .root(&root)
            .target("x86_64-unknown-linux-gnu")
            .env_vars([("SPACK_ROOT", "/home/u/spack")])
            .probe()
            .unwrap_or_else(|e| panic!("{why}: {e}"));
        // Named from the directory instead; the selection is the same.
        assert_eq!(n.version.to_string(), "2.22.3", "{why}");
        assert_eq!(
            n.origin.package,
            Some(Package::Spack {
                version: "2.22.3-1".into(),
                hash: "r6w2xmbjzc4lkh3pqtfe7vnoiyudsga5".into()
            }),
            "{why}"
        );
        let looked = n
            .report
            .looked
            .iter()
            .find(|l| l.source == SourceKind::Spack && l.outcome.contains("named by its directory"))
            .unwrap_or_else(|| panic!("{why}: {:?}", n.report.looked));
        assert!(looked.outcome.contains(why), "{}", looked.outcome);
    }
    let _ = std::fs::remove_dir_all(&root);
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
    assert_eq!(e.kind(), &ErrorKind::OnlyNccl1);
    assert_eq!(e.report().candidates.len(), 2);
    assert!(e
        .to_string()
        .starts_with("nccl-find: only NCCL 1 was found, and NCCL 1 is refused.\n"));

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
fn gpu_image_flags_the_conflict() {
    let n = found("gpu-image", &[("VIRTUAL_ENV", "/opt/torch/.venv")]);
    assert_eq!(n.version.to_string(), "2.28.9");
    assert_eq!(n.origin.source, SourceKind::Pip);
    let others: Vec<_> = n.others().collect();
    assert_eq!(others.len(), 1);
    assert_eq!(others[0].version().unwrap().to_string(), "2.28.3");
    assert_eq!(
        others[0].status,
        Status::Lost("pip comes earlier in the search order than system".into())
    );
    let conflict = others[0].conflict.as_deref().unwrap();
    assert!(
        conflict.starts_with("this is NCCL 2.28.3, the selected install is NCCL 2.28.9"),
        "{conflict}"
    );

    // Without the venv active, dpkg is all there is.
    let n = found("gpu-image", &[]);
    assert_eq!(n.version.to_string(), "2.28.3");
}

#[test]
fn nothing_installed_lists_where_it_looked_and_how_to_install() {
    let e = probe(
        "empty",
        &[
            ("CUDA_HOME", "/usr/local/cuda-12.4"),
            ("NCCL_VERSION", "2.28.3-1"),
        ],
    )
    .unwrap_err();
    assert_eq!(e.kind(), &ErrorKind::NotFound);
    let brief = e.to_string();
    assert!(brief.contains("  - CUDA_HOME=/usr/local/cuda-12.4: no such directory."));
    assert!(!brief.contains("Looked in"), "{brief}");
    // Every place and variable, on request.
    let e = probe(
        "empty",
        &[
            ("CUDA_HOME", "/usr/local/cuda-12.4"),
            ("NCCL_VERSION", "2.28.3-1"),
            ("NCCL_FIND_VERBOSE", "1"),
        ],
    )
    .unwrap_err();
    let msg = e.to_string();
    for needle in [
        "nccl-find: NCCL was not found.",
        "[CUDA toolkit] /usr/local/cuda-12.4: no such directory",
        "[pkg-config] /usr/lib/x86_64-linux-gnu/pkgconfig/nccl.pc: not there",
        "CUDA_HOME = /usr/local/cuda-12.4",
        "NCCL_HOME unset",
        "X86_64_UNKNOWN_LINUX_GNU_NCCL_HOME unset",
        "pip install nvidia-nccl-cu12",
        "apt install libnccl2 libnccl-dev",
        "conda install -c conda-forge nccl",
        "Search order:",
    ] {
        assert!(msg.contains(needle), "missing {needle:?} in:\n{msg}");
    }
    // NVIDIA's CUDA images set NCCL_VERSION in apt's format: never read it.
    assert!(e.report().env.iter().all(|r| r.name != "NCCL_VERSION"));
    assert!(!msg.contains("2.28.3-1"), "{msg}");
}

#[test]
fn loader_cache_finds_a_library_and_its_header() {
    let n = found("ldcache", &[]);
    assert_eq!(n.origin.source, SourceKind::SearchPath);
    assert_eq!(n.origin.detail, "/opt/nccl-cache/lib (loader cache)");
    assert_eq!(n.version.to_string(), "2.20.5");
    let n = found("ldcache", &[("LD_LIBRARY_PATH", "/opt/nccl-cache/lib")]);
    assert!(n.origin.detail.ends_with("(LD_LIBRARY_PATH)"));
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
fn explicit_variables_win_and_never_fall_back() {
    // NCCL_HOME wins over a dpkg install that comes later in the order.
    let n = found(
        "gpu-image",
        &[(
            "NCCL_HOME",
            "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl",
        )],
    );
    assert_eq!(n.origin.source, SourceKind::Home);
    let lost = n.others().next().unwrap();
    assert!(matches!(&lost.status, Status::Lost(why) if why.starts_with("NCCL_HOME=")));

    // Pointing nowhere is an error, even though dpkg has a good install.
    let e = probe("dpkg", &[("NCCL_HOME", "/nope")]).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Explicit { problem: Problem::Missing { var, .. }, .. } if var == "NCCL_HOME")
    );
    assert!(e.to_string().contains("NCCL_HOME points at "), "{e}");
    // Nothing is selected, so the dpkg install is not shown as selected.
    let r = e.report();
    assert_eq!(r.selected, None);
    assert_eq!(r.candidates.len(), 2, "{:?}", r.candidates);
    assert!(matches!(
        &r.candidates[0].status,
        Status::Rejected(Problem::Missing { .. })
    ));
    assert_eq!(
        r.candidates[1].status,
        Status::Lost(
            "not considered: NCCL_HOME is set, and an explicitly named install has no fallback"
                .into()
        )
    );

    // A file where a directory is needed.
    let e = probe("dpkg", &[("NCCL_ROOT", "/usr/include/nccl.h")]).unwrap_err();
    assert!(matches!(
        e.kind(),
        ErrorKind::Explicit {
            problem: Problem::NotADirectory { .. },
            ..
        }
    ));

    // The pair wins over NCCL_HOME; NCCL_ROOT loses to NCCL_HOME.
    let n = found(
        "gpu-image",
        &[
            ("NCCL_INCLUDE_DIR", "/usr/include"),
            ("NCCL_LIB_DIR", "/usr/lib/x86_64-linux-gnu"),
            (
                "NCCL_HOME",
                "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl",
            ),
        ],
    );
    assert_eq!(n.origin.source, SourceKind::ExplicitDirs);
    assert_eq!(n.version.to_string(), "2.28.3");
}

#[test]
fn only_one_of_the_pair_is_an_error() {
    let e = probe("dpkg", &[("NCCL_LIB_DIR", "/usr/lib/x86_64-linux-gnu")]).unwrap_err();
    assert_eq!(
        e.kind(),
        &ErrorKind::OnlyOneOfPair {
            set: "NCCL_LIB_DIR=/usr/lib/x86_64-linux-gnu".into(),
            missing: "NCCL_INCLUDE_DIR"
        }
    );
    assert!(e
        .to_string()
        .starts_with("nccl-find: NCCL_LIB_DIR=/usr/lib/x86_64-linux-gnu is set but NCCL_INCLUDE_DIR is not: set both, or neither."));
}

#[test]
fn target_prefixed_variables_win_over_plain_ones() {
    let n = found(
        "gpu-image",
        &[
            (
                "X86_64_UNKNOWN_LINUX_GNU_NCCL_HOME",
                "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl",
            ),
            ("NCCL_HOME", "/nope"),
        ],
    );
    assert_eq!(n.version.to_string(), "2.28.9");
    assert!(n
        .origin
        .variable
        .as_deref()
        .unwrap()
        .starts_with("X86_64_UNKNOWN_LINUX_GNU_NCCL_HOME="));
    // For another target, the other prefix is read, the x86_64 one is not,
    // and the amd64 dpkg packages and x86_64 multiarch dir do not count.
    let e = config("gpu-image", &[("X86_64_UNKNOWN_LINUX_GNU_NCCL_HOME", "/x")])
        .target("aarch64-unknown-linux-gnu")
        .probe()
        .unwrap_err();
    assert_eq!(e.kind(), &ErrorKind::NotFound);
    let names: Vec<&str> = e.report().env.iter().map(|r| r.name.as_str()).collect();
    assert!(names.contains(&"AARCH64_UNKNOWN_LINUX_GNU_NCCL_HOME"));
    assert!(!names.contains(&"X86_64_UNKNOWN_LINUX_GNU_NCCL_HOME"));
}

#[test]
fn version_requirements() {
    let n = config("gpu-image", &[("VIRTUAL_ENV", "/opt/torch/.venv")])
        .atleast_version("2.28.5")
        .probe()
        .unwrap();
    assert_eq!(n.version.to_string(), "2.28.9");
    // The wheel is too old for the range; dpkg's 2.28.3 fits.
    let n = config("gpu-image", &[("VIRTUAL_ENV", "/opt/torch/.venv")])
        .range_version("2.20".."2.28.5")
        .probe()
        .unwrap();
    assert_eq!(n.version.to_string(), "2.28.3");
    assert!(
        matches!(n.report.candidates[0].problem(), Some(Problem::Unsatisfied { requirement, .. }) if requirement == ">=2.20.0, <2.28.5")
    );
    let e = config("gpu-image", &[])
        .atleast_version("2.29")
        .probe()
        .unwrap_err();
    assert_eq!(
        e.kind(),
        &ErrorKind::NoneSatisfies {
            requirement: ">=2.29.0".into()
        }
    );
    let e = config("gpu-image", &[])
        .atleast_version("two")
        .probe()
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::InvalidRequirement { .. }));
    let n = config("dpkg", &[])
        .version_req(">=2.18, <3")
        .probe()
        .unwrap();
    assert_eq!(n.version.to_string(), "2.28.3");
    let e = config("dpkg", &[("NCCL_HOME", "/usr")])
        .exactly_version("2.28.4")
        .probe()
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Explicit {
                problem: Problem::Unsatisfied { .. },
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn selection_is_deterministic() {
    let vars = [
        ("VIRTUAL_ENV", "/opt/torch/.venv"),
        ("CONDA_PREFIX", "/opt/anaconda3"),
    ];
    let a = probe("gpu-image", &vars).unwrap().report;
    for _ in 0..5 {
        assert_eq!(probe("gpu-image", &vars).unwrap().report, a);
    }
}

#[test]
fn the_root_directive_is_the_prefix() {
    // dpkg: /usr/include + /usr/lib/x86_64-linux-gnu → /usr, not /usr/lib.
    let n = found("dpkg", &[]);
    let root = n
        .cargo_directives()
        .into_iter()
        .find(|d| d.starts_with("cargo:root="))
        .unwrap();
    assert_eq!(
        root,
        format!(
            "cargo:root={}",
            std::fs::canonicalize(tree("dpkg"))
                .unwrap()
                .join("usr")
                .display()
        )
    );
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
fn dpkg_lists_in_the_multiarch_form_say_where_the_files_are() {
    // Real multiarch packages list their files in `<pkg>:<arch>.list`
    // (made here, since a crate package cannot hold `:` in a file name).
    // The library is moved to a directory only the list knows.
    let root = std::env::temp_dir().join(format!("nccl-find-dpkg-arch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    common::copy_tree(&tree("dpkg"), &root);
    let info = root.join("var/lib/dpkg/info");
    std::fs::remove_file(info.join("libnccl2.list")).unwrap();
    let ma = root.join("usr/lib/x86_64-linux-gnu");
    std::fs::create_dir(ma.join("nccl")).unwrap();
    for f in ["libnccl.so.2.28.3", "libnccl.so.2"] {
        std::fs::rename(ma.join(f), ma.join("nccl").join(f)).unwrap();
    }
    std::fs::write(
        info.join("libnccl2:amd64.list"),
        "/.\n/usr/lib/x86_64-linux-gnu/nccl\n/usr/lib/x86_64-linux-gnu/nccl/libnccl.so.2.28.3\n\
         /usr/lib/x86_64-linux-gnu/nccl/libnccl.so.2\n",
    )
    .unwrap();
    std::fs::remove_file(ma.join("libnccl.so")).unwrap();
    let n = Config::new()
        .root(&root)
        .target("x86_64-unknown-linux-gnu")
        .cargo_metadata(false)
        .env_vars(Vec::<(String, String)>::new())
        .probe()
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(
        n.report.logical(&n.lib_dir).display().to_string(),
        "/usr/lib/x86_64-linux-gnu/nccl"
    );
    assert_eq!(n.library_version.to_string(), "2.28.3");
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

/// In a build script, an explicit install ends the search: only what can
/// change the answer is a rerun trigger.
#[test]
fn a_build_script_with_nccl_home_reruns_only_on_what_decides() {
    let home = "/opt/nccl_2.21.5-1+cuda12.4_x86_64";
    let vars = [
        ("NCCL_HOME", home),
        ("LD_LIBRARY_PATH", "/nowhere"),
        ("VIRTUAL_ENV", "/venv"),
        ("CONDA_PREFIX", "/conda"),
        ("HOME", "/home/u"),
        ("PATH", "/usr/bin"),
    ];
    let mut c = config("tarball", &vars);
    c.cargo_metadata(true);
    let n = c.probe().unwrap();
    let reruns: Vec<String> = n
        .cargo_directives()
        .iter()
        .filter_map(|l| l.strip_prefix("cargo:rerun-if-env-changed="))
        .map(String::from)
        .collect();
    let p = "X86_64_UNKNOWN_LINUX_GNU_";
    let mut expect = vec!["DOCS_RS".to_string()];
    for v in [
        "NCCL_SYSROOT",
        "NCCL_INCLUDE_DIR",
        "NCCL_LIB_DIR",
        "NCCL_HOME",
        "NCCL_ROOT",
        "NCCL_DIR",
        "NCCL_SOURCE_DIR",
        // What decides after selection: static or shared. (The CUDA
        // variables decide the CUDA include dirs only where nccl.h includes
        // a CUDA header, and this fixture's includes none.)
        "NCCL_STATIC",
        "NCCL_DYNAMIC",
    ] {
        expect.push(format!("{p}{v}"));
        expect.push(v.to_string());
    }
    expect.push("PKG_CONFIG_ALL_STATIC".into());
    assert_eq!(reruns, expect);
    // A build script has no loader check: the build's LD_LIBRARY_PATH is
    // not the run's, so it is not even read.
    assert!(!n
        .report
        .env
        .iter()
        .any(|r| r.name.ends_with("LD_LIBRARY_PATH")));
    assert_eq!(n.report.loader, nccl_find::explain::Loader::default());
    // The command reads every source, to show every install.
    let mut all = config("tarball", &vars);
    all.cargo_metadata(false);
    let (report, _) = all.report();
    assert!(report
        .env
        .iter()
        .any(|r| r.name == "VIRTUAL_ENV" && r.decides()));
    // With the loader check off, its variables are not even read, and its
    // warning is gone.
    c.loader_check(false);
    let n = c.probe().unwrap();
    assert!(!n
        .report
        .env
        .iter()
        .any(|r| r.name.ends_with("LD_LIBRARY_PATH")));
    assert!(n.report.warnings.is_empty(), "{:?}", n.report.warnings);
    assert_eq!(n.report.loader, nccl_find::explain::Loader::default());
}

#[test]
fn exactly_version_means_what_cargos_equals_means() {
    // dpkg has 2.28.3: `=2.28` and `=2.28.3` accept it, `=2.28.4` and `=2.2`
    // do not, the same through both calls.
    for (given, ok) in [
        ("2.28", true),
        ("2.28.3", true),
        ("2", true),
        ("2.28.4", false),
        ("2.2", false),
    ] {
        let exactly = config("dpkg", &[]).exactly_version(given).probe();
        let req = config("dpkg", &[])
            .version_req(&format!("={given}"))
            .probe();
        assert_eq!(exactly.is_ok(), ok, "exactly_version({given})");
        assert_eq!(req.is_ok(), ok, "version_req(={given})");
        assert_eq!(
            exactly.err().and_then(|e| e.report().requirement.clone()),
            req.err().and_then(|e| e.report().requirement.clone()),
        );
    }
    // Not a version: refused, naming it.
    let e = config("dpkg", &[])
        .exactly_version("two")
        .probe()
        .unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::InvalidRequirement { .. }),
        "{e}"
    );
}

/// `fixtures/links.txt` lists exactly the links of the trees, so that a
/// packaged crate gets every one back.
#[test]
fn the_links_list_is_the_trees_links() {
    if common::packaged() {
        eprintln!("skipped: a packaged crate's links are made from the list itself");
        return;
    }
    let trees = common::trees();
    let mut found = Vec::new();
    let mut dirs = vec![trees.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.file_type().is_symlink() {
                let rel = p.strip_prefix(&trees).unwrap().to_path_buf();
                found.push((rel, std::fs::read_link(&p).unwrap()));
            } else if m.is_dir() {
                dirs.push(p);
            }
        }
    }
    found.sort();
    let mut listed = common::listed_links();
    listed.sort();
    assert_eq!(found, listed);
}

/// An install's CMake package (`make install` of NCCL 2.29.7 and later puts
/// `lib/cmake/NCCL/NCCLConfig.cmake`) is reported where it is.
#[test]
fn an_installs_cmake_package_is_reported() {
    let root =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cmake-pkg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    common::copy_tree(&tree("tarball"), &root);
    let home = "/opt/nccl_2.21.5-1+cuda12.4_x86_64";
    let n = common::config(&root, &[("NCCL_HOME", home)])
        .probe()
        .unwrap();
    assert_eq!(n.cmake_config, None);
    let pkg = root.join(&home[1..]).join("lib/cmake/NCCL");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("NCCLConfig.cmake"), "# NCCL's\n").unwrap();
    let n = common::config(&root, &[("NCCL_HOME", home)])
        .probe()
        .unwrap();
    assert_eq!(
        n.cmake_config.as_deref().map(|p| logical(&n.report, p)),
        Some(format!("{home}/lib/cmake/NCCL/NCCLConfig.cmake"))
    );
    let _ = std::fs::remove_dir_all(&root);
}
