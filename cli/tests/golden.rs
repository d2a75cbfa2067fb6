//! Golden outputs of the `nccl-find` command on fixture trees, compared
//! exactly. The host-dependent parts are injected: the filesystem root
//! (`--root`), the environment (cleared, then set), and for `doctor` the
//! host's facts (`--host-facts`). The fixtures' absolute location is written
//! as `<FIXTURES>`. `UPDATE_GOLDEN=1 cargo test` rewrites the files.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/trees")).unwrap()
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Runs nccl-find on a fixture tree; returns (exit code, stdout, stderr)
/// with the fixtures' location replaced.
fn run(tree: &str, args: &[&str], vars: &[(&str, &str)]) -> (i32, String, String) {
    let root = fixtures().join(tree);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let at = if all.first().map(String::as_str) == Some("doctor") {
        1
    } else {
        0
    };
    all.splice(at..at, ["--root".to_string(), root.display().to_string()]);
    if at == 0 {
        all.extend([
            "--target".to_string(),
            "x86_64-unknown-linux-gnu".to_string(),
        ]);
    }
    cmd.args(&all)
        .env_clear()
        .envs(vars.iter().copied())
        .env("TARGET", "x86_64-unknown-linux-gnu");
    let out = cmd.output().unwrap();
    let clean = |b: &[u8]| {
        String::from_utf8_lossy(b).replace(&fixtures().display().to_string(), "<FIXTURES>")
    };
    (
        out.status.code().unwrap_or(-1),
        clean(&out.stdout),
        clean(&out.stderr),
    )
}

fn check(name: &str, got: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} is missing; UPDATE_GOLDEN=1", path.display()));
    if want != got {
        panic!("{name} differs from the golden file.\n--- want\n{want}\n--- got\n{got}");
    }
}

const VENV: (&str, &str) = ("VIRTUAL_ENV", "/opt/torch/.venv");
const TARBALL: (&str, &str) = ("NCCL_HOME", "/opt/nccl_2.21.5-1+cuda12.4_x86_64");

#[test]
fn print_golden() {
    let (code, out, err) = run("gpu-image", &["--print"], &[VENV]);
    assert_eq!((code, err.as_str()), (0, ""));
    check("print-gpu-image.txt", &out);
    let (code, out, err) = run("empty", &[], &[]);
    assert_eq!(code, 1);
    assert_eq!(err, "nccl-find: NCCL was not found: install it (pip install nvidia-nccl-cu12 in the environment you build in, or apt install libnccl2 libnccl-dev), or point NCCL_HOME at an install.\n");
    check("print-empty.txt", &out);
    let (code, out, _) = run(
        "nccl1-and-nccl2",
        &["--print"],
        &[("CONDA_PREFIX", "/opt/anaconda3")],
    );
    assert_eq!(code, 0);
    check("print-nccl1-and-nccl2.txt", &out);
}

#[test]
fn json_golden() {
    let (code, out, _) = run("gpu-image", &["--json"], &[VENV]);
    assert_eq!(code, 0);
    check("json-gpu-image.json", &out);
    let (code, out, _) = run("dpkg-runtime-only", &["--json"], &[]);
    assert_eq!(code, 1);
    check("json-dpkg-runtime-only.json", &out);
}

#[test]
fn pkg_config_style_golden() {
    let mut all = String::new();
    for (tree, args, vars) in [
        ("tarball", vec!["--modversion"], vec![TARBALL]),
        ("tarball", vec!["--cflags"], vec![TARBALL]),
        ("tarball", vec!["--libs"], vec![TARBALL]),
        ("tarball", vec!["--cflags", "--libs"], vec![TARBALL]),
        ("tarball", vec!["--env"], vec![TARBALL]),
        ("wheel-venv", vec!["--libs"], vec![("VIRTUAL_ENV", "/venv")]),
        ("wheel-venv", vec!["--env"], vec![("VIRTUAL_ENV", "/venv")]),
        ("dpkg", vec!["--libs", "--static"], vec![]),
        ("empty", vec!["--libs"], vec![]),
    ] {
        let (code, out, err) = run(tree, &args, &vars);
        all.push_str(&format!(
            "$ {vars:?} nccl-find {}  # {tree}\nexit {code}\n{out}{err}\n",
            args.join(" ")
        ));
    }
    check("pkg-config-style.txt", &all);
}

