//! Doctor's RDMA and network-plugin findings, from what the machine really
//! has (`host::rdma`): adapters and ports, device nodes, locked memory,
//! GPUDirect RDMA, `NCCL_IB_HCA`, RoCE GIDs, and the plugin NCCL will load.

use super::{Area, Findings, Level};
use crate::facts::host::Facts;
use crate::facts::rdma::{Adapter, Plugin, RdmaHw, PLUGIN_FAMILIES};

/// A locked-memory limit below this fails NCCL's registrations.
const MEMLOCK_FLOOR: u64 = 64 << 20;

fn var<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

fn bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// Every RDMA and plugin finding.
/// `names` is the NCCL library that runs, where it could be read: a family
/// whose variable it does not hold is one it has no plugins of.
pub(super) fn check(
    f: &mut Findings,
    facts: &Facts,
    env: &[(String, String)],
    names: Option<&super::Names>,
) {
    let hw = &facts.rdma_hw;
    libraries(f, facts, !hw.adapters.is_empty());
    if !hw.adapters.is_empty() {
        ports(f, &hw.adapters);
        devices_and_memory(f, hw);
        gpudirect(f, hw);
        hca(f, &hw.adapters, var(env, "NCCL_IB_HCA"));
        roce(f, &hw.adapters, var(env, "NCCL_IB_GID_INDEX"));
    }
    plugin(f, &hw.plugins, var(env, "NCCL_NET_PLUGIN"));
    for family in &PLUGIN_FAMILIES[1..] {
        let name = format!("NCCL_{}_PLUGIN", family.to_ascii_uppercase());
        let setting = var(env, &name);
        match names {
            Some(n) if !n.names.contains(&name) => {
                unread_family(f, &hw.plugins, family, &name, setting, &n.version)
            }
            _ => other_plugin(f, &hw.plugins, family, &name, setting),
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
        (true, false) => f.add(
            Area::Rdma,
            Level::Problem,
            format!(
                "there are RDMA adapters, but some RDMA libraries do not load: {}",
                missing.join(", ")
            ),
            Some("install the missing ones (ibverbs-providers has libmlx5), or NCCL_IB_DISABLE=1".into()),
        ),
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
    if down.len() == all.len() {
        f.add(
            Area::Rdma,
            Level::Problem,
            format!(
                "every RDMA port is down: {}: NCCL cannot use InfiniBand/RoCE and falls back to sockets",
                down.join(", ")
            ),
            Some("check the cables and the switch (ibstat, ibv_devinfo), or NCCL_IB_DISABLE=1".into()),
        );
    } else {
        f.add(
            Area::Rdma,
            Level::Note,
            format!(
                "some RDMA ports are down: {}: NCCL uses the ACTIVE ones",
                down.join(", ")
            ),
            None,
        );
    }
}

fn devices_and_memory(f: &mut Findings, hw: &RdmaHw) {
    if hw.uverbs.is_empty() {
        f.add(
            Area::Rdma,
            Level::Problem,
            "the adapters are in /sys/class/infiniband, but /dev/infiniband has no uverbs device: \
             a container started without the RDMA devices, and NCCL cannot open the adapters",
            Some("docker run --device=/dev/infiniband (or --privileged); on Kubernetes, an RDMA device plugin".into()),
        );
    }
    match (hw.memlock_known, hw.memlock) {
        (false, _) => {}
        (true, None) => f.add(Area::Rdma, Level::Ok, "locked memory (RLIMIT_MEMLOCK): unlimited", None),
        (true, Some(b)) if b < MEMLOCK_FLOOR => f.add(
            Area::Rdma,
            Level::Problem,
            format!(
                "the locked-memory limit (RLIMIT_MEMLOCK) is {}: NCCL's memory registration with the adapter \
                 fails (`ibv_reg_mr`), and NCCL reports `unhandled system error`",
                bytes(b)
            ),
            Some("docker run --ulimit memlock=-1; or in /etc/security/limits.conf: * soft memlock unlimited and * hard memlock unlimited".into()),
        ),
        (true, Some(b)) => f.add(
            Area::Rdma,
            Level::Note,
            format!("the locked-memory limit (RLIMIT_MEMLOCK) is {}: unlimited is safest for NCCL", bytes(b)),
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
            "nvidia_peermem is not loaded: unless DMA-BUF serves instead (NCCL 2.19+, a recent kernel and \
             driver), NCCL stages data through host memory, and NCCL_NET_GDR_LEVEL has no effect",
            Some("sudo modprobe nvidia_peermem".into()),
        ),
    }
}

/// One entry of `NCCL_IB_HCA`: a name (a prefix, or exact), and a port.
struct HcaEntry<'a> {
    name: &'a str,
    port: Option<&'a str>,
}

/// `NCCL_IB_HCA` as NCCL reads it: `^` excludes, `=` matches names exactly
/// (else as prefixes), and each comma-separated entry is `name[:port]`.
fn parse_hca(v: &str) -> (bool, bool, Vec<HcaEntry<'_>>) {
    let (exclude, v) = match v.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    let (exact, v) = match v.strip_prefix('=') {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    let entries = v
        .split(',')
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once(':') {
            Some((name, port)) => HcaEntry {
                name,
                port: Some(port),
            },
            None => HcaEntry {
                name: e,
                port: None,
            },
        })
        .collect();
    (exclude, exact, entries)
}

/// The adapters' ports an entry matches.
fn matches<'a>(adapters: &'a [Adapter], e: &HcaEntry, exact: bool) -> Vec<(&'a str, u32)> {
    let mut out = Vec::new();
    for a in adapters {
        let named = if exact {
            a.name == e.name
        } else {
            a.name.starts_with(e.name)
        };
        if !named {
            continue;
        }
        for p in &a.ports {
            if e.port.is_none_or(|want| want == p.num.to_string()) {
                out.push((a.name.as_str(), p.num));
            }
        }
    }
    out
}

