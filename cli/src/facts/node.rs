//! The node as the smoke test's card names it, read without loading the
//! driver or making a GPU context: its name (Slurm's, else the kernel's),
//! the driver's version and the GPUs it lists (`/proc/driver/nvidia`), the
//! CUDA version the driver supports, the RDMA ports and their states, the
//! NCCL plugins on the loader's path, GPUDirect RDMA's module, and the
//! GPUs' health as NVML reports it (NVML makes no GPU context).

use std::path::Path;

/// One node's identity and hardware, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Slurm's name for it (`SLURMD_NODENAME`), else the host's.
    pub name: String,
    /// The kernel module's version (`550.54.15`).
    pub driver: Option<String>,
    /// The CUDA version the driver supports (`12.4`).
    pub cuda: Option<String>,
    /// The GPUs: `8 x NVIDIA H100 80GB HBM3`, or `none`.
    pub gpus: String,
    /// Each RDMA port and its state: `mlx5_0/1 ACTIVE`.
    pub rdma_ports: Vec<String>,
    /// The plugin files on the loader's path (`libnccl-net.so`, …), every
    /// family, in its search order.
    pub plugins: Vec<super::rdma::Plugin>,
    /// GPUDirect RDMA's module (`nvidia_peermem`), where it is loaded.
    pub peermem: Option<String>,
    /// The GPUs' health as NVML reports it (`ok`, or each GPU at fault);
    /// `None` where NVML is absent.
    pub gpu_health: Option<String>,
}

/// The most GPU directories read.
const MAX_GPUS: usize = 64;

impl Node {
    /// Reads this node.
    pub fn gather() -> Node {
        let hw = super::rdma::RdmaHw::gather(Path::new("/"), &[]);
        Node {
            name: name(),
            driver: driver(),
            cuda: nccl_smoke::driver::cuda_version()
                .map(|v| format!("{}.{}", v / 1000, v % 1000 / 10)),
            gpus: gpus(),
            rdma_ports: hw
                .adapters
                .iter()
                .flat_map(|a| {
                    a.ports
                        .iter()
                        .map(move |p| format!("{}/{} {}", a.name, p.num, p.state))
                })
                .collect(),
            plugins: hw.plugins,
            peermem: hw.peermem,
            gpu_health: nccl_smoke::nvml::health(),
        }
    }
}

/// This node's name: Slurm's (`SLURMD_NODENAME`), where it says it, else
/// the host's, as the kernel has it.
pub fn name() -> String {
    if let Some(n) = std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty())
    {
        return n;
    }
    nccl_find::internal::read_bounded(Path::new("/proc/sys/kernel/hostname"), 4096)
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default()
}

/// The kernel module's version, from `/proc/driver/nvidia/version`.
fn driver() -> Option<String> {
    let b = nccl_find::internal::read_bounded(Path::new("/proc/driver/nvidia/version"), 64 << 10)
        .ok()?;
    let t = String::from_utf8_lossy(&b).into_owned();
    let line = t.lines().next()?.to_string();
    let at = line.find("Kernel Module")?;
    line[at..]
        .split_whitespace()
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))
        .map(String::from)
}

/// The GPUs the driver lists, without a context: `8 x NVIDIA H100 80GB
/// HBM3`, or `none`.
fn gpus() -> String {
    let dirs: Vec<std::path::PathBuf> = std::fs::read_dir("/proc/driver/nvidia/gpus")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .take(MAX_GPUS)
        .collect();
    let mut models: Vec<String> = dirs
        .iter()
        .filter_map(|d| {
            let b = nccl_find::internal::read_bounded(&d.join("information"), 64 << 10).ok()?;
            let t = String::from_utf8_lossy(&b).into_owned();
            t.lines()
                .find_map(|l| l.strip_prefix("Model:"))
                .map(|m| m.trim().to_string())
        })
        .collect();
    models.sort();
    models.dedup_by(|a, b| a == b);
    let n = dirs.len();
    match models.as_slice() {
        [] => "none".into(),
        [one] => format!("{n} x {one}"),
        many => format!("{n}: {}", many.join(", ")),
    }
}
