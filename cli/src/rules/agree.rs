//! What must be the same on every rank of a job for NCCL to work: its
//! minor release (the bootstrap's messages change from one to the next;
//! a patch release apart is fine), and the settings that decide which
//! interface and transport each rank takes.

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
/// `unknown`) can work together: one minor release (a release that could
/// not be read is not known to differ).
pub fn releases_agree(a: &str, b: &str) -> bool {
    let minor = |v: &str| v.split('.').take(2).collect::<Vec<_>>().join(".");
    a == "unknown" || b == "unknown" || minor(a) == minor(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minor_release_apart_breaks_a_patch_release_does_not() {
        assert!(releases_agree("2.28.9", "2.28.3"));
        assert!(!releases_agree("2.28.9", "2.21.5"));
        assert!(releases_agree("unknown", "2.21.5"));
        assert!(setting_must_agree("NCCL_SOCKET_IFNAME") && !setting_must_agree("NCCL_DEBUG"));
    }
}
