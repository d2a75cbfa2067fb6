//! Each crate meant for users declares a `rust-version` no older than that
//! of any dependency it pulls in (normal and build dependencies,
//! transitively, with every feature on, as locked in Cargo.lock; not
//! dev-dependencies). Read from `cargo metadata`.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The crates users build: the library, the command, the smoke test, the
/// -sys crate.
const USER_CRATES: [&str; 5] = [
    "nccl-find",
    "nccl-find-cli",
    "nccl-rendezvous",
    "nccl-smoke",
    "nccl-sys",
];

/// `1.74` or `1.74.1` as (1, 74, 1); missing parts are 0.
fn version(s: &str) -> (u64, u64, u64) {
    let mut it = s.split('.').map(|p| {
        p.parse::<u64>()
            .unwrap_or_else(|_| panic!("rust-version {s:?} is not X.Y[.Z]"))
    });
    let v = (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    );
    assert!(it.next().is_none(), "rust-version {s:?} is not X.Y[.Z]");
    v
}

/// `cargo metadata` of the workspace, as locked, with every feature on.
fn metadata() -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(env!("CARGO"))
        .current_dir(&root)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--all-features",
        ])
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every package `member` reaches through normal and build dependencies.
fn used_packages<'a>(nodes: &HashMap<&'a str, &'a Value>, member: &'a str) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![member];
    while let Some(id) = todo.pop() {
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let used = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| matches!(k["kind"].as_str(), None | Some("build")));
            let pkg = dep["pkg"].as_str().unwrap();
            if used && seen.insert(pkg) {
                todo.push(pkg);
            }
        }
    }
    seen
}

#[test]
fn rust_version_covers_every_locked_dependency() {
    let meta = metadata();
    let packages: HashMap<&str, &Value> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    let nodes: HashMap<&str, &Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let rust_version = |id: &str| packages[id]["rust_version"].as_str().map(version);
    let mut checked = Vec::new();
    let mut too_new = Vec::new();
    for member in meta["workspace_members"].as_array().unwrap() {
        let member = member.as_str().unwrap();
        let name = packages[member]["name"].as_str().unwrap();
        if !USER_CRATES.contains(&name) {
            continue;
        }
        checked.push(name);
        let declared =
            rust_version(member).unwrap_or_else(|| panic!("{name} declares no rust-version"));
        for id in used_packages(&nodes, member) {
            if let Some(needs) = rust_version(id) {
                if needs > declared {
                    too_new.push(format!(
                        "{name} declares rust-version {}.{}.{}, but {} {} needs {}.{}.{}",
                        declared.0,
                        declared.1,
                        declared.2,
                        packages[id]["name"].as_str().unwrap(),
                        packages[id]["version"].as_str().unwrap(),
                        needs.0,
                        needs.1,
                        needs.2
                    ));
                }
            }
        }
    }
    checked.sort();
    assert_eq!(
        checked,
        [
            "nccl-find",
            "nccl-find-cli",
            "nccl-rendezvous",
            "nccl-smoke",
            "nccl-sys"
        ]
    );
    assert!(
        too_new.is_empty(),
        "raise these rust-versions (or lock older dependencies):\n{}",
        too_new.join("\n")
    );
}

#[test]
fn versions_are_read_as_cargo_writes_them() {
    assert_eq!(version("1.74"), (1, 74, 0));
    assert_eq!(version("1.85.1"), (1, 85, 1));
    assert!(version("1.85") > version("1.74.9"));
}
