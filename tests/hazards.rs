//! Bad inputs: filesystem hazards and environment mistakes. Each must end in
//! a clear message that names the thing, within a bounded time, never a
//! panic or a hang.

mod common;

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nccl_find::explain::{Problem, Status};
use nccl_find::{Config, Error, ErrorKind, Nccl};

fn fixture(name: &str) -> PathBuf {
    common::trees().join(name)
}

const TARBALL: &str = "opt/nccl_2.21.5-1+cuda12.4_x86_64";

/// A scratch copy of a fixture install at `<root>/opt/n`.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let root = std::env::temp_dir().join(format!("nccl-find-hz-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("opt")).unwrap();
        let ok = std::process::Command::new("cp")
            .arg("-a")
            .arg(fixture("tarball").join(TARBALL))
            .arg(root.join("opt/n"))
            .status()
            .unwrap()
            .success();
        assert!(ok);
        Scratch(root)
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chmod")
            .arg("-R")
            .arg("u+rwx")
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn probe_in(root: &Path, vars: &[(&str, OsString)]) -> (Result<Nccl, Error>, Duration) {
    let start = Instant::now();
    let r = Config::new()
        .root(root)
        .target("x86_64-unknown-linux-gnu")
        .cargo_metadata(false)
        .env_vars(vars.iter().map(|(k, v)| (OsString::from(k), v.clone())))
        .probe();
    (r, start.elapsed())
}

fn home(v: &str) -> Vec<(&'static str, OsString)> {
    vec![("NCCL_HOME", OsString::from(v))]
}

/// The explicit-variable problem, after checking the probe was quick.
fn explicit_problem(r: (Result<Nccl, Error>, Duration)) -> (Problem, String) {
    assert!(r.1 < Duration::from_secs(5), "took {:?}", r.1);
    let e = r.0.unwrap_err();
    match e.kind() {
        ErrorKind::Explicit { problem, .. } => (problem.clone(), e.to_string()),
        other => panic!("{other:?}\n{e}"),
    }
}

#[test]
fn symlink_loops() {
    let s = Scratch::new("loop");
    let lib = s.p("opt/n/lib");
    for f in ["libnccl.so", "libnccl.so.2"] {
        std::fs::remove_file(lib.join(f)).unwrap();
    }
    symlink("libnccl.so.2", lib.join("libnccl.so")).unwrap();
    symlink("libnccl.so", lib.join("libnccl.so.2")).unwrap();
    std::fs::remove_file(lib.join("libnccl.so.2.21.5")).unwrap();
    let (p, msg) = explicit_problem(probe_in(&s.0, &home("/opt/n")));
    assert_eq!(
        p,
        Problem::Unreadable {
            path: lib.join("libnccl.so"),
            error: "symbolic links loop".into()
        }
    );
    assert!(
        msg.contains("libnccl.so cannot be read (symbolic links loop)"),
        "{msg}"
    );
    // NCCL_HOME itself a loop (absolute targets are taken from the root).
    symlink("/loop-b", s.p("loop-a")).unwrap();
    symlink("/loop-a", s.p("loop-b")).unwrap();
    let (p, _) = explicit_problem(probe_in(&s.0, &home("/loop-a")));
    assert!(
        matches!(p, Problem::Unreadable { ref error, .. } if error == "symbolic links loop"),
        "{p:?}"
    );
}

#[test]
fn dangling_symlinks() {
    let s = Scratch::new("dangling");
    symlink("/nowhere", s.p("opt/gone")).unwrap();
    let (p, _) = explicit_problem(probe_in(&s.0, &home("/opt/gone")));
    assert_eq!(
        p,
        Problem::BrokenSymlink {
            link: s.p("opt/gone"),
            target: s.p("nowhere")
        }
    );
    let inc = s.p("opt/n/include/nccl.h");
    std::fs::remove_file(&inc).unwrap();
    symlink("nccl-2.21.5.h", &inc).unwrap();
    let (p, msg) = explicit_problem(probe_in(&s.0, &home("/opt/n")));
    assert_eq!(
        p,
        Problem::BrokenSymlink {
            link: inc.clone(),
            target: s.p("opt/n/include/nccl-2.21.5.h")
        }
    );
    assert!(msg.contains("is a symbolic link to"), "{msg}");
}

