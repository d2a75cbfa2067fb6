#![no_main]
//! The dpkg status parser.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nccl_find::fuzz::parse_dpkg_status(&String::from_utf8_lossy(data));
});
