//! The message a build script prints when the probe fails, compared
//! exactly with `tests/golden/messages.txt`, one case per shape of failure:
//! it leads with the fix (the install that came nearest, and what it
//! lacks), fits in 25 lines, and leaves every place looked and every
//! variable read to `NCCL_FIND_VERBOSE=1`. And the warnings a build script
//! prints: only what the user can act on. `UPDATE_GOLDEN=1 cargo test`
//! rewrites the file.

mod common;

use std::path::{Path, PathBuf};

use nccl_find::Error;

/// The most lines a failure's message may take.
const MAX_LINES: usize = 25;

use common::config;

fn failure(root: &Path, vars: &[(&str, &str)], at_least: Option<&str>) -> Error {
    let mut c = config(root, vars);
    if let Some(v) = at_least {
        c.atleast_version(v);
    }
    match c.probe() {
        Ok(n) => panic!(
            "{}: expected a failure, got NCCL {}",
            root.display(),
            n.version
        ),
        Err(e) => e,
    }
}

/// A scratch copy of a fixture tree (links kept as links), to break.
fn broken_copy(tree: &str, tag: &str) -> PathBuf {
    let to = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("messages-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&to);
    common::copy_tree(&common::tree(tree), &to);
    // As the probe names it (the target dir may be given as `…/../target`).
    std::fs::canonicalize(&to).unwrap()
}

/// The message with the machine's paths written as placeholders.
fn clean(text: &str, roots: &[(&Path, &str)]) -> String {
    let mut out = text.to_string();
    for (p, name) in roots {
        out = out.replace(&p.display().to_string(), name);
    }
    out
}

#[test]
fn each_failure_leads_with_its_fix_in_at_most_25_lines() {
    let trees = std::fs::canonicalize(common::trees()).unwrap();
    let wheel_no_header = broken_copy("wheel-venv", "no-header");
    let sp = wheel_no_header.join("venv/lib/python3.11/site-packages");
    std::fs::remove_dir_all(sp.join("nvidia/nccl/include")).unwrap();
    let venv = [("VIRTUAL_ENV", "/venv")];
    // Every kind of near miss in one tree: a wheel without headers, a
    // runtime package alone, NCCL 1, a header and library that disagree,
    // a library that is not ELF, a garbage header.
    let many = broken_copy("wheel-venv", "many");
    std::fs::remove_dir_all(many.join("venv/lib/python3.11/site-packages/nvidia/nccl/include"))
        .unwrap();
    for t in [
        "dpkg-runtime-only",
        "nccl1-only",
        "mismatch",
        "not-elf",
        "garbage-header",
    ] {
        common::copy_tree(&trees.join(t), &many);
    }
    // The wheel made the newest release the catalog knows (2.21.5 and
    // 2.32.3 are spelled with as many bytes).
    let newest = broken_copy("wheel-venv", "newest");
    let site = newest.join("venv/lib/python3.11/site-packages");
    let release = nccl_find::explain::known_releases()
        .last()
        .unwrap()
        .to_string();
    let (minor, patch) = release[2..].split_once('.').unwrap();
    assert_eq!(release.len(), "2.21.5".len(), "{release}");
    for (file, from, to) in [
        (
            "nvidia/nccl/lib/libnccl.so.2",
            "2.21.5".to_string(),
            release.clone(),
        ),
        (
            "nvidia/nccl/include/nccl.h",
            "NCCL_MINOR 21".into(),
            format!("NCCL_MINOR {minor}"),
        ),
        (
            "nvidia/nccl/include/nccl.h",
            "NCCL_PATCH 5".into(),
            format!("NCCL_PATCH {patch}"),
        ),
        (
            "nvidia/nccl/include/nccl.h",
            "22105".into(),
            format!("2{minor}{patch:0>2}"),
        ),
    ] {
        let path = site.join(file);
        let bytes = std::fs::read(&path).unwrap();
        let at = bytes
            .windows(from.len())
            .position(|w| w == from.as_bytes())
            .unwrap();
        let mut out = bytes[..at].to_vec();
        out.extend_from_slice(to.as_bytes());
        out.extend_from_slice(&bytes[at + from.len()..]);
        std::fs::write(&path, out).unwrap();
    }
    let dist = site.join(format!("nvidia_nccl_cu12-{release}.dist-info"));
    std::fs::rename(site.join("nvidia_nccl_cu12-2.21.5.dist-info"), &dist).unwrap();
    let metadata = std::fs::read_to_string(dist.join("METADATA")).unwrap();
    std::fs::write(
        dist.join("METADATA"),
        metadata.replace("Version: 2.21.5", &format!("Version: {release}")),
    )
    .unwrap();
    let many_vars = [
        ("VIRTUAL_ENV", "/venv"),
        ("CONDA_PREFIX", "/opt/anaconda3"),
        (
            "LIBRARY_PATH",
            "/home/u/pytorch/torch/lib/tmp_install/lib:/opt/nccl-mixed/lib:/opt/nccl-text/lib:/opt/bad/lib",
        ),
    ];
    let cases: Vec<(&str, Error)> = vec![
        ("nothing at all", failure(&trees.join("empty"), &[], None)),
        (
            "a wheel without its headers",
            failure(&wheel_no_header, &venv, None),
        ),
        (
            "NCCL_HOME names nothing",
            failure(
                &trees.join("empty"),
                &[("NCCL_HOME", "/does-not-exist")],
                None,
            ),
        ),
        (
            "only the runtime package",
            failure(&trees.join("dpkg-runtime-only"), &[], None),
        ),
        (
            "a wheel older than required",
            failure(&trees.join("wheel-venv"), &venv, Some("2.29")),
        ),
        (
            "only NCCL 1",
            failure(
                &trees.join("nccl1-only"),
                &[
                    ("CONDA_PREFIX", "/opt/anaconda3"),
                    ("LIBRARY_PATH", "/home/u/pytorch/torch/lib/tmp_install/lib"),
                ],
                None,
            ),
        ),
        ("many broken installs", failure(&many, &many_vars, None)),
        (
            "NCCL_HOME older than required",
            failure(
                &trees.join("wheel-venv"),
                &[(
                    "NCCL_HOME",
                    "/venv/lib/python3.11/site-packages/nvidia/nccl",
                )],
                Some("2.29"),
            ),
        ),
        (
            "a requirement no release meets",
            failure(&trees.join("wheel-venv"), &venv, Some("2.99")),
        ),
        (
            "a requirement no release meets, the newest installed",
            failure(&newest, &venv, Some("2.99")),
        ),
    ];
    let mut all = String::new();
    for (name, e) in &cases {
        let text = clean(
            &e.to_string(),
            &[
                (&wheel_no_header, "<SCRATCH>"),
                (&many, "<MANY>"),
                (&newest, "<NEWEST>"),
                (&trees, "<FIXTURES>"),
            ],
        );
        let lines = text.lines().count();
        assert!(
            lines <= MAX_LINES,
            "{name}: {lines} lines, more than {MAX_LINES}:\n{text}"
        );
        // Every place looked and every variable read: only on request.
        assert!(!text.contains("Variables read"), "{name}:\n{text}");
        assert!(!text.contains("Looked in"), "{name}:\n{text}");
        all.push_str(&format!("=== {name} ({lines} lines)\n{text}\n"));
    }
    // The closest miss is named first, with its exact fix, and no advice
    // to install what is installed already.
    let wheel = &cases[1].1.to_string();
    let head: Vec<&str> = wheel.lines().take(2).collect();
    assert!(
        head[0].contains("[pip nvidia-nccl-cu12 2.21.5]")
            && head[1]
                .ends_with("pip install --force-reinstall --no-deps nvidia-nccl-cu12==2.21.5"),
        "{wheel}"
    );
    assert!(!wheel.contains("pip install nvidia-nccl-cu12 "), "{wheel}");
    // A variable that names nothing says so, in what was looked at too.
    let home = cases[2].1.report();
    let outcome = home
        .looked
        .iter()
        .find(|l| l.outcome != "named by NCCL_HOME");
    assert_eq!(outcome.map(|l| l.outcome.as_str()), Some("does not exist"));
    assert!(cases[2]
        .1
        .to_string()
        .contains("or unset NCCL_HOME to let nccl-find search."));
    check("messages.txt", &all);
    let _ = std::fs::remove_dir_all(&wheel_no_header);
    let _ = std::fs::remove_dir_all(&many);
}

#[test]
fn nccl_find_verbose_lists_every_place_and_variable() {
    let root = common::tree("empty");
    let brief = failure(&root, &[], None).to_string();
    let full = failure(&root, &[("NCCL_FIND_VERBOSE", "1")], None).to_string();
    assert!(
        brief.contains("NCCL_FIND_VERBOSE=1, or `nccl-find --print`"),
        "{brief}"
    );
    for part in ["Search order:", "Looked in (13 places):", "Variables read:"] {
        assert!(full.contains(part), "{part}:\n{full}");
    }
    assert!(full.contains("  NCCL_HOME unset\n"), "{full}");
    assert_eq!(
        failure(&root, &[("NCCL_FIND_VERBOSE", "0")], None).to_string(),
        brief
    );
}

/// What nccl-find worked around is a note for `--print`, never a build's
/// warning: Debian's own `nccl.pc` says `prefix=/usr/local`, which dpkg
/// owns and the user cannot mend, and which nccl-find looks past.
#[test]
fn a_build_script_warns_only_about_what_the_user_can_act_on() {
    let n = config(&common::tree("dpkg-wrong-pc"), &[]).probe().unwrap();
    assert!(n.report.warnings.is_empty(), "{:?}", n.report.warnings);
    assert_eq!(n.report.notes.len(), 1, "{:?}", n.report.notes);
    assert!(
        n.report.notes[0].contains("says prefix=/usr/local"),
        "{}",
        n.report.notes[0]
    );
    let warned: Vec<String> = n
        .cargo_directives()
        .into_iter()
        .filter(|d| d.starts_with("cargo:warning"))
        .collect();
    assert_eq!(warned, Vec::<String>::new());
}

fn check(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} is missing; UPDATE_GOLDEN=1", path.display()));
    if want != got {
        panic!("{name} differs from the golden file.\n--- want\n{want}\n--- got\n{got}");
    }
}

