//! Records the target this copy of nccl-find was compiled for, so that the
//! command-line tool (which has no `TARGET` variable of its own) knows which
//! multiarch directories and target-prefixed variables to use. It reads no
//! files, runs nothing, and cannot fail.
fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=NCCL_FIND_BUILT_FOR={target}");
    println!("cargo:rerun-if-changed=build.rs");
}
