//! Doctor's Network area: the interfaces, the one NCCL would use by the
//! rule of the NCCL version found (NCCL's `ncclFindInterfaces`, in
//! `src/misc/socket.cc`), and the ones that can mislead it.

use super::{Area, Findings, Level};
use crate::host::{Iface, Lookup};

/// NCCL's default choice of interface, by the release that brought it in.
struct Rule {
    /// The first release with this rule.
    since: (u32, u32, u32),
    /// Only interfaces that are up and attached (`IFF_RUNNING`) count.
    running_only: bool,
    /// The prefix lists tried in turn (after `NCCL_COMM_ID`'s subnet,
    /// between the first and the second), each with its words.
    order: &'static [(&'static str, &'static str)],
}

/// Newest first.
const RULES: [Rule; 2] = [
    Rule {
        since: (2, 28, 3),
        running_only: true,
        order: &[
            ("ib", "takes ib* interfaces first"),
            (
                "^docker,lo,virbr",
                "takes anything but docker*, lo and virbr* when there is no ib*",
            ),
            ("docker", "falls back to docker*"),
            ("lo", "falls back to lo"),
            ("virbr", "falls back to virbr* last"),
        ],
    },
    Rule {
        since: (0, 0, 0),
        running_only: false,
        order: &[
            ("ib", "takes ib* interfaces first"),
            (
                "^docker,lo",
                "takes anything but docker* and lo when there is no ib*",
            ),
            ("docker", "falls back to docker*"),
            ("lo", "falls back to lo"),
        ],
    },
];

/// The rule of NCCL `version`: the newest where it is not known.
fn rule_for(version: Option<(u32, u32, u32)>) -> &'static Rule {
    let v = version.unwrap_or((u32::MAX, 0, 0));
    RULES.iter().find(|r| v >= r.since).unwrap_or(&RULES[0])
}

/// The rule's name for messages: `NCCL 2.28.9's default rule`.
fn whose(version: Option<(u32, u32, u32)>) -> String {
    match version {
        Some((a, b, c)) => format!("NCCL {a}.{b}.{c}'s default rule"),
        None => "NCCL's default rule".to_string(),
    }
}

/// Interfaces NCCL can use: an IPv4 or IPv6 address that is not IPv6
/// loopback, and (from 2.28.3) up and attached.
fn usable(i: &Iface, rule: &Rule) -> bool {
    (i.running || !rule.running_only) && i.addrs.iter().any(|a| !(a.v6 && a.ip == "::1"))
}

/// Whether `ip` lies in the subnet of one of `i`'s addresses.
fn in_subnet(i: &Iface, ip: std::net::IpAddr) -> bool {
    i.addrs.iter().any(|a| {
        let Ok(mine) = a.ip.parse::<std::net::IpAddr>() else {
            return false;
        };
        let bits = |x: std::net::IpAddr| -> (u128, u32) {
            match x {
                std::net::IpAddr::V4(v) => (u128::from(u32::from(v)) << 96, 32),
                std::net::IpAddr::V6(v) => (u128::from(v), 128),
            }
        };
        let ((m, w), (o, ow)) = (bits(mine), bits(ip));
        let prefix = u32::from(a.prefix).min(w);
        let mask = if prefix == 0 {
            0
        } else {
            u128::MAX << (128 - prefix)
        };
        w == ow && (m & mask) == (o & mask)
    })
}

/// What NCCL would choose, and why, in words.
pub(crate) fn nccl_pick<'a>(
    ifaces: &'a [Iface],
    env: &[(String, String)],
    version: Option<(u32, u32, u32)>,
) -> (Vec<&'a Iface>, String) {
    let rule = rule_for(version);
    let var = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let find = |spec: &str| -> Vec<&'a Iface> {
        ifaces
            .iter()
            .filter(|i| usable(i, rule) && nccl_smoke::net::ifname_matches(&i.name, spec))
            .collect()
    };
    // NCCL reads a value of one character as unset.
    if let Some(spec) = var("NCCL_SOCKET_IFNAME").filter(|v| v.len() > 1) {
        return (find(spec), format!("NCCL_SOCKET_IFNAME={spec}"));
    }
    let who = whose(version);
    let (first, why) = rule.order[0];
    let got = find(first);
    if !got.is_empty() {
        return (got, format!("{who} {why}"));
    }
    // NCCL_COMM_ID: the interface on the subnet of its address.
    if let Some(id) = var("NCCL_COMM_ID").filter(|v| v.len() > 1) {
        let host = id.rsplit_once(':').map_or(id, |(h, _)| h);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse() {
            if let Some(i) = ifaces.iter().find(|i| in_subnet(i, ip)) {
                return (
                    vec![i],
                    format!("{who} takes the interface on NCCL_COMM_ID's subnet"),
                );
            }
        }
    }
    for (spec, why) in &rule.order[1..] {
        let got = find(spec);
        if !got.is_empty() {
            return (got, format!("{who} {why}"));
        }
    }
    let why = if rule.running_only {
        "no running interface has a usable address"
    } else {
        "no interface has a usable address"
    };
    (Vec::new(), why.into())
}

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

