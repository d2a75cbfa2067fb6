//! The two lines a binary that uses cudarc needs: find NCCL, and give the
//! binary a loader directory (with an rpath to it) that holds every name
//! cudarc opens, linked to the `libnccl.so.2` nccl-find selected.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // cargo_metadata(false): this binary links nothing itself; the loader
    // directory gives cudarc its NCCL. On failure: the story, and exit 1.
    let Some(nccl) = nccl_find::Config::new()
        .cargo_metadata(false)
        .probe_or_exit()
    else {
        return;
    };
    let dir = nccl.emit_loader_dir_or_exit();
    // For the program's own check: the file that should be loaded.
    println!(
        "cargo:rustc-env=NCCL_FIND_SELECTED={}",
        dir.library.display()
    );
}
