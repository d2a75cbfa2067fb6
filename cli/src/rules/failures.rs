//! What went wrong in a job, by class: each failure a job's log can show,
//! what to say of it and how to fix it. `explain` names one of these
//! ([`CLASSES`]) from the lines of [`super::messages::MESSAGES`] that show
//! it; `smoke` ends a failed call on the same words.
//!
//! The words are templates: `{name}` is a field the log gave (`{peer}`,
//! `{iface}`, `{hca}` …), `{name|words}` the same with the words to say
//! where the log did not give it.

/// A class of failure. The order is the order of [`CLASSES`]: where the
/// logs do not say which came first, the earlier class is the cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Failure {
    UndefinedSymbol,
    NcclMissing,
    DriverOld,
    FabricManager,
    NoGpu,
    DuplicateGpu,
    VersionMismatch,
    PluginMismatch,
    IfaceMismatch,
    SameHostname,
    NoInterface,
    CommId,
    PortInUse,
    NameResolution,
    Rendezvous,
    PluginFailed,
    Shm,
    PeerAccess,
    Oom,
    JobOom,
    HostOom,
    Nvls,
    Gdr,
    IbGid,
    IbLink,
    Unreachable,
    Refused,
    Mismatch,
    CudaError,
    NcclError,
    RemoteError,
    Watchdog,
    TimeLimit,
    SetupHang,
}

/// One class: its name in `--json`, the verdict and the fix.
#[derive(Debug, Clone, Copy)]
pub struct Class {
    pub failure: Failure,
    /// Its fixed name (`"unreachable"`).
    pub id: &'static str,
    /// What happened, after the rank and host it happened on.
    pub what: &'static str,
    /// What to do.
    pub fix: &'static str,
    /// Words of NCCL's release notes on this path: a later release whose
    /// notes say it fixed a bug with one of them is named beside the fix.
    pub topics: &'static [&'static str],
}

