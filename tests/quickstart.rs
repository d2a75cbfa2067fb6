//! The README's first screen, followed as a new user would: a `-sys` crate
//! made of its `[build-dependencies]` line and its build.rs, and a final
//! binary made of its other build.rs, built with cargo and run with no
//! `LD_LIBRARY_PATH`, against the newest real wheel laid out three ways:
//! as pip installs it (`NCCL_HOME`), as dpkg installs it (`/usr/include` and
//! `/usr/lib/<multiarch>` with a dpkg database, under `NCCL_SYSROOT`), and
//! as a source build leaves it (`build/include`, `build/lib`). The binary
//! must print the version `ncclGetVersion` of the loaded library reports.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The newest wheel's `nvidia/nccl`, and its version.
fn newest_wheel() -> Option<(PathBuf, String)> {
    let Some(dir) = std::env::var_os("NCCL_FIND_WHEELS") else {
        if std::env::var_os("NCCL_FIND_REQUIRE_WHEELS").is_some() {
            panic!("NCCL_FIND_WHEELS is unset; run scripts/test");
        }
        eprintln!(
            "skipped: NCCL_FIND_WHEELS is unset (scripts/test downloads the wheels and sets it)"
        );
        return None;
    };
    let mut best: Option<(Vec<u64>, PathBuf, String)> = None;
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        let Some((dist, version)) = name.split_once('-') else {
            continue;
        };
        if !dist.starts_with("nvidia_nccl_cu") {
            continue;
        }
        let version = version.split(".post").next().unwrap().to_string();
        let key: Vec<u64> = version.split('.').map(|p| p.parse().unwrap_or(0)).collect();
        if best.as_ref().map_or(true, |(k, ..)| key > *k) {
            best = Some((
                key,
                Path::new(&dir).join(&name).join("nvidia/nccl"),
                version,
            ));
        }
    }
    let (_, home, version) = best.expect("a wheel in NCCL_FIND_WHEELS");
    Some((home, version))
}

