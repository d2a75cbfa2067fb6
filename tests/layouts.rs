//! The whole probe against the fixture trees in `fixtures/trees`, one
//! install layout each (dpkg, rpm, a tarball, a source build, a wheel,
//! conda and friends, Spack, the loader cache), each with a fixed
//! environment: nothing here depends on what this machine has. A new
//! source's fixture gets its test here.

mod common;

use std::path::Path;

use common::fixture::{found, logical, probe, tree};
use nccl_find::explain::{Package, Problem, SourceKind, Status};
use nccl_find::{Config, ErrorKind};

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
        "nccl-find: NCCL was not found: install it (pip install nvidia-nccl-cu12 in the environment you build in, or apt install libnccl2 libnccl-dev), or point NCCL_HOME at an install.",
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
