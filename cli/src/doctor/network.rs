//! Doctor's Network area: the interfaces, the one NCCL would use by the
//! rule of the NCCL version found (NCCL's `ncclFindInterfaces`, in
//! `src/misc/socket.cc`), and the ones that can mislead it.

use super::{Area, Findings, Level};
use nccl_smoke::net::{nccl_pick, rule_for, usable, whose, Iface, RULES};

fn describe(i: &Iface) -> String {
    let addrs: Vec<String> = i
        .addrs
        .iter()
        .map(|a| format!("{}/{}", a.ip, a.prefix))
        .collect();
    let down = if i.running { "" } else { " (not running)" };
    format!("{}{down} {}", i.name, addrs.join(" "))
}

/// The Network area: the interfaces, the one NCCL `version` would use, and
/// the ones that can mislead it.
pub(super) fn check(
    f: &mut Findings,
    ifaces: &[Iface],
    env: &[(String, String)],
    version: Option<(u32, u32, u32)>,
) {
    let list: Vec<String> = ifaces.iter().map(describe).collect();
    f.add(
        Area::Network,
        Level::Ok,
        format!("interfaces: {}", list.join("; ")),
        None,
    );
    let (picked, why) = nccl_pick(ifaces, env, version);
    let suggestion = ifname_suggestion(ifaces);
    match picked.first() {
        None => f.add(
            Area::Network,
            Level::Problem,
            format!("NCCL would find no interface ({why})"),
            Some(format!(
                "NCCL fails with `no socket interface found`: set NCCL_SOCKET_IFNAME to {}",
                running_choices(ifaces)
            )),
        ),
        Some(first) => check_chosen(f, first, &why, &suggestion, version),
    }
    let chosen = picked.first().map(|p| p.name.as_str());
    check_bridges(f, ifaces, chosen, &suggestion, version);
}

/// The running interfaces to choose from, those that can reach other nodes
/// first: never loopback first, nor a Docker or libvirt bridge.
fn running_choices(ifaces: &[Iface]) -> String {
    let local =
        |i: &&Iface| i.name == "lo" || i.name.starts_with("docker") || i.name.starts_with("virbr");
    let running: Vec<&Iface> = ifaces.iter().filter(|i| i.running).collect();
    let names = |v: Vec<&&Iface>| {
        v.iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (good, near): (Vec<&&Iface>, Vec<&&Iface>) = running.iter().partition(|i| !local(i));
    match (good.is_empty(), near.is_empty()) {
        (true, true) => "an interface that is up (none is running)".to_string(),
        (true, false) => format!(
            "one of {} (one node only: none reaches another)",
            names(near)
        ),
        (false, true) => format!("one of {}", names(good)),
        (false, false) => format!(
            "one of {} ({} {} no other node)",
            names(good),
            names(near.clone()),
            if near.len() == 1 { "reaches" } else { "reach" }
        ),
    }
}

/// The `NCCL_SOCKET_IFNAME` to suggest: the first real NIC that is
/// running, else a rule that leaves out bridges and loopback.
fn ifname_suggestion(ifaces: &[Iface]) -> String {
    let real = ifaces.iter().find(|i| {
        usable(i, &RULES[0])
            && !i.name.starts_with("docker")
            && !i.name.starts_with("virbr")
            && i.name != "lo"
    });
    match real {
        Some(i) => format!(
            "NCCL_SOCKET_IFNAME=={} (the real NIC), or NCCL_SOCKET_IFNAME=^docker,virbr,lo",
            i.name
        ),
        None => "NCCL_SOCKET_IFNAME=^docker,virbr,lo".to_string(),
    }
}

/// The interface NCCL would use: whether other nodes can reach it.
fn check_chosen(
    f: &mut Findings,
    first: &Iface,
    why: &str,
    suggestion: &str,
    version: Option<(u32, u32, u32)>,
) {
    f.add(
        Area::Network,
        Level::Ok,
        format!("NCCL would use {} ({why})", first.name),
        None,
    );
    if first.name.starts_with("virbr") {
        let how = if rule_for(version).running_only {
            "takes virbr* only when nothing else is running"
        } else {
            "does not skip virbr* (NCCL 2.28.3 and later do)"
        };
        f.add(
            Area::Network,
            Level::Problem,
            format!(
                "{} is libvirt's bridge, which other nodes cannot reach; {} {how}",
                first.name,
                whose(version)
            ),
            Some(suggestion.to_string()),
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
        .filter(|a| !a.routed && !a.link_local && a.ip != "::1")
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
    ifaces: &[Iface],
    chosen: Option<&str>,
    suggestion: &str,
    version: Option<(u32, u32, u32)>,
) {
    let rule = rule_for(version);
    let who = whose(version);
    for i in ifaces.iter().filter(|i| Some(i.name.as_str()) != chosen) {
        let skipped =
            i.name.starts_with("docker") || (rule.running_only && i.name.starts_with("virbr"));
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
                    "{} (libvirt's bridge) is there and {who} does not skip it (NCCL 2.28.3 and later do)",
                    i.name
                ),
                Some(suggestion.to_string()),
            );
        }
        if !i.running && i.name != "lo" {
            let what = if rule.running_only {
                format!("{who} skips it")
            } else {
                format!("{who} can still take it (NCCL 2.28.3 and later skip interfaces that are not running)")
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
