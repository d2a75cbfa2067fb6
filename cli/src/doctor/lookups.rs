//! Doctor's reverse-lookup check (in the Network area): how long a reverse
//! name lookup of each of this host's addresses takes.

use super::{Area, Findings, Level};
use crate::facts::host::Lookup;

/// A reverse lookup slower than this stalls torch's store noticeably.
const SLOW_LOOKUP: f64 = 1.0;

/// The reverse name lookups of this host's addresses: torch's TCPStore
/// (torchrun's agent store) makes one for every client it accepts, one at
/// a time, so a slow one here makes every worker connecting from here wait.
pub(super) fn check(f: &mut Findings, lookups: &[Lookup]) {
    let mut slow: Vec<&Lookup> = lookups
        .iter()
        .filter(|l| l.seconds >= SLOW_LOOKUP)
        .collect();
    slow.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    if slow.is_empty() {
        if let Some(l) = lookups
            .iter()
            .max_by(|a, b| a.seconds.total_cmp(&b.seconds))
        {
            f.add(
                Area::Network,
                Level::Ok,
                format!(
                    "reverse name lookups of this host's {} address(es) answer at once (slowest: {}, {:.0} ms)",
                    lookups.len(),
                    l.ip,
                    l.seconds * 1000.0
                ),
                None,
            );
        }
        return;
    }
    let each: Vec<String> = slow
        .iter()
        .map(|l| match &l.error {
            Some(e) => format!("{} {:.1} s ({e})", l.ip, l.seconds),
            None => format!("{} {:.1} s", l.ip, l.seconds),
        })
        .collect();
    f.add(
        Area::Network,
        Level::Note,
        format!(
            "reverse name lookups of this host's addresses are slow: {}. torch's TCPStore (torchrun's agent \
             store) looks up every client's address this way as it accepts it, one at a time, so each worker \
             that connects from here waits as long, and a thousand wait in turn",
            each.join(", ")
        ),
        Some(format!(
            "give each node's address a name in /etc/hosts (as `{} <this host's name>`), or a resolver that answers (/etc/resolv.conf)",
            slow[0].ip
        )),
    );
}
