fn main() {
    for key in ["INCLUDE", "LIB_DIR", "ROOT", "VERSION", "VERSION_CODE", "CUDA_VERSION"] {
        let name = format!("DEP_NCCL_{key}");
        println!("cargo:rerun-if-env-changed={name}");
        let value = std::env::var(&name).unwrap_or_else(|_| "<unset>".into());
        println!("cargo:rustc-env=SEEN_{name}={value}");
    }
    nccl_find::emit_rpath_from_dep();
}
