//! The probe against real NCCL releases from PyPI. `scripts/test` downloads
//! the wheels once into a cache and sets `NCCL_FIND_WHEELS`. Each wheel is
//! found by every route that applies, its version is read from both header
//! and library, and that version equals what the library's own
//! `ncclGetVersion` says (it loads without a GPU).

use std::path::{Path, PathBuf};

use nccl_find::explain::{Package, SourceKind};
use nccl_find::{Config, Nccl};

/// The wheels the exact-output tests below are written against.
const WHEELS: [(&str, &str, &str, u32, &str); 3] = [
    (
        "nvidia_nccl_cu11-2.13.4",
        "nvidia-nccl-cu11",
        "2.13.4",
        21304,
        "11.7",
    ),
    (
        "nvidia_nccl_cu12-2.21.5",
        "nvidia-nccl-cu12",
        "2.21.5",
        22105,
        "12.4",
    ),
    (
        "nvidia_nccl_cu13-2.28.9",
        "nvidia-nccl-cu13",
        "2.28.9",
        22809,
        "13.0",
    ),
];

/// One NCCL wheel in the cache, with what its name says it must be.
struct Wheel {
    /// `nvidia_nccl_cu12-2.32.3`.
    dist: String,
    /// `nvidia-nccl-cu12`.
    name: String,
    /// The distribution's version, `2.26.2.post1`.
    dist_version: String,
    /// NCCL's version: the distribution's, less any `.postN`.
    version: String,
    /// The CUDA major its name says: 12 for `-cu12`.
    cuda_major: u32,
}

/// Every NCCL wheel `scripts/test` put in the cache: the oldest supported,
/// the ones above, and the newest of each series on PyPI today.
fn all_wheels(dir: &Path) -> Vec<Wheel> {
    let mut out: Vec<Wheel> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let dist = e.unwrap().file_name().into_string().ok()?;
            let (name, dist_version) = dist.split_once('-')?;
            let cuda_major = name.strip_prefix("nvidia_nccl_cu")?.parse().ok()?;
            let version = match dist_version.split_once(".post") {
                Some((v, _)) => v.to_string(),
                None => dist_version.to_string(),
            };
            Some(Wheel {
                name: name.replace('_', "-"),
                dist_version: dist_version.to_string(),
                version,
                cuda_major,
                dist,
            })
        })
        .collect();
    out.sort_by(|a, b| a.dist.cmp(&b.dist));
    out
}

/// The newest cached wheel of a series, by version.
fn newest(wheels: &[Wheel], name: &str) -> Option<usize> {
    let key = |w: &Wheel| {
        semver::Version::parse(&w.version).unwrap_or_else(|e| panic!("{}: {e}", w.dist))
    };
    (0..wheels.len())
        .filter(|&i| wheels[i].name == name)
        .max_by_key(|&i| key(&wheels[i]))
}

