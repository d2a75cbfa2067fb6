//! What must be the same on every rank of a job for NCCL to work: its
//! release, to the patch (`initTransportsRank` compares every rank's
//! `NCCL_VERSION_CODE` and fails with `Mismatched NCCL version detected`,
//! `ncclInvalidUsage`: seen with 2.28.3 beside 2.28.9), and the settings
//! that decide which interface and transport each rank takes.

/// Settings whose difference across ranks changes which interface or
/// transport NCCL takes: a problem, not a note.
const DECIDING: [&str; 4] = [
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_FAMILY",
    "NCCL_IB_HCA",
    "NCCL_NET",
];

/// Whether ranks that differ in setting `name` break NCCL.
pub fn setting_must_agree(name: &str) -> bool {
    DECIDING.contains(&name)
}

/// Whether ranks that load NCCL releases `a` and `b` (`2.28.9`, or
/// `unknown`) can work together: the same release, to the patch (a
/// release that could not be read is not known to differ).
pub fn releases_agree(a: &str, b: &str) -> bool {
    a == "unknown" || b == "unknown" || a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_other_release_breaks_even_a_patch_apart() {
        assert!(!releases_agree("2.28.9", "2.28.3"));
        assert!(releases_agree("2.28.9", "2.28.9"));
        assert!(!releases_agree("2.28.9", "2.21.5"));
        assert!(releases_agree("unknown", "2.21.5"));
        assert!(setting_must_agree("NCCL_SOCKET_IFNAME") && !setting_must_agree("NCCL_DEBUG"));
    }
}
