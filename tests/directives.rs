//! Build-script output under hostile input. For arbitrary environment
//! values and directory names (line breaks, carriage returns, commas, text
//! that looks like a directive), every line the probe prints on stdout in
//! build-script mode is exactly one well-formed directive: `cargo:KEY=VALUE`
//! with a known key and no control character in the value.
//!
//! The probe runs in a child process (this test binary, re-run with
//! `NCCL_FIND_CHILD` set), so what is checked is the real stdout.

mod common;

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use proptest::prelude::*;

const KEYS: [&str; 16] = [
    "rustc-link-search",
    "rustc-link-lib",
    "rustc-link-arg",
    "rerun-if-env-changed",
    "rerun-if-changed",
    "include",
    "lib_dir",
    "run_lib_dir",
    "root",
    "version",
    "version_code",
    "cuda_version",
    "rustc-check-cfg",
    "rustc-cfg",
    "warning",
    "cuda_include",
];

/// The child: probe in build-script mode with the environment it was given
/// (the root comes in `NCCL_FIND_CHILD`).
#[test]
fn child() {
    let Some(root) = std::env::var_os("NCCL_FIND_CHILD") else {
        return;
    };
    let vars: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k != "NCCL_FIND_CHILD")
        .collect();
    println!("\n{BEGIN}");
    let _ = nccl_find::Config::new()
        .root(PathBuf::from(root))
        .target("x86_64-unknown-linux-gnu")
        .env_vars(vars)
        .cargo_metadata(true)
        .probe();
    println!("{END}");
}

const BEGIN: &str = "--- nccl-find child begins ---";
const END: &str = "--- nccl-find child ends ---";

/// Runs the child and returns the directive lines it printed (the test
/// harness's own lines are left out).
fn run_child(root: &Path, vars: &[(&str, OsString)]) -> Vec<Vec<u8>> {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env_clear()
        .env("NCCL_FIND_CHILD", root)
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What the child printed between its two marker lines.
    let lines: Vec<&[u8]> = out.stdout.split(|&b| b == b'\n').collect();
    let begin = lines
        .iter()
        .position(|l| *l == BEGIN.as_bytes())
        .expect("begin");
    let end = lines
        .iter()
        .position(|l| *l == END.as_bytes())
        .expect("end");
    lines[begin + 1..end].iter().map(|l| l.to_vec()).collect()
}

fn assert_directives(lines: &[Vec<u8>], ctx: &str) {
    assert!(!lines.is_empty(), "{ctx}: no output");
    for l in lines {
        let text = String::from_utf8_lossy(l);
        let rest = text
            .strip_prefix("cargo:")
            .unwrap_or_else(|| panic!("{ctx}: not a directive: {text:?}"));
        let (key, value) = rest
            .split_once('=')
            .unwrap_or_else(|| panic!("{ctx}: no `=`: {text:?}"));
        assert!(KEYS.contains(&key), "{ctx}: unknown key in {text:?}");
        assert!(
            !value.contains(['\r', '\n']),
            "{ctx}: a line break in {text:?}"
        );
        if key == "warning" {
            assert!(!value.chars().any(char::is_control), "{ctx}: {text:?}");
        }
        // Every path a directive names is the real one: the bytes are the
        // path's (no lossy conversion), and it is there.
        let path = match key {
            "rerun-if-changed" | "include" | "lib_dir" => Some(value),
            "rustc-link-search" => value.strip_prefix("native="),
            _ => None,
        };
        if let Some(p) = path {
            assert!(
                std::str::from_utf8(l).is_ok(),
                "{ctx}: a path that is not UTF-8: {text:?}"
            );
            assert!(
                std::path::Path::new(p).exists(),
                "{ctx}: {key} names {p:?}, which is not there"
            );
            assert_eq!(
                p.trim(),
                p,
                "{ctx}: {key} names {p:?}, which cargo would trim"
            );
        }
    }
}

/// A scratch root holding a copy of the tarball fixture at `/opt/<name>`.
struct Root(PathBuf);

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn root_with_install(tag: usize, name: &[u8]) -> Root {
    let root = std::env::temp_dir().join(format!("nccl-find-dir-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let opt = root.join("opt");
    std::fs::create_dir_all(&opt).unwrap();
    let src = common::trees().join("tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64");
    let dst = opt.join(OsString::from_vec(name.to_vec()));
    common::copy_tree(&src, &dst);
    Root(root)
}

/// Bytes for a path component: no `/` and no NUL, at least one byte, and
/// often a line break, a carriage return or a comma.
fn component() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            Just(b'\n'),
            Just(b'\r'),
            Just(b','),
            Just(b' '),
            Just(b'='),
            (1u8..=255).prop_filter("no slash", |b| *b != b'/'),
        ],
        1..12,
    )
    .prop_map(|mut v| {
        if v == b"." || v == b".." {
            v.push(b'x');
        }
        v
    })
}

