//! What NCCL's best-known settings do, in words, for the settings doctor
//! lists (NCCL 2.30.4 and newer also describe every parameter themselves:
//! doctor asks them).

/// NCCL's knobs and what setting them means.
pub const KNOBS: [(&str, &str); 14] = [
    (
        "NCCL_SOCKET_IFNAME",
        "the network interfaces NCCL may use: prefixes, ^ to exclude, = for exact names",
    ),
    ("NCCL_SOCKET_FAMILY", "AF_INET or AF_INET6 only"),
    (
        "NCCL_IB_DISABLE",
        "1 turns InfiniBand/RoCE off; traffic between nodes then goes over TCP sockets",
    ),
    ("NCCL_IB_HCA", "the InfiniBand adapters NCCL may use"),
    (
        "NCCL_P2P_DISABLE",
        "1 turns GPU peer-to-peer off; traffic between GPUs then goes through host memory, slowly",
    ),
    (
        "NCCL_SHM_DISABLE",
        "1 turns the shared-memory transport off",
    ),
    ("NCCL_NET_GDR_LEVEL", "when GPUDirect RDMA is used"),
    (
        "NCCL_DEBUG",
        "NCCL's log level: VERSION, WARN, INFO or TRACE",
    ),
    ("NCCL_DEBUG_SUBSYS", "which subsystems NCCL logs"),
    ("NCCL_DEBUG_FILE", "where NCCL's log goes"),
    (
        "NCCL_COMM_ID",
        "NCCL's own bootstrap listens at this ip:port",
    ),
    ("NCCL_NVLS_ENABLE", "NVLink SHARP (multicast) on or off"),
    ("NCCL_IB_GID_INDEX", "the RoCE GID index"),
    ("NCCL_ALGO", "forces the collective algorithms"),
];

/// What setting `name` does, where it is one of [`KNOBS`].
pub fn what(name: &str) -> Option<&'static str> {
    KNOBS.iter().find(|(n, _)| *n == name).map(|(_, w)| *w)
}
