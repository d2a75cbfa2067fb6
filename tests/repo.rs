//! The repository stands alone: no file cites documents it does not hold.

mod common;

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
        concat!("FA", "CTS", ".md"),
        concat!("FA", "CTS", " §"),
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
        .root(common::trees().join("empty"))
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

/// Every item behind a feature carries docs.rs's badge for it, and the
/// crate's examples print no directive that the probe prints itself.
#[test]
fn feature_items_have_badges_and_examples_print_no_probe_directives() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.clone()];
    let mut missing = Vec::new();
    while let Some(p) = files.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                files.push(e.unwrap().path());
            }
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let Some(feature) = l.trim().strip_prefix("#[cfg(feature = ") else {
                continue;
            };
            let next = lines.get(i + 1).map(|n| n.trim()).unwrap_or("");
            let public = lines[i + 1..]
                .iter()
                .find(|n| !n.trim().starts_with("#["))
                .is_some_and(|n| n.trim().starts_with("pub fn") || n.trim().starts_with("pub mod"));
            let badge = format!(
                "#[cfg_attr(docsrs, doc(cfg(feature = {}))]",
                feature.trim_end_matches(']')
            );
            if public && next != badge {
                missing.push(format!("{}:{}", p.display(), i + 1));
            }
        }
        if p.ends_with("lib.rs") || p.ends_with("probe.rs") {
            for probe_prints in ["cargo:include=", "cargo:rustc-link", "cargo:rerun-if-env"] {
                assert!(
                    !text.contains(&format!("println!(\"{probe_prints}")),
                    "{}: an example prints {probe_prints}, which the probe prints",
                    p.display()
                );
            }
        }
    }
    assert!(missing.is_empty(), "no doc(cfg) badge: {missing:?}");
}

/// The names `pub use` brings in, over lines that may wrap a `{…}` list.
fn used_names(lines: &[&str]) -> Vec<String> {
    let text = lines.join("\n");
    let mut names = Vec::new();
    for stmt in text.split(';') {
        let Some(at) = stmt.find("pub use ") else {
            continue;
        };
        let stmt = &stmt[at + "pub use ".len()..];
        let items = match (stmt.find('{'), stmt.rfind("::")) {
            (Some(open), _) => &stmt[open + 1..stmt.find('}').unwrap()],
            (None, Some(sep)) => &stmt[sep + 2..],
            _ => panic!("{stmt}"),
        };
        for n in items.split(',') {
            let n = n.trim();
            let n = n.rsplit(" as ").next().unwrap();
            if !n.is_empty() {
                names.push(n.to_string());
            }
        }
    }
    names
}

/// The public surface: names at the root (`explain`, the words of the
/// report, and `loader_dir`, the feature's types, among them), every public
/// type at one path, and two hidden modules: `internal`, for this
/// repository's command and tests, and `fuzz`, which exists only in the
/// fuzz targets' builds. How many names each holds is a budget
/// `scripts/budgets` prints (12 at the root, 10 in `internal`), not a wall.
#[test]
fn the_public_surface_is_small_and_each_item_has_one_path() {
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
    let lines: Vec<&str> = lib.lines().collect();
    let mut modules: Vec<(&str, Vec<String>, &str)> = Vec::new();
    let mut root: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if let Some(name) = l
            .strip_prefix("pub mod ")
            .and_then(|n| n.strip_suffix(" {"))
        {
            let end = i + lines[i..].iter().position(|l| *l == "}").unwrap();
            modules.push((name, used_names(&lines[i + 1..end]), lines[i - 1]));
            i = end + 1;
            continue;
        }
        root.push(l);
        i += 1;
    }
    let shown: Vec<&str> = modules.iter().map(|m| m.0).collect();
    assert_eq!(shown, ["explain", "loader_dir", "internal", "fuzz"]);
    assert_eq!(modules[2].2, "#[doc(hidden)]");
    assert_eq!(modules[3].2, "#[doc(hidden)]");
    assert!(lib.contains("#[cfg(fuzzing)]\n#[doc(hidden)]\npub mod fuzz {"));
    let mut names = used_names(&root);
    names.extend(["explain".to_string(), "loader_dir".to_string()]);
    for m in &modules[..2] {
        names.extend(m.1.iter().cloned());
    }
    let count = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), count, "an item at two paths: {names:?}");
}

/// The README's first screen is for someone who meets the crate on
/// crates.io: what it is, the dependency line, the two build scripts, the
/// command's install line, and this repository's two commands. The long
/// parts live in docs/.
#[test]
fn the_readme_first_screen_has_what_a_new_user_needs() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let first: String = readme.lines().take(70).collect::<Vec<_>>().join("\n");
    // Until the first release, every route on it works from a clone: a
    // path dependency, `cargo install --path cli` (cli/tests/install.rs),
    // and the wheel from scripts/wheel (scripts/test, cli/tests/wheel.rs).
    for want in [
        "**Not released yet**",
        "(RELEASING.md)",
        "[build-dependencies]\nnccl-find = { path = \"",
        ".probe_or_exit()",
        "nccl_find::emit_rpath_from_dep()",
        "cargo install --path cli",
        "scripts/wheel dist",
        "pip install dist/nccl_find-*.whl",
        "nccl-find doctor",
        "nccl-find ras",
        "scripts/test",
        "(https://docs.rs/nccl-find) (after the first release)",
    ] {
        assert!(
            first.contains(want),
            "the README's first 70 lines lack {want:?}"
        );
    }
    assert!(
        readme.lines().count() <= 500,
        "the README grew past 500 lines: move detail to docs/"
    );
    for page in [
        "releases",
        "cudarc",
        "smoke",
        "reliability",
        "benchmarks",
        "testing",
        "json",
        "build-systems",
        "ras",
    ] {
        let link = format!("(docs/{page}.md)");
        assert!(readme.contains(&link), "the README does not link {link}");
        if !std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/docs")).is_dir() {
            continue; // a packaged crate carries the README, not docs/
        }
        let path = format!("{}/docs/{page}.md", env!("CARGO_MANIFEST_DIR"));
        assert!(std::path::Path::new(&path).is_file(), "{path}");
    }
}