fn hca(f: &mut Findings, adapters: &[Adapter], v: Option<&str>) {
    let Some(v) = v else { return };
    let (exclude, exact, entries) = parse_hca(v);
    let here: Vec<String> = adapters
        .iter()
        .map(|a| {
            let ports: Vec<String> = a.ports.iter().map(|p| p.num.to_string()).collect();
            format!("{} (port {})", a.name, ports.join(", "))
        })
        .collect();
    let fix = Some(format!("name one of: {}", here.join(", ")));
    let mut unmatched = Vec::new();
    let mut hit = 0;
    for e in &entries {
        let m = matches(adapters, e, exact);
        if m.is_empty() {
            unmatched.push(match e.port {
                Some(p) => format!("{}:{p}", e.name),
                None => e.name.to_string(),
            });
        }
        hit += m.len();
    }
    let total: usize = adapters.iter().map(|a| a.ports.len()).sum();
    if exclude {
        if hit >= total && total > 0 {
            f.add(
                Area::Rdma,
                Level::Problem,
                format!("NCCL_IB_HCA={v} excludes every adapter here: NCCL falls back to sockets"),
                fix,
            );
        }
        return;
    }
    if !unmatched.is_empty() {
        let level = if hit == 0 {
            Level::Problem
        } else {
            Level::Note
        };
        f.add(
            Area::Rdma,
            level,
            format!(
                "NCCL_IB_HCA={v}: {} names no adapter port here{}",
                unmatched.join(", "),
                if hit == 0 {
                    ", so NCCL finds no adapter and falls back to sockets"
                } else {
                    ""
                }
            ),
            fix,
        );
    }
}

fn roce(f: &mut Findings, adapters: &[Adapter], gid_index: Option<&str>) {
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
        f.add(
            Area::Rdma,
            Level::Note,
            format!("RoCE: NCCL_IB_GID_INDEX is unset; the RoCE v2 GID indexes here are {listed}"),
            Some("set NCCL_IB_GID_INDEX to one of them, the same on every node (NCCL 2.21+ picks a v2 GID itself)".into()),
        );
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

fn file_name(p: &Plugin) -> &str {
    p.path.rsplit('/').next().unwrap_or(&p.path)
}

/// The file NCCL opens for one name of a plugin family, by its rule
/// (`openPluginLib`): the name as it is (a path, or a file name the loader
/// searches for); then, for a bare name (no `/`, not `lib….so`),
/// `libnccl-<family>-<name>.so`. Unset: `libnccl-<family>.so`. The names
/// tried, and the plugin found.
fn plugin_for<'a>(
    plugins: &'a [Plugin],
    family: &str,
    name: Option<&str>,
) -> (Vec<String>, Option<&'a Plugin>) {
    let mut tried = Vec::new();
    match name {
        None => tried.push(format!("libnccl-{family}.so")),
        Some(n) => {
            tried.push(n.to_string());
            let library = n.starts_with("lib") && n.ends_with(".so");
            if !n.contains('/') && !library {
                tried.push(format!("libnccl-{family}-{n}.so"));
            }
        }
    }
    for t in &tried {
        // A path is opened as it is: the file found there (under the
        // root, where there is one).
        let hit = plugins.iter().find(|p| match t.starts_with('/') {
            true => p.path == *t || p.path.ends_with(t.as_str()),
            false => file_name(p) == t,
        });
        if hit.is_some() {
            return (tried, hit);
        }
    }
    (tried, None)
}