/// Every class, most basic first: a loader or driver that cannot run NCCL
/// at all comes before anything NCCL then does, and what NCCL did before
/// what the job's framework said of it.
pub const CLASSES: [Class; 34] = [
    Class {
        failure: Failure::UndefinedSymbol,
        id: "undefined-symbol",
        what: "the NCCL that loaded is older than the program needs[: it lacks {symbol}][ ({since})]",
        fix: "load the NCCL the program was built for: unset LD_LIBRARY_PATH or LD_PRELOAD entries that put an older libnccl.so.2 first (nccl-find doctor shows which one loads)",
        topics: &[],
    },
    Class {
        failure: Failure::NcclMissing,
        id: "nccl-missing",
        what: "{lib|libnccl.so.2} was not found by the loader",
        fix: "install NCCL where the loader finds it (pip install nvidia-nccl-cu12, or the CUDA repository's libnccl2), or add its lib directory to LD_LIBRARY_PATH (nccl-find --loader-env prints it)",
        topics: &[],
    },
    Class {
        failure: Failure::DriverOld,
        id: "driver-old",
        what: "the NVIDIA driver is too old for the CUDA that NCCL or the framework was built with[ ({err})]",
        fix: "install a driver that supports that CUDA (nvidia-smi shows the highest it supports), or use a build of the framework for the driver's CUDA",
        topics: &["driver"],
    },
    Class {
        failure: Failure::FabricManager,
        id: "fabric-manager",
        what: "CUDA is not initialised on an NVSwitch system[ ({err})]: Fabric Manager is not running",
        fix: "start nvidia-fabricmanager (systemctl start nvidia-fabricmanager), of the same version as the driver, and check that nvidia-smi -q shows the fabric as completed",
        topics: &["fabric manager", "NVLS"],
    },
    Class {
        failure: Failure::NoGpu,
        id: "no-gpu",
        what: "the process saw no GPU",
        fix: "run on a node with GPUs and give the container access to them (--gpus all, or the pod's nvidia.com/gpu request); check CUDA_VISIBLE_DEVICES",
        topics: &[],
    },
    Class {
        failure: Failure::DuplicateGpu,
        id: "duplicate-gpu",
        what: "two ranks use one GPU[ ({ranks} on {device})]",
        fix: "give each rank its own GPU: torch.cuda.set_device(LOCAL_RANK) before the process group, or one CUDA_VISIBLE_DEVICES per rank",
        topics: &["same GPU", "duplicate GPU"],
    },
    Class {
        failure: Failure::VersionMismatch,
        id: "version-mismatch",
        what: "ranks run different NCCL releases[ ({versions})]",
        fix: "run one NCCL release on every node: the same container image or the same torch wheel everywhere (nccl-find --print on each node shows its NCCL)",
        topics: &[],
    },
    Class {
        failure: Failure::PluginMismatch,
        id: "plugin-mismatch",
        what: "ranks use different network plugins[ ({plugins})]",
        fix: "make every node load the same network plugin{plugins_here|}: the same image everywhere, or NCCL_NET_PLUGIN set alike on every node (NCCL_NET_PLUGIN=none for none)",
        topics: &["plugin"],
    },
    Class {
        failure: Failure::IfaceMismatch,
        id: "iface-mismatch",
        what: "ranks use different network interfaces[ ({ifaces})]",
        fix: "set NCCL_SOCKET_IFNAME on every node to interfaces on one network that reach each other (nccl-find doctor lists each node's)",
        topics: &["NCCL_SOCKET_IFNAME"],
    },
    Class {
        failure: Failure::SameHostname,
        id: "same-hostname",
        what: "two nodes have the same host name[ ({host}: {addrs})], so NCCL takes their ranks for one node",
        fix: "give every node its own host name (hostnamectl set-hostname, or the pod's hostname)",
        topics: &["hostname", "host hash"],
    },
    Class {
        failure: Failure::NoInterface,
        id: "no-interface",
        what: "NCCL found no network interface to use[ (NCCL_SOCKET_IFNAME={ifname})][: {err}]",
        fix: "set NCCL_SOCKET_IFNAME to an interface every node has, up and with an address (ip -br addr shows them; nccl-find doctor names NCCL's choice)",
        topics: &["NCCL_SOCKET_IFNAME"],
    },
    Class {
        failure: Failure::CommId,
        id: "comm-id",
        what: "NCCL_COMM_ID cannot be used here[ ({err})]",
        fix: "set NCCL_COMM_ID to <ip>:<port> of a node on this network, or unset it",
        topics: &["NCCL_COMM_ID"],
    },
    Class {
        failure: Failure::PortInUse,
        id: "port-in-use",
        what: "the rendezvous port is taken[ ({addr}: {err})]",
        fix: "choose a free MASTER_PORT (or end the process that holds it: ss -ltnp shows it)",
        topics: &[],
    },
    Class {
        failure: Failure::NameResolution,
        id: "name-resolution",
        what: "a host name did not resolve[ ({name})][: {err}]",
        fix: "use an IP address every node reaches for MASTER_ADDR, or make every node resolve the name (DNS or /etc/hosts)",
        topics: &[],
    },
    Class {
        failure: Failure::Rendezvous,
        id: "rendezvous",
        what: "the rendezvous failed[ at {addr}][: {err}][ (only {joined} of {world} ranks came)]",
        fix: "set MASTER_ADDR to an address of rank 0's node that every node reaches and MASTER_PORT to a port open between the nodes, and check that every rank started",
        topics: &[],
    },
    Class {
        failure: Failure::PluginFailed,
        id: "plugin-failed",
        what: "NCCL's network plugin failed[ ({plugin})][: {err}]",
        fix: "install the plugin's dependencies on every node{plugins_here|} (libfabric for aws-ofi-nccl, the OFED stack for IB plugins), or NCCL_NET_PLUGIN=none to go without it",
        topics: &["plugin"],
    },
    Class {
        failure: Failure::Shm,
        id: "shm",
        what: "/dev/shm is too small for NCCL's shared memory[ ({err})]",
        fix: "give the container more shared memory (docker run --shm-size=1g or --ipc=host; in Kubernetes an emptyDir with medium: Memory at /dev/shm), or NCCL_SHM_DISABLE=1",
        topics: &["shared memory", "shm"],
    },
    Class {
        failure: Failure::PeerAccess,
        id: "peer-access",
        what: "GPUs of one node cannot reach each other directly[ ({err})]",
        fix: "NCCL_P2P_DISABLE=1 to go through host memory; for full speed, turn off PCIe ACS (or set the IOMMU to passthrough), which nccl-find doctor checks",
        topics: &["P2P", "ACS", "peer access"],
    },
    Class {
        failure: Failure::Oom,
        id: "gpu-oom",
        what: "the GPU ran out of memory in NCCL[ ({err})]",
        fix: "create the process group before the model takes the GPU's memory, or give NCCL less (NCCL_BUFFSIZE, fewer channels with NCCL_MAX_NCHANNELS)",
        topics: &["memory usage", "out of memory", "memory leak"],
    },
    Class {
        failure: Failure::JobOom,
        id: "job-oom",
        what: "the job ran out of GPU memory in its own code[ (tried to allocate {err})]",
        fix: "reduce the batch or model size on that rank; NCCL's errors on the other ranks follow from its exit",
        topics: &[],
    },
    Class {
        failure: Failure::HostOom,
        id: "host-oom",
        what: "the kernel's OOM killer stopped a process",
        fix: "ask for more host memory (Slurm --mem), or use less per process; NCCL's errors on the other ranks follow from its exit",
        topics: &["memory leak", "host memory"],
    },
    Class {
        failure: Failure::Nvls,
        id: "nvls",
        what: "NVLink SHARP (NVLS) multicast failed[ ({err})]",
        fix: "NCCL_NVLS_ENABLE=0 to go without NVLS; to repair it, check that nvidia-fabricmanager runs (systemctl status nvidia-fabricmanager) and reset the GPUs or reboot the node after it was restarted",
        topics: &["NVLS", "NVLink SHARP", "multicast"],
    },
    Class {
        failure: Failure::Gdr,
        id: "gpudirect-rdma",
        what: "GPUDirect RDMA failed: the adapter could not reach GPU memory[ ({err})]",
        fix: "load nvidia-peermem (modprobe nvidia-peermem) on every node{peermem_here|}, or NCCL_NET_GDR_LEVEL=LOC to go without GPUDirect RDMA",
        topics: &["GDR", "GPU Direct", "DMA-BUF", "dmabuf", "peermem"],
    },
    Class {
        failure: Failure::IbGid,
        id: "ib-gid",
        what: "RoCE used a GID that does not reach {peer|the peer}[ ({status})]",
        fix: "unset NCCL_IB_GID_INDEX (NCCL 2.21.5 and newer choose it), or set it to the RoCE v2 GID of the interface with the node's address (show_gids lists them)",
        topics: &["GID", "RoCE"],
    },
    Class {
        failure: Failure::IbLink,
        id: "ib-link",
        what: "the InfiniBand/RoCE link to {peer|a peer} failed[ ({status})][ on {hca}]",
        fix: "check the port on both nodes (ibstat: State Active, the same link layer and MTU); on RoCE, a wrong GID is the usual cause of status 12: set NCCL_IB_GID_INDEX to the RoCE v2 GID of the node's address (show_gids), or unset it on NCCL 2.21.5 and newer; NCCL_IB_HCA to leave a bad port out, NCCL_CROSS_NIC=0 where each rail is a network of its own, NCCL_IB_DISABLE=1 to test without IB",
        topics: &["IB ", "RoCE", "InfiniBand", "NET/IB"],
    },
    Class {
        failure: Failure::Unreachable,
        id: "unreachable",
        what: "{iface|the interface NCCL chose} does not reach {peer|the other node}[ ({err})]",
        fix: "set NCCL_SOCKET_IFNAME to an interface on the network between the nodes{route|}; docker0, veth*, virbr0 and link-local fe80:: addresses never reach another host (nccl-find doctor names NCCL's choice on each node); where the interface is right, a firewall rejects NCCL's ports (its REJECT answers No route to host): open TCP between the nodes",
        topics: &["bootstrap"],
    },
    Class {
        failure: Failure::Refused,
        id: "refused",
        what: "{peer|the peer} refused NCCL's connection[ ({err})]",
        fix: "open TCP between the nodes (a firewall or security group that blocks NCCL's ports), and check that the peer's process was still running",
        topics: &["bootstrap"],
    },
    Class {
        failure: Failure::Mismatch,
        id: "mismatched-collectives",
        what: "ranks called different collectives, or with different sizes[ ({got} bytes came where {want} were expected)][: {err}]",
        fix: "make every rank call the same collectives in the same order with the same counts and types (TORCH_DISTRIBUTED_DEBUG=DETAIL names the first that differs)",
        topics: &[],
    },
    Class {
        failure: Failure::CudaError,
        id: "cuda-error",
        what: "a CUDA call failed[ ({err})]",
        fix: "nccl-find doctor checks the driver and the GPUs; an illegal memory access is the job's own kernel: rerun with CUDA_LAUNCH_BLOCKING=1",
        topics: &["illegal memory access"],
    },
    Class {
        failure: Failure::NcclError,
        id: "nccl-error",
        what: "NCCL failed[ ({words})], and the logs do not say why",
        fix: "rerun with NCCL_DEBUG=INFO (its lines say why), or nccl-find smoke under the same launcher to test NCCL alone",
        topics: &[],
    },
    Class {
        failure: Failure::RemoteError,
        id: "remote-error",
        what: "a peer went away[ ({err})]: the rank that failed first is not in these logs",
        fix: "read the log of the rank that failed first (every rank's log, or NCCL_DEBUG=INFO), or ask NCCL's RAS service while the job runs (nccl-find ras)",
        topics: &[],
    },
    Class {
        failure: Failure::Watchdog,
        id: "watchdog",
        what: "collectives timed out[ ({op})][: {behind}]",
        fix: "find what {behind_rank|the rank behind} was doing (py-spy dump on its process, or TORCH_NCCL_DUMP_ON_TIMEOUT=1): if it was busy on purpose (evaluation or a checkpoint on one rank), raise the process group's timeout (init_process_group(timeout=...)); else rerun with NCCL_DEBUG=INFO, or nccl-find smoke under the same launcher",
        topics: &[],
    },
    Class {
        failure: Failure::TimeLimit,
        id: "time-limit",
        what: "the scheduler ended the job at its time limit",
        fix: "if the job hung, rerun with NCCL_DEBUG=INFO and a shorter timeout to see where; else ask for more time",
        topics: &[],
    },
    Class {
        failure: Failure::SetupHang,
        id: "setup-hang",
        what: "NCCL started and the log ends there: the job hung, or was stopped, while NCCL set up, and the log does not say why",
        fix: "rerun with NCCL_DEBUG=INFO (its lines name the interface NCCL took and the peer it waits for), or nccl-find smoke under the same launcher",
        topics: &["bootstrap"],
    },
];

