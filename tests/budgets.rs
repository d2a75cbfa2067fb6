//! Every input costs time and memory in proportion to its size. Each
//! parser's own budgets (headers whose macros expand to copies of each
//! other, nest deeply, define thousands of macros; `.pc` variables that
//! double) are unit tests of the parser (`src/inspect/header/tests.rs`,
//! `src/sources/pkgconfig/tests.rs`); here, what an input past a budget
//! costs the probe.

mod common;

/// A header past a budget in an install nobody asked for costs the probe
/// nothing: the explicitly named install is selected, and the command's
/// report names the refused one and why.
#[test]
fn a_bomb_in_a_virtualenv_does_not_stop_the_probe() {
    let root = std::env::temp_dir().join(format!("nccl-find-bomb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let sp = root.join("venv/lib/python3.11/site-packages/nvidia/nccl");
    std::fs::create_dir_all(sp.join("include")).unwrap();
    std::fs::create_dir_all(sp.join("lib")).unwrap();
    let mut h = String::from("#define A0 1\n");
    for i in 1..=40 {
        h.push_str(&format!("#define A{i} (A{p} * A{p})\n", p = i - 1));
    }
    h.push_str("#define NCCL_MAJOR A40\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n");
    std::fs::write(sp.join("include/nccl.h"), h).unwrap();
    let good = common::tree("tarball").join("opt/nccl_2.21.5-1+cuda12.4_x86_64");
    let opt = root.join("opt");
    std::fs::create_dir_all(&opt).unwrap();
    let copy = std::process::Command::new("cp")
        .arg("-a")
        .arg(&good)
        .arg(opt.join("nccl"))
        .status()
        .unwrap();
    assert!(copy.success());
    std::fs::copy(
        good.join("lib/libnccl.so.2.21.5"),
        sp.join("lib/libnccl.so.2"),
    )
    .unwrap();
    let (report, err) = nccl_find::Config::new()
        .root(&root)
        .target("x86_64-unknown-linux-gnu")
        .cargo_metadata(false)
        .env_vars([("NCCL_HOME", "/opt/nccl"), ("VIRTUAL_ENV", "/venv")])
        .report();
    assert!(err.is_none(), "{err:?}");
    assert_eq!(
        report.selected().unwrap().origin.source,
        nccl_find::explain::SourceKind::Home
    );
    let bomb = report
        .candidates
        .iter()
        .find(|c| c.origin.source == nccl_find::explain::SourceKind::Pip)
        .expect("the wheel is a candidate");
    let why = bomb.problem().map(|p| p.to_string()).unwrap_or_default();
    assert_eq!(
        why,
        format!(
            "{}/include/nccl.h is not a usable nccl.h: NCCL_MAJOR (line 42) is \"A40\", not a number: \
             the expression nests more than 64 deep. Reinstall NCCL's headers, or point \
             NCCL_INCLUDE_DIR at a real NCCL 2 include directory.",
            std::fs::canonicalize(&sp).unwrap().display()
        )
    );
    std::fs::remove_dir_all(&root).unwrap();
}
