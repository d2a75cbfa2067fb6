//! The one table of what a job's log can say: NCCL's messages, as its
//! source writes them (each checked against every release tag's source,
//! `formats.txt`), and the lines of the programs around it (PyTorch, JAX,
//! Paddle, the loader, Slurm) that name or follow a failure. Where rows
//! match one line, the first row wins: a specific row comes before a
//! general one.

use super::{Fact, Message, Printer, Refine, Says};
use crate::rules::failures::Failure::*;

const fn row(
    printer: Printer,
    formats: &'static [&'static str],
    fields: &'static [(&'static str, &'static str)],
    says: Says,
) -> Message {
    Message {
        printer,
        formats,
        fields,
        says,
        refine: &[],
        only: None,
    }
}

/// What a CUDA error's words say, wherever a line carries them (`err`).
const CUDA_ERRORS: &[Refine] = &[
    ("err", "out of memory", Says::Cause(Oom)),
    (
        "err",
        "driver version is insufficient",
        Says::Cause(DriverOld),
    ),
    (
        "err",
        "forward compatibility was attempted",
        Says::Cause(DriverOld),
    ),
    (
        "err",
        "system not yet initialized",
        Says::Cause(FabricManager),
    ),
    (
        "err",
        "peer access is not supported",
        Says::Cause(PeerAccess),
    ),
    (
        "err",
        "peer mapping resources exhausted",
        Says::Cause(PeerAccess),
    ),
    ("err", "no CUDA-capable device", Says::Cause(NoGpu)),
    ("file", "nvls.cc", Says::Cause(Nvls)),
];

/// What a failed connection's words say (`err`).
const CONNECT_ERRORS: &[Refine] = &[
    ("err", "Connection refused", Says::Cause(Refused)),
    ("err", "Connection reset", Says::Symptom(RemoteError)),
    ("err", "Broken pipe", Says::Symptom(RemoteError)),
];