#[test]
fn doctor_golden() {
    let facts = |f: &str| golden_dir().join(f).display().to_string();
    let troubled = facts("facts-troubled.json");
    let (code, out, err) = run(
        "gpu-image",
        &["doctor", "--host-facts", &troubled],
        &[
            VENV,
            ("NCCL_SOCKET_IFNAME", "eth9"),
            ("NCCL_IB_DISABLE", "1"),
            ("NCCL_VERSION", "2.28.3-1"),
            ("NCCL_FOO", "x"),
            ("NCCL_RAS_ENABLE", "0"),
            ("NCCL_RAS_ADDR", "0.0.0.0:28028"),
        ],
    );
    assert_eq!((code, err.as_str()), (1, ""));
    check("doctor-troubled.txt", &out);
    let healthy = facts("facts-healthy.json");
    let (code, out, _) = run(
        "dpkg",
        &["doctor", "--host-facts", &healthy],
        &[("NCCL_DEBUG", "WARN")],
    );
    assert_eq!(code, 0, "{out}");
    check("doctor-healthy.txt", &out);
    let (code, out, _) = run(
        "dpkg",
        &["doctor", "--json", "--host-facts", &healthy],
        &[("NCCL_DEBUG", "WARN")],
    );
    assert_eq!(code, 0);
    check("doctor-healthy.json", &out);
    // A distro nccl.pc whose prefix points where there is no NCCL: doctor
    // warns C and CMake users, and exits 1.
    let (code, out, _) = run(
        "dpkg-wrong-pc",
        &["doctor", "--host-facts", &healthy],
        &[("NCCL_DEBUG", "WARN")],
    );
    assert_eq!(code, 1, "{out}");
    check("doctor-wrong-pc.txt", &out);
    // A broken facts file is a usage error that names the file.
    let (code, _, err) = run(
        "dpkg",
        &["doctor", "--host-facts", "/nonexistent.json"],
        &[],
    );
    assert_eq!(code, 2);
    assert!(
        err.starts_with("nccl-find: cannot read host facts from /nonexistent.json: "),
        "{err}"
    );
}

/// The `NCCL_*` variables come with the host's facts when the facts file has
/// `env`, which then stands for the whole environment: the process's own
/// `NCCL_*` variables are not read.
#[test]
fn doctor_takes_nccl_variables_from_the_facts_file() {
    let healthy = std::fs::read_to_string(golden_dir().join("facts-healthy.json")).unwrap();
    let mut facts: serde_json::Value = serde_json::from_str(&healthy).unwrap();
    facts["env"] = serde_json::json!({"NCCL_SOCKET_IFNAME": "eth9"});
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("doctor-facts-with-env.json");
    std::fs::write(&file, facts.to_string()).unwrap();
    let (code, out, err) = run(
        "dpkg",
        &["doctor", "--host-facts", &file.display().to_string()],
        &[("NCCL_DEBUG", "WARN"), ("NCCL_SOCKET_IFNAME", "eth0")],
    );
    assert_eq!((code, err.as_str()), (1, ""), "{out}");
    let from = out.find("\nNCCL variables:").expect(&out);
    let to = out.find("\nRDMA:").expect(&out);
    assert_eq!(
        &out[from..to],
        "
NCCL variables:
  note     NCCL_SOCKET_IFNAME=eth9 (the network interfaces NCCL may use: prefixes, ^ to exclude, = for exact names)
  note     NCCL_DEBUG is unset, so NCCL says little when it fails
           fix: NCCL_DEBUG=WARN (or INFO) when something goes wrong
  note     NCCL 2.28.3: its RAS service has crashed jobs by itself: NVIDIA/nccl#1996 (seen on 2.27.7): a segfault in rasMsgHandlePeersUpdate, with no question asked; every release from 2.26.2 to 2.28.9 has that code
           fix: where jobs die in RAS code, set NCCL_RAS_ENABLE=0 (then `nccl-find ras` cannot ask a job that hangs), or run a newer NCCL

Network:
  ok       interfaces: lo 127.0.0.1/8; eth0 10.0.0.5/24 fe80::1/64
  problem  NCCL would find no interface: NCCL_SOCKET_IFNAME=eth9 matches none of the interfaces NCCL lists (lo, eth0)
           fix: NCCL fails with `no socket interface found`: set NCCL_SOCKET_IFNAME to one of eth0 (lo reaches no other node)
  ok       reverse name lookups of this host's 2 address(es) answer at once (slowest: 10.0.0.5, 2 ms)
"
    );
}

