//! Which network interfaces NCCL lists and takes here, and why: NCCL's
//! `ncclFindInterfaces` and its walk of `getifaddrs` (`src/misc/socket.cc`,
//! `src/os/linux.cc`), and its bootstrap's choice (`src/bootstrap.cc`), by
//! the release that runs ([`Change`]). Doctor, the smoke test's check before
//! NCCL starts, each node's card and rank 0's verdict all ask here.
//!
//! NCCL's walk lists an interface with an IPv4 or IPv6 address that is not
//! IPv6 loopback (of the family `NCCL_SOCKET_FAMILY` forces, where set),
//! and, from 2.28.3, only one that is running (`IFF_RUNNING`): an interface
//! with no address is never listed, one with only an IPv6 link-local
//! address is. `NCCL_SOCKET_IFNAME` counts when longer than one character;
//! without it, NCCL takes `ib*`, then the interface on `NCCL_COMM_ID`'s
//! subnet, then anything but `docker*`, `lo` (and `virbr*` from 2.28.3),
//! then `docker*`, then `lo` (then `virbr*`). Its bootstrap listens on the
//! first interface taken, or with `NCCL_COMM_ID` set, on the interface on
//! that address's subnet, whatever `NCCL_SOCKET_IFNAME` says.

use std::net::IpAddr;

use nccl_find::explain::Change;
use nccl_find::Version;

use super::list::{List, IFACES};
use super::settings::InForce;
use crate::facts::net::{IfAddr, Iface};

/// What NCCL does with the interfaces here.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice<'a> {
    /// The interfaces NCCL's socket transport takes, in its order (at most
    /// 16).
    pub taken: Vec<&'a Iface>,
    /// The interface and address NCCL's bootstrap listens on; `None`
    /// where it finds none, and NCCL fails at its start.
    pub bootstrap: Option<(&'a Iface, &'a IfAddr)>,
    /// Why, in words: `NCCL_SOCKET_IFNAME=ib0`, or the default rule's step
    /// (`NCCL 2.28.9's default rule takes ib* interfaces first`).
    pub why: String,
    /// The interfaces NCCL lists here at all, whatever it takes.
    pub listed: Vec<&'a Iface>,
}

/// Who decides, in words: `NCCL 2.28.9's default rule`.
pub fn whose(release: Option<&Version>) -> String {
    match release {
        Some(v) => format!("NCCL {}.{}.{}'s default rule", v.major, v.minor, v.patch),
        None => "NCCL's default rule".to_string(),
    }
}

/// The default rule's steps after `ib*` (and `NCCL_COMM_ID`'s subnet),
/// each with its words.
fn default_steps(release: Option<&Version>) -> &'static [(&'static str, &'static str)] {
    if Change::LibvirtBridgesLast.in_release(release) {
        &[
            (
                "^docker,lo,virbr",
                "takes anything but docker*, lo and virbr* when there is no ib*",
            ),
            ("docker", "falls back to docker*"),
            ("lo", "falls back to lo"),
            ("virbr", "falls back to virbr* last"),
        ]
    } else {
        &[
            (
                "^docker,lo",
                "takes anything but docker* and lo when there is no ib*",
            ),
            ("docker", "falls back to docker*"),
            ("lo", "falls back to lo"),
        ]
    }
}

/// The first address of `i` that NCCL's walk lists, under NCCL `release`
/// and the family `v6` forces (`None`: any); `None` where it lists none.
pub fn listed_address<'a>(
    i: &'a Iface,
    release: Option<&Version>,
    v6: Option<bool>,
) -> Option<&'a IfAddr> {
    if !i.running && Change::RunningInterfacesOnly.in_release(release) {
        return None;
    }
    i.addrs
        .iter()
        .find(|a| !(a.v6 && a.ip == "::1") && v6.is_none_or(|f| f == a.v6))
}

/// `NCCL_SOCKET_FAMILY` as NCCL reads it: `AF_INET` or `AF_INET6`
/// force a family (`Some(v6)`); anything else forces none.
fn family(settings: &InForce) -> Option<bool> {
    match settings.value("NCCL_SOCKET_FAMILY") {
        Some("AF_INET") => Some(false),
        Some("AF_INET6") => Some(true),
        _ => None,
    }
}

/// The interfaces NCCL's walk lists with `spec` (a list in NCCL's
/// grammar), at most 16, each with the address it takes.
fn find<'a>(
    ifaces: &'a [Iface],
    spec: &str,
    release: Option<&Version>,
    v6: Option<bool>,
) -> Vec<(&'a Iface, &'a IfAddr)> {
    let list = List::parse(spec, IFACES);
    let mut out = Vec::new();
    for i in ifaces {
        if out.len() == IFACES {
            break;
        }
        if let Some(a) = listed_address(i, release, v6) {
            if list.takes(&i.name, None) {
                out.push((i, a));
            }
        }
    }
    out
}

