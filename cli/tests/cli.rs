//! The `nccl-find` command against fixture trees, with a fixed environment.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tree(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/trees")
        .join(name)
}

fn run(args: &[&str], vars: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .args(args)
        .env_clear()
        .envs(vars.iter().copied())
        .output()
        .expect("run nccl-find")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn print_shows_the_choice_the_loser_and_the_variables() {
    let root = tree("gpu-image");
    let out = run(
        &[
            "--print",
            "--root",
            root.to_str().unwrap(),
            "--target",
            "x86_64-unknown-linux-gnu",
        ],
        &[("VIRTUAL_ENV", "/opt/torch/.venv")],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let sp = "/opt/torch/.venv/lib/python3.12/site-packages";
    let expected_head = format!(
        "nccl-find {} — target x86_64-unknown-linux-gnu\n\n\
         Selected: NCCL 2.28.9 (CUDA 13.0) at {sp}/nvidia/nccl — pip wheel in {sp} (VIRTUAL_ENV) [pip nvidia-nccl-cu13 2.28.9]\n",
        env!("CARGO_PKG_VERSION"),
    );
    assert!(
        stdout.starts_with(&expected_head),
        "got:\n{stdout}\nexpected start:\n{expected_head}"
    );
    for needle in [
        &format!("  header   {sp}/nvidia/nccl/include/nccl.h (NCCL 2.28.9, code 22809)\n"),
        &format!("  library  {sp}/nvidia/nccl/lib/libnccl.so.2\n"),
        "           soname libnccl.so.2; library says NCCL 2.28.9+cuda13.0\n",
        "           no libnccl.so here: link libnccl.so.2 by file name\n",
        "  static   none\n",
        "\nOther installs (1):\n  [lost] NCCL 2.28.3 (CUDA 13.0) at /usr/lib/x86_64-linux-gnu — ",
        "      pip comes earlier in the search order than system\n",
        "      conflict: this is NCCL 2.28.3, the selected install is NCCL 2.28.9",
        "  VIRTUAL_ENV = /opt/torch/.venv\n",
        "  NCCL_HOME unset\n",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

#[test]
fn nothing_found_exits_1_and_says_how_to_install() {
    let root = tree("empty");
    let out = run(&["--root", root.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("Selected: nothing.\nNCCL was not found: install it (pip install nvidia-nccl-cu12 in the environment you build in, or apt install libnccl2 libnccl-dev), or point NCCL_HOME at an install.\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  - pip install nvidia-nccl-cu12"),
        "{stdout}"
    );
    assert_eq!(text(&out.stderr), "nccl-find: NCCL was not found: install it (pip install nvidia-nccl-cu12 in the environment you build in, or apt install libnccl2 libnccl-dev), or point NCCL_HOME at an install.\n");
}

#[test]
fn explicit_error_exits_1() {
    let root = tree("dpkg");
    let out = run(
        &["--print", "--root", root.to_str().unwrap()],
        &[("NCCL_HOME", "/nope")],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("nccl-find: NCCL_HOME=/nope was set, but that install cannot be used"),
        "{stderr}"
    );
}

#[test]
fn requirement_flag() {
    let root = tree("dpkg");
    // With --print, the report shows the requirement; alone, only the exit status answers.
    let out = run(
        &[
            "--print",
            "--root",
            root.to_str().unwrap(),
            "--atleast-version",
            "2.29",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("requirement: >=2.29.0\n"));
    let out = run(
        &[
            "--root",
            root.to_str().unwrap(),
            "--atleast-version",
            "2.28",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
}

/// `$(nccl-find --cflags --libs)` builds and links a C program against a
/// real wheel (with the CUDA header wheels beside it), which then runs.
#[test]
fn cflags_and_libs_build_a_c_program_against_a_real_wheel() {
    let Some(w) = common::wheels() else { return };
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("nccl-find-cli-cc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&venv);
    let nv = venv.join("lib/python3.11/site-packages/nvidia");
    std::fs::create_dir_all(&nv).unwrap();
    for (dist, d) in [
        ("nvidia_nccl_cu12-2.21.5", "nccl"),
        ("nvidia_cuda_runtime_cu12-12.4.127", "cuda_runtime"),
        ("nvidia_cuda_nvcc_cu12-12.4.131", "cuda_nvcc"),
        ("nvidia_cuda_cccl_cu12-12.4.127.post1", "cuda_cccl"),
    ] {
        std::os::unix::fs::symlink(w.join(dist).join("nvidia").join(d), nv.join(d)).unwrap();
    }
    let vars = [("VIRTUAL_ENV", venv.to_str().unwrap())];
    let out = run(&["--cflags", "--libs"], &vars);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let flags = text(&out.stdout);
    assert!(flags.trim_end().ends_with("-l:libnccl.so.2"), "{flags}");
    let src = venv.join("v.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <nccl.h>\nint main(void){int v=0; ncclGetVersion(&v); printf(\"%d %d\\n\", v, NCCL_VERSION_CODE); return 0;}\n",
    )
    .unwrap();
    let exe = venv.join("v");
    let cc = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(flags.split_whitespace())
        .output()
        .unwrap();
    assert!(cc.status.success(), "cc {flags}: {}", text(&cc.stderr));
    // Linked verbatim against the wheel's own lib dir: it runs from there.
    let wheel_lib = venv.join("lib/python3.11/site-packages/nvidia/nccl/lib");
    let ran = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &wheel_lib)
        .output()
        .unwrap();
    assert_eq!(text(&ran.stdout), "22105 22105\n");
    // From `eval "$(nccl-find --env)"`, as a Makefile uses the variables
    // (`-I$NCCL_INCLUDE_DIR -L$NCCL_LIB_DIR -lnccl`), in a child shell that
    // sees only what was exported; nccl.h's CUDA headers from --cflags.
    let cache = venv.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let script = "set -e; eval \"$(\"$1\" --env)\"; \
                  sh -c 'cc \"$0\" -o \"$1\" $2 -I\"$NCCL_INCLUDE_DIR\" -L\"$NCCL_LIB_DIR\" -lnccl && \
                  LD_LIBRARY_PATH=\"$NCCL_LIB_DIR\" \"$1\"' \"$2\" \"$3\" \"$(\"$1\" --cflags-only-I)\"";
    let out = Command::new("sh")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("VIRTUAL_ENV", &venv)
        .env("XDG_CACHE_HOME", &cache)
        .args(["-c", script, "sh", env!("CARGO_BIN_EXE_nccl-find")])
        .arg(&src)
        .arg(venv.join("v-env"))
        .output()
        .unwrap();
    assert_eq!(
        (out.status.code(), text(&out.stdout).as_str()),
        (Some(0), "22105 22105\n"),
        "{}",
        text(&out.stderr)
    );
    // The lib dir it exported is the loader directory, whose libnccl.so
    // (which -lnccl opens) leads to the wheel's libnccl.so.2.
    let env = text(
        &run(
            &["--env"],
            &[
                ("VIRTUAL_ENV", venv.to_str().unwrap()),
                ("XDG_CACHE_HOME", cache.to_str().unwrap()),
            ],
        )
        .stdout,
    );
    let lib_dir = env
        .lines()
        .find_map(|l| l.strip_prefix("export NCCL_LIB_DIR="))
        .unwrap()
        .to_string();
    assert!(
        lib_dir.starts_with(&format!("{}/nccl-find/loader/", cache.display())),
        "{env}"
    );
    assert_eq!(
        std::fs::canonicalize(Path::new(&lib_dir).join("libnccl.so")).unwrap(),
        std::fs::canonicalize(wheel_lib.join("libnccl.so.2")).unwrap()
    );
    std::fs::remove_dir_all(&venv).unwrap();
}

#[test]
fn usage_errors_exit_2() {
    let out = run(&["--frobnicate"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "error: unexpected argument '--frobnicate' found\n\n  \
         tip: to pass '--frobnicate' as a value, use '-- --frobnicate'\n\n\
         Usage: nccl-find [OPTIONS] [PACKAGE]... [COMMAND]\n\n\
         For more information, try '--help'.\n"
    );
    assert!(out.stdout.is_empty());
    let out = run(&["--root"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["--help"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for needle in [
        "Exit status:\n  0  found and healthy\n  1  not found, or a problem found (smoke: a wrong element, an NCCL error, a deadline)\n  2  usage error\n  3  smoke: no NVIDIA driver or no GPU",
        "nccl-find doctor ",
        "cc app.c $(nccl-find --cflags --libs)",
    ] {
        assert!(help.contains(needle), "{needle:?} in:\n{help}");
    }
}

/// A first run with nothing set up: an empty environment, the real root,
/// and (for doctor) the machine's real facts. What it finds depends on the
/// machine; that it answers sensibly, without a panic, does not.
#[test]
fn first_run_on_a_bare_machine() {
    let out = run(&["--print"], &[]);
    let code = out.status.code();
    assert!(matches!(code, Some(0) | Some(1)), "{code:?}");
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("nccl-find "), "{stdout}");
    assert!(stdout.contains("\nLooked in ("), "{stdout}");
    if code == Some(1) {
        assert!(
            stdout.contains("  - pip install nvidia-nccl-cu12"),
            "{stdout}"
        );
    }
    let out = run(&["doctor"], &[]);
    assert!(matches!(out.status.code(), Some(0) | Some(1)));
    let stdout = text(&out.stdout);
    for section in [
        "NCCL:",
        "GPU and driver:",
        "NCCL variables:",
        "Network:",
        "RDMA:",
        "Shared memory:",
        "MPI:",
    ] {
        assert!(
            stdout.contains(&format!("\n{section}\n")),
            "{section} in:\n{stdout}"
        );
    }
    assert!(!text(&out.stderr).contains("panicked"));
    let out = run(&["doctor", "--json"], &[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["healthy"].as_bool(), Some(out.status.code() == Some(0)));
}

/// The README's "No NCCL yet?" path, as a new user runs it: a virtualenv
/// holding the newest cu12 wheel on PyPI (from `scripts/test`'s cache), and
/// `nccl-find --print` through `VIRTUAL_ENV`.
#[test]
fn newcomer_print_selects_the_newest_cu12_wheel() {
    let Some(wheels) = common::wheels() else {
        return;
    };
    // The newest cu12 release in the cache, by version.
    let (dist, version) = std::fs::read_dir(&wheels)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            let v = name.strip_prefix("nvidia_nccl_cu12-")?.to_string();
            let key: Vec<u32> = v
                .split(".post")
                .next()?
                .split('.')
                .map(|n| n.parse().unwrap())
                .collect();
            Some((key, name.clone(), v))
        })
        .max()
        .map(|(_, d, v)| (d, v))
        .expect("a cu12 wheel in the cache");
    let nccl_version = version.split(".post").next().unwrap().to_string();
    // A root beside the cache, the wheel hard-linked into it (a symbolic
    // link out of the root would not be followed, as in a sysroot).
    let root = wheels
        .parent()
        .unwrap()
        .join(format!("test-roots/newcomer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let sp_dir = root.join("home/me/.venv/lib/python3.11");
    std::fs::create_dir_all(&sp_dir).unwrap();
    let copied = ["-al", "-a"].iter().any(|f| {
        Command::new("cp")
            .arg(f)
            .arg(wheels.join(&dist))
            .arg(sp_dir.join("site-packages"))
            .status()
            .is_ok_and(|s| s.success())
    });
    assert!(copied);
    let out = run(
        &["--print", "--root", root.to_str().unwrap()],
        &[("VIRTUAL_ENV", "/home/me/.venv")],
    );
    let _ = std::fs::remove_dir_all(&root);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let sp = "/home/me/.venv/lib/python3.11/site-packages";
    let selected = stdout
        .lines()
        .find(|l| l.starts_with("Selected: "))
        .unwrap_or_else(|| panic!("no Selected line in:\n{stdout}"));
    let (head, tail) = selected.split_once(" (CUDA 12.").expect(selected);
    assert_eq!(head, format!("Selected: NCCL {nccl_version}"));
    assert!(
        tail.ends_with(&format!(
            ") at {sp}/nvidia/nccl — pip wheel in {sp} (VIRTUAL_ENV) [pip nvidia-nccl-cu12 {version}]"
        )),
        "{selected}"
    );
    assert!(
        stdout.contains(&format!(
            "           soname libnccl.so.2; library says NCCL {nccl_version}+cuda12."
        )),
        "{stdout}"
    );
    assert!(!stdout.contains("Other installs"), "{stdout}");
    // The version was read from the library itself: no stand-in warning.
    assert!(!stdout.contains("is taken for it"), "{stdout}");
    assert!(!stdout.contains("taken from its file name"), "{stdout}");
}

/// An install under a path that is not UTF-8: `--print` and `--json` take
/// it as the command does, but name its real bytes (`\xff`, not a lossy
/// character naming no file), mark it as one a build script refuses, and
/// preview no directives a build script would not print.
#[test]
fn print_marks_an_install_a_build_script_refuses() {
    use std::os::unix::ffi::OsStringExt;
    let root =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-not-utf8-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("opt")).unwrap();
    let name = std::ffi::OsString::from_vec(b"nccl-\xff-2.21".to_vec());
    let ok = Command::new("cp")
        .arg("-a")
        .arg(tree("tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64"))
        .arg(root.join("opt").join(&name))
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let mut home = std::ffi::OsString::from("/opt/");
    home.push(&name);
    let run = |flag: &str| {
        Command::new(env!("CARGO_BIN_EXE_nccl-find"))
            .args([flag, "--root"])
            .arg(&root)
            .args(["--target", "x86_64-unknown-linux-gnu"])
            .env_clear()
            .env("NCCL_HOME", &home)
            .output()
            .unwrap()
    };
    let out = run("--print");
    let print = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{print}");
    assert!(
        print.contains("Selected: NCCL 2.21.5 (CUDA 12.4) at /opt/nccl-\\xff-2.21 — NCCL_HOME="),
        "{print}"
    );
    assert!(
        print.contains("  refused  by a build script: ")
            && print.contains(
                "nccl-\\xff-2.21 is not UTF-8, which a cargo directive cannot carry exactly"
            ),
        "{print}"
    );
    assert!(
        print.contains(
            "\nCargo directives a build script gets: none; it refuses this install (above).\n"
        ),
        "{print}"
    );
    assert!(!print.contains("cargo:rustc-link"), "{print}");
    assert!(!print.contains('\u{fffd}'), "{print}");
    let out = run("--json");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &v["candidates"][0];
    assert!(
        c["build_script_refuses"]
            .as_str()
            .is_some_and(|w| w.contains("is not UTF-8")),
        "{c}"
    );
    assert!(
        c["library"]
            .as_str()
            .is_some_and(|l| l.ends_with("/opt/nccl-\\xff-2.21/lib/libnccl.so")),
        "{c}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// Every flag of ours that the README and the docs use is in `--help`
/// (the command's, `doctor`'s, `smoke`'s, `ras`'s or `explain`'s); the others named there are
/// other programs' (cargo, pip, the launchers, the linker), listed here.
#[test]
fn every_flag_the_docs_use_is_in_help() {
    const OTHERS: &[&str] = &[
        "--allow-run-as-root",
        "--bin",
        "--check",
        "--device",
        "--disable-new-dtags",
        "--distribution",
        "--dry-run",
        "--enable-new-dtags",
        "--example",
        "--exclude",
        "--features",
        "--field-selector",
        "--force-reinstall",
        "--git",
        "--gpus-per-task",
        "--label",
        "--list-diagnostics",
        "--log-dir",
        "--map-by",
        "--master-addr",
        "--master-port",
        "--max-restarts",
        "--mca",
        "--mpi",
        "--nnodes",
        "--no-python",
        "--node-rank",
        "--nodelist",
        "--nodes",
        "--nproc-per-node",
        "--ntasks-per-node",
        "--oversubscribe",
        "--path",
        "--pid",
        "--prefix",
        "--rdzv-backend",
        "--rdzv-id",
        "--release",
        "--shape",
        "--standalone",
        "--tag-output",
        "--tee",
        "--test",
        "--ulimit",
        "--workspace",
    ];
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let helps = [
        help(&["--help"]),
        help(&["doctor", "--help"]),
        help(&["smoke", "--help"]),
        help(&["ras", "--help"]),
        help(&["explain", "--help"]),
    ]
    .concat();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut pages = vec![repo.join("README.md"), repo.join("cli/README.md")];
    for e in std::fs::read_dir(repo.join("docs")).unwrap().flatten() {
        pages.push(e.path());
    }
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        for (at, _) in text.match_indices("--") {
            let flag: String = text[at + 2..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if !flag.starts_with(|c: char| c.is_ascii_lowercase()) {
                continue;
            }
            let flag = format!("--{flag}");
            if OTHERS.contains(&flag.as_str()) {
                continue;
            }
            let shown = helps
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .any(|w| w == flag);
            assert!(
                shown,
                "{} uses {flag}, which no --help shows",
                page.display()
            );
        }
    }
}

/// `eval "$(nccl-find --env)" && build`, the README's line: where nccl-find
/// fails, the build does not start, in every POSIX shell here (bash and
/// dash; zsh too where it is installed).
#[test]
fn a_failed_env_stops_the_eval_and_the_build_after_it() {
    for sh in ["bash", "dash", "zsh"] {
        let Some(shell) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join(sh))
            .find(|p| p.is_file())
        else {
            assert_ne!(sh, "bash", "bash is not on PATH");
            eprintln!("skipped: {sh} is not installed");
            continue;
        };
        let out = Command::new(shell)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("NCCL_HOME", "/nonexistent")
            .args([
                "-c",
                "eval \"$(\"$0\" --env)\" && echo BUILD STARTED; echo rc=$?",
                env!("CARGO_BIN_EXE_nccl-find"),
            ])
            .output()
            .unwrap();
        assert_eq!(text(&out.stdout), "rc=1\n", "{sh}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(
            err.lines()
                .last()
                .unwrap_or("")
                .contains("NCCL_HOME points at /nonexistent"),
            "{sh}: {err}"
        );
    }
}

/// `--env` with a wheel and no CUDA headers beside it exports no
/// `NCCL_CFLAGS` (it could not compile `nccl.h`), as its warning says.
#[test]
fn env_exports_no_cflags_that_cannot_compile_nccl_h() {
    let Some(w) = common::wheels() else { return };
    let venv = common::scratch("env-no-cuda");
    let site = venv.join("lib/python3.11/site-packages/nvidia");
    std::fs::create_dir_all(&site).unwrap();
    std::os::unix::fs::symlink(
        common::newest_wheel(&w, "nvidia_nccl_cu12").join("nvidia/nccl"),
        site.join("nccl"),
    )
    .unwrap();
    std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    let cache = venv.join("cache");
    let o = run(
        &["--env"],
        &[
            ("PATH", "/usr/bin:/bin"),
            ("VIRTUAL_ENV", venv.to_str().unwrap()),
            ("XDG_CACHE_HOME", cache.to_str().unwrap()),
        ],
    );
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    if !err.contains("nccl.h includes cuda_runtime.h, and none was found") {
        eprintln!("skipped: this machine has CUDA headers of its own: {err}");
        return;
    }
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.trim_end().ends_with(
            "No CUDA_HOME or NCCL_CFLAGS is exported: builds that compile nccl.h will fail"
        ),
        "{err}"
    );
    assert!(
        !out.contains("NCCL_CFLAGS") && !out.contains("CUDA_HOME"),
        "{out}"
    );
    assert!(out.contains("\nexport NCCL_LIBS="), "{out}");
}

/// `--atleast-version`, as the README says: nothing on stdout, the exit
/// status answers, and where it is not met one line on stderr says why.
#[test]
fn atleast_version_answers_by_its_exit_status_and_one_line() {
    let home = tree("dpkg").join("usr");
    let home = home.to_str().unwrap();
    let ok = run(&["--atleast-version", "2.0"], &[("NCCL_HOME", home)]);
    assert_eq!(
        (ok.status.code(), text(&ok.stdout), text(&ok.stderr)),
        (Some(0), String::new(), String::new())
    );
    let no = run(&["--atleast-version", "3.0"], &[("NCCL_HOME", home)]);
    let err = text(&no.stderr);
    assert_eq!(
        (no.status.code(), text(&no.stdout)),
        (Some(1), String::new())
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("NCCL 2.28.3 does not satisfy the requirement >=3.0.0"),
        "{err}"
    );
}

/// `smoke` with no NCCL: the last line is the cause and its fix, the
/// pointers to `--print` and `--lib` before it.
#[test]
fn smoke_with_no_nccl_ends_on_the_cause_and_the_fix() {
    let root = tree("empty");
    let out = run(
        &["--root", root.to_str().unwrap(), "smoke"],
        &[("PATH", "/usr/bin:/bin")],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.last().copied(),
        Some(
            "nccl-find smoke: no NCCL to load: NCCL was not found: install it (pip install \
             nvidia-nccl-cu12 in the environment you build in, or apt install libnccl2 \
             libnccl-dev), or point NCCL_HOME at an install."
        ),
        "{err}"
    );
    assert!(
        err.contains("`nccl-find --print` shows where NCCL was looked for; --lib PATH names one"),
        "{err}"
    );
}
