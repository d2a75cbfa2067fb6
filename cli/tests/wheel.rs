//! The command as Python users get it: `pip install nccl-find
//! nvidia-nccl-cu12` into a fresh venv (scripts/test builds the wheel with
//! scripts/wheel and makes the venv; `NCCL_FIND_WHEEL_VENV` names it). The
//! installed binary is started with an empty environment: no
//! `VIRTUAL_ENV`, no `PATH`, so it finds the venv's NCCL from its own
//! location alone.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

/// The venv scripts/test installed the wheel into.
fn venv() -> Option<PathBuf> {
    common::required_path("NCCL_FIND_WHEEL_VENV")
}

fn run(venv: &Path, args: &[&str]) -> Output {
    Command::new(venv.join("bin/nccl-find"))
        .args(args)
        .env_clear()
        .current_dir("/")
        .output()
        .unwrap()
}

/// The venv's site-packages (`lib/python3.X/site-packages`).
fn site_packages(venv: &Path) -> PathBuf {
    let lib = venv.join("lib");
    let py = std::fs::read_dir(&lib)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .unwrap();
    py.path().join("site-packages")
}

#[test]
fn the_installed_command_selects_its_own_venvs_nccl() {
    let Some(venv) = venv() else { return };
    let nccl = site_packages(&venv).join("nvidia/nccl");
    let out = run(&venv, &["--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sel = &v["selected"];
    assert_eq!(
        sel["library"],
        nccl.join("lib/libnccl.so.2").display().to_string(),
        "{sel}"
    );
    assert_eq!(sel["source"]["kind"], "pip", "{sel}");
    assert_eq!(sel["package"]["name"], "nvidia-nccl-cu12", "{sel}");
    let out = run(&venv, &["--print"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let selected = text.lines().find(|l| l.starts_with("Selected:")).unwrap();
    assert!(
        selected.contains(&format!(
            "(the environment this program is installed in, {})",
            venv.display()
        )),
        "{selected}"
    );
}

#[test]
fn the_installed_doctor_gives_json() {
    let Some(venv) = venv() else { return };
    let out = run(&venv, &["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(v["schema"], 1);
    // The NCCL it judged is the venv's, and it could be asked.
    assert_eq!(
        v["nccl_parameters"]["asked"], true,
        "{}",
        v["nccl_parameters"]
    );
    assert_eq!(
        out.status.code(),
        Some(if v["healthy"] == true { 0 } else { 1 })
    );
}

/// The glibc symbol versions the binary needs (as `objdump -p` lists them)
/// are within the wheel's manylinux tag (`WHEEL`'s `Tag:` line).
#[test]
fn the_binary_needs_no_glibc_newer_than_its_tag() {
    let Some(venv) = venv() else { return };
    let sp = site_packages(&venv);
    let dist = std::fs::read_dir(&sp)
        .unwrap()
        .flatten()
        .find(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("nccl_find-") && n.ends_with(".dist-info")
        })
        .unwrap()
        .path();
    let wheel = std::fs::read_to_string(dist.join("WHEEL")).unwrap();
    let tag = wheel
        .lines()
        .find_map(|l| l.strip_prefix("Tag: py3-none-manylinux_"))
        .unwrap_or_else(|| panic!("no manylinux tag in {wheel}"));
    let tag = version(tag.trim_end_matches("_x86_64").replace('_', ".").as_str());
    assert_eq!(tag, (2, 28));
    let out = Command::new("objdump")
        .arg("-p")
        .arg(venv.join("bin/nccl-find"))
        .output()
        .expect("objdump (binutils) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let needed: Vec<(u32, u32)> = text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .map(version)
        .collect();
    assert!(needed.len() > 3, "{text}");
    let newest = needed.iter().max().unwrap();
    assert!(
        newest <= &tag,
        "the binary needs GLIBC_{newest:?}, beyond its tag {tag:?}"
    );
}

fn version(s: &str) -> (u32, u32) {
    let mut it = s.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}
