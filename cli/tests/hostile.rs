//! Hostile or odd input to the command: each is a usage error, a clear
//! refusal or exact output, never a panic. No GPU and no wheel needed.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn nccl_find() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
    c.env_clear().env("PATH", "/usr/bin:/bin");
    c
}

fn text(o: &Output) -> (Option<i32>, String, String) {
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn tarball() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/trees/tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64")
}

const TARGET: [&str; 2] = ["--target", "x86_64-unknown-linux-gnu"];

/// `smoke` bounds: each a usage error (exit 2) naming the flag, never a
/// panic or an allocation abort. Checked before any library is loaded.
#[test]
fn smoke_bounds_are_usage_errors() {
    let any_file = env!("CARGO_BIN_EXE_nccl-find");
    for (args, says) in [
        (
            vec!["--timeout", "1e20"],
            "--timeout 100000000000000000000: at most 31536000 seconds",
        ),
        (
            vec![
                "--world-size",
                "10000000000",
                "--rank",
                "0",
                "--init",
                "tcp://127.0.0.1:1",
            ],
            "a world size of 10000000000 is more than the 1048576 processes",
        ),
        (
            vec![
                "--world-size",
                "2",
                "--rank",
                "0",
                "--init",
                "tcp://127.0.0.1:1",
                "--token",
                "a\nb",
            ],
            "--token: the token holds a line break",
        ),
        (
            vec!["--min-busbw=0"],
            "--min-busbw 0 is not a bandwidth: pass a positive number of GB/s",
        ),
        (
            vec!["--min-busbw=-3"],
            "--min-busbw -3 is not a bandwidth: pass a positive number of GB/s",
        ),
        (
            vec!["--min-busbw", "NaN"],
            "--min-busbw NaN is not a bandwidth: pass a positive number of GB/s",
        ),
        (
            vec!["--ops", "all-reduce,alltoall"],
            "\"alltoall\" is not a collective: all-reduce, all-gather, reduce-scatter, broadcast, reduce, \
             all-to-all, gather, scatter, send-recv, or all",
        ),
        (
            vec!["--redops", "sum,mean"],
            "\"mean\" is not a reduction: sum, prod, max, min, avg, or all",
        ),
        (
            vec!["--dtypes", "f8"],
            "\"f8\" is not a datatype: f32, f16, bf16, f64, i32, i64, u8, i8, u32, u64, f8e4m3, \
             f8e5m2, or all",
        ),
    ] {
        let o = text(
            &nccl_find()
                .args(["smoke", "--lib", any_file])
                .args(&args)
                .output()
                .unwrap(),
        );
        assert_eq!(o.0, Some(2), "{args:?}: {o:?}");
        assert!(o.2.contains(says), "{args:?}: {o:?}");
        assert!(!o.2.contains("panicked"), "{args:?}: {o:?}");
    }
}

/// A pipe whose reading end is already closed: every write to it fails.
fn closed_pipe() -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe() fills two descriptors, which are then owned here.
    let (r, w) = unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    drop(r);
    w
}

/// `nccl-find --json | head -c 20`: the reader goes away; the command ends
/// quietly, by SIGPIPE as other Unix tools do, without a panic.
#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/trees/gpu-image");
    for args in [
        vec!["--json", "--root", root.to_str().unwrap()],
        vec!["--print", "--root", root.to_str().unwrap()],
        vec!["doctor", "--json"],
    ] {
        let o = nccl_find()
            .args(TARGET)
            .args(&args)
            .stdout(Stdio::from(closed_pipe()))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "{args:?}: {o:?}");
        assert_eq!(String::from_utf8_lossy(&o.stderr), "", "{args:?}");
    }
}

