//! The machine's network interfaces and routes, as NCCL would choose among
//! them: read from `/sys/class/net` and `/proc/net`, for the smoke test's
//! hints and for `nccl-find doctor`'s facts.

use std::collections::HashSet;

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
}
