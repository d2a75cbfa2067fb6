//! Doctor's RDMA and network-plugin findings, from what the machine really
//! has (`facts::rdma`): adapters and ports, device nodes, locked memory,
//! GPUDirect RDMA, `NCCL_IB_HCA`, RoCE GIDs, and the plugin NCCL will load.
//! What keeps NCCL off the fabric is `rules::fabric`'s to say; which plugin
//! NCCL loads, `rules::plugins`'.

use nccl_find::explain::Change;
use nccl_find::Version;

use super::{Area, Findings, Level};
use crate::facts::host::Facts;
use crate::facts::rdma::{Adapter, Plugin, RdmaHw};
use crate::rules::fabric::{self, Reason};
use crate::rules::hca::{self, Hca};
use crate::rules::plugins;
use crate::rules::settings::InForce;

/// A reason NCCL leaves the fabric, as a finding.
fn problem(f: &mut Findings, r: Reason) {
    f.add(Area::Rdma, Level::Problem, r.text, Some(r.fix));
}

/// Every RDMA and plugin finding, by the rules of NCCL `release`.
pub(super) fn check(
    f: &mut Findings,
    facts: &Facts,
    settings: &InForce,
    release: Option<&Version>,
) {
    let hw = &facts.rdma_hw;
    libraries(f, facts, !hw.adapters.is_empty());
    if !hw.adapters.is_empty() {
        ports(f, &hw.adapters);
        devices_and_memory(f, hw);
        gpudirect(f, hw);
        hca(f, &hw.adapters, settings);
        let gid_index = settings
            .value("NCCL_IB_GID_INDEX")
            .filter(|v| !v.is_empty());
        roce(f, &hw.adapters, gid_index, release);
    }
    let set = |family: &str| {
        settings
            .value(&plugins::variable(family))
            .filter(|v| !v.is_empty())
    };
    net_plugin(f, &hw.plugins, set("net"), release);
    for (family, _, _) in &plugins::FAMILIES[1..] {
        let var = plugins::variable(family);
        match plugins::loads(family, release) {
            true => other_plugin(f, &hw.plugins, family, &var, set(family)),
            false => unread_family(f, &hw.plugins, family, &var, set(family), release),
        }
    }
}

fn libraries(f: &mut Findings, facts: &Facts, adapters: bool) {
    let missing: Vec<String> = facts
        .rdma
        .iter()
        .filter_map(|(l, e)| e.as_ref().map(|e| format!("{l} ({e})")))
        .collect();
    match (adapters, missing.is_empty() && !facts.rdma.is_empty()) {
        (false, true) => f.add(
            Area::Rdma,
            Level::Note,
            "libibverbs, libmlx5 and librdmacm load, but there is no InfiniBand or RoCE adapter \
             (/sys/class/infiniband is empty): NCCL will use TCP sockets between nodes",
            None,
        ),
        (false, false) => f.add(
            Area::Rdma,
            Level::Note,
            "no RDMA adapter and not every RDMA library loads: NCCL uses TCP sockets between nodes (fine on one node)",
            Some("for InfiniBand/RoCE: an adapter, and apt install rdma-core ibverbs-providers librdmacm1".into()),
        ),
        (true, true) => f.add(
            Area::Rdma,
            Level::Ok,
            "libibverbs, libmlx5 and librdmacm load",
            None,
        ),
        (true, false) => {
            if let Some(r) = fabric::libraries(&facts.rdma, true) {
                problem(f, r);
            }
        }
    }
}

fn port_words(a: &Adapter) -> String {
    let ports: Vec<String> = a
        .ports
        .iter()
        .map(|p| {
            let layer = if p.link_layer == "Ethernet" {
                "Ethernet (RoCE)"
            } else {
                p.link_layer.as_str()
            };
            format!(
                "port {} {} ({}), {}, {layer}",
                p.num, p.state, p.phys_state, p.rate
            )
        })
        .collect();
    format!("{}: {}", a.name, ports.join("; "))
}

fn ports(f: &mut Findings, adapters: &[Adapter]) {
    for a in adapters {
        f.add(Area::Rdma, Level::Ok, port_words(a), None);
    }
    let all: Vec<(&Adapter, &crate::facts::rdma::Port)> = adapters
        .iter()
        .flat_map(|a| a.ports.iter().map(move |p| (a, p)))
        .collect();
    let down: Vec<String> = all
        .iter()
        .filter(|(_, p)| p.state != "ACTIVE")
        .map(|(a, p)| format!("{} port {} ({}, {})", a.name, p.num, p.state, p.phys_state))
        .collect();
    if down.is_empty() {
        return;
    }
    match fabric::ports_down(adapters) {
        Some(r) => problem(f, r),
        None => f.add(
            Area::Rdma,
            Level::Note,
            format!(
                "some RDMA ports are down: {}: NCCL uses the ACTIVE ones",
                down.join(", ")
            ),
            None,
        ),
    }
}

