//! The header parser against the real C preprocessor. Headers are generated
//! here with the version macros written in every form C allows (hex, octal,
//! suffixes, parentheses, expressions, line splices, comments inside) and
//! decoys the compiler must skip (comments, `#if 0`, `#ifdef` of an
//! undefined name, `#elif` chains, strings). For each, `gcc -dM -E` says
//! which macros are defined, and a program compiled with gcc prints their
//! values; what nccl-find reads must be exactly that.

use std::path::Path;
use std::process::Command;

use nccl_find::internal::{parse_header, Header};

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
