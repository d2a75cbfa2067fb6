#![no_main]
//! The nccl.h parser: any text gives a verdict, never a panic.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nccl_find::fuzz::parse_header(&String::from_utf8_lossy(data));
});
