//! What a facts file, a shared directory or another local user can make
//! nccl-find do: nothing beyond what it says. Each test fails without the
//! defence it names (docs/reliability.md has a row for each).

mod common;
use common::scratch;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

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
    let texts = findings(&json, "NCCL variables");
    assert!(texts.contains(&note), "{texts:#?}");
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
    let (_, json) = doctor_json(
        &newest_wheel(&w),
        &[
            ("NCCL_DEBUG", Path::new("INFO")),
            ("NCCL_DEBUG_FILE", &victim),
        ],
    );
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
        .env("NCCL_NET_PLUGIN", &by_path)
        .env("NCCL_TUNER_PLUGIN", "libtuner-mine.so")
        .env("LD_LIBRARY_PATH", &lib_dir)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    for line in [
        format!(
            "  ok       NCCL loads the network plugin {}\n",
            by_path.display()
        ),
        format!(
            "  note     NCCL will load the tuner plugin {}\n",
            by_name.display()
        ),
    ] {
        assert!(report.contains(&line), "no {line:?} in:\n{report}");
    }
    assert!(!report.contains("not on the loader's path"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--cmake-config DIR` for the tarball fixture: exit status, stdout, stderr.
fn cmake_config(dir: &Path) -> (i32, String, String) {
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/trees/tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64");
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .arg("--cmake-config")
        .arg(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("NCCL_HOME", &tarball)
        .output()
        .unwrap();
    common::text(&out)
}

/// `--cmake-config` writes CMake code that `find_package` runs: a link
/// planted at DIR is not followed (the file it leads to is untouched), a
/// DIR another user owns or can write is refused, naming why; a good DIR
/// gets exactly the two files, each said, and no temporary file is left.
#[test]
fn cmake_config_writes_only_into_a_directory_of_the_users() {
    let base = scratch("cmake");
    std::fs::set_permissions(&base, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let victim = base.join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("NCCLConfig.cmake"), "# the victim's\n").unwrap();
    let link = base.join("planted");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let (code, out, err) = cmake_config(&link);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(
        err,
        format!(
            "nccl-find: --cmake-config: {} is a symbolic link, which another user may have planted: \
             find_package runs the CMake code written there, so no other user may change it. Choose a \
             directory of your own (./build/nccl, say)\n",
            link.display()
        )
    );
    assert_eq!(
        std::fs::read_to_string(victim.join("NCCLConfig.cmake")).unwrap(),
        "# the victim's\n"
    );
    let open = base.join("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let (code, _, err) = cmake_config(&open.join("pkg"));
    assert_eq!(code, 1);
    assert!(
        err.starts_with(&format!(
            "nccl-find: --cmake-config: {} has mode 777: others can write in it: find_package runs",
            open.display()
        )),
        "{err}"
    );
    assert!(!open.join("pkg").exists());
    if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
        let theirs = base.join("theirs");
        std::fs::create_dir_all(&theirs).unwrap();
        assert!(Command::new("chown")
            .args(["65534"])
            .arg(&theirs)
            .status()
            .unwrap()
            .success());
        let (code, _, err) = cmake_config(&theirs);
        assert_eq!(code, 1);
        assert!(
            err.contains(&format!(
                "{} belongs to user 65534, not to you (user 0) or root",
                theirs.display()
            )),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);
    }
    let good = base.join("good");
    let (code, out, err) = cmake_config(&good);
    assert_eq!(code, 0, "{err}");
    let wrote: Vec<&str> = out.lines().filter(|l| l.starts_with("wrote ")).collect();
    assert_eq!(
        wrote,
        [
            format!("wrote {}", good.join("NCCLConfig.cmake").display()),
            format!("wrote {}", good.join("NCCLConfigVersion.cmake").display()),
        ]
    );
    let mut names: Vec<String> = std::fs::read_dir(&good)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["NCCLConfig.cmake", "NCCLConfigVersion.cmake"]);
    let _ = std::fs::remove_dir_all(&base);
}

/// `doctor` with only `vars` and `NCCL_HOME` as its environment, judged
/// with the healthy host's facts: (exit status, the JSON report).
fn doctor_json(nccl: &Path, vars: &[(&str, &Path)]) -> (i32, Value) {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/facts-healthy.json");
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .args(["doctor", "--json", "--host-facts"])
        .arg(&golden)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("NCCL_HOME", nccl)
        .envs(vars.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), json)
}

/// The texts of doctor's findings in `area`.
fn findings(json: &Value, area: &str) -> Vec<String> {
    json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["area"] == area)
        .map(|f| f["text"].as_str().unwrap().to_string())
        .collect()
}

/// The variables doctor says are in force, as `NAME=value (source)`.
fn in_force(json: &Value) -> Vec<String> {
    findings(json, "NCCL variables")
}

/// NCCL 2.21.5 has no `NCCL_CONF_FILE` and takes `~` from the user
/// database, not `HOME`: a setting in either is not in force there, and
/// doctor does not say it is. NCCL 2.32.3 reads both, as its own answer
/// (the Parameter API) shows.
#[test]
fn configuration_files_are_read_by_the_rules_of_the_nccl_that_runs() {
    let Some(w) = common::wheels() else { return };
    let dir = scratch("conf");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join(".nccl.conf"),
        "NCCL_SOCKET_IFNAME=nosuchif0\nNCCL_SET_THREAD_NAME=1\n",
    )
    .unwrap();
    let named = dir.join("named.conf");
    std::fs::write(&named, "NCCL_IB_HCA=mlx5_9\n").unwrap();
    let old = w.join("nvidia_nccl_cu12-2.21.5/nvidia/nccl");
    let (_, json) = doctor_json(&old, &[("HOME", &home)]);
    let said = in_force(&json);
    assert!(
        !said.iter().any(|t| t.contains("nosuchif0")),
        "2.21.5 reads ~/.nccl.conf from the user database's home, not HOME: {said:#?}"
    );
    let (_, json) = doctor_json(&old, &[("NCCL_CONF_FILE", &named)]);
    let said = in_force(&json);
    assert!(
        !said.iter().any(|t| t.contains("mlx5_9")),
        "2.21.5 has no NCCL_CONF_FILE: {said:#?}"
    );
    // The newest reads HOME's file, and the file NCCL_CONF_FILE names.
    let new = newest_wheel(&w);
    let (_, json) = doctor_json(&new, &[("HOME", &home)]);
    let line = format!(
        "NCCL_SOCKET_IFNAME=nosuchif0 from {}/.nccl.conf",
        home.display()
    );
    assert!(
        in_force(&json).iter().any(|t| t.starts_with(&line)),
        "{:#?}",
        in_force(&json)
    );
    // NCCL itself read that file (NCCL_SOCKET_IFNAME is no listed
    // parameter; NCCL_SET_THREAD_NAME is).
    let params = json["nccl_parameters"]["parameters"].as_array().unwrap();
    let named_thread = params
        .iter()
        .find(|p| p["name"] == "NCCL_SET_THREAD_NAME")
        .unwrap();
    assert_eq!(named_thread["value"], "TRUE", "{named_thread}");
    let (_, json) = doctor_json(&new, &[("NCCL_CONF_FILE", &named)]);
    let line = format!("NCCL_IB_HCA=mlx5_9 from {}", named.display());
    assert!(
        in_force(&json).iter().any(|t| t.starts_with(&line)),
        "{:#?}",
        in_force(&json)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A FIFO (or /dev/zero) as `NCCL_CONF_FILE` would hang NCCL at start: doctor
/// says so at once, as a problem, and loads no NCCL that would hang on it
/// (before: 30 s, then "loading it took longer than 30 s").
#[test]
fn a_configuration_file_that_is_no_regular_file_is_skipped_at_once() {
    let Some(w) = common::wheels() else { return };
    let dir = scratch("fifo");
    let fifo = dir.join("conf.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for (file, kind) in [
        (fifo.as_path(), "a FIFO (named pipe)"),
        (Path::new("/dev/zero"), "a character device"),
    ] {
        let started = std::time::Instant::now();
        let (code, json) = doctor_json(&newest_wheel(&w), &[("NCCL_CONF_FILE", file)]);
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(10), "{took:?}");
        assert_eq!(code, 1);
        let problem = json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["level"] == "problem")
            .expect("a problem");
        assert_eq!(
            problem["text"],
            format!(
                "NCCL's configuration file {}: it is {kind}, not a regular file: NCCL would hang \
                 reading it when it starts",
                file.display()
            )
        );
        assert_eq!(
            problem["fix"],
            "remove it, or point NCCL_CONF_FILE at a regular file"
        );
        assert_eq!(json["nccl_parameters"]["asked"], false);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An NCCL whose library another user owns (or could change) is judged
/// from its file, never loaded: its constructor would run as the user of
/// doctor (root here). The same for `--root`, another system's files.
#[test]
fn doctor_never_loads_a_library_another_user_could_change() {
    let root_user = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    if !root_user {
        eprintln!("skipped: giving a file to another user needs root");
        return;
    }
    let dir = scratch("not-mine");
    let home = dir.join("nccl");
    std::fs::create_dir_all(home.join("include")).unwrap();
    std::fs::create_dir_all(home.join("lib")).unwrap();
    std::fs::write(
        home.join("include/nccl.h"),
        "#define NCCL_MAJOR 2\n#define NCCL_MINOR 32\n#define NCCL_PATCH 3\n#define NCCL_SUFFIX \"\"\n\
         #define NCCL_VERSION_CODE 23203\ntypedef enum { ncclSuccess = 0 } ncclResult_t;\n\
         ncclResult_t ncclGetVersion(int *version);\n",
    )
    .unwrap();
    let marker = dir.join("constructor-ran");
    let src = dir.join("nccl.c");
    std::fs::write(
        &src,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void mark(void) {{\n\
             FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"ran\", f); fclose(f); }}\n}}\n\
             const char *nccl_version_text = \"NCCL version 2.32.3+cuda12.9\";\n\
             const char *nccl_names[] = {{\"NCCL_DEBUG\", \"NCCL_DEBUG_SUBSYS\", \"NCCL_SOCKET_IFNAME\", \
             \"NCCL_IB_HCA\", \"NCCL_IB_DISABLE\", \"NCCL_P2P_DISABLE\", \"NCCL_SHM_DISABLE\", \
             \"NCCL_NET_PLUGIN\", \"NCCL_ALGO\", \"NCCL_PROTO\", \"NCCL_RAS_ENABLE\", \"NCCL_NVLS_ENABLE\"}};\n\
             int ncclGetVersion(int *v) {{ *v = 23203; return 0; }}\n\
             int ncclParamDumpAll(void) {{ return 0; }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let lib = home.join("lib/libnccl.so.2.32.3");
    let ok = Command::new("cc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("cc is needed");
    assert!(ok.success());
    std::os::unix::fs::symlink("libnccl.so.2.32.3", home.join("lib/libnccl.so.2")).unwrap();
    std::os::unix::fs::symlink("libnccl.so.2", home.join("lib/libnccl.so")).unwrap();
    let owned_by = |user: &str| {
        let chown = Command::new("chown").arg(user).arg(&lib).status().unwrap();
        assert!(chown.success());
        let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
            .args(["doctor", "--json"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("NCCL_HOME", &home)
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    // Another user's file, in a directory of root's.
    let json = owned_by("65534:65534");
    assert!(!marker.exists(), "another user's library was loaded");
    let why = json["nccl_parameters"]["why"].as_str().unwrap_or("");
    assert!(
        why.contains("libnccl.so.2.32.3 belongs to user 65534, not to you (user 0) or root")
            && why.ends_with(
                "a library another user could change is never loaded: its code would run as you"
            ),
        "{json}"
    );
    assert_eq!(json["nccl_parameters"]["asked"], false);
    // Root's again: it is loaded (the check is the owner, not the path).
    owned_by("0:0");
    assert!(marker.exists(), "root's own library was not asked");
    // Another system's root (--root): root's own file there is not run.
    std::fs::remove_file(&marker).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .arg("--root")
        .arg(&dir)
        .args(["doctor", "--json"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("NCCL_HOME", "/nccl")
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(
        !marker.exists(),
        "a library in another system's root was loaded"
    );
    assert_eq!(
        json["nccl_parameters"],
        json!({"asked": false, "why": "its library lies in another system's root (--root), which is judged, never run"}),
        "{json}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
