//! Sixteen build scripts probing at once, as cargo runs them in parallel:
//! the same answer from each, and no temp files anywhere.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn sixteen_build_scripts_at_once() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ws = repo.join("target/concurrency-ws");
    let _ = std::fs::remove_dir_all(&ws);
    let n = 16;
    let members: Vec<String> = (0..n).map(|i| format!("\"c{i}\"")).collect();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(
        ws.join("Cargo.toml"),
        format!(
            "[workspace]\nresolver = \"2\"\nmembers = [{}]\n",
            members.join(", ")
        ),
    )
    .unwrap();
    for i in 0..n {
        let c = ws.join(format!("c{i}"));
        std::fs::create_dir_all(c.join("src")).unwrap();
        std::fs::write(
            c.join("Cargo.toml"),
            format!(
                "[package]\nname = \"c{i}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[build-dependencies]\nnccl-find = {{ path = \"{}\" }}\n",
                repo.display()
            ),
        )
        .unwrap();
        std::fs::write(
            c.join("build.rs"),
            "fn main() { nccl_find::Config::new().atleast_version(\"2.18\").probe_or_exit(); }\n",
        )
        .unwrap();
        std::fs::write(c.join("src/lib.rs"), "").unwrap();
    }
    let tmp = ws.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let home = common::trees().join("tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64");
    let out = Command::new(env!("CARGO"))
        .current_dir(&ws)
        .args(["build", "-q", "-j", "16"])
        .env("CARGO_TARGET_DIR", ws.join("target"))
        .env("NCCL_HOME", &home)
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every build script's output: the same lines (a warning aside, none differ).
    let outputs: Vec<String> = std::fs::read_dir(ws.join("target/debug/build"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("output")).ok())
        .filter(|o| o.contains("cargo:rustc-link-lib=dylib=nccl"))
        .collect();
    assert_eq!(outputs.len(), n, "one probe per crate");
    assert!(
        outputs.iter().all(|o| o == &outputs[0]),
        "the 16 answers differ"
    );
    assert!(outputs[0].contains("cargo:version=2.21.5\n"));
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "temp files left behind"
    );
    std::fs::remove_dir_all(&ws).unwrap();
}
