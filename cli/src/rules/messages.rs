//! What NCCL's results mean: each `ncclResult_t` of `nccl.h`, by its name,
//! NCCL's own words for it (`ncclGetErrorString`), and the usual cause and
//! fix where a run fails with it. `nccl-find smoke` ends a failed call on
//! them; `ras` names the results its report carries by them.

/// One result code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Result {
    /// Its value.
    pub code: i32,
    /// Its name in `nccl.h` (`ncclSystemError`).
    pub name: &'static str,
    /// NCCL's words for it, without the advice NCCL adds.
    pub words: &'static str,
    /// The usual cause and fix, where a run fails with it.
    pub cause: &'static str,
}

/// Every result code of `nccl.h` (`ncclResult_t`), in order: a new one in
/// a release the test command caches fails this module's tests until it is
/// here.
pub const RESULTS: [Result; 9] = [
    Result {
        code: 0,
        name: "ncclSuccess",
        words: "no error",
        cause: "",
    },
    Result {
        code: 1,
        name: "ncclUnhandledCudaError",
        words: "unhandled cuda error",
        cause:
            "a driver or CUDA problem, or out of memory: check nvidia-smi and the driver version \
                (nccl-find doctor)",
    },
    Result {
        code: 2,
        name: "ncclSystemError",
        words: "unhandled system error",
        cause: "NCCL picked a network interface another node cannot reach (docker0, virbr0, an \
                unroutable address), or /dev/shm is too small: set NCCL_SOCKET_IFNAME, \
                NCCL_IB_DISABLE=1 without working RDMA, NCCL_SHM_DISABLE=1 or a larger /dev/shm \
                (nccl-find doctor checks all of these)",
    },
    Result {
        code: 3,
        name: "ncclInternalError",
        words: "internal error",
        cause:
            "no usable network interface (\"no socket interface found\"): set NCCL_SOCKET_IFNAME",
    },
    Result {
        code: 4,
        name: "ncclInvalidArgument",
        words: "invalid argument",
        cause: "a call NCCL refused: NCCL_DEBUG=WARN says which argument",
    },
    Result {
        code: 5,
        name: "ncclInvalidUsage",
        words: "invalid usage",
        cause: "two ranks on one GPU (a wrong local-rank mapping), or no interface for NCCL's \
                bootstrap: give each rank its own GPU; NCCL_DEBUG=WARN says which",
    },
    Result {
        code: 6,
        name: "ncclRemoteError",
        words: "remote process exited or there was a network error",
        cause: "a peer died or the network dropped: check the other ranks' logs",
    },
    Result {
        code: 7,
        name: "ncclInProgress",
        words: "NCCL operation in progress",
        cause: "a non-blocking call not yet finished: poll ncclCommGetAsyncError",
    },
    Result {
        code: 8,
        name: "ncclTimeout",
        words: "timeout",
        cause: "an operation ran past NCCL's own timeout: a rank is stuck or gone; ask NCCL's RAS \
                service which (nccl-find ras)",
    },
];

/// The result `code`, where `nccl.h` has it.
pub fn result(code: i32) -> Option<&'static Result> {
    RESULTS.iter().find(|r| r.code == code)
}

/// What to do after a call failed with `code`, in one sentence that leads
/// with the likely cause.
pub fn likely(code: i32) -> String {
    match result(code) {
        Some(r) if !r.cause.is_empty() => format!("Likely cause ({}): {}.", r.name, r.cause),
        _ => "Run with NCCL_DEBUG=INFO for NCCL's own account.".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_once_in_order_with_its_name() {
        for (i, r) in RESULTS.iter().enumerate() {
            assert_eq!(r.code, i as i32, "{r:?}");
            assert!(r.name.starts_with("nccl"), "{r:?}");
        }
        assert_eq!(result(8).map(|r| r.name), Some("ncclTimeout"));
        assert_eq!(result(42), None);
        assert!(likely(2).starts_with("Likely cause (ncclSystemError): NCCL picked"));
        assert_eq!(
            likely(99),
            "Run with NCCL_DEBUG=INFO for NCCL's own account."
        );
    }

    /// Every result code the cached releases' `nccl.h` declares is here,
    /// by its name and value: a release with a new one turns this red.
    #[test]
    fn every_result_the_releases_declare_is_here() {
        for (dir, v) in crate::rules::cached_releases() {
            let header = std::fs::read_to_string(dir.join("include/nccl.h")).unwrap();
            let start = header.find("ncclSuccess").expect("ncclResult_t");
            let end = start + header[start..].find("ncclResult_t").unwrap();
            for entry in header[start..end].split(',') {
                let entry = entry.split("/*").next().unwrap_or(entry);
                let Some((name, value)) = entry.split_once('=') else {
                    continue;
                };
                let name = name.trim();
                let value = value.trim().trim_end_matches('}').trim();
                if name == "ncclNumResults" {
                    continue;
                }
                let code: i32 = value
                    .parse()
                    .unwrap_or_else(|_| panic!("{name} = {value:?}"));
                assert_eq!(
                    result(code).map(|r| r.name),
                    Some(name),
                    "NCCL {v}'s nccl.h: {name} = {code}"
                );
            }
        }
    }
}
