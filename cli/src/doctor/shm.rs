//! doctor's `shm` check: the size of `/dev/shm`.

use super::{Area, Findings, Level};
use crate::facts::host::Facts;

/// The shared-memory area.
pub(super) fn check(f: &mut Findings, facts: &Facts) {
    const MIB: u64 = 1 << 20;
    match facts.shm_bytes {
        None => f.add(
            Area::Shm,
            Level::Problem,
            "/dev/shm is missing: NCCL's shared-memory transport fails",
            Some("mount a tmpfs on /dev/shm, or NCCL_SHM_DISABLE=1".into()),
        ),
        Some(b) if b < 256 * MIB => f.add(
            Area::Shm,
            Level::Problem,
            format!("/dev/shm is {} MiB (Docker's default is 64 MiB): NCCL fails with `unhandled system error` between GPUs", b / MIB),
            Some("docker run --shm-size=1g (or --ipc=host), or NCCL_SHM_DISABLE=1".into()),
        ),
        Some(b) => f.add(Area::Shm, Level::Ok, format!("/dev/shm is {} MiB", b / MIB), None),
    }
}
