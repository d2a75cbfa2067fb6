//! Paddle: opens `$FLAGS_nccl_dir/libnccl.so`, else `libnccl.so` through
//! the loader (a name NVIDIA's wheels do not ship), and looks each
//! function up when it needs it.

use std::path::Path;

use super::{via, Binding, Loaded, Row, Sim};

pub(super) const ROW: Row = Row {
    name: "paddle",
    dist: "paddlepaddle",
    present: |sp| sp.join("paddle/__init__.py").is_file(),
    load,
    caught: None,
};

fn load(sim: &mut Sim, _sp: &Path) -> Loaded {
    let how = match std::env::var_os("FLAGS_nccl_dir").filter(|v| !v.is_empty()) {
        Some(d) => {
            sim.preload(&Path::new(&d).join("libnccl.so"));
            "FLAGS_nccl_dir".to_string()
        }
        None => {
            sim.process.dlopen("libnccl.so", 0);
            via(sim)
        }
    };
    Loaded {
        binding: Binding::Lazy,
        how,
        requires: None,
    }
}