pub const MESSAGES: [Message; 58] = [
    // ---- The loader, CUDA and the driver, before NCCL runs.
    row(
        Printer::Loader,
        &["undefined symbol: %s"],
        &[("symbol: ", "symbol")],
        Says::Cause(UndefinedSymbol),
    ),
    row(
        Printer::Loader,
        &["%s: cannot open shared object file: No such file or directory"],
        &[("", "lib")],
        Says::Cause(NcclMissing),
    )
    .only(("lib", "libnccl.so")),
    row(
        Printer::Torch,
        &["The NVIDIA driver on your system is too old (found version %d)"],
        &[("(found version ", "driver")],
        Says::Cause(DriverOld),
    ),
    row(
        Printer::Torch,
        &[
            "ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
            "Found no NVIDIA driver on your system",
        ],
        &[],
        Says::Cause(NoGpu),
    ),
    // ---- NCCL refuses the job as it is set up.
    row(
        Printer::Nccl,
        &[
            "Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx",
            "Duplicate GPU detected : rank %d and rank %d both on CUDA device %x",
            "Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration.",
            "Multiple ranks detected using the same GPU on this node. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration.",
        ],
        &[
            ("detected : rank ", "rank_a"),
            (" and rank ", "rank_b"),
            ("CUDA device ", "device"),
        ],
        Says::Cause(DuplicateGpu),
    ),
    row(
        Printer::Nccl,
        &[
            "Mismatched NCCL version detected : rank %d version %d rank %d version %d",
            "NCCL version mismatch with remote peer %s (local: %d, remote %d)",
            "NCCL version mismatch with remote peer %s (local: %s, remote %s)",
        ],
        &[
            ("detected : rank ", "rank_a"),
            ("(local: ", "local"),
            (", remote ", "remote"),
            ("remote peer ", "peer"),
        ],
        Says::Cause(VersionMismatch),
    ),
    row(
        Printer::Nccl,
        &[
            "NCCL library is too old. This application was compiled with NCCL version %s, but is running with NCCL library version %s.",
            "NCCL library is not backwards compatible. This application was compiled with NCCL version %s, but is running with NCCL library version %s.",
            "NCCL library version is too old. This application was compiled with NCCL version %d, but is running with NCCL library version %d.",
            "The application was compiled with too old version of NCCL. It was compiled with NCCL version %s, but is running with NCCL library version %s. Because of its use of GIN device kernels, it needs to be recompiled, preferably with the same NCCL version that it will be running with.",
            "The application was compiled with too old version of NCCL. It was compiled with NCCL version %d, but is running with NCCL library version %d. Because of its use of GIN device kernels, it needs to be recompiled, preferably with the same NCCL version that it will be running with.",
            "The application was compiled with too old version of NCCL. It was compiled with NCCL version %d, but is running with NCCL library version %d. It needs to be recompiled with at least NCCL version %d.",
        ],
        &[("compiled with NCCL version ", "built"), ("library version ", "running")],
        Says::Cause(UndefinedSymbol),
    ),
    // ---- Interfaces, addresses and the rendezvous.
    row(
        Printer::Nccl,
        &[
            "Bootstrap : no socket interface found",
            "NET/Socket : no interface found",
            "Net : Socket creation failed : %s",
            "ncclSocketInit: Socket creation failed : %s",
            "Socket creation failed : %s",
        ],
        &[("failed : ", "err")],
        Says::Cause(NoInterface),
    ),
    row(
        Printer::Nccl,
        &[
            "NET/Socket : No usable listening interface found",
            "Invalid NCCL_COMM_ID, please use format: <ipv4>:<port> or [<ipv6>]:<port> or <hostname>:<port>",
        ],
        &[],
        Says::Cause(CommId),
    ),
    row(
        Printer::Torch,
        &[
            "The server socket has failed to bind to %s (errno: %d - %s).",
            "The server socket has failed to listen on any local network address.",
        ],
        &[("bind to ", "addr"), (" - ", "err")],
        Says::Cause(PortInUse),
    ),
    row(
        Printer::Torch,
        &[
            "getaddrinfo failed with error: %s",
            "The IPv4 network addresses of (%s, %d) cannot be retrieved (gai error: %d - %s).",
        ],
        &[("error: ", "err"), ("of (", "name")],
        Says::Cause(NameResolution),
    ),
    row(
        Printer::Torch,
        &[
            "The client socket has failed to connect to any network address of (%s, %d).",
            "The client socket has failed to connect to %s (errno: %d - %s).",
            "Timed out after %d seconds waiting for clients. %d/%d clients joined.",
            "Socket Timeout",
        ],
        &[
            ("connect to ", "addr"),
            (" - ", "err"),
            ("seconds waiting for clients. ", "joined"),
            ("/", "world"),
        ],
        Says::Cause(Rendezvous),
    ),
    row(
        Printer::Nccl,
        &[
            "%s: connect to %s returned %s, exceeded error retry count after %d attempts",
            "%s: connect to %s returned %s, retrying (%d/%ld) after sleep for %u msec",
            "%s: connect to %s failed : %s",
            "%s: Connect to %s failed : %s",
            "%s: connect returned %s, exceeded error retry count (%d)",
            "%s: connect returned %s, retrying (%d/%ld) after sleep for %u msec",
            "ncclOsSocketPollConnect to %s failed with error %s",
            "socketPollConnect to %s failed with error %s",
            "socketStartConnect: Connect to %s failed : %s",
            "Call to connect returned %s, retrying",
            "Net : Connect to %s failed : %s",
            "Connect to %s failed : %s",
        ],
        &[
            ("connect to ", "peer"),
            ("Connect to ", "peer"),
            ("returned ", "err"),
            ("failed : ", "err"),
            ("with error ", "err"),
        ],
        Says::Cause(Unreachable),
    )
    .refined(CONNECT_ERRORS),
    row(
        Printer::Nccl,
        &["socketPollConnect: Connect to %s returned %d(%s) errno %d(%s)"],
        &[("Connect to ", "peer"), ("(", "err")],
        Says::Cause(Unreachable),
    )
    .refined(CONNECT_ERRORS),
    // ---- Plugins.
    row(
        Printer::Nccl,
        &[
            "Failed to initialize NET plugin %s",
            "Failed to initialize any NET plugin",
            "External network plugin %s is unsupported",
        ],
        &[("plugin ", "plugin")],
        Says::Cause(PluginFailed),
    )
    // At INFO, one of the plugins NCCL tries did not start (IB on a host
    // without it): NCCL goes on with the next.
    .refined(&[("level", "=INFO", Says::Fact(Fact::Passed))]),
    row(
        Printer::Plugin,
        &["NET/OFI %s"],
        &[("NET/OFI ", "err")],
        Says::Cause(PluginFailed),
    )
    .refined(&[("level", "INFO", Says::Fact(Fact::NetPlugin))]),
    row(
        Printer::Plugin,
        &["Plugin Path : %s"],
        &[("Path : ", "plugin")],
        Says::Fact(Fact::NetPlugin),
    ),
    row(
        Printer::Nccl,
        &[
            "NET/Plugin: Loaded net plugin %s (v4)",
            "NET/Plugin: Loaded net plugin %s (v5)",
            "NET/Plugin: Loaded net plugin %s (v6)",
            "NET/Plugin: Loaded net plugin %s (v7)",
            "NET/Plugin: Loaded net plugin %s (v8)",
            "NET/Plugin: Loaded net plugin %s (v9)",
            "NET/Plugin: Loaded net plugin %s (v10)",
            "NET/Plugin: Loaded net plugin %s (v11)",
            "NET/Plugin: Loaded net plugin %s (v12)",
        ],
        &[("plugin ", "plugin")],
        Says::Fact(Fact::NetPlugin),
    ),
    row(
        Printer::Nccl,
        &[
            "NET/Plugin : dlerror=%s No plugin found (%s), using internal implementation",
            "NET/Plugin : No plugin found (%s), using internal implementation",
            "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
            "NET/Plugin : No plugin found (libnccl-net.so).",
            "NET/Plugin : No plugin found, using internal implementation",
            "NET/Plugin: Could not find:%s. Using internal network plugin.",
            "NET/Plugin: Using internal network plugin.",
            "NET/Plugin : Plugin load (%s) returned %d : %s",
            "NET/Plugin : Plugin load returned %d : %s.",
            "NET/Plugin: Plugin load returned %d : %s : when loading %s",
            "NET/Plugin: Plugin load returned %d : %s when loading %s",
            "NET/Plugin: No plugin found (%s)",
        ],
        &[("dlerror=", "err"), (" : ", "err")],
        Says::Fact(Fact::NoNetPlugin),
    )
    .refined(&[
        // A plugin that is there but cannot load: it lacks a library or
        // a version of one.
        ("err", "not found (required by", Says::Cause(PluginFailed)),
        ("err", "undefined symbol", Says::Cause(PluginFailed)),
    ]),
    // ---- Memory and devices inside one node.
    row(
        Printer::Nccl,
        &[
            "Error while %s shared memory segment %s (size %ld), error: %s (%d)",
            "Error while %s shared memory segment %s (size %ld)",
            "Error while %s shared memory segment %s (size %d)",
            "Call to posix_fallocate failed : %s",
            "fallocate: Failed to extend %s to %ld bytes, error: %s (%d) - retrying",
        ],
        &[("(size ", "size"), ("error: ", "err"), ("failed : ", "err")],
        Says::Cause(Shm),
    ),
    row(
        Printer::Nccl,
        &[
            "Failed to CUDA calloc %ld bytes",
            "Failed to CUDA calloc async %ld bytes",
            "Failed to CUDA malloc %ld bytes",
            "Failed to CUDA host alloc %ld bytes",
        ],
        &[("alloc ", "size")],
        Says::Cause(Oom),
    ),
    row(
        Printer::Torch,
        &[
            "CUDA out of memory. Tried to allocate %s",
            "torch.OutOfMemoryError: %s",
        ],
        &[("allocate ", "err")],
        Says::Cause(JobOom),
    ),
    row(
        Printer::Nccl,
        &[
            "Failed to bind NVLink SHARP (NVLS) Multicast memory of size %ld : CUDA error %d '%s'. Proceeding without NVLS support.",
            "Failed to bind NVLink SHARP (NVLS) Multicast memory of size %ld : CUDA error %d '%s'.",
            "Failed to multicast-bind user buffer: CUDA error %d '%s'",
            "Multicast support requested for team but none available on system.",
        ],
        &[("'", "err")],
        Says::Cause(Nvls),
    ),
    row(
        Printer::Nccl,
        &[
            "HINT: In many cases this error occurs when ACS is enabled which would break GPU Direct RDMA protocol.",
        ],
        &[],
        Says::Cause(PeerAccess),
    ),
    row(
        Printer::Lspci,
        &["ACSCtl: SrcValid+ TransBlk%s ReqRedir+ CmpltRedir+%s"],
        &[],
        Says::Cause(PeerAccess),
    ),
    row(
        Printer::Nccl,
        &[
            "Cuda failure %d '%s'",
            "Cuda failure '%s'",
            "%s:%d Cuda failure %d '%s'",
            "%s:%d Cuda failure '%s'",
        ],
        &[("'", "err")],
        Says::Cause(CudaError),
    )
    .refined(CUDA_ERRORS),
    row(
        Printer::Torch,
        &[
            "CUDA error: %s",
            "CUDA driver version is insufficient for CUDA runtime version",
        ],
        &[("error: ", "err")],
        Says::Cause(CudaError),
    )
    .refined(CUDA_ERRORS),
    // ---- InfiniBand and RoCE.
    row(
        Printer::Nccl,
        &[
            "HINT: In many cases this error occurs when the incorrect GID index is forced by NCCL_IB_GID_INDEX",
        ],
        &[],
        Says::Cause(IbGid),
    ),
    row(
        Printer::Nccl,
        &["Call to ibv_reg_mr failed with error %s", "Call to ibv_reg_mr_iova2 failed with error %s", "Call to ibv_reg_dmabuf_mr failed with error %s"],
        &[("error ", "err")],
        Says::Cause(Gdr),
    ),
    row(
        Printer::Nccl,
        &[
            "NET/IB: Got completion from peer %s with status=%s(%d) opcode=%s(%d) vendor_err=%u %s%s%s%s hca %s",
            "NET/IB: Got completion from peer %s with status=%s(%d) opcode=%s(%d) reqSize=%d vendor_err=%u req_type=%s%s%s%s%s hca %s",
            "NET/IB: Got completion from peer %s with status=%d opcode=%d len=%u vendor err %u (%s)%s%s%s%s hca %s",
            "NET/IB: Got completion from peer %s with status=%d opcode=%d len=%d vendor err %d (%s)%s%s%s%s hca %s",
            "NET/IB/GIN: Got completion from peer %s with status=%d opcode=%d len=%u vendor err %u (%s)%s%s%s%s hca %s",
            "NET/IB : Got completion from peer %s with status=%d opcode=%d len=%d vendor err %d (%s)%s%s%s%s",
            "NET/IB : Got completion from peer %s with error %d, opcode %d, len %d, vendor err %d (%s)%s%s%s%s",
            "NET/IB : Got completion from peer %s with error %d, opcode %d, len %d, vendor err %d",
            "NET/IB : Got completion with error %d, opcode %d, len %d, vendor err %d",
            "NET/IB: %s: Got completion with error (devIndex=%d, wc->status=(%s)%d, wc->opcode=(%s)%d, wc->wr_id=%ld, wc->qp_num=%u, wc->byte_len=%d)",
        ],
        &[
            ("from peer ", "peer"),
            ("status=", "status"),
            ("status=(", "status"),
            ("with error ", "status"),
            ("hca ", "hca"),
        ],
        Says::Cause(IbLink),
    )
    .refined(&[
        ("status", "=5", Says::Symptom(RemoteError)),
        ("status", "Flush", Says::Symptom(RemoteError)),
        ("status", "=4", Says::Cause(Gdr)),
        ("status", "protection", Says::Cause(Gdr)),
    ]),
    row(
        Printer::Nccl,
        &[
            "NET/IB : Remote %s device is incompatible with the local [%d]%s:%d/%s. Try selecting NICs of only one link type using NCCL_IB_HCA",
            "NET/IB : Attempted to connect incompatible devices: [%d]%s:%d/%s and [%d]%s:%d/%s. Try selecting NICs of only one link type using NCCL_IB_HCA",
            "NET/IB : Attempted to merge incompatible devices: [%d]%s:%d/%s and [%d]%s:%d/%s. Try selecting NICs of only one link type using NCCL_IB_HCA",
        ],
        &[("Remote ", "peer")],
        Says::Cause(IbLink),
    ),
    // ---- The ranks disagree on the collectives.
    row(
        Printer::Nccl,
        &[
            "Message truncated : received %d bytes instead of %d",
            "Message truncated : received %d,%d bytes instead of %d,%d",
            "NET/Socket : peer %s message truncated : receiving %d bytes instead of %d. If you believe your socket network is in a healthy state, there may be a mismatch in collective sizes or environment settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks",
            "NET/Socket : peer %s message truncated : receiving %d bytes instead of %d. If you believe your socket network is in healthy state,           there may be a mismatch in collective sizes or environment settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks",
            "NET/Socket : peer %s message truncated : receiving %d bytes instead of %d",
            "NET/Socket : message truncated : receiving %d bytes instead of %d",
            "NET/IB : req %d/%d tag %x peer %s collective mismatch error, local size %d remote size %d",
            "NET/IB : req %d/%d tag %x peer %s collective mismatch error local size %d remote %d addr %lx rkey %x",
            "NET/IB : peer %s collective mismatch error local size %d remote %d addr %lx rkey %x seq %x/%x",
            "NET/IB : collective mismatch error local size %d remote %d addr %lx rkey %x seq %x/%x",
            "Bootstrap Root : mismatch in info from procs, nranks %d vs %d, nroots %d vs %d, iroot %d vs %d, offset %d vs %d",
            "Bootstrap Root : mismatch in info from procs, nranks %d vs %d, nroots %d vs %d, iroot %d vs %d",
            "Bootstrap Root : mismatch in rank count from procs %d : %d",
        ],
        &[
            ("peer ", "peer"),
            ("receiving ", "got"),
            ("received ", "got"),
            ("local size ", "got"),
            (" instead of ", "want"),
            ("remote size ", "want"),
            (" remote ", "want"),
        ],
        Says::Cause(Mismatch),
    ),
    row(
        Printer::Torch,
        &["Detected mismatch between collectives on ranks. Rank %d is running collective: %s"],
        &[("Rank ", "rank_a"), ("collective: ", "err")],
        Says::Cause(Mismatch),
    ),
    // ---- Symptoms: a peer went away.
    row(
        Printer::Nccl,
        &[
            "socketProgress: Connection closed by remote peer %s",
            "Net : Connection closed by remote peer %s",
            "Net : Connection closed by remote peer",
            "socketProgressOpt: Call to recv from %s failed : %s",
            "Net : Call to recv from %s failed : %s",
            "ncclOsSocketProgressOpt: Call to %s %s failed : %s",
            "ncclOsSocketProgressOpt: Call to %s %s failed : %d (%s)",
            "ncclOsSocketProgressOpt: Call to %s %s failed : %u",
            "Call to recv failed : %s",
            "Socket recv failed while polling for opId=%p",
            "NET/Socket : socket progress error",
            "[Proxy Service %d] Failed to execute operation %s from rank %d, retcode %d",
        ],
        &[("remote peer ", "peer"), ("recv from ", "peer"), ("failed : ", "err")],
        Says::Symptom(RemoteError),
    ),
    row(
        Printer::Torch,
        &["Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?"],
        &[],
        Says::Symptom(RemoteError),
    ),
    row(
        Printer::Torch,
        &[
            "NCCL communicator was aborted on rank %d.",
            "Remote process exited or there was a network error",
        ],
        &[("on rank ", "rank")],
        Says::Symptom(RemoteError),
    ),
    // ---- Symptoms: a framework says NCCL failed.
    row(
        Printer::Torch,
        &["NCCL error in: %s, %s, NCCL version %s", "NCCL error in: %s, %s"],
        &[(", ", "words"), ("NCCL version ", "version")],
        Says::Symptom(NcclError),
    ),
    row(
        Printer::Jax,
        &["NCCL operation %s failed: %s", "Failed to create NCCL communicator: %s"],
        &[("failed: ", "words")],
        Says::Symptom(NcclError),
    ),
    row(
        Printer::Paddle,
        &["Nccl error, %s", "NCCL error(%d), %s"],
        &[("error, ", "words"), ("), ", "words")],
        Says::Symptom(NcclError),
    ),
    row(
        Printer::Vllm,
        &["NCCL error: %s"],
        &[("error: ", "words")],
        Says::Symptom(NcclError),
    ),
    row(
        Printer::NcclTests,
        &["NCCL failure %s '%s'", "Failed, NCCL error %s '%s'"],
        &[("'", "words")],
        Says::Symptom(NcclError),
    ),
    row(
        Printer::Torch,
        &[
            "ncclSystemError: %s",
            "ncclInternalError: %s",
            "ncclInvalidUsage: %s",
            "ncclUnhandledCudaError: %s",
            "ncclInvalidArgument: %s",
        ],
        &[],
        Says::Symptom(NcclError),
    ),
    row(
        Printer::Torch,
        &["ncclRemoteError: %s"],
        &[],
        Says::Symptom(RemoteError),
    ),
    // ---- Symptoms: a hang.
    row(
        Printer::Torch,
        &[
            "Watchdog caught collective operation timeout: WorkNCCL(%s) ran for %d milliseconds before timing out",
            "Timeout at NCCL work: %d, last enqueued NCCL work: %d, last completed NCCL work: %d",
        ],
        &[
            ("WorkNCCL(", "work"),
            ("ran for ", "ran"),
            ("Timeout at NCCL work: ", "timeout_seq"),
            ("last enqueued NCCL work: ", "enqueued"),
            ("last completed NCCL work: ", "completed"),
        ],
        Says::Symptom(Watchdog),
    ),
    row(
        Printer::Slurm,
        &["*** JOB %s ON %s CANCELLED AT %s DUE TO TIME LIMIT ***", "*** STEP %s ON %s CANCELLED AT %s DUE TO TIME LIMIT ***"],
        &[(" ON ", "host")],
        Says::Symptom(TimeLimit),
    ),
    row(
        Printer::Slurm,
        &["Detected %d oom_kill event%s", "Detected %d oom-kill event%s", "Out of memory: Killed process %d"],
        &[],
        Says::Cause(HostOom),
    ),
    // ---- Facts of the run.
    row(
        Printer::Nccl,
        &["NCCL version %s"],
        &[("NCCL version ", "version")],
        Says::Fact(Fact::Version),
    ),
    row(
        Printer::Nccl,
        &["Bootstrap : Using%s", "Bootstrap: Using%s"],
        &[("Using", "ifaces")],
        Says::Fact(Fact::Bootstrap),
    ),
    row(
        Printer::Nccl,
        &["NET/Socket : Using%s"],
        &[("Using", "ifaces")],
        Says::Fact(Fact::SocketIfaces),
    ),
    row(
        Printer::Nccl,
        &["NET/IB : Using%s %s; OOB %s:%s", "NET/IB : Using%s ; OOB %s:%s"],
        &[("Using", "devices")],
        Says::Fact(Fact::IbDevices),
    ),
    row(
        Printer::Nccl,
        &[
            "NCCL_SOCKET_IFNAME set by environment to %s",
            "NCCL_SOCKET_IFNAME set to %s",
        ],
        &[(" to ", "ifname")],
        Says::Fact(Fact::Ifname),
    ),
    row(
        Printer::Nccl,
        &["Using network %s", "Using internal Network %s"],
        &[("etwork ", "network")],
        Says::Fact(Fact::Network),
    ),
    row(
        Printer::Nccl,
        &["cudaDriverVersion %d"],
        &[("cudaDriverVersion ", "driver")],
        Says::Fact(Fact::Driver),
    ),
    row(
        Printer::Nccl,
        &[
            "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init COMPLETE",
            "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx parent %p childCount %d color %d key %d - Init COMPLETE",
            "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx parent %p color %d key %d - Init COMPLETE",
            "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx parent %p splitCount %d color %d key %d - Init COMPLETE",
            "comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init COMPLETE",
            "comm %p rank %d nranks %d cudaDev %d busId %lx commId 0x%llx - Init COMPLETE",
            "comm %p rank %d nranks %d cudaDev %d busId %lx - Init COMPLETE",
            "comm %p rank %d nranks %d cudaDev %d busId %x - Init COMPLETE",
            "comm %p rank %d nranks %d cudaDev %d nvmlDev %d - Init COMPLETE",
            "ncclCommInitRank comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init COMPLETE",
            "ncclCommSplit comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx parent %p color %d key %d commId 0x%llx - Init COMPLETE",
        ],
        &[(" rank ", "rank"), (" nranks ", "nranks")],
        Says::Fact(Fact::InitDone),
    ),
    row(
        Printer::Nccl,
        &[
            "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START",
            "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx parent %p childCount %d color %d key %d- Init START",
            "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx parent %p splitCount %d color %d key %d- Init START",
            "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx parent %p color %d key %d- Init START",
            "[Rank %d] %s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START",
            "comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START",
            "ncclCommInitRank comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START",
            "ncclCommSplit comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx parent %p color %d key %d commId 0x%llx - Init START",
        ],
        &[(" rank ", "rank"), (" nranks ", "nranks")],
        Says::Fact(Fact::InitStart),
    ),
    row(
        Printer::Torch,
        &["exitcode  : %d (pid: %d)", "failed (exitcode: %d) local_rank: %d"],
        &[("exitcode  : ", "exit"), ("(exitcode: ", "exit")],
        Says::Fact(Fact::Exited),
    ),
    row(
        Printer::Python,
        &["Traceback (most recent call last):"],
        &[],
        Says::Fact(Fact::Traceback),
    ),
    row(
        Printer::Kernel,
        &["Segmentation fault", "signal 11 (SIGSEGV)", "Signal 11 (SIGSEGV)"],
        &[],
        Says::Fact(Fact::Crash),
    ),
];

/// A warning of NCCL's that no row knows (`words`): NCCL may have failed,
/// and nccl-find does not know why.
pub const UNKNOWN_WARNING: Message = Message {
    printer: Printer::Nccl,
    formats: &[],
    fields: &[],
    says: Says::Fact(Fact::Warning),
    refine: &[],
    only: None,
};