/// The network plugin: `NCCL_NET_PLUGIN` is a comma list since 2.27.3, each
/// name tried in turn; `none` means NCCL's internal transports;
/// `STATIC_PLUGIN`, a plugin linked into the program.
fn plugin(f: &mut Findings, plugins: &[Plugin], setting: Option<&str>) {
    let area = Area::Rdma;
    let Some(v) = setting else {
        match plugin_for(plugins, "net", None).1 {
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
    for name in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name.eq_ignore_ascii_case("STATIC_PLUGIN") {
            f.add(area, Level::Note, "NCCL_NET_PLUGIN names STATIC_PLUGIN: NCCL looks for a plugin linked into the program itself", None);
            return;
        }
        let (names, hit) = plugin_for(plugins, "net", Some(name));
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
    plugins: &[Plugin],
    family: &str,
    var: &str,
    setting: Option<&str>,
) {
    if setting.is_some_and(|v| v.eq_ignore_ascii_case("none")) {
        return;
    }
    match plugin_for(plugins, family, setting) {
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

/// A family the NCCL that runs has no plugins of (its library never reads
/// the family's variable: GIN came in 2.29.7, for one): a plugin file or a
/// setting for it is named, as unused.
fn unread_family(
    f: &mut Findings,
    plugins: &[Plugin],
    family: &str,
    var: &str,
    setting: Option<&str>,
    version: &str,
) {
    let what = match (setting, plugin_for(plugins, family, setting).1) {
        (Some(v), _) => format!("{var}={v} is"),
        (None, Some(p)) => format!("{} is", shown(p)),
        (None, None) => return,
    };
    f.add(
        Area::Rdma,
        Level::Note,
        format!("{what} not used: NCCL {version} loads no {family} plugin (its library never reads {var})"),
        None,
    );
}

/// When NCCL chose sockets (`NET/Socket`) although an adapter has an ACTIVE
/// port: one line naming the port and why, from the same findings as
/// doctor's (a problem found, `NCCL_IB_DISABLE`, or none known). `None`
/// when there is no ACTIVE port, or the transport was another.
pub(crate) fn sockets_despite_an_adapter(
    transport: &str,
    facts: &Facts,
    env: &[(String, String)],
) -> Option<String> {
    if !transport.starts_with("NET/Socket") {
        return None;
    }
    let active: Vec<String> = facts
        .rdma_hw
        .adapters
        .iter()
        .flat_map(|a| {
            a.ports
                .iter()
                .filter(|p| p.state == "ACTIVE")
                .map(move |p| format!("{} port {}", a.name, p.num))
        })
        .collect();
    if active.is_empty() {
        return None;
    }
    let mut f = Findings::default();
    check(&mut f, facts, env, None);
    let mut why: Vec<String> =
        f.0.iter()
            .filter(|x| x.area == Area::Rdma && x.level == Level::Problem)
            .map(|x| x.text.clone())
            .collect();
    if var(env, "NCCL_IB_DISABLE") == Some("1") {
        why.insert(0, "NCCL_IB_DISABLE=1 turns InfiniBand/RoCE off".into());
    }
    if why.is_empty() {
        why.push("doctor finds nothing in the way: run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and read NCCL's NET/IB lines".into());
    }
    Some(format!(
        "NCCL chose {transport} although {} is ACTIVE: {}",
        active.join(", "),
        why.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn facts(uverbs: &[&str], state: &str) -> Facts {
        let hw = json!({
            "adapters": [{"name": "mlx5_0", "ports": [{"port": 1, "state": state, "phys_state": "LinkUp",
                "rate": "200 Gb/sec (4X HDR)", "link_layer": "InfiniBand", "gids": []}]}],
            "uverbs": uverbs, "memlock": "unlimited", "peermem": "nvidia_peermem", "net_plugins": [],
        });
        Facts {
            rdma: vec![("libibverbs.so.1".into(), None)],
            rdma_hw: RdmaHw::from_json(&hw),
            ..Facts::default()
        }
    }

    fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn sockets_beside_an_active_adapter_are_explained() {
        let healthy = facts(&["uverbs0"], "ACTIVE");
        assert_eq!(
            sockets_despite_an_adapter("NET/Socket/0", &healthy, &env(&[("NCCL_IB_DISABLE", "1")])).as_deref(),
            Some("NCCL chose NET/Socket/0 although mlx5_0 port 1 is ACTIVE: NCCL_IB_DISABLE=1 turns InfiniBand/RoCE off")
        );
        let container = facts(&[], "ACTIVE");
        assert_eq!(
            sockets_despite_an_adapter("NET/Socket/1", &container, &env(&[])).as_deref(),
            Some(
                "NCCL chose NET/Socket/1 although mlx5_0 port 1 is ACTIVE: the adapters are in /sys/class/infiniband, \
                 but /dev/infiniband has no uverbs device: a container started without the RDMA devices, and NCCL \
                 cannot open the adapters"
            )
        );
        assert_eq!(
            sockets_despite_an_adapter("NET/Socket/0", &healthy, &env(&[("NCCL_IB_HCA", "mlx5_9")])).as_deref(),
            Some(
                "NCCL chose NET/Socket/0 although mlx5_0 port 1 is ACTIVE: NCCL_IB_HCA=mlx5_9: mlx5_9 names no \
                 adapter port here, so NCCL finds no adapter and falls back to sockets"
            )
        );
        assert!(sockets_despite_an_adapter("NET/Socket/0", &healthy, &env(&[]))
            .unwrap()
            .ends_with("doctor finds nothing in the way: run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and read NCCL's NET/IB lines"));
        // Not sockets, or no ACTIVE port: nothing to explain.
        assert_eq!(
            sockets_despite_an_adapter("NET/IB/0", &healthy, &env(&[])),
            None
        );
        assert_eq!(
            sockets_despite_an_adapter("NET/Socket/0", &facts(&["uverbs0"], "DOWN"), &env(&[])),
            None
        );
    }
}
