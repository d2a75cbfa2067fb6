//! Which NCCL did cudarc load? Prints
//! `cudarc loaded NCCL <version> from <path>`, the path being the file the
//! process has mapped, links resolved. Refuses (exit 1, a message, no
//! panic) when no NCCL can be loaded or when the one loaded is NCCL 1.
//!
//! With the `all-reduce` feature (default) and GPUs present, it then runs an
//! all-reduce through cudarc's safe NCCL API on every GPU, checks every
//! element, and prints one more line. With no driver or no GPU it says on
//! stderr that it skipped.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The `libnccl.so.2` nccl-find selected when this program was built.
const SELECTED: &str = env!("NCCL_FIND_SELECTED");

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("cudarc-nccl: {msg}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<(), String> {
    open_nccl()?;
    let loaded = mapped_nccl()?;
    if is_nccl1_file(&loaded) {
        return Err(format!(
            "cudarc loaded {}, which is NCCL 1: refusing to run. The loader directory nccl-find made \
             for this binary is gone or was bypassed; rebuild it (cargo build), or run \
             `eval \"$(nccl-find --loader-env)\"` first",
            loaded.display()
        ));
    }
    check_symbol()?;
    let code = cudarc::nccl::result::get_nccl_version()
        .map_err(|e| format!("ncclGetVersion in {} failed: {:?}", loaded.display(), e.0))?;
    let (major, minor, patch) = decode(code);
    if major < 2 {
        return Err(format!(
            "cudarc loaded NCCL {major}.{minor}.{patch} from {}: NCCL 1, refusing to run. Rebuild \
             (cargo build), or run `eval \"$(nccl-find --loader-env)\"` first",
            loaded.display()
        ));
    }
    println!(
        "cudarc loaded NCCL {major}.{minor}.{patch} from {}",
        loaded.display()
    );
    if loaded != Path::new(SELECTED) {
        eprintln!(
            "cudarc-nccl: note: nccl-find selected {SELECTED} when this binary was built; the loader found {} instead",
            loaded.display()
        );
    }
    #[cfg(feature = "all-reduce")]
    all_reduce::run()?;
    Ok(())
}

/// Loads NCCL the way cudarc does, without its panic when nothing loads.
#[cfg(feature = "dynamic-loading")]
fn open_nccl() -> Result<(), String> {
    // SAFETY: both only dlopen libraries by the names cudarc knows, which
    // runs their initialisers; no function in them is called here.
    let present = unsafe { cudarc::nccl::sys::is_culib_present() };
    if !present {
        return Err(
            "cudarc found no NCCL (it tried libnccl.so, libnccl.so.12, ... and libnccl.so.1). \
             Rebuild with NCCL_HOME or VIRTUAL_ENV naming an NCCL 2 install, so that nccl-find \
             gives this binary its loader directory"
                .to_string(),
        );
    }
    // SAFETY: as above; it loads the same library is_culib_present found.
    let _ = unsafe { cudarc::nccl::sys::culib() };
    Ok(())
}

/// With `dynamic-linking` the loader mapped NCCL (`DT_NEEDED`) before main.
#[cfg(not(feature = "dynamic-loading"))]
fn open_nccl() -> Result<(), String> {
    Ok(())
}

/// cudarc panics on a missing symbol; look it up first.
#[cfg(feature = "dynamic-loading")]
fn check_symbol() -> Result<(), String> {
    // SAFETY: culib() was loaded in open_nccl; the symbol is only looked up.
    let found = unsafe {
        cudarc::nccl::sys::culib()
            .get::<unsafe extern "C" fn(*mut i32) -> i32>(b"ncclGetVersion\0")
            .is_ok()
    };
    if found {
        Ok(())
    } else {
        Err(
            "the NCCL cudarc loaded has no ncclGetVersion (NCCL older than 2.3?): refusing to run"
                .into(),
        )
    }
}

#[cfg(not(feature = "dynamic-loading"))]
fn check_symbol() -> Result<(), String> {
    Ok(())
}

/// `X*10000+Y*100+Z` from 2.9, `X*1000+Y*100+Z` before.
fn decode(code: i32) -> (i32, i32, i32) {
    if code >= 10000 {
        (code / 10000, code % 10000 / 100, code % 100)
    } else {
        (code / 1000, code % 1000 / 100, code % 100)
    }
}

fn is_nccl1_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "libnccl.so.1" || name.starts_with("libnccl.so.1.")
}