/// A reverse lookup slower than this stalls torch's store noticeably.
const SLOW_LOOKUP: f64 = 1.0;

/// The reverse name lookups of this host's addresses: torch's TCPStore
/// (torchrun's agent store) makes one for every client it accepts, one at
/// a time, so a slow one here makes every worker connecting from here wait.
pub(super) fn check_lookups(f: &mut Findings, lookups: &[Lookup]) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Addr;

    fn iface(name: &str, ip: &str) -> Iface {
        Iface {
            name: name.into(),
            running: true,
            addrs: vec![Addr {
                ip: ip.into(),
                prefix: 24,
                v6: false,
                link_local: false,
                routed: true,
            }],
        }
    }

    fn pick<'a>(ifaces: &'a [Iface], vars: &[(&str, &str)], v: (u32, u32, u32)) -> Vec<&'a str> {
        let env: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        nccl_pick(ifaces, &env, Some(v))
            .0
            .iter()
            .map(|i| i.name.as_str())
            .collect()
    }

    const OLD: (u32, u32, u32) = (2, 27, 7);
    const NEW: (u32, u32, u32) = (2, 28, 3);

    #[test]
    fn nccl_interface_rules_by_version() {
        let all = [
            iface("lo", "127.0.0.1"),
            iface("docker0", "172.17.0.1"),
            iface("eth0", "10.0.0.2"),
            iface("ib0", "10.1.0.2"),
        ];
        for v in [OLD, NEW] {
            assert_eq!(pick(&all, &[], v), ["ib0"]);
            assert_eq!(pick(&all[..3], &[], v), ["eth0"]);
            assert_eq!(pick(&all[..2], &[], v), ["docker0"]);
            assert_eq!(pick(&all[..1], &[], v), ["lo"]);
            assert_eq!(
                pick(&all, &[("NCCL_SOCKET_IFNAME", "^docker,lo,ib")], v),
                ["eth0"]
            );
            assert!(pick(&all, &[("NCCL_SOCKET_IFNAME", "=eth")], v).is_empty());
            assert_eq!(
                pick(&all, &[("NCCL_SOCKET_IFNAME", "eth,ib")], v),
                ["eth0", "ib0"]
            );
            // One character is no value to NCCL.
            assert_eq!(pick(&all, &[("NCCL_SOCKET_IFNAME", "e")], v), ["ib0"]);
            // NCCL_COMM_ID's subnet, where there is no ib*.
            assert_eq!(
                pick(&all[..3], &[("NCCL_COMM_ID", "172.17.0.9:12345")], v),
                ["docker0"]
            );
        }
        // virbr*: taken before 2.28.3, last from 2.28.3.
        let v = [iface("virbr0", "192.168.122.1"), iface("eth0", "10.0.0.2")];
        assert_eq!(pick(&v, &[], OLD), ["virbr0", "eth0"]);
        assert_eq!(pick(&v, &[], NEW), ["eth0"]);
        assert_eq!(pick(&v[..1], &[], NEW), ["virbr0"]);
        // Interfaces that are not running: skipped from 2.28.3.
        let mut down = [iface("eth0", "10.0.0.2"), iface("eth1", "10.0.1.2")];
        down[0].running = false;
        assert_eq!(pick(&down, &[], OLD), ["eth0", "eth1"]);
        assert_eq!(pick(&down, &[], NEW), ["eth1"]);
        // An unknown version is judged by the newest rule.
        let env = vec![];
        assert_eq!(nccl_pick(&v, &env, None).0[0].name, "eth0");
    }
}
