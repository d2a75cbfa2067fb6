//! The verdict against the hardware: what bus bandwidth the links between
//! the GPUs allow (NVLink count and generation, PCIe generation and width),
//! how the measured figure compares, and, when it is far below, the likely
//! reason: the transport NCCL chose (from its `NCCL_DEBUG=INFO` lines), the
//! variables that forced it, or P2P that the GPUs do not support.

/// The links of one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuLinks {
    /// CUDA ordinal.
    pub ordinal: usize,
    /// Compute capability, major (the NVLink generation follows it).
    pub cc_major: i32,
    /// Active NVLinks (NVML); `None`: NVML could not say.
    pub nvlinks: Option<u32>,
    /// PCIe generation and width (NVML's maximum for this device and slot).
    pub pcie: Option<(u32, u32)>,
}

/// What this process knows of the links between its GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Topology {
    /// One entry per GPU of this process.
    pub gpus: Vec<GpuLinks>,
    /// Whether every pair of this process's GPUs can reach each other's
    /// memory (`cuDeviceCanAccessPeer`); `None` with one GPU.
    pub p2p: Option<bool>,
}

/// GB/s one NVLink carries each way, by the GPU's compute capability.
pub fn nvlink_gbps(cc_major: i32) -> f64 {
    match cc_major {
        ..=5 => 0.0,
        6 => 20.0,
        7..=9 => 25.0,
        _ => 50.0,
    }
}

/// GB/s one PCIe lane carries each way, by generation (after encoding).
pub fn pcie_lane_gbps(gen: u32) -> f64 {
    match gen {
        0 => 0.0,
        1 => 0.25,
        2 => 0.5,
        3 => 0.985,
        4 => 1.969,
        5 => 3.938,
        _ => 7.563,
    }
}

/// The bus bandwidth (GB/s) the links allow, and how it was worked out:
/// the slowest GPU's NVLinks (count × per-link rate), or its PCIe link.
pub fn predict(t: &Topology) -> Option<(f64, String)> {
    let mut best: Option<(f64, String)> = None;
    for g in &t.gpus {
        let this = match (g.nvlinks, g.pcie) {
            (Some(n), _) if n > 0 && nvlink_gbps(g.cc_major) > 0.0 => {
                let gb = f64::from(n) * nvlink_gbps(g.cc_major);
                (
                    gb,
                    format!("{n} NVLinks × {} GB/s", nvlink_gbps(g.cc_major)),
                )
            }
            (_, Some((gen, width))) if gen > 0 && width > 0 => (
                f64::from(width) * pcie_lane_gbps(gen),
                format!("PCIe gen{gen} x{width}"),
            ),
            _ => return None,
        };
        if best.as_ref().map_or(true, |b| this.0 < b.0) {
            best = Some(this);
        }
    }
    best
}

/// The transport NCCL used between ranks, from its INFO lines
/// (`Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// GPU to GPU directly (NVLink or PCIe P2P); the detail as NCCL wrote it.
    P2p(String),
    /// Through host shared memory.
    Shm(String),
    /// Through NCCL's network transport (sockets or InfiniBand).
    Net(String),
}

/// The slowest transport named in NCCL's log lines (NET, then SHM, then
/// P2P), with NCCL's own words for it.
pub fn transport(lines: &[String]) -> Option<Transport> {
    let mut found: Option<Transport> = None;
    let rank = |t: &Transport| match t {
        Transport::P2p(_) => 0,
        Transport::Shm(_) => 1,
        Transport::Net(_) => 2,
    };
    for l in lines {
        let Some(via) = l.split(" via ").nth(1) else {
            continue;
        };
        if !l.contains("Channel") && !l.contains("->") {
            continue;
        }
        let word = via.split_whitespace().next().unwrap_or("").to_string();
        let t = if word.starts_with("NET") || word.starts_with("COLLNET") {
            Transport::Net(word)
        } else if word.starts_with("SHM") {
            Transport::Shm(word)
        } else if word.starts_with("P2P") {
            Transport::P2p(word)
        } else {
            continue;
        };
        if found.as_ref().map_or(true, |f| rank(&t) > rank(f)) {
            found = Some(t);
        }
    }
    found
}

/// The judgement.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// What the links allow, GB/s, and how it was worked out.
    pub predicted: Option<(f64, String)>,
    /// Measured bus bandwidth, GB/s, and at which size.
    pub measured: f64,
    /// Measured / predicted.
    pub ratio: Option<f64>,
    /// The transport NCCL chose, if its log said.
    pub transport: Option<Transport>,
    /// One line for the user.
    pub line: String,
}

/// Below this share of what the links allow, the verdict looks for a reason.
pub const SLOW: f64 = 0.6;