#[test]
fn bad_headers() {
    let s = Scratch::new("headers");
    let h = s.p("opt/n/include/nccl.h");
    let good = std::fs::read(&h).unwrap();
    let mut cases: Vec<(Vec<u8>, &str)> = vec![
        (Vec::new(), "it is empty"),
        (
            b"#define NCCL_MAJOR 2\0\0\x01binary".to_vec(),
            "it is a binary file, not a C header",
        ),
        (
            vec![0xff, 0xfe, 0x80, 0x81, b'\n'],
            "it defines no NCCL_MAJOR, NCCL_MINOR or NCCL_PATCH",
        ),
    ];
    for (bytes, why) in cases.drain(..) {
        std::fs::write(&h, &bytes).unwrap();
        let (p, _) = explicit_problem(probe_in(&s.0, &home("/opt/n")));
        assert!(
            matches!(&p, Problem::BadHeader { why: w, .. } if w.starts_with(why)),
            "{why}: {p:?}"
        );
    }
    // 100 MB: refused by its size, without being read.
    let f = std::fs::File::create(&h).unwrap();
    f.set_len(100 << 20).unwrap();
    let (p, _) = explicit_problem(probe_in(&s.0, &home("/opt/n")));
    assert!(
        matches!(&p, Problem::BadHeader { why, .. } if why.starts_with("it is 104857600 bytes")),
        "{p:?}"
    );
    // Non-UTF-8 bytes in a comment do not matter.
    let mut latin1 = b"/* Copyright \xa9 somebody \xe9t\xe9 */\n".to_vec();
    latin1.extend_from_slice(&good);
    std::fs::write(&h, latin1).unwrap();
    let n = probe_in(&s.0, &home("/opt/n")).0.unwrap();
    assert_eq!(n.version.to_string(), "2.21.5");
}

#[test]
fn bad_libraries() {
    let s = Scratch::new("libs");
    let lib = s.p("opt/n/lib/libnccl.so.2.21.5");
    let bytes = std::fs::read(&lib).unwrap();
    std::fs::write(&lib, &bytes[..200]).unwrap();
    let (p, _) = explicit_problem(probe_in(&s.0, &home("/opt/n")));
    assert!(
        matches!(&p, Problem::BadLibrary { why, .. } if why.ends_with("the file is truncated")),
        "{p:?}"
    );
    std::fs::write(&lib, b"\x7fELF").unwrap();
    let (p, _) = explicit_problem(probe_in(&s.0, &home("/opt/n")));
    assert!(
        matches!(&p, Problem::BadLibrary { why, .. } if why == "it is 4 bytes long, too short to be a library"),
        "{p:?}"
    );
}

#[test]
fn paths_with_spaces_and_non_utf8_bytes() {
    let s = Scratch::new("names");
    let odd =
        s.0.join(OsString::from_vec(b"opt/with space \xff".to_vec()));
    std::fs::rename(s.p("opt/n"), &odd).unwrap();
    let value = OsString::from_vec(b"/opt/with space \xff".to_vec());
    let n = probe_in(&s.0, &[("NCCL_HOME", value)]).0.unwrap();
    assert_eq!(n.version.to_string(), "2.21.5");
    assert_eq!(n.lib_dir, odd.join("lib"));
    // The report prints its real bytes, escaped, and no character that
    // would name another file.
    #[cfg(feature = "command")]
    {
        let text = nccl_find::internal::report(&n.report, None, &n.cargo_directives(), None);
        assert!(text.contains("NCCL_HOME = /opt/with space \\xff"), "{text}");
        assert!(!text.contains('\u{fffd}'), "{text}");
    }
}

