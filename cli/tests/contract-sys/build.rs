//! The contract: NCCL's headers from `NCCL_INCLUDE_DIR` (else a built
//! checkout's `NCCL_SOURCE_DIR/build/include`), which must hold `nccl.h`,
//! `nccl_device.h` and `nccl_device/`; the library from `NCCL_LIB_DIR` (else
//! `NCCL_SOURCE_DIR/build/lib`), which must hold `libnccl.so`; CUDA's
//! headers from `CUDA_HOME`, `CUDA_PATH` or the `nvcc` on `PATH`, whose
//! `include/` must hold `cuda.h` and `cuda_runtime.h`. No version check, no
//! rpath. Nothing else is read.

use std::path::{Path, PathBuf};

fn var(name: &str) -> Option<PathBuf> {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn fail(msg: String) -> ! {
    eprintln!("contract-sys: {msg}");
    std::process::exit(1)
}

fn require(dir: &Path, names: &[&str], from: &str) {
    for n in names {
        if !dir.join(n).exists() {
            fail(format!("{from}: {} has no {n}", dir.display()));
        }
    }
}

fn cuda_home() -> PathBuf {
    if let Some(d) = var("CUDA_HOME").or_else(|| var("CUDA_PATH")) {
        return d;
    }
    let path = var("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let nvcc = dir.join("nvcc");
        if nvcc.is_file() {
            if let Some(home) = nvcc
                .canonicalize()
                .ok()
                .and_then(|p| Some(p.parent()?.parent()?.to_path_buf()))
            {
                return home;
            }
        }
    }
    fail("set CUDA_HOME (or CUDA_PATH), or put nvcc on PATH".into())
}

fn main() {
    let source = var("NCCL_SOURCE_DIR");
    let include = var("NCCL_INCLUDE_DIR")
        .or_else(|| source.as_ref().map(|s| s.join("build/include")))
        .unwrap_or_else(|| {
            fail("set NCCL_INCLUDE_DIR, or NCCL_SOURCE_DIR to a built checkout".into())
        });
    let lib = var("NCCL_LIB_DIR")
        .or_else(|| source.as_ref().map(|s| s.join("build/lib")))
        .unwrap_or_else(|| fail("set NCCL_LIB_DIR, or NCCL_SOURCE_DIR to a built checkout".into()));
    require(
        &include,
        &["nccl.h", "nccl_device.h", "nccl_device"],
        "NCCL's headers",
    );
    require(&lib, &["libnccl.so"], "NCCL's library");
    let cuda = cuda_home().join("include");
    require(&cuda, &["cuda.h", "cuda_runtime.h"], "CUDA's headers");

    let bindings = bindgen::Builder::default()
        .header_contents(
            "wrapper.hpp",
            "#include <nccl.h>\n#include <nccl_device.h>\n",
        )
        .clang_args(["-x", "c++", "-std=c++17"])
        .clang_arg(format!("-I{}", include.display()))
        .clang_arg(format!("-I{}", cuda.display()))
        .allowlist_function("nccl.*")
        .allowlist_type("nccl.*")
        .allowlist_var("NCCL_.*")
        .generate_comments(false)
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| fail(format!("bindgen: {e}")));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .unwrap_or_else(|e| fail(format!("writing the bindings: {e}")));
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=nccl");
}