fn devices_and_memory(f: &mut Findings, hw: &RdmaHw) {
    if let Some(r) = fabric::no_device_nodes(hw) {
        problem(f, r);
    }
    if let Some(r) = fabric::memlock(hw) {
        problem(f, r);
        return;
    }
    match (hw.memlock_known, hw.memlock) {
        (false, _) => {}
        (true, None) => f.add(
            Area::Rdma,
            Level::Ok,
            "locked memory (RLIMIT_MEMLOCK): unlimited",
            None,
        ),
        (true, Some(b)) => f.add(
            Area::Rdma,
            Level::Note,
            format!(
                "the locked-memory limit (RLIMIT_MEMLOCK) is {}: unlimited is safest for NCCL",
                fabric::bytes(b)
            ),
            None,
        ),
    }
}

fn gpudirect(f: &mut Findings, hw: &RdmaHw) {
    match &hw.peermem {
        Some(m) => f.add(
            Area::Rdma,
            Level::Ok,
            format!("{m} is loaded: GPUDirect RDMA can move data between GPUs and adapters directly (NCCL_NET_GDR_LEVEL decides when)"),
            None,
        ),
        None => f.add(
            Area::Rdma,
            Level::Note,
            "nvidia_peermem is not loaded: unless DMA-BUF serves instead (a recent kernel and driver), \
             NCCL stages data through host memory, and NCCL_NET_GDR_LEVEL has no effect",
            Some("sudo modprobe nvidia_peermem".into()),
        ),
    }
}

/// `NCCL_IB_HCA` against the ports here (`rules::hca`).
fn hca(f: &mut Findings, adapters: &[Adapter], settings: &InForce) {
    let Some(v) = settings.value("NCCL_IB_HCA").filter(|v| !v.is_empty()) else {
        return;
    };
    if let Some(r) = fabric::hca(adapters, settings) {
        problem(f, r);
        return;
    }
    let h = hca::judge(adapters, v);
    if !h.unmatched.is_empty() {
        f.add(
            Area::Rdma,
            Level::Note,
            format!(
                "NCCL_IB_HCA={v}: {} names no adapter port here",
                h.unmatched.join(", ")
            ),
            Some(Hca::fix(adapters)),
        );
    }
}

/// RoCE without `NCCL_IB_GID_INDEX`: whether NCCL `release` picks a RoCE
/// v2 GID itself (`listed`: the v2 indexes here, in words).
fn gid_unset(f: &mut Findings, listed: &str, release: Option<&Version>) {
    let who = release.map_or("NCCL".to_string(), |v| format!("NCCL {v}"));
    match Change::RoceGidChosen.in_release(release) {
        true => f.add(
            Area::Rdma,
            Level::Note,
            format!("RoCE: NCCL_IB_GID_INDEX is unset: {who} picks a RoCE v2 GID itself; the RoCE v2 GID indexes here are {listed}"),
            None,
        ),
        false => f.add(
            Area::Rdma,
            Level::Note,
            format!(
                "RoCE: NCCL_IB_GID_INDEX is unset: {who} takes GID index 0 (it picks a RoCE v2 GID itself from {}); \
                 the RoCE v2 GID indexes here are {listed}",
                Change::RoceGidChosen.since()
            ),
            Some("set NCCL_IB_GID_INDEX to one of them, the same on every node".into()),
        ),
    }
}

fn roce(
    f: &mut Findings,
    adapters: &[Adapter],
    gid_index: Option<&str>,
    release: Option<&Version>,
) {
    let mut v2 = Vec::new();
    let mut any_roce = false;
    for a in adapters {
        for p in a.ports.iter().filter(|p| p.link_layer == "Ethernet") {
            any_roce = true;
            let idx: Vec<String> = p
                .gids
                .iter()
                .filter(|(_, t)| t.eq_ignore_ascii_case("RoCE v2"))
                .map(|(i, _)| i.to_string())
                .collect();
            if !idx.is_empty() {
                v2.push(format!("{} port {}: {}", a.name, p.num, idx.join(", ")));
            }
        }
    }
    if !any_roce {
        return;
    }
    let listed = if v2.is_empty() {
        "none".to_string()
    } else {
        v2.join("; ")
    };
    let Some(want) = gid_index else {
        gid_unset(f, &listed, release);
        return;
    };
    let mut kinds = Vec::new();
    for a in adapters {
        for p in a.ports.iter().filter(|p| p.link_layer == "Ethernet") {
            if let Some((_, t)) = p.gids.iter().find(|(i, _)| i.to_string() == want) {
                kinds.push((format!("{} port {}", a.name, p.num), t.clone()));
            }
        }
    }
    let good = !kinds.is_empty() && kinds.iter().all(|(_, t)| t.eq_ignore_ascii_case("RoCE v2"));
    if good {
        f.add(
            Area::Rdma,
            Level::Ok,
            format!("RoCE: NCCL_IB_GID_INDEX={want} is a RoCE v2 GID"),
            None,
        );
    } else {
        let what = if kinds.is_empty() {
            "names no GID in use".to_string()
        } else {
            let k: Vec<String> = kinds.iter().map(|(w, t)| format!("{t} on {w}")).collect();
            format!("is {}", k.join(", "))
        };
        f.add(
            Area::Rdma,
            Level::Problem,
            format!("RoCE: NCCL_IB_GID_INDEX={want} {what}, not RoCE v2; the RoCE v2 GID indexes here are {listed}"),
            Some("set NCCL_IB_GID_INDEX to a RoCE v2 index".into()),
        );
    }
}

