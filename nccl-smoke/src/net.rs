//! NCCL's interface rule, in one place: which network interface NCCL
//! takes by default, by the release that brought the rule in (NCCL's
//! `ncclFindInterfaces`, `src/misc/socket.cc`), how it reads
//! `NCCL_SOCKET_IFNAME`, and `NCCL_COMM_ID`'s subnet. Doctor, the smoke
//! test's hints and each node's card all ask here. Also the machine's
//! interface names and routes, from `/sys/class/net` and `/proc/net`.

use std::collections::HashSet;

/// One address of an interface.
#[derive(Debug, Clone, PartialEq)]
pub struct IfAddr {
    /// The address, as text.
    pub ip: String,
    /// Its prefix length.
    pub prefix: u8,
    /// IPv6.
    pub v6: bool,
    /// Link-local (`fe80::/10`, `169.254/16`).
    pub link_local: bool,
    /// Whether the routing table has a route through this interface for
    /// this address family.
    pub routed: bool,
}

/// A network interface.
#[derive(Debug, Clone, PartialEq)]
pub struct Iface {
    /// Its name (`eth0`).
    pub name: String,
    /// Up and attached (`IFF_RUNNING`): NCCL 2.28.3 and later skip the rest.
    pub running: bool,
    /// Its addresses.
    pub addrs: Vec<IfAddr>,
}

/// NCCL's default choice of interface, by the release that brought it in.
pub struct Rule {
    /// The first release with this rule.
    pub since: (u32, u32, u32),
    /// Only interfaces that are up and attached (`IFF_RUNNING`) count.
    pub running_only: bool,
    /// The prefix lists tried in turn (after `NCCL_COMM_ID`'s subnet,
    /// between the first and the second), each with its words.
    pub order: &'static [(&'static str, &'static str)],
}

/// Newest first.
pub const RULES: [Rule; 2] = [
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
pub fn rule_for(version: Option<(u32, u32, u32)>) -> &'static Rule {
    let v = version.unwrap_or((u32::MAX, 0, 0));
    RULES.iter().find(|r| v >= r.since).unwrap_or(&RULES[0])
}

/// The rule's name for messages: `NCCL 2.28.9's default rule`.
pub fn whose(version: Option<(u32, u32, u32)>) -> String {
    match version {
        Some((a, b, c)) => format!("NCCL {a}.{b}.{c}'s default rule"),
        None => "NCCL's default rule".to_string(),
    }
}

/// Interfaces NCCL can use: an IPv4 or IPv6 address that is not IPv6
/// loopback, and (from 2.28.3) up and attached.
pub fn usable(i: &Iface, rule: &Rule) -> bool {
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
pub fn nccl_pick<'a>(
    ifaces: &'a [Iface],
    env: &[(String, String)],
    version: Option<(u32, u32, u32)>,
) -> (Vec<&'a Iface>, String) {
    let rule = rule_for(version);
    let var = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let find = |spec: &str| -> Vec<&'a Iface> {
        ifaces
            .iter()
            .filter(|i| usable(i, rule) && ifname_matches(&i.name, spec))
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

/// Interface names, from `/sys/class/net`, sorted.
pub fn interface_names() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The interface of the IPv4 default route, from `/proc/net/route`.
pub fn default_route_interface() -> Option<String> {
    route_table("/proc/net/route", 1)
        .into_iter()
        .find_map(|c| (c.len() > 2 && c[1] == "00000000").then(|| c[0].clone()))
}

/// The interfaces that have a route: IPv4 ones (`/proc/net/route`), IPv6
/// ones (`/proc/net/ipv6_route`).
pub fn routed_interfaces() -> (HashSet<String>, HashSet<String>) {
    let v4 = route_table("/proc/net/route", 1)
        .into_iter()
        .filter_map(|c| c.into_iter().next())
        .collect();
    let v6 = route_table("/proc/net/ipv6_route", 0)
        .into_iter()
        .filter_map(|c| c.into_iter().last())
        .collect();
    (v4, v6)
}

/// A routing table's rows, as columns, after `skip` header lines; empty
/// when it cannot be read.
fn route_table(path: &str, skip: usize) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .skip(skip)
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

/// Whether NCCL may use the interface `name` under `NCCL_SOCKET_IFNAME=spec`:
/// a comma-separated list of name prefixes; `=` before the list: exact
/// names; `^`: names to avoid.
pub fn ifname_matches(name: &str, spec: &str) -> bool {
    let (exclude, rest) = match spec.strip_prefix('^') {
        Some(r) => (true, r),
        None => (false, spec),
    };
    let (exact, list) = match rest.strip_prefix('=') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let named = list.split(',').filter(|p| !p.is_empty()).any(|p| {
        if exact {
            name == p
        } else {
            name.starts_with(p)
        }
    });
    named != exclude
}

/// What is wrong with `NCCL_SOCKET_IFNAME` (`ifname`) given this machine's
/// interfaces, with the fix; `None` when it is unset or matches one. NCCL
/// reads it as a comma-separated list of name prefixes (`=` before the list:
/// exact names; `^`: names to avoid).
pub fn ifname_problem(ifname: Option<&str>, interfaces: &[String]) -> Option<String> {
    let v = ifname?.trim();
    if v.is_empty() {
        return None;
    }
    let usable: Vec<&String> = interfaces
        .iter()
        .filter(|i| i.as_str() != "lo" && ifname_matches(i, v))
        .collect();
    if !usable.is_empty() {
        return None;
    }
    let others: Vec<&str> = interfaces
        .iter()
        .map(String::as_str)
        .filter(|i| *i != "lo")
        .collect();
    Some(format!(
        "NCCL_SOCKET_IFNAME={v} leaves NCCL no network interface here (interfaces: {}), so it cannot bootstrap. \
         Name one that reaches the other nodes{}",
        if others.is_empty() { "lo only".to_string() } else { others.join(", ") },
        default_route_interface().map_or(String::new(), |i| format!(": the default route's is NCCL_SOCKET_IFNAME={i}"))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_ifname_that_names_no_interface_is_caught() {
        let here: Vec<String> = ["eth0", "ifb0", "ifb1", "lo"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(ifname_problem(None, &here), None);
        assert_eq!(ifname_problem(Some("eth0"), &here), None);
        assert_eq!(ifname_problem(Some("eth"), &here), None);
        assert_eq!(ifname_problem(Some("^docker,lo"), &here), None);
        assert_eq!(ifname_problem(Some("=ifb1"), &here), None);
        let p = ifname_problem(Some("nosuchif0"), &here).unwrap();
        assert!(
            p.starts_with(
                "NCCL_SOCKET_IFNAME=nosuchif0 leaves NCCL no network interface here (interfaces: eth0, ifb0, ifb1), \
                 so it cannot bootstrap. Name one that reaches the other nodes"
            ),
            "{p}"
        );
        assert!(ifname_problem(Some("=eth"), &here).is_some());
        assert!(ifname_problem(Some("^eth,ifb"), &here).is_some());
        assert!(ifname_problem(Some("lo"), &here).is_some());
    }

    fn iface(name: &str, ip: &str) -> Iface {
        Iface {
            name: name.into(),
            running: true,
            addrs: vec![IfAddr {
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
