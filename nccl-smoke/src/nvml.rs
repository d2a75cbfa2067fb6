//! NVML, the driver's management library, opened at run time (absent
//! NVML is no error): the links of a GPU (active NVLinks, the PCIe link)
//! for the verdict against the hardware, and each GPU's health (ECC
//! errors, remapped rows, retired pages, throttling that is a fault) for
//! the card a node brings to the meeting.

use std::ffi::{c_char, c_int, c_uint, c_void};

/// NVML, opened at run time; absent NVML is not an error.
pub(crate) struct Nvml {
    _lib: std::mem::ManuallyDrop<libloading::Library>,
    by_bus: unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int,
    link_state: unsafe extern "C" fn(*mut c_void, c_uint, *mut c_uint) -> c_int,
    pcie_gen: unsafe extern "C" fn(*mut c_void, *mut c_uint) -> c_int,
    pcie_width: unsafe extern "C" fn(*mut c_void, *mut c_uint) -> c_int,
    /// What health needs; `None` where this driver's NVML lacks it.
    health: Option<HealthFns>,
}

/// NVML's calls for a GPU's health, as nvml.h declares them.
struct HealthFns {
    count: unsafe extern "C" fn(*mut c_uint) -> c_int,
    by_index: unsafe extern "C" fn(c_uint, *mut *mut c_void) -> c_int,
    remapped: unsafe extern "C" fn(
        *mut c_void,
        *mut c_uint,
        *mut c_uint,
        *mut c_uint,
        *mut c_uint,
    ) -> c_int,
    ecc: unsafe extern "C" fn(*mut c_void, c_int, c_int, *mut u64) -> c_int,
    retired_pending: unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int,
    reasons: unsafe extern "C" fn(*mut c_void, *mut u64) -> c_int,
}

impl Nvml {
    /// Opens `libnvidia-ml.so.1` and initialises it.
    pub(crate) fn open() -> Option<Nvml> {
        // SAFETY: NVML is the driver's own library; loading runs its initialisers.
        let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }.ok()?;
        // SAFETY: each symbol is looked up with the signature nvml.h gives it.
        unsafe {
            let init: unsafe extern "C" fn() -> c_int = *lib.get(b"nvmlInit_v2\0").ok()?;
            if init() != 0 {
                return None;
            }
            let health = (|| {
                Some(HealthFns {
                    count: *lib.get(b"nvmlDeviceGetCount_v2\0").ok()?,
                    by_index: *lib.get(b"nvmlDeviceGetHandleByIndex_v2\0").ok()?,
                    remapped: *lib.get(b"nvmlDeviceGetRemappedRows\0").ok()?,
                    ecc: *lib.get(b"nvmlDeviceGetTotalEccErrors\0").ok()?,
                    retired_pending: *lib.get(b"nvmlDeviceGetRetiredPagesPendingStatus\0").ok()?,
                    reasons: *lib
                        .get(b"nvmlDeviceGetCurrentClocksThrottleReasons\0")
                        .ok()?,
                })
            })();
            Some(Nvml {
                health,
                by_bus: *lib.get(b"nvmlDeviceGetHandleByPciBusId_v2\0").ok()?,
                link_state: *lib.get(b"nvmlDeviceGetNvLinkState\0").ok()?,
                pcie_gen: *lib.get(b"nvmlDeviceGetMaxPcieLinkGeneration\0").ok()?,
                pcie_width: *lib.get(b"nvmlDeviceGetMaxPcieLinkWidth\0").ok()?,
                _lib: std::mem::ManuallyDrop::new(lib),
            })
        }
    }

    /// Active NVLinks and the PCIe link of the GPU at this bus id.
    pub(crate) fn links(&self, bus_id: &std::ffi::CStr) -> (Option<u32>, Option<(u32, u32)>) {
        let mut h: *mut c_void = std::ptr::null_mut();
        // SAFETY: bus_id is NUL-terminated; h receives a handle.
        if unsafe { (self.by_bus)(bus_id.as_ptr(), &mut h) } != 0 {
            return (None, None);
        }
        let mut n = 0;
        for link in 0..18 {
            let mut active = 0;
            // SAFETY: h is a live handle; writes one uint.
            if unsafe { (self.link_state)(h, link, &mut active) } == 0 && active == 1 {
                n += 1;
            }
        }
        let (mut gen, mut width) = (0, 0);
        // SAFETY: as above.
        let pcie =
            unsafe { (self.pcie_gen)(h, &mut gen) == 0 && (self.pcie_width)(h, &mut width) == 0 };
        (Some(n), pcie.then_some((gen, width)))
    }
}

