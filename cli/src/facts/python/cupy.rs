//! CuPy: `cupy_backends/cuda/libs/nccl.*.so` needs `libnccl.so.2`
//! (`DT_NEEDED`, bound at import) and has no rpath; before importing it,
//! `cupy.cuda.nccl` loads NCCL by path through cuda.pathfinder (the
//! site-packages' wheel first), so the extension binds to that. Where that
//! import fails (`undefined symbol`), CuPy catches it, warns "nccl library
//! could not be loaded" and goes on without NCCL. What it asks of NCCL is
//! in `cupy/.data/_wheel.json` (`nccl.min_pypi_version`, for the CUDA
//! major the wheel was built for), not in its metadata.

use std::path::Path;

use super::{first_named, via, Binding, Loaded, Row, Sim};

pub(super) const ROW: Row = Row {
    name: "cupy",
    dist: "cupy",
    present: |sp| first_named(&sp.join("cupy_backends/cuda/libs"), "nccl.", ".so").is_some(),
    load,
    caught: Some(
        "CuPy warns \"nccl library could not be loaded\", and cupy.cuda.nccl has no communicator",
    ),
};

fn load(sim: &mut Sim, sp: &Path) -> Loaded {
    let ext = first_named(&sp.join("cupy_backends/cuda/libs"), "nccl.", ".so").unwrap_or_default();
    let how = sim.pathfinder();
    sim.preload(&ext);
    Loaded {
        binding: Binding::Now(ext),
        how: how.unwrap_or_else(|| via(sim)),
        requires: requires(sp),
    }
}

/// `nvidia-nccl-cu<major>>=<min>,<<next major>` from the wheel's
/// `_wheel.json`, as CuPy's own warning words it.
fn requires(sp: &Path) -> Option<String> {
    let data =
        nccl_find::internal::read_bounded(&sp.join("cupy/.data/_wheel.json"), 1 << 16).ok()?;
    let json: serde_json::Value = serde_json::from_slice(&data).ok()?;
    let cuda = json["cuda"].as_str()?.split('.').next()?;
    let min = json["nccl"]["min_pypi_version"].as_str()?;
    let major: u32 = min.split('.').next()?.parse().ok()?;
    // Words from a file: only a version's characters reach the terminal.
    let plain = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if !plain(cuda) || !plain(min) {
        return None;
    }
    Some(format!("nvidia-nccl-cu{cuda}>={min},<{}", major + 1))
}
