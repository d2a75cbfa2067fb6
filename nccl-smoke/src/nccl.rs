//! NCCL's API, loaded from one exact library file: the one the probe
//! selected, or the one named with `--lib`. (cudarc's loader cannot name a
//! file and never tries `libnccl.so.2`.)

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};

use libloading::Library;

use crate::cuda::CuStream;

pub type NcclResult = c_int;
pub type NcclComm = *mut c_void;

pub const SUCCESS: NcclResult = 0;
pub const IN_PROGRESS: NcclResult = 7;
/// `ncclInvalidUsage`.
pub const INVALID_USAGE: NcclResult = 5;

/// `ncclUniqueId`: 128 opaque bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [u8; 128],
}

type Fn0 = unsafe extern "C" fn() -> NcclResult;
/// `ncclCommGetAsyncError`.
pub type AsyncErrorFn = unsafe extern "C" fn(NcclComm, *mut NcclResult) -> NcclResult;
type FnComm = unsafe extern "C" fn(NcclComm) -> NcclResult;

/// `ncclAllGather` (elements sent) and `ncclAlltoAll` (elements to each
/// peer): send, receive, elements, datatype, communicator, stream.
pub type AllGatherFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    NcclComm,
    CuStream,
) -> NcclResult;
/// `ncclAllReduce`, `ncclReduceScatter` (elements received), and
/// `ncclBroadcast`, `ncclGather` and `ncclScatter` (2.28.3; elements per
/// rank), whose `c_int` is the root, not an op: send, receive, elements,
/// datatype, op or root, communicator, stream.
pub type ReduceLikeFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    NcclComm,
    CuStream,
) -> NcclResult;
/// `ncclReduce`: send, receive, elements, datatype, op, root, communicator,
/// stream.
pub type ReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    c_int,
    NcclComm,
    CuStream,
) -> NcclResult;
/// `ncclSend`: buffer, elements, datatype, peer, communicator, stream.
pub type SendFn =
    unsafe extern "C" fn(*const c_void, usize, c_int, c_int, NcclComm, CuStream) -> NcclResult;
/// `ncclRecv`: buffer, elements, datatype, peer, communicator, stream.
pub type RecvFn =
    unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, NcclComm, CuStream) -> NcclResult;

/// NCCL's functions, from one library file.
#[allow(clippy::type_complexity)]
pub struct NcclLib {
    /// Never closed: NCCL and the driver keep threads running until the
    /// process exits, and unloading their code under them crashes it.
    _lib: std::mem::ManuallyDrop<Library>,
    /// The file loaded.
    pub path: PathBuf,
    /// `ncclGetVersion`'s answer.
    pub version_code: i32,
    pub get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> NcclResult,
    pub comm_init_rank: unsafe extern "C" fn(*mut NcclComm, c_int, UniqueId, c_int) -> NcclResult,
    /// 2.4 and newer.
    pub comm_get_async_error: Option<AsyncErrorFn>,
    pub comm_abort: Option<FnComm>,
    pub comm_destroy: FnComm,
    pub all_reduce: ReduceLikeFn,
    /// The other collectives: `None` where this NCCL lacks them.
    pub all_gather: Option<AllGatherFn>,
    pub reduce_scatter: Option<ReduceLikeFn>,
    pub broadcast: Option<ReduceLikeFn>,
    pub reduce: Option<ReduceFn>,
    /// 2.7 and newer.
    pub send: Option<SendFn>,
    pub recv: Option<RecvFn>,
    /// 2.28.3 and newer (before, the same by grouped sends and receives).
    pub all_to_all: Option<AllGatherFn>,
    pub gather: Option<ReduceLikeFn>,
    pub scatter: Option<ReduceLikeFn>,
    pub group_start: Fn0,
    pub group_end: Fn0,
    pub get_error_string: unsafe extern "C" fn(NcclResult) -> *const c_char,
    /// 2.13 and newer.
    pub get_last_error: Option<unsafe extern "C" fn(NcclComm) -> *const c_char>,
}