/// An install under a path that is not UTF-8 and holds a space, a glob, a
/// quote and `$(...)`: `--env` and `--cflags --libs` give that exact path
/// back through a shell's `eval`.
#[test]
fn odd_paths_come_back_byte_for_byte_through_a_shell() {
    let base = std::env::temp_dir().join(format!("nccl-find-odd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let home = base.join(std::ffi::OsStr::from_bytes(b"nf-\xff x*'$(id)"));
    let st = Command::new("cp")
        .arg("-r")
        .arg(tarball())
        .arg(&home)
        .status()
        .unwrap();
    assert!(st.success());
    let me = env!("CARGO_BIN_EXE_nccl-find");
    let script = format!(
        r#"eval "$('{me}' --env --target x86_64-unknown-linux-gnu)" || exit 10
test -f "$NCCL_INCLUDE_DIR/nccl.h" || exit 11
test -d "$NCCL_LIB_DIR" || exit 12
test "$NCCL_HOME" = "$WANT" || exit 13
eval "set -- $('{me}' --cflags --libs --target x86_64-unknown-linux-gnu)" || exit 14
test -f "${{1#-I}}/nccl.h" || exit 15
test "${{2#-L}}" = "$WANT/lib" || exit 16
test "$3" = -lnccl || exit 17"#
    );
    let o = Command::new("sh")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("NCCL_HOME", &home)
        .env("WANT", &home)
        .args(["-c", &script])
        .output()
        .unwrap();
    // A Makefile would expand `$(id)`: `--env` says so, and how to read it.
    let env = Command::new(me)
        .args(["--env", "--target", "x86_64-unknown-linux-gnu"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("NCCL_HOME", &home)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&base).unwrap();
    assert_eq!(o.status.code(), Some(0), "{:?}", text(&o));
    let err = String::from_utf8_lossy(&env.stderr);
    assert!(
        err.contains(
            "warning: a path exported holds `$` or a backtick: make expands a variable it \
             imports (a `$(shell …)` in it would run), so in a Makefile read it as \
             $(value NCCL_HOME)"
        ),
        "{err}"
    );
}

/// A line break in the path cannot be escaped for a compiler command line:
/// refused (exit 1) with a message naming it, not printed broken.
#[test]
fn a_line_break_in_a_path_is_refused_for_flags() {
    let base = std::env::temp_dir().join(format!("nccl-find-nl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let home = base.join("a\nb");
    assert!(Command::new("cp")
        .arg("-r")
        .arg(tarball())
        .arg(&home)
        .status()
        .unwrap()
        .success());
    let o = text(
        &nccl_find()
            .env("NCCL_HOME", &home)
            .args(["--cflags"])
            .args(TARGET)
            .output()
            .unwrap(),
    );
    std::fs::remove_dir_all(&base).unwrap();
    // The probe may refuse such a path itself; either way: exit 1, a
    // message, nothing on stdout.
    assert_eq!(o.0, Some(1), "{o:?}");
    assert_eq!(o.1, "", "{o:?}");
    assert!(o.2.contains("line break"), "{o:?}");
}

/// A target NCCL is not built for, and a malformed version: usage errors.
#[test]
fn a_bad_target_or_version_is_a_usage_error() {
    for (args, says) in [
        (
            vec!["--print", "--target", "wasm32-unknown-unknown"],
            "--target wasm32-unknown-unknown: NCCL is not built for wasm32",
        ),
        (
            vec!["--print", "--target", "x86_64-apple-darwin"],
            "NCCL is built for Linux only",
        ),
        (vec!["--env", "--target", "linux"], "not a target triple"),
        (
            vec!["--atleast-version", "2.x.1"],
            "the version requirement \"2.x.1\" is not valid",
        ),
    ] {
        let o = text(
            &nccl_find()
                .env("NCCL_HOME", tarball())
                .args(&args)
                .output()
                .unwrap(),
        );
        assert_eq!(o.0, Some(2), "{args:?}: {o:?}");
        assert!(o.2.contains(says), "{args:?}: {o:?}");
    }
}

/// `doctor --host-facts` with a FIFO, a directory, a huge file or non-UTF-8:
/// exit 2 at once with one line naming the file and the reason; never a
/// hang on the FIFO, never a read of the whole huge file.
#[test]
fn host_facts_that_are_not_a_facts_file_are_refused_at_once() {
    let d = std::env::temp_dir().join(format!("nccl-find-facts-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let fifo = d.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let big = d.join("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let latin1 = d.join("latin1.json");
    std::fs::write(&latin1, b"{\"env\": \"\xe9\"}").unwrap();
    let not_regular = "it is not a regular file; give the path of a JSON file";
    for (file, says) in [
        (&fifo, not_regular),
        (&d, not_regular),
        (
            &big,
            "it is larger than 1048576 bytes, which no facts file is; give a JSON file of host \
             facts (the \"facts\" object `doctor --json` prints)",
        ),
        (&latin1, "it is not UTF-8 text; give a JSON file"),
    ] {
        let t = std::time::Instant::now();
        let o = nccl_find()
            .args(["doctor", "--host-facts"])
            .arg(file)
            .args(["--root", tarball().to_str().unwrap()])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(t.elapsed() < std::time::Duration::from_secs(10), "{file:?}");
        assert_eq!(
            text(&o),
            (
                Some(2),
                String::new(),
                format!(
                    "nccl-find: cannot read host facts from {}: {says}\n",
                    file.display()
                )
            )
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}
