//! A build script reruns when what decides its answer changes, and not
//! otherwise. An IDE and a terminal that differ only in `PATH` must not
//! rerun it (and rebuild everything above the -sys crate) on each switch.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn build(ws: &Path, home: &Path, vars: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(ws)
        .args(["build", "-v"])
        .env("CARGO_TARGET_DIR", ws.join("target"))
        .env("NCCL_HOME", home);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
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
fn only_what_decides_the_answer_reruns_the_build_script() {
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
    // A copy of an install, so that its library file can change.
    let fixtures = common::trees();
    let tarball = ws.join("nccl");
    let ok = Command::new("cp")
        .arg("-a")
        .arg(fixtures.join("tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64"))
        .arg(&tarball)
        .status()
        .unwrap();
    assert!(ok.success());
    let path = std::env::var("PATH").unwrap_or_default();
    let home = std::env::var("HOME").unwrap_or_default();
    let base: Vec<(&str, &str)> = vec![
        ("PATH", &path),
        ("LD_LIBRARY_PATH", "/a"),
        ("VIRTUAL_ENV", "/venv-a"),
        ("CONDA_PREFIX", "/conda-a"),
        ("HOME", &home),
    ];
    let first = build(&ws, &tarball, &base);
    assert!(ran_build_script(&first), "the first build runs it");
    let outs = || -> Vec<String> {
        std::fs::read_dir(ws.join("target/debug/build"))
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("output")).ok())
            .collect()
    };
    let reruns = outs()[0].matches("cargo:rerun-if-env-changed=").count();
    eprintln!("rerun-if-env-changed lines with NCCL_HOME set: {reruns}");
    // Each of these alone, as an IDE, a terminal, or an activated
    // environment would differ: nothing reruns.
    let other_path = format!("{}:{path}", ws.display());
    let other_home = ws.display().to_string();
    for (name, value) in [
        ("PATH", other_path.as_str()),
        ("LD_LIBRARY_PATH", "/b:/c"),
        ("VIRTUAL_ENV", "/venv-b"),
        ("CONDA_PREFIX", "/conda-b"),
        ("HOME", other_home.as_str()),
    ] {
        let mut vars = base.clone();
        for v in vars.iter_mut() {
            if v.0 == name {
                v.1 = value;
            }
        }
        let out = build(&ws, &tarball, &vars);
        assert!(
            !ran_build_script(&out),
            "a change of {name} alone reran the build script:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The library file changes (a reinstall of the same path): it reruns.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let lib = tarball.join("lib/libnccl.so.2.21.5");
    let bytes = std::fs::read(&lib).unwrap();
    std::fs::remove_file(&lib).unwrap();
    std::fs::write(&lib, bytes).unwrap();
    let out = build(&ws, &tarball, &base);
    assert!(ran_build_script(&out), "a changed library did not rerun it");
    // Another install: the answer changes, so it reruns.
    let other = fixtures.join("old-formula/usr/local");
    let out = build(&ws, &other, &base);
    assert!(
        ran_build_script(&out),
        "a changed NCCL_HOME did not rerun it"
    );
    let outs = outs();
    assert!(
        outs.iter().any(|o| o.contains("cargo:version=2.8.4\n")),
        "{outs:?}"
    );
    for o in &outs {
        for v in [
            "PATH",
            "LD_LIBRARY_PATH",
            "VIRTUAL_ENV",
            "CONDA_PREFIX",
            "HOME",
        ] {
            assert!(
                !o.contains(&format!("rerun-if-env-changed={v}\n")),
                "{v}: {o}"
            );
        }
    }
    std::fs::remove_dir_all(&ws).unwrap();
}
