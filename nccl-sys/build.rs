//! Finds NCCL with nccl-find, links it, and (with the `bindgen` feature)
//! generates the bindings from the located nccl.h.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // Prints the link flags, rerun-if-*, DEP_NCCL_* metadata and cfgs; on
    // failure prints the whole story to stderr and exits 1. None on docs.rs.
    let Some(nccl) = nccl_find::Config::new().probe_or_exit() else {
        return;
    };
    // This crate's own examples and tests run straight from target/: give
    // them an rpath, so that they load the NCCL they were linked against.
    // (Dependents' binaries use nccl_find::emit_rpath_from_dep instead.)
    // `-Xlinker` passes the directory verbatim (`-Wl,` would split it at a
    // comma); one the loader cannot take in an rpath (`:`, `$`) gets none.
    if !matches!(nccl.linking, nccl_find::Linking::Static { .. }) {
        if let Some(dir) = nccl
            .lib_dir
            .to_str()
            .filter(|d| !d.contains([':', '$', '\n', '\r']))
        {
            // DT_RPATH, searched before LD_LIBRARY_PATH (DT_RUNPATH is after).
            for arg in [
                "-Wl,--disable-new-dtags",
                "-Xlinker",
                "-rpath",
                "-Xlinker",
                dir,
            ] {
                println!("cargo:rustc-link-arg-examples={arg}");
            }
        }
    }
    #[cfg(feature = "bindgen")]
    generate(&nccl);
}

#[cfg(feature = "bindgen")]
fn generate(nccl: &nccl_find::Nccl) {
    let fail = |msg: String| -> ! {
        eprintln!("nccl-sys: {msg}");
        std::process::exit(1)
    };
    let cuda = match &nccl.cuda_include_dirs {
        Ok(dirs) => dirs.clone(),
        Err(why) => fail(format!(
            "the bindgen feature needs the CUDA headers that nccl.h includes: {why}. \
             Or build without the bindgen feature: the pre-generated bindings need no headers."
        )),
    };
    let header = nccl.include_paths[0].join("nccl.h");
    let bindings = bindgen::Builder::default()
        .header(header.display().to_string())
        .clang_arg(format!("-I{}", nccl.include_paths[0].display()))
        .clang_args(cuda.iter().map(|d| format!("-I{}", d.display())))
        .allowlist_function("nccl.*")
        .allowlist_type("nccl.*")
        .allowlist_var("NCCL_.*")
        .generate_comments(false)
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| fail(format!("bindgen could not read {}: {e}", header.display())));
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .unwrap_or_else(|e| fail(format!("writing the bindings: {e}")));
}