/// Smallest size whose bandwidth says something about the links.
pub const MIN_BYTES: usize = 64 << 20;

/// Judges `busbw` (GB/s, measured at `bytes` per rank over `nranks`)
/// against the topology. `env` looks up a setting (the caller's: the
/// settings NCCL runs with, its configuration files' among them, or a
/// test's).
pub fn judge(
    t: &Topology,
    busbw: f64,
    bytes: usize,
    nranks: usize,
    lines: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> Judgement {
    let predicted = predict(t);
    let transport = transport(lines);
    let nvlink = t.gpus.iter().any(|g| g.nvlinks.unwrap_or(0) > 0);
    let ratio = predicted
        .as_ref()
        .filter(|_| bytes >= MIN_BYTES && nranks > 1)
        .map(|(p, _)| busbw / p);
    let links = predicted
        .as_ref()
        .map_or("links unknown".to_string(), |(p, how)| {
            format!("{how} = {p:.0} GB/s")
        });
    let why = reasons(t, transport.as_ref(), &forced(env), nvlink);
    let slow_transport = matches!(transport, Some(Transport::Net(_)) | Some(Transport::Shm(_)))
        && (nvlink || t.p2p == Some(true));
    let line = match ratio {
        Some(r) if r >= SLOW => format!(
            "{busbw:.1} GB/s bus bandwidth at {} is {:.0}% of what the links allow ({links}): as expected",
            human(bytes),
            r * 100.0
        ),
        Some(r) => format!(
            "{busbw:.1} GB/s bus bandwidth at {} is only {:.0}% of what the links allow ({links}). Likely reason: {}",
            human(bytes),
            r * 100.0,
            if why.is_empty() {
                "none visible here (NCCL used direct P2P): the links may be degraded or shared with another job; check \
                 nvidia-smi nvlink -s and nvidia-smi topo -m"
                    .to_string()
            } else {
                why.join("; ")
            }
        ),
        None if slow_transport => format!(
            "too small to compare with the links ({links}; try --sizes 1G), but {}",
            why.join("; ")
        ),
        None if nranks < 2 => "one rank: nothing crosses a link".to_string(),
        None if predicted.is_none() => format!(
            "links unknown (NVML unavailable){}",
            if why.is_empty() { String::new() } else { format!("; {}", why.join("; ")) }
        ),
        None => format!("sizes up to {} are too small to judge the links ({links}): try --sizes 1G", human(bytes)),
    };
    Judgement {
        predicted,
        measured: busbw,
        ratio,
        transport,
        line,
    }
}

/// The variables set (non-empty, not `0`) that keep NCCL off the direct
/// links, as `NAME=value`.
fn forced(env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    [
        "NCCL_P2P_DISABLE",
        "NCCL_SHM_DISABLE",
        "NCCL_P2P_LEVEL",
        "NCCL_NET_GDR_LEVEL",
    ]
    .iter()
    .filter_map(|n| {
        env(n)
            .filter(|v| !v.is_empty() && v != "0")
            .map(|v| format!("{n}={v}"))
    })
    .collect()
}

/// What may hold the bandwidth down, in words: the transport NCCL chose,
/// the variables that forced it, P2P the GPUs lack.
fn reasons(
    t: &Topology,
    transport: Option<&Transport>,
    forced: &[String],
    nvlink: bool,
) -> Vec<String> {
    let mut why = Vec::new();
    match transport {
        Some(Transport::Net(w)) => why.push(format!(
            "NCCL moves the data over its network transport ({w}){}",
            if t.gpus.len() > 1 || nvlink {
                ", not GPU to GPU"
            } else {
                ""
            }
        )),
        Some(Transport::Shm(w)) => why.push(format!(
            "NCCL moves the data through host memory ({w}), not GPU to GPU"
        )),
        _ => {}
    }
    if !forced.is_empty() {
        why.push(format!(
            "{} is set: unset it to let NCCL use the direct links",
            forced.join(" and ")
        ));
    }
    if t.p2p == Some(false) {
        why.push("the GPUs cannot reach each other's memory (P2P unsupported: cuDeviceCanAccessPeer says no; check the IOMMU/ACS settings and nvidia-smi topo -p2p r)".into());
    }
    why
}

pub(crate) fn human(b: usize) -> String {
    match b {
        b if b >= 1 << 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200(n: usize, nvlinks: u32) -> Topology {
        Topology {
            gpus: (0..n)
                .map(|o| GpuLinks {
                    ordinal: o,
                    cc_major: 9,
                    nvlinks: Some(nvlinks),
                    pcie: Some((5, 16)),
                })
                .collect(),
            p2p: Some(true),
        }
    }

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(String::from).collect()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn predictions_from_links() {
        assert_eq!(
            predict(&h200(2, 18)),
            Some((450.0, "18 NVLinks × 25 GB/s".into()))
        );
        let p = predict(&h200(2, 0)).unwrap();
        assert!((p.0 - 63.008).abs() < 1e-9, "{p:?}");
        assert_eq!(p.1, "PCIe gen5 x16");
        // The slowest GPU bounds the ring.
        let mut t = h200(2, 18);
        t.gpus[1].nvlinks = Some(12);
        assert_eq!(predict(&t).unwrap().0, 300.0);
        t.gpus[1].nvlinks = None;
        t.gpus[1].pcie = None;
        assert_eq!(predict(&t), None);
    }

    #[test]
    fn the_transport_is_read_from_nccl_info_lines() {
        let p2p = lines(
            "host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n\
             host:1:2 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/CUMEM/read",
        );
        assert_eq!(
            transport(&p2p),
            Some(Transport::P2p("P2P/CUMEM/read".into()))
        );
        let mut mixed = p2p.clone();
        mixed.push("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct".into());
        assert_eq!(
            transport(&mixed),
            Some(Transport::Shm("SHM/direct/direct".into()))
        );
        mixed
            .push("h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] [send] via NET/Socket/0".into());
        assert_eq!(
            transport(&mixed),
            Some(Transport::Net("NET/Socket/0".into()))
        );
        assert_eq!(
            transport(&lines("NCCL INFO Bootstrap: Using eth0\nNCCL WARN nothing")),
            None
        );
    }

    #[test]
    fn a_fast_run_is_as_expected() {
        let v = judge(&h200(2, 18), 340.0, 1 << 30, 2, &[], &no_env);
        assert_eq!(v.ratio, Some(340.0 / 450.0));
        assert_eq!(
            v.line,
            "340.0 GB/s bus bandwidth at 1 GiB is 76% of what the links allow (18 NVLinks × 25 GB/s = 450 GB/s): as expected"
        );
    }

    #[test]
    fn the_network_transport_forced_by_variables_is_named() {
        let log = lines("x NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0");
        let env = |n: &str| {
            ["NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"]
                .contains(&n)
                .then(|| "1".to_string())
        };
        let v = judge(&h200(4, 18), 3.5, 256 << 20, 4, &log, &env);
        assert_eq!(v.transport, Some(Transport::Net("NET/Socket/0".into())));
        assert_eq!(
            v.line,
            "3.5 GB/s bus bandwidth at 256 MiB is only 1% of what the links allow (18 NVLinks × 25 GB/s = 450 GB/s). \
             Likely reason: NCCL moves the data over its network transport (NET/Socket/0), not GPU to GPU; \
             NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 is set: unset it to let NCCL use the direct links"
        );
        // At a small size, the transport is still named.
        let v = judge(&h200(2, 18), 0.1, 4096, 2, &log, &env);
        assert_eq!(v.ratio, None);
        assert!(v.line.starts_with("too small to compare with the links (18 NVLinks × 25 GB/s = 450 GB/s; try --sizes 1G), but NCCL moves the data over its network transport (NET/Socket/0)"), "{}", v.line);
    }

    #[test]
    fn shm_without_p2p_support_is_explained() {
        let mut t = h200(2, 0);
        t.p2p = Some(false);
        let log = lines("x NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct");
        let v = judge(&t, 10.0, 1 << 30, 2, &log, &no_env);
        assert!(
            v.line
                .contains("only 16% of what the links allow (PCIe gen5 x16 = 63 GB/s)"),
            "{}",
            v.line
        );
        assert!(v.line.contains("through host memory (SHM/direct/direct)"));
        assert!(v.line.contains("P2P unsupported"));
        assert!(!v.line.contains("is set"));
    }

    #[test]
    fn slow_with_direct_p2p_points_at_the_links() {
        let log = lines("x NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read");
        let v = judge(&h200(2, 18), 100.0, 1 << 30, 2, &log, &no_env);
        assert!(v.line.contains("only 22%"), "{}", v.line);
        assert!(v.line.contains("none visible here (NCCL used direct P2P)"));
    }

    #[test]
    fn small_sizes_and_one_rank_are_not_judged() {
        let v = judge(&h200(2, 18), 100.0, 32 << 20, 2, &[], &no_env);
        assert_eq!(v.ratio, None);
        assert_eq!(
            v.line,
            "sizes up to 32 MiB are too small to judge the links (18 NVLinks × 25 GB/s = 450 GB/s): try --sizes 1G"
        );
        let v = judge(&h200(1, 18), 0.0, 1 << 30, 1, &[], &no_env);
        assert_eq!(v.line, "one rank: nothing crosses a link");
    }
}
