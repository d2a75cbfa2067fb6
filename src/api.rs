//! NCCL's API by version, read from the releases themselves
//! (`scripts/nccl-catalog` writes `api/catalog.rs`): the `cfg` names a build
//! script emits for each level, and the first release that has each
//! function (its library exports it, or its `nccl.h` declares it).

mod catalog;

use catalog::INTRODUCED;
pub use catalog::LEVELS;

/// The NCCL releases this version of nccl-find read its catalog from,
/// oldest first (`"2.21.5"`, …). A release newer than the last is one it
/// knows nothing of: a function only that release has is not in
/// [`introduced_in`].
pub fn known_releases() -> &'static [&'static str] {
    &catalog::RELEASES
}

/// The first NCCL release that has a function or other name of NCCL's API
/// (its library exports it, or its `nccl.h` declares it), e.g.
/// `ncclCommSplit` → `"2.18.1"`; `None` for a name none of the
/// [`known_releases`] has.
///
/// ```
/// assert_eq!(nccl_find::explain::introduced_in("ncclCommSplit"), Some("2.18.1"));
/// ```
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

    /// The crate documentation lists every API level cfg, in order.
    #[test]
    fn the_crate_docs_list_every_api_level() {
        let lib =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
        let docs: String = lib
            .lines()
            .filter_map(|l| l.strip_prefix("//! "))
            .collect::<Vec<_>>()
            .join(" ");
        let list: Vec<String> = LEVELS
            .iter()
            .map(|(name, ..)| format!("`{name}`"))
            .collect();
        assert!(
            docs.contains(&format!("The levels: {}.", list.join(", "))),
            "{docs}"
        );
    }

    /// The README's list of cfgs is the table's.
    #[test]
    fn the_readme_lists_every_level() {
        let readme = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"),
        )
        .unwrap();
        let line = readme
            .lines()
            .find(|l| l.starts_with("| `rustc-check-cfg=cfg(nccl_2_X)`"))
            .expect("the README's row of cfgs");
        let mut want = Vec::new();
        for (i, (name, ..)) in LEVELS.iter().enumerate() {
            want.push(if i == 0 {
                format!("`{name}`")
            } else {
                format!("`{}`", name.trim_start_matches("nccl_"))
            });
        }
        assert!(
            line.contains(&format!("one per API level reached: {} |", want.join(", "))),
            "the README's row should list: {}\n{line}",
            want.join(", ")
        );
    }
}
