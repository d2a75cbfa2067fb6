//! CuPy: `cupy_backends/cuda/libs/nccl.*.so` needs `libnccl.so.2`
//! (`DT_NEEDED`, bound at import) and has no rpath; before importing it,
//! `cupy.cuda.nccl` loads NCCL by path through cuda.pathfinder (the
//! site-packages' wheel first), so the extension binds to that.

use std::path::Path;

use super::{first_named, via, Binding, Loaded, Row, Sim};

pub(super) const ROW: Row = Row {
    name: "cupy",
    dist: "cupy",
    present: |sp| first_named(&sp.join("cupy_backends/cuda/libs"), "nccl.", ".so").is_some(),
    load,
};

fn load(sim: &mut Sim, sp: &Path) -> Loaded {
    let ext = first_named(&sp.join("cupy_backends/cuda/libs"), "nccl.", ".so").unwrap_or_default();
    let how = sim.pathfinder();
    sim.preload(&ext);
    Loaded {
        binding: Binding::Now(ext),
        how: how.unwrap_or_else(|| via(sim)),
    }
}
