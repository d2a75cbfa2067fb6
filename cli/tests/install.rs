//! `cargo install` of the command, as the README says to run it, into a
//! temporary root: the installed `nccl-find` runs, says its version, and
//! finds a real wheel with nothing of the build around it.

use std::path::Path;
use std::process::Command;

#[test]
fn cargo_install_puts_a_working_nccl_find_in_the_root() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("install");
    let _ = std::fs::remove_dir_all(&tmp);
    let (root, target) = (tmp.join("root"), tmp.join("target"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "install",
            "--quiet",
            "--locked",
            "--offline",
            "--debug",
            "--path",
        ])
        .arg(env!("CARGO_MANIFEST_DIR"))
        .arg("--root")
        .arg(&root)
        .arg("--target-dir")
        .arg(&target)
        .output()
        .expect("running cargo install");
    assert!(
        out.status.success(),
        "cargo install:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&target).unwrap();
    let bin = root.join("bin/nccl-find");
    let v = Command::new(&bin).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v.stdout),
        format!("nccl-find {}\n", env!("CARGO_PKG_VERSION"))
    );
    // It probes: a real wheel through NCCL_HOME.
    if let Some(site) = std::env::var_os("NCCL_FIND_WHEELS") {
        let home = Path::new(&site).join("nvidia_nccl_cu12-2.21.5/nvidia/nccl");
        let m = Command::new(&bin)
            .arg("--modversion")
            .env_clear()
            .env("NCCL_HOME", &home)
            .output()
            .unwrap();
        assert_eq!(
            (
                m.status.code(),
                String::from_utf8_lossy(&m.stdout).into_owned()
            ),
            (Some(0), "2.21.5\n".to_string()),
            "{}",
            String::from_utf8_lossy(&m.stderr)
        );
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}
