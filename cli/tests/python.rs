//! `nccl-find doctor`'s Python area against real PyTorch (the newest, and
//! 2.1.2) and CuPy from PyPI, judged by the real interpreter: the
//! `libnccl.so.2` doctor says a package will map is the one its import maps
//! (`/proc/self/maps`), and where doctor says the import fails (or CuPy
//! goes on without NCCL), it does so with exactly the `undefined symbol`
//! doctor names.

mod common;
use common::STEERING;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The venv of the python in `var` (set by scripts/launchers), or `None`
/// (said) when the test command did not install it.
fn venv(var: &str) -> Option<PathBuf> {
    match std::env::var_os(var).filter(|v| !v.is_empty()) {
        Some(py) => Some(Path::new(&py).parent()?.parent()?.to_path_buf()),
        None => {
            common::skip_launcher(&format!(
                "{var} is unset (scripts/launchers installs torch)"
            ));
            None
        }
    }
}

/// `doctor --json` for the environment `venv`, with `ld` as `LD_LIBRARY_PATH`.
fn doctor(venv: &Path, ld: Option<&Path>) -> (Output, serde_json::Value) {
    let facts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/facts-healthy.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
    for v in STEERING {
        cmd.env_remove(v);
    }
    cmd.args(["doctor", "--json", "--host-facts"])
        .arg(&facts)
        .env("VIRTUAL_ENV", venv);
    if let Some(ld) = ld {
        cmd.env("LD_LIBRARY_PATH", ld);
    }
    let out = cmd.output().unwrap();
    let json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out, json)
}

/// `code` in the venv's interpreter, with `ld` as `LD_LIBRARY_PATH`: the
/// `libnccl` file it mapped (or `None`), and its stderr.
fn python_maps(venv: &Path, code: &str, ld: Option<&Path>) -> (Option<PathBuf>, String) {
    let mut cmd = Command::new(venv.join("bin/python"));
    for v in STEERING {
        cmd.env_remove(v);
    }
    if let Some(ld) = ld {
        cmd.env("LD_LIBRARY_PATH", ld);
    }
    let code = format!(
        "{code}\nfor l in open('/proc/self/maps'):\n    if 'libnccl' in l:\n        print(l.split()[-1]); break"
    );
    let out = cmd.args(["-W", "always", "-c", &code]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return (None, err);
    }
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mapped = (!line.is_empty()).then(|| std::fs::canonicalize(line).unwrap());
    (mapped, err)
}

/// `import torch`: the `libnccl` file it mapped, or the last line of its
/// error.
fn import_torch(venv: &Path, ld: Option<&Path>) -> Result<PathBuf, String> {
    match python_maps(venv, "import torch", ld) {
        (Some(p), _) => Ok(p),
        (None, err) => Err(err.trim_end().lines().last().unwrap_or("").to_string()),
    }
}

/// A copy of the venv `real` made of links, whose `nvidia/nccl` is `nccl`
/// (another wheel's).
fn venv_with_nccl(real: &Path, nccl: &Path, tag: &str) -> PathBuf {
    let fake = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&fake);
    let sp_of = |v: &Path| -> PathBuf {
        let lib = v.join("lib");
        let py = std::fs::read_dir(&lib)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .find(|n| n.starts_with("python3"))
            .unwrap();
        lib.join(py).join("site-packages")
    };
    let real_sp = sp_of(real);
    let sp = fake.join(real_sp.strip_prefix(real).unwrap());
    std::fs::create_dir_all(sp.join("nvidia")).unwrap();
    std::fs::create_dir_all(fake.join("bin")).unwrap();
    std::fs::copy(real.join("pyvenv.cfg"), fake.join("pyvenv.cfg")).unwrap();
    std::os::unix::fs::symlink(
        std::fs::canonicalize(real.join("bin/python")).unwrap(),
        fake.join("bin/python"),
    )
    .unwrap();
    for e in std::fs::read_dir(&real_sp).unwrap().flatten() {
        if e.file_name() != "nvidia" {
            std::os::unix::fs::symlink(e.path(), sp.join(e.file_name())).unwrap();
        }
    }
    for e in std::fs::read_dir(real_sp.join("nvidia")).unwrap().flatten() {
        if e.file_name() != "nccl" {
            std::os::unix::fs::symlink(e.path(), sp.join("nvidia").join(e.file_name())).unwrap();
        }
    }
    std::os::unix::fs::symlink(nccl, sp.join("nvidia/nccl")).unwrap();
    fake
}

