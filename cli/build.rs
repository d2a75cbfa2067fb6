//! Records the target the `nccl-find` command was compiled for, so that it
//! (having no `TARGET` variable of its own at run time) probes for that
//! target by default. It reads no files, runs nothing, and cannot fail.
//! The library has no build script: every downstream build saves one unit.
fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=NCCL_FIND_BUILT_FOR={target}");
    println!("cargo:rerun-if-changed=build.rs");
}
