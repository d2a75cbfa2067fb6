//! `nccl-find` as a pkg-config drop-in for nccl: each question a build
//! system asks, with its exact answer, exit status and stderr, on fixture
//! trees. Also `--color` before and after a subcommand.

use std::path::{Path, PathBuf};
use std::process::Command;

const TARBALL: &str = "/opt/nccl_2.21.5-1+cuda12.4_x86_64";

fn tree(name: &str) -> PathBuf {
    std::fs::canonicalize(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/trees")
            .join(name),
    )
    .unwrap()
}

/// Runs nccl-find with a cleared environment plus `vars`; returns (exit
/// status, stdout, stderr).
fn run(args: &[&str], vars: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .args(args)
        .env_clear()
        .envs(vars.iter().copied())
        .output()
        .expect("run nccl-find");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// nccl-find on the tarball fixture (NCCL 2.21.5, shared and static).
fn tarball(args: &[&str]) -> (i32, String, String) {
    let root = tree("tarball");
    let mut all = vec!["--root", root.to_str().unwrap()];
    all.extend_from_slice(args);
    run(&all, &[("NCCL_HOME", TARBALL)])
}

/// Each case: the arguments, and the exit status, stdout and stderr expected.
type Cases<'a> = Vec<(Vec<&'a str>, i32, String, &'a str)>;

fn assert_answers(cases: Cases) {
    for (args, code, out, err) in cases {
        assert_eq!(tarball(&args), (code, out, err.to_string()), "{args:?}");
    }
}

#[test]
fn each_check_gets_pkg_config_s_answer() {
    let not_nccl = "nccl-find: No package 'foo' found (nccl-find answers for nccl only; ask pkg-config for other packages)\n";
    assert_answers(vec![
        // Existence: the exit status answers; quiet unless --print-errors.
        (vec!["nccl"], 0, String::new(), ""),
        (vec!["--exists", "nccl"], 0, String::new(), ""),
        (vec!["--exists"], 0, String::new(), ""),
        (vec!["--exists", "foo"], 1, String::new(), ""),
        (vec!["--exists", "nccl", "foo"], 1, String::new(), ""),
        (
            vec!["--print-errors", "--exists", "foo"],
            1,
            String::new(),
            not_nccl,
        ),
        (vec!["--cflags", "foo"], 1, String::new(), not_nccl),
        (
            vec!["--silence-errors", "--cflags", "foo"],
            1,
            String::new(),
            "",
        ),
        (
            vec!["--print-errors", "nccl != 2.21.5"],
            1,
            String::new(),
            "nccl-find: NCCL 2.21.5 was found, but 'nccl != 2.21.5' was asked for\n",
        ),
        // Malformed module lists are usage errors, said even when quiet.
        (
            vec!["--exists", "nccl >= 2.x"],
            2,
            String::new(),
            "nccl-find: '2.x' is not an NCCL version: write X, X.Y or X.Y.Z, e.g. 2.18\n",
        ),
        (
            vec!["--exists", "nccl >="],
            2,
            String::new(),
            "nccl-find: 'nccl >=' has no version after it: write e.g. 'nccl >= 2.18'\n",
        ),
        (
            vec![">=", "2.18"],
            2,
            String::new(),
            "nccl-find: '>=' with no package name before it: write e.g. 'nccl >= 2.18'\n",
        ),
    ]);
}

#[test]
fn each_question_gets_pkg_config_s_answer() {
    let p = format!("{}{TARBALL}", tree("tarball").display());
    assert_answers(vec![
        // Output, each on one line ending in a newline.
        (vec!["--modversion", "nccl"], 0, "2.21.5\n".into(), ""),
        (vec!["--cflags", "nccl"], 0, format!("-I{p}/include\n"), ""),
        (vec!["--cflags-only-I", "nccl"], 0, format!("-I{p}/include\n"), ""),
        (vec!["--cflags-only-other", "nccl"], 0, "\n".into(), ""),
        (vec!["--libs", "nccl"], 0, format!("-L{p}/lib -lnccl\n"), ""),
        (vec!["--libs-only-L", "nccl"], 0, format!("-L{p}/lib\n"), ""),
        (vec!["--libs-only-l", "nccl"], 0, "-lnccl\n".into(), ""),
        (vec!["--libs-only-other", "nccl"], 0, "\n".into(), ""),
        (
            vec!["--libs-only-l", "--libs-only-L", "nccl"],
            0,
            format!("-L{p}/lib -lnccl\n"),
            "",
        ),
        (
            vec!["--cflags", "--libs", "nccl"],
            0,
            format!("-I{p}/include -L{p}/lib -lnccl\n"),
            "",
        ),
        (vec!["--libs-only-L"], 0, format!("-L{p}/lib\n"), ""),
        // --static: this fixture has no libcudart_static.a, so no static
        // link is possible; pkg-config would answer with the shared flags
        // (CMake asks on every configure), the plain command refuses.
        (vec!["--static", "--libs", "nccl"], 0, format!("-L{p}/lib -lnccl\n"), ""),
        (vec!["--variable=prefix", "nccl"], 0, format!("{p}\n"), ""),
        (vec!["--variable", "prefix", "nccl"], 0, format!("{p}\n"), ""),
        (vec!["--variable=includedir", "nccl"], 0, format!("{p}/include\n"), ""),
        (vec!["--variable=libdir", "nccl"], 0, format!("{p}/lib\n"), ""),
        (
            vec!["--variable=pcfiledir", "nccl"],
            0,
            "\n".into(),
            "nccl-find: nccl has no variable 'pcfiledir' (it has prefix, includedir, libdir): printed an empty line, as pkg-config does\n",
        ),
        (
            vec!["--print-variables", "nccl"],
            0,
            "prefix\nincludedir\nlibdir\n".into(),
            "",
        ),
    ]);
}

#[test]
fn version_comparisons_as_pkg_config_reads_them() {
    for (args, code) in [
        (vec!["nccl >= 2.18"], 0),
        (vec!["nccl>=2.18"], 0),
        (vec!["nccl", ">=", "2.18"], 0),
        (vec!["nccl >= 2.22"], 1),
        (vec!["nccl = 2.21.5"], 0),
        (vec!["nccl == 2.21.5"], 0),
        (vec!["nccl = 2.21"], 1),
        (vec!["nccl < 3"], 0),
        (vec!["nccl <= 2.21.5"], 0),
        (vec!["nccl <= 2.21.4"], 1),
        (vec!["nccl > 2.21.5"], 1),
        (vec!["nccl > 2.21.4"], 0),
        (vec!["nccl != 2.20"], 0),
        (vec!["nccl != 2.21.5"], 1),
        (vec!["nccl >= 2.18, nccl < 2.21"], 1),
        (vec!["nccl >= 2.18, nccl < 2.22"], 0),
        (vec!["--atleast-version", "2.18", "nccl"], 0),
        (vec!["--atleast-version=2.22", "nccl"], 1),
        (vec!["--exact-version", "2.21.5", "nccl"], 0),
        (vec!["--exact-version", "2.21.4", "nccl"], 1),
        (vec!["--max-version", "2.21.5", "nccl"], 0),
        (vec!["--max-version", "2.20", "nccl"], 1),
        (vec!["--atleast-version", "2.18", "nccl < 2.21"], 1),
    ] {
        let mut a = vec!["--exists"];
        a.extend_from_slice(&args);
        assert_eq!(
            tarball(&a),
            (code, String::new(), String::new()),
            "{args:?}"
        );
    }
    // Why, with --print-errors; one line with --short-errors.
    let (code, out, err) = tarball(&["--print-errors", "--short-errors", "nccl >= 2.22"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.starts_with("nccl-find: NCCL_HOME=")
            && err.ends_with(
                "does not satisfy the requirement >=2.22.0: it needs NCCL 2.22.3 or newer.\n"
            )
            && err.lines().count() == 1,
        "{err}"
    );
    let (code, out, err) = tarball(&["--cflags", "nccl >= 2.22"]);
    assert_eq!((code, out.as_str()), (1, ""));
    // Where to look first; the cause and its fix last.
    assert!(
        err.starts_with(
            "nccl-find: `nccl-find --print` shows where it looked and what to do:\nNCCL_HOME="
        ) && err.ends_with(
            "does not satisfy the requirement >=2.22.0: it needs NCCL 2.22.3 or newer.\n"
        ) && err.lines().count() == 2,
        "{err}"
    );
    let (code, _, err) = tarball(&["--short-errors", "--cflags", "nccl >= 2.22"]);
    assert_eq!((code, err.lines().count()), (1, 1), "{err}");
}

/// Without a package name, --static means a static link, and says why not.
#[test]
fn plain_static_still_refuses_what_cannot_link_statically() {
    let (code, out, err) = tarball(&["--static", "--libs"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.starts_with(
            "nccl-find: `nccl-find --print` shows where it looked and what to do:\n\
             static NCCL needs the static CUDA runtime libcudart_static.a"
        ) && err.lines().count() == 2,
        "{err}"
    );
}

/// A wheel has no libnccl.so: the drop-in gives -L to a loader directory
/// (in the user's cache) whose libnccl.so links to the wheel's
/// libnccl.so.2, so that tools that look -l names up (CMake) find it. The
/// plain command keeps -l:libnccl.so.2.
#[test]
fn a_wheel_is_linked_through_a_loader_directory() {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("nccl-find-pc-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&cache).unwrap();
    let root = tree("gpu-image");
    let vars = [
        ("VIRTUAL_ENV", "/opt/torch/.venv"),
        ("XDG_CACHE_HOME", cache.to_str().unwrap()),
    ];
    let args = |extra: &[&'static str]| {
        let mut a = vec!["--root", root.to_str().unwrap()];
        a.extend_from_slice(extra);
        a
    };
    let lib = format!(
        "{}/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib",
        root.display()
    );
    let (code, out, err) = run(&args(&["--libs"]), &vars);
    assert_eq!(
        (code, out, err),
        (0, format!("-L{lib} -l:libnccl.so.2\n"), String::new())
    );
    let (code, out, err) = run(&args(&["--libs", "nccl"]), &vars);
    assert_eq!((code, err.as_str()), (0, ""));
    let loader = out
        .strip_prefix("-L")
        .and_then(|s| s.strip_suffix(" -lnccl\n"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        loader.starts_with(&format!("{}/nccl-find/loader/", cache.display())),
        "{loader}"
    );
    assert_eq!(
        std::fs::canonicalize(Path::new(loader).join("libnccl.so")).unwrap(),
        std::fs::canonicalize(format!("{lib}/libnccl.so.2")).unwrap()
    );
    // Its variables still name the wheel.
    let (_, out, _) = run(&args(&["--variable=libdir", "nccl"]), &vars);
    assert_eq!(out, format!("{lib}\n"));
    std::fs::remove_dir_all(&cache).unwrap();
}

/// `--color` is global: before or after the subcommand, with the same effect.
#[test]
fn color_before_or_after_the_subcommand() {
    let facts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/facts-healthy.json");
    let root = tree("dpkg");
    let doctor = |color: &[&str], after: bool| {
        let mut a: Vec<&str> = Vec::new();
        if !after {
            a.extend_from_slice(color);
        }
        a.extend([
            "doctor",
            "--root",
            root.to_str().unwrap(),
            "--host-facts",
            facts.to_str().unwrap(),
        ]);
        if after {
            a.extend_from_slice(color);
        }
        run(&a, &[("NCCL_DEBUG", "WARN")])
    };
    let plain = doctor(&[], false);
    assert_eq!(plain.0, 0, "{plain:?}");
    assert!(!plain.1.contains('\x1b'));
    for after in [false, true] {
        assert_eq!(
            doctor(&["--color", "never"], after),
            plain,
            "after: {after}"
        );
        assert_eq!(doctor(&["--color=never"], after), plain, "after: {after}");
        let (code, out, err) = doctor(&["--color", "always"], after);
        assert_eq!((code, err.as_str()), (0, ""));
        assert!(out.contains('\x1b'), "after: {after}: {out}");
        let (code, _, err) = doctor(&["--color", "sometimes"], after);
        assert_eq!(code, 2);
        assert!(
            err.contains("invalid value 'sometimes' for '--color <WHEN>'"),
            "{err}"
        );
    }
    // And on the report, after its flags.
    let (code, out, _) = run(
        &[
            "--root",
            root.to_str().unwrap(),
            "--print",
            "--color",
            "always",
        ],
        &[],
    );
    assert_eq!(code, 0);
    assert!(out.contains('\x1b'));
}