/// NCCL_COMM_ID's address, where it is one NCCL reads without a name
/// lookup (`ip:port`, `[ipv6]:port`).
fn comm_id_address(value: &str) -> Option<IpAddr> {
    let host = value.rsplit_once(':').map_or(value, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.parse().ok()
}

/// The interface NCCL's bootstrap takes with `NCCL_COMM_ID` set to `ip`:
/// the first address of any interface (running or not) on the same subnet
/// (NCCL's `ncclFindInterfaceMatchSubnet`; an IPv6 link-local address has
/// a scope a bare address lacks, and matches none).
fn on_subnet(ifaces: &[Iface], ip: IpAddr) -> Option<(&Iface, &IfAddr)> {
    for i in ifaces {
        for a in &i.addrs {
            if a.v6 && a.link_local {
                continue;
            }
            let Ok(mine) = a.ip.parse::<IpAddr>() else {
                continue;
            };
            if same_subnet(mine, ip, a.prefix) {
                return Some((i, a));
            }
        }
    }
    None
}

/// Whether `a` and `b` share the first `prefix` bits (and a family).
fn same_subnet(a: IpAddr, b: IpAddr, prefix: u8) -> bool {
    let bits = |x: IpAddr| -> (u128, u32) {
        match x {
            IpAddr::V4(v) => (u128::from(u32::from(v)) << 96, 32),
            IpAddr::V6(v) => (u128::from(v), 128),
        }
    };
    let ((m, w), (o, ow)) = (bits(a), bits(b));
    let prefix = u32::from(prefix).min(w);
    let mask = match prefix {
        0 => 0,
        p => u128::MAX << (128 - p),
    };
    w == ow && (m & mask) == (o & mask)
}

/// What NCCL `release` does with `ifaces` under `settings`.
pub fn choose<'a>(
    ifaces: &'a [Iface],
    settings: &InForce,
    release: Option<&Version>,
) -> Choice<'a> {
    let v6 = family(settings);
    let listed: Vec<&Iface> = ifaces
        .iter()
        .filter(|i| listed_address(i, release, v6).is_some())
        .collect();
    let comm_id = settings
        .value("NCCL_COMM_ID")
        .filter(|v| v.len() > 1)
        .and_then(comm_id_address);
    let (taken, why) = taken(ifaces, settings, release, v6, comm_id);
    // The bootstrap: NCCL_COMM_ID's subnet where it is set to an address,
    // else the first interface taken (a host name NCCL resolves itself,
    // which is not looked up here).
    let bootstrap = match (settings.value("NCCL_COMM_ID"), comm_id) {
        (Some(_), Some(ip)) => on_subnet(ifaces, ip),
        _ => taken.first().copied(),
    };
    Choice {
        taken: taken.into_iter().map(|(i, _)| i).collect(),
        bootstrap,
        why,
        listed,
    }
}

/// The interfaces the socket transport takes, and why.
fn taken<'a>(
    ifaces: &'a [Iface],
    settings: &InForce,
    release: Option<&Version>,
    v6: Option<bool>,
    comm_id: Option<IpAddr>,
) -> (Vec<(&'a Iface, &'a IfAddr)>, String) {
    // NCCL reads a value of one character as unset.
    if let Some(s) = settings
        .get("NCCL_SOCKET_IFNAME")
        .filter(|s| s.value.len() > 1)
    {
        return (find(ifaces, &s.value, release, v6), s.shown());
    }
    let who = whose(release);
    let got = find(ifaces, "ib", release, v6);
    if !got.is_empty() {
        return (got, format!("{who} takes ib* interfaces first"));
    }
    if let Some(hit) = comm_id.and_then(|ip| on_subnet(ifaces, ip)) {
        return (
            vec![hit],
            format!("{who} takes the interface on NCCL_COMM_ID's subnet"),
        );
    }
    for (spec, words) in default_steps(release) {
        let got = find(ifaces, spec, release, v6);
        if !got.is_empty() {
            return (got, format!("{who} {words}"));
        }
    }
    let why = match Change::RunningInterfacesOnly.in_release(release) {
        true => "no running interface has a usable address",
        false => "no interface has a usable address",
    };
    (Vec::new(), why.into())
}

/// What an interface of this name is where it reaches no other node:
/// loopback, or Docker's or libvirt's bridge on this host alone.
pub fn reaches_no_other_node(name: &str) -> Option<&'static str> {
    if name == "lo" {
        Some("loopback")
    } else if name.starts_with("docker") {
        Some("Docker's bridge")
    } else if name.starts_with("virbr") {
        Some("libvirt's bridge")
    } else if name.starts_with("br-") {
        Some("the bridge of a Docker network")
    } else if name.starts_with("veth") {
        Some("a container's virtual link")
    } else {
        None
    }
}

