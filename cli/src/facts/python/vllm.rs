//! vLLM: its NCCL wrapper opens `$VLLM_NCCL_SO_PATH`, else `libnccl.so.2`
//! by name, which in a vLLM process is torch's (torch is imported first),
//! and looks the functions up at start.

use std::path::Path;

use super::{via, Binding, Loaded, Row, Sim};

pub(super) const ROW: Row = Row {
    name: "vllm",
    dist: "vllm",
    present: |sp| sp.join("vllm/__init__.py").is_file(),
    load,
    caught: None,
};

fn load(sim: &mut Sim, sp: &Path) -> Loaded {
    if sim.nccl().is_none() && (super::torch::ROW.present)(sp) {
        (super::torch::ROW.load)(sim, sp);
    }
    match std::env::var_os("VLLM_NCCL_SO_PATH").filter(|v| !v.is_empty()) {
        Some(p) => {
            sim.preload(Path::new(&p));
            Loaded {
                binding: Binding::Lazy,
                how: "VLLM_NCCL_SO_PATH".into(),
                requires: None,
            }
        }
        None => {
            sim.process.dlopen("libnccl.so.2", 0);
            Loaded {
                binding: Binding::Lazy,
                how: format!("by name, after torch ({})", via(sim)),
                requires: None,
            }
        }
    }
}
