use super::*;

#[test]
fn parses_a_tarball_pc_with_variables() {
    let text = "prefix=${pcfiledir}/../..\nlibdir=${prefix}/lib\nincludedir=${prefix}/include\n\n\
                Name: nccl\nDescription: x\nVersion: 2.21.5\nLibs: -L${libdir} -lnccl\nCflags: -I${includedir}\n";
    let pc = parse_pc(text, "/opt/n/lib/pkgconfig").unwrap();
    assert_eq!(pc.version.as_deref(), Some("2.21.5"));
    assert_eq!(pc.include_dirs, ["/opt/n/lib/pkgconfig/../../include"]);
    assert_eq!(pc.lib_dirs, ["/opt/n/lib/pkgconfig/../../lib"]);
}

#[test]
fn undefined_variable_names_the_line() {
    let err = parse_pc("Libs: -L${nope}\n", "/x").unwrap_err();
    assert_eq!(err, "line 1: undefined variable ${nope}");
    let err = parse_pc("just words\n", "/x").unwrap_err();
    assert_eq!(err, "line 1: neither `name=value` nor `Field: value`");
}

#[test]
fn separated_flags_are_read() {
    let pc = parse_pc("Cflags: -I /a -I/b -DX=1\nLibs: -L /l -lnccl\n", "/").unwrap();
    assert_eq!(pc.include_dirs, ["/a", "/b"]);
    assert_eq!(pc.lib_dirs, ["/l"]);
}

/// Every input costs time and memory in proportion to its size.
#[test]
fn pc_variables_that_double_are_refused_and_pcfiledir_still_works() {
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
