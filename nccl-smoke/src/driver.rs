//! The CUDA driver, `libcuda.so.1`: the one place that loads it, for the
//! smoke test and for what `nccl-find doctor` asks of it. Loaded once per
//! process, on first use, and never unloaded: the driver keeps threads
//! running until the process exits, and unloading its code under them
//! crashes it.

use std::sync::OnceLock;

use libloading::Library;

/// The driver library's file name, as NCCL and the CUDA runtime load it.
pub const LIBCUDA: &str = "libcuda.so.1";

static LOADED: OnceLock<Result<Library, String>> = OnceLock::new();

/// `libcuda.so.1`, loaded on the first call; the loader's error (the same
/// one on every later call) when it cannot be loaded.
pub(crate) fn libcuda() -> Result<&'static Library, String> {
    LOADED
        .get_or_init(|| {
            // SAFETY: libcuda.so.1 is the NVIDIA driver's own library;
            // loading it runs only its initialisers.
            unsafe { Library::new(LIBCUDA) }.map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// What the driver says about this machine, without making a GPU context:
/// where it was loaded from, its CUDA version and how many GPUs it sees.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Driver {
    /// Where libcuda.so.1 was loaded from.
    pub libcuda: Option<String>,
    /// `cuDriverGetVersion`: 12040 means CUDA 12.4.
    pub version: Option<i32>,
    /// `cuDeviceGetCount`, when `cuInit` succeeded.
    pub gpus: Option<i32>,
    /// Why libcuda could not be used.
    pub error: Option<String>,
}

impl Driver {
    /// Loads the driver (once per process) and asks it: `cuDriverGetVersion`,
    /// then `cuInit(0)` and `cuDeviceGetCount`. Never fails: what went wrong
    /// is in [`Driver::error`].
    pub fn probe() -> Driver {
        let lib = match libcuda() {
            Ok(l) => l,
            Err(e) => {
                return Driver {
                    error: Some(e),
                    ..Driver::default()
                }
            }
        };
        let mut out = Driver {
            libcuda: loaded_from(),
            ..Driver::default()
        };
        type GetInt = unsafe extern "C" fn(*mut i32) -> i32;
        type Init = unsafe extern "C" fn(u32) -> i32;
        // SAFETY: these are the CUDA driver API's documented signatures; each
        // call writes one int through a pointer to a live local.
        unsafe {
            if let Ok(f) = lib.get::<GetInt>(b"cuDriverGetVersion\0") {
                let mut v = 0;
                if f(&mut v) == 0 {
                    out.version = Some(v);
                }
            }
            match (
                lib.get::<Init>(b"cuInit\0"),
                lib.get::<GetInt>(b"cuDeviceGetCount\0"),
            ) {
                (Ok(init), Ok(count)) => {
                    let rc = init(0);
                    if rc == 0 {
                        let mut n = 0;
                        if count(&mut n) == 0 {
                            out.gpus = Some(n);
                        }
                    } else {
                        out.error = Some(format!("cuInit failed with CUDA error {rc}"));
                    }
                }
                _ => out.error = Some(format!("{LIBCUDA} lacks cuInit/cuDeviceGetCount")),
            }
        }
        out
    }
}

/// `cuDriverGetVersion` alone (12040 means CUDA 12.4), without `cuInit`:
/// `None` where there is no driver.
pub fn cuda_version() -> Option<i32> {
    let lib = libcuda().ok()?;
    type GetInt = unsafe extern "C" fn(*mut i32) -> i32;
    let mut v = 0;
    // SAFETY: the CUDA driver API's documented signature; the call writes
    // one int through a pointer to a live local, and needs no cuInit.
    let rc = unsafe { lib.get::<GetInt>(b"cuDriverGetVersion\0").ok()?(&mut v) };
    (rc == 0).then_some(v)
}

/// The file libcuda was loaded from, as this process maps it.
fn loaded_from() -> Option<String> {
    std::fs::read_to_string("/proc/self/maps")
        .ok()
        .and_then(|maps| {
            maps.lines()
                .filter_map(|l| l.split_whitespace().nth(5))
                .find(|p| p.contains("libcuda.so"))
                .map(String::from)
        })
}
