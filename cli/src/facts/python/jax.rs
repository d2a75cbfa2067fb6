//! JAX's CUDA plugin: `jax_plugins/xla_cuda<N>/` preloads the
//! site-packages' `nvidia/nccl/lib/libnccl.so.2`, then XLA opens
//! `libnccl.so.2` from `xla_cuda_plugin.so` (whose rpath ends in
//! `nvidia/nccl/lib`) and looks each function up when it needs it.

use std::path::Path;

use super::{first_named, via, Binding, Loaded, Row, Sim};

pub(super) const ROW: Row = Row {
    name: "jax",
    dist: "jax_cuda",
    present: |sp| plugin(sp).is_some(),
    load,
    caught: None,
};

/// `jax_plugins/xla_cuda<N>/xla_cuda_plugin.so`.
fn plugin(sp: &Path) -> Option<std::path::PathBuf> {
    let dir = first_named(&sp.join("jax_plugins"), "xla_cuda", "")?;
    let so = dir.join("xla_cuda_plugin.so");
    so.is_file().then_some(so)
}

fn load(sim: &mut Sim, sp: &Path) -> Loaded {
    let pre = sp.join("nvidia/nccl/lib/libnccl.so.2");
    let preloaded = sim.nccl().is_none() && sim.preload(&pre);
    let caller = plugin(sp).and_then(|p| sim.process.dlopen(&p.display().to_string(), 0));
    if let Some(c) = caller {
        sim.process.dlopen("libnccl.so.2", c);
    }
    Loaded {
        binding: Binding::Lazy,
        how: if preloaded {
            format!("preloaded by the plugin from {}", sp.display())
        } else {
            via(sim)
        },
        requires: None,
    }
}