impl Nvml {
    /// Each GPU's health as NVML reads it, by NVML's index; `None` where
    /// this NVML cannot say.
    pub(crate) fn health(&self) -> Option<Vec<Health>> {
        let f = self.health.as_ref()?;
        let mut n: c_uint = 0;
        // SAFETY: writes one uint.
        if unsafe { (f.count)(&mut n) } != 0 {
            return None;
        }
        let mut out = Vec::new();
        for i in 0..n.min(64) {
            let mut h: *mut c_void = std::ptr::null_mut();
            // SAFETY: i < the count NVML gave; h receives a handle.
            if unsafe { (f.by_index)(i, &mut h) } != 0 {
                continue;
            }
            let (mut corr, mut unc, mut pending, mut failed) = (0, 0, 0, 0);
            // SAFETY: h is a live handle; each call writes the values it is given.
            let rows =
                unsafe { (f.remapped)(h, &mut corr, &mut unc, &mut pending, &mut failed) } == 0;
            let mut ecc = 0u64;
            // SAFETY: as above; 1 is NVML_MEMORY_ERROR_TYPE_UNCORRECTED, 0 NVML_VOLATILE_ECC.
            let ecc_ok = unsafe { (f.ecc)(h, 1, 0, &mut ecc) } == 0;
            let mut retired: c_int = 0;
            // SAFETY: as above.
            let retired_ok = unsafe { (f.retired_pending)(h, &mut retired) } == 0;
            let mut reasons = 0u64;
            // SAFETY: as above.
            let reasons_ok = unsafe { (f.reasons)(h, &mut reasons) } == 0;
            out.push(Health {
                index: i as usize,
                uncorrected_ecc: ecc_ok.then_some(ecc),
                rows_pending: rows && pending != 0,
                rows_failed: rows && failed != 0,
                retired_pending: retired_ok && retired != 0,
                slowdown: reasons_ok
                    .then_some(reasons & SLOWDOWNS)
                    .filter(|r| *r != 0),
            });
        }
        Some(out)
    }
}

/// Throttle reasons that are a fault, not a choice: software thermal
/// (0x20), hardware slowdown (0x8), hardware thermal (0x40) and the power
/// brake (0x80).
const SLOWDOWNS: u64 = 0x8 | 0x20 | 0x40 | 0x80;

/// One GPU's health, as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Health {
    /// NVML's index of the GPU.
    pub index: usize,
    /// Uncorrected ECC errors since the driver loaded (`None`: no ECC).
    pub uncorrected_ecc: Option<u64>,
    /// A row remapping waits for a GPU reset.
    pub rows_pending: bool,
    /// A row remapping failed: the GPU wants replacing.
    pub rows_failed: bool,
    /// Retired pages wait for a reset (GPUs before the A100).
    pub retired_pending: bool,
    /// The throttle reasons in force that are a fault (NVML bits 0x8, 0x20, 0x40, 0x80).
    pub slowdown: Option<u64>,
}

/// The GPUs' health in one line: `ok`, or each GPU that is not, with why
/// (`GPU 3: 2 uncorrected ECC errors, row remapping pending`).
pub fn health_line(all: &[Health]) -> String {
    let mut parts = Vec::new();
    for h in all {
        let mut why = Vec::new();
        if let Some(n) = h.uncorrected_ecc.filter(|n| *n > 0) {
            why.push(format!("{n} uncorrected ECC error(s)"));
        }
        if h.rows_failed {
            why.push("a row remapping failed".to_string());
        } else if h.rows_pending {
            why.push("row remapping pending (reset the GPU)".to_string());
        }
        if h.retired_pending {
            why.push("retired pages pending (reset the GPU)".to_string());
        }
        if let Some(r) = h.slowdown {
            let names: Vec<&str> = [
                (0x8, "hardware slowdown"),
                (0x20, "software thermal"),
                (0x40, "hardware thermal"),
                (0x80, "power brake"),
            ]
            .iter()
            .filter(|(b, _)| r & b != 0)
            .map(|(_, n)| *n)
            .collect();
            why.push(format!("throttled ({})", names.join(", ")));
        }
        if !why.is_empty() {
            parts.push(format!("GPU {}: {}", h.index, why.join(", ")));
        }
    }
    match parts.is_empty() {
        true => "ok".into(),
        false => parts.join("; "),
    }
}

/// This machine's GPUs' health in one line ([`health_line`]); `None`
/// where NVML is absent or cannot say.
pub fn health() -> Option<String> {
    Some(health_line(&Nvml::open()?.health()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_at_fault_is_named_with_why_and_choices_are_not_faults() {
        let ok = Health {
            index: 0,
            uncorrected_ecc: Some(0),
            slowdown: None,
            ..Default::default()
        };
        assert_eq!(health_line(std::slice::from_ref(&ok)), "ok");
        let bad = Health {
            index: 3,
            uncorrected_ecc: Some(2),
            rows_pending: true,
            slowdown: Some(0x40),
            ..Default::default()
        };
        assert_eq!(
            health_line(&[ok, bad]),
            "GPU 3: 2 uncorrected ECC error(s), row remapping pending (reset the GPU), throttled (hardware thermal)"
        );
        let failed = Health {
            index: 1,
            rows_failed: true,
            rows_pending: true,
            ..Default::default()
        };
        assert_eq!(health_line(&[failed]), "GPU 1: a row remapping failed");
        // A GPU without ECC reports none, and says nothing.
        assert_eq!(
            health_line(&[Health {
                index: 0,
                ..Default::default()
            }]),
            "ok"
        );
    }
}
