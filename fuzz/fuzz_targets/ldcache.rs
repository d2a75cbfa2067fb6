#![no_main]
//! The loader-cache reader.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nccl_find::fuzz::parse_ld_cache(data);
});
