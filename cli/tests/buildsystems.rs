//! `nccl-find` as pkg-config for real build systems: CMake's
//! `pkg_check_modules` and meson's `dependency()` each configure, build and
//! run a C program that prints `ncclGetVersion` and `NCCL_VERSION_CODE`,
//! against a fixture install and against a real pip wheel. `PKG_CONFIG`
//! names a wrapper script that runs nccl-find and logs every call with its
//! exit status, so the tests also check that every question these tools
//! asked was answered.
//!
//! cmake, meson and ninja come from Debian's `cmake`, `meson` and
//! `ninja-build` packages. Without them these tests say so and pass, unless
//! `NCCL_FIND_REQUIRE_TOOLS` is set (scripts/test sets it): then a missing
//! tool fails the test.

mod common;
use common::{scratch, STEERING};
// Debian's packages, the glibc they need, and the -sys crate to NVIDIA's contract.
#[path = "buildsystems/installs.rs"]
mod installs;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PROGRAM: &str = "#include <stdio.h>\n#include <nccl.h>\n\
int main(void) { int v = 0; ncclGetVersion(&v); printf(\"%d %d\\n\", v, NCCL_VERSION_CODE); return 0; }\n";

const TARBALL: &str = "/opt/nccl_2.21.5-1+cuda12.4_x86_64";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn both(o: &Output) -> String {
    format!("{}{}", text(&o.stdout), text(&o.stderr))
}

/// Whether the tools are on PATH; false (the test is skipped, saying why)
/// when one is missing and `NCCL_FIND_REQUIRE_TOOLS` is unset.
fn tools(names: &[&str]) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !std::env::split_paths(&path).any(|d| d.join(n).is_file()))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!(
        "{} not on PATH (apt-get install cmake meson ninja-build)",
        missing.join(", ")
    );
    if std::env::var_os("NCCL_FIND_REQUIRE_TOOLS").is_some() {
        panic!("NCCL_FIND_REQUIRE_TOOLS is set, but {msg}");
    }
    eprintln!("skipped: {msg}");
    false
}

/// Single quotes for a path in a shell script.
fn sq(p: &Path) -> String {
    let s = p.to_str().expect("test paths are UTF-8");
    assert!(!s.contains('\''), "{s}");
    format!("'{s}'")
}

/// Where the probe looks: a fixture tree with NCCL_HOME, or a venv.
enum Install {
    Fixture(&'static str, &'static str),
    Venv(PathBuf),
}

/// Writes `<dir>/pkg-config`: runs nccl-find for `install`, and appends
/// `<exit status> [arg] [arg]...` to `<dir>/calls.log`.
fn wrapper(dir: &Path, install: &Install) -> PathBuf {
    let nccl_find = Path::new(env!("CARGO_BIN_EXE_nccl-find"));
    let (vars, root) = match install {
        Install::Fixture(tree, home) => {
            let root = std::fs::canonicalize(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/trees"),
            )
            .unwrap()
            .join(tree);
            (
                format!("NCCL_HOME='{home}'"),
                format!("--root {}", sq(&root)),
            )
        }
        Install::Venv(v) => (format!("VIRTUAL_ENV={}", sq(v)), String::new()),
    };
    let script = dir.join("pkg-config");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             env XDG_CACHE_HOME={cache} {vars} {bin} {root} \"$@\"\n\
             rc=$?\n\
             {{ printf '%s' \"$rc\"; for a in \"$@\"; do printf ' [%s]' \"$a\"; done; echo; }} >> {log}\n\
             exit $rc\n",
            cache = sq(&dir.join("cache")),
            bin = sq(nccl_find),
            log = sq(&dir.join("calls.log")),
        ),
    )
    .unwrap();
    let mut perm = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&script, perm).unwrap();
    script
}

/// A command with the probe's variables cleared and PKG_CONFIG set.
fn tool(name: &str, pkg_config: &Path) -> Command {
    let mut c = Command::new(name);
    for v in STEERING {
        c.env_remove(v);
    }
    c.env("PKG_CONFIG", pkg_config);
    c
}

/// The wrapper's log: one `(exit status, args)` per call.
fn calls(dir: &Path) -> Vec<(i32, String)> {
    std::fs::read_to_string(dir.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (rc, args) = l.split_once(' ').unwrap_or((l, ""));
            (rc.parse().unwrap(), args.to_string())
        })
        .collect()
}

/// Every call answered with exit 0, and each of `expected` was made.
fn answered_all(dir: &Path, expected: &[&str]) {
    let calls = calls(dir);
    let failed: Vec<_> = calls.iter().filter(|(rc, _)| *rc != 0).collect();
    assert!(failed.is_empty(), "calls that failed: {failed:?}");
    for e in expected {
        assert!(
            calls.iter().any(|(_, a)| a == e),
            "no call {e} in {calls:?}"
        );
    }
}

