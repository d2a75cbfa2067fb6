//! What the end-to-end tests of `nccl-find smoke` share: the wheel's
//! library, a finished process's output, a free port. Each test file uses
//! some of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The cu12 2.21.5 wheel's `libnccl.so.2` that scripts/test caches; `None`
/// (with a line saying why) where it is not there, unless the test command
/// requires it.
pub fn wheel_lib() -> Option<PathBuf> {
    match std::env::var_os("NCCL_FIND_WHEELS") {
        Some(w) => {
            Some(PathBuf::from(w).join("nvidia_nccl_cu12-2.21.5/nvidia/nccl/lib/libnccl.so.2"))
        }
        None => {
            assert!(
                std::env::var_os("NCCL_FIND_REQUIRE_WHEELS").is_none(),
                "NCCL_FIND_WHEELS is unset; run scripts/test"
            );
            eprintln!("skipped: NCCL_FIND_WHEELS is unset (scripts/test sets it)");
            None
        }
    }
}

/// Exit status, stdout and stderr of a finished process.
pub fn text(o: &Output) -> (i32, String, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Removes from `c`'s environment every variable of a launcher that the
/// test's own environment holds (a CI runner under Slurm or torchrun,
/// say), so that only what the test sets reaches the command: torchrun's,
/// Open MPI's, PMI's and PMIx's, Slurm's, Hydra's local ranks, torch's
/// dialect hints and our own token and Slurm port.
pub fn without_launchers(c: &mut Command) -> &mut Command {
    const PREFIXES: [&str; 5] = ["SLURM", "PMI", "OMPI_", "TORCHELASTIC", "NCCL_FIND_SLURM"];
    const NAMES: [&str; 12] = [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "MPI_LOCALRANKID",
        "MPI_LOCALNRANKS",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_FIND_TOKEN",
        "CUDA_VISIBLE_DEVICES",
    ];
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if PREFIXES.iter().any(|p| k.starts_with(p)) || NAMES.contains(&&*k) {
            c.env_remove(&*k);
        }
    }
    c
}