fn wheels_dir() -> Option<PathBuf> {
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

/// A fresh, empty filesystem root in which the wheel's site-packages is
/// placed where each route expects it, so nothing on this machine counts.
/// It lies beside the cache and its files are hard links into it (no data
/// is copied): a symbolic link out of the root would not be followed, as
/// in a sysroot.
struct Root(PathBuf);

impl Root {
    fn new(tag: &str, site: &Path) -> Root {
        let cache = site.parent().and_then(Path::parent).expect("the cache");
        let root = cache.join(format!("test-roots/{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let sp = root.join("venv/lib/python3.11");
        std::fs::create_dir_all(&sp).unwrap();
        place(site, &sp.join("site-packages"));
        Root(root)
    }
}

/// Puts a copy of the tree `src` at `dst`, made of hard links where the
/// filesystem allows (else a real copy).
fn place(src: &Path, dst: &Path) {
    let cp = |flags: &str| {
        std::process::Command::new("cp")
            .arg(flags)
            .arg(src)
            .arg(dst)
            .status()
            .is_ok_and(|s| s.success())
    };
    assert!(cp("-al") || cp("-a"), "cannot copy {}", src.display());
}

impl Root {
    /// The venv's site-packages emptied but for `nvidia/nccl` of the wheel
    /// `site`, for putting CUDA header wheels beside it one by one.
    fn nccl_only(&self, site: &Path) -> PathBuf {
        let sp = self.0.join("venv/lib/python3.11/site-packages");
        std::fs::remove_dir_all(&sp).unwrap();
        std::fs::create_dir_all(sp.join("nvidia")).unwrap();
        place(&site.join("nvidia/nccl"), &sp.join("nvidia/nccl"));
        sp
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn probe(root: &Root, vars: &[(&str, &str)]) -> Nccl {
    Config::new()
        .root(&root.0)
        .target("x86_64-unknown-linux-gnu")
        .env_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .probe()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The CUDA include dirs the probe finds beside the venv of `root`.
fn cuda_include_dirs(root: &Root) -> Result<Vec<PathBuf>, String> {
    Config::new()
        .root(&root.0)
        .cargo_metadata(false)
        .env_vars([("VIRTUAL_ENV", "/venv")])
        .probe()
        .unwrap()
        .cuda_include_dirs
}

/// Calls `ncclGetVersion` in the library file.
fn loaded_version(lib: &Path) -> i32 {
    // SAFETY: the file is a real libnccl.so.2 from PyPI; loading it runs only
    // its static initialisers, and ncclGetVersion(int*) writes one int.
    unsafe {
        let l = libloading::Library::new(lib)
            .unwrap_or_else(|e| panic!("loading {}: {e}", lib.display()));
        let f: libloading::Symbol<unsafe extern "C" fn(*mut i32) -> i32> =
            l.get(b"ncclGetVersion\0").unwrap();
        let mut v = 0;
        assert_eq!(f(&mut v), 0, "ncclGetVersion failed");
        v
    }
}

#[test]
fn every_wheel_by_every_route() {
    let Some(dir) = wheels_dir() else { return };
    let wheels = all_wheels(&dir);
    // The oldest release we support, the exact-output ones, and the newest
    // of each series must all be there.
    for (dist, ..) in WHEELS {
        assert!(
            wheels.iter().any(|w| w.dist == dist),
            "{dist} is not cached"
        );
    }
    for series in ["nvidia-nccl-cu11", "nvidia-nccl-cu12", "nvidia-nccl-cu13"] {
        assert!(
            newest(&wheels, series).is_some(),
            "no {series} wheel is cached"
        );
    }
    for w in &wheels {
        let dist = w.dist.as_str();
        let site = dir.join(dist);
        assert!(
            site.join("nvidia/nccl/lib/libnccl.so.2").exists(),
            "{} is missing",
            site.display()
        );
        let root = Root::new(dist, &site);
        let sp = "/venv/lib/python3.11/site-packages";
        let nccl_dir = format!("{sp}/nvidia/nccl");
        let routes: [(SourceKind, Vec<(&str, String)>); 4] = [
            (SourceKind::Home, vec![("NCCL_HOME", nccl_dir.clone())]),
            (SourceKind::Pip, vec![("VIRTUAL_ENV", "/venv".to_string())]),
            (SourceKind::Pip, vec![("PYTHONPATH", sp.to_string())]),
            (
                SourceKind::ExplicitDirs,
                vec![
                    ("NCCL_INCLUDE_DIR", format!("{nccl_dir}/include")),
                    ("NCCL_LIB_DIR", format!("{nccl_dir}/lib")),
                ],
            ),
        ];
        let known = WHEELS.iter().find(|k| k.0 == dist);
        for (source, vars) in routes {
            let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let n = probe(&root, &vars);
            let ctx = format!("{dist} via {vars:?}");
            assert_eq!(n.origin.source, source, "{ctx}");
            assert_eq!(n.version.to_string(), w.version, "{ctx}: header");
            assert_eq!(n.library_version.to_string(), w.version, "{ctx}: library");
            assert_eq!(n.library_version.code, n.version.code, "{ctx}: codes");
            // The version came from the file itself: no stand-in warning.
            assert!(
                !n.report.warnings.iter().any(|w| w.contains("version")),
                "{ctx}: {:?}",
                n.report.warnings
            );
            let cuda = n
                .cuda_version
                .unwrap_or_else(|| panic!("{ctx}: no CUDA version"));
            assert_eq!(cuda.major, w.cuda_major, "{ctx}: CUDA");
            if let Some((_, _, _, code, cuda)) = known {
                assert_eq!(n.version.code, *code, "{ctx}: header code");
                assert_eq!(cuda.to_string(), *cuda, "{ctx}");
            }
            assert_eq!(n.soname.as_deref(), Some("libnccl.so.2"), "{ctx}");
            assert!(!n.has_dev_link, "{ctx}: a wheel has no libnccl.so");
            assert_eq!(n.static_library, None, "{ctx}");
            assert_eq!(n.library.file_name().unwrap(), "libnccl.so.2", "{ctx}");
            if source == SourceKind::Pip {
                assert_eq!(
                    n.origin.package,
                    Some(Package::Pip {
                        name: w.name.clone(),
                        version: w.dist_version.clone()
                    }),
                    "{ctx}"
                );
            }
            assert_eq!(n.others().count(), 0, "{ctx}: {:?}", n.report.candidates);
        }
        let n = probe(&root, &[("VIRTUAL_ENV", "/venv")]);
        assert_eq!(
            loaded_version(&n.library_real) as u32,
            n.version.code,
            "{dist}: ncclGetVersion"
        );
    }
}

/// A program installed into a venv (`nccl-find` from pip) finds that
/// venv's wheel from its own location: no variable names it.
#[test]
fn the_environment_a_program_is_installed_in() {
    let Some(dir) = wheels_dir() else { return };
    let wheels = all_wheels(&dir);
    let w = &wheels[newest(&wheels, "nvidia-nccl-cu12").unwrap()];
    let root = Root::new("installed-in", &dir.join(&w.dist));
    // No variable at all: only the prefix, where it is given, leads there.
    let probe = |prefix: Option<&str>| {
        let mut c = Config::new();
        c.root(&root.0)
            .target("x86_64-unknown-linux-gnu")
            .env_vars(Vec::<(String, String)>::new());
        if let Some(p) = prefix {
            c.python_prefix(p);
        }
        c.probe()
    };
    let n = probe(Some("/venv")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(n.origin.source, SourceKind::Pip);
    assert_eq!(n.version.to_string(), w.version);
    assert_eq!(
        n.origin.to_string(),
        format!(
            "pip wheel in /venv/lib/python3.11/site-packages (the environment this program is installed in, /venv) [pip nvidia-nccl-cu12 {}]",
            w.dist_version
        )
    );
    // Without it, nothing is found.
    assert!(probe(None).is_err());
}

/// The README's "No NCCL yet?" path: a virtualenv holding the newest cu12
/// wheel, found through `VIRTUAL_ENV`, and what `--print` would select.
#[test]
fn the_newcomer_path_with_the_newest_cu12_wheel() {
    let Some(dir) = wheels_dir() else { return };
    let wheels = all_wheels(&dir);
    let w = &wheels[newest(&wheels, "nvidia-nccl-cu12").expect("a cu12 wheel")];
    let root = Root::new("newcomer", &dir.join(&w.dist));
    let (report, err) = Config::new()
        .root(&root.0)
        .target("x86_64-unknown-linux-gnu")
        .env_vars([("VIRTUAL_ENV", "/venv")])
        .report();
    assert_eq!(err, None, "{report:?}");
    let sp = root.0.join("venv/lib/python3.11/site-packages");
    assert_eq!(report.candidates.len(), 1, "{:?}", report.candidates);
    let c = report.selected().expect("selected");
    assert_eq!(c.status, nccl_find::explain::Status::Selected);
    assert_eq!(c.origin.source, SourceKind::Pip);
    assert_eq!(
        c.origin.to_string(),
        format!(
            "pip wheel in /venv/lib/python3.11/site-packages (VIRTUAL_ENV) [pip {} {}]",
            w.name, w.dist_version
        )
    );
    assert_eq!(
        c.header.as_deref(),
        Some(sp.join("nvidia/nccl/include/nccl.h").as_path())
    );
    assert_eq!(
        c.library.as_deref(),
        Some(sp.join("nvidia/nccl/lib/libnccl.so.2").as_path())
    );
    assert_eq!(
        c.header_version.as_ref().map(|v| v.to_string()),
        Some(w.version.clone())
    );
    assert_eq!(c.library_version, c.header_version);
    // No warning: that nothing puts the venv on the loader's path is the
    // final binary's to settle (emit_rpath_from_dep), and the report says it.
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert!(report.loader.pick.is_none(), "{:?}", report.loader);
}

#[test]
fn requirement_against_real_wheels() {
    let Some(dir) = wheels_dir() else { return };
    let root = Root::new("req", &dir.join(WHEELS[0].0));
    let e = Config::new()
        .root(&root.0)
        .env_vars([("VIRTUAL_ENV", "/venv")])
        .atleast_version("2.18")
        .probe()
        .unwrap_err();
    // The fix first: the pin of the first release that meets it, for the
    // wheel's own series.
    assert_eq!(
        e.headline(),
        "pip install -U 'nvidia-nccl-cu11>=2.18.1', or point NCCL_HOME at an install of NCCL \
         2.18.1 or newer: no install here satisfies the requirement >=2.18.0 (the newest here is \
         NCCL 2.13.4)."
    );
    assert!(
        e.to_string().contains(
            "NCCL 2.13.4 does not satisfy the requirement >=2.18.0: it needs NCCL 2.18.1 or newer."
        ),
        "{e}"
    );
}

#[test]
fn required_symbols_against_real_libraries() {
    let Some(dir) = wheels_dir() else { return };
    // 2.13.4 predates ncclCommSplit (2.18); 2.21.5 has it.
    let root = Root::new("sym11", &dir.join(WHEELS[0].0));
    let e = Config::new()
        .root(&root.0)
        .cargo_metadata(false)
        .env_vars([("VIRTUAL_ENV", "/venv")])
        .require_symbols(&["ncclGetVersion", "ncclCommInitRankConfig", "ncclCommSplit"])
        .probe()
        .unwrap_err();
    assert!(
        e.headline().ends_with(
            "is NCCL 2.13.4, which lacks ncclCommInitRankConfig (added in NCCL 2.14.3), ncclCommSplit \
             (added in NCCL 2.18.1). Install NCCL 2.18.1 or newer (e.g. pip install nvidia-nccl-cu12), or \
             point NCCL_HOME at one."
        ),
        "{}",
        e.headline()
    );
    let root = Root::new("sym12", &dir.join(WHEELS[1].0));
    let n = Config::new()
        .root(&root.0)
        .cargo_metadata(false)
        .env_vars([("VIRTUAL_ENV", "/venv")])
        .require_symbols(&["ncclCommSplit", "ncclCommRegister", "ncclMemAlloc"])
        .probe()
        .unwrap();
    assert_eq!(n.version.to_string(), "2.21.5");
    let syms = nccl_find::internal::dynamic_symbols(&n.library_real).unwrap();
    assert!(
        syms.contains(&"ncclAllReduce".to_string()) && syms.contains(&"pncclAllReduce".to_string())
    );
    assert!(
        !syms.contains(&"ncclCommInitRankScalable".to_string()),
        "2.23 API in 2.21.5"
    );
}

#[test]
fn cuda_headers_beside_a_wheel_say_which_wheel_is_missing() {
    let Some(dir) = wheels_dir() else { return };
    let root = Root::new("cudainc", &dir.join(WHEELS[1].0));
    // Put the CUDA wheels beside nvidia/nccl in a site-packages of our own.
    let sp = root.nccl_only(&dir.join(WHEELS[1].0));
    let link = |dist: &str, d: &str| {
        place(
            &dir.join(dist).join("nvidia").join(d),
            &sp.join("nvidia").join(d),
        )
    };
    let probe = || cuda_include_dirs(&root);
    let err = probe().unwrap_err();
    assert!(
        err.starts_with(
            "pip install nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-cccl-cu12 beside \
             the NCCL wheel, or install the CUDA toolkit and set CUDA_HOME: nccl.h includes \
             cuda_runtime.h, and none was found (looked in "
        ),
        "{err}"
    );
    link("nvidia_cuda_runtime_cu12-12.4.127", "cuda_runtime");
    let err = probe().unwrap_err();
    assert!(
        err.contains("has cuda_runtime.h, which includes crt/host_config.h"),
        "{err}"
    );
    assert!(
        err.starts_with("pip install nvidia-cuda-nvcc-cu12 beside the NCCL wheel"),
        "{err}"
    );
    link("nvidia_cuda_nvcc_cu12-12.4.131", "cuda_nvcc");
    let err = probe().unwrap_err();
    assert!(
        err.contains("has cuda_fp16.h, which includes nv/target"),
        "{err}"
    );
    assert!(err.contains("pip install nvidia-cuda-cccl-cu12"), "{err}");
    link("nvidia_cuda_cccl_cu12-12.4.127.post1", "cuda_cccl");
    let dirs = probe().unwrap();
    let nv = root.0.join("venv/lib/python3.11/site-packages/nvidia");
    assert_eq!(
        dirs,
        [
            nv.join("cuda_runtime/include"),
            nv.join("cuda_nvcc/include"),
            nv.join("cuda_cccl/include")
        ]
    );
}

/// The device API's parts are reported where a wheel has them: the newest
/// cu13 wheel carries `nccl_device.h` and the bitcode (`libnccl_device.bc`,
/// `.ltoir`) beside its library; the oldest has neither.
#[test]
fn the_device_api_parts_of_the_newest_wheel() {
    let Some(dir) = wheels_dir() else { return };
    let wheels = all_wheels(&dir);
    let w = &wheels[newest(&wheels, "nvidia-nccl-cu13").expect("a cu13 wheel")];
    let root = Root::new("device", &dir.join(&w.dist));
    let n = probe(&root, &[("VIRTUAL_ENV", "/venv")]);
    let nccl = root.0.join("venv/lib/python3.11/site-packages/nvidia/nccl");
    assert_eq!(
        n.device_header.as_deref(),
        Some(nccl.join("include/nccl_device.h").as_path())
    );
    assert_eq!(
        n.device_bitcode,
        [
            nccl.join("lib/libnccl_device.bc"),
            nccl.join("lib/libnccl_device.ltoir")
        ],
        "{}",
        w.dist
    );
    assert_eq!(n.cmake_config, None);
    let old = Root::new("device-old", &dir.join(WHEELS[0].0));
    let n = probe(&old, &[("VIRTUAL_ENV", "/venv")]);
    assert_eq!((n.device_header, n.device_bitcode.len()), (None, 0));
}

/// CUDA 13's header wheels (`nvidia-cuda-runtime`, `-crt`, `-cccl`, 13.x)
/// all put their headers in one `nvidia/cu13/include`: beside a cu13 NCCL
/// wheel they are found there, and each one missing is named by the name
/// it has for CUDA 13 (not the deprecated `-cu13` one).
#[test]
fn cuda_13_headers_beside_a_cu13_wheel() {
    let Some(dir) = wheels_dir() else { return };
    let root = Root::new("cuda13inc", &dir.join(WHEELS[2].0));
    let sp = root.nccl_only(&dir.join(WHEELS[2].0));
    std::fs::create_dir_all(sp.join("nvidia/cu13")).unwrap();
    let probe = || cuda_include_dirs(&root);
    let err = probe().unwrap_err();
    assert!(
        err.starts_with(
            "pip install 'nvidia-cuda-runtime==13.*' 'nvidia-cuda-crt==13.*' 'nvidia-cuda-cccl==13.*' \
             beside the NCCL wheel, or install the CUDA toolkit and set CUDA_HOME: nccl.h includes \
             cuda_runtime.h, and none was found (looked in "
        ),
        "{err}"
    );
    let steps = [
        (
            "nvidia_cuda_runtime-13.0.96",
            "which includes crt/host_config.h",
            "'nvidia-cuda-crt==13.*'",
        ),
        (
            "nvidia_cuda_crt-13.0.88",
            "which includes nv/target",
            "'nvidia-cuda-cccl==13.*'",
        ),
    ];
    for (dist, says, install) in steps {
        place(
            &dir.join(dist).join("nvidia/cu13/."),
            &sp.join("nvidia/cu13"),
        );
        let err = probe().unwrap_err();
        assert!(err.contains(says), "{dist}: {err}");
        assert!(
            err.contains(&format!("pip install {install} beside the NCCL wheel")),
            "{err}"
        );
    }
    place(
        &dir.join("nvidia_cuda_cccl-13.0.85/nvidia/cu13/."),
        &sp.join("nvidia/cu13"),
    );
    let nv = root.0.join("venv/lib/python3.11/site-packages/nvidia");
    assert_eq!(probe().unwrap(), [nv.join("cu13/include")]);
}

#[cfg(feature = "cc")]
#[test]
fn compile_and_run_check_against_a_real_wheel() {
    let Some(dir) = wheels_dir() else { return };
    let root = Root::new("cc", &dir.join(WHEELS[1].0));
    let sp = root.0.join("venv/lib/python3.11/site-packages");
    // Without CUDA headers, nccl.h does not compile, and the error says why.
    let e = Config::new()
        .root(&root.0)
        .cargo_metadata(false)
        .env_vars([("VIRTUAL_ENV", "/venv")])
        .compile_check(true)
        .probe()
        .unwrap_err();
    let msg = e.headline();
    assert!(
        msg.starts_with("the compile-and-run check failed: the check program did not build:"),
        "{msg}"
    );
    assert!(msg.contains("cuda_runtime.h"), "{msg}");
    assert!(
        msg.contains("(nccl.h needs the CUDA headers: pip install nvidia-cuda-runtime-cu12"),
        "{msg}"
    );
    // With the CUDA wheels beside it, the real library answers 2.21.5.
    std::fs::remove_dir_all(&sp).unwrap();
    std::fs::create_dir_all(sp.join("nvidia")).unwrap();
    for (dist, d) in [
        (WHEELS[1].0, "nccl"),
        ("nvidia_cuda_runtime_cu12-12.4.127", "cuda_runtime"),
        ("nvidia_cuda_nvcc_cu12-12.4.131", "cuda_nvcc"),
        ("nvidia_cuda_cccl_cu12-12.4.127.post1", "cuda_cccl"),
    ] {
        place(
            &dir.join(dist).join("nvidia").join(d),
            &sp.join("nvidia").join(d),
        );
    }
    let n = Config::new()
        .root(&root.0)
        .cargo_metadata(false)
        .env_vars([("VIRTUAL_ENV", "/venv")])
        .compile_check(true)
        .probe()
        .unwrap_or_else(|e| panic!("{e}"));
    let c = n.compile_check.unwrap();
    assert_eq!((c.runtime_code, c.header_code), (22105, 22105));
    // The newest cu13 wheel, with CUDA 13's header wheels in nvidia/cu13.
    let wheels = all_wheels(&dir);
    let w = &wheels[newest(&wheels, "nvidia-nccl-cu13").expect("a cu13 wheel")];
    let root = Root::new("cc13", &dir.join(&w.dist));
    let sp = root.0.join("venv/lib/python3.11/site-packages");
    std::fs::create_dir_all(sp.join("nvidia/cu13")).unwrap();
    for dist in [
        "nvidia_cuda_runtime-13.0.96",
        "nvidia_cuda_crt-13.0.88",
        "nvidia_cuda_cccl-13.0.85",
    ] {
        place(
            &dir.join(dist).join("nvidia/cu13/."),
            &sp.join("nvidia/cu13"),
        );
    }
    let n = Config::new()
        .root(&root.0)
        .cargo_metadata(false)
        .env_vars([("VIRTUAL_ENV", "/venv")])
        .compile_check(true)
        .probe()
        .unwrap_or_else(|e| panic!("{}: {e}", w.dist));
    let c = n.compile_check.unwrap();
    let code = n.version.code;
    assert_eq!((c.runtime_code, c.header_code), (code, code), "{}", w.dist);
    assert_eq!(n.version.to_string(), w.version);
}

/// What the glibc message promises: every NCCL wheel in the cache (the
/// newest of each series among them) needs glibc 2.27 at most. A release
/// that needs more turns this red: then the message must say so.
#[test]
fn every_wheel_needs_glibc_2_27_at_most() {
    let Some(dir) = wheels_dir() else { return };
    let mut seen = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().into_string().unwrap();
        if !name.starts_with("nvidia_nccl_cu") {
            continue;
        }
        let lib = e.path().join("nvidia/nccl/lib/libnccl.so.2");
        let needs = nccl_find::internal::read_elf(&lib).unwrap().glibc_needed;
        assert!(
            needs.is_some_and(|v| ((2, 17)..=(2, 27)).contains(&v)),
            "{name} needs glibc {needs:?}: update the GlibcTooOld message"
        );
        seen += 1;
    }
    assert!(seen >= 3, "{seen} NCCL wheels in {}", dir.display());
}

/// A real `nccl.h` includes `cuda_runtime.h`, so the CUDA variables decide
/// its CUDA include dirs: a build script reruns when they change (and
/// only then reads them; a header that includes no CUDA header does not).
#[test]
fn a_real_header_reruns_on_the_cuda_variables() {
    let Some(dir) = wheels_dir() else { return };
    let root = Root::new("cudavars", &dir.join(WHEELS[1].0));
    let mut c = Config::new();
    c.root(&root.0)
        .target("x86_64-unknown-linux-gnu")
        .cargo_metadata(true)
        .env_vars([("VIRTUAL_ENV", "/venv")]);
    let n = c.probe().unwrap();
    let reruns: Vec<String> = n
        .cargo_directives()
        .into_iter()
        .filter(|l| l.starts_with("cargo:rerun-if-env-changed="))
        .collect();
    for v in [
        "CUDA_HOME",
        "CUDA_PATH",
        "CUDA_ROOT",
        "CUDA_TOOLKIT_ROOT_DIR",
    ] {
        assert!(
            reruns.contains(&format!("cargo:rerun-if-env-changed={v}")),
            "{v}: {reruns:?}"
        );
    }
}