/// The NCCL library this process has mapped, from `/proc/self/maps` (the
/// kernel shows the file itself, links resolved).
fn mapped_nccl() -> Result<PathBuf, String> {
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| format!("cannot read /proc/self/maps to see which NCCL was loaded: {e}"))?;
    let mut found: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        let Some(path) = maps_path(line) else {
            continue;
        };
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("libnccl") && name.contains(".so") {
            let real = std::fs::canonicalize(&path).unwrap_or(path);
            if !found.contains(&real) {
                found.push(real);
            }
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err("NCCL was loaded, but no libnccl file is mapped in this process".into()),
        _ => Err(format!(
            "more than one NCCL is mapped in this process: {}",
            found
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The path of one `/proc/self/maps` line: what follows the five fields
/// (address, perms, offset, device, inode), when it is a file.
fn maps_path(line: &str) -> Option<PathBuf> {
    let mut rest = line;
    for _ in 0..5 {
        rest = rest.trim_start();
        let end = rest.find(' ')?;
        rest = &rest[end..];
    }
    let path = rest.trim_start();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    path.starts_with('/').then(|| PathBuf::from(path))
}

#[cfg(feature = "all-reduce")]
mod all_reduce {
    use std::sync::Arc;
    use std::time::Instant;

    use cudarc::driver::{CudaContext, CudaStream};
    use cudarc::nccl::result::{group_end, group_start};
    use cudarc::nccl::{Comm, ReduceOp};

    /// Elements per GPU: 64 MiB of f32.
    const LEN: usize = 16 << 20;
    const TIMED: u32 = 10;

    fn nccl(what: &str, e: cudarc::nccl::result::NcclError) -> String {
        format!("{what} failed: NCCL error {:?}", e.0)
    }

    fn cuda(what: &str, e: cudarc::driver::DriverError) -> String {
        format!("{what} failed: CUDA error {e:?}")
    }

    fn gpus() -> Option<usize> {
        #[cfg(feature = "dynamic-loading")]
        {
            // SAFETY: only dlopens libcuda by the names cudarc knows.
            if !unsafe { cudarc::driver::sys::is_culib_present() } {
                eprintln!("all-reduce: skipped (no CUDA driver: libcuda.so not found)");
                return None;
            }
        }
        match CudaContext::device_count() {
            Ok(n) if n > 0 => Some(n as usize),
            Ok(_) => {
                eprintln!("all-reduce: skipped (no GPU)");
                None
            }
            Err(e) => {
                eprintln!("all-reduce: skipped (the CUDA driver says {e:?})");
                None
            }
        }
    }

    /// Every rank sends `rank + 1`; every element of every result must be
    /// `n (n + 1) / 2`.
    pub fn run() -> Result<(), String> {
        let Some(n) = gpus() else { return Ok(()) };
        let t0 = Instant::now();
        let streams = (0..n)
            .map(|i| CudaContext::new(i).map(|c| c.default_stream()))
            .collect::<Result<Vec<Arc<CudaStream>>, _>>()
            .map_err(|e| cuda("creating a context", e))?;
        let comms = Comm::from_devices(streams).map_err(|e| nccl("ncclCommInitAll", e))?;
        let init = t0.elapsed();
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        for c in &comms {
            let s = c.stream();
            let host = vec![(c.rank() + 1) as f32; LEN];
            sends.push(
                s.clone_htod(&host)
                    .map_err(|e| cuda("copying to the GPU", e))?,
            );
            recvs.push(
                s.alloc_zeros::<f32>(LEN)
                    .map_err(|e| cuda("allocating", e))?,
            );
        }
        let step = |sends: &Vec<_>, recvs: &mut Vec<_>| -> Result<(), String> {
            group_start().map_err(|e| nccl("ncclGroupStart", e))?;
            for ((c, s), r) in comms.iter().zip(sends).zip(recvs.iter_mut()) {
                c.all_reduce(s, r, &ReduceOp::Sum)
                    .map_err(|e| nccl("ncclAllReduce", e))?;
            }
            group_end().map_err(|e| nccl("ncclGroupEnd", e))?;
            for c in &comms {
                c.stream()
                    .synchronize()
                    .map_err(|e| cuda("synchronizing", e))?;
            }
            Ok(())
        };
        step(&sends, &mut recvs)?; // warm-up
        let t1 = Instant::now();
        for _ in 0..TIMED {
            step(&sends, &mut recvs)?;
        }
        let per = t1.elapsed() / TIMED;
        let want = (n * (n + 1) / 2) as f32;
        for (c, r) in comms.iter().zip(&recvs) {
            let host = c
                .stream()
                .clone_dtoh(r)
                .map_err(|e| cuda("copying back", e))?;
            if let Some((i, v)) = host.iter().enumerate().find(|(_, v)| **v != want) {
                return Err(format!(
                    "all-reduce: GPU {} element {i} is {v}, want {want}",
                    c.ordinal()
                ));
            }
        }
        let bytes = (LEN * 4) as f64;
        let busbw = bytes * 2.0 * (n as f64 - 1.0) / n as f64 / per.as_secs_f64() / 1e9;
        println!(
            "all-reduce: {n} GPUs, {LEN} f32 each, every element = {want} on every GPU; \
             init {:.0} ms, {:.2} ms per all-reduce ({busbw:.1} GB/s bus bandwidth)",
            init.as_secs_f64() * 1e3,
            per.as_secs_f64() * 1e3
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes() {
        assert_eq!(decode(22105), (2, 21, 5));
        assert_eq!(decode(2804), (2, 8, 4));
        assert_eq!(decode(1304), (1, 3, 4));
    }

    #[test]
    fn maps_lines() {
        let l = "7f00-7f10 r-xp 00000000 08:01 1234                       /a b/libnccl.so.2.21.5";
        assert_eq!(maps_path(l), Some(PathBuf::from("/a b/libnccl.so.2.21.5")));
        assert_eq!(maps_path("7f00-7f10 rw-p 00000000 00:00 0"), None);
        assert_eq!(maps_path("7f00-7f10 rw-p 00000000 00:00 0   [heap]"), None);
        assert!(is_nccl1_file(Path::new("/x/libnccl.so.1.3.4")));
        assert!(!is_nccl1_file(Path::new("/x/libnccl.so.12")));
    }
}