/// A healthy answer: doctor says the package maps `real`, the file its
/// import mapped, inside the venv, lacking nothing, and doctor exits 0.
fn maps_its_own(
    venv: &Path,
    real: &Path,
    out: &Output,
    json: &serde_json::Value,
    entry: &serde_json::Value,
    what: &str,
) {
    assert_eq!(
        entry["library"].as_str(),
        Some(real.to_str().unwrap()),
        "{what}: {entry}"
    );
    assert!(real.starts_with(venv), "{}", real.display());
    assert_eq!(entry["missing"], serde_json::json!([]), "{entry}");
    assert_eq!(
        (out.status.code(), json["healthy"].as_bool()),
        (Some(0), Some(true)),
        "{what}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The venv `real` again, made of links, with the older wheel `old` as its
/// `nvidia/nccl`, judged by doctor: the package maps `old`'s library,
/// which lacks a function, and doctor exits 1. The venv, the package's
/// entry, the first missing function, and doctor's problem (text, fix).
fn with_older_nccl(
    real: &Path,
    old: &Path,
    package: &str,
) -> (PathBuf, serde_json::Value, String, String, String) {
    let fake = venv_with_nccl(real, old, &format!("{package}-old-nccl"));
    let (out, json) = doctor(&fake, None);
    let entry = entry(&json, package).clone();
    let first = entry["missing"][0]
        .as_str()
        .expect("a missing function")
        .to_string();
    let lib = std::fs::canonicalize(old.join("lib/libnccl.so.2")).unwrap();
    assert_eq!(entry["library"].as_str(), lib.to_str());
    assert_eq!(out.status.code(), Some(1));
    let (text, fix) = python_problem(&json);
    (fake, entry, first, text, fix)
}

/// The one package doctor judged: its entry of `python.packages`.
fn entry<'a>(json: &'a serde_json::Value, package: &str) -> &'a serde_json::Value {
    let pkgs = json["python"]["packages"]
        .as_array()
        .expect("python.packages");
    assert_eq!(pkgs.len(), 1, "{pkgs:?}");
    assert_eq!(pkgs[0]["package"], package);
    &pkgs[0]
}

/// doctor's one Python problem, as (text, fix).
fn python_problem(json: &serde_json::Value) -> (String, String) {
    let p = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["area"] == "Python" && f["level"] == "problem")
        .expect("a Python problem");
    (
        p["text"].as_str().unwrap().to_string(),
        p["fix"].as_str().unwrap_or_default().to_string(),
    )
}

/// An older NCCL first on `LD_LIBRARY_PATH` reaches no torch: the newest
/// torch preloads its wheel's NCCL by path, torch 2.1.2's libtorch_cuda.so
/// has a DT_RPATH to it. Doctor says which file each maps, the interpreter
/// maps exactly that, and nothing is a problem (exit 0).
#[test]
fn an_older_nccl_on_ld_library_path_reaches_no_torch() {
    let Some(w) = common::wheels() else { return };
    let older = w.join("nvidia_nccl_cu11-2.13.4/nvidia/nccl/lib");
    assert!(older.join("libnccl.so.2").is_file());
    for var in ["NCCL_FIND_TORCH_PYTHON", "NCCL_FIND_TORCH_PYTHON_OLD"] {
        let Some(venv) = venv(var) else { continue };
        for ld in [None, Some(older.as_path())] {
            let (out, json) = doctor(&venv, ld);
            let entry = entry(&json, "torch");
            let real = import_torch(&venv, ld).unwrap_or_else(|e| panic!("{var}: {e}"));
            maps_its_own(&venv, &real, &out, &json, entry, &format!("{var} {ld:?}"));
        }
    }
}