impl Choice<'_> {
    /// Where NCCL finds no interface (its bootstrap, or its socket
    /// transport), and fails at its start: the cause, and the fix. `None`
    /// where it finds one.
    pub fn none_found(&self, settings: &InForce) -> Option<(String, String)> {
        let names: Vec<&str> = self.listed.iter().map(|i| i.name.as_str()).collect();
        let names = match names.is_empty() {
            true => "none".to_string(),
            false => names.join(", "),
        };
        let comm_id = settings
            .get("NCCL_COMM_ID")
            .filter(|c| comm_id_address(&c.value).is_some());
        match comm_id {
            Some(c) if self.bootstrap.is_none() => {
                return Some((
                    format!(
                        "no interface is on the subnet of {}, where NCCL's bootstrap must listen \
                         (interfaces NCCL lists: {names})",
                        c.shown()
                    ),
                    "set NCCL_COMM_ID to an address on a subnet of this host, or unset it".into(),
                ))
            }
            _ if !self.taken.is_empty() => return None,
            _ => {}
        }
        let cause = match self.why.starts_with("NCCL_SOCKET_IFNAME=") {
            true => format!(
                "{} matches none of the interfaces NCCL lists ({names})",
                self.why
            ),
            false => format!("NCCL lists no interface: {}", self.why),
        };
        Some((
            cause,
            format!("set NCCL_SOCKET_IFNAME to {}", self.choices()),
        ))
    }

    /// The interfaces to choose from (of those NCCL lists, the running
    /// ones), in words, those that can reach other nodes first: never
    /// loopback first, nor a Docker or libvirt bridge.
    pub fn choices(&self) -> String {
        let (far, near): (Vec<&str>, Vec<&str>) = self
            .listed
            .iter()
            .filter(|i| i.running)
            .map(|i| i.name.as_str())
            .partition(|n| reaches_no_other_node(n).is_none());
        match (far.is_empty(), near.is_empty()) {
            (true, true) => "an interface that is up and has an address (NCCL lists none)".into(),
            (true, false) => format!(
                "one of {} (one node only: none reaches another)",
                near.join(", ")
            ),
            (false, true) => format!("one of {}", far.join(", ")),
            (false, false) => format!(
                "one of {} ({} {} no other node)",
                far.join(", "),
                near.join(", "),
                if near.len() == 1 { "reaches" } else { "reach" }
            ),
        }
    }

    /// The `NCCL_SOCKET_IFNAME` to suggest: the first running interface
    /// NCCL lists that can reach other nodes, else a rule that leaves out
    /// bridges and loopback.
    pub fn suggestion(&self) -> String {
        match self
            .listed
            .iter()
            .find(|i| i.running && reaches_no_other_node(&i.name).is_none())
        {
            Some(i) => format!(
                "NCCL_SOCKET_IFNAME=={} (the real NIC), or NCCL_SOCKET_IFNAME=^docker,virbr,lo",
                i.name
            ),
            None => "NCCL_SOCKET_IFNAME=^docker,virbr,lo".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(ip: &str) -> IfAddr {
        let v6 = ip.contains(':');
        IfAddr {
            ip: ip.into(),
            prefix: if v6 { 64 } else { 24 },
            v6,
            link_local: ip.starts_with("fe80"),
            routed: true,
        }
    }

    fn iface(name: &str, ips: &[&str]) -> Iface {
        Iface {
            name: name.into(),
            running: true,
            addrs: ips.iter().map(|ip| addr(ip)).collect(),
        }
    }

    fn settings(vars: &[(&str, &str)]) -> InForce {
        InForce::from_vars(vars)
    }

    fn v(a: u32, b: u32, c: u32) -> Option<Version> {
        Some(Version::new(a, b, c, ""))
    }

    /// The names taken, and the bootstrap's interface and address.
    fn pick(
        ifaces: &[Iface],
        vars: &[(&str, &str)],
        release: Option<Version>,
    ) -> (Vec<String>, String) {
        let c = choose(ifaces, &settings(vars), release.as_ref());
        let names = c.taken.iter().map(|i| i.name.clone()).collect();
        let boot = c
            .bootstrap
            .map_or("none".to_string(), |(i, a)| format!("{}:{}", i.name, a.ip));
        (names, boot)
    }

    #[test]
    fn nccl_interface_rules_by_release() {
        let all = [
            iface("lo", &["127.0.0.1", "::1"]),
            iface("docker0", &["172.17.0.1"]),
            iface("eth0", &["10.0.0.2", "fe80::2"]),
            iface("ib0", &["10.1.0.2"]),
        ];
        for r in [v(2, 27, 7), v(2, 28, 3), None] {
            assert_eq!(
                pick(&all, &[], r.clone()),
                (vec!["ib0".into()], "ib0:10.1.0.2".into())
            );
            assert_eq!(pick(&all[..3], &[], r.clone()).1, "eth0:10.0.0.2");
            assert_eq!(pick(&all[..2], &[], r.clone()).1, "docker0:172.17.0.1");
            assert_eq!(pick(&all[..1], &[], r.clone()).1, "lo:127.0.0.1");
            let s = |v| pick(&all, &[("NCCL_SOCKET_IFNAME", v)], r.clone());
            assert_eq!(s("^docker,lo,ib").0, ["eth0"]);
            assert_eq!(s("=eth").1, "none");
            assert_eq!(s("eth,ib").0, ["eth0", "ib0"]);
            // One character is no value to NCCL.
            assert_eq!(s("e").0, ["ib0"]);
            // NCCL_COMM_ID's subnet, where there is no ib*; the bootstrap
            // listens there whatever NCCL_SOCKET_IFNAME says.
            let id = |ifname: &str| {
                pick(
                    &all[..3],
                    &[
                        ("NCCL_COMM_ID", "172.17.0.9:12345"),
                        ("NCCL_SOCKET_IFNAME", ifname),
                    ],
                    r.clone(),
                )
            };
            assert_eq!(
                id("e"),
                (vec!["docker0".into()], "docker0:172.17.0.1".into())
            );
            assert_eq!(
                id("eth0"),
                (vec!["eth0".into()], "docker0:172.17.0.1".into())
            );
        }
        // virbr*: taken before 2.28.3, last from 2.28.3.
        let v = [
            iface("virbr0", &["192.168.122.1"]),
            iface("eth0", &["10.0.0.2"]),
        ];
        assert_eq!(pick(&v, &[], self::v(2, 27, 7)).0, ["virbr0", "eth0"]);
        assert_eq!(pick(&v, &[], self::v(2, 28, 3)).0, ["eth0"]);
        assert_eq!(pick(&v[..1], &[], None).0, ["virbr0"]);
        // Not running: skipped from 2.28.3 (then NCCL falls back to lo).
        let mut down = [iface("eth0", &["10.0.0.2"]), iface("lo", &["127.0.0.1"])];
        down[0].running = false;
        assert_eq!(pick(&down, &[], self::v(2, 21, 5)).1, "eth0:10.0.0.2");
        assert_eq!(pick(&down, &[], self::v(2, 28, 9)).1, "lo:127.0.0.1");
        // Only an IPv6 link-local address: listed, and taken.
        let ll = [iface("lo", &["127.0.0.1"]), iface("eth1", &["fe80::1"])];
        assert_eq!(pick(&ll, &[], None).1, "eth1:fe80::1");
        // The family NCCL_SOCKET_FAMILY forces.
        let both = [iface("eth0", &["10.0.0.2", "fd00::2"])];
        assert_eq!(
            pick(&both, &[("NCCL_SOCKET_FAMILY", "AF_INET6")], None).1,
            "eth0:fd00::2"
        );
        assert_eq!(
            pick(&both, &[("NCCL_SOCKET_FAMILY", "AF_INET")], None).1,
            "eth0:10.0.0.2"
        );
        assert_eq!(
            pick(&both, &[("NCCL_SOCKET_FAMILY", "inet6")], None).1,
            "eth0:10.0.0.2"
        );
    }

    #[test]
    fn no_interface_is_said_with_the_ones_nccl_lists() {
        let mut ifaces = [
            iface("lo", &["127.0.0.1"]),
            iface("eth0", &["10.0.0.2"]),
            iface("virbr0", &["192.168.122.1"]),
        ];
        let s = settings(&[("NCCL_SOCKET_IFNAME", "nosuch0")]);
        let c = choose(&ifaces, &s, None);
        assert_eq!(
            c.none_found(&s),
            Some((
                "NCCL_SOCKET_IFNAME=nosuch0 matches none of the interfaces NCCL lists (lo, eth0, virbr0)".into(),
                "set NCCL_SOCKET_IFNAME to one of eth0 (lo, virbr0 reach no other node)".into()
            ))
        );
        assert_eq!(
            c.suggestion(),
            "NCCL_SOCKET_IFNAME==eth0 (the real NIC), or NCCL_SOCKET_IFNAME=^docker,virbr,lo"
        );
        for i in &mut ifaces {
            i.running = false;
        }
        let none = settings(&[]);
        let c = choose(&ifaces, &none, None);
        assert_eq!(
            c.none_found(&none),
            Some((
                "NCCL lists no interface: no running interface has a usable address".into(),
                "set NCCL_SOCKET_IFNAME to an interface that is up and has an address (NCCL lists none)".into()
            ))
        );
        // Before 2.28.3 they are listed, and lo taken.
        let old = Version::new(2, 21, 5, "");
        assert_eq!(choose(&ifaces, &none, Some(&old)).none_found(&none), None);
    }
}