/// Values for variables: paths and text that look like directives.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"/opt/x\ncargo:rustc-cfg=evil".to_vec()),
        Just(b"/opt/x\rcargo:rustc-link-arg=-Wl,--evil".to_vec()),
        proptest::collection::vec(1u8..=255, 0..24),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn every_stdout_line_is_one_directive(
        name in component(),
        explicit in any::<bool>(),
        cuda in value(),
        conda in value(),
        shadowed in value(),
        venv in value(),
        pkg in value(),
    ) {
        let root = root_with_install(0, &name);
        let mut home = b"/opt/".to_vec();
        home.extend_from_slice(&name);
        let mut vars: Vec<(&str, OsString)> = vec![
            ("CUDA_HOME", OsString::from_vec(cuda)),
            ("CONDA_PREFIX", OsString::from_vec(conda)),
            ("NCCL_ROOT", OsString::from_vec(shadowed)),
            ("VIRTUAL_ENV", OsString::from_vec(venv)),
            ("PKG_CONFIG_PATH", OsString::from_vec(pkg)),
            ("OUT_DIR", OsString::from("/tmp")),
        ];
        if explicit {
            vars.push(("NCCL_HOME", OsString::from_vec(home)));
        } else {
            vars.push(("LIBRARY_PATH", {
                let mut l = home.clone();
                l.extend_from_slice(b"/lib");
                OsString::from_vec(l)
            }));
        }
        let lines = run_child(&root.0, &vars);
        assert_directives(&lines, &format!("{:?} explicit={explicit}", String::from_utf8_lossy(&name)));
    }
}

#[test]
fn a_selected_install_under_a_line_break_is_refused_with_a_message() {
    let root = root_with_install(1, b"evil\ncargo:rustc-cfg=pwned");
    let out = nccl_find::Config::new()
        .root(&root.0)
        .target("x86_64-unknown-linux-gnu")
        .cargo_metadata(false)
        .env_vars([("NCCL_HOME", "/opt/evil\ncargo:rustc-cfg=pwned")])
        .probe()
        .unwrap_err();
    let msg = out.to_string();
    assert!(
        msg.contains("holds a line break, which no cargo directive can carry"),
        "{msg}"
    );
    assert!(msg.contains("/opt/evil\\ncargo:rustc-cfg=pwned"), "{msg}");
    // Found without a variable (through LIBRARY_PATH), it is skipped with a
    // warning, and the probe says what it skipped.
    let lines = run_child(
        &root.0,
        &[
            (
                "LIBRARY_PATH",
                OsString::from("/opt/evil\ncargo:rustc-cfg=pwned/lib"),
            ),
            ("OUT_DIR", OsString::from("/tmp")),
        ],
    );
    assert_directives(&lines, "skipped");
    let text: Vec<String> = lines
        .iter()
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    assert!(
        !text.iter().any(|l| l.starts_with("cargo:rustc-cfg=pwned")),
        "{text:?}"
    );
}

/// Paths a directive cannot carry exactly (not UTF-8; a name that begins or
/// ends with a blank, which cargo trims) are refused in a build script: an
/// error naming the path when a variable names the install, a skipped
/// install with a warning otherwise. The command still shows them.
#[test]
fn paths_a_directive_cannot_carry_are_refused_in_a_build_script() {
    for (tag, name, why) in [
        (10, &b"nccl-\xff-2.21"[..], "is not UTF-8"),
        (11, b"nccl ", "has a name that begins or ends with a blank"),
        (12, b" nccl", "has a name that begins or ends with a blank"),
        (13, b"nccl\t", "has a name that begins or ends with a blank"),
    ] {
        let root = root_with_install(tag, name);
        let mut home = b"/opt/".to_vec();
        home.extend_from_slice(name);
        let home = OsString::from_vec(home);
        let probe = |build_script: bool, vars: Vec<(&str, OsString)>| {
            nccl_find::Config::new()
                .root(&root.0)
                .target("x86_64-unknown-linux-gnu")
                .cargo_metadata(build_script)
                .env_vars(vars)
                .probe()
        };
        let e = probe(true, vec![("NCCL_HOME", home.clone())]).unwrap_err();
        let real = std::fs::canonicalize(&root.0)
            .unwrap()
            .join("opt")
            .join(std::ffi::OsStr::from_bytes(name));
        match e.kind() {
            nccl_find::ErrorKind::Explicit {
                problem: nccl_find::explain::Problem::NotCarried { path, why: w },
                ..
            } => {
                assert!(path.starts_with(&real), "{path:?}");
                assert_eq!(*w, why);
            }
            other => panic!("{name:?}: {other:?}"),
        }
        assert!(
            e.to_string().contains(&format!(
                "{why}, which a cargo directive cannot carry exactly"
            )),
            "{e}"
        );
        // Found through LIBRARY_PATH: skipped (a note), and named first in
        // the failure as the nearest miss.
        let mut lib = home.clone();
        lib.push("/lib");
        let e = probe(true, vec![("LIBRARY_PATH", lib.clone())]).unwrap_err();
        assert_eq!(*e.kind(), nccl_find::ErrorKind::NotFound, "{e}");
        assert!(
            e.report()
                .notes
                .iter()
                .any(|w| w.starts_with("an install was skipped: ") && w.contains(why)),
            "{:?}",
            e.report().notes
        );
        assert!(e.report().warnings.is_empty(), "{:?}", e.report().warnings);
        let head = e.headline();
        assert!(
            head.starts_with("no NCCL here can be used. The nearest: NCCL 2.21.5")
                && head.contains(&format!(
                    "{why}, which a cargo directive cannot carry exactly"
                )),
            "{head}"
        );
        // The command takes it, marked as one a build script refuses.
        let n = probe(false, vec![("NCCL_HOME", home)]).unwrap();
        assert_eq!(n.version.to_string(), "2.21.5");
        let refused = n.report.selected().unwrap().build_script_refuses();
        assert!(
            matches!(&refused, Some(nccl_find::explain::Problem::NotCarried { why: w, .. }) if *w == why),
            "{refused:?}"
        );
    }
}
