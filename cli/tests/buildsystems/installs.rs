//! Builds against Debian's own packages, the glibc a library needs, and a
//! -sys crate written to the contract of NVIDIA's Rust bindings.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{
    both, common, cu12_venv, runs, scratch, shell, sq, text, tools, venv_of, CU13_HEADERS, PROGRAM,
};

/// Debian's own packages (sid's libnccl2 and libnccl-dev, trixie's
/// nvidia-cuda-dev and libcu++-dev, unpacked by scripts/debian-root into a
/// root with dpkg's database), which `NCCL_FIND_DEBIAN` names.
fn debian() -> Option<PathBuf> {
    common::required_path("NCCL_FIND_DEBIAN")
}

/// `2.29.7` → 22907.
fn code(version: &str) -> u32 {
    let v: Vec<u32> = version.split('.').map(|x| x.parse().unwrap()).collect();
    v[0] * 10000 + v[1] * 100 + v[2]
}

/// libnccl2's version in a dpkg status file: `2.29.7` of `2.29.7-1-1`.
fn dpkg_version(root: &Path) -> String {
    let status = std::fs::read_to_string(root.join("var/lib/dpkg/status")).unwrap();
    let stanza = status
        .split("\n\n")
        .find(|s| s.starts_with("Package: libnccl2\n"))
        .unwrap();
    let v = stanza
        .lines()
        .find_map(|l| l.strip_prefix("Version: "))
        .unwrap();
    v.split('-').next().unwrap().to_string()
}

