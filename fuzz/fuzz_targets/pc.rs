#![no_main]
//! The nccl.pc parser (variables, ${} expansion, Cflags/Libs).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nccl_find::fuzz::parse_pc(&String::from_utf8_lossy(data), "/fuzz/lib/pkgconfig");
});
