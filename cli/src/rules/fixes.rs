//! Bugs NCCL fixed, release by release: each fix a release's notes list
//! (its tag's commit message), in `fixes.txt`, which `scripts/nccl-messages`
//! writes. A release before it has the bug; `explain` names the later
//! release that fixed one on the path a log shows.

/// `fixes.txt`: `release<TAB>fix`, release by release.
const FIXES: &str = include_str!("fixes.txt");

/// `2.18.3` as numbers.
fn triple(v: &str) -> Option<(u32, u32, u32)> {
    let mut it = v
        .split(|c: char| !c.is_ascii_digit())
        .map(str::parse::<u32>);
    Some((it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?))
}

/// Whether `text` holds `word` as a word of its own (`shm` is not in
/// `establishment`).
fn holds_word(text: &str, word: &str) -> bool {
    let edge = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
    text.match_indices(word).any(|(at, w)| {
        let (before, after) = (&text[..at], &text[at + w.len()..]);
        edge(before.chars().next_back()) && edge(after.chars().next())
    })
}

/// The fixes of releases after `running` (`2.18.1`, `2.18.1+cuda12.1`)
/// whose words hold one of `topics` (in any case), the earliest first, at
/// most `max`: `(release, fix)`.
pub fn after(running: &str, topics: &[&str], max: usize) -> Vec<(&'static str, &'static str)> {
    let Some(run) = triple(running) else {
        return Vec::new();
    };
    let topics: Vec<String> = topics.iter().map(|t| t.to_lowercase()).collect();
    FIXES
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('\t'))
        .filter(|(v, _)| triple(v).is_some_and(|v| v > run))
        .filter(|(_, fix)| {
            let fix = fix.to_lowercase();
            topics.iter().any(|t| holds_word(&fix, t))
        })
        .take(max)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every release tag's notes are read: the releases with fixes run
    /// from the oldest to the newest tag, in order.
    #[test]
    fn the_notes_of_every_release_are_here_in_order() {
        let releases: Vec<(u32, u32, u32)> = FIXES
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| triple(l.split('\t').next()?))
            .collect();
        assert!(releases.windows(2).all(|w| w[0] <= w[1]));
        assert!(releases.len() > 100, "{}", releases.len());
        assert_eq!(releases.first(), Some(&(2, 3, 7)));
        assert!(releases.last() >= Some(&(2, 29, 0)));
    }

    #[test]
    fn a_later_release_that_fixed_a_bug_on_a_path_is_found() {
        let shm = after("2.18.1+cuda12.1", &["shared memory"], 1);
        assert_eq!(
            shm,
            [("2.18.3", "Fix crash when shared memory creation fails.")]
        );
        assert!(after("2.30.7", &["hang"], 3).is_empty());
        assert!(after("not a version", &["hang"], 3).is_empty());
        assert!(holds_word("fix shm usage", "shm") && !holds_word("establishment", "shm"));
    }
}