#[test]
fn json_has_the_documented_keys() {
    let (_, out, _) = run("gpu-image", &["--json"], &[VENV]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["found"], true);
    let s = &v["selected"];
    for k in [
        "version",
        "version_code",
        "cuda_version",
        "include_dir",
        "lib_dir",
        "library",
        "static_library",
        "source",
    ] {
        assert!(s.get(k).is_some(), "selected.{k}");
    }
    assert_eq!(s["version"], "2.28.9");
    assert_eq!(s["version_code"], 22809);
    assert_eq!(s["cuda_version"], "13.0");
    assert_eq!(s["static_library"], serde_json::Value::Null);
    assert_eq!(v["schema"], 2);
    assert_eq!(s["source"]["kind"], "pip");
    assert_eq!(
        s["source"]["display"],
        "pip wheel in /opt/torch/.venv/lib/python3.12/site-packages (VIRTUAL_ENV)"
    );
    let cands = v["candidates"].as_array().unwrap();
    assert_eq!(cands.len(), 2);
    for c in cands {
        for k in ["path", "version", "source", "accepted", "reason"] {
            assert!(c.get(k).is_some(), "candidates[].{k}");
        }
        assert!(c["source"]["kind"].is_string() && c["source"]["display"].is_string());
    }
    assert_eq!(cands[1]["accepted"], true);
    assert_eq!(cands[1]["source"]["kind"], "system");
    assert_eq!(
        cands[1]["reason"],
        "pip comes earlier in the search order than system"
    );
    assert_eq!(v["loader"]["pick"]["version"], "2.28.3");
    let env = v["env"].as_array().unwrap();
    assert!(env
        .iter()
        .any(|e| e["name"] == "VIRTUAL_ENV" && e["value"] == "/opt/torch/.venv"));
    assert!(env
        .iter()
        .any(|e| e["name"] == "NCCL_HOME" && e["value"].is_null()));
}

#[test]
fn exit_codes() {
    let code = |tree: &str, args: &[&str], vars: &[(&str, &str)]| run(tree, args, vars).0;
    assert_eq!(code("dpkg", &[], &[]), 0);
    assert_eq!(code("empty", &[], &[]), 1);
    assert_eq!(code("dpkg", &["--json"], &[]), 0);
    assert_eq!(code("empty", &["--json"], &[]), 1);
    assert_eq!(code("dpkg", &["--modversion"], &[]), 0);
    assert_eq!(code("empty", &["--cflags"], &[]), 1);
    // --atleast-version alone answers with its exit status only.
    assert_eq!(
        run("dpkg", &["--atleast-version", "2.28"], &[]),
        (0, String::new(), String::new())
    );
    let (c, out, err) = run("dpkg", &["--atleast-version", "2.29"], &[]);
    assert_eq!((c, out.as_str()), (1, ""));
    assert_eq!(
        err,
        "nccl-find: pip install -U 'nvidia-nccl-cu13>=2.29.2', or point NCCL_HOME at an install of \
         NCCL 2.29.2 or newer: no install here satisfies the requirement >=2.29.0 (the newest here is \
         NCCL 2.28.3).\n"
    );
    assert_eq!(code("dpkg", &["--json", "--env"], &[]), 2);
    assert_eq!(code("dpkg", &["--bogus"], &[]), 2);
    assert_eq!(code("dpkg", &["--color", "sometimes"], &[]), 2);
}

#[test]
fn colour_only_when_asked_or_on_a_terminal() {
    let (_, plain, _) = run("dpkg", &["--print"], &[]);
    assert!(!plain.contains('\x1b'));
    let (_, coloured, _) = run("dpkg", &["--print", "--color", "always"], &[]);
    assert!(
        coloured.contains("\x1b[1;32mSelected: NCCL 2.28.3"),
        "{coloured}"
    );
    // Same text once the escapes are gone.
    let stripped = coloured
        .replace("\x1b[1;32m", "")
        .replace("\x1b[1m", "")
        .replace("\x1b[33m", "")
        .replace("\x1b[31m", "")
        .replace("\x1b[0m", "");
    assert_eq!(stripped, plain);
}