/// Runs the program a build made and checks what it prints.
fn runs(exe: &Path, want: &str) {
    let mut c = Command::new(exe);
    for v in STEERING {
        c.env_remove(v);
    }
    let out = c.output().unwrap();
    assert_eq!(
        (out.status.code(), text(&out.stdout).as_str()),
        (Some(0), want),
        "{}",
        text(&out.stderr)
    );
}

/// CMake configures with pkg_check_modules (IMPORTED_TARGET), builds, and
/// reports the variables it read. Returns (configure output, built program).
fn cmake(dir: &Path, pc: &Path, requirement: &str) -> (Output, PathBuf) {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("v.c"), PROGRAM).unwrap();
    std::fs::write(
        src.join("CMakeLists.txt"),
        format!(
            "cmake_minimum_required(VERSION 3.13)\n\
             project(v C)\n\
             find_package(PkgConfig REQUIRED)\n\
             pkg_check_modules(NCCL REQUIRED IMPORTED_TARGET {requirement})\n\
             message(STATUS \"got version=${{NCCL_VERSION}} prefix=${{NCCL_PREFIX}} includedir=${{NCCL_INCLUDEDIR}} libdir=${{NCCL_LIBDIR}}\")\n\
             add_executable(v v.c)\n\
             target_link_libraries(v PkgConfig::NCCL)\n"
        ),
    )
    .unwrap();
    let build = dir.join("build");
    let conf = tool("cmake", pc)
        .arg("-S")
        .arg(&src)
        .arg("-B")
        .arg(&build)
        .output()
        .unwrap();
    (conf, build.join("v"))
}

fn cmake_build(dir: &Path, pc: &Path) {
    let out = tool("cmake", pc)
        .arg("--build")
        .arg(dir.join("build"))
        .output()
        .unwrap();
    assert!(out.status.success(), "cmake --build: {}", both(&out));
}

/// meson setup with dependency('nccl'), then ninja. Returns (setup output,
/// built program).
fn meson(dir: &Path, pc: &Path, requirement: &str) -> (Output, PathBuf) {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("v.c"), PROGRAM).unwrap();
    std::fs::write(
        src.join("meson.build"),
        format!(
            "project('v', 'c')\n\
             d = dependency('nccl', version: '{requirement}')\n\
             message('got prefix=' + d.get_variable(pkgconfig: 'prefix') + ' libdir=' + d.get_variable(pkgconfig: 'libdir'))\n\
             executable('v', 'v.c', dependencies: d)\n"
        ),
    )
    .unwrap();
    let build = dir.join("build");
    let setup = tool("meson", pc)
        .arg("setup")
        .arg(&build)
        .arg(&src)
        .output()
        .unwrap();
    (setup, build.join("v"))
}

fn ninja(dir: &Path, pc: &Path) {
    let out = tool("ninja", pc)
        .arg("-C")
        .arg(dir.join("build"))
        .output()
        .unwrap();
    assert!(out.status.success(), "ninja: {}", both(&out));
}

fn fixture_prefix() -> String {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/trees/tarball"))
        .unwrap()
        .join(TARBALL.trim_start_matches('/'))
        .display()
        .to_string()
}

/// The questions CMake 3.25's pkg_check_modules asks (each also with --static).
const CMAKE_CALLS: &[&str] = &[
    "[--version]",
    "[--print-errors] [--short-errors] [nccl >= 2.18]",
    "[--modversion] [nccl]",
    "[--variable=prefix] [nccl]",
    "[--variable=includedir] [nccl]",
    "[--variable=libdir] [nccl]",
    "[--libs-only-l] [nccl]",
    "[--libs-only-L] [nccl]",
    "[--libs] [nccl]",
    "[--static] [--libs] [nccl]",
    "[--libs-only-other] [nccl]",
    "[--cflags-only-I] [nccl]",
    "[--cflags] [nccl]",
    "[--cflags-only-other] [nccl]",
];

