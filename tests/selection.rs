//! How the probe chooses among the fixture trees' installs: explicit
//! variables win and never fall back, target-prefixed variables first,
//! version requirements as Cargo reads them, the same answer every time,
//! and a build script rerun only on what decided it.

mod common;

use common::fixture::{config, found, probe, tree};
use nccl_find::explain::{Problem, SourceKind, Status};
use nccl_find::ErrorKind;

#[test]
fn explicit_variables_win_and_never_fall_back() {
    // NCCL_HOME wins over a dpkg install that comes later in the order.
    let n = found(
        "gpu-image",
        &[(
            "NCCL_HOME",
            "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl",
        )],
    );
    assert_eq!(n.origin.source, SourceKind::Home);
    let lost = n.others().next().unwrap();
    assert!(matches!(&lost.status, Status::Lost(why) if why.starts_with("NCCL_HOME=")));

    // Pointing nowhere is an error, even though dpkg has a good install.
    let e = probe("dpkg", &[("NCCL_HOME", "/nope")]).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Explicit { problem: Problem::Missing { var, .. }, .. } if var == "NCCL_HOME")
    );
    assert!(e.to_string().contains("NCCL_HOME points at "), "{e}");
    // Nothing is selected, so the dpkg install is not shown as selected.
    let r = e.report();
    assert_eq!(r.selected, None);
    assert_eq!(r.candidates.len(), 2, "{:?}", r.candidates);
    assert!(matches!(
        &r.candidates[0].status,
        Status::Rejected(Problem::Missing { .. })
    ));
    assert_eq!(
        r.candidates[1].status,
        Status::Lost(
            "not considered: NCCL_HOME is set, and an explicitly named install has no fallback"
                .into()
        )
    );

    // A file where a directory is needed.
    let e = probe("dpkg", &[("NCCL_ROOT", "/usr/include/nccl.h")]).unwrap_err();
    assert!(matches!(
        e.kind(),
        ErrorKind::Explicit {
            problem: Problem::NotADirectory { .. },
            ..
        }
    ));

    // The pair wins over NCCL_HOME; NCCL_ROOT loses to NCCL_HOME.
    let n = found(
        "gpu-image",
        &[
            ("NCCL_INCLUDE_DIR", "/usr/include"),
            ("NCCL_LIB_DIR", "/usr/lib/x86_64-linux-gnu"),
            (
                "NCCL_HOME",
                "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl",
            ),
        ],
    );
    assert_eq!(n.origin.source, SourceKind::ExplicitDirs);
    assert_eq!(n.version.to_string(), "2.28.3");
}

#[test]
fn only_one_of_the_pair_is_an_error() {
    let e = probe("dpkg", &[("NCCL_LIB_DIR", "/usr/lib/x86_64-linux-gnu")]).unwrap_err();
    assert_eq!(
        e.kind(),
        &ErrorKind::OnlyOneOfPair {
            set: "NCCL_LIB_DIR=/usr/lib/x86_64-linux-gnu".into(),
            missing: "NCCL_INCLUDE_DIR"
        }
    );
    assert!(e
        .to_string()
        .starts_with("nccl-find: NCCL_LIB_DIR=/usr/lib/x86_64-linux-gnu is set but NCCL_INCLUDE_DIR is not: set both, or neither."));
}

#[test]
fn target_prefixed_variables_win_over_plain_ones() {
    let n = found(
        "gpu-image",
        &[
            (
                "X86_64_UNKNOWN_LINUX_GNU_NCCL_HOME",
                "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl",
            ),
            ("NCCL_HOME", "/nope"),
        ],
    );
    assert_eq!(n.version.to_string(), "2.28.9");
    assert!(n
        .origin
        .variable
        .as_deref()
        .unwrap()
        .starts_with("X86_64_UNKNOWN_LINUX_GNU_NCCL_HOME="));
    // For another target, the other prefix is read, the x86_64 one is not,
    // and the amd64 dpkg packages and x86_64 multiarch dir do not count.
    let e = config("gpu-image", &[("X86_64_UNKNOWN_LINUX_GNU_NCCL_HOME", "/x")])
        .target("aarch64-unknown-linux-gnu")
        .probe()
        .unwrap_err();
    assert_eq!(e.kind(), &ErrorKind::NotFound);
    let names: Vec<&str> = e.report().env.iter().map(|r| r.name.as_str()).collect();
    assert!(names.contains(&"AARCH64_UNKNOWN_LINUX_GNU_NCCL_HOME"));
    assert!(!names.contains(&"X86_64_UNKNOWN_LINUX_GNU_NCCL_HOME"));
}

