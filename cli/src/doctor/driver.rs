//! doctor's `driver` check: libcuda's version and GPUs, against the CUDA
//! version NCCL was built for.

use nccl_find::Nccl;

use super::{Area, Findings, Level};
use crate::facts::host::Facts;

/// The driver area.
pub(super) fn check(f: &mut Findings, facts: &Facts, nccl: Option<&Nccl>) {
    let d = &facts.driver;
    let Some(v) = d.version else {
        f.add(
            Area::Driver,
            Level::Problem,
            format!(
                "no NVIDIA driver: libcuda.so.1 cannot be used ({}); NCCL cannot run here",
                d.error.as_deref().unwrap_or("not found")
            ),
            Some("install the NVIDIA driver; in a container, run it with the NVIDIA container toolkit (--gpus all)".into()),
        );
        return;
    };
    let cuda = nccl_find::CudaVersion::from_code(u32::try_from(v).unwrap_or(0));
    f.add(
        Area::Driver,
        Level::Ok,
        format!(
            "driver supports CUDA {cuda} ({}){}",
            d.libcuda.as_deref().unwrap_or("libcuda.so.1"),
            d.gpus
                .map(|g| format!("; {g} GPU{} visible", if g == 1 { "" } else { "s" }))
                .unwrap_or_default()
        ),
        None,
    );
    if let Some(e) = &d.error {
        f.add(
            Area::Driver,
            Level::Problem,
            format!("the driver does not start: {e}"),
            Some("check `nvidia-smi`, and that this process may use the GPU devices".into()),
        );
    } else if d.gpus == Some(0) {
        f.add(
            Area::Driver,
            Level::Problem,
            "the driver sees no GPU".to_string(),
            Some("check CUDA_VISIBLE_DEVICES and `nvidia-smi`".into()),
        );
    }
    if let Some(cu) = nccl.and_then(|n| n.cuda_version) {
        let major = cuda.major;
        if cuda.major < cu.major {
            f.add(
                Area::Driver,
                Level::Problem,
                format!("NCCL was built for CUDA {cu}, but the driver supports only CUDA {cuda}: NCCL fails with `unhandled cuda error`"),
                Some(format!("update the driver, or use an NCCL built for CUDA {major} (pip install nvidia-nccl-cu{major})")),
            );
        } else if cuda.major == cu.major && cuda.minor < cu.minor {
            f.add(
                Area::Driver,
                Level::Note,
                format!("NCCL was built for CUDA {cu} and the driver supports CUDA {cuda}: this relies on CUDA's minor-version compatibility"),
                Some("update the driver if NCCL reports `unhandled cuda error`".into()),
            );
        }
    }
}
