//! nccl4py (NVIDIA's Python binding, `import nccl`): each function from
//! what is already loaded, else from cuda.pathfinder's NCCL, looked up when
//! first called.

use std::path::Path;

use super::{via, Binding, Loaded, Row, Sim};

pub(super) const ROW: Row = Row {
    name: "nccl4py",
    dist: "nccl4py",
    present: |sp| sp.join("nccl/core").is_dir(),
    load,
    caught: None,
};

fn load(sim: &mut Sim, _sp: &Path) -> Loaded {
    let how = sim.pathfinder();
    Loaded {
        binding: Binding::Lazy,
        how: how.unwrap_or_else(|| via(sim)),
        requires: None,
    }
}
