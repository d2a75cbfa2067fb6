//! Doctor's Network area: the interfaces, the one NCCL would use by the
//! rules of the NCCL judged (`rules::ifaces`), and the ones that can
//! mislead it.

use nccl_find::explain::Change;
use nccl_find::Version;

use super::{Area, Findings, Level};
use crate::facts::net::Iface;
use crate::rules::ifaces::{self, Choice};
use crate::rules::settings::InForce;

fn describe(i: &Iface) -> String {
    let addrs: Vec<String> = i
        .addrs
        .iter()
        .map(|a| format!("{}/{}", a.ip, a.prefix))
        .collect();
    let down = if i.running { "" } else { " (not running)" };
    format!("{}{down} {}", i.name, addrs.join(" "))
}

/// The Network area: the interfaces, the one NCCL `release` would use,
/// and the ones that can mislead it.
pub(super) fn check(
    f: &mut Findings,
    list: &[Iface],
    settings: &InForce,
    release: Option<&Version>,
) {
    let shown: Vec<String> = list.iter().map(describe).collect();
    f.add(
        Area::Network,
        Level::Ok,
        format!("interfaces: {}", shown.join("; ")),
        None,
    );
    let choice = ifaces::choose(list, settings, release);
    match choice.none_found(settings) {
        Some((cause, fix)) => f.add(
            Area::Network,
            Level::Problem,
            format!("NCCL would find no interface: {cause}"),
            Some(format!(
                "NCCL fails with `no socket interface found`: {fix}"
            )),
        ),
        None => {
            if let Some(first) = choice.taken.first() {
                check_chosen(f, first, &choice, release);
            }
        }
    }
    let chosen = choice.taken.first().map(|p| p.name.as_str());
    check_bridges(f, list, chosen, &choice, release);
}

/// The interface NCCL would use: whether other nodes can reach it.
fn check_chosen(f: &mut Findings, first: &Iface, choice: &Choice, release: Option<&Version>) {
    f.add(
        Area::Network,
        Level::Ok,
        format!("NCCL would use {} ({})", first.name, choice.why),
        None,
    );
    let suggestion = choice.suggestion();
    if first.name.starts_with("virbr") {
        let since = Change::LibvirtBridgesLast.since();
        let how = if Change::LibvirtBridgesLast.in_release(release) {
            "takes virbr* only when nothing else is running".to_string()
        } else {
            format!("does not skip virbr* (NCCL {since} and later do)")
        };
        f.add(
            Area::Network,
            Level::Problem,
            format!(
                "{} is libvirt's bridge, which other nodes cannot reach; {} {how}",
                first.name,
                ifaces::whose(release)
            ),
            Some(suggestion.clone()),
        );
    } else if first.name.starts_with("docker") || first.name == "lo" {
        f.add(
            Area::Network,
            Level::Note,
            format!(
                "NCCL would use {}: fine on one node, unreachable from others",
                first.name
            ),
            Some(format!("for several nodes, {suggestion}")),
        );
    }
    for a in first
        .addrs
        .iter()
        // Loopback needs no route, and is named above as unreachable.
        .filter(|a| !a.routed && !a.link_local && a.ip != "::1" && !a.ip.starts_with("127."))
    {
        f.add(
            Area::Network,
            Level::Problem,
            format!("{} has {} with no route through it: peers that try it get `No route to host` and NCCL `unhandled system error`", first.name, a.ip),
            Some(format!("{suggestion}; or NCCL_SOCKET_FAMILY=AF_INET{}", if a.v6 { "" } else { "6" })),
        );
    }
}

/// Docker and libvirt bridges that NCCL did not choose but could, and
/// interfaces that are not running.
fn check_bridges(
    f: &mut Findings,
    list: &[Iface],
    chosen: Option<&str>,
    choice: &Choice,
    release: Option<&Version>,
) {
    let virbr_last = Change::LibvirtBridgesLast.in_release(release);
    let running_only = Change::RunningInterfacesOnly.in_release(release);
    let who = ifaces::whose(release);
    for i in list.iter().filter(|i| Some(i.name.as_str()) != chosen) {
        let skipped = i.name.starts_with("docker") || (virbr_last && i.name.starts_with("virbr"));
        if skipped {
            f.add(
                Area::Network,
                Level::Note,
                format!(
                    "{} is there: {who} skips it, unless NCCL_SOCKET_IFNAME lets it in",
                    i.name
                ),
                None,
            );
        } else if i.name.starts_with("virbr") {
            f.add(
                Area::Network,
                Level::Note,
                format!(
                    "{} (libvirt's bridge) is there and {who} does not skip it (NCCL {} and later do)",
                    i.name,
                    Change::LibvirtBridgesLast.since()
                ),
                Some(choice.suggestion()),
            );
        }
        if !i.running && i.name != "lo" {
            let what = if running_only {
                format!("{who} skips it")
            } else {
                format!(
                    "{who} can still take it (NCCL {} and later skip interfaces that are not running)",
                    Change::RunningInterfacesOnly.since()
                )
            };
            f.add(
                Area::Network,
                Level::Note,
                format!("{} is not running (down, or no link): {what}", i.name),
                None,
            );
        }
    }
}
