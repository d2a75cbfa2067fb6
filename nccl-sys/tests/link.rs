//! End to end: build nccl-sys's `version` example (and a crate that depends
//! on nccl-sys) with cargo against real wheels, a fixture tree and a static
//! stub; check the binaries' DT_NEEDED and RUNPATH, run them, and check
//! what they print. Also the builds that must fail, and how.
//!
//! The builds use their own target dir (target/nested), so they never wait
//! on the cargo that runs these tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use nccl_find::internal::read_elf;

/// One nested cargo at a time: they share target/nested.
static CARGO: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    repo().join("target/nested")
}

fn wheels() -> Option<PathBuf> {
    match std::env::var_os("NCCL_FIND_WHEELS") {
        Some(d) => Some(PathBuf::from(d)),
        None if std::env::var_os("NCCL_FIND_REQUIRE_WHEELS").is_some() => {
            panic!("NCCL_FIND_WHEELS is unset; run scripts/test")
        }
        None => {
            eprintln!("skipped: NCCL_FIND_WHEELS is unset (scripts/test downloads the wheels and sets it)");
            None
        }
    }
}

/// Every variable that would steer the probe: cleared, so only ours count.
#[path = "../../tests/common/shared.rs"]
#[allow(dead_code)]
mod shared;
use shared::STEERING;

fn cargo(dir: &Path, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO"));
    c.current_dir(dir)
        .args(args)
        .env("CARGO_TARGET_DIR", target_dir());
    for v in STEERING {
        c.env_remove(v);
    }
    c.envs(vars.iter().copied());
    c.output().expect("run cargo")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Builds the version example; returns the binary.
fn build_example(vars: &[(&str, &str)], features: &[&str]) -> PathBuf {
    let mut args = vec!["build", "-q", "-p", "nccl-sys", "--example", "version"];
    let f = features.join(",");
    if !features.is_empty() {
        args.extend(["--features", &f]);
    }
    let out = cargo(&repo(), &args, vars);
    assert!(
        out.status.success(),
        "build failed for {vars:?}:\n{}",
        text(&out.stderr)
    );
    target_dir().join("debug/examples/version")
}

/// Runs a binary with nothing on the loader's path.
fn run(bin: &Path) -> Output {
    Command::new(bin)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run binary")
}

#[test]
fn version_example_against_each_real_wheel_links_verbatim() {
    let Some(w) = wheels() else { return };
    let _g = CARGO.lock().unwrap_or_else(|e| e.into_inner());
    for (dist, version) in [
        ("nvidia_nccl_cu11-2.13.4", "2.13.4"),
        ("nvidia_nccl_cu12-2.21.5", "2.21.5"),
        ("nvidia_nccl_cu13-2.28.9", "2.28.9"),
    ] {
        let home = w.join(dist).join("nvidia/nccl");
        let bin = build_example(&[("NCCL_HOME", home.to_str().unwrap())], &[]);
        let elf = read_elf(&bin).unwrap();
        assert!(
            elf.needed.contains(&"libnccl.so.2".to_string()),
            "{dist}: {:?}",
            elf.needed
        );
        let lib_dir = std::fs::canonicalize(home.join("lib")).unwrap();
        // DT_RPATH, which LD_LIBRARY_PATH cannot override; no DT_RUNPATH.
        assert_eq!(
            (elf.rpath.as_deref(), elf.runpath.as_deref()),
            (Some(lib_dir.to_str().unwrap()), None),
            "{dist}"
        );
        let out = run(&bin);
        assert_eq!(
            text(&out.stdout),
            format!("NCCL {version}\n"),
            "{dist}: {}",
            text(&out.stderr)
        );
        assert!(out.stderr.is_empty());
    }
}

#[test]
fn version_example_against_a_fixture_tree_links_dash_l() {
    let _g = CARGO.lock().unwrap_or_else(|e| e.into_inner());
    let home = repo().join("fixtures/trees/tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64");
    let bin = build_example(&[("NCCL_HOME", home.to_str().unwrap())], &[]);
    let out = run(&bin);
    assert_eq!(text(&out.stdout), "NCCL 2.21.5\n");
    let elf = read_elf(&bin).unwrap();
    assert!(elf.needed.contains(&"libnccl.so.2".to_string()));
    // The build script chose plain -lnccl, since libnccl.so is there.
    let outputs: Vec<String> = std::fs::read_dir(target_dir().join("debug/build"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("output")).ok())
        .filter(|o| o.contains(home.to_str().unwrap()))
        .collect();
    assert!(
        outputs
            .iter()
            .any(|o| o.contains("cargo:rustc-link-lib=dylib=nccl\n")),
        "{outputs:?}"
    );
}

/// Builds a static library from C source with the `cc` crate.
fn stub_archive(dir: &Path, name: &str, source: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).unwrap();
    cc::Build::new()
        .file(&c)
        .out_dir(dir)
        .target("x86_64-unknown-linux-gnu")
        .host("x86_64-unknown-linux-gnu")
        .opt_level(0)
        .cargo_metadata(false)
        .compile(name);
}