/// The message as a real cargo build shows it, for a -sys crate whose build
/// script calls `probe_or_exit` and finds nothing: the build script's whole
/// output is the message (no rerun lines before it: cargo runs a failed
/// build script again anyway, and this test sees it do so), in at most 25
/// lines.
#[test]
fn a_failed_build_shows_the_message_and_nothing_else() {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/messages-ws");
    common::probe_crate(
        &ws,
        "message-probe",
        "fn main() { nccl_find::Config::new().probe_or_exit(); }\n",
    );
    let build = || {
        let mut cmd = std::process::Command::new(env!("CARGO"));
        cmd.current_dir(&ws)
            .args(["build", "-v"])
            .env("CARGO_TARGET_DIR", ws.join("target"))
            // A target with nothing on it: the same answer on every machine.
            .env("NCCL_SYSROOT", common::tree("empty"));
        for (k, _) in std::env::vars() {
            if k.starts_with("NCCL_") && k != "NCCL_SYSROOT" {
                cmd.env_remove(k);
            }
        }
        cmd.output().unwrap()
    };
    let out = build();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("--- stdout"), "{err}");
    let section = err
        .split("--- stderr\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no build-script stderr in:\n{err}"));
    let message: Vec<&str> = section
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with("  "))
        .collect();
    assert!(
        message.len() <= MAX_LINES,
        "{} lines:\n{section}",
        message.len()
    );
    let last = "NCCL was not found: install it (pip install nvidia-nccl-cu12 in the environment \
                you build in, or apt install libnccl2 libnccl-dev), or point NCCL_HOME at an \
                install.";
    assert_eq!(message[0], format!("  nccl-find: {last}"));
    // The last line is the answer too.
    let lines: Vec<&str> = message
        .iter()
        .copied()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.last().map(|l| l.trim()), Some(last), "{section}");
    assert!(
        message
            .iter()
            .any(|l| l.contains("pip install nvidia-nccl-cu12")),
        "{section}"
    );
    // Cargo runs the failed build script again, rerun lines or not.
    let again = build();
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .lines()
            .any(|l| l.contains("Running") && l.contains("build-script-build")),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let _ = std::fs::remove_dir_all(&ws);
}
