//! What several test files share: the fixture trees, with their links.
//!
//! `cargo package` stores each link of `fixtures/trees` as a copy of what it
//! points at, and drops a dangling one. `fixtures/links.txt` lists them
//! (`fixtures/generate.sh` writes it), and [`trees`] makes them again in a
//! packaged copy of the crate before any test reads a tree. In the
//! repository a missing or changed link is an error, never mended.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Once;

mod shared;
#[allow(unused_imports)]
pub use shared::{scratch, STEERING};

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The API level cfgs, oldest first, as the crate docs list them ("The
/// levels: `nccl_2_0`, …."); a unit test in `src/api.rs` holds that list
/// to the catalog's table.
pub fn levels() -> Vec<String> {
    let lib = std::fs::read_to_string(crate_dir().join("src/lib.rs")).unwrap();
    let docs: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//! "))
        .collect::<Vec<_>>()
        .join(" ");
    let (_, list) = docs
        .split_once("The levels: ")
        .expect("the crate docs' levels");
    let (list, _) = list.split_once('.').unwrap();
    list.split(", ")
        .map(|l| l.trim_matches('`').to_string())
        .collect()
}

/// `fixtures/trees`, every link in place.
pub fn trees() -> PathBuf {
    static LINKS: Once = Once::new();
    LINKS.call_once(restore_links);
    crate_dir().join("fixtures/trees")
}

/// One fixture tree.
pub fn tree(name: &str) -> PathBuf {
    trees().join(name)
}

/// Whether this is an unpacked `.crate` (cargo writes `Cargo.toml.orig`).
pub fn packaged() -> bool {
    crate_dir().join("Cargo.toml.orig").is_file()
}

/// The links `fixtures/links.txt` lists: (path under `trees`, target).
pub fn listed_links() -> Vec<(PathBuf, PathBuf)> {
    let list = std::fs::read_to_string(crate_dir().join("fixtures/links.txt"))
        .expect("fixtures/links.txt (written by fixtures/generate.sh)");
    list.lines()
        .map(|l| {
            let (at, to) = l
                .split_once('\t')
                .expect("a line of fixtures/links.txt: path, tab, target");
            (PathBuf::from(at), PathBuf::from(to))
        })
        .collect()
}

fn restore_links() {
    let trees = crate_dir().join("fixtures/trees");
    for (at, to) in listed_links() {
        let at = trees.join(at);
        let ok = std::fs::read_link(&at).is_ok_and(|t| t == to);
        if ok {
            continue;
        }
        assert!(
            packaged(),
            "{} should be a link to {} (fixtures/links.txt); run fixtures/generate.sh",
            at.display(),
            to.display()
        );
        // The copy cargo made (a file, or a whole directory), or nothing
        // for a dangling link: the link goes in its place. Idempotent, so
        // that test binaries running at once agree.
        let tmp = at.with_file_name(format!(".link-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&to, &tmp).unwrap();
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {
                let _ = std::fs::remove_dir_all(&at);
            }
            _ => {}
        }
        std::fs::rename(&tmp, &at)
            .unwrap_or_else(|e| panic!("making the link {}: {e}", at.display()));
    }
}

/// A crate of its own workspace at `dir` (made afresh) whose build script
/// is `build_rs` and whose one build-dependency is this repository's
/// nccl-find, with this repository's lockfile.
pub fn probe_crate(dir: &Path, name: &str, build_rs: &str) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [workspace]\n\n[build-dependencies]\nnccl-find = {{ path = \"{}\" }}\n",
            crate_dir().display()
        ),
    )
    .unwrap();
    std::fs::write(dir.join("build.rs"), build_rs).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    let _ = std::fs::copy(crate_dir().join("Cargo.lock"), dir.join("Cargo.lock"));
}

/// A probe of the tree at `root` for x86-64 Linux, with exactly `vars` as
/// its environment, printing no directives.
pub fn config(root: &Path, vars: &[(&str, &str)]) -> nccl_find::Config {
    let mut c = nccl_find::Config::new();
    c.root(root)
        .target("x86_64-unknown-linux-gnu")
        .cargo_metadata(false)
        .env_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    c
}

/// Copies the tree `from` into `to` (made if need be; what is there is
/// kept, so that several trees can be laid into one), links as links.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(from.join("."))
        .arg(to)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cp -a {} {}", from.display(), to.display());
}

/// Every cached NCCL wheel: (its dist dir, NCCL's version).
pub fn wheels() -> Vec<(PathBuf, String)> {
    let Some(dir) = std::env::var_os("NCCL_FIND_WHEELS") else {
        assert!(
            std::env::var_os("NCCL_FIND_REQUIRE_WHEELS").is_none(),
            "NCCL_FIND_WHEELS is unset; run scripts/test"
        );
        eprintln!(
            "skipped: NCCL_FIND_WHEELS is unset (scripts/test downloads the wheels and sets it)"
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().into_string().unwrap();
        let Some(v) = name
            .strip_prefix("nvidia_nccl_cu")
            .and_then(|r| r.split_once('-'))
        else {
            continue;
        };
        let version = v.1.split(".post").next().unwrap().to_string();
        out.push((e.path(), version));
    }
    out.sort();
    out
}

/// The fixture trees probed whole, each with a fixed environment (the
/// probe prints its directives, as in a build script).
pub mod fixture {
    use std::path::{Path, PathBuf};

    use nccl_find::{Config, Error, Nccl, Report};

    pub fn tree(name: &str) -> PathBuf {
        super::trees().join(name)
    }

    pub fn config(name: &str, vars: &[(&str, &str)]) -> Config {
        let mut c = Config::new();
        c.root(tree(name))
            .target("x86_64-unknown-linux-gnu")
            .env_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        c
    }

    pub fn probe(name: &str, vars: &[(&str, &str)]) -> Result<Nccl, Error> {
        config(name, vars).probe()
    }

    /// A path as seen inside the fixture root.
    pub fn logical(r: &Report, p: &Path) -> String {
        r.logical(p).display().to_string()
    }

    pub fn found(name: &str, vars: &[(&str, &str)]) -> Nccl {
        match probe(name, vars) {
            Ok(n) => n,
            Err(e) => panic!("{name}: expected NCCL, got:\n{e}"),
        }
    }
}
