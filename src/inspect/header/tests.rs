use super::*;

fn h(major: &str, minor: &str, patch: &str, code: &str) -> String {
    format!(
        "#ifndef NCCL_H_\n#define NCCL_H_\n#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n\
         #define NCCL_SUFFIX \"\"\n\n#define NCCL_VERSION_CODE {code}\n#endif\n"
    )
}

#[test]
fn new_and_old_formulas() {
    assert_eq!(
        parse_header(&h("2", "21", "5", "22105")),
        Header::Nccl2(Version::new(2, 21, 5, ""))
    );
    let old = parse_header(&h("2", "8", "4", "2804"));
    assert_eq!(old, Header::Nccl2(Version::new(2, 8, 4, "")));
    if let Header::Nccl2(v) = old {
        assert_eq!(v.code, 2804);
    }
}

#[test]
fn code_that_disagrees_is_refused() {
    assert_eq!(
        parse_header(&h("2", "8", "4", "20804")),
        Header::Bad(
            "NCCL_VERSION_CODE is 20804, but NCCL_MAJOR/MINOR/PATCH say 2.8.4, whose code is 2804"
                .into()
        )
    );
}

#[test]
fn nccl1_template_and_garbage() {
    let one = "typedef enum { ncclSuccess, ncclInvalidDevicePointer } ncclResult_t;\nncclResult_t ncclCommInitRank();";
    assert!(matches!(parse_header(one), Header::Nccl1 { .. }));
    assert_eq!(
        parse_header("#define NCCL_MAJOR ${nccl:Major}\n"),
        Header::Template
    );
    assert!(matches!(parse_header("int main() {}"), Header::Bad(_)));
    assert_eq!(
        parse_header("#define NCCL_MAJOR 2\n#define NCCL_MINOR \"x\"\n#define NCCL_PATCH 1\n"),
        Header::Bad(
            "NCCL_MINOR (line 2) is \"\\\"x\\\"\", not a number: unexpected Str(\"\\\"x\\\"\")"
                .into()
        )
    );
    assert!(matches!(
        parse_header(&h("1", "3", "0", "1300")),
        Header::Nccl1 { .. }
    ));
}

#[test]
fn suffix_and_crlf() {
    let text = "#define NCCL_MAJOR 2\r\n#define NCCL_MINOR 19\r\n#define NCCL_PATCH 3\r\n#define NCCL_SUFFIX \"a0\"\r\n";
    assert_eq!(
        parse_header(text),
        Header::Nccl2(Version::new(2, 19, 3, "a0"))
    );
}

fn v(text: &str) -> Header {
    parse_header(text)
}

#[test]
fn comments_and_dead_blocks_do_not_count() {
    let text = "/* #define NCCL_MAJOR 9 */\n\
                // #define NCCL_MINOR 99\n\
                #if 0\n#define NCCL_MINOR 98\n#elif 0\n#define NCCL_MINOR 97\n#else\n#define NCCL_MINOR 21\n#endif\n\
                #ifdef NOT_DEFINED_ANYWHERE\n#define NCCL_PATCH 96\n#endif\n\
                #ifndef NCCL_H_\n#define NCCL_H_\n#define NCCL_PATCH 5 /* the patch */ // really\n#endif\n\
                #define NCCL_MAJOR /* a comment\n spanning lines */ 2\n\
                #if defined(NCCL_H_) && NCCL_MINOR > 20\n#define NCCL_SUFFIX \"\"\n#else\n#define NCCL_SUFFIX \"dead\"\n#endif\n\
                const char *s = \"// not a comment\"; /* #define NCCL_PATCH 1 */\n";
    assert_eq!(v(text), Header::Nccl2(Version::new(2, 21, 5, "")));
}

#[test]
fn c_integer_literals() {
    let h = |x: &str, y: &str, z: &str| {
        v(&format!(
            "#define NCCL_MAJOR {x}\n#define NCCL_MINOR {y}\n#define NCCL_PATCH {z}\n"
        ))
    };
    let want = Header::Nccl2(Version::new(2, 21, 5, ""));
    assert_eq!(h("2u", "21UL", "5ll"), want);
    assert_eq!(h("(2)", "((0x15))", "05"), want);
    assert_eq!(h("0X2", "0b10101", "(5LLU)"), want);
    assert_eq!(h("(1+1)", "(3*7)", "5"), want);
    assert_eq!(
        h("2", "99999999999", "5"),
        Header::Bad(
            "NCCL_MINOR (line 2) is 99999999999, which does not fit a version number (0 to 4294967295)".into()
        )
    );
    assert_eq!(
        h("2", "4294967295", "5"),
        Header::Bad("2.4294967295.5 is too large for a version code (32 bits)".into())
    );
    assert_eq!(
        h("2", "0x1ffffffffffffffff", "5"),
        Header::Bad(
            "NCCL_MINOR (line 2) is \"0x1ffffffffffffffff\", not a number: 0x1ffffffffffffffff does not fit in 64 bits".into()
        )
    );
    assert!(
        matches!(h("2", "21uu", "5"), Header::Bad(w) if w.contains("21uu is not a C integer constant"))
    );
    assert!(
        matches!(h("2", "-1", "5"), Header::Bad(w) if w.contains("does not fit a version number"))
    );
}

