#![no_main]
//! The Spack `spec.json` reader: any bytes give a spec or nothing, never a
//! panic, in time proportional to their size.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nccl_find::fuzz::spack_spec_json(data);
});