#[test]
fn wheels_with_half_an_install() {
    let s = Scratch::new("halfwheel");
    let sp = s.p("venv/lib/python3.11/site-packages");
    std::fs::create_dir_all(sp.join("nvidia/nccl/include")).unwrap();
    std::fs::copy(
        s.p("opt/n/include/nccl.h"),
        sp.join("nvidia/nccl/include/nccl.h"),
    )
    .unwrap();
    std::fs::create_dir_all(sp.join("nvidia_nccl_cu12-2.21.5.dist-info")).unwrap();
    let venv = [("VIRTUAL_ENV", OsString::from("/venv"))];
    let e = probe_in(&s.0, &venv).0.unwrap_err();
    assert_eq!(e.kind(), &ErrorKind::NotFound);
    assert!(
        matches!(
            e.report().candidates[0].problem(),
            Some(Problem::NoLibrary { .. })
        ),
        "{e}"
    );
    // And the reverse: the library without the header.
    std::fs::remove_dir_all(sp.join("nvidia/nccl/include")).unwrap();
    std::fs::create_dir_all(sp.join("nvidia/nccl/lib")).unwrap();
    std::fs::copy(
        s.p("opt/n/lib/libnccl.so.2.21.5"),
        sp.join("nvidia/nccl/lib/libnccl.so.2"),
    )
    .unwrap();
    let e = probe_in(&s.0, &venv).0.unwrap_err();
    match e.report().candidates[0].problem() {
        Some(Problem::NoHeader { hint, .. }) => {
            assert_eq!(
                hint,
                "The wheel is incomplete (its include/ was removed, as slimmed images do). \
                Reinstall it: pip install --force-reinstall --no-deps nvidia-nccl-cu12==2.21.5"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unreadable_directory_as_an_ordinary_user() {
    // Root reads everything; drop to `nobody` to see what users see.
    let s = Scratch::new("unreadable");
    let lib = s.p("opt/n/lib");
    let mut perm = std::fs::metadata(&lib).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o000);
    std::fs::set_permissions(&lib, perm).unwrap();
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/debug/nccl-find");
    if !bin.exists() {
        eprintln!(
            "skipped: {} is not built (cargo test --workspace builds it)",
            bin.display()
        );
        return;
    }
    let root = is_root();
    let mut cmd = if root {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin);
        c
    } else {
        std::process::Command::new(&bin)
    };
    let out = cmd
        .args(["--root"])
        .arg(&s.0)
        .env_clear()
        .env("NCCL_HOME", "/opt/n")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} cannot be read (Permission denied",
            lib.display()
        )),
        "{stderr}"
    );
}

/// Whether this process runs as root (uid 0), read from /proc.
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .is_some_and(|l| l.split_whitespace().nth(1) == Some("0"))
}

#[test]
fn environment_mistakes() {
    let s = Scratch::new("env");
    // Empty: treated as unset, and shown so.
    let e = probe_in(&s.0, &home("")).0.unwrap_err();
    assert_eq!(e.kind(), &ErrorKind::NotFound);
    let read = e
        .report()
        .env
        .iter()
        .find(|r| r.name == "NCCL_HOME")
        .unwrap();
    assert_eq!(
        read.to_string(),
        "NCCL_HOME = \"\" (empty, treated as unset)"
    );
    // Trailing slashes.
    assert_eq!(
        probe_in(&s.0, &home("/opt/n///"))
            .0
            .unwrap()
            .version
            .to_string(),
        "2.21.5"
    );
    // ~ with HOME.
    let vars = vec![
        ("NCCL_HOME", OsString::from("~/n")),
        ("HOME", OsString::from("/opt")),
    ];
    assert_eq!(
        probe_in(&s.0, &vars).0.unwrap().version.to_string(),
        "2.21.5"
    );
    // A relative path: taken from the current directory, with a warning.
    let e = probe_in(&s.0, &home("some/relative/dir")).0.unwrap_err();
    assert!(e
        .report()
        .warnings
        .iter()
        .any(|w| w.starts_with("NCCL_HOME=some/relative/dir is a relative path")));
    // A file where a directory belongs.
    let (p, _) = explicit_problem(probe_in(&s.0, &home("/opt/n/include/nccl.h")));
    assert!(matches!(p, Problem::NotADirectory { .. }));
    // Conflicting variables: NCCL_HOME wins over NCCL_ROOT, and says so.
    let other = Scratch::new("env-other");
    std::fs::rename(other.p("opt/n"), s.p("opt/m")).unwrap();
    let vars = vec![
        ("NCCL_HOME", OsString::from("/opt/n")),
        ("NCCL_ROOT", OsString::from("/opt/m")),
    ];
    let n = probe_in(&s.0, &vars).0.unwrap();
    assert_eq!(n.origin.variable.as_deref(), Some("NCCL_HOME=/opt/n"));
    assert_eq!(
        n.report.candidates[1].status,
        Status::Lost(
            "NCCL_HOME=/opt/n was set, and an explicitly named install wins outright".into()
        )
    );
    // A shadowed variable that points nowhere is reported, not silent.
    let vars = vec![
        ("NCCL_HOME", OsString::from("/opt/n")),
        ("NCCL_DIR", OsString::from("/nope")),
    ];
    let n = probe_in(&s.0, &vars).0.unwrap();
    assert!(
        n.report
            .warnings
            .iter()
            .any(|w| w.starts_with("NCCL_DIR=/nope is set but shadowed by NCCL_HOME=/opt/n")),
        "{:?}",
        n.report.warnings
    );
}

