//! The optional compile-and-run cross-check (feature `cc`): a tiny C
//! program, built with the `cc` crate against the found header and library,
//! prints `ncclGetVersion()` next to `NCCL_VERSION_CODE`. Only where host ==
//! target; the file-based checks stay the default.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::check::{CompileCheck, LinkArg, Linking};
use crate::context::Ctx;
use crate::inspect::Candidate;
use crate::problem::ErrorKind;

const SOURCE: &str = r#"#include <stdio.h>
#include <nccl.h>
int main(void) {
  int v = 0;
  ncclResult_t r = ncclGetVersion(&v);
  printf("%d %d %d\n", (int)r, v, (int)NCCL_VERSION_CODE);
  return r == ncclSuccess ? 0 : 1;
}
"#;

pub(crate) struct Inputs<'a> {
    pub triple: &'a str,
    pub include: &'a Path,
    pub cuda_include: &'a [PathBuf],
    pub lib_dir: &'a Path,
    pub linking: &'a Linking,
}

/// The compile-and-run check of the selected install: skipped with a
/// warning where host != target; the program must load a library whose
/// `ncclGetVersion()` is the version read from the file.
pub(crate) fn check(
    ctx: &Ctx,
    c: &Candidate,
    linking: &Linking,
    cuda_include: &Result<Vec<PathBuf>, String>,
) -> Result<Option<CompileCheck>, ErrorKind> {
    let host = ctx
        .env
        .raw("HOST")
        .map(|h| h.to_string_lossy().into_owned());
    if host.as_deref().is_some_and(|h| h != ctx.target.triple) {
        ctx.warn("the compile-and-run check was skipped: it runs only where host == target".into());
        return Ok(None);
    }
    let work = ctx
        .env
        .raw("OUT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let empty = Vec::new();
    let inputs = Inputs {
        triple: &ctx.target.triple,
        include: c.include_dir().unwrap_or(Path::new("/")),
        cuda_include: cuda_include.as_ref().unwrap_or(&empty),
        lib_dir: c.lib_dir.as_deref().unwrap_or(Path::new("/")),
        linking,
    };
    let fail = |why: String| ErrorKind::CompileCheck {
        why: match cuda_include {
            Err(cuda) => format!("{why}\n(nccl.h needs the CUDA headers: {cuda})"),
            Ok(_) => why,
        },
    };
    let got = run(inputs, &work).map_err(fail)?;
    let file_code = c.library_version.as_ref().map_or(0, |v| v.code);
    if got.runtime_code != file_code {
        return Err(ErrorKind::CompileCheck {
            why: format!(
                "the program loaded a library whose ncclGetVersion() is {}, but the file {} says {file_code}: \
                 the library loaded is not the one inspected",
                got.runtime_code,
                c.library_real.as_deref().unwrap_or(Path::new("?")).display()
            ),
        });
    }
    Ok(Some(CompileCheck {
        runtime_code: got.runtime_code,
        header_code: got.header_code,
    }))
}

/// Builds and runs the check program in a fresh directory under `work`.
pub(crate) fn run(i: Inputs, work: &Path) -> Result<CompileCheck, String> {
    let dir = work.join(format!("nccl-find-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let result = build_and_run(&i, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn build_and_run(i: &Inputs, dir: &Path) -> Result<CompileCheck, String> {
    let src = dir.join("check.c");
    std::fs::write(&src, SOURCE).map_err(|e| e.to_string())?;
    let exe = dir.join("check");
    let compiler = cc::Build::new()
        .target(i.triple)
        .host(i.triple)
        .opt_level(0)
        .cargo_metadata(false)
        .warnings(false)
        .try_get_compiler()
        .map_err(|e| format!("no C compiler: {e}"))?;
    let mut cmd = compiler.to_command();
    cmd.arg(format!("-I{}", i.include.display()));
    for d in i.cuda_include {
        cmd.arg(format!("-I{}", d.display()));
    }
    cmd.arg(&src).arg("-o").arg(&exe);
    for a in i.linking.args(i.lib_dir) {
        match a {
            LinkArg::SearchDir(d) => cmd.arg(format!("-L{}", d.display())),
            LinkArg::Shared(l) => cmd.arg(format!("-l{l}")),
            LinkArg::SharedFile(f) => cmd.arg(format!("-l:{f}")),
            LinkArg::Static { file, .. } => cmd.arg(file),
        };
    }
    // Verbatim: `-Wl,` would split a comma in the directory.
    cmd.args(["-Xlinker", "-rpath", "-Xlinker"]).arg(i.lib_dir);
    let out = cmd
        .output()
        .map_err(|e| format!("running the C compiler: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "the check program did not build:\n{}",
            String::from_utf8_lossy(&out.stderr).trim_end()
        ));
    }
    let out = Command::new(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .map_err(|e| format!("running the check program: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let nums: Vec<i64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    match nums[..] {
        [0, runtime, header] => Ok(CompileCheck {
            runtime_code: runtime as u32,
            header_code: header as u32,
        }),
        _ => Err(format!(
            "the check program failed (status {}): {}{}",
            out.status,
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}