impl NcclLib {
    /// Loads NCCL from exactly this file.
    pub fn load(path: &Path) -> Result<NcclLib, String> {
        // A bare name would send dlopen searching the loader's path: always
        // load by absolute path, the file that was named.
        let abs;
        let path = if path.is_absolute() {
            path
        } else {
            let here = std::env::current_dir()
                .map_err(|e| format!("cannot load {}: {e}", path.display()))?;
            abs = here.join(path);
            abs.as_path()
        };
        // SAFETY: the file is an NCCL library found and checked by the probe
        // or named by the user; loading it runs its initialisers only.
        let lib = unsafe { Library::new(path) }
            .map_err(|e| format!("cannot load {}: {e}", path.display()))?;
        // SAFETY: every symbol is looked up with the signature nccl.h gives it.
        unsafe {
            macro_rules! need {
                ($sym:literal) => {
                    *lib.get(concat!($sym, "\0").as_bytes())
                        .map_err(|e| format!("{} lacks {}: {e}", path.display(), $sym))?
                };
            }
            macro_rules! maybe {
                ($sym:literal) => {
                    lib.get(concat!($sym, "\0").as_bytes()).ok().map(|s| *s)
                };
            }
            let get_version: unsafe extern "C" fn(*mut c_int) -> NcclResult =
                need!("ncclGetVersion");
            let mut version_code = 0;
            get_version(&mut version_code);
            Ok(NcclLib {
                path: path.to_path_buf(),
                version_code,
                get_unique_id: need!("ncclGetUniqueId"),
                comm_init_rank: need!("ncclCommInitRank"),
                comm_get_async_error: maybe!("ncclCommGetAsyncError"),
                comm_abort: maybe!("ncclCommAbort"),
                comm_destroy: need!("ncclCommDestroy"),
                all_reduce: need!("ncclAllReduce"),
                all_gather: maybe!("ncclAllGather"),
                reduce_scatter: maybe!("ncclReduceScatter"),
                broadcast: maybe!("ncclBroadcast"),
                reduce: maybe!("ncclReduce"),
                send: maybe!("ncclSend"),
                recv: maybe!("ncclRecv"),
                all_to_all: maybe!("ncclAlltoAll"),
                gather: maybe!("ncclGather"),
                scatter: maybe!("ncclScatter"),
                group_start: need!("ncclGroupStart"),
                group_end: need!("ncclGroupEnd"),
                get_error_string: need!("ncclGetErrorString"),
                get_last_error: maybe!("ncclGetLastError"),
                _lib: std::mem::ManuallyDrop::new(lib),
            })
        }
    }

    /// `X.Y.Z` from `ncclGetVersion`.
    pub fn version(&self) -> String {
        version_of(self.version_code)
    }

    /// Its release, from `ncclGetVersion`; `None` for a code no release
    /// gives.
    pub fn release(&self) -> Option<nccl_find::Version> {
        let (x, y, z) = nccl_find::Version::from_code(self.version_code.max(0) as u32)?;
        Some(nccl_find::Version::new(x, y, z, ""))
    }

    /// Whether this NCCL does what `change` brought (an unknown release
    /// counts as the newest).
    pub fn does(&self, change: nccl_find::explain::Change) -> bool {
        change.in_release(self.release().as_ref())
    }

    /// The first release with `name` of NCCL's API (a datatype, a
    /// reduction), by the catalog nccl-find read from the releases, where
    /// this NCCL is older; `None` where it has it (a name the oldest release
    /// read has may be older still, and counts as always there).
    pub fn lacks(&self, name: &str) -> Option<&'static str> {
        let first = nccl_find::explain::introduced_in(name)?;
        if nccl_find::explain::known_releases().first() == Some(&first) {
            return None;
        }
        let mut parts = first.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let want = (
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        );
        let mine = self.release().map(|v| (v.major, v.minor, v.patch));
        mine.is_some_and(|v| v < want).then_some(first)
    }

    /// An NCCL result in words, with the communicator's last error if any.
    pub fn error(&self, rc: NcclResult, comm: Option<NcclComm>) -> String {
        // SAFETY: both return pointers to static or comm-owned C strings.
        unsafe {
            let mut s = CStr::from_ptr((self.get_error_string)(rc))
                .to_string_lossy()
                .into_owned();
            if let (Some(f), Some(c)) = (self.get_last_error, comm) {
                let p = f(c);
                if !p.is_null() {
                    let last = CStr::from_ptr(p).to_string_lossy();
                    if !last.is_empty() {
                        s.push_str(&format!(" ({last})"));
                    }
                }
            }
            s
        }
    }

    /// A new unique id (rank 0 makes it; no GPU needed), or NCCL's result
    /// code and its words.
    pub fn unique_id(&self) -> Result<UniqueId, (NcclResult, String)> {
        let mut id = UniqueId { internal: [0; 128] };
        // SAFETY: writes 128 bytes into id.
        let rc = unsafe { (self.get_unique_id)(&mut id) };
        if rc == SUCCESS {
            Ok(id)
        } else {
            Err((rc, self.error(rc, None)))
        }
    }
}

/// `X.Y.Z` for an `ncclGetVersion` code, decoded by nccl-find (either
/// formula); a code no version gives is shown as it is.
fn version_of(code: i32) -> String {
    let c = code.max(0) as u32;
    match nccl_find::Version::from_code(c) {
        Some((x, y, z)) => format!("{x}.{y}.{z}"),
        None => format!("(version code {c})"),
    }
}

#[cfg(test)]
mod tests {
    use super::version_of;

    #[test]
    fn version_codes_read_with_either_formula() {
        assert_eq!(version_of(22105), "2.21.5");
        assert_eq!(version_of(22809), "2.28.9");
        assert_eq!(version_of(2708), "2.7.8");
        assert_eq!(version_of(20903), "2.9.3");
        assert_eq!(version_of(2999), "(version code 2999)");
    }
}
