//! A build script reruns when what decides its answer changes, and not
//! otherwise. An IDE and a terminal that differ only in `PATH` must not
//! rerun it (and rebuild everything above the -sys crate) on each switch.

use std::path::Path;
use std::process::{Command, Output};

fn build(ws: &Path, home: &Path, path: &str) -> Output {
    let out = Command::new(env!("CARGO"))
        .current_dir(ws)
        .args(["build", "-v"])
        .env("CARGO_TARGET_DIR", ws.join("target"))
        .env("NCCL_HOME", home)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Whether cargo ran the scratch crate's build script in this build.
fn ran_build_script(out: &Output) -> bool {
    String::from_utf8_lossy(&out.stderr).lines().any(|l| {
        l.contains("Running") && l.contains("rerun-probe") && l.contains("build-script-build")
    })
}

#[test]
fn a_path_change_alone_does_not_rerun_the_build_script() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ws = repo.join("target/reruns-ws");
    let _ = std::fs::remove_dir_all(&ws);
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(
        ws.join("Cargo.toml"),
        format!(
            "[package]\nname = \"rerun-probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [workspace]\n\n[build-dependencies]\nnccl-find = {{ path = \"{}\" }}\n",
            repo.display()
        ),
    )
    .unwrap();
    std::fs::write(
        ws.join("build.rs"),
        "fn main() { nccl_find::Config::new().probe_or_exit(); }\n",
    )
    .unwrap();
    std::fs::write(ws.join("src/lib.rs"), "").unwrap();
    let _ = std::fs::copy(repo.join("Cargo.lock"), ws.join("Cargo.lock"));
    let fixtures = repo.join("fixtures/trees");
    let tarball = fixtures.join("tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64");
    let path = std::env::var("PATH").unwrap_or_default();
    let first = build(&ws, &tarball, &path);
    assert!(ran_build_script(&first), "the first build runs it");
    // Only PATH differs (another directory in front, as an IDE might add).
    let other = format!("{}:{path}", ws.display());
    let second = build(&ws, &tarball, &other);
    assert!(
        !ran_build_script(&second),
        "a PATH-only change reran the build script:\n{}",
        String::from_utf8_lossy(&second.stderr)
    );
    // Another install: the answer changes, so it reruns.
    let other_home = fixtures.join("old-formula/usr/local");
    let third = build(&ws, &other_home, &other);
    assert!(
        ran_build_script(&third),
        "a changed NCCL_HOME did not rerun it"
    );
    let outs: Vec<String> = std::fs::read_dir(ws.join("target/debug/build"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("output")).ok())
        .collect();
    assert!(
        outs.iter().any(|o| o.contains("cargo:version=2.8.4\n")),
        "{outs:?}"
    );
    assert!(
        outs.iter()
            .all(|o| !o.contains("rerun-if-env-changed=PATH\n")),
        "{outs:?}"
    );
    std::fs::remove_dir_all(&ws).unwrap();
}
