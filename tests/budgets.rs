//! Every input costs time and memory in proportion to its size: headers
//! whose macros expand to copies of each other, that nest deeply, that
//! define thousands of macros or splice a megabyte of lines are refused
//! (or read) at once, with a message that says why. Each class is drawn
//! several ways.

mod common;

use nccl_find::internal::{parse_header, Header};

fn bad(text: &str) -> String {
    match parse_header(text) {
        Header::Bad(why) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

const VERSION: &str = "#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n";

#[test]
fn macros_that_expand_to_copies_of_each_other_are_refused() {
    for op in ["+", "*", "|", "&&"] {
        for n in [20usize, 24, 30] {
            let mut h = String::from("#define A0 1\n");
            for i in 1..=n {
                h.push_str(&format!("#define A{i} (A{p} {op} A{p})\n", p = i - 1));
            }
            h.push_str(&format!("#if A{n}\n#endif\n{VERSION}"));
            assert_eq!(
                bad(&h),
                format!(
                    "line {}: cannot evaluate `#if A{n}`: its macros take more than 1000000 steps to \
                     evaluate (a real nccl.h takes a few hundred)",
                    n + 2
                ),
                "{op} {n}"
            );
        }
    }
    // In the version macros themselves.
    let mut h = String::from("#define A0 1\n");
    for i in 1..=25 {
        h.push_str(&format!("#define A{i} (A{p} + A{p})\n", p = i - 1));
    }
    h.push_str("#define NCCL_MAJOR (A25 - A25 + 2)\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n");
    assert!(
        bad(&h).starts_with("NCCL_MAJOR (line 27) is \"( A25 - A25 + 2 )\", not a number: its macros take more than"),
        "{}",
        bad(&h)
    );
}

#[test]
fn deep_nesting_is_refused_without_exhausting_the_stack() {
    let why = "the expression nests more than 64 deep";
    for n in [300usize, 2_000, 100_000] {
        for (open, close) in [
            ("(", ")"),
            ("!", ""),
            ("-", ""),
            ("~", ""),
            ("1 ? ", " : 0"),
        ] {
            let expr = format!("{}1{}", open.repeat(n), close.repeat(n));
            let h = format!("#if {expr}\n#endif\n{VERSION}");
            let got = bad(&h);
            assert!(
                got.starts_with("line 1: cannot evaluate `#if "),
                "{got:.200}"
            );
            assert!(
                got.ends_with(why),
                "{open} {n}: {:.200}",
                &got[got.len().saturating_sub(200)..]
            );
        }
        // Nested #if groups.
        let h = format!("{}{}{VERSION}", "#if 1\n".repeat(n), "#endif\n".repeat(n));
        assert_eq!(
            bad(&h),
            "line 257: more than 256 #if groups are open at once"
        );
    }
    // Within the limits, the same shapes read fine.
    let h = format!(
        "#if {}1{}\n#endif\n{VERSION}",
        "(".repeat(60),
        ")".repeat(60)
    );
    assert!(matches!(parse_header(&h), Header::Nccl2(_)));
}

#[test]
fn thousands_of_defines_are_refused_and_a_megabyte_of_splices_is_read() {
    for n in [257usize, 10_000, 100_000] {
        let mut h = String::from(VERSION);
        for i in 0..n {
            h.push_str(&format!("#define M{i} {i}\n"));
        }
        assert_eq!(
            bad(&h),
            "line 257: more than 256 macros are defined (a real nccl.h defines about 35)",
            "{n}"
        );
    }
    // Redefining one name many times is not many macros.
    let h = format!("{VERSION}{}", "#define SAME 1\n".repeat(10_000));
    assert!(matches!(parse_header(&h), Header::Nccl2(_)));
    // Backslash-newline splices, LF and CRLF, between the tokens of the
    // version macros: read in one pass, lines numbered as the file has them.
    for (splice, n) in [("\\\n", 400_000usize), ("\\\r\n", 300_000)] {
        let h = format!(
            "#define NCCL_MAJOR {}2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n#define NCCL_VERSION_CODE 1\n",
            splice.repeat(n)
        );
        // The code is wrong on purpose: the message names its line.
        assert_eq!(
            bad(&h),
            format!(
                "NCCL_VERSION_CODE is 1, but NCCL_MAJOR/MINOR/PATCH say 2.21.5, whose code is 22105"
            )
        );
        let h = format!("{}{VERSION}#if\n", splice.repeat(n));
        assert_eq!(
            bad(&h),
            format!(
                "line {}: cannot evaluate `#if`: the expression ends early",
                n + 4
            )
        );
    }
}

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

#[test]
fn pc_variables_that_double_are_refused_and_pcfiledir_still_works() {
    use nccl_find::internal::parse_pc;
    for (first, each) in [
        ("a", "${v{p}}${v{p}}"),
        ("aaaaaaaa", "x${v{p}}${v{p}}y"),
        ("/", "${v{p}}/${v{p}}"),
    ] {
        for n in [20usize, 30, 60] {
            let mut pc = format!("v0={first}\n");
            for i in 1..=n {
                pc.push_str(&format!(
                    "v{i}={}\n",
                    each.replace("{p}", &(i - 1).to_string())
                ));
            }
            pc.push_str("Libs: -L${v%N%}\n".replace("%N%", &n.to_string()).as_str());
            let e = parse_pc(&pc, "/fuzz").unwrap_err();
            assert!(
                e.ends_with("a value grows past 65536 bytes as its variables expand (a real nccl.pc's are a few dozen)"),
                "{first} {n}: {e}"
            );
            assert!(e.starts_with("line "), "{e}");
        }
    }
    // Thousands of variables.
    for n in [300usize, 50_000] {
        let pc: String = (0..n).map(|i| format!("v{i}=x\n")).collect();
        assert_eq!(
            parse_pc(&pc, "/d").unwrap_err(),
            "line 256: more than 256 variables are defined (a real nccl.pc defines about 5)"
        );
    }
    // ${pcfiledir}, as pkg-config --define-prefix style files use it.
    let pc = parse_pc(
        "prefix=${pcfiledir}/../..\nlibdir=${prefix}/lib\nincludedir=${prefix}/include\n\
         Version: 2.21.5\nLibs: -L${libdir} -lnccl\nCflags: -I${includedir}\n",
        "/opt/nccl/lib/pkgconfig",
    )
    .unwrap();
    assert_eq!(pc.lib_dirs, ["/opt/nccl/lib/pkgconfig/../../lib"]);
    assert_eq!(pc.include_dirs, ["/opt/nccl/lib/pkgconfig/../../include"]);
}
