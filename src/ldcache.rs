//! The glibc loader cache (`/etc/ld.so.cache`), read as a file (`ldconfig`
//! is not run). A base module: it imports nothing from the crate.

pub(crate) const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";

/// The entries of a glibc loader cache (`/etc/ld.so.cache`): pairs of
/// library name and path. Both the new format and the old format with the
/// new one appended are read; anything malformed ends the list early. This
/// never fails and never reads out of bounds.
pub fn parse_ld_cache(data: &[u8]) -> Vec<(String, String)> {
    let Some(base) = data.windows(NEW_MAGIC.len()).position(|w| w == NEW_MAGIC) else {
        return Vec::new();
    };
    let u32_at = |off: usize| -> Option<u32> {
        let b = data.get(off..off.checked_add(4)?)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let cstr_at = |off: usize| -> Option<String> {
        let rest = data.get(off..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&rest[..end]).into_owned())
    };
    let Some(nlibs) = u32_at(base + 20) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for i in 0..nlibs as usize {
        let entry = base + 48 + i * 24;
        let (Some(key), Some(value)) = (u32_at(entry + 4), u32_at(entry + 8)) else {
            break;
        };
        let (Some(k), Some(v)) = (cstr_at(base + key as usize), cstr_at(base + value as usize))
        else {
            break;
        };
        out.push((k, v));
    }
    out
}
