//! PyTorch: `torch/lib/libtorch_cuda.so` needs `libnccl.so.2` (`DT_NEEDED`,
//! bound at import) and carries a `DT_RPATH` to
//! `$ORIGIN/../../nvidia/nccl/lib`, which `LD_LIBRARY_PATH` cannot override.
//! Since about 2.7, `torch/__init__.py` also preloads, after
//! `libtorch_global_deps.so`, the first `nvidia/nccl/lib/libnccl.so.*[0-9]`
//! (then `nvidia/cu<major>/lib/`, then `nccl/lib/`) of the entries of
//! `sys.path`, by path, so that one wins; older releases (2.1) preload only
//! when `libtorch_global_deps.so` fails to load.

use std::path::Path;

use super::{first_named, nccl_glob, via, Binding, Loaded, Row, Sim};

pub(super) const ROW: Row = Row {
    name: "torch",
    dist: "torch",
    present: |sp| sp.join("torch/lib/libtorch_cuda.so").is_file(),
    load,
    caught: None,
};

fn load(sim: &mut Sim, sp: &Path) -> Loaded {
    let torch = sp.join("torch");
    let consumer = torch.join("lib/libtorch_cuda.so");
    let init =
        nccl_find::internal::read_bounded(&torch.join("__init__.py"), 4 << 20).unwrap_or_default();
    let init = String::from_utf8_lossy(&init);
    let mut how = None;
    if init.contains("def _preload_cuda_lib(") && sim.nccl().is_none() {
        let major = cuda_major(&torch);
        'path: for p in sim.env.sys_path.clone() {
            let mut dirs = vec![p.join("nvidia/nccl/lib")];
            if let Some(m) = &major {
                dirs.push(p.join(format!("nvidia/cu{m}/lib")));
            }
            dirs.push(p.join("nccl/lib"));
            for d in dirs {
                if let Some(lib) = nccl_glob(&d) {
                    sim.preload(&lib);
                    how = Some(format!(
                        "preloaded by path by torch/__init__.py: the first on sys.path, in {}",
                        p.display()
                    ));
                    break 'path;
                }
            }
        }
    }
    let before = sim.nccl();
    if let Some(c) = first_named(&torch, "_C.", ".so") {
        sim.preload(&c);
    } else {
        sim.preload(&consumer);
    }
    let how = match (how, before) {
        (Some(h), _) => h,
        (None, Some(_)) => "already loaded".into(),
        (None, None) => via(sim),
    };
    Loaded {
        binding: Binding::Now(consumer),
        how,
        requires: None,
    }
}

/// The CUDA major version torch was built for (`torch/version.py`'s `cuda`).
fn cuda_major(torch: &Path) -> Option<String> {
    let v = nccl_find::internal::read_bounded(&torch.join("version.py"), 1 << 16).ok()?;
    let v = String::from_utf8_lossy(&v);
    let line = v.lines().find(|l| l.starts_with("cuda"))?;
    let value = line.split(['\'', '"']).nth(1)?;
    Some(value.split('.').next()?.to_string())
}