#[test]
fn sixteen_probes_at_once_agree_and_leave_nothing_behind() {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/debug/nccl-find");
    if !bin.exists() {
        eprintln!(
            "skipped: {} is not built (cargo test --workspace builds it)",
            bin.display()
        );
        return;
    }
    let tmp = std::env::temp_dir().join(format!("nccl-find-hz-tmp-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let kids: Vec<_> = (0..16)
        .map(|_| {
            std::process::Command::new(&bin)
                .args(["--json", "--root"])
                .arg(fixture("gpu-image"))
                .env_clear()
                .env("VIRTUAL_ENV", "/opt/torch/.venv")
                .env("TMPDIR", &tmp)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<String> = kids
        .into_iter()
        .map(|k| String::from_utf8(k.wait_with_output().unwrap().stdout).unwrap())
        .collect();
    assert!(outs[0].contains("\"version\": \"2.28.9\""));
    assert!(outs.iter().all(|o| o == &outs[0]), "the 16 answers differ");
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "temp files left behind"
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// Runs the built `nccl-find` as `nobody` (when we are root) on a scratch
/// tree with `NCCL_HOME=/opt/n`; `None` when the binary is not built.
fn run_as_ordinary_user(s: &Scratch) -> Option<(Option<i32>, String)> {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/debug/nccl-find");
    if !bin.exists() {
        eprintln!(
            "skipped: {} is not built (cargo test --workspace builds it)",
            bin.display()
        );
        return None;
    }
    let mut cmd = if is_root() {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin);
        c
    } else {
        std::process::Command::new(&bin)
    };
    let out = cmd
        .arg("--root")
        .arg(&s.0)
        .env_clear()
        .env("NCCL_HOME", "/opt/n")
        .output()
        .unwrap();
    Some((
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn chmod(p: &Path, mode: u32) {
    let mut perm = std::fs::metadata(p).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, mode);
    std::fs::set_permissions(p, perm).unwrap();
}

#[test]
fn permission_problems_say_permission() {
    // A library this user may not read: not "reinstall NCCL".
    let s = Scratch::new("unreadable-lib");
    let lib = s.p("opt/n/lib/libnccl.so.2.21.5");
    chmod(&lib, 0o000);
    let Some((code, stderr)) = run_as_ordinary_user(&s) else {
        return;
    };
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} cannot be read (Permission denied (os error 13)): this user lacks the permission. \
             Make it readable (chmod a+r for a file, a+rx for a directory, or ask its owner)",
            lib.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("Reinstall"), "{stderr}");
    // An include dir that can be listed but not entered.
    let s = Scratch::new("unenterable-inc");
    let inc = s.p("opt/n/include");
    chmod(&inc, 0o644);
    let Some((code, stderr)) = run_as_ordinary_user(&s) else {
        return;
    };
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} cannot be read (permission denied: the directory cannot be entered (no execute \
             permission), so nccl.h in it cannot be opened)",
            inc.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("no nccl.h beside"), "{stderr}");
}

#[test]
fn absolute_links_inside_a_root_stay_inside_it() {
    // A sysroot whose /opt/n is an absolute link to /opt/real (inside the
    // root), and whose /opt/evil points at a real NCCL outside the root.
    let s = Scratch::new("root-escape");
    std::fs::rename(s.p("opt/n"), s.p("opt/real")).unwrap();
    symlink("/opt/real", s.p("opt/n")).unwrap();
    let n = probe_in(&s.0, &home("/opt/n"))
        .0
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(n.library_real, s.p("opt/real/lib/libnccl.so.2.21.5"));
    // The outside install is a real one: a copy of the fixture elsewhere.
    let outside = Scratch::new("root-escape-outside");
    symlink(outside.p("opt/n"), s.p("opt/evil")).unwrap();
    let (p, _) = explicit_problem(probe_in(&s.0, &home("/opt/evil")));
    // The link's target is taken from the root, where there is nothing.
    assert_eq!(
        p,
        Problem::BrokenSymlink {
            link: s.p("opt/evil"),
            target: s.0.join(outside.p("opt/n").strip_prefix("/").unwrap()),
        }
    );
    // A library link pointing outside the root is not followed out either.
    let lib = s.p("opt/real/lib");
    std::fs::remove_file(lib.join("libnccl.so")).unwrap();
    symlink(
        outside.p("opt/n/lib/libnccl.so.2.21.5"),
        lib.join("libnccl.so"),
    )
    .unwrap();
    let (p, _) = explicit_problem(probe_in(&s.0, &home("/opt/n")));
    assert!(
        matches!(&p, Problem::BrokenSymlink { link, .. } if *link == lib.join("libnccl.so")),
        "{p:?}"
    );
}
