//! The loader model against the real loader. Programs and libraries are
//! built with `cc` in many shapes (DT_RPATH and DT_RUNPATH on the program and
//! on a library between, `$ORIGIN`, `$PLATFORM`, `LD_LIBRARY_PATH`,
//! `LD_PRELOAD`, a `dlopen` by path before the need, `glibc-hwcaps`), each is
//! run, and the `libnccl.so.2` it maps (`/proc/self/maps`) must be the file
//! the model names, or nothing when the model names nothing.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use nccl_find::internal::{LoaderFacts, Process};

const MAIN: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!dlopen(argv[i], RTLD_NOW | RTLD_GLOBAL)) {
            fprintf(stderr, "dlopen %s: %s\n", argv[i], dlerror());
            return 2;
        }
    }
    FILE *f = fopen("/proc/self/maps", "r");
    char line[8192];
    while (f && fgets(line, sizeof line, f)) {
        char *p = strchr(line, '/');
        if (p && strstr(p, "libnccl")) printf("%s", p);
    }
    return 0;
}
"#;

struct Lab {
    dir: PathBuf,
}

impl Lab {
    fn new() -> Option<Lab> {
        if Command::new("cc").arg("--version").output().is_err() {
            assert!(
                std::env::var_os("NCCL_FIND_REQUIRE_TOOLS").is_none(),
                "cc is needed"
            );
            eprintln!("skipped: no cc");
            return None;
        }
        let dir =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ldso-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("main.c"), MAIN).unwrap();
        std::fs::write(
            dir.join("nccl.c"),
            "int ncclGetVersion(int *v) { *v = 1; return 0; }\n",
        )
        .unwrap();
        std::fs::write(dir.join("mid.c"), "int mid(void) { return 1; }\n").unwrap();
        Some(Lab { dir })
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    fn cc(&self, args: &[&str]) {
        let out = Command::new("cc")
            .current_dir(&self.dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cc {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A `libnccl.so.2` (soname `libnccl.so.2`) in `dir`.
    fn nccl(&self, dir: &str) -> PathBuf {
        std::fs::create_dir_all(self.p(dir)).unwrap();
        let out = format!("{dir}/libnccl.so.2");
        self.cc(&[
            "-shared",
            "-fPIC",
            "-o",
            &out,
            "-Wl,-soname,libnccl.so.2",
            "nccl.c",
        ]);
        self.p(&out)
    }

    /// `dir/libmid.so`, needing `libnccl.so.2`, with these link flags.
    fn mid(&self, dir: &str, flags: &[&str]) {
        std::fs::create_dir_all(self.p(dir)).unwrap();
        let out = format!("{dir}/libmid.so");
        let mut args = vec![
            "-shared",
            "-fPIC",
            "-o",
            &out,
            "-Wl,-soname,libmid.so",
            "mid.c",
        ];
        args.extend_from_slice(&["-La", "-Wl,--no-as-needed", "-l:libnccl.so.2"]);
        args.extend_from_slice(flags);
        self.cc(&args);
    }

    /// The program `name`, linked with `flags` (libraries and rpaths).
    fn program(&self, name: &str, flags: &[&str]) -> PathBuf {
        let mut args = vec!["-o", name, "main.c", "-Wl,--no-as-needed"];
        args.extend_from_slice(flags);
        args.push("-ldl");
        self.cc(&args);
        self.p(name)
    }
}

/// The loader's facts as the real `ld.so` tells them, with `ld_library_path`
/// and `preload` as the run will have them.
fn facts(ld_library_path: &[PathBuf], preload: &[PathBuf]) -> LoaderFacts {
    let ld = ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("the loader");
    let ask = |flag: &str| {
        let out = Command::new(ld).arg(flag).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut f = LoaderFacts::default();
    f.read_ld_so(&ask("--help"), &ask("--list-diagnostics"));
    f.ld_library_path = ld_library_path.to_vec();
    f.preload = preload.iter().map(|p| p.display().to_string()).collect();
    if let Ok(data) = std::fs::read("/etc/ld.so.cache") {
        f.read_ld_cache(&data);
    }
    f
}

/// What the real loader mapped, and what the model says: the `libnccl`
/// files, each once, in the order they appear.
fn both(
    prog: &Path,
    ld: &[PathBuf],
    preload: &[PathBuf],
    dlopen: &[&str],
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let join = |v: &[PathBuf]| {
        v.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    };
    let mut cmd = Command::new(prog);
    cmd.args(dlopen)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD");
    if !ld.is_empty() {
        cmd.env("LD_LIBRARY_PATH", join(ld));
    }
    if !preload.is_empty() {
        cmd.env("LD_PRELOAD", join(preload));
    }
    let out = cmd.output().unwrap();
    let mut real: Vec<PathBuf> = Vec::new();
    if out.status.success() {
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            let p = std::fs::canonicalize(l.trim()).unwrap();
            if !real.contains(&p) {
                real.push(p);
            }
        }
    }
    let f = facts(ld, preload);
    let mut model = Process::exec(&f, Path::new("/"), prog);
    let mut ok = true;
    for name in dlopen {
        ok &= model.dlopen(name, 0).is_some();
    }
    let mut predicted = Vec::new();
    let unmet = model.mapped.iter().any(|m| {
        m.object
            .needed
            .iter()
            .any(|n| model.find_mapped(n).is_none())
    });
    if ok && !unmet {
        for m in &model.mapped {
            let real = std::fs::canonicalize(&m.object.real).unwrap();
            if real.to_string_lossy().contains("libnccl") && !predicted.contains(&real) {
                predicted.push(real);
            }
        }
    }
    (real, predicted)
}

/// One shape: the program, how it runs, and the file it must map.
struct Case {
    what: &'static str,
    prog: PathBuf,
    ld: Vec<PathBuf>,
    preload: Vec<PathBuf>,
    dlopen: Vec<String>,
    expect: Vec<PathBuf>,
}

fn case(
    what: &'static str,
    prog: PathBuf,
    ld: Vec<PathBuf>,
    preload: Vec<PathBuf>,
    dlopen: Vec<String>,
    expect: Vec<PathBuf>,
) -> Case {
    Case {
        what,
        prog,
        ld,
        preload,
        dlopen,
        expect,
    }
}

#[test]
fn the_model_maps_what_the_real_loader_maps() {
    let Some(lab) = Lab::new() else { return };
    let a = lab.nccl("a");
    let b = lab.nccl("b");
    let c = lab.nccl("c");
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap();
    let (a, b, c) = (canon(&a), canon(&b), canon(&c));
    let d = |rel: &str| lab.p(rel);
    let s = |p: PathBuf| p.display().to_string();
    let rpath = |dirs: &str| format!("-Wl,--disable-new-dtags,-rpath,{dirs}");
    let runpath = |dirs: &str| format!("-Wl,--enable-new-dtags,-rpath,{dirs}");
    let mut cases: Vec<Case> = Vec::new();

    // 1-3: the program's own DT_RPATH wins over LD_LIBRARY_PATH; its
    // DT_RUNPATH does not; alone, its DT_RUNPATH serves.
    let p = lab.program("p-rpath", &["-La", "-l:libnccl.so.2", &rpath(&s(d("a")))]);
    cases.push(case(
        "DT_RPATH over LD_LIBRARY_PATH",
        p,
        vec![d("b")],
        vec![],
        vec![],
        vec![a.clone()],
    ));
    let p = lab.program(
        "p-runpath",
        &["-La", "-l:libnccl.so.2", &runpath(&s(d("a")))],
    );
    cases.push(case(
        "LD_LIBRARY_PATH over DT_RUNPATH",
        p.clone(),
        vec![d("b")],
        vec![],
        vec![],
        vec![b.clone()],
    ));
    cases.push(case(
        "DT_RUNPATH alone",
        p,
        vec![],
        vec![],
        vec![],
        vec![a.clone()],
    ));

    // 4-5: a library between, with no path of its own: the program's
    // DT_RPATH serves its need; the program's DT_RUNPATH does not (it
    // serves the program's own needs only), so without LD_LIBRARY_PATH
    // nothing is found.
    lab.mid("m", &[]);
    let p = lab.program(
        "p-mid-rpath",
        &[
            "-Lm",
            "-lmid",
            &rpath(&format!("{}:{}", s(d("m")), s(d("a")))),
        ],
    );
    cases.push(case(
        "a loader's DT_RPATH",
        p,
        vec![d("b")],
        vec![],
        vec![],
        vec![a.clone()],
    ));
    let p = lab.program(
        "p-mid-runpath",
        &[
            "-Lm",
            "-lmid",
            &runpath(&format!("{}:{}", s(d("m")), s(d("a")))),
        ],
    );
    cases.push(case(
        "a loader's DT_RUNPATH serves no one else",
        p.clone(),
        vec![],
        vec![],
        vec![],
        vec![],
    ));
    cases.push(case(
        "... LD_LIBRARY_PATH then",
        p,
        vec![d("b")],
        vec![],
        vec![],
        vec![b.clone()],
    ));

    // 6: $ORIGIN in the library's own DT_RPATH, before LD_LIBRARY_PATH.
    lab.mid("o/lib", &[&rpath("$ORIGIN/../../c")]);
    let p = lab.program("p-origin", &["-Lo/lib", "-lmid", &rpath(&s(d("o/lib")))]);
    cases.push(case(
        "$ORIGIN in a library's DT_RPATH",
        p,
        vec![d("b")],
        vec![],
        vec![],
        vec![c.clone()],
    ));

    // 7: the library's DT_RUNPATH: no DT_RPATH of anyone counts (the
    // program's names a), LD_LIBRARY_PATH first, then its own.
    lab.mid("r/lib", &[&runpath("$ORIGIN/../../c")]);
    let p = lab.program(
        "p-mid-own-runpath",
        &[
            "-Lr/lib",
            "-lmid",
            &rpath(&format!("{}:{}", s(d("r/lib")), s(d("a")))),
        ],
    );
    cases.push(case(
        "a library's DT_RUNPATH turns DT_RPATHs off",
        p.clone(),
        vec![],
        vec![],
        vec![],
        vec![c.clone()],
    ));
    cases.push(case(
        "... and comes after LD_LIBRARY_PATH",
        p,
        vec![d("b")],
        vec![],
        vec![],
        vec![b.clone()],
    ));

    // 8: a chain of three: the nearest loader's DT_RPATH first.
    lab.mid("t/mid", &[]);
    std::fs::create_dir_all(d("t/top")).unwrap();
    lab.cc(&[
        "-shared",
        "-fPIC",
        "-o",
        "t/top/libtop.so",
        "-Wl,-soname,libtop.so",
        "mid.c",
        "-Lt/mid",
        "-Wl,--no-as-needed",
        "-lmid",
        &rpath(&format!("{}:{}", s(d("t/mid")), s(d("c")))),
    ]);
    let p = lab.program(
        "p-chain",
        &[
            "-Lt/top",
            "-ltop",
            &rpath(&format!("{}:{}", s(d("t/top")), s(d("a")))),
        ],
    );
    cases.push(case(
        "the nearest loader's DT_RPATH",
        p,
        vec![d("b")],
        vec![],
        vec![],
        vec![c.clone()],
    ));

    // 9: LD_PRELOAD wins over every path.
    let p = lab.program("p-preload", &["-La", "-l:libnccl.so.2", &rpath(&s(d("a")))]);
    cases.push(case(
        "LD_PRELOAD",
        p,
        vec![],
        vec![b.clone()],
        vec![],
        vec![b.clone()],
    ));

    // 10: a library loaded by path first (as CuPy and nccl4py do) answers
    // to its soname when a later library needs it.
    let p = lab.program("p-dlopen", &[]);
    let m = s(d("m/libmid.so"));
    let by_path = s(c.clone());
    cases.push(case(
        "loaded by path, then needed",
        p.clone(),
        vec![d("b")],
        vec![],
        vec![by_path, m.clone()],
        vec![c.clone()],
    ));
    cases.push(case(
        "needed, found through LD_LIBRARY_PATH",
        p.clone(),
        vec![d("b")],
        vec![],
        vec![m],
        vec![b.clone()],
    ));

    // 11: $PLATFORM in a DT_RPATH, as the running loader expands it
    // (`haswell` on many x86-64 CPUs, else `x86_64`).
    let plat = facts(&[], &[]).platform.expect("ld.so names its platform");
    let h = lab.nccl(&format!("plat/{plat}"));
    let p = lab.program(
        "p-platform",
        &[
            "-La",
            "-l:libnccl.so.2",
            &rpath(&format!("{}/$PLATFORM", s(d("plat")))),
        ],
    );
    cases.push(case(
        "$PLATFORM",
        p,
        vec![d("b")],
        vec![],
        vec![],
        vec![canon(&h)],
    ));

    // 12: glibc-hwcaps subdirectories come before their directory.
    let levels = facts(&[], &[]).hwcaps;
    let hw = match levels.last() {
        Some(level) => canon(&lab.nccl(&format!("hw/glibc-hwcaps/{level}"))),
        None => canon(&lab.nccl("hw")),
    };
    lab.nccl("hw");
    let p = lab.program("p-hwcaps", &["-La", "-l:libnccl.so.2"]);
    cases.push(case(
        "glibc-hwcaps",
        p,
        vec![d("hw")],
        vec![],
        vec![],
        vec![hw],
    ));

    // 12b: the legacy hwcap subdirectories (glibc before 2.37) come after
    // glibc-hwcaps and before their directory: the best one, and the last.
    let legacy = facts(&[], &[]).legacy;
    for (what, sub) in [
        ("the first legacy hwcap subdirectory", legacy.first()),
        ("the last legacy hwcap subdirectory", legacy.last()),
    ] {
        let Some(sub) = sub else { continue };
        let dir = format!("legacy-{}", cases.len());
        let want = canon(&lab.nccl(&format!("{dir}/{sub}")));
        lab.nccl(&dir);
        let p = lab.program(&format!("p-{dir}"), &["-La", "-l:libnccl.so.2"]);
        cases.push(case(what, p, vec![d(&dir)], vec![], vec![], vec![want]));
    }

    // 13: nothing anywhere: both say so.
    let p = lab.program("p-none", &["-La", "-l:libnccl.so.2"]);
    cases.push(case("nowhere", p, vec![], vec![], vec![], vec![]));

    // 14: the same file under two names is mapped once.
    symlink("libnccl.so.2", d("a/libnccl.so")).unwrap();
    let p = lab.program("p-twice", &["-La", "-l:libnccl.so.2", &rpath(&s(d("a")))]);
    let alias = s(d("a/libnccl.so"));
    cases.push(case(
        "one file, two names",
        p,
        vec![],
        vec![],
        vec![alias],
        vec![a.clone()],
    ));

    let mut wrong = Vec::new();
    for Case {
        what,
        prog,
        ld,
        preload,
        dlopen,
        expect,
    } in &cases
    {
        let open: Vec<&str> = dlopen.iter().map(String::as_str).collect();
        let (real, model) = both(prog, ld, preload, &open);
        if real != *expect || model != real {
            wrong.push(format!(
                "{what}: expected {expect:?}, the loader mapped {real:?}, the model says {model:?}"
            ));
        }
    }
    assert!(cases.len() >= 12);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let _ = std::fs::remove_dir_all(&lab.dir);
}

/// Without `ld.so` to ask, the directories follow from the layout, and on
/// this machine they are the loader's own. `$PLATFORM` depends on the CPU
/// (`haswell` or `x86_64` on the same architecture), so the layout leaves
/// it unknown, and what the loader says is what it expands.
#[test]
fn the_layouts_system_directories_are_the_loaders() {
    let asked = facts(&[], &[]);
    let ma = match std::env::consts::ARCH {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        _ => return,
    };
    let guessed = LoaderFacts::for_target(Path::new("/"), Some(ma));
    assert_eq!(
        (&guessed.system_dirs, &guessed.lib, &guessed.platform),
        (&asked.system_dirs, &asked.lib, &None)
    );
    let Some(platform) = asked.platform else {
        panic!("ld.so --list-diagnostics names no dl_platform")
    };
    // The loader's own search path names the platform's subdirectory
    // wherever it has legacy hwcap subdirectories (glibc before 2.37).
    if !asked.legacy.is_empty() {
        let out = Command::new("/bin/true")
            .env("LD_DEBUG", "libs")
            .env("LD_LIBRARY_PATH", "/nonexistent-nccl-find")
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        let line = log
            .lines()
            .find(|l| l.contains("(LD_LIBRARY_PATH)"))
            .unwrap_or_else(|| panic!("LD_DEBUG=libs shows no LD_LIBRARY_PATH search: {log}"));
        let real: Vec<&str> = line
            .split_once("search path=")
            .unwrap()
            .1
            .split_whitespace()
            .next()
            .unwrap()
            .split(':')
            .collect();
        let mut model = Vec::new();
        for level in &asked.hwcaps {
            model.push(format!("/nonexistent-nccl-find/glibc-hwcaps/{level}"));
        }
        for sub in &asked.legacy {
            model.push(format!("/nonexistent-nccl-find/{sub}"));
        }
        model.push("/nonexistent-nccl-find".to_string());
        assert_eq!(
            real, model,
            "the loader's search path (platform {platform})"
        );
    }
}
