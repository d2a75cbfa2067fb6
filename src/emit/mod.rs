//! Step 5 of the probe: **emit**. Turns a report into what its readers
//! take: cargo directives for build scripts (`cargo`), words for people
//! (`text`), and the private loader directory (`loader_dir`).

pub mod cargo;
pub(crate) mod durable;
#[cfg(feature = "loader-dir")]
pub(crate) mod kept;
#[cfg(feature = "loader-dir")]
#[cfg_attr(docsrs, doc(cfg(feature = "loader-dir")))]
pub mod loader_dir;
#[cfg(feature = "loader-dir")]
pub(crate) mod loader_files;
pub mod text;

/// FNV-1a (64 bits) of `bytes`, as 16 hex digits: a short, stable name for
/// a loader directory (the kept copies, and `nccl-find --loader-env`'s).
pub fn fnv1a_hex(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}