#[test]
fn suffix_escapes_and_line_splices() {
    let text = "#define NCCL_MAJOR 2\n#define NCCL_MINOR \\\n 19\n#define NCCL_PATCH 3\n\
                #define NCCL_SUFFIX \"a\\\"0\\\\\"\n";
    assert_eq!(v(text), Header::Nccl2(Version::new(2, 19, 3, "a\"0\\")));
    let text = "#define NCCL_MAJOR 2\n#define NCCL_MINOR 19\n#define NCCL_PATCH 3\n\
                #define NCCL_SUFFIX \"a\\nb\"\n";
    assert_eq!(
        v(text),
        Header::Bad("NCCL_SUFFIX (line 4) holds a control character: \"a\\nb\"".into())
    );
}

#[test]
fn broken_conditionals_are_errors_not_guesses() {
    assert_eq!(
        v("#if (1\n#define NCCL_MAJOR 2\n#endif\n"),
        Header::Bad("line 1: cannot evaluate `#if (1`: `(` without `)`".into())
    );
    assert_eq!(
        v("#endif\n"),
        Header::Bad("line 1: #endif without #if".into())
    );
    // As gcc: nothing but #endif after #else.
    assert_eq!(
        v("#if 0\n#else\n#else\n#endif\n"),
        Header::Bad("line 3: #else after #else".into())
    );
    assert_eq!(
        v("#ifdef X\n#else\n#elif 1\n#endif\n"),
        Header::Bad("line 3: #elif after #else".into())
    );
}

#[test]
fn lines_are_named_as_the_file_numbers_them_after_splices() {
    // Splices (LF and CRLF), and a comment over two lines, before the error.
    assert_eq!(
        v("#define A \\\n 1 \\\r\n + 2\n/* a\n b */\n#if 0\n#else\n#else\n#endif\n"),
        Header::Bad("line 8: #else after #else".into())
    );
    assert_eq!(
        v("#if 0\n#else\n#else \\\n junk\n#endif\n"),
        Header::Bad("line 3: #else after #else".into())
    );
}

/// Every input costs time and memory in proportion to its size: headers
/// whose macros expand to copies of each other, that nest deeply, that
/// define thousands of macros or splice a megabyte of lines are refused
/// (or read) at once, with a message that says why. Each class is drawn
/// several ways.
mod budgets {
    use crate::inspect::header::{parse_header, Header};

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
        h.push_str(
            "#define NCCL_MAJOR (A25 - A25 + 2)\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n",
        );
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
}

/// The header parser against the real C preprocessor. Headers are generated
/// here with the version macros written in every form C allows (hex, octal,
/// suffixes, parentheses, expressions, line splices, comments inside) and
/// decoys the compiler must skip (comments, `#if 0`, `#ifdef` of an
/// undefined name, `#elif` chains, strings). For each, `gcc -dM -E` says
/// which macros are defined, and a program compiled with gcc prints their
/// values; what nccl-find reads must be exactly that.
mod vs_gcc {
    use std::path::Path;
    use std::process::Command;

    use crate::inspect::header::{parse_header, Header};

