//! The include dirs that `nccl.h`'s `#include <cuda_runtime.h>` needs, for
//! bindgen and C compilers: a CUDA toolkit's, or the CUDA runtime wheels'
//! beside a wheel's NCCL, or `/usr/include`.

use std::path::{Path, PathBuf};

use crate::context::Ctx;
use crate::inspect::Candidate;
use crate::sources::cuda;

/// Headers that the CUDA runtime headers include but that pip's
/// `nvidia-cuda-runtime-cu*` wheel does not ship: `(file, included from,
/// the wheel's include dir beside it, the wheel)`. A CUDA toolkit has all.
const CUDA_COMPANIONS: [(&str, &str, &str, &str); 2] = [
    (
        "crt/host_config.h",
        "cuda_runtime.h",
        "cuda_nvcc/include",
        "nvidia-cuda-nvcc",
    ),
    (
        "nv/target",
        "cuda_fp16.h",
        "cuda_cccl/include",
        "nvidia-cuda-cccl",
    ),
];

/// The include dirs that make `nccl.h`'s `#include <cuda_runtime.h>` work:
/// the one holding `cuda_runtime.h`, plus, for each companion header it
/// needs and lacks, the dir holding that (wheels are looked for beside a
/// wheel's NCCL, in `site-packages/nvidia/`).
pub(crate) fn cuda_headers(ctx: &Ctx, c: &Candidate) -> Result<Vec<PathBuf>, String> {
    let nvidia = c
        .root
        .as_ref()
        .and_then(|r| r.parent())
        .filter(|p| p.ends_with("nvidia"));
    let beside = |sub: &str| nvidia.map(|n| n.join(sub)).into_iter().collect::<Vec<_>>();
    let list = |l: Vec<PathBuf>| {
        l.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let cu = format!("cu{}", c.cuda_version.map_or(12, |v| v.major));
    let mut extra = beside("cuda_runtime/include");
    extra.push(ctx.path("/usr/include"));
    let runtime = cuda::find_file(ctx, c.cuda_version, "cuda_runtime.h", &["include"], extra).map_err(|looked| {
        format!(
            "no cuda_runtime.h (looked in {}). Install the CUDA toolkit and set CUDA_HOME, or pip install \
             nvidia-cuda-runtime-{cu} nvidia-cuda-nvcc-{cu} nvidia-cuda-cccl-{cu} beside the NCCL wheel",
            list(looked)
        )
    })?;
    let dir = runtime.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut dirs = vec![dir.clone()];
    for (file, from, wheel_dir, wheel) in CUDA_COMPANIONS {
        let needed = crate::files::read_bounded(&dir.join(from), 4 << 20)
            .map(|text| String::from_utf8_lossy(&text).contains(file))
            .unwrap_or(false);
        if !needed || dir.join(file).is_file() {
            continue;
        }
        let found = cuda::find_file(ctx, c.cuda_version, file, &["include"], beside(wheel_dir))
            .map_err(|looked| {
                format!(
                "{} has {from}, which includes {file}, and no {file} was found (looked in {}). \
                 pip install {wheel}-{cu} beside the NCCL wheel, or use the CUDA toolkit",
                dir.display(),
                list(looked)
            )
            })?;
        let mut inc = found.clone();
        for _ in Path::new(file).components() {
            inc.pop();
        }
        if !dirs.contains(&inc) {
            dirs.push(inc);
        }
    }
    Ok(dirs)
}
