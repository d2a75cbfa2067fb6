//! cudarc loads the NCCL nccl-find selected. Builds `examples/cudarc-nccl`
//! (its own workspace: cudarc never enters nccl-find's build) with cargo,
//! in one target dir shared by every build here, against each real wheel
//! in `NCCL_FIND_WHEELS` (see `scripts/test`), and runs the binary:
//!
//! - it prints exactly `cudarc loaded NCCL <version> from <the wheel's libnccl.so.2>`,
//!   found through `NCCL_HOME` and through `VIRTUAL_ENV`, nothing else set;
//! - with `LD_LIBRARY_PATH` naming a directory whose `libnccl.so` and
//!   `libnccl.so.1` are an NCCL 1 stand-in (and whose `libnccl.so.2` is
//!   another wheel), it still loads the selected NCCL 2 (the binary's
//!   `DT_RPATH` is searched first); with its loader directory gone, it
//!   refuses NCCL 1 with a message, never a panic;
//! - built with cudarc's `dynamic-linking` (`-lnccl`), the same;
//! - a target dir whose path holds a `,` works (the rpath goes to the
//!   linker verbatim), and a build with no NCCL fails with nccl-find's
//!   message, not a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::scratch;
use std::sync::Mutex;

/// Every test here builds into the same target dir and runs the binary it
/// just built: one at a time.
static LOCK: Mutex<()> = Mutex::new(());

/// One NCCL wheel in the cache.
struct Wheel {
    /// `nvidia_nccl_cu12-2.21.5`.
    dist: String,
    /// `2.21.5` (a `.postN` left out).
    version: String,
    /// The wheel's `nvidia/nccl`.
    home: PathBuf,
    /// Its `libnccl.so.2`, links resolved.
    library: PathBuf,
}

fn wheels() -> Option<Vec<Wheel>> {
    if !example_dir().is_dir() {
        eprintln!(
            "skipped: examples/cudarc-nccl is not part of the packaged crate (the repository's tests build it)"
        );
        return None;
    }
    let dir = match std::env::var_os("NCCL_FIND_WHEELS") {
        Some(d) => PathBuf::from(d),
        None if std::env::var_os("NCCL_FIND_REQUIRE_WHEELS").is_some() => {
            panic!("NCCL_FIND_WHEELS is unset; run scripts/test")
        }
        None => {
            eprintln!("skipped: NCCL_FIND_WHEELS is unset (scripts/test downloads the wheels and sets it)");
            return None;
        }
    };
    let mut out: Vec<Wheel> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("NCCL_FIND_WHEELS={}: {e}", dir.display()))
        .filter_map(|e| {
            let dist = e.ok()?.file_name().into_string().ok()?;
            let (name, dist_version) = dist.split_once('-')?;
            name.strip_prefix("nvidia_nccl_cu")?;
            let version = dist_version
                .split_once(".post")
                .map_or(dist_version, |(v, _)| v)
                .to_string();
            let home = dir.join(&dist).join("nvidia/nccl");
            let library = std::fs::canonicalize(home.join("lib/libnccl.so.2"))
                .unwrap_or_else(|e| panic!("{dist}: no lib/libnccl.so.2 ({e})"));
            Some(Wheel {
                dist,
                version,
                home,
                library,
            })
        })
        .collect();
    out.sort_by(|a, b| a.dist.cmp(&b.dist));
    assert!(
        !out.is_empty(),
        "no nvidia_nccl_cu* wheel in {}",
        dir.display()
    );
    Some(out)
}

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cudarc-nccl")
}

fn shared_target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudarc-nccl")
}