/// Debian's layout: NCCL and CUDA's headers share `/usr/include`, the
/// library is in the multiarch dir, and libnccl-dev's own `nccl.pc` says
/// `prefix=/usr/local`. The flags name each dir once, `--env`'s prefix is
/// `/usr`, a C file and a CMake `find_package(NCCL CONFIG)` target compile
/// from them, and doctor names the wrong `nccl.pc`.
#[test]
fn debian_packages_give_complete_lines() {
    let Some(root) = debian() else { return };
    if !tools(&["cc", "cmake"]) {
        return;
    }
    let dir = scratch("debian");
    let r = root.display();
    let v = dpkg_version(&root);
    let run = |args: &str| {
        shell(
            &dir,
            &format!("\"$1\" --root \"$2\" {args}"),
            &[],
            &[root.to_str().unwrap()],
        )
    };
    let o = run("--cflags --libs");
    assert_eq!(
        (o.status.code(), text(&o.stdout)),
        (
            Some(0),
            format!("-I{r}/usr/include -L{r}/usr/lib/x86_64-linux-gnu -lnccl\n")
        ),
        "{}",
        both(&o)
    );
    let o = run("--env");
    assert_eq!(
        text(&o.stdout),
        format!(
            "export NCCL_INCLUDE_DIR={r}/usr/include\nexport NCCL_LIB_DIR={r}/usr/lib/x86_64-linux-gnu\n\
             export NCCL_HOME={r}/usr\nexport NCCL_ROOT={r}/usr\nexport CUDA_HOME={r}/usr\n\
             export NCCL_CFLAGS=-I{r}/usr/include\n\
             export NCCL_LIBS='-L{r}/usr/lib/x86_64-linux-gnu -lnccl'\n"
        ),
        "{}",
        both(&o)
    );
    std::fs::write(dir.join("v.c"), PROGRAM).unwrap();
    let o = shell(
        &dir,
        "set -e; cc -c -o v.o v.c $(\"$1\" --root \"$2\" --cflags); \
         \"$1\" --root \"$2\" --cmake-config pkg >/dev/null; mkdir src; cp v.c src/; \
         printf 'cmake_minimum_required(VERSION 3.13)\\nproject(v C)\\nfind_package(NCCL %s CONFIG REQUIRED)\\n\
         add_library(v OBJECT v.c)\\ntarget_link_libraries(v PRIVATE NCCL::nccl)\\n' \"$3\" > src/CMakeLists.txt; \
         cmake -S src -B build -DNCCL_DIR=\"$PWD/pkg\" >/dev/null; cmake --build build >/dev/null",
        &[],
        &[root.to_str().unwrap(), &v],
    );
    assert!(o.status.success(), "{}", both(&o));
    let o = run("doctor");
    assert!(
        text(&o.stdout).contains(
            "  problem  /usr/lib/x86_64-linux-gnu/pkgconfig/nccl.pc says prefix=/usr/local \
             (-I/usr/local/include -L/usr/local/lib), where there is no NCCL"
        ),
        "{}",
        both(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The glibc of this machine (`getconf GNU_LIBC_VERSION`), and the newest
/// one `lib` needs (its `GLIBC_x.y` symbol versions, by objdump).
fn glibcs(lib: &Path) -> ((u32, u32), (u32, u32)) {
    let parse = |s: &str| {
        let mut parts = s.trim().split('.').map(|x| x.parse::<u32>().unwrap());
        (parts.next().unwrap(), parts.next().unwrap())
    };
    let have = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .unwrap();
    let have = parse(text(&have.stdout).trim().strip_prefix("glibc ").unwrap());
    let dump = Command::new("objdump").arg("-T").arg(lib).output().unwrap();
    let needs = text(&dump.stdout)
        .split_whitespace()
        .filter_map(|w| {
            w.strip_prefix("(GLIBC_")
                .or_else(|| w.strip_prefix("GLIBC_"))
        })
        .map(|w| parse(w.trim_end_matches(')')))
        .max()
        .unwrap();
    (have, needs)
}

/// Debian's libnccl2 from sid needs a newer glibc than Debian 12's: on such
/// a machine nccl-find refuses it, naming both versions, before any linker
/// says `undefined reference to __isoc23_strtol@GLIBC_2.38`; where the
/// glibc is new enough, the same C program links and runs.
#[test]
fn a_library_for_a_newer_glibc_is_refused_or_runs() {
    let Some(root) = debian() else { return };
    if !tools(&["cc", "objdump", "getconf"]) {
        return;
    }
    let dir = scratch("glibc");
    let lib_dir = root.join("usr/lib/x86_64-linux-gnu");
    let v = dpkg_version(&root);
    let (have, needs) = glibcs(&lib_dir.join(format!("libnccl.so.{v}")));
    std::fs::write(dir.join("v.c"), PROGRAM).unwrap();
    let vars = [
        ("NCCL_INCLUDE_DIR", root.join("usr/include")),
        ("NCCL_LIB_DIR", lib_dir.clone()),
    ];
    let vars: Vec<(&str, &Path)> = vars.iter().map(|(k, v)| (*k, v.as_path())).collect();
    let o = shell(
        &dir,
        "set -e; cc -o v v.c $(\"$1\" --cflags --libs) -Wl,-rpath,\"$(\"$1\" --variable=libdir)\"",
        &vars,
        &[],
    );
    if needs <= have {
        assert!(o.status.success(), "{}", both(&o));
        runs(&dir.join("v"), &format!("{0} {0}\n", code(&v)));
    } else {
        // The compiler runs on regardless (a shell does not stop for a
        // failed `$(...)`); nccl-find's own last line is the cause.
        assert!(!o.status.success(), "{}", both(&o));
        let o = shell(&dir, "\"$1\" --cflags --libs", &vars, &[]);
        assert_eq!(o.status.code(), Some(1), "{}", both(&o));
        let last = text(&o.stderr)
            .lines()
            .last()
            .unwrap_or_default()
            .to_string();
        assert!(
            last.ends_with(&format!(
                "use an NCCL built for glibc {}.{} or older (NVIDIA's pip wheels need 2.27 at most), or \
                 build on a system with glibc {}.{} or newer: {}/libnccl.so.{v} needs glibc {}.{}, and \
                 this system's C library, /lib/x86_64-linux-gnu/libc.so.6, is glibc {}.{}; linking it \
                 fails (undefined reference to …@GLIBC_{}.{}), and so does loading it",
                have.0, have.1, needs.0, needs.1, lib_dir.display(), needs.0, needs.1, have.0, have.1,
                needs.0, needs.1
            )),
            "{}",
            both(&o)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A built NCCL checkout as `make src.build` leaves it (`build/include`
/// with the device API's headers, `build/lib/libnccl.so -> .so.2 ->
/// .so.2.X.Y`), made from the wheel `dist`'s files, and a CUDA toolkit's
/// `include/` (CUDA 13's header wheels, merged): (checkout, toolkit).
fn source_tree(dir: &Path, dist: &Path) -> (PathBuf, PathBuf) {
    let checkout = dir.join("nccl");
    let (inc, lib) = (checkout.join("build/include"), checkout.join("build/lib"));
    std::fs::create_dir_all(checkout.join("src")).unwrap();
    std::fs::write(
        checkout.join("src/nccl.h.in"),
        "/* the template make fills in */\n",
    )
    .unwrap();
    std::fs::create_dir_all(&lib).unwrap();
    let status = Command::new("cp")
        .arg("-r")
        .arg(dist.join("nvidia/nccl/include"))
        .arg(&inc)
        .status()
        .unwrap();
    assert!(status.success());
    let v = dist
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .rsplit('-')
        .next()
        .unwrap();
    let real = lib.join(format!("libnccl.so.{v}"));
    let wheel_lib = dist.join("nvidia/nccl/lib/libnccl.so.2");
    if std::fs::hard_link(&wheel_lib, &real).is_err() {
        std::fs::copy(&wheel_lib, &real).unwrap();
    }
    std::os::unix::fs::symlink(format!("libnccl.so.{v}"), lib.join("libnccl.so.2")).unwrap();
    std::os::unix::fs::symlink("libnccl.so.2", lib.join("libnccl.so")).unwrap();
    let toolkit = dir.join("cuda-13.0");
    let venv = venv_of(dir, "toolkit-headers", dist, &CU13_HEADERS);
    std::fs::create_dir_all(&toolkit).unwrap();
    std::os::unix::fs::symlink(
        venv.join("lib/python3.11/site-packages/nvidia/cu13/include"),
        toolkit.join("include"),
    )
    .unwrap();
    (checkout, toolkit)
}

/// A -sys crate written to the contract of NVIDIA's own bindings (NCCL's
/// contrib/nccl4rust: `NCCL_INCLUDE_DIR` with `nccl.h`, `nccl_device.h` and
/// `nccl_device/`, or `NCCL_SOURCE_DIR`; `NCCL_LIB_DIR` with `libnccl.so`;
/// `CUDA_HOME` with `cuda.h` and `cuda_runtime.h`; bindgen over both
/// headers as C++17; `-lnccl`) builds after nothing but `eval "$(nccl-find
/// --env)"`, and its test prints the version of the library it loads:
/// for a CUDA 12 wheel venv and a CUDA 13 one (each with its header
/// wheels), a source build named by `NCCL_SOURCE_DIR` beside a CUDA
/// toolkit, and Debian's packages (where this machine's glibc can run them;
/// built, not run, where it cannot: see the test above).
#[test]
fn a_sys_crate_to_nvidias_contract_builds_after_eval_env() {
    let Some(w) = common::wheels() else { return };
    let debian = debian();
    let dir = scratch("contract");
    let cu12 = common::newest_wheel(&w, "nvidia_nccl_cu12");
    let cu13 = common::newest_wheel(&w, "nvidia_nccl_cu13");
    let venv12 = cu12_venv(&dir, "venv12", &cu12);
    let venv13 = venv_of(&dir, "venv13", &cu13, &CU13_HEADERS);
    let (checkout, toolkit) = source_tree(&dir, &cu13);
    let version = |dist: &Path| code(dist.to_str().unwrap().rsplit('-').next().unwrap());
    /// (name, variables, nccl-find's arguments, the version it runs, if it can)
    type Case<'a> = (&'a str, Vec<(&'a str, PathBuf)>, String, Option<u32>);
    let mut cases: Vec<Case> = vec![
        (
            "cu12",
            vec![("VIRTUAL_ENV", venv12)],
            String::new(),
            Some(version(&cu12)),
        ),
        (
            "cu13",
            vec![("VIRTUAL_ENV", venv13)],
            String::new(),
            Some(version(&cu13)),
        ),
        (
            "source",
            vec![("NCCL_SOURCE_DIR", checkout), ("CUDA_HOME", toolkit)],
            String::new(),
            Some(version(&cu13)),
        ),
    ];
    if let Some(root) = &debian {
        let v = dpkg_version(root);
        let lib = root.join(format!("usr/lib/x86_64-linux-gnu/libnccl.so.{v}"));
        let (have, needs) = glibcs(&lib);
        let runs = (needs <= have).then(|| code(&v));
        cases.push(("debian", vec![], format!("--root {}", sq(root)), runs));
    }
    let krate = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/contract-sys");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("contract-target");
    for (name, vars, args, runs) in cases {
        let script = format!(
            "set -e; eval \"$(\"$1\" {args} --env)\"; cd \"$2\"; \"$3\" build --locked -q; \
             if [ \"$4\" = run ]; then LD_LIBRARY_PATH=\"$NCCL_LIB_DIR\" \"$3\" test --locked -q -- --nocapture; fi"
        );
        let mut vars: Vec<(&str, &Path)> = vars.iter().map(|(k, v)| (*k, v.as_path())).collect();
        vars.push(("CARGO_TARGET_DIR", &target));
        let run = if runs.is_some() { "run" } else { "build" };
        let o = shell(
            &dir,
            &script,
            &vars,
            &[krate.to_str().unwrap(), env!("CARGO"), run],
        );
        assert!(o.status.success(), "{name}: {}", both(&o));
        if let Some(code) = runs {
            assert!(
                text(&o.stdout).contains(&format!("\nncclGetVersion: {code}\n")),
                "{name}: {}",
                both(&o)
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
