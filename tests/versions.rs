//! A real NCCL is never refused for its strings. Libraries are built here
//! with gcc from our own C (`fixtures/src/fake_nccl.c`), in every shape the
//! version can take: help text before the version (as in NCCL 2.30 and
//! later), no version text with a versioned file name, no version anywhere
//! but an NCCL soname and `ncclGetVersion`, and a library that is not NCCL.

use std::path::{Path, PathBuf};
use std::process::Command;

use nccl_find::explain::{Problem, Status};
use nccl_find::Config;

struct Tree(PathBuf);

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `<root>/opt/n/{include/nccl.h,lib/<file>}` with the library built from
/// our stand-in source. `strings` go into `.rodata` in that order.
fn install(
    tag: &str,
    header: (u32, u32, u32),
    file: &str,
    soname: &str,
    strings: &[&str],
    exports: bool,
) -> Tree {
    let root =
        std::env::temp_dir().join(format!("nccl-find-versions-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (inc, lib) = (root.join("opt/n/include"), root.join("opt/n/lib"));
    std::fs::create_dir_all(&inc).unwrap();
    std::fs::create_dir_all(&lib).unwrap();
    let (x, y, z) = header;
    std::fs::write(
        inc.join("nccl.h"),
        format!(
            "#define NCCL_MAJOR {x}\n#define NCCL_MINOR {y}\n#define NCCL_PATCH {z}\n#define NCCL_SUFFIX \"\"\n\
             #define NCCL_VERSION_CODE {}\nncclResult_t ncclGroupStart(void);\n",
            x * 10000 + y * 100 + z
        ),
    )
    .unwrap();
    let src = root.join("lib.c");
    let mut c = String::new();
    for (i, s) in strings.iter().enumerate() {
        c.push_str(&format!(
            "__attribute__((used)) const char text_{i}[] = \"{s}\";\n"
        ));
    }
    if exports {
        c.push_str(&format!(
            "int ncclGetVersion(int *v) {{ *v = {}; return 0; }}\n",
            x * 10000 + y * 100 + z
        ));
    } else {
        c.push_str("int somethingElse(void) { return 0; }\n");
    }
    std::fs::write(&src, c).unwrap();
    let out = Command::new("gcc")
        .args(["-shared", "-fPIC", "-nostdlib", "-Os", "-o"])
        .arg(lib.join(file))
        .arg(format!("-Wl,-soname,{soname}"))
        .arg(&src)
        .output()
        .expect("gcc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if file != "libnccl.so.2" {
        std::os::unix::fs::symlink(file, lib.join("libnccl.so.2")).unwrap();
    }
    Tree(root)
}

fn probe(t: &Tree) -> nccl_find::Report {
    Config::new()
        .root(&t.0)
        .target("x86_64-unknown-linux-gnu")
        .cargo_metadata(false)
        .env_vars([("NCCL_HOME", "/opt/n")])
        .report()
        .0
}

/// The warnings, less the run-time loader's (nothing here is on its path).
fn warnings(r: &nccl_find::Report) -> Vec<String> {
    r.warnings
        .iter()
        .filter(|w| !w.starts_with("at run time the loader will find no libnccl.so.2"))
        .cloned()
        .collect()
}

fn lib(t: &Tree, file: &str) -> PathBuf {
    std::fs::canonicalize(t.0.join("opt/n/lib").join(file)).unwrap()
}

#[test]
fn help_text_before_the_version_is_passed_over() {
    let t = install(
        "help",
        (2, 31, 2),
        "libnccl.so.2",
        "libnccl.so.2",
        &[
            "Prints NCCL version information only.",
            "NCCL version information",
            "NCCL version %s",
            "NCCL version 2.31.2+cuda12.9",
        ],
        true,
    );
    let r = probe(&t);
    let c = r.selected().unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!(c.library_version.as_ref().unwrap().to_string(), "2.31.2");
    assert_eq!(c.cuda_version.unwrap().to_string(), "12.9");
    assert_eq!(warnings(&r), Vec::<String>::new());
}

#[test]
fn no_version_text_takes_the_file_name_and_says_so() {
    let t = install(
        "name",
        (2, 40, 1),
        "libnccl.so.2.40.1",
        "libnccl.so.2",
        &["NCCL version information"],
        true,
    );
    let r = probe(&t);
    let c = r.selected().unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!(c.library_version.as_ref().unwrap().to_string(), "2.40.1");
    assert_eq!(c.cuda_version, None);
    // Worked around: a note for --print, no build's warning.
    assert_eq!(warnings(&r), Vec::<String>::new());
    assert_eq!(
        r.notes,
        [format!(
            "{} has no readable `NCCL version` text; its version, 2.40.1, is taken from its file name.",
            lib(&t, "libnccl.so.2.40.1").display()
        )]
    );
}

#[test]
fn no_version_anywhere_takes_the_header_and_says_so() {
    let t = install(
        "header",
        (2, 40, 1),
        "libnccl.so.2",
        "libnccl.so.2",
        &[],
        true,
    );
    let r = probe(&t);
    let c = r.selected().unwrap_or_else(|| panic!("{r:?}"));
    assert_eq!(c.status, Status::Selected);
    assert_eq!(c.library_version.as_ref().unwrap().to_string(), "2.40.1");
    assert_eq!(warnings(&r), Vec::<String>::new());
    assert_eq!(
        r.notes,
        [format!(
            "{} is NCCL (soname libnccl.so.2, exports ncclGetVersion) but its version cannot be read \
             from the file; the header's version, 2.40.1, is taken for it.",
            lib(&t, "libnccl.so.2").display()
        )]
    );
    // A later major soname counts too.
    let t = install(
        "major3",
        (3, 0, 0),
        "libnccl.so.2",
        "libnccl.so.3",
        &[],
        true,
    );
    let r = probe(&t);
    assert!(r.selected().is_some(), "{r:?}");
}

#[test]
fn only_a_file_that_is_not_nccl_is_called_not_nccl() {
    for (tag, soname, exports, lacks) in [
        ("nosym", "libnccl.so.2", false, "no ncclGetVersion"),
        ("other", "libother.so.1", true, "no libnccl.so.N soname"),
        (
            "neither",
            "libother.so.1",
            false,
            "no libnccl.so.N soname, no ncclGetVersion",
        ),
    ] {
        let t = install(
            tag,
            (2, 40, 1),
            "libnccl.so.2",
            soname,
            &["NCCL version %s"],
            exports,
        );
        let r = probe(&t);
        assert_eq!(r.selected, None, "{tag}");
        let file = lib(&t, "libnccl.so.2");
        assert_eq!(
            r.candidates[0].status,
            Status::Rejected(Problem::BadLibrary {
                file,
                why: format!(
                    "it has no `NCCL version X.Y.Z` text, no version in its file name, {lacks}: it is not an NCCL library"
                ),
            }),
            "{tag}"
        );
    }
}

#[test]
fn a_stand_in_is_really_a_shared_library() {
    // The test's own premise: gcc made an ELF with the soname asked for.
    let t = install(
        "premise",
        (2, 40, 1),
        "libnccl.so.2",
        "libnccl.so.2",
        &[],
        true,
    );
    let info = nccl_find::internal::read_elf(Path::new(&lib(&t, "libnccl.so.2"))).unwrap();
    assert_eq!(info.soname.as_deref(), Some("libnccl.so.2"));
    assert_eq!(info.version_text, None);
}
