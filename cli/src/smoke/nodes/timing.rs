//! The ranks whose own times are clear outliers: a setup or a time per
//! call well above the median of all ranks, each named with its node.

use nccl_rendezvous::Gathered;
use serde_json::{json, Value};

/// The ranks whose `values` (rank, microseconds) are clear outliers: at
/// least 1.5 times the median of them all and `floor_us` above it, among
/// at least 3 ranks (fewer say nothing). The median, and each outlier.
pub(crate) fn outliers(values: &[(usize, u64)], floor_us: u64) -> (u64, Vec<(usize, u64)>) {
    if values.len() < 3 {
        return (0, Vec::new());
    }
    let mut sorted: Vec<u64> = values.iter().map(|v| v.1).collect();
    sorted.sort_unstable();
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2
    };
    let slow = values
        .iter()
        .copied()
        .filter(|(_, v)| *v as f64 >= 1.5 * median as f64 && *v >= median.saturating_add(floor_us))
        .collect();
    (median, slow)
}

/// The least a setup must exceed the median by to be named: one second.
const SETUP_FLOOR_US: u64 = 1_000_000;

/// Rank 0's lines on the ranks whose own times are clear outliers
/// ([`nccl_smoke::TIMES`]: setup, and the time per call at the largest
/// size), each with its node; and the same as JSON.
pub(crate) fn slow_ranks(s: &nccl_smoke::Summary, g: Option<&Gathered>) -> (Vec<String>, Value) {
    let mut all: Vec<(usize, &[u64])> = vec![(0, s.times_us.as_slice())];
    all.extend(s.peers.iter().map(|p| (p.rank, p.times_us.as_slice())));
    named(&all, g)
}

/// [`slow_ranks`] over each rank's times.
fn named(all: &[(usize, &[u64])], g: Option<&Gathered>) -> (Vec<String>, Value) {
    let host = |r: usize| {
        g.and_then(|g| g.cards.get(r))
            .map(|c| c.host.clone())
            .filter(|h| !h.is_empty())
    };
    let (mut lines, mut found) = (Vec::new(), Vec::new());
    for (i, what) in nccl_smoke::TIMES.iter().enumerate() {
        let values: Vec<(usize, u64)> = all
            .iter()
            .filter_map(|(r, t)| t.get(i).map(|v| (*r, *v)))
            .filter(|(_, v)| *v > 0)
            .collect();
        let floor = if i == 0 { SETUP_FLOOR_US } else { 0 };
        let (median, slow) = outliers(&values, floor);
        for (r, v) in slow {
            let at = host(r).map_or(String::new(), |h| format!(" ({h})"));
            lines.push(format!(
                "timing: rank {r}{at}: {what} {}, {:.1}x the median of {} ranks ({})",
                micros(v),
                v as f64 / median.max(1) as f64,
                values.len(),
                micros(median)
            ));
            found.push(
                json!({"rank": r, "host": host(r), "what": what, "us": v, "median_us": median}),
            );
        }
    }
    let doc = json!({
        "names": nccl_smoke::TIMES,
        "ranks": all.iter().map(|(r, t)| json!({"rank": r, "us": t})).collect::<Vec<_>>(),
        "outliers": found,
    });
    (lines, doc)
}

/// Microseconds in words: `4.20 s`, `907.0 ms`, `830 us`.
fn micros(us: u64) -> String {
    match us {
        1_000_000.. => format!("{:.2} s", us as f64 / 1e6),
        1_000.. => format!("{:.1} ms", us as f64 / 1e3),
        _ => format!("{us} us"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Times per call at 256 MiB (us) and setups (us), as eight ranks of a
    /// 2-node H100 job reported them, and the same with one slow node.
    const PER_CALL: [u64; 8] = [1712, 1709, 1715, 1711, 1710, 1713, 1708, 1714];
    const SETUP: [u64; 8] = [
        912_000, 884_000, 931_000, 902_000, 4_210_000, 890_000, 921_000, 873_000,
    ];

    fn ranked(v: &[u64]) -> Vec<(usize, u64)> {
        v.iter().copied().enumerate().collect()
    }

    /// Eight nodes of one rank each: the rank whose setup took far longer
    /// is named, with its node.
    #[test]
    fn a_slow_rank_is_named_with_its_node() {
        let cards = (0..8)
            .map(|i| crate::smoke::nodes::tests::made(&format!("node{i}"), "", &["eth0"]))
            .collect();
        let g = Gathered::new(cards, Vec::new());
        let times: Vec<[u64; 2]> = (0..8).map(|r| [SETUP[r], PER_CALL[r]]).collect();
        let all: Vec<(usize, &[u64])> =
            times.iter().enumerate().map(|(r, t)| (r, &t[..])).collect();
        let (lines, doc) = named(&all, Some(&g));
        assert_eq!(
            lines,
            ["timing: rank 4 (node4): setup 4.21 s, 4.6x the median of 8 ranks (907.0 ms)"]
        );
        assert_eq!(doc["outliers"][0]["host"], "node4");
    }

    #[test]
    fn only_a_clear_outlier_is_named() {
        // Ranks that wait for each other time the same: nothing to name.
        assert_eq!(outliers(&ranked(&PER_CALL), 0), (1711, vec![]));
        // One setup of 4.2 s among 0.9 s ones.
        assert_eq!(
            outliers(&ranked(&SETUP), SETUP_FLOOR_US),
            (907_000, vec![(4, 4_210_000)])
        );
        // 1.5x the median, but less than the floor above it: not named.
        let quick = [100_000, 100_000, 100_000, 400_000];
        assert_eq!(outliers(&ranked(&quick), SETUP_FLOOR_US).1, vec![]);
        assert_eq!(outliers(&ranked(&quick), 0).1, vec![(3, 400_000)]);
        // Two slow ranks of eight, and fewer than three ranks.
        let mut two = PER_CALL;
        two[2] = 3100;
        two[6] = 2900;
        assert_eq!(outliers(&ranked(&two), 0).1, vec![(2, 3100), (6, 2900)]);
        assert_eq!(outliers(&ranked(&[1, 100]), 0), (0, vec![]));
    }
}