fn shown(p: &Plugin) -> String {
    match &p.version {
        Some(v) => format!("{} (version {v})", p.path),
        None => p.path.clone(),
    }
}

/// The network plugin: `NCCL_NET_PLUGIN`'s names tried in turn (a list
/// from 2.27.3, [`plugins::net_names`]); `none` means NCCL's internal
/// transports; `STATIC_PLUGIN`, a plugin linked into the program.
fn net_plugin(
    f: &mut Findings,
    found: &[Plugin],
    setting: Option<&str>,
    release: Option<&Version>,
) {
    let area = Area::Rdma;
    let Some(v) = setting else {
        match plugins::find(found, "net", None).1 {
            Some(p) => f.add(
                area,
                Level::Note,
                format!(
                    "NCCL will load the network plugin {}: it replaces NCCL's internal InfiniBand and socket transports",
                    shown(p)
                ),
                Some("NCCL_NET_PLUGIN=none if it is not wanted".into()),
            ),
            None => f.add(
                area,
                Level::Ok,
                "no network plugin (libnccl-net.so) on the loader's path: NCCL uses its internal transports",
                None,
            ),
        }
        return;
    };
    if v.eq_ignore_ascii_case("none") {
        f.add(
            area,
            Level::Note,
            "NCCL_NET_PLUGIN=none: NCCL uses its internal transports (InfiniBand verbs, sockets)",
            None,
        );
        return;
    }
    let mut tried = Vec::new();
    for name in plugins::net_names(v, release) {
        if name.eq_ignore_ascii_case("STATIC_PLUGIN") {
            f.add(area, Level::Note, "NCCL_NET_PLUGIN names STATIC_PLUGIN: NCCL looks for a plugin linked into the program itself", None);
            return;
        }
        let (names, hit) = plugins::find(found, "net", Some(name));
        if let Some(p) = hit {
            f.add(
                area,
                Level::Ok,
                format!("NCCL loads the network plugin {}", shown(p)),
                None,
            );
            return;
        }
        tried.extend(names);
    }
    let first = tried
        .iter()
        .find(|t| t.starts_with("libnccl-"))
        .or(tried.first());
    f.add(
        area,
        Level::Problem,
        format!(
            "NCCL_NET_PLUGIN={v} names {}, which is not on the loader's path: NCCL falls back to its \
             internal transports, and the fabric the plugin drives (EFA, for one) is not used",
            first.map_or("nothing", String::as_str)
        ),
        Some("put the plugin's directory on LD_LIBRARY_PATH, or install it (aws-ofi-nccl for EFA)".into()),
    );
}

/// A plugin of another family (GIN, RMA, tuner, profiler, env): said where
/// NCCL will load one, or where one was asked for and is not there.
fn other_plugin(
    f: &mut Findings,
    found: &[Plugin],
    family: &str,
    var: &str,
    setting: Option<&str>,
) {
    if setting.is_some_and(|v| v.eq_ignore_ascii_case("none")) {
        return;
    }
    match plugins::find(found, family, setting) {
        (_, Some(p)) => f.add(
            Area::Rdma,
            Level::Note,
            format!("NCCL will load the {family} plugin {}", shown(p)),
            Some(format!("{var}=none if it is not wanted")),
        ),
        (tried, None) => {
            if let Some(v) = setting {
                f.add(
                    Area::Rdma,
                    Level::Problem,
                    format!(
                        "{var}={v} names {}, which is not on the loader's path: NCCL runs without a {family} plugin",
                        tried.last().map_or(v, String::as_str)
                    ),
                    Some("put the plugin's directory on LD_LIBRARY_PATH, or unset the variable".into()),
                );
            }
        }
    }
}

/// A family the NCCL that runs has no plugins of (GIN came in 2.29.7, for
/// one): a plugin file or a setting for it is named, as unused.
fn unread_family(
    f: &mut Findings,
    found: &[Plugin],
    family: &str,
    var: &str,
    setting: Option<&str>,
    release: Option<&Version>,
) {
    let what = match (setting, plugins::find(found, family, setting).1) {
        (Some(v), _) => format!("{var}={v} is"),
        (None, Some(p)) => format!("{} is", shown(p)),
        (None, None) => return,
    };
    let who = release.map_or("this NCCL".to_string(), |v| format!("NCCL {v}"));
    f.add(
        Area::Rdma,
        Level::Note,
        format!("{what} not used: {who} loads no {family} plugin (its library never reads {var})"),
        None,
    );
}