/// The newest torch beside an NCCL older than what it imports (a venv whose
/// `nvidia/nccl` is the 2.28.9 wheel: torch 2.15 imports functions of
/// 2.29): doctor says `import torch` fails, names the first missing
/// function as the loader does, and exits 1; the interpreter fails with
/// exactly that `undefined symbol`.
#[test]
fn a_torch_whose_own_nccl_is_too_old_fails_as_doctor_says() {
    let Some(w) = common::wheels() else { return };
    let Some(real) = venv("NCCL_FIND_TORCH_PYTHON") else {
        return;
    };
    let old = w.join("nvidia_nccl_cu13-2.28.9/nvidia/nccl");
    assert!(old.join("lib/libnccl.so.2").is_file());
    let (fake, _, first, text, fix) = with_older_nccl(&real, &old, "torch");
    assert!(
        text.ends_with(&format!(
            "`import torch` fails with `undefined symbol: {first}`"
        )),
        "{text}"
    );
    assert!(fix.starts_with("pip install 'nvidia-nccl-cu"), "{fix}");
    let err = import_torch(&fake, None).expect_err("import torch should fail");
    assert!(
        err.ends_with(&format!("libtorch_cuda.so: undefined symbol: {first}")),
        "doctor said {first}; python said: {err}"
    );
    let _ = std::fs::remove_dir_all(&fake);
}

/// The code that makes CuPy load NCCL (its NCCL extension).
const IMPORT_CUPY_NCCL: &str = "from cupy.cuda import nccl";

/// CuPy loads its venv's wheel by path (cuda.pathfinder, site-packages
/// first) before its NCCL extension, which has no rpath: an older NCCL
/// first on `LD_LIBRARY_PATH` reaches it no more than torch. Doctor says
/// which file CuPy maps, the interpreter maps exactly that, and nothing is
/// a problem (exit 0).
#[test]
fn an_older_nccl_on_ld_library_path_reaches_no_cupy() {
    let Some(w) = common::wheels() else { return };
    let Some(venv) = venv("NCCL_FIND_CUPY_PYTHON") else {
        return;
    };
    let older = w.join("nvidia_nccl_cu11-2.13.4/nvidia/nccl/lib");
    for ld in [None, Some(older.as_path())] {
        let (out, json) = doctor(&venv, ld);
        let entry = entry(&json, "cupy");
        let (mapped, err) = python_maps(&venv, IMPORT_CUPY_NCCL, ld);
        let real = mapped.unwrap_or_else(|| panic!("CuPy mapped no libnccl: {err}"));
        maps_its_own(&venv, &real, &out, &json, entry, &format!("{ld:?}"));
        assert!(
            entry["how"]
                .as_str()
                .unwrap()
                .starts_with("cuda.pathfinder, from "),
            "{entry}"
        );
    }
}