#[test]
fn cmake_pkg_check_modules_builds_and_runs_against_a_fixture() {
    if !tools(&["cmake", "cc"]) {
        return;
    }
    let dir = scratch("cmake-fixture");
    let pc = wrapper(&dir, &Install::Fixture("tarball", TARBALL));
    let (conf, exe) = cmake(&dir, &pc, "nccl>=2.18");
    assert!(conf.status.success(), "cmake: {}", both(&conf));
    let p = fixture_prefix();
    assert!(
        text(&conf.stdout).contains(&format!(
            "-- got version=2.21.5 prefix={p} includedir={p}/include libdir={p}/lib\n"
        )),
        "{}",
        both(&conf)
    );
    assert!(!text(&conf.stderr).contains("nccl-find"), "{}", both(&conf));
    cmake_build(&dir, &pc);
    runs(&exe, "22105 22105\n");
    answered_all(&dir, CMAKE_CALLS);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cmake_pkg_check_modules_fails_with_the_reason_when_too_old() {
    if !tools(&["cmake", "cc"]) {
        return;
    }
    let dir = scratch("cmake-too-old");
    let pc = wrapper(&dir, &Install::Fixture("tarball", TARBALL));
    let (conf, _) = cmake(&dir, &pc, "nccl>=2.99");
    assert_ne!(conf.status.code(), Some(0));
    let all = both(&conf);
    assert!(
        all.contains("NCCL 2.21.5 does not satisfy the requirement >=2.99.0"),
        "{all}"
    );
    assert!(all.contains("A required package was not found"), "{all}");
    assert_eq!(
        calls(&dir).last(),
        Some(&(
            1,
            "[--print-errors] [--short-errors] [nccl >= 2.99]".to_string()
        ))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn meson_dependency_builds_and_runs_against_a_fixture() {
    if !tools(&["meson", "ninja", "cc"]) {
        return;
    }
    let dir = scratch("meson-fixture");
    let pc = wrapper(&dir, &Install::Fixture("tarball", TARBALL));
    let (setup, exe) = meson(&dir, &pc, ">=2.18");
    assert!(setup.status.success(), "meson: {}", both(&setup));
    let out = text(&setup.stdout);
    assert!(
        out.contains("Run-time dependency nccl found: YES 2.21.5\n"),
        "{out}"
    );
    let p = fixture_prefix();
    assert!(
        out.contains(&format!("Message: got prefix={p} libdir={p}/lib\n")),
        "{out}"
    );
    ninja(&dir, &pc);
    runs(&exe, "22105 22105\n");
    answered_all(
        &dir,
        &[
            "[--version]",
            "[--modversion] [nccl]",
            "[--cflags] [nccl]",
            "[--libs] [nccl]",
            "[--variable=prefix] [nccl]",
            "[--variable=libdir] [nccl]",
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn meson_dependency_refuses_a_version_too_old() {
    if !tools(&["meson", "ninja"]) {
        return;
    }
    let dir = scratch("meson-too-old");
    let pc = wrapper(&dir, &Install::Fixture("tarball", TARBALL));
    let (setup, _) = meson(&dir, &pc, ">=2.99");
    assert_ne!(setup.status.code(), Some(0));
    let all = both(&setup);
    assert!(
        all.contains("Invalid version, need 'nccl' ['>=2.99'] found '2.21.5'"),
        "{all}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A test's scratch directory `name` and, in it, a venv that holds the real
/// NCCL wheel: None (skipped, or failed where required) without the tools
/// it `needs` or without the wheel cache.
fn wheel_project(name: &str, needs: &[&str]) -> Option<(PathBuf, PathBuf)> {
    if !tools(needs) {
        return None;
    }
    let dir = scratch(name);
    let venv = wheel_venv(&dir)?;
    Some((dir, venv))
}

/// A venv whose site-packages holds the real NCCL wheel and the CUDA header
/// wheels `nccl.h` needs; None (skipped) without the wheel cache.
fn wheel_venv(dir: &Path) -> Option<PathBuf> {
    let w = common::wheels()?;
    Some(cu12_venv(dir, "venv", &w.join("nvidia_nccl_cu12-2.21.5")))
}

/// A venv `dir/name` of pip's CUDA 12 layout: the NCCL wheel `dist` (in the
/// wheel cache) and CUDA 12.4's header wheels, a directory each.
fn cu12_venv(dir: &Path, name: &str, dist: &Path) -> PathBuf {
    let w = dist.parent().unwrap();
    let venv = dir.join(name);
    let nv = venv.join("lib/python3.11/site-packages/nvidia");
    std::fs::create_dir_all(&nv).unwrap();
    std::os::unix::fs::symlink(dist.join("nvidia/nccl"), nv.join("nccl")).unwrap();
    for (dist, d) in [
        ("nvidia_cuda_runtime_cu12-12.4.127", "cuda_runtime"),
        ("nvidia_cuda_nvcc_cu12-12.4.131", "cuda_nvcc"),
        ("nvidia_cuda_cccl_cu12-12.4.127.post1", "cuda_cccl"),
    ] {
        std::os::unix::fs::symlink(w.join(dist).join("nvidia").join(d), nv.join(d)).unwrap();
    }
    venv
}

/// A wheel has no libnccl.so: the drop-in's -L names a loader directory
/// whose libnccl.so links to the wheel's libnccl.so.2, which CMake's
/// find_library and meson both use; the programs run from the build tree
/// (its run path) with no LD_LIBRARY_PATH.
#[test]
fn cmake_and_meson_build_and_run_against_a_real_wheel() {
    let Some((dir, venv)) = wheel_project("wheel", &["cmake", "meson", "ninja", "cc"]) else {
        return;
    };
    let pc = wrapper(&dir, &Install::Venv(venv.clone()));
    // Through sh, not exec'd: a child another test thread forks while the
    // script was open for writing would make exec fail (ETXTBSY).
    let flags = Command::new("sh")
        .arg(&pc)
        .args(["--libs", "nccl"])
        .output()
        .unwrap();
    let loader = dir.join("cache/nccl-find/loader");
    let libs = text(&flags.stdout);
    assert!(
        libs.starts_with(&format!("-L{}/", loader.display())) && libs.ends_with(" -lnccl\n"),
        "{libs}"
    );

    let cm = dir.join("cmake");
    std::fs::create_dir_all(&cm).unwrap();
    let (conf, exe) = cmake(&cm, &pc, "nccl>=2.18");
    assert!(conf.status.success(), "cmake: {}", both(&conf));
    let site = venv.join("lib/python3.11/site-packages/nvidia/nccl");
    assert!(
        text(&conf.stdout).contains(&format!(
            "-- got version=2.21.5 prefix={s} includedir={s}/include libdir={s}/lib\n",
            s = site.display()
        )),
        "{}",
        both(&conf)
    );
    cmake_build(&cm, &pc);
    runs(&exe, "22105 22105\n");

    let ms = dir.join("meson");
    std::fs::create_dir_all(&ms).unwrap();
    let (setup, exe) = meson(&ms, &pc, ">=2.18");
    assert!(setup.status.success(), "meson: {}", both(&setup));
    ninja(&ms, &pc);
    runs(&exe, "22105 22105\n");
    answered_all(&dir, CMAKE_CALLS);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A project that finds NCCL the way PyTorch's FindNCCL does: the
/// `NCCL_INCLUDE_DIR` and `NCCL_LIB_DIR` variables (and `NCCL_ROOT` on
/// CMake's prefix path), then `find_library(nccl)`. A wheel's own lib dir
/// defeats that (it has only `libnccl.so.2`); after `eval "$(nccl-find
/// --env)"` the exported variables name a directory where `-lnccl` links,
/// and the program builds and runs.
#[test]
fn a_findnccl_style_cmake_project_builds_after_eval_env() {
    let Some((dir, venv)) = wheel_project("findnccl", &["cmake", "cc"]) else {
        return;
    };
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("v.c"), PROGRAM).unwrap();
    std::fs::write(
        src.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.13)\n\
         project(v C)\n\
         set(NCCL_INCLUDE_DIR $ENV{NCCL_INCLUDE_DIR} CACHE PATH \"NCCL's headers\")\n\
         set(NCCL_LIB_DIR $ENV{NCCL_LIB_DIR} CACHE PATH \"NCCL's libraries\")\n\
         list(APPEND CMAKE_PREFIX_PATH $ENV{NCCL_ROOT})\n\
         find_path(NCCL_INCLUDE_DIRS NAMES nccl.h HINTS ${NCCL_INCLUDE_DIR})\n\
         find_library(NCCL_LIBRARIES NAMES nccl HINTS ${NCCL_LIB_DIR})\n\
         include(FindPackageHandleStandardArgs)\n\
         find_package_handle_standard_args(NCCL DEFAULT_MSG NCCL_INCLUDE_DIRS NCCL_LIBRARIES)\n\
         add_executable(v v.c)\n\
         target_include_directories(v PRIVATE ${NCCL_INCLUDE_DIRS})\n\
         target_link_libraries(v ${NCCL_LIBRARIES})\n",
    )
    .unwrap();
    let nccl_find = env!("CARGO_BIN_EXE_nccl-find");
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let shell = |script: &str, build: &str| {
        let mut c = Command::new("sh");
        for v in STEERING {
            c.env_remove(v);
        }
        c.current_dir(&dir)
            .env("VIRTUAL_ENV", &venv)
            .env("XDG_CACHE_HOME", &cache)
            .args(["-c", script, "sh", nccl_find, build])
            .output()
            .unwrap()
    };
    // nccl.h includes cuda_runtime.h: the CUDA include dirs come from
    // --cflags, as a CUDA toolkit's would come from CUDA_HOME.
    let configure = "set -e; eval \"$(\"$1\" --env)\"; \
                     cmake -S src -B \"$2\" -DCMAKE_C_FLAGS=\"$(\"$1\" --cflags-only-I)\"; \
                     cmake --build \"$2\"";
    let out = shell(configure, "build");
    assert!(out.status.success(), "{}", both(&out));
    runs(&dir.join("build/v"), "22105 22105\n");
    // The same project with the wheel's own dirs, as --env gave them
    // before: find_library finds no libnccl.so there.
    let plain = "set -e; eval \"$(\"$1\" --env)\"; \
                 export NCCL_LIB_DIR=\"$VIRTUAL_ENV/lib/python3.11/site-packages/nvidia/nccl/lib\" NCCL_ROOT=; \
                 cmake -S src -B \"$2\"";
    let out = shell(plain, "build-plain");
    assert!(!out.status.success());
    assert!(
        both(&out).contains("Could NOT find NCCL (missing: NCCL_LIBRARIES)"),
        "{}",
        both(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `nccl-find --cmake-config DIR` writes a CMake package for the install
/// found, and a CMake project that asks `find_package(NCCL 2.18 CONFIG)`
/// builds against `NCCL::nccl` and runs from its build tree: for a real
/// wheel in a venv (which has no `libnccl.so`, and no CMake package of its
/// own) and for a source build's `build/` tree. A version the install does
/// not reach is refused by CMake, as NCCL's own package would.
#[test]
fn cmake_config_gives_find_package_an_nccl_target() {
    let Some((dir, venv)) = wheel_project("cmake-config", &["cmake", "cc"]) else {
        return;
    };
    let source = std::fs::canonicalize(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/trees/source-build"),
    )
    .unwrap();
    // The same tree under a directory whose name is a generator expression:
    // CMake would have split its include directory in two.
    let genex = dir.join("a$<SEMICOLON>b");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(&source)
        .arg(&genex)
        .status()
        .unwrap();
    assert!(copied.success());
    /// (name, nccl-find's arguments, its variables, what the program prints)
    type Case<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a Path)>, &'a str);
    let cases: [Case; 3] = [
        (
            "wheel",
            vec![],
            vec![("VIRTUAL_ENV", &venv)],
            "22105 22105\n",
        ),
        (
            "source",
            vec!["--root", source.to_str().unwrap()],
            vec![("NCCL_HOME", Path::new("/src/nccl/build"))],
            "22304 22304\n",
        ),
        (
            "genex",
            vec!["--root", genex.to_str().unwrap()],
            vec![("NCCL_HOME", Path::new("/src/nccl/build"))],
            "22304 22304\n",
        ),
    ];
    for (name, args, vars, want) in cases {
        let pkg = dir.join(name).join("pkg");
        let mut c = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
        for v in STEERING {
            c.env_remove(v);
        }
        let out = c
            .args(&args)
            .arg("--cmake-config")
            .arg(&pkg)
            .envs(vars.iter().map(|(k, v)| (*k, v.as_os_str())))
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", both(&out));
        assert!(
            text(&out.stdout).ends_with(&format!("-DNCCL_DIR={}\n", pkg.display())),
            "{}",
            both(&out)
        );
        let src = dir.join(name).join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("v.c"), PROGRAM).unwrap();
        let project = |req: &str| {
            format!(
                "cmake_minimum_required(VERSION 3.13)\nproject(v C)\n\
                 find_package(NCCL {req} CONFIG REQUIRED)\n\
                 message(STATUS \"NCCL ${{NCCL_VERSION}}\")\n\
                 add_executable(v v.c)\ntarget_link_libraries(v NCCL::nccl)\n"
            )
        };
        std::fs::write(src.join("CMakeLists.txt"), project("2.18")).unwrap();
        let build = dir.join(name).join("build");
        let cmake = |args: &[&std::ffi::OsStr]| {
            let mut c = Command::new("cmake");
            for v in STEERING {
                c.env_remove(v);
            }
            c.args(args).output().unwrap()
        };
        let nccl_dir = format!("-DNCCL_DIR={}", pkg.display());
        let conf = cmake(&[
            "-S".as_ref(),
            src.as_os_str(),
            "-B".as_ref(),
            build.as_os_str(),
            nccl_dir.as_ref(),
        ]);
        assert!(conf.status.success(), "{name}: cmake: {}", both(&conf));
        let out = cmake(&["--build".as_ref(), build.as_os_str()]);
        assert!(
            out.status.success(),
            "{name}: cmake --build: {}",
            both(&out)
        );
        runs(&build.join("v"), want);
        // Too new a version: refused at configure time.
        std::fs::write(src.join("CMakeLists.txt"), project("2.99")).unwrap();
        let _ = std::fs::remove_dir_all(&build);
        let conf = cmake(&[
            "-S".as_ref(),
            src.as_os_str(),
            "-B".as_ref(),
            build.as_os_str(),
            nccl_dir.as_ref(),
        ]);
        assert!(!conf.status.success(), "{name}: {}", both(&conf));
        let said = both(&conf);
        assert!(
            said.contains(
                "Could not find a configuration file for package \"NCCL\" that is compatible"
            ) && said.contains(&format!("{}/NCCLConfig.cmake, version: ", pkg.display())),
            "{name}: {said}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// CUDA 13's header wheels: the runtime's, crt's and cccl's.
const CU13_HEADERS: [&str; 3] = [
    "nvidia_cuda_runtime-13.0.96",
    "nvidia_cuda_crt-13.0.88",
    "nvidia_cuda_cccl-13.0.85",
];

/// A venv of pip's CUDA 13 layout: the NCCL wheel, and the runtime, crt
/// and cccl wheels merged into `nvidia/cu13/include` as pip merges them.
fn cu13_venv(dir: &Path) -> Option<PathBuf> {
    let w = common::wheels()?;
    Some(venv_of(
        dir,
        "venv13",
        &w.join("nvidia_nccl_cu13-2.32.3"),
        &CU13_HEADERS,
    ))
}

/// `eval "$(nccl-find --env)"` gives a build everything NVIDIA's own
/// `nccl-sys` (nccl4rust) reads: `NCCL_INCLUDE_DIR` with `nccl.h`,
/// `NCCL_LIB_DIR` with `libnccl.so`, and `CUDA_HOME` whose `include/` has
/// `cuda.h` and `cuda_runtime.h`. A C program built from those variables
/// alone compiles, links and runs, for pip's CUDA 12 layout (a wheel a
/// directory, joined in a private directory of links) and CUDA 13's (one
/// `nvidia/cu13`).
#[test]
fn env_gives_a_complete_build_environment_for_pip_installs() {
    if !tools(&["cc"]) {
        return;
    }
    let dir = scratch("env-complete");
    let Some(cu12) = wheel_venv(&dir) else { return };
    let Some(cu13) = cu13_venv(&dir) else { return };
    std::fs::write(dir.join("v.c"), PROGRAM).unwrap();
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let script = "set -e; eval \"$(\"$1\" --env)\"; \
                  test -f \"$NCCL_INCLUDE_DIR/nccl.h\"; test -e \"$NCCL_LIB_DIR/libnccl.so\"; \
                  test -f \"$CUDA_HOME/include/cuda.h\"; test -f \"$CUDA_HOME/include/cuda_runtime.h\"; \
                  cc -o \"$2\" v.c -I\"$NCCL_INCLUDE_DIR\" -I\"$CUDA_HOME/include\" \
                     -L\"$NCCL_LIB_DIR\" -lnccl -Wl,-rpath,\"$NCCL_LIB_DIR\"; \
                  echo \"CUDA_HOME=$CUDA_HOME\"";
    for (venv, exe, want, home) in [
        (
            &cu12,
            "v12",
            "22105 22105\n",
            cache.join("nccl-find/loader"),
        ),
        (
            &cu13,
            "v13",
            "23203 23203\n",
            cu13.join("lib/python3.11/site-packages/nvidia/cu13"),
        ),
    ] {
        let mut c = Command::new("sh");
        for v in STEERING {
            c.env_remove(v);
        }
        let out = c
            .current_dir(&dir)
            .env("VIRTUAL_ENV", venv)
            .env("XDG_CACHE_HOME", &cache)
            .args(["-c", script, "sh", env!("CARGO_BIN_EXE_nccl-find"), exe])
            .output()
            .unwrap();
        assert!(out.status.success(), "{exe}: {}", both(&out));
        let said = text(&out.stdout);
        let cuda_home = said
            .lines()
            .find_map(|l| l.strip_prefix("CUDA_HOME="))
            .unwrap();
        assert!(
            Path::new(cuda_home).starts_with(&home),
            "{exe}: {cuda_home} is not under {}",
            home.display()
        );
        runs(&dir.join(exe), want);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `sh -c script` in `dir`, with the probe's variables cleared and `vars`
/// set; `$1` is nccl-find, `$2`... are `args`.
fn shell(dir: &Path, script: &str, vars: &[(&str, &Path)], args: &[&str]) -> Output {
    let mut c = Command::new("sh");
    for v in STEERING {
        c.env_remove(v);
    }
    c.current_dir(dir)
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .envs(vars.iter().map(|(k, v)| (*k, v.as_os_str())))
        .args(["-c", script, "sh", env!("CARGO_BIN_EXE_nccl-find")])
        .args(args)
        .output()
        .unwrap()
}

/// The last line a process wrote to stderr.
fn last_line(o: &Output) -> String {
    text(&o.stderr)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

/// A venv holding only the NCCL wheel `dist` (no CUDA header wheels) and
/// the CUDA 13 header wheels `cuda` merged into `nvidia/cu13/include`.
fn venv_of(dir: &Path, name: &str, dist: &Path, cuda: &[&str]) -> PathBuf {
    let venv = dir.join(name);
    let nv = venv.join("lib/python3.11/site-packages/nvidia");
    std::fs::create_dir_all(nv.join("cu13/include")).unwrap();
    std::os::unix::fs::symlink(dist.join("nvidia/nccl"), nv.join("nccl")).unwrap();
    let w = dist.parent().unwrap();
    for d in cuda {
        for e in std::fs::read_dir(w.join(d).join("nvidia/cu13/include"))
            .unwrap()
            .flatten()
        {
            let at = nv.join("cu13/include").join(e.file_name());
            if !at.exists() {
                std::os::unix::fs::symlink(e.path(), at).unwrap();
            }
        }
    }
    venv
}

/// Where `nccl.h` includes CUDA headers that are not there, or only some
/// of them, every way of getting compile flags fails at once, its last
/// line the install line for the wheels' CUDA major, rather than give
/// flags that fail in the compiler; `--print`, `--json` and doctor say the
/// same, and `--libs` (which needs no header) still answers.
#[test]
fn missing_or_partial_cuda_headers_fail_with_the_install_line() {
    let Some(w) = common::wheels() else { return };
    let dir = scratch("cuda-missing");
    let cu12 = venv_of(&dir, "cu12", &w.join("nvidia_nccl_cu12-2.21.5"), &[]);
    let cu13 = common::newest_wheel(&w, "nvidia_nccl_cu13");
    let partial = venv_of(
        &dir,
        "cu13",
        &cu13,
        &["nvidia_cuda_runtime-13.0.96", "nvidia_cuda_crt-13.0.88"],
    );
    let sp12 = cu12.join("lib/python3.11/site-packages/nvidia");
    let sp13 = partial.join("lib/python3.11/site-packages/nvidia");
    let cases = [
        (
            &cu12,
            "pip install nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-cccl-cu12 beside \
             the NCCL wheel, or install the CUDA toolkit and set CUDA_HOME: nccl.h includes \
             cuda_runtime.h, and none was found (looked in "
                .to_string(),
            format!("{}/cuda_runtime/include, /usr/include)", sp12.display()),
        ),
        (
            &partial,
            format!(
                "pip install 'nvidia-cuda-cccl==13.*' beside the NCCL wheel, or use the CUDA toolkit: \
                 {}/cu13/include has cuda_fp16.h, which includes nv/target, and no nv/target was \
                 found (looked in ",
                sp13.display()
            ),
            format!("{}/cu13/include)", sp13.display()),
        ),
    ];
    for (venv, fix, end) in &cases {
        let vars = [("VIRTUAL_ENV", venv.as_path())];
        let says = |o: &Output, prefix: &str| {
            let last = last_line(o);
            assert!(
                last.starts_with(&format!("nccl-find: {prefix}{fix}"))
                    && last.ends_with(end.as_str()),
                "{}",
                both(o)
            );
        };
        for args in ["--cflags", "--cflags --libs", "--cflags-only-I nccl"] {
            let o = shell(&dir, &format!("\"$1\" {args}"), &vars, &[]);
            assert_eq!(
                (o.status.code(), text(&o.stdout).as_str()),
                (Some(1), ""),
                "{args}"
            );
            says(&o, "");
        }
        let o = shell(&dir, "\"$1\" --cmake-config pkg", &vars, &[]);
        assert_eq!(o.status.code(), Some(1));
        says(&o, "--cmake-config: ");
        assert!(!dir.join("pkg").exists());
        let o = shell(&dir, "\"$1\" --libs", &vars, &[]);
        assert_eq!(o.status.code(), Some(0), "{}", both(&o));
        let o = shell(&dir, "\"$1\" --print", &vars, &[]);
        assert!(
            text(&o.stdout).contains(&format!("\n  cuda     no CUDA headers for nccl.h: {fix}")),
            "{}",
            both(&o)
        );
        let o = shell(&dir, "\"$1\" --json", &vars, &[]);
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let missing = json["selected"]["cuda_headers_missing"].as_str().unwrap();
        assert!(
            missing.starts_with(fix.as_str()) && missing.ends_with(end.as_str()),
            "{missing}"
        );
        let o = shell(&dir, "\"$1\" doctor", &vars, &[]);
        assert!(
            text(&o.stdout).contains(&format!(
                "  note     builds that compile nccl.h (C, C++, bindgen) will fail: it includes CUDA \
                 headers that are not here; running needs none of them\n           fix: {fix}"
            )),
            "{}",
            both(&o)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The lines of the README, built and run on the installs most people
/// have: `cc $(nccl-find --cflags --libs)` with the rpath the README shows,
/// a plain pkg-config build (nccl-find as `PKG_CONFIG`), and a CMake
/// project's `find_package(NCCL CONFIG)` from `--cmake-config`, for pip's
/// CUDA 12 layout (a wheel a directory) and CUDA 13's (one `nvidia/cu13`),
/// each with its CUDA header wheels.
#[test]
fn c_pkg_config_and_cmake_lines_build_and_run_on_pip_installs() {
    if !tools(&["cc", "cmake"]) {
        return;
    }
    let dir = scratch("c-lines");
    let Some(cu12) = wheel_venv(&dir) else { return };
    let Some(cu13) = cu13_venv(&dir) else { return };
    std::fs::write(dir.join("v.c"), PROGRAM).unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/v.c"), PROGRAM).unwrap();
    std::fs::write(
        dir.join("src/CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.13)\nproject(v C)\n\
         find_package(NCCL CONFIG REQUIRED)\nadd_executable(v v.c)\n\
         target_link_libraries(v NCCL::nccl)\n",
    )
    .unwrap();
    let script = "set -e; \
        cc -o \"c-$2\" v.c $(\"$1\" --cflags --libs) -Wl,-rpath,\"$(\"$1\" --variable=libdir)\"; \
        printf '#!/bin/sh\\nexec \"%s\" \"$@\"\\n' \"$1\" > pc; chmod +x pc; \
        cc -o \"pc-$2\" v.c $(./pc --cflags --libs nccl) -Wl,-rpath,\"$(./pc --variable=libdir nccl)\"; \
        \"$1\" --cmake-config \"pkg-$2\" >/dev/null; \
        cmake -S src -B \"build-$2\" -DNCCL_DIR=\"$PWD/pkg-$2\" >/dev/null; \
        cmake --build \"build-$2\" >/dev/null";
    for (venv, tag, want) in [
        (&cu12, "12", "22105 22105\n"),
        (&cu13, "13", "23203 23203\n"),
    ] {
        let out = shell(&dir, script, &[("VIRTUAL_ENV", venv)], &[tag]);
        assert!(out.status.success(), "cu{tag}: {}", both(&out));
        for exe in [
            format!("c-{tag}"),
            format!("pc-{tag}"),
            format!("build-{tag}/v"),
        ] {
            runs(&dir.join(exe), want);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A wheel without the CUDA header wheels `nccl.h` includes, found by
/// CMake's `pkg_check_modules` through the drop-in: configure fails at its
/// first check, with the pip line that adds them (before: configure
/// succeeded, the pip line printed four times, and the build failed on
/// `nccl.h: No such file or directory`).
#[test]
fn cmake_pkg_check_modules_fails_at_configure_without_cuda_headers() {
    if !tools(&["cmake", "cc"]) {
        return;
    }
    let Some(w) = common::wheels() else { return };
    if [
        "/usr/local/cuda/include",
        "/usr/include",
        "/opt/cuda/include",
    ]
    .iter()
    .any(|d| Path::new(d).join("cuda_runtime.h").exists())
    {
        eprintln!("skipped: this machine has CUDA headers of its own");
        return;
    }
    let dir = scratch("no-cuda-headers");
    let venv = dir.join("venv");
    let nv = venv.join("lib/python3.11/site-packages/nvidia");
    std::fs::create_dir_all(&nv).unwrap();
    std::os::unix::fs::symlink(
        w.join("nvidia_nccl_cu12-2.21.5/nvidia/nccl"),
        nv.join("nccl"),
    )
    .unwrap();
    let pc = wrapper(&dir, &Install::Venv(venv));
    let cm = dir.join("cmake");
    std::fs::create_dir_all(&cm).unwrap();
    let (conf, _) = cmake(&cm, &pc, "nccl>=2.18");
    let said = both(&conf);
    if said.contains("-- got version=") && !said.contains("nccl.h cannot compile") {
        panic!("configure went on: {said}");
    }
    assert!(!conf.status.success(), "{said}");
    assert!(
        said.contains(
            "NCCL is here, but its nccl.h cannot compile: pip install nvidia-cuda-runtime-cu12 \
             nvidia-cuda-nvcc-cu12 nvidia-cuda-cccl-cu12 beside the NCCL wheel"
        ),
        "{said}"
    );
    assert_eq!(
        said.matches("pip install nvidia-cuda-runtime-cu12").count(),
        1,
        "{said}"
    );
}
