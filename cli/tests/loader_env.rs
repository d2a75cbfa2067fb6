//! `nccl-find --loader-env`: a private loader directory in the user's cache
//! (every name cudarc opens, linked to the selected library), and the
//! `LD_LIBRARY_PATH` that puts it first. Against the `gpu-image` fixture
//! (a PyTorch venv's wheel beside a dpkg install), with a fixed environment.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::scratch;

/// A fixture tree, as a copy in the target's temporary directory, made
/// once per run: a clone may lie below /tmp, where nccl-find rightly warns
/// that another user could swap the library in (scripts/test then builds in
/// its cache, outside /tmp).
fn tree(name: &str) -> PathBuf {
    static TREES: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let trees = TREES.get_or_init(|| {
        let dest = Path::new(env!("CARGO_TARGET_TMPDIR")).join("loader-env-trees");
        let _ = std::fs::remove_dir_all(&dest);
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/trees");
        let ok = Command::new("cp")
            .arg("-a")
            .arg(&src)
            .arg(&dest)
            .status()
            .expect("run cp");
        assert!(ok.success(), "cp -a {} {}", src.display(), dest.display());
        std::fs::canonicalize(dest).unwrap()
    });
    trees.join(name)
}

/// `nccl-find --loader-env` on the gpu-image tree with a venv selected.
fn run(cache: &Path, extra: &[(&str, &str)]) -> Output {
    let root = tree("gpu-image");
    Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .args([
            "--loader-env",
            "--target",
            "x86_64-unknown-linux-gnu",
            "--root",
        ])
        .arg(&root)
        .env_clear()
        .env("VIRTUAL_ENV", "/opt/torch/.venv")
        .env("XDG_CACHE_HOME", cache)
        .envs(extra.iter().copied())
        .output()
        .expect("run nccl-find")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn wheel_library() -> PathBuf {
    tree("gpu-image")
        .join("opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2")
}

/// The one directory under `loader/`.
fn the_dir(cache: &Path) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cache.join("nccl-find/loader"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.pop().unwrap()
}

#[test]
fn prints_ld_library_path_to_a_private_dir_of_links() {
    let cache = scratch("ok");
    let out = run(&cache, &[("LD_LIBRARY_PATH", "/old/lib::/other")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let dir = the_dir(&cache);
    assert_eq!(
        text(&out.stdout),
        format!(
            "LD_LIBRARY_PATH={}:/old/lib:/other\nexport LD_LIBRARY_PATH\n",
            dir.display()
        )
    );
    assert_eq!(text(&out.stderr), "");
    for d in [cache.join("nccl-find/loader"), dir.clone()] {
        let m = std::fs::symlink_metadata(&d).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o700, "{}", d.display());
    }
    for n in [
        "libnccl.so",
        "libnccl.so.2",
        "libnccl.so.12",
        "libnccl64_12.so",
    ] {
        assert_eq!(
            std::fs::read_link(dir.join(n)).unwrap(),
            wheel_library(),
            "{n}"
        );
    }
    // Again, with the first answer already on LD_LIBRARY_PATH: the same
    // directory, listed once.
    let first = text(&out.stdout);
    let value = first
        .lines()
        .next()
        .unwrap()
        .strip_prefix("LD_LIBRARY_PATH=")
        .unwrap();
    let again = run(&cache, &[("LD_LIBRARY_PATH", value)]);
    assert_eq!(text(&again.stdout), first);
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn refuses_planted_links_and_open_dirs() {
    // loader/ is a link to someone else's directory: refused, not followed.
    let cache = scratch("planted");
    let elsewhere = scratch("elsewhere");
    std::fs::create_dir_all(cache.join("nccl-find")).unwrap();
    std::fs::set_permissions(
        cache.join("nccl-find"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    std::os::unix::fs::symlink(&elsewhere, cache.join("nccl-find/loader")).unwrap();
    let out = run(&cache, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        text(&out.stderr),
        format!(
            "nccl-find: {} is not a directory (a link, or a file): remove it (nccl-find makes it again, private), \
             or set XDG_CACHE_HOME elsewhere\n",
            cache.join("nccl-find/loader").display()
        )
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

    // loader/ open to others: refused.
    std::fs::remove_file(cache.join("nccl-find/loader")).unwrap();
    std::fs::create_dir(cache.join("nccl-find/loader")).unwrap();
    std::fs::set_permissions(
        cache.join("nccl-find/loader"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    let out = run(&cache, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("loader has mode 777, open to others: remove it"),
        "{}",
        text(&out.stderr)
    );

    // A file planted in the directory under a name it makes: refused, kept.
    std::fs::set_permissions(
        cache.join("nccl-find/loader"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    assert_eq!(run(&cache, &[]).status.code(), Some(0));
    let dir = the_dir(&cache);
    std::fs::remove_file(dir.join("libnccl.so")).unwrap();
    std::fs::write(dir.join("libnccl.so"), "planted").unwrap();
    let out = run(&cache, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("libnccl.so is not a link that nccl-find made"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("libnccl.so")).unwrap(),
        "planted"
    );
    assert_eq!(
        std::fs::metadata(&dir).unwrap().uid(),
        std::fs::metadata(&cache).unwrap().uid()
    );
    let _ = std::fs::remove_dir_all(&cache);
    let _ = std::fs::remove_dir_all(&elsewhere);
}

#[test]
fn a_cache_path_that_cannot_be_carried_is_refused() {
    let base = scratch("newline");
    let cache = base.join("a\nb");
    let out = run(&cache, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr).starts_with(
            "nccl-find: set XDG_CACHE_HOME to a directory of your own, outside /tmp, that no one \
             else can write: the cache directory \""
        ),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stderr).contains("holds a control character"));
    assert!(!cache.exists());
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn nothing_found_says_so() {
    let cache = scratch("none");
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .args([
            "--loader-env",
            "--target",
            "x86_64-unknown-linux-gnu",
            "--root",
        ])
        .arg(tree("empty"))
        .env_clear()
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr).contains("`nccl-find --print` shows where it looked"),
        "{}",
        text(&out.stderr)
    );
    // The last line is the cause.
    assert_eq!(
        text(&out.stderr).lines().last(),
        Some("NCCL was not found: install it (pip install nvidia-nccl-cu12 in the environment you build in, or apt install libnccl2 libnccl-dev), or point NCCL_HOME at an install."),
        "{}",
        text(&out.stderr)
    );
    assert!(!cache.join("nccl-find").exists());
    let _ = std::fs::remove_dir_all(&cache);
}

/// A cache another user could write in (world-writable, theirs, or in the
/// temporary directory): the loader directory goes to `$HOME/.cache`
/// instead, and the user is told why; with no safe cache at all, nothing is
/// made anywhere (never a directory in /tmp, which would outlive the run
/// and could be made again by another user), and the message says what to
/// set. Nothing is made in the unsafe cache.
#[test]
fn an_unsafe_cache_root_falls_back_to_home_or_fails_and_says_so() {
    let is_root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    let tmp_before = temp_entries();
    for (tag, mode, owner) in [("open", 0o777, None), ("theirs", 0o755, Some(65534))] {
        if owner.is_some() && !is_root {
            eprintln!("skipped: making a directory of another user's needs root");
            continue;
        }
        let cache = scratch(tag);
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(mode)).unwrap();
        if let Some(uid) = owner {
            let ok = Command::new("chown")
                .arg(uid.to_string())
                .arg(&cache)
                .status()
                .unwrap();
            assert!(ok.success());
        }
        let why = match owner {
            None => format!("{} has mode 777: others can write in it", cache.display()),
            Some(uid) => format!(
                "{} belongs to user {uid}, not to you (user 0) or root",
                cache.display()
            ),
        };
        // HOME's cache is safe: it serves.
        let home = scratch(&format!("{tag}-home"));
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
        let out = run(&cache, &[("HOME", home.to_str().unwrap())]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert_eq!(
            err,
            format!(
                "nccl-find: note: {why} (the cache from XDG_CACHE_HOME), so another user could swap \
                 the library in: using {}/.cache instead\n",
                home.display()
            )
        );
        let out_text = text(&out.stdout);
        assert!(
            out_text.starts_with(&format!(
                "LD_LIBRARY_PATH={}/.cache/nccl-find/loader/",
                home.display()
            )),
            "{out_text}"
        );
        // No safe cache at all: exit 1, and what to set.
        let out = run(&cache, &[("HOME", cache.to_str().unwrap())]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(out.stdout, b"");
        assert_eq!(
            text(&out.stderr),
            format!(
                "nccl-find: set XDG_CACHE_HOME to a directory of your own, outside /tmp, that no \
                 one else can write: {why} (the cache from XDG_CACHE_HOME); {why} (the cache from \
                 HOME)\n"
            )
        );
        assert_eq!(
            std::fs::read_dir(&cache).unwrap().count(),
            0,
            "the unsafe cache was written to"
        );
        let _ = std::fs::remove_dir_all(&home);
        let _ = std::fs::remove_dir_all(&cache);
    }
    // A cache in the temporary directory, safe as the directory itself is.
    let home = scratch("tmp-home");
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let in_tmp = Path::new("/tmp").join(format!("nccl-find-test-cache-{}", std::process::id()));
    let out = run(&in_tmp, &[("HOME", home.to_str().unwrap())]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.starts_with(&format!(
            "nccl-find: note: {} lies in the temporary directory /tmp, which is cleaned, and where \
             another user could re-create it once it is gone (the cache from XDG_CACHE_HOME)",
            in_tmp.display()
        )),
        "{err}"
    );
    assert!(!in_tmp.exists());
    assert_eq!(temp_entries(), tmp_before, "a directory was left in /tmp");
    let _ = std::fs::remove_dir_all(&home);
}

/// The entries of the temporary directory named as earlier versions named
/// their private fallback (`nccl-find-<uid>-<pid>-<stamp>`).
fn temp_entries() -> Vec<String> {
    let uid = std::fs::metadata("/proc/self").unwrap().uid();
    let prefix = format!("nccl-find-{uid}-");
    let mut out: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    out.sort();
    out
}

/// An `LD_LIBRARY_PATH` entry that is not UTF-8 keeps its bytes.
#[test]
fn ld_library_path_entries_keep_their_bytes() {
    use std::os::unix::ffi::OsStrExt;
    let cache = scratch("bytes");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .args([
            "--loader-env",
            "--target",
            "x86_64-unknown-linux-gnu",
            "--root",
        ])
        .arg(tree("gpu-image"))
        .env_clear()
        .env("VIRTUAL_ENV", "/opt/torch/.venv")
        .env("XDG_CACHE_HOME", &cache)
        .env(
            "LD_LIBRARY_PATH",
            std::ffi::OsStr::from_bytes(b"/opt/\xff\xfe/lib:/usr/lib"),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let first = out.stdout.split(|&b| b == b'\n').next().unwrap();
    assert!(
        first.ends_with(b":/opt/\xff\xfe/lib:/usr/lib'"),
        "{:?}",
        text(first)
    );
    let _ = std::fs::remove_dir_all(&cache);
}

/// Builds that make the same loader directory at once all succeed: 10
/// rounds of 24 processes, each round on a fresh cache.
#[test]
fn many_at_once_all_succeed() {
    let cache = scratch("race");
    for round in 0..10 {
        let c = cache.join(round.to_string());
        std::fs::create_dir_all(&c).unwrap();
        std::fs::set_permissions(&c, std::fs::Permissions::from_mode(0o700)).unwrap();
        let kids: Vec<_> = (0..24)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_nccl-find"))
                    .args([
                        "--loader-env",
                        "--target",
                        "x86_64-unknown-linux-gnu",
                        "--root",
                    ])
                    .arg(tree("gpu-image"))
                    .env_clear()
                    .env("VIRTUAL_ENV", "/opt/torch/.venv")
                    .env("XDG_CACHE_HOME", &c)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outs: Vec<Output> = kids
            .into_iter()
            .map(|k| k.wait_with_output().unwrap())
            .collect();
        for o in &outs {
            assert_eq!(
                o.status.code(),
                Some(0),
                "round {round}: {}",
                text(&o.stderr)
            );
            assert_eq!(o.stdout, outs[0].stdout);
        }
        // One directory, whole, and no temporary left behind.
        let dir = the_dir(&c);
        assert!(dir.join(".nccl-find-loader-dir").is_file());
        let names: Vec<String> = std::fs::read_dir(c.join("nccl-find/loader"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }
    let _ = std::fs::remove_dir_all(&cache);
}