#[test]
fn version_requirements() {
    let n = config("gpu-image", &[("VIRTUAL_ENV", "/opt/torch/.venv")])
        .atleast_version("2.28.5")
        .probe()
        .unwrap();
    assert_eq!(n.version.to_string(), "2.28.9");
    // The wheel is too old for the range; dpkg's 2.28.3 fits.
    let n = config("gpu-image", &[("VIRTUAL_ENV", "/opt/torch/.venv")])
        .range_version("2.20".."2.28.5")
        .probe()
        .unwrap();
    assert_eq!(n.version.to_string(), "2.28.3");
    assert!(
        matches!(n.report.candidates[0].problem(), Some(Problem::Unsatisfied { requirement, .. }) if requirement == ">=2.20.0, <2.28.5")
    );
    let e = config("gpu-image", &[])
        .atleast_version("2.29")
        .probe()
        .unwrap_err();
    assert_eq!(
        e.kind(),
        &ErrorKind::NoneSatisfies {
            requirement: ">=2.29.0".into()
        }
    );
    let e = config("gpu-image", &[])
        .atleast_version("two")
        .probe()
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::InvalidRequirement { .. }));
    let n = config("dpkg", &[])
        .version_req(">=2.18, <3")
        .probe()
        .unwrap();
    assert_eq!(n.version.to_string(), "2.28.3");
    let e = config("dpkg", &[("NCCL_HOME", "/usr")])
        .exactly_version("2.28.4")
        .probe()
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Explicit {
                problem: Problem::Unsatisfied { .. },
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn selection_is_deterministic() {
    let vars = [
        ("VIRTUAL_ENV", "/opt/torch/.venv"),
        ("CONDA_PREFIX", "/opt/anaconda3"),
    ];
    let a = probe("gpu-image", &vars).unwrap().report;
    for _ in 0..5 {
        assert_eq!(probe("gpu-image", &vars).unwrap().report, a);
    }
}

#[test]
fn the_root_directive_is_the_prefix() {
    // dpkg: /usr/include + /usr/lib/x86_64-linux-gnu → /usr, not /usr/lib.
    let n = found("dpkg", &[]);
    let root = n
        .cargo_directives()
        .into_iter()
        .find(|d| d.starts_with("cargo:root="))
        .unwrap();
    assert_eq!(
        root,
        format!(
            "cargo:root={}",
            std::fs::canonicalize(tree("dpkg"))
                .unwrap()
                .join("usr")
                .display()
        )
    );
}

/// In a build script, an explicit install ends the search: only what can
/// change the answer is a rerun trigger.
#[test]
fn a_build_script_with_nccl_home_reruns_only_on_what_decides() {
    let home = "/opt/nccl_2.21.5-1+cuda12.4_x86_64";
    let vars = [
        ("NCCL_HOME", home),
        ("LD_LIBRARY_PATH", "/nowhere"),
        ("VIRTUAL_ENV", "/venv"),
        ("CONDA_PREFIX", "/conda"),
        ("HOME", "/home/u"),
        ("PATH", "/usr/bin"),
    ];
    let mut c = config("tarball", &vars);
    c.cargo_metadata(true);
    let n = c.probe().unwrap();
    let reruns: Vec<String> = n
        .cargo_directives()
        .iter()
        .filter_map(|l| l.strip_prefix("cargo:rerun-if-env-changed="))
        .map(String::from)
        .collect();
    let p = "X86_64_UNKNOWN_LINUX_GNU_";
    let mut expect = vec!["DOCS_RS".to_string()];
    for v in [
        "NCCL_SYSROOT",
        "NCCL_INCLUDE_DIR",
        "NCCL_LIB_DIR",
        "NCCL_HOME",
        "NCCL_ROOT",
        "NCCL_DIR",
        "NCCL_SOURCE_DIR",
        // What decides after selection: static or shared. (The CUDA
        // variables decide the CUDA include dirs only where nccl.h includes
        // a CUDA header, and this fixture's includes none.)
        "NCCL_STATIC",
        "NCCL_DYNAMIC",
    ] {
        expect.push(format!("{p}{v}"));
        expect.push(v.to_string());
    }
    expect.push("PKG_CONFIG_ALL_STATIC".into());
    assert_eq!(reruns, expect);
    // A build script has no loader check: the build's LD_LIBRARY_PATH is
    // not the run's, so it is not even read.
    assert!(!n
        .report
        .env
        .iter()
        .any(|r| r.name.ends_with("LD_LIBRARY_PATH")));
    assert_eq!(n.report.loader, nccl_find::explain::Loader::default());
    // The command reads every source, to show every install.
    let mut all = config("tarball", &vars);
    all.cargo_metadata(false);
    let (report, _) = all.report();
    assert!(report
        .env
        .iter()
        .any(|r| r.name == "VIRTUAL_ENV" && r.decides()));
    // With the loader check off, its variables are not even read, and its
    // warning is gone.
    c.loader_check(false);
    let n = c.probe().unwrap();
    assert!(!n
        .report
        .env
        .iter()
        .any(|r| r.name.ends_with("LD_LIBRARY_PATH")));
    assert!(n.report.warnings.is_empty(), "{:?}", n.report.warnings);
    assert_eq!(n.report.loader, nccl_find::explain::Loader::default());
}

#[test]
fn exactly_version_means_what_cargos_equals_means() {
    // dpkg has 2.28.3: `=2.28` and `=2.28.3` accept it, `=2.28.4` and `=2.2`
    // do not, the same through both calls.
    for (given, ok) in [
        ("2.28", true),
        ("2.28.3", true),
        ("2", true),
        ("2.28.4", false),
        ("2.2", false),
    ] {
        let exactly = config("dpkg", &[]).exactly_version(given).probe();
        let req = config("dpkg", &[])
            .version_req(&format!("={given}"))
            .probe();
        assert_eq!(exactly.is_ok(), ok, "exactly_version({given})");
        assert_eq!(req.is_ok(), ok, "version_req(={given})");
        assert_eq!(
            exactly.err().and_then(|e| e.report().requirement.clone()),
            req.err().and_then(|e| e.report().requirement.clone()),
        );
    }
    // Not a version: refused, naming it.
    let e = config("dpkg", &[])
        .exactly_version("two")
        .probe()
        .unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::InvalidRequirement { .. }),
        "{e}"
    );
}
