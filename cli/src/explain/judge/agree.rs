//! What the ranks must share, and where the logs show them differ: NCCL's
//! release, the network it uses and its plugin, `NCCL_SOCKET_IFNAME` and
//! the interface its bootstrap took, and one host name per node. A
//! difference is a cause: the ranks then cannot talk, or talk past each
//! other.

use std::collections::{BTreeMap, BTreeSet};

use super::{first_iface, Event};
use crate::rules::failures::Failure;
use crate::rules::messages::{Fact, Says};

/// A difference: its class, a line for each value, and the fields its
/// words use.
pub type Difference<'a> = (Failure, Vec<&'a Event>, BTreeMap<&'static str, String>);

/// Where a line came from, for the words: its host, or the host of the
/// line before it in its file (NCCL's version line has none).
fn place(e: &Event, events: &[Event]) -> String {
    if let Some(h) = &e.host {
        return h.clone();
    }
    let before = events
        .iter()
        .rfind(|o| o.input == e.input && o.line < e.line && o.host.is_some())
        .and_then(|o| o.host.clone());
    match (before, e.rank) {
        (_, Some(r)) => format!("rank {r}"),
        (Some(h), None) => h,
        (None, None) => format!("input {}", e.input + 1),
    }
}

/// Each value `value` gives, with the first line that gives it; a
/// difference where there are two or more.
fn differ<'a>(
    events: &'a [Event],
    value: &dyn Fn(&Event) -> Option<String>,
    same: &dyn Fn(&str, &str) -> bool,
) -> Option<Vec<(String, &'a Event)>> {
    let mut seen: Vec<(String, &Event)> = Vec::new();
    for e in events {
        if let Some(v) = value(e) {
            if !seen.iter().any(|(s, _)| same(s, &v)) {
                seen.push((v, e));
            }
        }
    }
    (seen.len() > 1).then_some(seen)
}

/// `a on node1, b on node2`.
fn listed(seen: &[(String, &Event)], events: &[Event]) -> String {
    let parts: Vec<String> = seen
        .iter()
        .take(4)
        .map(|(v, e)| format!("{v} on {}", place(e, events)))
        .collect();
    parts.join(", ")
}

fn fact(e: &Event) -> Option<Fact> {
    match e.hit.says {
        Says::Fact(f) => Some(f),
        _ => None,
    }
}

/// NCCL's release: its version line's, or a framework's error's.
fn version(e: &Event) -> Option<String> {
    match (fact(e), e.hit.says) {
        (Some(Fact::Version), _) | (_, Says::Symptom(Failure::NcclError)) => {
            let v = e.hit.field("version")?;
            v.starts_with(|c: char| c.is_ascii_digit())
                .then(|| v.split_whitespace().next().unwrap_or(v).to_string())
        }
        _ => None,
    }
}

/// The network plugin a process loaded, or none.
fn plugin(e: &Event) -> Option<String> {
    match fact(e) {
        Some(Fact::NetPlugin) => Some(format!(
            "the plugin {}",
            e.hit.field("plugin").unwrap_or("of the image")
        )),
        Some(Fact::NoNetPlugin) => Some("no plugin".to_string()),
        _ => None,
    }
}

/// The network NCCL uses (`IB`, `Socket`, a plugin's name).
fn network(e: &Event) -> Option<String> {
    (fact(e) == Some(Fact::Network))
        .then(|| e.hit.field("network").map(str::to_string))
        .flatten()
}

/// `NCCL_SOCKET_IFNAME`, as NCCL read it.
fn ifname(e: &Event) -> Option<String> {
    (fact(e) == Some(Fact::Ifname))
        .then(|| format!("NCCL_SOCKET_IFNAME={}", e.hit.field("ifname").unwrap_or("")))
}

/// The interface NCCL's bootstrap took.
fn bootstrap(e: &Event) -> Option<String> {
    (fact(e) == Some(Fact::Bootstrap))
        .then(|| e.hit.field("ifaces").and_then(first_iface))
        .flatten()
        .and_then(|i| i.split(' ').next().map(str::to_string))
}

/// What must be the same on every rank: the class a difference is, the
/// field its words fill, each line's value, and whether it is weak (a
/// cause only of a network failure: interfaces of other names on other
/// nodes may well reach each other). A row whose class a row above it
/// already found is not asked.
struct Shared {
    failure: Failure,
    key: &'static str,
    value: fn(&Event) -> Option<String>,
    /// Whether two values are one (`==` but for versions).
    same: fn(&str, &str) -> bool,
    weak: bool,
}

fn equal(a: &str, b: &str) -> bool {
    a == b
}

/// Two versions are one where their releases are, and their CUDA builds
/// where both say theirs (`2.28.9+cuda13.0` and torch's `2.28.9` are one).
fn same_version(a: &str, b: &str) -> bool {
    let (ra, ca) = a.split_once('+').unwrap_or((a, ""));
    let (rb, cb) = b.split_once('+').unwrap_or((b, ""));
    ra == rb && (ca.is_empty() || cb.is_empty() || ca == cb)
}

const SHARED: [Shared; 5] = [
    Shared {
        failure: Failure::VersionMismatch,
        key: "versions",
        value: version,
        same: same_version,
        weak: false,
    },
    // A plugin and none differ; so do two networks. A network and a
    // plugin's name are two words for one thing: compare like with like.
    Shared {
        failure: Failure::PluginMismatch,
        key: "plugins",
        value: plugin,
        same: equal,
        weak: false,
    },
    Shared {
        failure: Failure::PluginMismatch,
        key: "plugins",
        value: network,
        same: equal,
        weak: false,
    },
    Shared {
        failure: Failure::IfaceMismatch,
        key: "ifaces",
        value: ifname,
        same: equal,
        weak: false,
    },
    Shared {
        failure: Failure::IfaceMismatch,
        key: "ifaces",
        value: bootstrap,
        same: equal,
        weak: true,
    },
];

/// The differences the logs show, most basic first, each with whether it
/// is weak.
pub fn disagreements(events: &[Event]) -> Vec<(Difference<'_>, bool)> {
    let mut out: Vec<(Difference<'_>, bool)> = Vec::new();
    for row in &SHARED {
        if out.iter().any(|((f, _, _), _)| *f == row.failure) {
            continue;
        }
        if let Some(seen) = differ(events, &row.value, &row.same) {
            let mut fields = BTreeMap::new();
            fields.insert(row.key, listed(&seen, events));
            let lines = seen.into_iter().map(|(_, e)| e).collect();
            out.push(((row.failure, lines, fields), row.weak));
        }
    }
    out
}

/// One host name, two addresses: two nodes that share a name. A node
/// may well have two addresses (ranks that take other interfaces): this
/// is the cause only of what a shared name brings about, NCCL taking two
/// nodes' ranks for one (`judge` asks it then).
pub fn same_hostname(events: &[Event]) -> Option<Difference<'_>> {
    let mut addrs: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut lines: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| fact(e) == Some(Fact::Bootstrap)) {
        if let (Some(h), Some(i)) = (&e.host, e.hit.field("ifaces").and_then(first_iface)) {
            if addrs.entry(h).or_default().insert(i) {
                lines.entry(h).or_default().push(e);
            }
        }
    }
    let (h, set) = addrs.iter().find(|(_, s)| s.len() > 1)?;
    let mut fields = BTreeMap::new();
    fields.insert("host", h.to_string());
    let v: Vec<&str> = set.iter().map(String::as_str).collect();
    fields.insert("addrs", v.join(" and "));
    Some((Failure::SameHostname, lines[h].clone(), fields))
}
