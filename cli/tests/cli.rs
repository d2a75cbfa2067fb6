//! The `nccl-find` command against fixture trees, with a fixed environment.

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
        stdout.contains("Selected: nothing.\nNCCL was not found.\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  - pip install nvidia-nccl-cu12"),
        "{stdout}"
    );
    assert_eq!(text(&out.stderr), "nccl-find: NCCL was not found.\n");
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
    let out = run(
        &[
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
}

#[test]
fn usage_errors_exit_2() {
    let out = run(&["--frobnicate"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "nccl-find: unknown argument \"--frobnicate\"\nRun `nccl-find --help` for usage.\n"
    );
    let out = run(&["--root"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["--help"], &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout)
        .contains("Exit status: 0 when NCCL is found, 1 when it is not, 2 for a usage error."));
}