/// Takes every variable out that could point the probe, the linker or the
/// loader somewhere: the test sets what it means to.
fn clean(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        let up = k.to_ascii_uppercase();
        if up.contains("NCCL")
            || up.contains("CUDA")
            || up.contains("RUSTFLAGS")
            || [
                "LD_LIBRARY_PATH",
                "LD_PRELOAD",
                "LIBRARY_PATH",
                "PKG_CONFIG_PATH",
                "PKG_CONFIG_LIBDIR",
                "VIRTUAL_ENV",
                "CONDA_PREFIX",
                "PYTHONPATH",
                "PYTHONUSERBASE",
                "EBROOTNCCL",
                "CARGO_TARGET_DIR",
                "CARGO_BUILD_TARGET_DIR",
            ]
            .contains(&k)
        {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Builds the example; panics with cargo's output if it fails. Returns the binary.
fn build(target: &Path, features: &[&str], vars: &[(&str, &Path)]) -> PathBuf {
    let out = try_build(target, features, vars);
    assert!(
        out.status.success(),
        "building the example failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("debug/cudarc-nccl")
}

/// The user cache every build here uses (the loader directories' kept
/// copies go there), not the real one.
fn cache() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cudarc-cache");
    std::fs::create_dir_all(&d).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

/// The kept copies of the loader directory for `library`, in [`cache`].
fn kept_dirs(library: &Path) -> Vec<PathBuf> {
    let dirs = cache().join("nccl-find/loader-dirs");
    // A copy made for this file as it is now: one made before the file was
    // installed again (the cache of an earlier run) is another's.
    let installed = std::fs::metadata(library).unwrap().modified().unwrap();
    let found: Vec<PathBuf> = std::fs::read_dir(&dirs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|d| {
            std::fs::canonicalize(d.join("libnccl.so.2"))
                .ok()
                .as_deref()
                == Some(library)
                && std::fs::symlink_metadata(d)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t >= installed)
        })
        .collect();
    assert!(
        !found.is_empty(),
        "no kept loader directory for {}",
        library.display()
    );
    found
}

fn try_build(target: &Path, features: &[&str], vars: &[(&str, &Path)]) -> Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    clean(&mut cmd)
        .env("XDG_CACHE_HOME", cache())
        .current_dir(example_dir())
        .args(["build", "--quiet", "--no-default-features"])
        .arg("--features")
        .arg(features.join(","))
        .arg("--target-dir")
        .arg(target);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.output().expect("running cargo")
}

/// Runs the binary with nothing set but `extra`.
fn run(bin: &Path, extra: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(bin);
    clean(&mut cmd);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn expected(w: &Wheel) -> String {
    format!(
        "cudarc loaded NCCL {} from {}\n",
        w.version,
        w.library.display()
    )
}

/// Exit 0, exactly the expected line, nothing on stderr.
fn assert_loads(out: &Output, w: &Wheel, how: &str) {
    assert_eq!(
        (out.status.code(), text(&out.stdout), text(&out.stderr)),
        (Some(0), expected(w), String::new()),
        "{} {how}",
        w.dist
    );
}

/// The directory `emit_loader_dir` made for the last build in `target`.
fn loader_dir(target: &Path) -> PathBuf {
    let build = target.join("debug/build");
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&build)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path().join("out/nccl-loader");
            let t = std::fs::symlink_metadata(&p).ok()?.modified().ok()?;
            Some((t, p))
        })
        .collect();
    found.sort();
    found.pop().expect("a loader directory").1
}

/// A directory that a stale install could leave on `LD_LIBRARY_PATH`: an
/// NCCL 1 stand-in (built here, soname `libnccl.so.1`, `ncclGetVersion`
/// says 1.3.4) as `libnccl.so` and `libnccl.so.1`, and `other` (another
/// NCCL 2) as `libnccl.so.2`.
fn hostile_dir(tag: &str, other: &Path) -> PathBuf {
    let d = scratch(tag);
    let src = d.join("nccl1.c");
    std::fs::write(
        &src,
        "int ncclGetVersion(int *v) { *v = 1304; return 0; }\n\
         int ncclCommInitAll(void *c, int n, const int *l) { (void)c; (void)n; (void)l; return 0; }\n",
    )
    .unwrap();
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libnccl.so.1", "-o"])
        .arg(d.join("libnccl.so.1.3.4"))
        .arg(&src)
        .output()
        .expect("running cc (a C compiler is needed to build the NCCL 1 stand-in)");
    assert!(out.status.success(), "cc: {}", text(&out.stderr));
    std::os::unix::fs::symlink("libnccl.so.1.3.4", d.join("libnccl.so.1")).unwrap();
    std::os::unix::fs::symlink("libnccl.so.1", d.join("libnccl.so")).unwrap();
    std::os::unix::fs::symlink(other, d.join("libnccl.so.2")).unwrap();
    d
}

