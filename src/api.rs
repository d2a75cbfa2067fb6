//! NCCL's API by version (the first release that has each function): the `cfg` names a build script
//! emits for each level, and the version that introduced each function.

/// API levels: `(cfg name, major, minor, patch)`, oldest first. A build
/// gets `--cfg <name>` for every level its NCCL reaches.
pub const LEVELS: [(&str, u32, u32, u32); 15] = [
    ("nccl_2_0", 2, 0, 0),
    ("nccl_2_2", 2, 2, 0),
    ("nccl_2_3_4", 2, 3, 4),
    ("nccl_2_4", 2, 4, 0),
    ("nccl_2_7", 2, 7, 0),
    ("nccl_2_10", 2, 10, 0),
    ("nccl_2_11", 2, 11, 0),
    ("nccl_2_13", 2, 13, 0),
    ("nccl_2_14", 2, 14, 0),
    ("nccl_2_18", 2, 18, 0),
    ("nccl_2_19", 2, 19, 0),
    ("nccl_2_23", 2, 23, 0),
    ("nccl_2_24", 2, 24, 0),
    ("nccl_2_27", 2, 27, 0),
    ("nccl_2_28_3", 2, 28, 3),
];

/// Functions and the first NCCL version that has them.
const INTRODUCED: &[(&str, &str)] = &[
    ("ncclGetUniqueId", "1.0"),
    ("ncclCommInitRank", "1.0"),
    ("ncclCommInitAll", "1.0"),
    ("ncclAllReduce", "1.0"),
    ("ncclBcast", "1.0"),
    ("ncclReduce", "1.0"),
    ("ncclAllGather", "1.0"),
    ("ncclReduceScatter", "1.0"),
    ("ncclGetErrorString", "1.0"),
    ("ncclCommDestroy", "1.0"),
    ("ncclCommCount", "1.0"),
    ("ncclCommCuDevice", "1.0"),
    ("ncclCommUserRank", "1.0"),
    ("ncclGroupStart", "2.0"),
    ("ncclGroupEnd", "2.0"),
    ("ncclBroadcast", "2.2"),
    ("ncclGetVersion", "2.3.4"),
    ("ncclCommGetAsyncError", "2.4"),
    ("ncclCommAbort", "2.4"),
    ("ncclSend", "2.7"),
    ("ncclRecv", "2.7"),
    ("ncclRedOpCreatePreMulSum", "2.11"),
    ("ncclRedOpDestroy", "2.11"),
    ("ncclGetLastError", "2.13"),
    ("ncclCommInitRankConfig", "2.14"),
    ("ncclCommFinalize", "2.14"),
    ("ncclCommSplit", "2.18"),
    ("ncclMemAlloc", "2.19"),
    ("ncclMemFree", "2.19"),
    ("ncclCommRegister", "2.19"),
    ("ncclCommDeregister", "2.19"),
    ("ncclCommInitRankScalable", "2.23"),
    ("ncclCommWindowRegister", "2.27"),
    ("ncclCommWindowDeregister", "2.27"),
    ("ncclCommShrink", "2.27"),
    ("ncclAlltoAll", "2.28.3"),
    ("ncclGather", "2.28.3"),
    ("ncclScatter", "2.28.3"),
];

/// The NCCL version that introduced a function, e.g. `ncclCommSplit` → `2.18`.
pub fn introduced_in(symbol: &str) -> Option<&'static str> {
    for &(s, v) in INTRODUCED {
        if s == symbol {
            return Some(v);
        }
    }
    None
}

/// The cfg names reached by `major.minor.patch`.
pub fn cfgs_for(major: u32, minor: u32, patch: u32) -> impl Iterator<Item = &'static str> {
    LEVELS
        .iter()
        .filter(move |(_, x, y, z)| (major, minor, patch) >= (*x, *y, *z))
        .map(|(name, ..)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        let got: Vec<_> = cfgs_for(2, 18, 1).collect();
        assert_eq!(got.last(), Some(&"nccl_2_18"));
        assert_eq!(got.len(), 10);
        assert!(!cfgs_for(2, 28, 2).any(|c| c == "nccl_2_28_3"));
        assert!(cfgs_for(2, 28, 3).any(|c| c == "nccl_2_28_3"));
        assert_eq!(introduced_in("ncclCommSplit"), Some("2.18"));
        assert_eq!(introduced_in("nope"), None);
    }
}
