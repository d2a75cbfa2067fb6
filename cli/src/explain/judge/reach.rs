//! Interfaces that reach no other host, in the lists NCCL printed: its
//! bootstrap's and its socket transport's. A container's virtual link, a
//! Docker network's bridge, or a link-local address never carries traffic
//! to another node; loopback, `docker0` and `virbr0` are NCCL's own last
//! choices, and a cause only where the logs show more than one host.

use std::collections::{BTreeMap, BTreeSet};

use super::agree::Difference;
use super::Event;
use crate::rules::failures::Failure;
use crate::rules::ifaces::reaches_no_other_node;
use crate::rules::messages::{Fact, Says};

/// Each `name:addr` of NCCL's list (` [0]eth0:10.0.0.1<0> [1]…`).
fn listed(list: &str) -> impl Iterator<Item = (&str, &str)> {
    list.split_whitespace().filter_map(|item| {
        let item = item.split_once(']').map_or(item, |(_, r)| r);
        let (name, addr) = item.split_once(':')?;
        Some((name, addr.rsplit_once('<').map_or(addr, |(a, _)| a)))
    })
}

/// Why an interface in NCCL's list reaches no other host, where it does
/// not; `fallback`: one NCCL takes only when it has nothing else.
fn why(name: &str, addr: &str) -> Option<(&'static str, bool)> {
    if addr.starts_with("fe80") || addr.starts_with("169.254.") {
        return Some(("a link-local address", false));
    }
    let what = reaches_no_other_node(name)?;
    let fallback = name == "lo" || name.starts_with("docker") || name.starts_with("virbr");
    Some((what, fallback))
}

/// The interfaces NCCL took that reach no other host, as a cause.
pub fn unreachable_ifaces(events: &[Event]) -> Option<Difference<'_>> {
    let hosts: BTreeSet<&str> = events.iter().filter_map(|e| e.host.as_deref()).collect();
    let mut lines = Vec::new();
    let mut named: Vec<(String, &str)> = Vec::new();
    for e in events {
        if !matches!(e.hit.says, Says::Fact(Fact::Bootstrap | Fact::SocketIfaces)) {
            continue;
        }
        let Some(list) = e.hit.field("ifaces") else {
            continue;
        };
        for (name, addr) in listed(list) {
            let Some((what, fallback)) = why(name, addr) else {
                continue;
            };
            let iface = format!("{name} ({addr})");
            if (!fallback || hosts.len() > 1) && !named.iter().any(|(i, _)| *i == iface) {
                named.push((iface, what));
                if !lines
                    .iter()
                    .any(|l: &&Event| l.line == e.line && l.input == e.input)
                    && lines.len() < 3
                {
                    lines.push(e);
                }
            }
        }
    }
    let (iface, what) = named.first()?.clone();
    let mut fields = BTreeMap::new();
    fields.insert("iface", iface);
    let err = match named.len() {
        1 => what.to_string(),
        n => format!("{what}; NCCL's lists hold {} more such", n - 1),
    };
    fields.insert("err", err);
    fields.insert("peer", "the other nodes".to_string());
    Some((Failure::Unreachable, lines, fields))
}