    /// A small deterministic generator (xorshift), so a failure repeats.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            from[(self.next() % from.len() as u64) as usize]
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.next() % 100 < percent
        }
    }

    /// `n` written as some C integer constant expression.
    fn literal(r: &mut Rng, n: u32) -> String {
        let suffix = r.pick(&[
            "", "u", "U", "l", "L", "ul", "UL", "lu", "ll", "LL", "ull", "ULL",
        ]);
        let body = match r.next() % 5 {
            0 => format!("0x{n:x}"),
            1 => format!("0X{n:X}"),
            2 if n > 0 => format!("0{n:o}"),
            3 if n > 1 => return format!("({} + {})", literal(r, n - 1), literal(r, 1)),
            _ => n.to_string(),
        };
        let mut s = format!("{body}{suffix}");
        for _ in 0..r.next() % 3 {
            s = format!("({s})");
        }
        if r.chance(20) {
            s = format!("/* value */ {s}");
        }
        s
    }

    fn decoy(r: &mut Rng, name: &str) -> String {
        let bad = r.next() % 90 + 10;
        match r.next() % 6 {
            0 => format!("/* #define {name} {bad} */\n"),
            1 => format!("// #define {name} {bad}\n"),
            2 => format!("#if 0\n#define {name} {bad}\n#endif\n"),
            3 => format!("#ifdef NCCL_FIND_NEVER_DEFINED\n#define {name} {bad}\n#endif\n"),
            4 => format!("static const char *s_{name} = \"#define {name} {bad}\";\n"),
            _ => format!(
                "#if 0 /* off */\n#define {name} {bad}\n#elif 1 - 1\n#define {name} {}\n#endif\n",
                bad + 1
            ),
        }
    }

    fn header(r: &mut Rng, (x, y, z): (u32, u32, u32), suffix: &str) -> String {
        let code = if x == 2 && y <= 8 {
            x * 1000 + y * 100 + z
        } else {
            x * 10000 + y * 100 + z
        };
        let mut h = String::from("#ifndef NCCL_H_\n#define NCCL_H_\n");
        for (name, n) in [
            ("NCCL_MAJOR", x),
            ("NCCL_MINOR", y),
            ("NCCL_PATCH", z),
            ("NCCL_VERSION_CODE", code),
        ] {
            if r.chance(60) {
                h.push_str(&decoy(r, name));
            }
            let value = literal(r, n);
            match r.next() % 4 {
                0 => h.push_str(&format!("#define {name} \\\n  {value}\n")),
                1 => h.push_str(&format!(
                    "#if 0\n#define {name} 77\n#else\n#define {name} {value}\n#endif\n"
                )),
                2 => h.push_str(&format!("  #  define {name}\t{value} // {name}\n")),
                _ => h.push_str(&format!("#define {name} {value}\n")),
            }
            if name == "NCCL_PATCH" {
                h.push_str(&format!("#define NCCL_SUFFIX \"{suffix}\"\n"));
            }
        }
        h.push_str("#endif\n");
        h
    }

    fn gcc(args: &[&str], dir: &Path) -> String {
        let out = Command::new("gcc")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("gcc (Debian: apt install gcc)");
        assert!(
            out.status.success(),
            "gcc {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn generated_headers_read_as_gcc_reads_them() {
        let dir = std::env::temp_dir().join(format!("nccl-find-hdr-gcc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("p.c"),
            "#include <stdio.h>\n#include \"nccl.h\"\nint main(void) {\n\
             printf(\"%llu %llu %llu %llu\\n\", (unsigned long long)(NCCL_MAJOR), (unsigned long long)(NCCL_MINOR),\n\
             (unsigned long long)(NCCL_PATCH), (unsigned long long)(NCCL_VERSION_CODE));\n\
             printf(\"%s\", NCCL_SUFFIX);\n return 0;\n}\n",
        )
        .unwrap();
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        let versions = [
            (2, 8, 4),
            (2, 9, 6),
            (2, 21, 5),
            (2, 32, 3),
            (2, 0, 0),
            (3, 1, 12),
        ];
        let suffixes = ["", "a0", "rc1", "\\\"q\\\"", "x\\\\y", "post1"];
        for i in 0..48 {
            let ver = versions[i % versions.len()];
            let suffix = suffixes[(i / versions.len()) % suffixes.len()];
            let text = header(&mut r, ver, suffix);
            std::fs::write(dir.join("nccl.h"), &text).unwrap();
            // Which NCCL_ macros the preprocessor defines.
            let dm = gcc(&["-dM", "-E", "-x", "c", "nccl.h"], &dir);
            let mut defined: Vec<&str> = dm
                .lines()
                .filter_map(|l| l.strip_prefix("#define NCCL_"))
                .map(|l| l.split([' ', '(']).next().unwrap())
                .collect();
            defined.sort();
            assert_eq!(
                defined,
                ["H_", "MAJOR", "MINOR", "PATCH", "SUFFIX", "VERSION_CODE"],
                "{text}"
            );
            // Their values, from a compiled program.
            gcc(&["-o", "p", "p.c"], &dir);
            let out = Command::new(dir.join("p")).output().unwrap();
            let out = String::from_utf8(out.stdout).unwrap();
            let (nums, cc_suffix) = out.split_once('\n').unwrap();
            let n: Vec<u32> = nums.split(' ').map(|s| s.parse().unwrap()).collect();
            match parse_header(&text) {
                Header::Nccl2(v) => {
                    assert_eq!(
                        (v.major, v.minor, v.patch, v.code, v.suffix.as_str()),
                        (n[0], n[1], n[2], n[3], cc_suffix),
                        "header {i}:\n{text}"
                    );
                    assert_eq!((v.major, v.minor, v.patch), ver, "header {i}:\n{text}");
                }
                other => panic!("header {i}: {other:?}\n{text}"),
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