/// doctor's verdict on the run-time loader's pick is the library's
/// (`Loader::verdict`): a note in each case, since whether a program fails
/// depends on what it uses (the Python area says it for the packages that
/// will run); an older minor says that it fails for what that lacks.
#[test]
fn doctor_judges_the_loaders_pick_as_the_library_does() {
    let healthy = golden_dir()
        .join("facts-healthy.json")
        .display()
        .to_string();
    let home = "/opt/nccl_2.21.5-1+cuda12.4_x86_64";
    for (copy, expect, status) in [
        (
            fixtures().join(format!("tarball{home}/lib/libnccl.so.2.21.5")),
            "  note     the run-time loader picks /other/lib/libnccl.so.2, another copy of NCCL 2.21.5: \
             it works, but it is not the file nccl-find inspected\n           fix: put ",
            0,
        ),
        // A newer minor runs programs built against older headers: a note.
        (
            fixtures().join("dpkg/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3"),
            "  note     the run-time loader picks /other/lib/libnccl.so.2 (NCCL 2.28.3), not the selected \
             NCCL 2.21.5: 2.28.3 is newer, and NCCL runs programs built against older versions\n           fix: put ",
            0,
        ),
        // An older minor lacks what a program may call: a note that says
        // so, and how the program's rpath wins.
        (
            fixtures().join("cuda/usr/local/cuda-12.4/targets/x86_64-linux/lib/libnccl.so.2.18.5"),
            "  note     a program linked against the selected NCCL 2.21.5 with no rpath of its own would \
             map /other/lib/libnccl.so.2 (NCCL 2.18.5): an older minor version, so it fails with `undefined \
             symbol` if it uses what that lacks\n           fix: nccl_find::emit_rpath_from_dep in the program's \
             build script (a DT_RPATH wins over LD_LIBRARY_PATH), or put ",
            0,
        ),
    ] {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "loader-pick-{}",
            copy.file_name().unwrap().to_string_lossy()
        ));
        let _ = std::fs::remove_dir_all(&root);
        let ok = Command::new("cp")
            .arg("-a")
            .arg(fixtures().join("tarball"))
            .arg(&root)
            .status()
            .unwrap();
        assert!(ok.success());
        std::fs::create_dir_all(root.join("other/lib")).unwrap();
        std::fs::copy(&copy, root.join("other/lib/libnccl.so.2")).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
            .args(["doctor", "--root", root.to_str().unwrap(), "--host-facts", &healthy])
            .env_clear()
            .env("TARGET", "x86_64-unknown-linux-gnu")
            .env("NCCL_HOME", home)
            .env("LD_LIBRARY_PATH", "/other/lib")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        // The fix names the library's real directory (under the root).
        let real = std::fs::canonicalize(&root).unwrap();
        let tail = if status == 0 && expect.contains("emit_rpath_from_dep") {
            "first on LD_LIBRARY_PATH\n"
        } else {
            "first on LD_LIBRARY_PATH, or use an rpath\n"
        };
        let fix = format!("{}{home}/lib {tail}", real.display());
        assert!(text.contains(&format!("{expect}{fix}")), "{text}");
        assert_eq!(out.status.code(), Some(status), "{text}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}

/// NVIDIA's CUDA image (dpkg NCCL 2.28.3) with PyTorch's venv (the 2.28.9
/// wheel) is a healthy machine: the loader's pick has the same API.
#[test]
fn doctor_passes_a_stock_cuda_image_with_a_torch_venv() {
    let healthy = golden_dir()
        .join("facts-healthy.json")
        .display()
        .to_string();
    let (code, out, err) = run(
        "gpu-image",
        &["doctor", "--host-facts", &healthy],
        &[VENV, ("NCCL_DEBUG", "WARN")],
    );
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(
        out.contains(
            "  note     the run-time loader picks /usr/lib/x86_64-linux-gnu/libnccl.so.2 (NCCL 2.28.3), \
             not the selected NCCL 2.28.9: the same minor version (2.28) has the same API, so programs \
             run, with 2.28.3's fixes\n"
        ),
        "{out}"
    );
    assert!(!out.contains("problem "), "{out}");
}

/// A source build's nccl.pc (prefix=/usr/local): doctor names the tree
/// that holds the NCCL and the variable that uses it.
#[test]
fn doctor_points_a_source_builds_nccl_pc_at_its_tree() {
    let healthy = golden_dir()
        .join("facts-healthy.json")
        .display()
        .to_string();
    let (code, out, err) = run(
        "source-build",
        &["doctor", "--host-facts", &healthy],
        &[
            ("PKG_CONFIG_PATH", "/src/nccl/build/lib/pkgconfig"),
            ("NCCL_HOME", "/src/nccl/build"),
            ("NCCL_DEBUG", "WARN"),
        ],
    );
    assert_eq!((code, err.as_str()), (1, ""), "{out}");
    assert!(
        out.contains(
            "  problem  /src/nccl/build/lib/pkgconfig/nccl.pc says prefix=/usr/local \
             (-I/usr/local/include -L/usr/local/lib), where there is no NCCL: C and CMake builds \
             that ask `pkg-config --cflags --libs nccl` get wrong flags and fail."
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "           fix: the tree it sits in, /src/nccl/build, holds an NCCL \
             (`pkg-config --define-prefix` finds it): NCCL_HOME=/src/nccl/build uses it; or fix the \
             prefix= line of that file\n"
        ),
        "{out}"
    );
}

/// NCCL's choice of interface follows the version doctor finds: before
/// 2.28.3 libvirt's bridge is taken like any NIC and interfaces that are
/// not running count; from 2.28.3 both are skipped.
#[test]
fn doctor_follows_the_interface_rule_of_the_nccl_it_finds() {
    let addr = |ip: &str| serde_json::json!({"ip": ip, "prefix": 24, "routed": true});
    let facts = serde_json::json!({
        "driver": {"version": 13000, "gpus": 1},
        "shm_bytes": 1u64 << 30,
        "interfaces": [
            {"name": "lo", "running": true, "addrs": [addr("127.0.0.1")]},
            {"name": "virbr0", "running": true, "addrs": [addr("192.168.122.1")]},
            {"name": "eth0", "running": false, "addrs": [addr("10.0.0.5")]},
            {"name": "eth1", "running": true, "addrs": [addr("10.0.1.5")]},
        ],
    });
    let file = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("facts-virbr-{}.json", std::process::id()));
    std::fs::write(&file, facts.to_string()).unwrap();
    let network = |out: &str| -> String {
        out.split("\nNetwork:\n")
            .nth(1)
            .unwrap()
            .split("\n\n")
            .next()
            .unwrap()
            .to_string()
    };
    let f = file.display().to_string();
    let (code, out, _) = run(
        "wheel-venv",
        &["doctor", "--host-facts", &f],
        &[("VIRTUAL_ENV", "/venv")],
    );
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        network(&out),
        "  ok       interfaces: lo 127.0.0.1/24; virbr0 192.168.122.1/24; eth0 (not running) 10.0.0.5/24; eth1 10.0.1.5/24
  ok       NCCL would use virbr0 (NCCL 2.21.5's default rule takes anything but docker* and lo when there is no ib*)
  problem  virbr0 is libvirt's bridge, which other nodes cannot reach; NCCL 2.21.5's default rule does not skip virbr* (NCCL 2.28.3 and later do)
           fix: NCCL_SOCKET_IFNAME==eth1 (the real NIC), or NCCL_SOCKET_IFNAME=^docker,virbr,lo
  note     eth0 is not running (down, or no link): NCCL 2.21.5's default rule can still take it (NCCL 2.28.3 and later skip interfaces that are not running)"
    );
    let (code, out, _) = run("gpu-image", &["doctor", "--host-facts", &f], &[VENV]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        network(&out),
        "  ok       interfaces: lo 127.0.0.1/24; virbr0 192.168.122.1/24; eth0 (not running) 10.0.0.5/24; eth1 10.0.1.5/24
  ok       NCCL would use eth1 (NCCL 2.28.9's default rule takes anything but docker*, lo and virbr* when there is no ib*)
  note     virbr0 is there: NCCL 2.28.9's default rule skips it, unless NCCL_SOCKET_IFNAME lets it in
  note     eth0 is not running (down, or no link): NCCL 2.28.9's default rule skips it"
    );
    // Loopback chosen by hand is named once, as unreachable from other
    // nodes; it needs no route, so no `No route to host` line follows.
    let unrouted = |ip: &str| serde_json::json!({"ip": ip, "prefix": 8, "routed": false});
    let facts = serde_json::json!({
        "driver": {"version": 13000, "gpus": 1},
        "shm_bytes": 1u64 << 30,
        "interfaces": [
            {"name": "lo", "running": true, "addrs": [unrouted("127.0.0.1")]},
            {"name": "eth0", "running": true, "addrs": [addr("10.0.0.5")]},
        ],
    });
    std::fs::write(&file, facts.to_string()).unwrap();
    let (_, out, _) = run(
        "gpu-image",
        &["doctor", "--host-facts", &f],
        &[VENV, ("NCCL_SOCKET_IFNAME", "lo")],
    );
    assert_eq!(
        network(&out),
        "  ok       interfaces: lo 127.0.0.1/8; eth0 10.0.0.5/24
  ok       NCCL would use lo (NCCL_SOCKET_IFNAME=lo)
  note     NCCL would use lo: fine on one node, unreachable from others
           fix: for several nodes, NCCL_SOCKET_IFNAME==eth0 (the real NIC), or NCCL_SOCKET_IFNAME=^docker,virbr,lo"
    );
    let _ = std::fs::remove_file(&file);
}

/// NCCL's configuration files, read as NCCL reads them under a private
/// root: the environment wins, then `~/.nccl.conf` (or `NCCL_CONF_FILE`),
/// then `/etc/nccl.conf`; each setting says where it came from, and what a
/// file sets is checked like the environment (an interface that is not
/// there).
#[test]
fn doctor_reads_nccls_configuration_files() {
    let root =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("conf-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::create_dir_all(root.join("home/u")).unwrap();
    std::fs::write(
        root.join("etc/nccl.conf"),
        "# the site's settings\nNCCL_SOCKET_IFNAME=eth9\nNCCL_IB_HCA=mlx5_0\nNCCL_DEBUG=WARN\n",
    )
    .unwrap();
    std::fs::write(root.join("home/u/.nccl.conf"), "NCCL_IB_HCA=mlx5_1\r\n").unwrap();
    let facts = golden_dir().join("facts-healthy.json");
    let out = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .args(["doctor", "--root"])
        .arg(&root)
        .arg("--host-facts")
        .arg(&facts)
        .env_clear()
        .env("HOME", "/home/u")
        .env("NCCL_DEBUG", "INFO")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).replace(&root.display().to_string(), "<ROOT>");
    let area = |name: &str| area(&text, name);
    assert_eq!(
        area("NCCL variables"),
        "  note     NCCL_DEBUG=INFO (NCCL's log level: VERSION, WARN, INFO or TRACE)
  note     NCCL_IB_HCA=mlx5_1 from /home/u/.nccl.conf (the InfiniBand adapters NCCL may use)
  note     NCCL_SOCKET_IFNAME=eth9 from /etc/nccl.conf (the network interfaces NCCL may use: prefixes, ^ to exclude, = for exact names)"
    );
    assert!(
        area("Network").contains(
            "NCCL would find no interface: NCCL_SOCKET_IFNAME=eth9 from /etc/nccl.conf matches none of the \
             interfaces NCCL lists (lo, eth0)"
        ),
        "{}",
        area("Network")
    );
    assert_eq!(out.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(&root);
}

/// The findings under one heading of doctor's text report.
fn area(text: &str, name: &str) -> String {
    text.split(&format!("\n{name}:\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("no {name} area in:\n{text}"))
        .split("\n\n")
        .next()
        .unwrap()
        .to_string()
}

/// `doctor` (`--json` too where asked) on the real NCCL at `nccl`, with
/// `env` as its own environment (a facts file's variables never reach the
/// child that asks NCCL) and `home` as `HOME`.
fn doctor_on(
    nccl: &Path,
    env: serde_json::Value,
    home: Option<&Path>,
    json: bool,
) -> std::process::Output {
    // One file a call: tests run at once.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("facts-env-{}-{n}.json", std::process::id()));
    std::fs::write(&file, "{}").unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nccl-find"));
    cmd.args(["doctor", "--host-facts"])
        .arg(&file)
        .args(json.then_some("--json"))
        .env_clear()
        .env("NCCL_HOME", nccl);
    for (k, v) in env.as_object().expect("variables") {
        cmd.env(k, v.as_str().expect("a string"));
    }
    if let Some(h) = home {
        cmd.env("HOME", h);
    }
    let out = cmd.output().unwrap();
    std::fs::remove_file(&file).unwrap();
    out
}

/// The names the NCCL that runs reads come from its library (its `NCCL_*`
/// strings): a setting it holds is named so, one it does not is a likely
/// misspelling, with the nearest name it holds.
#[test]
fn doctor_checks_settings_against_the_library_that_runs() {
    let Some(w) = common::wheels() else { return };
    let out = doctor_on(
        &w.join("nvidia_nccl_cu12-2.21.5/nvidia/nccl"),
        serde_json::json!({"NCCL_SOCKET_IFNAM": "eth0", "NCCL_NET_GDR_READ": "1", "NCCL_DEBUG": "WARN"}),
        None,
        false,
    );
    assert_eq!(
        area(&String::from_utf8_lossy(&out.stdout), "NCCL variables"),
        "  note     NCCL_DEBUG=WARN (NCCL's log level: VERSION, WARN, INFO or TRACE)
  note     NCCL_NET_GDR_READ=1 (a setting NCCL 2.21.5 reads)
  note     NCCL_SOCKET_IFNAM=eth0: NCCL 2.21.5's library holds no such name, so NCCL ignores it (a plugin may read it)
           fix: did you mean NCCL_SOCKET_IFNAME?
  note     NCCL 2.21.5 cannot list its parameters (that came in 2.30.3): names were checked against the NCCL_* strings in its library and nccl-find's own list"
    );
}

/// NCCL 2.30.3 and newer list their parameters: doctor asks the newest
/// release itself (a child process that loads that file), with a
/// configuration file in a private HOME that NCCL reads on its own. A value
/// NCCL rejects is a problem with the values it takes; a value that is not
/// the default says the default; the names it lists count as known.
#[test]
fn doctor_asks_the_newest_nccl_for_its_parameters() {
    let Some(w) = common::wheels() else { return };
    let nccl = w.join("nvidia_nccl_cu12-2.32.3/nvidia/nccl");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("params-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(".nccl.conf"), "NCCL_SET_THREAD_NAME=1\n").unwrap();
    let env = serde_json::json!({"NCCL_DEBUG": "warnx", "NCCL_DEBUG_SUBSYS": "INIT,ENV", "NCCL_SOCKET_IFNAM": "eth0"});
    let doctor = |json: bool| doctor_on(&nccl, env.clone(), Some(&dir), json);
    let out = doctor(false);
    let text = String::from_utf8_lossy(&out.stdout).replace(&dir.display().to_string(), "<HOME>");
    assert_eq!(
        area(&text, "NCCL variables"),
        "  problem  NCCL_DEBUG=warnx: NCCL 2.32.3 ignores this value and uses its default (none)
           fix: NCCL_DEBUG takes one of VERSION, WARN, ATTN, INFO, ABORT, TRACE
  note     NCCL_DEBUG_SUBSYS=INIT,ENV (which subsystems NCCL logs; default: INIT,ENV,BOOTSTRAP)
  note     NCCL_SET_THREAD_NAME=1 from <HOME>/.nccl.conf (a parameter NCCL 2.32.3 lists; NCCL 2.32.3 reads TRUE, default: FALSE)
  note     NCCL_SOCKET_IFNAM=eth0: NCCL 2.32.3's library holds no such name, so NCCL ignores it (a plugin may read it)
           fix: did you mean NCCL_SOCKET_IFNAME?"
    );
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&doctor(true).stdout).unwrap();
    let p = &v["nccl_parameters"];
    assert_eq!(p["asked"], true);
    let param = |name: &str| {
        p["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {p}"))
            .clone()
    };
    assert_eq!(
        param("NCCL_SET_THREAD_NAME"),
        serde_json::json!({"name": "NCCL_SET_THREAD_NAME", "value": "TRUE", "default": "FALSE",
            "set_by": "EnvPlugin", "accepted": "Boolean: 1/T/TRUE or 0/F/FALSE"})
    );
    assert_eq!(param("NCCL_DEBUG")["set_by"], "Default");
    // The child's own switch for private parameters is no finding.
    assert!(p["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["name"] != "NCCL_PARAM_DUMP_ALL"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// nccl-find run on a real terminal (a pseudo-terminal `cols` columns
/// wide) on a copy of the fixture tree at a path of fixed length, so that
/// where lines break does not depend on where the repository lies; the
/// copy's path is written `<ROOT>`. Returns what the terminal showed.
fn on_terminal(tree: &str, args: &[&str], vars: &[(&str, &str)], cols: u16) -> String {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    let root = PathBuf::from(format!(
        "/tmp/ncclfind-term-{:010}-{cols}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir(&root).unwrap();
    let cp = Command::new("cp")
        .arg("-a")
        .arg(fixtures().join(tree))
        .arg(root.join("t"))
        .status()
        .unwrap();
    assert!(cp.success());
    let (mut master, mut slave) = (0, 0);
    let ws = libc::winsize {
        ws_row: 50,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two descriptors; the name is not asked for.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &ws,
        )
    };
    assert_eq!(rc, 0, "openpty");
    // SAFETY: both descriptors were just opened and are owned here alone.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let at = usize::from(all.first().map(String::as_str) == Some("doctor"));
    all.splice(
        at..at,
        ["--root".to_string(), root.join("t").display().to_string()],
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .args(&all)
        .env_clear()
        .envs(vars.iter().copied())
        .env("TARGET", "x86_64-unknown-linux-gnu")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::from(slave))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut master = std::fs::File::from(master);
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        // EIO once the terminal's other side is closed: the end.
        let _ = master.read_to_end(&mut bytes);
        bytes
    });
    child.wait().unwrap();
    let bytes = reader.join().unwrap();
    let _ = std::fs::remove_dir_all(&root);
    String::from_utf8_lossy(&bytes)
        .replace("\r\n", "\n")
        .replace(&root.join("t").display().to_string(), "<ROOT>")
}

/// On a terminal, --print and doctor fit its width: long lines break at
/// spaces, continuation lines start at the line's text column, and a path
/// longer than the line gets a line of its own, whole. Piped output (every
/// other golden) is not wrapped.
#[test]
fn print_and_doctor_fit_a_terminal_of_80_and_120_columns() {
    let troubled = golden_dir().join("facts-troubled.json");
    let troubled = troubled.to_str().unwrap();
    for cols in [80u16, 120] {
        let print = on_terminal(
            "gpu-image",
            &["--print", "--target", "x86_64-unknown-linux-gnu"],
            &[VENV],
            cols,
        );
        let doctor = on_terminal(
            "gpu-image",
            &["doctor", "--host-facts", troubled],
            &[VENV, ("NCCL_SOCKET_IFNAME", "eth9"), ("NCCL_FOO", "x")],
            cols,
        );
        for (name, text) in [("print", &print), ("doctor", &doctor)] {
            // Only a line of one word (after its label) that could not
            // fit anywhere may pass the end: a long path, never cut.
            for line in text.lines() {
                let words: Vec<&str> = line.split_whitespace().collect();
                let longest = words.iter().map(|w| w.chars().count()).max().unwrap_or(0);
                assert!(
                    line.chars().count() <= usize::from(cols)
                        || (words.len() <= 2 && longest > usize::from(cols) / 2),
                    "{name} at {cols}: {line:?}"
                );
            }
            check(&format!("{name}-terminal-{cols}.txt"), text);
        }
        // Nothing is lost: the words are those of the piped output.
        let (_, piped, _) = run("gpu-image", &["--print"], &[VENV]);
        let words = |t: &str| t.split_whitespace().count();
        assert_eq!(words(&print), words(&piped), "{cols}");
    }
}

/// The note of a RAS service that crashes by itself goes with the release
/// (2.28.3 here) and with the service: `NCCL_RAS_ENABLE=0` takes it away.
#[test]
fn a_ras_service_that_crashes_by_itself_is_noted_unless_turned_off() {
    let note = "its RAS service has crashed jobs by itself: NVIDIA/nccl#1996";
    let (_, on, _) = run("dpkg", &["doctor"], &[("NCCL_DEBUG", "WARN")]);
    assert!(on.contains(&format!("NCCL 2.28.3: {note}")), "{on}");
    let (_, off, _) = run(
        "dpkg",
        &["doctor"],
        &[("NCCL_DEBUG", "WARN"), ("NCCL_RAS_ENABLE", "0")],
    );
    assert!(!off.contains(note), "{off}");
    assert!(
        off.contains("NCCL_RAS_ENABLE=0 turns NCCL's RAS service off"),
        "{off}"
    );
}
