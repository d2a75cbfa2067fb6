//! The few CUDA driver API calls the smoke test needs, looked up in
//! `libcuda.so.1` as [`driver`] loads it at run time. A missing driver is an
//! error value, never a panic. The driver API (not the runtime) is used so
//! that no particular `libcudart` version is needed: NCCL carries its own.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use crate::driver;

pub type CuResult = c_int;
pub type CuDevice = c_int;
pub type CuContext = *mut c_void;
pub type CuStream = *mut c_void;
pub type CuDevicePtr = u64;
pub type CuModule = *mut c_void;
pub type CuFunction = *mut c_void;

/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
pub const ATTR_CC_MAJOR: c_int = 75;

/// `CUDA_ERROR_NOT_READY`: a stream still has work.
pub const NOT_READY: CuResult = 600;

macro_rules! api {
    ($($name:ident : $sym:literal => fn($($arg:ty),*) -> $ret:ty;)*) => {
        /// The driver's functions. The library is never unloaded
        /// ([`driver`]), so the pointers stay valid for the life of the
        /// process.
        #[allow(non_snake_case)]
        pub struct Cuda {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> $ret,)*
        }

        impl Cuda {
            /// Loads `libcuda.so.1` (once per process) and its functions.
            pub fn load() -> Result<Cuda, String> {
                let lib = driver::libcuda()?;
                // SAFETY: each symbol is looked up with the signature the
                // CUDA driver API documents for it.
                unsafe {
                    $(let $name = *lib
                        .get::<unsafe extern "C" fn($($arg),*) -> $ret>(concat!($sym, "\0").as_bytes())
                        .map_err(|e| format!("{} lacks {}: {e}", driver::LIBCUDA, $sym))?;)*
                    Ok(Cuda { $($name,)* })
                }
            }
        }
    };
}

api! {
    init: "cuInit" => fn(c_uint) -> CuResult;
    device_get_count: "cuDeviceGetCount" => fn(*mut c_int) -> CuResult;
    device_get: "cuDeviceGet" => fn(*mut CuDevice, c_int) -> CuResult;
    device_get_name: "cuDeviceGetName" => fn(*mut c_char, c_int, CuDevice) -> CuResult;
    primary_ctx_retain: "cuDevicePrimaryCtxRetain" => fn(*mut CuContext, CuDevice) -> CuResult;
    ctx_set_current: "cuCtxSetCurrent" => fn(CuContext) -> CuResult;
    mem_alloc: "cuMemAlloc_v2" => fn(*mut CuDevicePtr, usize) -> CuResult;
    mem_free: "cuMemFree_v2" => fn(CuDevicePtr) -> CuResult;
    memcpy_htod: "cuMemcpyHtoD_v2" => fn(CuDevicePtr, *const c_void, usize) -> CuResult;
    memcpy_dtoh: "cuMemcpyDtoH_v2" => fn(*mut c_void, CuDevicePtr, usize) -> CuResult;
    stream_create: "cuStreamCreate" => fn(*mut CuStream, c_uint) -> CuResult;
    stream_query: "cuStreamQuery" => fn(CuStream) -> CuResult;
    stream_destroy: "cuStreamDestroy_v2" => fn(CuStream) -> CuResult;
    get_error_string: "cuGetErrorString" => fn(CuResult, *mut *const c_char) -> CuResult;
    module_load_data: "cuModuleLoadData" => fn(*mut CuModule, *const c_void) -> CuResult;
    module_get_function: "cuModuleGetFunction" => fn(*mut CuFunction, CuModule, *const c_char) -> CuResult;
    launch_kernel: "cuLaunchKernel" => fn(CuFunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CuStream, *mut *mut c_void, *mut *mut c_void) -> CuResult;
    device_get_attribute: "cuDeviceGetAttribute" => fn(*mut c_int, c_int, CuDevice) -> CuResult;
    device_can_access_peer: "cuDeviceCanAccessPeer" => fn(*mut c_int, CuDevice, CuDevice) -> CuResult;
    device_get_pci_bus_id: "cuDeviceGetPCIBusId" => fn(*mut c_char, c_int, CuDevice) -> CuResult;
}

impl Cuda {
    /// A CUDA error code in words.
    pub fn error(&self, rc: CuResult) -> String {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorString points p at a static string or leaves it null.
        unsafe {
            if (self.get_error_string)(rc, &mut p) == 0 && !p.is_null() {
                return format!("CUDA error {rc}: {}", CStr::from_ptr(p).to_string_lossy());
            }
        }
        format!("CUDA error {rc}")
    }

    /// Turns a return code into a `Result`, naming the call.
    pub fn check(&self, rc: CuResult, what: &str) -> Result<(), String> {
        if rc == 0 {
            Ok(())
        } else {
            Err(format!("{what} failed: {}", self.error(rc)))
        }
    }
}