/// The wheel whose library is not `w`'s, for the hostile `libnccl.so.2`.
fn other_than<'a>(all: &'a [Wheel], w: &'a Wheel) -> &'a Wheel {
    all.iter().find(|o| o.library != w.library).unwrap_or(w)
}

#[test]
fn every_wheel_through_nccl_home_and_virtual_env() {
    let Some(all) = wheels() else { return };
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let target = shared_target();
    for w in &all {
        let bin = build(&target, &["dynamic-loading"], &[("NCCL_HOME", &w.home)]);
        assert_loads(&run(&bin, &[]), w, "through NCCL_HOME");
        // The loader directory: every name links to the wheel's library.
        let dir = loader_dir(&target);
        let mut names = Vec::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let n = e.unwrap().file_name().into_string().unwrap();
            if !n.starts_with("lib") {
                continue; // the directory's own marker
            }
            assert_eq!(
                std::fs::canonicalize(dir.join(&n)).unwrap(),
                w.library,
                "{n}"
            );
            names.push(n);
        }
        // The names cudarc's loader tries first.
        for n in ["libnccl.so", "libnccl.so.2"] {
            assert!(names.iter().any(|x| x == n), "{n}: {names:?}");
        }
    }
    // A venv holding only the wheel.
    let w = all.last().unwrap();
    let venv = scratch("venv");
    let sp = venv.join("lib/python3.11");
    std::fs::create_dir_all(&sp).unwrap();
    std::os::unix::fs::symlink(
        w.home.parent().unwrap().parent().unwrap(),
        sp.join("site-packages"),
    )
    .unwrap();
    let bin = build(&target, &["dynamic-loading"], &[("VIRTUAL_ENV", &venv)]);
    assert_loads(&run(&bin, &[]), w, "through VIRTUAL_ENV");
    let _ = std::fs::remove_dir_all(&venv);
}

#[test]
fn nccl1_first_on_ld_library_path_never_wins() {
    let Some(all) = wheels() else { return };
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let target = shared_target();
    let w = &all[0];
    let hostile = hostile_dir("nccl1", &other_than(&all, w).library);
    let bin = build(&target, &["dynamic-loading"], &[("NCCL_HOME", &w.home)]);
    assert_loads(
        &run(&bin, &[("LD_LIBRARY_PATH", &hostile)]),
        w,
        "with NCCL 1 first on LD_LIBRARY_PATH",
    );
    // Without its loader directory in target/, the kept copy in the user's
    // cache serves.
    let dir = loader_dir(&target);
    let away = dir.with_extension("away");
    std::fs::rename(&dir, &away).unwrap();
    assert_loads(
        &run(&bin, &[("LD_LIBRARY_PATH", &hostile)]),
        w,
        "from the kept copy, with NCCL 1 first on LD_LIBRARY_PATH",
    );
    // Without both, cudarc falls through to libnccl.so on LD_LIBRARY_PATH,
    // NCCL 1: the program refuses, with a message.
    let kept = kept_dirs(&w.library);
    for k in &kept {
        std::fs::rename(k, k.with_extension("away")).unwrap();
    }
    let out = run(&bin, &[("LD_LIBRARY_PATH", &hostile)]);
    std::fs::rename(&away, &dir).unwrap();
    for k in &kept {
        std::fs::rename(k.with_extension("away"), k).unwrap();
    }
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        err,
        format!(
            "cudarc-nccl: cudarc loaded {}, which is NCCL 1: refusing to run. The loader directory \
             nccl-find made for this binary is gone or was bypassed; rebuild it (cargo build), or run \
             `eval \"$(nccl-find --loader-env)\"` first\n",
            std::fs::canonicalize(hostile.join("libnccl.so.1.3.4"))
                .unwrap()
                .display()
        )
    );
    let _ = std::fs::remove_dir_all(&hostile);
}

