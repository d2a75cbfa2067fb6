//! A build script reruns when what decides its answer changes, and not
//! otherwise. An IDE and a terminal that differ only in `PATH` must not
//! rerun it (and rebuild everything above the -sys crate) on each switch.

mod common;
use common::STEERING;

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

/// What the build script printed in its newest run in `ws`.
fn newest_output(ws: &Path) -> String {
    let mut newest: Option<(std::time::SystemTime, String)> = None;
    for e in std::fs::read_dir(ws.join("target/debug/build")).unwrap() {
        let f = e.unwrap().path().join("output");
        let (Ok(m), Ok(text)) = (std::fs::metadata(&f), std::fs::read_to_string(&f)) else {
            continue;
        };
        let t = m.modified().unwrap();
        let newer = match &newest {
            Some((n, _)) => t > *n,
            None => true,
        };
        if newer {
            newest = Some((t, text));
        }
    }
    newest.expect("a build script output").1
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
    common::probe_crate(
        &ws,
        "rerun-probe",
        "fn main() { nccl_find::Config::new().probe_or_exit(); }\n",
    );
    // A copy of an install, so that its library file can change.
    let fixtures = common::trees();
    let tarball = ws.join("nccl");
    common::copy_tree(
        &fixtures.join("tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64"),
        &tarball,
    );
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

/// A build of the scratch crate with exactly `vars` steering it; `None`
/// takes a variable out.
fn build_mode(ws: &Path, vars: &[(&str, Option<String>)]) -> Output {
    let home = std::env::var("HOME").unwrap_or_default();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(ws)
        .args(["build", "-v", "--offline"])
        .env("CARGO_TARGET_DIR", ws.join("target"))
        // HOME changes below: cargo's and rustup's own homes stay put.
        .env(
            "CARGO_HOME",
            std::env::var("CARGO_HOME").unwrap_or(format!("{home}/.cargo")),
        )
        .env(
            "RUSTUP_HOME",
            std::env::var("RUSTUP_HOME").unwrap_or(format!("{home}/.rustup")),
        );
    for v in STEERING {
        cmd.env_remove(v);
    }
    for (k, v) in vars {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{vars:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The most common installs, each through the variable people use: a wheel
/// in an active virtualenv, a venv reached only through `PATH` (Docker
/// images), a conda prefix, dpkg's packages (under a sysroot here), and
/// `NCCL_HOME`. In each, setting, changing or unsetting `LD_LIBRARY_PATH`
/// (the run-time loader's), `PATH` or `HOME` (which only locate) reruns
/// nothing. The search stops at the source that found the install, so the
/// later sources' variables are never read (LD_LIBRARY_PATH is the last
/// source's); cargo's own `LD_LIBRARY_PATH` entries are not searched.
#[test]
fn in_every_common_mode_the_loaders_and_locators_variables_rerun_nothing() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ws = repo.join("target/reruns-modes-ws");
    common::probe_crate(
        &ws,
        "rerun-probe",
        "fn main() { nccl_find::Config::new().probe_or_exit(); }\n",
    );
    let trees = common::trees();
    let venv = trees.join("wheel-venv/venv");
    let path = std::env::var("PATH").unwrap_or_default();
    let s = |p: &Path| Some(p.display().to_string());
    type Mode<'a> = (&'a str, Vec<(&'a str, Option<String>)>, &'a str);
    let modes: Vec<Mode> = vec![
        ("VIRTUAL_ENV", vec![("VIRTUAL_ENV", s(&venv))], "2.21.5"),
        (
            "a venv on PATH",
            vec![(
                "PATH",
                Some(format!("{}:{path}", venv.join("bin").display())),
            )],
            "2.21.5",
        ),
        (
            "CONDA_PREFIX",
            vec![("CONDA_PREFIX", s(&trees.join("conda/opt/conda/envs/ml")))],
            "2.19.3",
        ),
        (
            "dpkg",
            vec![("NCCL_SYSROOT", s(&trees.join("dpkg")))],
            "2.28.3",
        ),
        (
            "NCCL_HOME",
            vec![(
                "NCCL_HOME",
                s(&trees.join("tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64")),
            )],
            "2.21.5",
        ),
    ];
    let output = || newest_output(&ws);
    for (mode, vars, version) in &modes {
        let out = build_mode(&ws, vars);
        assert!(ran_build_script(&out), "{mode}: the first build runs it");
        let text = output();
        assert!(
            text.contains(&format!("cargo:version={version}\n")),
            "{mode}: {text}"
        );
        let reruns = text.matches("cargo:rerun-if-env-changed=").count();
        eprintln!("{mode}: {reruns} rerun-if-env-changed lines");
        for v in ["LD_LIBRARY_PATH", "LIBRARY_PATH", "PATH", "HOME"] {
            assert!(
                !text.contains(&format!("cargo:rerun-if-env-changed={v}\n")),
                "{mode}: {v} is a rerun trigger:\n{text}"
            );
        }
        let mode_path = vars
            .iter()
            .find(|(k, _)| *k == "PATH")
            .and_then(|(_, v)| v.clone())
            .unwrap_or(path.clone());
        let elsewhere = ws.display().to_string();
        for (name, value) in [
            (
                "LD_LIBRARY_PATH",
                Some("/opt/other/lib:/usr/local/lib".to_string()),
            ),
            ("HOME", Some(elsewhere.clone())),
            ("HOME", None),
            ("PATH", Some(format!("{elsewhere}:{mode_path}"))),
        ] {
            let mut changed = vars.clone();
            changed.retain(|(k, _)| *k != name);
            changed.push((name, value.clone()));
            let out = build_mode(&ws, &changed);
            assert!(
                !ran_build_script(&out),
                "{mode}: {name}={value:?} reran the build script:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&ws);
}

/// Inside a build script cargo puts its target directory and its
/// toolchain's libraries first on `LD_LIBRARY_PATH`: the probe neither
/// searches nor shows them, while the user's own entries are searched.
#[test]
fn cargos_own_ld_library_path_entries_are_not_searched() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ws = repo.join("target/reruns-cargo-ldpath-ws");
    let _ = std::fs::remove_dir_all(&ws);
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(
        ws.join("Cargo.toml"),
        format!(
            "[package]\nname = \"looked-probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [workspace]\n\n[build-dependencies]\nnccl-find = {{ path = \"{}\" }}\n",
            repo.display()
        ),
    )
    .unwrap();
    std::fs::write(
        ws.join("build.rs"),
        "fn main() {\n    println!(\"cargo:warning=LD_LIBRARY_PATH {:?}\", std::env::var(\"LD_LIBRARY_PATH\"));\n    \
         let (r, _) = nccl_find::Config::new().cargo_metadata(false).report();\n    \
         for l in &r.looked {\n        println!(\"cargo:warning=looked {}\", l.path.display());\n    }\n}\n",
    )
    .unwrap();
    std::fs::write(ws.join("src/lib.rs"), "").unwrap();
    let _ = std::fs::copy(repo.join("Cargo.lock"), ws.join("Cargo.lock"));
    let mine = ws.join("mine-lib");
    std::fs::create_dir_all(&mine).unwrap();
    let out = build_mode(
        &ws,
        &[("LD_LIBRARY_PATH", Some(mine.display().to_string()))],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    // Cargo did put its own there.
    let target = ws.join("target/debug");
    assert!(
        err.contains(&format!("LD_LIBRARY_PATH Ok(\"{}:", target.display())),
        "{err}"
    );
    let looked: Vec<&str> = err
        .lines()
        .filter_map(|l| {
            l.split_once("warning: looked-probe@0.1.0: looked ")
                .map(|x| x.1)
        })
        .collect();
    assert!(looked.contains(&mine.to_str().unwrap()), "{err}");
    let toolchain = Path::new(env!("CARGO")).ancestors().nth(2).unwrap();
    for l in &looked {
        assert!(
            !l.starts_with(target.to_str().unwrap()) && !l.starts_with(toolchain.to_str().unwrap()),
            "cargo's own {l} was searched:\n{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&ws);
}

/// A build found NCCL through `LD_LIBRARY_PATH` in an activated venv with
/// no wheel; then `pip install nvidia-nccl-cu12` puts one into that venv.
/// The venv's wheel ranks above `LD_LIBRARY_PATH`, so it decides: the next
/// build runs the build script again and links the wheel (before, the old
/// answer stayed while `nccl-find --print` showed the wheel). A build with
/// nothing changed runs nothing.
#[test]
fn a_wheel_installed_into_the_active_venv_later_is_found() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ws = repo.join("target/reruns-new-wheel-ws");
    common::probe_crate(
        &ws,
        "rerun-probe",
        "fn main() { nccl_find::Config::new().probe_or_exit(); }\n",
    );
    let trees = common::trees();
    // An activated venv, with no NCCL wheel yet.
    let venv = ws.join("venv");
    let site = venv.join("lib/python3.11/site-packages");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    // NCCL 2.8.4 (include/ beside lib/) on LD_LIBRARY_PATH.
    let older = ws.join("older");
    common::copy_tree(&trees.join("old-formula/usr/local"), &older);
    let s = |p: &Path| Some(p.display().to_string());
    let vars = vec![
        ("VIRTUAL_ENV", s(&venv)),
        ("LD_LIBRARY_PATH", s(&older.join("lib"))),
    ];
    let version = || -> String {
        let text = newest_output(&ws);
        text.lines()
            .find_map(|l| l.strip_prefix("cargo:version="))
            .unwrap_or("none")
            .to_string()
    };
    let out = build_mode(&ws, &vars);
    assert!(ran_build_script(&out));
    assert_eq!(version(), "2.8.4");
    let again = build_mode(&ws, &vars);
    assert!(!ran_build_script(&again), "nothing changed, yet it reran");
    // `pip install`: the wheel's files, written now, into the venv.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let wheel = trees.join("wheel-venv/venv/lib/python3.11/site-packages");
    let ok = Command::new("cp")
        .arg("-r")
        .arg(wheel.join("nvidia"))
        .arg(wheel.join("nvidia_nccl_cu12-2.21.5.dist-info"))
        .arg(&site)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let out = build_mode(&ws, &vars);
    assert!(
        ran_build_script(&out),
        "a wheel installed into the active venv did not rerun the build script"
    );
    assert_eq!(version(), "2.21.5");
    let _ = std::fs::remove_dir_all(&ws);
}
