//! What each rank brings to the meeting: its card. Its host, the NCCL it
//! loads, why NCCL finds no interface there (where it finds none), the
//! host's facts (on the first process of a node), the settings in force,
//! and the addresses to test between hosts, NCCL's bootstrap's first. The
//! facts come from `facts/`, the interface NCCL takes from
//! `rules::ifaces`.

use std::net::IpAddr;
use std::path::Path;

use nccl_find::Version;
use nccl_rendezvous::{Addr, Card};

use crate::facts::net::Iface;
use crate::facts::node::Node;
use crate::rules::ifaces::{self, Choice};
use crate::rules::settings::{InForce, Source};

/// The fact of a process on which NCCL finds no interface: why, in words
/// (a per-process fact, never compared: [`super::blocker`] names it).
pub(super) const NO_IFACE: &str = "no_iface";

/// What a card is made of, gathered before.
pub(crate) struct Here<'a> {
    /// The NCCL file this process loads, and its release.
    pub(crate) lib: &'a Path,
    pub(crate) release: Option<&'a Version>,
    /// Its version text (`2.28.9+cuda13.0`), read with the release.
    pub(crate) build: Option<&'a str>,
    /// Its git version (`master v2.29.2-1-g3f2a1b4`), where it has one.
    pub(crate) git: Option<&'a str>,
    /// The settings in force for it.
    pub(crate) settings: &'a InForce,
    /// This host's interfaces.
    pub(crate) interfaces: &'a [Iface],
    /// The node's facts, on the first process of a node only.
    pub(crate) node: Option<&'a Node>,
    /// The host's name.
    pub(crate) host: String,
}

/// This process's card: its host, its facts (the NCCL it loads, the
/// settings in force and, on the first process of a node, the driver, the
/// GPUs, the interfaces NCCL would use and the RDMA ports), and the
/// addresses to test, NCCL's first.
pub(crate) fn card(here: &Here) -> Card {
    let choice = ifaces::choose(here.interfaces, here.settings, here.release);
    let taken: Vec<String> = choice.taken.iter().map(|i| i.name.clone()).collect();
    let mut facts = vec![
        format!(
            "nccl={}",
            here.release.map_or("unknown".into(), |v| v.to_string())
        ),
        format!("nccl_file={}", here.lib.display()),
    ];
    if let Some(b) = here.build {
        facts.push(format!("nccl_build={b}"));
    }
    if let Some(g) = here.git {
        facts.push(format!("nccl_git={g}"));
    }
    if let Some((cause, _)) = choice.none_found(here.settings) {
        facts.push(format!("{NO_IFACE}={cause}"));
    }
    if let Some(n) = here.node {
        let listed = |v: &[String], sep: &str| match v.is_empty() {
            true => "none".to_string(),
            false => v.join(sep),
        };
        facts.extend([
            format!("driver={}", n.driver.as_deref().unwrap_or("none")),
            format!("cuda={}", n.cuda.as_deref().unwrap_or("none")),
            format!("gpus={}", n.gpus),
            format!("ifaces={}", listed(&taken, ",")),
            format!("rdma={}", listed(&n.rdma_ports, ", ")),
            format!("plugins={}", listed(&plugins(n, here.release), ", ")),
            format!("gdr={}", n.peermem.as_deref().unwrap_or("none")),
        ]);
        if let Some(h) = &n.gpu_health {
            facts.push(format!("gpu_health={h}"));
        }
    }
    // NCCL_VERSION is NVIDIA's images' note for apt, which NCCL ignores.
    for s in here
        .settings
        .settings
        .iter()
        .filter(|s| s.name != "NCCL_VERSION")
    {
        let from = match &s.source {
            Source::Environment => String::new(),
            Source::File(p) => format!(" ({})", p.display()),
        };
        facts.push(format!("set {}={}{from}", s.name, s.value));
    }
    let mut text = String::new();
    for f in facts {
        // One fact a line: a value never breaks one, and one too long to
        // fit is left out (the card stays within its bound).
        let f = f.replace('\n', " ");
        if text.len() + f.len() + 1 > Card::MAX_TEXT {
            continue;
        }
        text.push_str(&f);
        text.push('\n');
    }
    Card::new(here.host.clone(), text, addresses(here.interfaces, &choice))
}

