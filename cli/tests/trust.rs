//! What a facts file, a shared directory or another local user can make
//! nccl-find do: nothing beyond what it says. Each test fails without the
//! defence it names (docs/reliability.md has a row for each).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

fn scratch(tag: &str) -> PathBuf {
    let d =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("trust-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A shared library at `dir/name` whose constructor writes `marker`.
fn library_that_marks(dir: &Path, name: &str, marker: &Path) -> PathBuf {
    let src = dir.join("mark.c");
    std::fs::write(
        &src,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void mark(void) {{\n\
             FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"ran\", f); fclose(f); }}\n}}\n",
            marker.display()
        ),
    )
    .unwrap();
    let out = dir.join(name);
    let ok = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc is needed");
    assert!(ok.success());
    out
}

/// The facts of a healthy host, with `env` as the facts file's variables.
fn facts_file(dir: &Path, env: &[(&str, &str)]) -> PathBuf {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/facts-healthy.json");
    let mut facts: Value = serde_json::from_str(&std::fs::read_to_string(golden).unwrap()).unwrap();
    let mut vars = serde_json::Map::new();
    for (k, v) in env {
        vars.insert(k.to_string(), json!(v));
    }
    facts["env"] = Value::Object(vars);
    let file = dir.join("facts.json");
    std::fs::write(&file, facts.to_string()).unwrap();
    file
}

/// The newest cu12 wheel scripts/test caches: one with the Parameter API.
fn newest_wheel(w: &Path) -> PathBuf {
    let mut best: Option<(Vec<u32>, PathBuf)> = None;
    for e in std::fs::read_dir(w).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(v) = name.strip_prefix("nvidia_nccl_cu12-") else {
            continue;
        };
        let v: Vec<u32> = v.split('.').filter_map(|p| p.parse().ok()).collect();
        if best.as_ref().is_none_or(|(b, _)| v > *b) {
            best = Some((v, e.path().join("nvidia/nccl")));
        }
    }
    best.expect("a cu12 wheel").1
}

/// `doctor --host-facts FILE` judges another machine: the file's variables
/// are data. An env plugin it names is not loaded (its constructor would
/// leave a marker), a debug file it names is not written, and the finding
/// says the parameters were not asked, and why.
#[test]
fn a_facts_files_variables_reach_no_process() {
    let Some(w) = common::wheels() else { return };
    let dir = scratch("facts");
    let marker = dir.join("plugin-ran");
    let plugin = library_that_marks(&dir, "libnccl-env-evil.so", &marker);
    let victim = dir.join("precious.log");
    std::fs::write(&victim, "precious").unwrap();
    let file = facts_file(
        &dir,
        &[
            ("NCCL_ENV_PLUGIN", plugin.to_str().unwrap()),
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_DEBUG_FILE", victim.to_str().unwrap()),
        ],
    );
    let home = newest_wheel(&w);
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .args(["doctor", "--json", "--host-facts"])
        .arg(&file)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("NCCL_HOME", &home)
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(!marker.exists(), "the facts file's env plugin was loaded");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let why = "the variables come from a facts file, and nothing from a facts file reaches a \
               process that loads code";
    assert_eq!(json["nccl_parameters"], json!({"asked": false, "why": why}));
    let version = home
        .ancestors()
        .nth(2)
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_start_matches("nvidia_nccl_cu12-")
        .to_string();
    let note = format!(
        "NCCL {version} was not asked for its parameters ({why}): names were checked against the \
         NCCL_* strings in its library and nccl-find's own list"
    );
    let texts: Vec<&str> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    assert!(texts.contains(&note.as_str()), "{texts:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The child that asks this machine's NCCL for its parameters never gets a
/// variable that makes NCCL write a file: a debug file in the environment
/// keeps its content, and the parameters are still asked.
#[test]
fn asking_nccl_writes_no_file() {
    let Some(w) = common::wheels() else { return };
    let dir = scratch("debug-file");
    let victim = dir.join("precious.log");
    std::fs::write(&victim, "precious").unwrap();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/facts-healthy.json");
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .args(["doctor", "--json", "--host-facts"])
        .arg(&golden)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("NCCL_HOME", newest_wheel(&w))
        .env("NCCL_DEBUG", "INFO")
        .env("NCCL_DEBUG_FILE", &victim)
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(json["nccl_parameters"]["asked"], true, "{json}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plugin named by an absolute path, or by a file name on the loader's
/// path, is what NCCL opens: doctor says NCCL will load it (it said "not
/// on the loader's path").
#[test]
fn a_plugin_named_by_path_or_file_name_is_found() {
    let dir = scratch("plugin");
    let marker = dir.join("unused");
    let by_path = library_that_marks(&dir, "mine.so", &marker);
    let lib_dir = dir.join("lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    let by_name = library_that_marks(&lib_dir, "libtuner-mine.so", &marker);
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/trees/tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64");
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .arg("doctor")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("NCCL_HOME", &tarball)
        .env("NCCL_ENV_PLUGIN", &by_path)
        .env("NCCL_TUNER_PLUGIN", "libtuner-mine.so")
        .env("LD_LIBRARY_PATH", &lib_dir)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    for (family, file) in [("env", &by_path), ("tuner", &by_name)] {
        let line = format!(
            "  note     NCCL will load the {family} plugin {}\n",
            file.display()
        );
        assert!(report.contains(&line), "no {line:?} in:\n{report}");
    }
    assert!(!report.contains("not on the loader's path"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}
