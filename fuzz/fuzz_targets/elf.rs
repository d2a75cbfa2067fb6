#![no_main]
//! The ELF reader (soname, NEEDED, RUNPATH, version text, dynamic symbols)
//! and the version-text parser: garbage gives an error, never a panic.
use libfuzzer_sys::fuzz_target;
use nccl_find::fuzz as elf_bytes;
use nccl_find::fuzz as elf;

fuzz_target!(|data: &[u8]| {
    if let Ok(info) = elf_bytes::read_elf_bytes(data) {
        if let Some(t) = info.version_text {
            let _ = elf::parse_version_text(&t);
        }
    }
    let _ = elf_bytes::dynamic_symbols_bytes(data);
    let _ = elf::parse_version_text(&String::from_utf8_lossy(data));
});
