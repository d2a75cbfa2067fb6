//! Prints `NCCL <major>.<minor>.<patch>`, as the library actually loaded
//! reports it through `ncclGetVersion`. Needs no GPU.

fn main() {
    let mut code = 0;
    // SAFETY: ncclGetVersion writes one int through the pointer it is given,
    // which points at a live local.
    let rc = unsafe { nccl_sys::ncclGetVersion(&mut code) };
    if rc != nccl_sys::ncclResult_t_ncclSuccess {
        eprintln!("ncclGetVersion failed with NCCL error {rc}");
        std::process::exit(1);
    }
    let (x, y, z) = nccl_sys::version_from_code(code);
    println!("NCCL {x}.{y}.{z}");
}
