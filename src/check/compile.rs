//! The optional compile-and-run cross-check (feature `cc`): a tiny C
//! program, built with the `cc` crate against the found header and library,
//! prints `ncclGetVersion()` next to `NCCL_VERSION_CODE`. Only where host ==
//! target; the file-based checks stay the default.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::check::Linking;
use crate::probe::CompileCheck;

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
    cmd.arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", i.lib_dir.display()));
    match i.linking {
        Linking::Dynamic => {
            cmd.arg("-lnccl");
        }
        Linking::DynamicVerbatim => {
            cmd.arg("-l:libnccl.so.2");
        }
        Linking::Static { archive, cudart } => {
            cmd.arg(archive)
                .arg(cudart)
                .args(["-lstdc++", "-lpthread", "-ldl", "-lrt"]);
        }
    }
    cmd.arg(format!("-Wl,-rpath,{}", i.lib_dir.display()));
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