/// CuPy beside an NCCL older than what its NCCL extension imports (the
/// venv's `nvidia/nccl` is the 2.13.4 wheel; the extension imports
/// functions of 2.14 and 2.18): doctor names the first missing function as
/// the loader does, says that CuPy goes on without NCCL, gives CuPy's own
/// requirement as the fix, and exits 1. The interpreter warns with exactly
/// that `undefined symbol`, and CuPy's own fix.
#[test]
fn a_cupy_whose_nccl_is_too_old_goes_without_nccl_as_doctor_says() {
    let Some(w) = common::wheels() else { return };
    let Some(real) = venv("NCCL_FIND_CUPY_PYTHON") else {
        return;
    };
    let old = w.join("nvidia_nccl_cu11-2.13.4/nvidia/nccl");
    let (fake, entry, first, text, fix) = with_older_nccl(&real, &old, "cupy");
    assert!(
        text.ends_with(&format!(
            "its NCCL extension fails to load (`undefined symbol: {first}`): CuPy warns \
             \"nccl library could not be loaded\", and cupy.cuda.nccl has no communicator"
        )),
        "{text}"
    );
    let requires = entry["requires"].as_str().expect("CuPy's requirement");
    assert_eq!(
        fix,
        format!(
            "pip install '{requires}' (what cupy {} asks for)",
            entry["version"].as_str().unwrap()
        )
    );
    // The real interpreter: the import goes on, with CuPy's warning naming
    // the same function, and CuPy's own fix naming the same requirement.
    let (_, err) = python_maps(&fake, IMPORT_CUPY_NCCL, None);
    assert!(err.contains("nccl library could not be loaded"), "{err}");
    assert!(
        err.contains("/cupy_backends/cuda/libs/nccl.cpython-")
            && err.contains(&format!(".so: undefined symbol: {first})")),
        "doctor said {first}; python said: {err}"
    );
    assert!(
        err.contains(&format!("pip install \"{requires}\"")),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&fake);
}

/// `doctor --python <torch's venv>` run where another NCCL is selected (an
/// `NCCL_HOME` naming the 2.21.5 wheel, as another venv's command may
/// select): the settings are judged by the rules of the NCCL torch maps,
/// and doctor says so, naming both.
#[test]
fn doctor_judges_the_settings_by_the_nccl_torch_runs() {
    let Some(w) = common::wheels() else { return };
    let Some(venv) = venv("NCCL_FIND_TORCH_PYTHON") else {
        return;
    };
    let other = w.join("nvidia_nccl_cu12-2.21.5/nvidia/nccl");
    let facts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/facts-healthy.json");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
    for v in STEERING {
        cmd.env_remove(v);
    }
    let out = cmd
        .args(["doctor", "--json", "--host-facts"])
        .arg(&facts)
        .arg("--python")
        .arg(&venv)
        .env("NCCL_HOME", &other)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let torch = entry(&json, "torch");
    let real = import_torch(&venv, None).unwrap();
    assert_eq!(torch["library"].as_str(), real.to_str());
    let version = torch["nccl_version"].as_str().unwrap();
    let texts: Vec<&str> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    let selected = std::fs::canonicalize(other.join("lib/libnccl.so.2")).unwrap();
    let want = format!(
        "the settings below are judged by the rules of torch {}'s NCCL {version} ({}), the NCCL \
         the job will run, not by the selected NCCL 2.21.5 ({})",
        torch["version"].as_str().unwrap(),
        real.display(),
        selected.display()
    );
    assert!(texts.contains(&want.as_str()), "{texts:#?}");
    let rule = format!("NCCL {version}'s default rule");
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("NCCL would use eth0") && t.contains(&rule)),
        "{texts:#?}"
    );
}

/// The command pip installed into a venv that is not active (its
/// `bin/nccl-find` run by path): doctor's Python section judges that venv,
/// as its NCCL section does, and says so; not the python on PATH.
#[test]
fn the_pip_installed_command_judges_its_own_venv_when_not_active() {
    let Some(venv) = venv("NCCL_FIND_CUPY_PYTHON") else {
        return;
    };
    let copy = venv
        .join("bin")
        .join(format!("nccl-find-test-{}", std::process::id()));
    std::fs::copy(env!("CARGO_BIN_EXE_nccl-find"), &copy).unwrap();
    let facts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/facts-healthy.json");
    let out = Command::new(&copy)
        .args(["doctor", "--json", "--host-facts"])
        .arg(&facts)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&copy);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        json["python"]["found_by"], "the venv nccl-find is installed in",
        "{json}"
    );
    assert_eq!(
        json["python"]["prefix"].as_str().map(Path::new),
        Some(venv.as_path()),
        "{json}"
    );
    entry(&json, "cupy");
}
