//! The repository stands alone: no file cites documents it does not hold.

use std::path::Path;

#[test]
fn no_file_cites_documents_outside_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output();
    let Some(out) = out.ok().filter(|o| o.status.success()) else {
        eprintln!("skipped: not a git checkout (a packaged crate)");
        return;
    };
    // Spelled in pieces, so that this file does not itself hold them.
    let needles = [
        concat!("FACTS", ".md"),
        concat!("FACTS", " §"),
        concat!("seed", " 00"),
        concat!("seeds", " 00"),
        concat!("../", "shared/"),
    ];
    let mut found = Vec::new();
    for name in out.stdout.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        if name == "tests/repo.rs" {
            continue;
        }
        let Ok(text) = std::fs::read(root.join(&name)) else {
            continue;
        };
        let text = String::from_utf8_lossy(&text);
        for n in needles {
            if text.contains(n) {
                found.push(format!("{name}: {n}"));
            }
        }
    }
    assert_eq!(found, Vec::<String>::new());
}

#[test]
fn an_error_debugs_as_its_message() {
    let e = nccl_find::Config::new()
        .root(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/trees/empty"))
        .target("x86_64-unknown-linux-gnu")
        .cargo_metadata(false)
        .env_vars([("NCCL_HOME", "/nowhere")])
        .probe()
        .unwrap_err();
    assert_eq!(format!("{e:?}"), e.to_string());
    assert!(
        format!("{e:?}").starts_with("nccl-find: NCCL_HOME=/nowhere was set"),
        "{e:?}"
    );
}