#[test]
fn dynamic_linking_links_and_loads_the_selected_library() {
    let Some(all) = wheels() else { return };
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let target = shared_target();
    let w = &all[all.len() / 2];
    // cudarc's dynamic-linking also links -lcuda: a CUDA toolkit's stub
    // library does for that here, as it does on build machines with no driver.
    let cuda = scratch("cuda-stub");
    let stubs = cuda.join("lib64/stubs");
    std::fs::create_dir_all(&stubs).unwrap();
    std::fs::write(cuda.join("stub.c"), "void nccl_find_cuda_stub(void) {}\n").unwrap();
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(stubs.join("libcuda.so"))
        .arg(cuda.join("stub.c"))
        .output()
        .expect("running cc");
    assert!(out.status.success(), "cc: {}", text(&out.stderr));
    let bin = build(
        &target,
        &["dynamic-linking"],
        &[("NCCL_HOME", &w.home), ("CUDA_HOME", &cuda)],
    );
    assert_loads(&run(&bin, &[]), w, "linked with -lnccl");
    let hostile = hostile_dir("nccl1-linked", &other_than(&all, w).library);
    assert_loads(
        &run(&bin, &[("LD_LIBRARY_PATH", &hostile)]),
        w,
        "linked with -lnccl, another NCCL first on LD_LIBRARY_PATH",
    );
    let _ = std::fs::remove_dir_all(&hostile);
    let _ = std::fs::remove_dir_all(&cuda);
}

