//! What the end-to-end tests of `nccl-find smoke` share: the wheel's
//! library, a finished process's output, a free port. Each test file uses
//! some of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Output;

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