#[test]
fn version_example_against_a_static_stub() {
    let _g = CARGO.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = repo().join(format!("target/static-stub-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let nccl = tmp.join("nccl");
    let fixture = repo().join("fixtures/trees/tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64");
    std::fs::create_dir_all(nccl.join("include")).unwrap();
    std::fs::copy(fixture.join("include/nccl.h"), nccl.join("include/nccl.h")).unwrap();
    std::fs::create_dir_all(nccl.join("lib")).unwrap();
    std::fs::copy(
        fixture.join("lib/libnccl.so.2.21.5"),
        nccl.join("lib/libnccl.so.2.21.5"),
    )
    .unwrap();
    std::os::unix::fs::symlink("libnccl.so.2.21.5", nccl.join("lib/libnccl.so.2")).unwrap();
    std::os::unix::fs::symlink("libnccl.so.2", nccl.join("lib/libnccl.so")).unwrap();
    // The static stub answers 2.21.5 too; what proves it is static is that
    // the binary needs no libnccl.so.2 at all.
    stub_archive(
        &nccl.join("lib"),
        "nccl_static",
        "int ncclGetVersion(int *v) { *v = 22105; return 0; }\n",
    );
    stub_archive(
        &tmp.join("cuda/lib64"),
        "cudart_static",
        "int nccl_find_cudart_stub(void) { return 0; }\n",
    );
    let bin = build_example(
        &[
            ("NCCL_HOME", nccl.to_str().unwrap()),
            ("NCCL_STATIC", "1"),
            ("CUDA_HOME", tmp.join("cuda").to_str().unwrap()),
        ],
        &[],
    );
    let elf = read_elf(&bin).unwrap();
    assert!(
        !elf.needed.iter().any(|n| n.starts_with("libnccl")),
        "{:?}",
        elf.needed
    );
    let out = run(&bin);
    assert_eq!(text(&out.stdout), "NCCL 2.21.5\n");
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn builds_that_must_fail_say_why() {
    let Some(w) = wheels() else { return };
    let _g = CARGO.lock().unwrap_or_else(|e| e.into_inner());
    let home = w.join("nvidia_nccl_cu12-2.21.5/nvidia/nccl");
    let mixed = repo().join("fixtures/trees/mismatch/opt/nccl-mixed");
    for (vars, says) in [
        (
            vec![("NCCL_HOME", home.to_str().unwrap()), ("NCCL_STATIC", "1")],
            "has no libnccl_static.a: pip wheels ship no static library",
        ),
        (
            vec![("NCCL_HOME", mixed.to_str().unwrap())],
            "they come from different installs",
        ),
        (
            vec![("NCCL_HOME", "/nonexistent/nccl")],
            "NCCL_HOME points at /nonexistent/nccl, which does not exist",
        ),
    ] {
        let out = cargo(
            &repo(),
            &["build", "-q", "-p", "nccl-sys", "--example", "version"],
            &vars,
        );
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{vars:?} should fail");
        assert!(
            stderr.contains(says),
            "{vars:?}: wanted {says:?} in:\n{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// The bindings bindgen wrote last, in the nested target dir.
fn newest_bindings() -> String {
    std::fs::read_dir(target_dir().join("debug/build"))
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path().join("out/bindings.rs");
            let t = std::fs::metadata(&p).ok()?.modified().ok()?;
            Some((t, p))
        })
        .max()
        .map(|(_, p)| std::fs::read_to_string(p).unwrap())
        .expect("bindgen wrote bindings.rs")
}

#[test]
fn bindgen_over_a_real_wheel_matches_the_pregenerated_bindings() {
    let Some(w) = wheels() else { return };
    let _g = CARGO.lock().unwrap_or_else(|e| e.into_inner());
    let venv = repo().join(format!("target/bindgen-venv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&venv);
    let nv = venv.join("lib/python3.11/site-packages/nvidia");
    std::fs::create_dir_all(&nv).unwrap();
    for (dist, dir) in [
        ("nvidia_nccl_cu12-2.21.5", "nccl"),
        ("nvidia_cuda_runtime_cu12-12.4.127", "cuda_runtime"),
        ("nvidia_cuda_nvcc_cu12-12.4.131", "cuda_nvcc"),
        ("nvidia_cuda_cccl_cu12-12.4.127.post1", "cuda_cccl"),
    ] {
        std::os::unix::fs::symlink(w.join(dist).join("nvidia").join(dir), nv.join(dir)).unwrap();
    }
    let bin = build_example(&[("VIRTUAL_ENV", venv.to_str().unwrap())], &["bindgen"]);
    assert_eq!(text(&run(&bin).stdout), "NCCL 2.21.5\n");
    let generated = newest_bindings();
    let committed = std::fs::read_to_string(repo().join("nccl-sys/src/bindings.rs")).unwrap();
    let body: String = committed
        .lines()
        .skip_while(|l| l.starts_with("// "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(generated, body, "run scripts/regen-bindings");
    for f in [
        "ncclCommInitRank",
        "ncclAllReduce",
        "ncclCommSplit",
        "ncclGetVersion",
    ] {
        assert!(generated.contains(&format!("pub fn {f}(")), "{f}");
    }
    std::fs::remove_dir_all(&venv).unwrap();
}

/// The newest CUDA 13 wheel, with CUDA 13's header wheels (all in one
/// `nvidia/cu13/include`) beside it: bindgen finds `cuda_runtime.h` there,
/// and the bindings have what 2.29 added.
#[test]
fn bindgen_over_the_newest_cu13_wheel_with_cuda_13_headers() {
    let Some(w) = wheels() else { return };
    let _g = CARGO.lock().unwrap_or_else(|e| e.into_inner());
    let mut nccl: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(&w)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let v = name.strip_prefix("nvidia_nccl_cu13-")?;
            let key = v.split('.').map(|x| x.parse().unwrap_or(0)).collect();
            Some((key, e.path()))
        })
        .collect();
    nccl.sort();
    let (version, newest) = nccl.pop().expect("a cu13 wheel");
    let venv = repo().join(format!("target/bindgen13-venv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&venv);
    let nv = venv.join("lib/python3.11/site-packages/nvidia");
    std::fs::create_dir_all(nv.join("cu13/include")).unwrap();
    std::os::unix::fs::symlink(newest.join("nvidia/nccl"), nv.join("nccl")).unwrap();
    for dist in [
        "nvidia_cuda_runtime-13.0.96",
        "nvidia_cuda_crt-13.0.88",
        "nvidia_cuda_cccl-13.0.85",
    ] {
        let inc = w.join(dist).join("nvidia/cu13/include");
        for e in std::fs::read_dir(&inc).unwrap().flatten() {
            std::os::unix::fs::symlink(e.path(), nv.join("cu13/include").join(e.file_name()))
                .unwrap();
        }
    }
    let bin = build_example(&[("VIRTUAL_ENV", venv.to_str().unwrap())], &["bindgen"]);
    let v: Vec<String> = version.iter().map(u32::to_string).collect();
    assert_eq!(text(&run(&bin).stdout), format!("NCCL {}\n", v.join(".")));
    let generated = newest_bindings();
    for f in ["ncclCommInitRank", "ncclCommSuspend", "ncclCommResume"] {
        assert!(generated.contains(&format!("pub fn {f}(")), "{f}");
    }
    std::fs::remove_dir_all(&venv).unwrap();
}

#[test]
fn a_dependent_crate_reads_the_links_metadata_and_runs_by_rpath() {
    let Some(w) = wheels() else { return };
    let _g = CARGO.lock().unwrap_or_else(|e| e.into_inner());
    let home = w.join("nvidia_nccl_cu13-2.28.9/nvidia/nccl");
    let dir = repo().join("nccl-sys/tests/dependent");
    let out = cargo(
        &dir,
        &["build", "-q"],
        &[("NCCL_HOME", home.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let bin = target_dir().join("debug/nccl-dependent");
    let lib_dir = std::fs::canonicalize(home.join("lib")).unwrap();
    let elf = read_elf(&bin).unwrap();
    assert_eq!(
        (elf.rpath.as_deref(), elf.runpath.as_deref()),
        (Some(lib_dir.to_str().unwrap()), None)
    );
    let out = run(&bin);
    let include = std::fs::canonicalize(home.join("include")).unwrap();
    let root = std::fs::canonicalize(&home).unwrap();
    assert_eq!(
        text(&out.stdout),
        format!(
            "DEP_NCCL_INCLUDE={}\nDEP_NCCL_LIB_DIR={}\nDEP_NCCL_ROOT={}\nDEP_NCCL_VERSION=2.28.9\n\
             DEP_NCCL_VERSION_CODE=22809\nDEP_NCCL_CUDA_VERSION=13.0\nloaded=0:22809\n",
            include.display(),
            lib_dir.display(),
            root.display()
        ),
        "{}",
        text(&out.stderr)
    );
}