/// The first fenced block of `lang` in the README that contains `needle`.
fn block(readme: &str, lang: &str, needle: &str) -> String {
    let mut lines = readme.lines();
    while let Some(l) = lines.next() {
        if l.trim() != format!("```{lang}") {
            continue;
        }
        let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        let body = body.join("\n");
        if body.contains(needle) {
            return body + "\n";
        }
    }
    panic!("README.md has no ```{lang} block with {needle}")
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The two crates, from the README's words.
fn write_workspace(ws: &Path, readme: &str) {
    let deps = block(readme, "toml", "nccl-find = ");
    assert!(deps.contains("[build-dependencies]"), "{deps}");
    let sys_build = block(readme, "rust", "probe_or_exit");
    let bin_build = block(readme, "rust", "emit_rpath_from_dep");
    // Before the first release the README names a clone beside the user's
    // crates (`path = "../nccl-find"`): this repository is that clone.
    // After it, a registry version, patched to this repository.
    let patch = match deps.contains("path = \"../nccl-find\"") {
        true => {
            let clone = ws.join("nccl-find");
            let _ = std::fs::remove_file(&clone);
            std::fs::create_dir_all(ws).unwrap();
            std::os::unix::fs::symlink(repo(), &clone).unwrap();
            String::new()
        }
        false => format!(
            "\n[patch.crates-io]\nnccl-find = {{ path = \"{}\" }}\n",
            repo().display()
        ),
    };
    write(
        &ws.join("Cargo.toml"),
        &format!(
            "[workspace]\nmembers = [\"my-nccl-sys\", \"app\"]\nexclude = [\"nccl-find\"]\nresolver = \"2\"\n{patch}"
        ),
    );
    write(
        &ws.join("my-nccl-sys/Cargo.toml"),
        &format!(
            "[package]\nname = \"my-nccl-sys\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
             links = \"nccl\"\n\n{deps}"
        ),
    );
    write(&ws.join("my-nccl-sys/build.rs"), &sys_build);
    write(
        &ws.join("my-nccl-sys/src/lib.rs"),
        "extern \"C\" {\n    pub fn ncclGetVersion(version: *mut i32) -> i32;\n}\n",
    );
    write(
        &ws.join("app/Cargo.toml"),
        &format!(
            "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\nmy-nccl-sys = {{ path = \"../my-nccl-sys\" }}\n\n{deps}"
        ),
    );
    write(&ws.join("app/build.rs"), &bin_build);
    write(
        &ws.join("app/src/main.rs"),
        "fn main() {\n    let mut v = 0;\n    // SAFETY: ncclGetVersion writes one int.\n    \
         let rc = unsafe { my_nccl_sys::ncclGetVersion(&mut v) };\n    \
         println!(\"NCCL {}.{}.{} rc {rc}\", v / 10000, v / 100 % 100, v % 100);\n    \
         // The file the loader mapped, as the kernel says.\n    \
         let maps = std::fs::read_to_string(\"/proc/self/maps\").unwrap();\n    \
         for l in maps.lines().filter(|l| l.contains(\"libnccl\")).take(1) {\n        \
         eprintln!(\"mapped {}\", l.split_whitespace().last().unwrap());\n    }\n}\n",
    );
}

/// The file the app says the loader mapped (its stderr's `mapped` line).
fn mapped(run: &std::process::Output) -> PathBuf {
    let err = String::from_utf8_lossy(&run.stderr);
    let line = err.lines().find_map(|l| l.strip_prefix("mapped "));
    PathBuf::from(line.unwrap_or_else(|| panic!("no mapped line: {err}")))
}

/// Builds the app with `vars` and runs it with no loader variables.
fn build_and_run(ws: &Path, vars: &[(&str, &Path)]) -> String {
    let (_, run) = build_then_run(ws, vars, None);
    assert!(
        run.status.success(),
        "{vars:?}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    String::from_utf8_lossy(&run.stdout).into_owned()
}

/// Builds the app (which must succeed), and runs it with `LD_LIBRARY_PATH`
/// as given (else unset): the build's stderr, and how the run went.
fn build_then_run(
    ws: &Path,
    vars: &[(&str, &Path)],
    ld_library_path: Option<&Path>,
) -> (String, std::process::Output) {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(ws)
        .args(["build", "-p", "app", "--offline"])
        .env("CARGO_TARGET_DIR", ws.join("target"));
    for v in [
        "NCCL_HOME",
        "NCCL_SYSROOT",
        "LD_LIBRARY_PATH",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
    ] {
        cmd.env_remove(v);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{vars:?}:\n{err}");
    let mut run = Command::new(ws.join("target/debug/app"));
    match ld_library_path {
        Some(p) => run.env("LD_LIBRARY_PATH", p),
        None => run.env_remove("LD_LIBRARY_PATH"),
    };
    (err, run.output().unwrap())
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(from, to).unwrap();
}

fn link(target: &str, at: &Path) {
    std::os::unix::fs::symlink(target, at).unwrap();
}

/// The wheel's files as dpkg's libnccl2 and libnccl-dev lay them out.
fn dpkg_tree(root: &Path, wheel: &Path, version: &str) {
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    copy(
        &wheel.join("include/nccl.h"),
        &root.join("usr/include/nccl.h"),
    );
    let file = format!("libnccl.so.{version}");
    copy(&wheel.join("lib/libnccl.so.2"), &lib.join(&file));
    link(&file, &lib.join("libnccl.so.2"));
    link("libnccl.so.2", &lib.join("libnccl.so"));
    let mut status = String::new();
    for pkg in ["libnccl2", "libnccl-dev"] {
        status.push_str(&format!(
            "Package: {pkg}\nStatus: install ok installed\nArchitecture: amd64\n\
             Version: {version}-1+cuda12.9\n\n"
        ));
    }
    write(&root.join("var/lib/dpkg/status"), &status);
}

/// The wheel's files where `make src.build` leaves them.
fn source_tree(checkout: &Path, wheel: &Path, version: &str) {
    let build = checkout.join("build");
    copy(&wheel.join("include/nccl.h"), &build.join("include/nccl.h"));
    let file = format!("libnccl.so.{version}");
    copy(
        &wheel.join("lib/libnccl.so.2"),
        &build.join("lib").join(&file),
    );
    link(&file, &build.join("lib/libnccl.so.2"));
    link("libnccl.so.2", &build.join("lib/libnccl.so"));
    write(&checkout.join("src/nccl.h.in"), "/* template */\n");
}

#[test]
fn a_sys_crate_from_the_readme_builds_links_and_runs() {
    let Some((wheel, version)) = newest_wheel() else {
        return;
    };
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let ws = Path::new(env!("CARGO_TARGET_TMPDIR")).join("quickstart");
    let _ = std::fs::remove_dir_all(&ws);
    write_workspace(&ws, &readme);
    let _ = std::fs::copy(repo().join("Cargo.lock"), ws.join("Cargo.lock"));
    let expect = format!("NCCL {version} rc 0\n");
    // As pip installs it.
    let (_, run) = build_then_run(&ws, &[("NCCL_HOME", &wheel)], None);
    assert_eq!(String::from_utf8_lossy(&run.stdout), expect, "wheel");
    let chosen = std::fs::canonicalize(wheel.join("lib/libnccl.so.2")).unwrap();
    assert_eq!(mapped(&run), chosen);
    // An older NCCL first on LD_LIBRARY_PATH (a module system's, another
    // package's): the binary's DT_RPATH comes first, so it still maps the
    // chosen one. With a DT_RUNPATH it would map 2.21.5.
    let elf = nccl_find::internal::read_elf(&ws.join("target/debug/app")).unwrap();
    assert_eq!(elf.runpath, None);
    let older = Path::new(&std::env::var_os("NCCL_FIND_WHEELS").unwrap())
        .join("nvidia_nccl_cu12-2.21.5/nvidia/nccl/lib");
    assert!(older.join("libnccl.so.2").is_file(), "{}", older.display());
    let run = Command::new(ws.join("target/debug/app"))
        .env("LD_LIBRARY_PATH", &older)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        expect,
        "LD_LIBRARY_PATH"
    );
    assert_eq!(mapped(&run), chosen);
    // As dpkg installs it (under a sysroot, as nothing here may touch /usr).
    // On the target it lies in a directory the loader searches by default,
    // so the binary gets no rpath (one to /usr/lib/<multiarch> would put
    // every library there ahead of LD_LIBRARY_PATH; one to the sysroot
    // would name a place the target does not have): here it runs with the
    // sysroot's directory on LD_LIBRARY_PATH, as it would from the default
    // directory there.
    let sysroot = ws.join("dpkg-root");
    dpkg_tree(&sysroot, &wheel, &version);
    let lib = sysroot.join("usr/lib/x86_64-linux-gnu");
    let (_, run) = build_then_run(&ws, &[("NCCL_SYSROOT", &sysroot)], Some(&lib));
    assert_eq!(String::from_utf8_lossy(&run.stdout), expect, "dpkg");
    let elf = nccl_find::internal::read_elf(&ws.join("target/debug/app")).unwrap();
    assert_eq!((elf.rpath, elf.runpath), (None, None), "dpkg");
    // As a source build leaves it.
    let checkout = ws.join("src/nccl");
    source_tree(&checkout, &wheel, &version);
    assert_eq!(
        build_and_run(&ws, &[("NCCL_HOME", &checkout)]),
        expect,
        "source build"
    );
    std::fs::remove_dir_all(&ws).unwrap();
}

/// app → wrapper → -sys: cargo passes `DEP_NCCL_LIB_DIR` to the wrapper
/// only. A wrapper that re-emits it, as `emit_rpath_from_dep`'s docs show,
/// gives the app its rpath; one that does not gets the app a warning that
/// says what to do, and a binary that cannot start without
/// `LD_LIBRARY_PATH`, as the warning says.
#[test]
fn a_wrapper_crate_between_the_app_and_the_sys_crate() {
    let Some((wheel, version)) = newest_wheel() else {
        return;
    };
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let ws = Path::new(env!("CARGO_TARGET_TMPDIR")).join("quickstart-wrapper");
    let _ = std::fs::remove_dir_all(&ws);
    write_workspace(&ws, &readme);
    let _ = std::fs::copy(repo().join("Cargo.lock"), ws.join("Cargo.lock"));
    let root = std::fs::read_to_string(ws.join("Cargo.toml")).unwrap();
    write(
        &ws.join("Cargo.toml"),
        &root.replace("\"app\"]", "\"app\", \"wrapper\"]"),
    );
    write(
        &ws.join("wrapper/Cargo.toml"),
        "[package]\nname = \"wrapper\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
         links = \"mywrapper\"\n\n[dependencies]\nmy-nccl-sys = { path = \"../my-nccl-sys\" }\n",
    );
    write(
        &ws.join("wrapper/src/lib.rs"),
        "pub fn version() -> i32 {\n    let mut v = 0;\n    // SAFETY: ncclGetVersion writes one int.\n    \
         unsafe { my_nccl_sys::ncclGetVersion(&mut v) };\n    v\n}\n",
    );
    let app = std::fs::read_to_string(ws.join("app/Cargo.toml")).unwrap();
    write(
        &ws.join("app/Cargo.toml"),
        &app.replace(
            "my-nccl-sys = { path = \"../my-nccl-sys\" }",
            "wrapper = { path = \"../wrapper\" }",
        ),
    );
    write(
        &ws.join("app/src/main.rs"),
        "fn main() {\n    let v = wrapper::version();\n    \
         println!(\"NCCL {}.{}.{} rc 0\", v / 10000, v / 100 % 100, v % 100);\n}\n",
    );
    // A wrapper that passes nothing on: the app's build warns, and the
    // binary cannot find libnccl.so.2.
    write(&ws.join("wrapper/build.rs"), "fn main() {}\n");
    let (err, run) = build_then_run(&ws, &[("NCCL_HOME", &wheel)], None);
    assert!(
        err.contains(
            "warning: app@0.1.0: nccl-find: no rpath was given: DEP_NCCL_LIB_DIR is not set"
        ),
        "{err}"
    );
    assert_eq!(run.status.code(), Some(127), "{run:?}");
    assert!(String::from_utf8_lossy(&run.stderr).contains("libnccl.so.2"));
    // The documented re-emit.
    write(
        &ws.join("wrapper/build.rs"),
        "fn main() {\n    if let Some(dir) = std::env::var_os(\"DEP_NCCL_LIB_DIR\") {\n        \
         println!(\"cargo:nccl_lib_dir={}\", dir.to_string_lossy());\n    }\n}\n",
    );
    let (err, run) = build_then_run(&ws, &[("NCCL_HOME", &wheel)], None);
    assert!(!err.contains("no rpath was given"), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        format!("NCCL {version} rc 0\n")
    );
    std::fs::remove_dir_all(&ws).unwrap();
}

/// A `DEP_NCCL_LIB_DIR` whose name holds a byte that is not UTF-8 and then
/// a line break and a directive: nothing of it reaches cargo as a
/// directive, from either function a final binary calls.
#[test]
fn a_hostile_dep_lib_dir_injects_no_directive() {
    use std::os::unix::ffi::OsStrExt;
    let ws = Path::new(env!("CARGO_TARGET_TMPDIR")).join("quickstart-hostile");
    let _ = std::fs::remove_dir_all(&ws);
    // The directory exists and holds a libnccl.so.2, so that only its name
    // is in the way.
    let mut name = b"nccl-\xff\ncargo:rustc-env=PWN=x".to_vec();
    let mut dirs = Vec::new();
    for tail in [&b""[..], b"\ncargo:rustc-cfg=pwned"] {
        name.extend_from_slice(tail);
        let dir = ws.join(std::ffi::OsStr::from_bytes(&name));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(
            common_tree().join("tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64/lib/libnccl.so.2.21.5"),
            dir.join("libnccl.so.2"),
        )
        .unwrap();
        dirs.push(dir);
    }
    for call in [
        "nccl_find::emit_rpath_from_dep();",
        "let _ = nccl_find::emit_loader_dir_from_dep();",
    ] {
        for dir in &dirs {
            let app = ws.join("app");
            let _ = std::fs::remove_dir_all(&app);
            write(
                &app.join("Cargo.toml"),
                &format!(
                    "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n\n\
                     [build-dependencies]\nnccl-find = {{ path = \"{}\", features = [\"loader-dir\"] }}\n",
                    repo().display()
                ),
            );
            write(&app.join("build.rs"), &format!("fn main() {{ {call} }}\n"));
            write(
                &app.join("src/main.rs"),
                "fn main() {\n    println!(\"{}\", option_env!(\"PWN\").unwrap_or(\"none\"));\n    \
                 println!(\"{}\", cfg!(pwned));\n}\n",
            );
            let _ = std::fs::copy(repo().join("Cargo.lock"), app.join("Cargo.lock"));
            let out = Command::new(env!("CARGO"))
                .current_dir(&app)
                .args(["run", "-q", "--offline"])
                .env("CARGO_TARGET_DIR", app.join("target"))
                .env("DEP_NCCL_LIB_DIR", dir)
                .env("XDG_CACHE_HOME", ws.join("cache"))
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{call}: {err}");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                "none\nfalse\n",
                "{call}: {err}"
            );
        }
    }
    std::fs::remove_dir_all(&ws).unwrap();
}

fn common_tree() -> std::path::PathBuf {
    repo().join("fixtures/trees")
}
