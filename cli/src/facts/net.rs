//! The machine's network interfaces as NCCL finds them: the entries of
//! `getifaddrs` with an IPv4 or IPv6 address, in its order (every IPv4
//! address before every IPv6 one), each interface once with its addresses
//! in that order; whether it is running (`IFF_RUNNING`); and whether the
//! routing tables (`/proc/net/route`, `/proc/net/ipv6_route`) lead through
//! it. An interface with no address is never listed: NCCL never sees it.

use std::ffi::CStr;

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
    /// Up and attached (`IFF_RUNNING`).
    pub running: bool,
    /// Its addresses, in `getifaddrs`' order.
    pub addrs: Vec<IfAddr>,
}

/// The interfaces with an address, from `getifaddrs`, in its order.
pub fn interfaces() -> Vec<Iface> {
    let (r4, r6) = routed_interfaces();
    let mut out: Vec<Iface> = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a linked list we walk read-only and free once.
    unsafe {
        if libc::getifaddrs(&mut ifap) != 0 {
            return out;
        }
        let mut cur = ifap;
        while !cur.is_null() {
            let ifa = &*cur;
            cur = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
                continue;
            }
            let name = CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned();
            let family = i32::from((*ifa.ifa_addr).sa_family);
            let addr = match family {
                libc::AF_INET => {
                    let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    let ip = std::net::Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr));
                    let prefix = if ifa.ifa_netmask.is_null() {
                        32
                    } else {
                        let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in);
                        u32::from_be(m.sin_addr.s_addr).count_ones() as u8
                    };
                    IfAddr {
                        ip: ip.to_string(),
                        prefix,
                        v6: false,
                        link_local: ip.is_link_local(),
                        routed: r4.contains(&name),
                    }
                }
                libc::AF_INET6 => {
                    let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    let ip = std::net::Ipv6Addr::from(sa.sin6_addr.s6_addr);
                    let prefix = if ifa.ifa_netmask.is_null() {
                        128
                    } else {
                        let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in6);
                        m.sin6_addr
                            .s6_addr
                            .iter()
                            .map(|b| b.count_ones())
                            .sum::<u32>() as u8
                    };
                    IfAddr {
                        ip: ip.to_string(),
                        prefix,
                        v6: true,
                        link_local: (ip.segments()[0] & 0xffc0) == 0xfe80,
                        routed: r6.contains(&name),
                    }
                }
                _ => continue,
            };
            let running = ifa.ifa_flags & libc::IFF_RUNNING as libc::c_uint != 0;
            match out.iter_mut().find(|i| i.name == name) {
                Some(i) => i.addrs.push(addr),
                None => out.push(Iface {
                    name,
                    running,
                    addrs: vec![addr],
                }),
            }
        }
        libc::freeifaddrs(ifap);
    }
    out
}

/// The interfaces that have a route: IPv4 ones (`/proc/net/route`), IPv6
/// ones (`/proc/net/ipv6_route`).
fn routed_interfaces() -> (Vec<String>, Vec<String>) {
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

/// The interface IPv4's default route leaves through (`/proc/net/route`'s
/// row for destination 0), where there is one.
pub fn default_route() -> Option<String> {
    route_table("/proc/net/route", 1)
        .into_iter()
        .find(|c| c.get(1).is_some_and(|d| d == "00000000"))
        .and_then(|c| c.into_iter().next())
}

/// A routing table's rows, as columns, after `skip` header lines; empty
/// when it cannot be read (at most 4 MiB of it).
fn route_table(path: &str, skip: usize) -> Vec<Vec<String>> {
    let bytes =
        nccl_find::internal::read_bounded(std::path::Path::new(path), 4 << 20).unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .lines()
        .skip(skip)
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}