impl Failure {
    /// This class's row.
    pub fn class(self) -> &'static Class {
        let c = &CLASSES[self as usize];
        debug_assert_eq!(c.failure, self, "CLASSES is in the order of Failure");
        c
    }
}

/// `template` with each `{name}` and `{name|words}` filled from `field`
/// (`words` where it gives nothing), and each `[section]` kept only where
/// every `{name}` in it has a value. A `{` or `[` left open is kept.
pub fn render(template: &str, field: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(open) = rest.find('[') {
        out.push_str(&fill(&rest[..open], field).0);
        let Some(close) = rest[open..].find(']') else {
            out.push_str(&fill(&rest[open..], field).0);
            return out;
        };
        let (text, whole) = fill(&rest[open + 1..open + close], field);
        if whole {
            out.push_str(&text);
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(&fill(rest, field).0);
    out
}

/// `template`'s fields filled; and whether each `{name}` without words
/// had a value.
fn fill(template: &str, field: &dyn Fn(&str) -> Option<String>) -> (String, bool) {
    let mut out = String::with_capacity(template.len() + 32);
    let mut whole = true;
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            out.push_str(&rest[open..]);
            return (out, whole);
        };
        let inner = &rest[open + 1..open + close];
        let (name, words) = inner.split_once('|').unwrap_or((inner, ""));
        match field(name) {
            Some(v) if !v.is_empty() => out.push_str(&v),
            _ => {
                whole &= inner.contains('|');
                out.push_str(words);
            }
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    (out, whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_is_in_its_place_with_a_name_of_its_own() {
        let mut ids = std::collections::BTreeSet::new();
        for (i, c) in CLASSES.iter().enumerate() {
            assert_eq!(c.failure as usize, i, "{}", c.id);
            assert!(ids.insert(c.id), "{} twice", c.id);
            assert!(!c.fix.ends_with('.') && !c.what.ends_with('.'), "{}", c.id);
        }
    }

    /// Every class is in the docs: explain.md's table, json.md's list.
    #[test]
    fn every_class_is_documented() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let explain = std::fs::read_to_string(root.join("docs/explain.md")).unwrap();
        let json = std::fs::read_to_string(root.join("docs/json.md")).unwrap();
        for c in &CLASSES {
            let id = format!("`{}`", c.id);
            assert!(
                explain.contains(&format!("| {id} |")),
                "docs/explain.md lacks {id}"
            );
            assert!(json.contains(&id), "docs/json.md lacks {id}");
        }
    }

    #[test]
    fn templates_take_the_fields_or_their_words() {
        let f = |n: &str| (n == "peer").then(|| "10.0.0.2".to_string());
        assert_eq!(
            render("{iface|NCCL's choice} does not reach {peer|it}", &f),
            "NCCL's choice does not reach 10.0.0.2"
        );
        assert_eq!(render("a {b", &f), "a {b");
        assert_eq!(render("{x}", &f), "");
        assert_eq!(render("failed[ ({peer})][ ({x})]", &f), "failed (10.0.0.2)");
        assert_eq!(render("a [b", &f), "a [b");
    }
}
