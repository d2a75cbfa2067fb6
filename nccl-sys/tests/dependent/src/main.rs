fn main() {
    println!("DEP_NCCL_INCLUDE={}", env!("SEEN_DEP_NCCL_INCLUDE"));
    println!("DEP_NCCL_LIB_DIR={}", env!("SEEN_DEP_NCCL_LIB_DIR"));
    println!("DEP_NCCL_ROOT={}", env!("SEEN_DEP_NCCL_ROOT"));
    println!("DEP_NCCL_VERSION={}", env!("SEEN_DEP_NCCL_VERSION"));
    println!("DEP_NCCL_VERSION_CODE={}", env!("SEEN_DEP_NCCL_VERSION_CODE"));
    println!("DEP_NCCL_CUDA_VERSION={}", env!("SEEN_DEP_NCCL_CUDA_VERSION"));
    let mut code = 0;
    // SAFETY: ncclGetVersion writes one int through a pointer to a live local.
    let rc = unsafe { nccl_sys::ncclGetVersion(&mut code) };
    println!("loaded={rc}:{code}");
}