/// The plugin files on the loader's path of each family NCCL `release`
/// loads (`net libnccl-net-ofi.so 1.9.1`), in NCCL's order of families,
/// each family's in the loader's order.
fn plugins(n: &Node, release: Option<&Version>) -> Vec<String> {
    let mut out = Vec::new();
    for (f, _, _) in crate::rules::plugins::FAMILIES {
        if !crate::rules::plugins::loads(f, release) {
            continue;
        }
        for p in &n.plugins {
            let name = crate::rules::plugins::file_name(p);
            if crate::facts::rdma::family_of(name) == Some(f) {
                let v = p
                    .version
                    .as_deref()
                    .map(|v| format!(" {v}"))
                    .unwrap_or_default();
                let api = crate::rules::plugins::interface(p, f)
                    .map(|n| format!(" (interface v{n})"))
                    .unwrap_or_default();
                out.push(format!("{f} {name}{v}{api}"));
            }
        }
    }
    out
}

/// The addresses to test: first the one NCCL's bootstrap would use (the
/// interface it listens on, and of its addresses the first another host can
/// reach, IPv4 before IPv6), then every other address of every running
/// interface (loopback and link-local ones left out: no other host
/// reaches them).
fn addresses(interfaces: &[Iface], choice: &Choice) -> Vec<Addr> {
    let usable = |i: &Iface| -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = i
            .addrs
            .iter()
            .filter(|a| !a.link_local)
            .filter_map(|a| a.ip.parse().ok())
            .collect();
        v.sort_by_key(|ip: &IpAddr| ip.is_ipv6());
        v
    };
    let mut out = Vec::new();
    if let Some((i, _)) = choice.bootstrap {
        if let Some(ip) = usable(i).first() {
            out.push(Addr::new(i.name.clone(), *ip, true));
        }
    }
    for i in interfaces.iter().filter(|i| i.running) {
        for ip in usable(i) {
            if ip.is_loopback() || out.iter().any(|a| a.ip == ip) {
                continue;
            }
            out.push(Addr::new(i.name.clone(), ip, false));
        }
    }
    out.truncate(Card::MAX_ADDRS);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::conf::ConfFacts;
    use crate::facts::net::IfAddr;
    use crate::facts::rdma::Plugin;

    fn iface(name: &str, ips: &[&str]) -> Iface {
        Iface {
            name: name.into(),
            running: true,
            addrs: ips
                .iter()
                .map(|ip| IfAddr {
                    ip: ip.to_string(),
                    prefix: 24,
                    v6: ip.contains(':'),
                    link_local: ip.starts_with("fe80"),
                    routed: true,
                })
                .collect(),
        }
    }

    /// The settings in force with `NCCL_SOCKET_IFNAME=eth0`, NVIDIA's
    /// `NCCL_VERSION`, a value too long for a card, and a file's setting.
    fn settings(root: &Path) -> InForce {
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/nccl.conf"), "NCCL_IB_HCA=mlx5_0\n").unwrap();
        let env: Vec<(String, String)> = [
            ("NCCL_SOCKET_IFNAME", "eth0".to_string()),
            ("NCCL_VERSION", "2.28.3-1".into()),
            ("NCCL_DEBUG_SUBSYS", "x\n".repeat(5000)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        InForce::of(&ConfFacts::read_with_homes(&env, None, None, root), None)
    }

    // Long: one card's every fact in order, then a second process's card,
    // read together.
    #[test]
    fn a_card_holds_the_settings_and_the_hosts_facts_once_per_node() {
        let root = std::env::temp_dir().join(format!("nccl-find-card-{}", std::process::id()));
        let settings = settings(&root);
        let interfaces = [
            iface("lo", &["127.0.0.1"]),
            iface("eth0", &["fe80::2", "10.0.0.2"]),
            iface("eth1", &["10.0.1.2"]),
        ];
        let node = Node {
            name: "node07".into(),
            driver: Some("550.54.15".into()),
            cuda: Some("12.4".into()),
            gpus: "8 x NVIDIA H100".into(),
            rdma_ports: vec![],
            plugins: vec![
                Plugin {
                    path: "/opt/aws-ofi-nccl/lib/libnccl-net-ofi.so".into(),
                    version: Some("1.9.1".into()),
                    exports: [
                        "ncclNetPlugin_v9",
                        "ncclCollNetPlugin_v9",
                        "ncclNetPlugin_v8",
                    ]
                    .map(String::from)
                    .to_vec(),
                },
                Plugin {
                    path: "/usr/lib/libnccl-tuner.so".into(),
                    version: None,
                    exports: vec!["ncclTunerPlugin_v4".into()],
                },
                Plugin {
                    path: "/usr/lib/libnccl-net.so".into(),
                    ..Plugin::default()
                },
            ],
            peermem: Some("nvidia_peermem".into()),
            gpu_health: Some("GPU 3: 2 uncorrected ECC error(s)".into()),
        };
        let release = Version::new(2, 28, 9, "");
        let lib = Path::new("/opt/nccl/lib/libnccl.so.2");
        let first = card(&Here {
            lib,
            release: Some(&release),
            build: None,
            git: None,
            settings: &settings,
            interfaces: &interfaces,
            node: Some(&node),
            host: "node07".into(),
        });
        assert_eq!(first.host, "node07");
        assert_eq!(
            first.facts.lines().collect::<Vec<_>>(),
            [
                "nccl=2.28.9",
                "nccl_file=/opt/nccl/lib/libnccl.so.2",
                "driver=550.54.15",
                "cuda=12.4",
                "gpus=8 x NVIDIA H100",
                "ifaces=eth0",
                "rdma=none",
                "plugins=net libnccl-net-ofi.so 1.9.1 (interface v9), net libnccl-net.so, tuner \
                 libnccl-tuner.so (interface v4)",
                "gdr=nvidia_peermem",
                "gpu_health=GPU 3: 2 uncorrected ECC error(s)",
                "set NCCL_IB_HCA=mlx5_0 (/etc/nccl.conf)",
                "set NCCL_SOCKET_IFNAME=eth0",
            ]
        );
        // The 10 KB value does not fit: left out; a line break in a value
        // never makes a line of its own.
        assert!(first.facts.len() <= Card::MAX_TEXT);
        // NCCL's bootstrap address first (not its link-local one), then
        // every other address but loopback's.
        let addrs: Vec<String> = first
            .addrs
            .iter()
            .map(|a| format!("{} {} {}", a.iface, a.ip, a.nccl))
            .collect();
        assert_eq!(addrs, ["eth0 10.0.0.2 true", "eth1 10.0.1.2 false"]);
        // The other processes of a node bring no host facts; where NCCL
        // finds no interface, the card says why.
        let lo = [iface("lo", &["127.0.0.1"])];
        let second = card(&Here {
            lib,
            release: Some(&release),
            build: None,
            git: None,
            settings: &settings,
            interfaces: &lo,
            node: None,
            host: "node07".into(),
        });
        assert_eq!(
            second.facts.lines().take(3).collect::<Vec<_>>(),
            [
                "nccl=2.28.9",
                "nccl_file=/opt/nccl/lib/libnccl.so.2",
                "no_iface=NCCL_SOCKET_IFNAME=eth0 matches none of the interfaces NCCL lists (lo)",
            ]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
