//! `--here`: what this host, a node of the job, adds to the logs: which
//! of its interfaces is on the network of an address the log names, and
//! where its default route leaves; the network plugins its loader finds;
//! whether its GPUDirect RDMA module is loaded. For the fix.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::facts::net::{self, Iface};
use crate::facts::rdma::RdmaHw;
use crate::rules::ifaces::reaches_no_other_node;

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

/// The words `--here` adds to a fix (the field `route`): this host's
/// interface on the subnet of the peer the log names, unless it is the
/// one that failed (`iface`); else the one its default route leaves
/// through; else the one other interface that could reach another host,
/// or the list of them.
pub fn route(
    fields: &BTreeMap<&'static str, String>,
    ifaces: &[Iface],
    default: Option<&str>,
) -> Option<String> {
    let failed = fields
        .get("iface")
        .and_then(|i| i.split_whitespace().next())
        .unwrap_or("");
    let usable = |i: &&Iface| {
        i.running
            && i.name != failed
            && reaches_no_other_node(&i.name).is_none()
            && i.addrs.iter().any(|a| !a.link_local)
    };
    let peer = fields.get("peer").and_then(|p| p.parse::<IpAddr>().ok());
    if let Some(peer) = peer {
        for i in ifaces.iter().filter(usable) {
            if let Some(a) = i.addrs.iter().find(|a| on_subnet(peer, &a.ip, a.prefix)) {
                return Some(format!(
                    ": on this node NCCL_SOCKET_IFNAME={} ({} holds {}/{}, the subnet of {peer})",
                    i.name, i.name, a.ip, a.prefix
                ));
            }
        }
    }
    if let Some(d) = default.filter(|d| *d != failed) {
        return Some(format!(
            ": on this node NCCL_SOCKET_IFNAME={d} (its default route leaves through {d})"
        ));
    }
    let others: Vec<&Iface> = ifaces.iter().filter(usable).collect();
    let addr = |i: &Iface| {
        i.addrs
            .iter()
            .find(|a| !a.link_local)
            .map_or(String::new(), |a| format!("{}/{}", a.ip, a.prefix))
    };
    match others.as_slice() {
        [] => None,
        [one] => Some(format!(
            ": on this node NCCL_SOCKET_IFNAME={} (its other interface, {})",
            one.name,
            addr(one)
        )),
        many => {
            let list: Vec<String> = many
                .iter()
                .map(|i| format!("{} ({})", i.name, addr(i)))
                .collect();
            Some(format!(": this node's others are {}", list.join(", ")))
        }
    }
}

/// This host's RDMA facts: its plugins on the loader's path, its
/// GPUDirect RDMA module.
pub fn rdma() -> RdmaHw {
    RdmaHw::gather(std::path::Path::new("/"), &[])
}

/// The network plugins this node's loader finds (field `plugins_here`).
pub fn plugins(hw: &RdmaHw) -> String {
    let net: Vec<&str> = hw
        .plugins
        .iter()
        .filter(|p| {
            p.path
                .rsplit('/')
                .next()
                .is_some_and(|f| f.starts_with("libnccl-net"))
        })
        .map(|p| p.path.as_str())
        .collect();
    match net.as_slice() {
        [] => {
            " (this node has no libnccl-net*.so on the loader's path: NCCL's own transports)".into()
        }
        all => format!(" (this node's loader finds {})", all.join(", ")),
    }
}

/// Whether this node's GPUDirect RDMA module is loaded (field
/// `peermem_here`).
pub fn peermem(hw: &RdmaHw) -> String {
    match &hw.peermem {
        Some(m) => format!(" (on this node {m} is loaded: look at the other nodes)"),
        None => " (on this node neither nvidia_peermem nor nv_peer_mem is loaded)".into(),
    }
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
    fn the_plugins_and_the_module_here_are_said() {
        let mut hw = RdmaHw::default();
        assert!(plugins(&hw).contains("no libnccl-net*.so"));
        hw.plugins.push(crate::facts::rdma::Plugin {
            path: "/opt/hpcx/lib/libnccl-net.so".into(),
            version: None,
            exports: Vec::new(),
        });
        assert_eq!(
            plugins(&hw),
            " (this node's loader finds /opt/hpcx/lib/libnccl-net.so)"
        );
        assert!(peermem(&hw).contains("neither"));
        hw.peermem = Some("nvidia_peermem".into());
        assert_eq!(
            peermem(&hw),
            " (on this node nvidia_peermem is loaded: look at the other nodes)"
        );
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
        assert_eq!(
            route(&f, &ifaces, Some("eth1")).unwrap(),
            ": on this node NCCL_SOCKET_IFNAME=eth1 (its default route leaves through eth1)"
        );
        assert_eq!(
            route(&f, &ifaces, None).unwrap(),
            ": on this node NCCL_SOCKET_IFNAME=eth1 (its other interface, 10.99.0.2/24)"
        );
        // The interface that failed is never the answer.
        f.insert("iface", "eth1 (10.99.0.2)".to_string());
        f.insert("peer", "10.99.0.1".to_string());
        assert_eq!(route(&f, &ifaces, Some("eth1")), None);
    }
}
