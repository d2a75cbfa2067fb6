//! The include dirs that `nccl.h`'s `#include <cuda_runtime.h>` needs, for
//! bindgen and C compilers: a CUDA toolkit's, or the CUDA runtime wheels'
//! beside a wheel's NCCL, or `/usr/include`.

use std::path::{Path, PathBuf};

use crate::context::Ctx;
use crate::inspect::Candidate;
use crate::problem::list;
use crate::sources::cuda;

/// Headers that the CUDA runtime headers include but that pip's CUDA
/// runtime wheel does not ship: `(file, included from, the wheel that
/// has it)`. A CUDA toolkit has all.
const CUDA_COMPANIONS: [(&str, &str, &str); 2] = [
    ("crt/host_config.h", "cuda_runtime.h", "crt"),
    ("nv/target", "cuda_fp16.h", "cccl"),
];

/// Where pip's CUDA wheels for CUDA `major` put their headers, under
/// `site-packages/nvidia/`, and what to install: CUDA 12's wheels each have
/// a directory (`cuda_runtime/include`) and a `-cu12` name; CUDA 13's all
/// share `cu13/include` and are named without it (`nvidia-cuda-runtime`,
/// pinned to the major), `crt/` coming from `nvidia-cuda-crt` instead of
/// the nvcc wheel.
fn wheel(part: &str, major: u32) -> (String, String) {
    if major >= 13 {
        let name = match part {
            "runtime" => "nvidia-cuda-runtime",
            "crt" => "nvidia-cuda-crt",
            _ => "nvidia-cuda-cccl",
        };
        (format!("cu{major}/include"), format!("'{name}=={major}.*'"))
    } else {
        let (dir, name) = match part {
            "runtime" => ("cuda_runtime", "nvidia-cuda-runtime"),
            "crt" => ("cuda_nvcc", "nvidia-cuda-nvcc"),
            _ => ("cuda_cccl", "nvidia-cuda-cccl"),
        };
        (format!("{dir}/include"), format!("{name}-cu{major}"))
    }
}

/// Whether the candidate's `nccl.h` includes `cuda_runtime.h`, as every
/// release's does (a header that cannot be read is taken to). A header
/// that includes no CUDA header needs no CUDA include dirs.
fn includes_cuda(c: &Candidate) -> bool {
    let Some(header) = c.header.as_deref() else {
        return true;
    };
    match crate::files::read_bounded(header, 4 << 20) {
        Ok(text) => String::from_utf8_lossy(&text)
            .lines()
            .any(|l| l.trim_start().starts_with('#') && l.contains("cuda_runtime.h")),
        Err(_) => true,
    }
}

/// `site-packages/nvidia` for a wheel's NCCL, where the CUDA wheels sit
/// beside it: found from the install's root, else from its header or its
/// library (links resolved), as when the variables `nccl-find --env`
/// exports (a loader directory, and the wheel's include dir) name the wheel.
fn wheel_site(c: &Candidate) -> Option<&Path> {
    let mut nvidia = None;
    for nccl in [
        c.root.as_deref(),
        c.header
            .as_deref()
            .and_then(Path::parent)
            .and_then(Path::parent),
        c.library_real
            .as_deref()
            .and_then(Path::parent)
            .and_then(Path::parent),
    ] {
        if let Some(p) = nccl.and_then(Path::parent) {
            if nvidia.is_none()
                && p.ends_with("nvidia")
                && nccl.is_some_and(|n| n.ends_with("nccl"))
            {
                nvidia = Some(p);
            }
        }
    }
    nvidia
}

/// The include dirs that make `nccl.h`'s `#include <cuda_runtime.h>` work:
/// the one holding `cuda_runtime.h`, plus, for each companion header it
/// needs and lacks, the dir holding that (wheels are looked for beside a
/// wheel's NCCL, in `site-packages/nvidia/`). None where `nccl.h` includes
/// no CUDA header.
pub(crate) fn cuda_headers(ctx: &Ctx, c: &Candidate) -> Result<Vec<PathBuf>, String> {
    if !includes_cuda(c) {
        return Ok(Vec::new());
    }
    let nvidia = wheel_site(c);
    let beside = |sub: &str| match nvidia {
        Some(n) => vec![n.join(sub)],
        None => Vec::new(),
    };
    let major = c.cuda_version.map_or(12, |v| v.major);
    let (runtime_dir, runtime_wheel) = wheel("runtime", major);
    let mut extra = beside(&runtime_dir);
    extra.push(ctx.path("/usr/include"));
    let runtime = match cuda::find_file(ctx, c.cuda_version, "cuda_runtime.h", &["include"], extra) {
        Ok(found) => found,
        Err(looked) if nvidia.is_some() => {
            return Err(format!(
                "pip install {runtime_wheel} {} {} beside the NCCL wheel, or install the CUDA toolkit and \
                 set CUDA_HOME: nccl.h includes cuda_runtime.h, and none was found (looked in {})",
                wheel("crt", major).1,
                wheel("cccl", major).1,
                list(&looked),
            ))
        }
        Err(looked) => {
            return Err(format!(
                "set CUDA_HOME to a {} toolkit, or install one: nccl.h includes cuda_runtime.h, \
                 and none was found (looked in {})",
                match c.cuda_version {
                    Some(v) => format!("CUDA {}", v.major),
                    None => "CUDA".into(),
                },
                list(&looked),
            ))
        }
    };
    let dir = runtime.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut dirs = vec![dir.clone()];
    for (file, from, part) in CUDA_COMPANIONS {
        let (wheel_dir, wheel) = wheel(part, major);
        let needed = match crate::files::read_bounded(&dir.join(from), 4 << 20) {
            Ok(text) => String::from_utf8_lossy(&text).contains(file),
            Err(_) => false,
        };
        if !needed || dir.join(file).is_file() {
            continue;
        }
        let found =
            match cuda::find_file(ctx, c.cuda_version, file, &["include"], beside(&wheel_dir)) {
                Ok(found) => found,
                Err(looked) => {
                    return Err(format!(
                    "pip install {wheel} beside the NCCL wheel, or use the CUDA toolkit: {} has {from}, \
                     which includes {file}, and no {file} was found (looked in {})",
                    dir.display(),
                    list(&looked)
                ))
                }
            };
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
