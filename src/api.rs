//! NCCL's API by version, read from the releases themselves
//! (`scripts/nccl-catalog` writes `api/catalog.rs`): the `cfg` names a build
//! script emits for each level, and the first release that has each
//! function (its library exports it, or its `nccl.h` declares it).

mod catalog;

use catalog::INTRODUCED;
pub use catalog::LEVELS;

/// The releases the catalog was read from, oldest first.
pub fn releases() -> &'static [&'static str] {
    &catalog::RELEASES
}

/// The first NCCL release that has a function, e.g. `ncclCommSplit` →
/// `2.18.1`.
pub fn introduced_in(symbol: &str) -> Option<&'static str> {
    match INTRODUCED.binary_search_by(|(s, _)| (*s).cmp(symbol)) {
        Ok(i) => Some(INTRODUCED[i].1),
        Err(_) => None,
    }
}

/// The cfg names reached by `major.minor.patch`.
pub fn cfgs_for(major: u32, minor: u32, patch: u32) -> impl Iterator<Item = &'static str> {
    LEVELS
        .iter()
        .filter(move |(_, x, y, z)| (major, minor, patch) >= (*x, *y, *z))
        .map(|(name, ..)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        let got: Vec<_> = cfgs_for(2, 18, 1).collect();
        assert_eq!(got.last(), Some(&"nccl_2_18"));
        assert!(got.contains(&"nccl_2_17_1"), "{got:?}");
        assert!(!cfgs_for(2, 28, 2).any(|c| c == "nccl_2_28_3"));
        assert!(cfgs_for(2, 28, 3).any(|c| c == "nccl_2_28_3"));
        assert_eq!(introduced_in("ncclCommSplit"), Some("2.18.1"));
        assert_eq!(introduced_in("ncclCommResume"), Some("2.29.7"));
        assert_eq!(introduced_in("nope"), None);
    }

    /// Sorted by name (the lookup is a binary search), each name once;
    /// levels oldest first, each name once.
    #[test]
    fn the_tables_are_in_order() {
        for w in INTRODUCED.windows(2) {
            assert!(w[0].0 < w[1].0, "{:?} {:?}", w[0], w[1]);
        }
        for w in LEVELS.windows(2) {
            assert!((w[0].1, w[0].2, w[0].3) < (w[1].1, w[1].2, w[1].3), "{w:?}");
        }
    }
}
