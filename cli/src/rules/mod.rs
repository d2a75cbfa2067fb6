//! What NCCL will do here: typed answers, by the release that runs, over
//! the facts. Which settings are in force and from where (`settings`),
//! what each does (`knobs`), NCCL's list grammar (`list`), which
//! interfaces it lists and takes and why (`ifaces`), which adapter ports
//! `NCCL_IB_HCA` leaves it (`hca`), why it leaves the RDMA fabric
//! (`fabric`), which plugins it loads (`plugins`), what its RAS service
//! answers (`ras`), what its results mean (`messages`), and what must be
//! the same on every rank (`agree`). Every rule
//! that depends on the release asks the one table of releases,
//! `nccl_find::explain::Change`; the commands ask here, and never judge
//! NCCL's behaviour themselves.

pub(crate) mod agree;
pub(crate) mod fabric;
pub(crate) mod failures;
pub(crate) mod fixes;
pub(crate) mod hca;
pub(crate) mod ifaces;
pub(crate) mod knobs;
pub(crate) mod list;
pub(crate) mod messages;
pub(crate) mod plugins;
pub(crate) mod ras;
pub(crate) mod settings;

/// The releases the test command caches (`NCCL_FIND_WHEELS`): each
/// release's NCCL directory (`include/`, `lib/`) and its version. Empty,
/// with a line saying why, where the cache is not given (a failure where
/// `NCCL_FIND_REQUIRE_WHEELS=1` asks for it).
#[cfg(test)]
pub(crate) fn cached_releases() -> Vec<(std::path::PathBuf, nccl_find::Version)> {
    let Some(dir) = std::env::var_os("NCCL_FIND_WHEELS") else {
        assert!(
            std::env::var_os("NCCL_FIND_REQUIRE_WHEELS").is_none(),
            "NCCL_FIND_WHEELS is unset; run scripts/test"
        );
        eprintln!("skipped: NCCL_FIND_WHEELS is unset (scripts/test sets it)");
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((_, v)) = name
            .strip_prefix("nvidia_nccl_cu")
            .and_then(|r| r.split_once('-'))
        else {
            continue;
        };
        let n: Vec<u32> = v.split('.').map(|x| x.parse().unwrap_or(0)).collect();
        let version = nccl_find::Version::new(n[0], n[1], n[2], "");
        out.push((e.path().join("nvidia/nccl"), version));
    }
    out
}