#[test]
fn a_comma_in_the_target_dir_and_no_nccl_at_all() {
    let Some(all) = wheels() else { return };
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let w = &all[0];
    // The rpath goes to the linker with -Xlinker, so -Wl's comma split
    // cannot cut it.
    let target = scratch("comma").join("a,b");
    let bin = build(&target, &["dynamic-loading"], &[("NCCL_HOME", &w.home)]);
    assert_loads(
        &run(&bin, &[]),
        w,
        "built in a dir whose path holds a comma",
    );
    // No NCCL where NCCL_HOME points: the build fails with nccl-find's story.
    let missing = target.join("no-such-nccl");
    let out = try_build(&target, &["dynamic-loading"], &[("NCCL_HOME", &missing)]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(target.parent().unwrap());
}

/// `cargo install` builds in a target dir it then deletes: the installed
/// binary still loads the selected NCCL, from the loader directory's kept
/// copy in the user's cache.
#[test]
fn an_installed_binary_keeps_its_nccl_after_its_target_dir_is_gone() {
    let Some(all) = wheels() else { return };
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let w = &all[all.len() - 1];
    let root = scratch("install-root");
    let target = scratch("install-target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // The example's dependencies first, whichever test runs first on a
    // fresh machine: `cargo install --offline` finds only what is fetched.
    let fetched = clean(&mut Command::new(&cargo))
        .current_dir(example_dir())
        .args(["fetch", "--quiet", "--locked"])
        .output()
        .expect("running cargo fetch");
    assert!(
        fetched.status.success(),
        "cargo fetch:\n{}",
        text(&fetched.stderr)
    );
    let mut cmd = Command::new(cargo);
    clean(&mut cmd)
        .env("XDG_CACHE_HOME", cache())
        .env("NCCL_HOME", &w.home)
        .args(["install", "--quiet", "--locked", "--offline", "--debug"])
        .args(["--no-default-features", "--features", "dynamic-loading"])
        .arg("--path")
        .arg(example_dir())
        .arg("--root")
        .arg(&root)
        .arg("--target-dir")
        .arg(&target);
    let out = cmd.output().expect("running cargo install");
    assert!(
        out.status.success(),
        "cargo install:\n{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(&target).unwrap();
    let bin = root.join("bin/cudarc-nccl");
    assert_loads(&run(&bin, &[]), w, "installed, its target dir gone");
    let _ = std::fs::remove_dir_all(&root);
}

/// `cargo install --git` (as from crates.io) builds in a temporary target
/// dir of its own, `$TMPDIR/cargo-installXXXXXX`, and deletes it. No rpath
/// entry of the installed binary may name it, or anything else below /tmp:
/// once it is gone, any user could make it again with a `libnccl.so.2` of
/// their own in it. The binary keeps its NCCL through the kept copy in the
/// user's cache.
#[test]
fn cargo_install_from_git_leaves_no_rpath_into_its_temporary_target_dir() {
    let Some(all) = wheels() else { return };
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let w = &all[all.len() - 1];
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let fetched = clean(&mut Command::new(&cargo))
        .current_dir(example_dir())
        .args(["fetch", "--quiet", "--locked"])
        .output()
        .expect("running cargo fetch");
    assert!(fetched.status.success(), "{}", text(&fetched.stderr));
    // The example as a git repository of its own, nccl-find by absolute path.
    let repo = scratch("git-repo");
    for f in ["Cargo.toml", "Cargo.lock", "build.rs", "src/main.rs"] {
        std::fs::create_dir_all(repo.join(f).parent().unwrap()).unwrap();
        std::fs::copy(example_dir().join(f), repo.join(f)).unwrap();
    }
    let manifest = std::fs::read_to_string(repo.join("Cargo.toml")).unwrap();
    let dep = "nccl-find = { path = \"../..\", features = [\"loader-dir\"] }";
    assert!(manifest.contains(dep), "{manifest}");
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::write(
        repo.join("Cargo.toml"),
        manifest.replace(
            dep,
            &format!(
                "nccl-find = {{ path = \"{}\", features = [\"loader-dir\"] }}",
                here.display()
            ),
        ),
    )
    .unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .current_dir(&repo)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .output()
            .expect("running git");
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-q", "-m", "example"]);
    let root = scratch("git-install-root");
    let tmp = std::env::temp_dir();
    let out = clean(&mut Command::new(&cargo))
        .env("XDG_CACHE_HOME", cache())
        .env("NCCL_HOME", &w.home)
        .env_remove("TMPDIR")
        .args(["install", "-v", "--locked", "--debug"])
        .args(["--no-default-features", "--features", "dynamic-loading"])
        .arg("--git")
        .arg(format!("file://{}", repo.display()))
        .arg("--root")
        .arg(&root)
        .output()
        .expect("running cargo install");
    let err = text(&out.stderr);
    assert!(out.status.success(), "cargo install:\n{err}");
    // It did build in /tmp/cargo-installXXXXXX, and that is gone now.
    let at = err
        .find(&format!("{}/cargo-install", tmp.display()))
        .unwrap_or_else(|| panic!("no build in {}/cargo-install*: {err}", tmp.display()));
    let used: String = err[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '\'' && *c != '"')
        .collect();
    let used = Path::new(&used)
        .ancestors()
        .find(|p| p.parent() == Some(tmp.as_path()))
        .unwrap()
        .to_path_buf();
    assert!(!used.exists(), "cargo install left {}", used.display());
    // Nothing nccl-find had to warn about: the kept copy serves.
    assert!(!err.contains("warning: cudarc-nccl"), "{err}");
    let bin = root.join("bin/cudarc-nccl");
    let elf = nccl_find::internal::read_elf(&bin).unwrap();
    assert_eq!(elf.runpath, None);
    let rpath = elf.rpath.expect("a DT_RPATH");
    let entries: Vec<&str> = rpath.split(':').collect();
    assert_eq!(
        entries,
        kept_dirs(&w.library)
            .iter()
            .map(|d| d.to_str().unwrap())
            .collect::<Vec<_>>()
    );
    for e in &entries {
        assert!(
            !e.starts_with("/tmp/") && !e.contains("cargo-install"),
            "{rpath}"
        );
    }
    assert_loads(&run(&bin, &[]), w, "installed from git");
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(&repo);
}
