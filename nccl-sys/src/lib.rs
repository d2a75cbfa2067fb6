//! Raw bindings to NVIDIA's NCCL, found and linked by [nccl-find].
//!
//! The bindings are pre-generated from NCCL 2.21.5's `nccl.h` (the
//! `nvidia-nccl-cu12` wheel), so building needs no libclang and no CUDA
//! headers. With the `bindgen` feature they are generated from the header
//! nccl-find located instead.
//!
//! The build script emits a cfg per API level (`nccl_2_18`, `nccl_2_19`, …,
//! listed in nccl-find's crate documentation), so code can gate calls to newer functions:
//! `#[cfg(nccl_2_18)]` around `ncclCommSplit`.
//!
//! Dependents that declare this crate as a dependency see `DEP_NCCL_INCLUDE`,
//! `DEP_NCCL_LIB_DIR`, `DEP_NCCL_ROOT`, `DEP_NCCL_VERSION`,
//! `DEP_NCCL_VERSION_CODE` and `DEP_NCCL_CUDA_VERSION` in their build scripts.
//!
//! [nccl-find]: https://docs.rs/nccl-find

#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs
)]
#![allow(clippy::all)]

#[cfg(feature = "bindgen")]
include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
#[cfg(not(feature = "bindgen"))]
include!("bindings.rs");

/// Splits an NCCL version code into `(major, minor, patch)`, for both
/// formulas: `X*1000+Y*100+Z` up to 2.8, `X*10000+Y*100+Z` from 2.9.
pub fn version_from_code(code: i32) -> (u32, u32, u32) {
    let code = code.max(0) as u32;
    if code >= 10000 {
        (code / 10000, code / 100 % 100, code % 100)
    } else {
        (code / 1000, code / 100 % 10, code % 100)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_codes() {
        assert_eq!(super::version_from_code(22105), (2, 21, 5));
        assert_eq!(super::version_from_code(2804), (2, 8, 4));
    }
}
