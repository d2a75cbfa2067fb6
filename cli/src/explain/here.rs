//! `--here`: what this host, a node of the job, adds to the logs: which
//! of its interfaces is on the network of an address the log names, and
//! where its default route leaves, for the fix.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::facts::net::{self, Iface};

/// Whether `addr` is on the subnet of `ip`/`prefix`.
fn on_subnet(addr: IpAddr, ip: &str, prefix: u8) -> bool {
    let Ok(ip) = ip.split('%').next().unwrap_or(ip).parse::<IpAddr>() else {
        return false;
    };
    match (addr, ip) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let shift = 32u32.saturating_sub(u32::from(prefix.min(32)));
            let mask = if shift == 32 { 0 } else { u32::MAX << shift };
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let shift = 128u32.saturating_sub(u32::from(prefix.min(128)));
            let mask = if shift == 128 { 0 } else { u128::MAX << shift };
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

/// The words `--here` adds to a fix (the field `route`): the interface of
/// this host on the subnet of the peer the log names, else the one its
/// default route leaves through.
pub fn route(
    fields: &BTreeMap<&'static str, String>,
    ifaces: &[Iface],
    default: Option<&str>,
) -> Option<String> {
    let peer = fields.get("peer").and_then(|p| p.parse::<IpAddr>().ok());
    if let Some(peer) = peer {
        for i in ifaces.iter().filter(|i| i.running) {
            if let Some(a) = i.addrs.iter().find(|a| on_subnet(peer, &a.ip, a.prefix)) {
                return Some(format!(
                    ": on this node NCCL_SOCKET_IFNAME={} ({} holds {}/{}, the subnet of {peer})",
                    i.name, i.name, a.ip, a.prefix
                ));
            }
        }
    }
    let d = default?;
    Some(format!(
        ": on this node NCCL_SOCKET_IFNAME={d} (its default route leaves through {d})"
    ))
}

/// [`route`] over this host's interfaces and routes.
pub fn route_here(fields: &BTreeMap<&'static str, String>) -> Option<String> {
    route(fields, &net::interfaces(), net::default_route().as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::net::IfAddr;

    fn iface(name: &str, ip: &str, prefix: u8) -> Iface {
        Iface {
            name: name.into(),
            running: true,
            addrs: vec![IfAddr {
                ip: ip.into(),
                prefix,
                v6: ip.contains(':'),
                link_local: false,
                routed: true,
            }],
        }
    }

    #[test]
    fn the_interface_on_the_peers_subnet_is_named() {
        let ifaces = [
            iface("docker0", "172.17.0.1", 16),
            iface("eth1", "10.99.0.2", 24),
        ];
        let mut f = BTreeMap::new();
        f.insert("peer", "10.99.0.1".to_string());
        assert_eq!(
            route(&f, &ifaces, Some("docker0")).unwrap(),
            ": on this node NCCL_SOCKET_IFNAME=eth1 (eth1 holds 10.99.0.2/24, the subnet of 10.99.0.1)"
        );
        f.insert("peer", "192.168.5.5".to_string());
        assert!(route(&f, &ifaces, Some("eth1"))
            .unwrap()
            .ends_with("NCCL_SOCKET_IFNAME=eth1 (its default route leaves through eth1)"));
        assert_eq!(route(&f, &ifaces, None), None);
    }
}
