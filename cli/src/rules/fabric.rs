//! Why NCCL leaves the RDMA fabric (InfiniBand, RoCE) for TCP sockets on
//! a machine that has adapters: the reasons NCCL's `net_ib` transport
//! finds no device it can use, each with its fix. Doctor's RDMA area and
//! the smoke test's "NCCL chose sockets although …" line both come from
//! here.

use super::hca::{self, Hca};
use super::settings::InForce;
use crate::facts::rdma::{Adapter, RdmaHw};

/// A locked-memory limit below this fails NCCL's registrations.
pub const MEMLOCK_FLOOR: u64 = 64 << 20;

/// A reason NCCL leaves the fabric, and its fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    pub text: String,
    pub fix: String,
}

/// `b` bytes in words: `64 MiB`.
pub fn bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// `NCCL_IB_DISABLE=1` (NCCL reads a number).
pub fn disabled(settings: &InForce) -> Option<Reason> {
    let v = settings.value("NCCL_IB_DISABLE")?;
    (v.trim().parse::<i64>().is_ok_and(|n| n != 0)).then(|| Reason {
        text: format!("NCCL_IB_DISABLE={v} turns InfiniBand/RoCE off"),
        fix: "unset NCCL_IB_DISABLE".into(),
    })
}

/// Adapters, but RDMA libraries (`libs`: each, and why it does not load)
/// that NCCL needs do not load.
pub fn libraries(libs: &[(String, Option<String>)], adapters: bool) -> Option<Reason> {
    let missing: Vec<String> = libs
        .iter()
        .filter_map(|(l, e)| e.as_ref().map(|e| format!("{l} ({e})")))
        .collect();
    (adapters && !missing.is_empty()).then(|| Reason {
        text: format!(
            "there are RDMA adapters, but some RDMA libraries do not load: {}",
            missing.join(", ")
        ),
        fix: "install the missing ones (ibverbs-providers has libmlx5), or NCCL_IB_DISABLE=1"
            .into(),
    })
}

/// Every port of every adapter down.
pub fn ports_down(adapters: &[Adapter]) -> Option<Reason> {
    let all: Vec<String> = adapters
        .iter()
        .flat_map(|a| a.ports.iter().map(move |p| (a, p)))
        .filter(|(_, p)| p.state != "ACTIVE")
        .map(|(a, p)| format!("{} port {} ({}, {})", a.name, p.num, p.state, p.phys_state))
        .collect();
    let total: usize = adapters.iter().map(|a| a.ports.len()).sum();
    (total > 0 && all.len() == total).then(|| Reason {
        text: format!(
            "every RDMA port is down: {}: NCCL cannot use InfiniBand/RoCE and falls back to sockets",
            all.join(", ")
        ),
        fix: "check the cables and the switch (ibstat, ibv_devinfo), or NCCL_IB_DISABLE=1".into(),
    })
}

/// Adapters in sysfs, but no device node to open them by.
pub fn no_device_nodes(hw: &RdmaHw) -> Option<Reason> {
    (!hw.adapters.is_empty() && hw.uverbs.is_empty()).then(|| Reason {
        text: "the adapters are in /sys/class/infiniband, but /dev/infiniband has no uverbs device: \
               a container started without the RDMA devices, and NCCL cannot open the adapters"
            .into(),
        fix: "docker run --device=/dev/infiniband (or --privileged); on Kubernetes, an RDMA device plugin"
            .into(),
    })
}

/// A locked-memory limit too small for NCCL's registrations.
pub fn memlock(hw: &RdmaHw) -> Option<Reason> {
    let b = hw
        .memlock
        .filter(|b| hw.memlock_known && *b < MEMLOCK_FLOOR)?;
    Some(Reason {
        text: format!(
            "the locked-memory limit (RLIMIT_MEMLOCK) is {}: NCCL's memory registration with the adapter \
             fails (`ibv_reg_mr`), and NCCL reports `unhandled system error`",
            bytes(b)
        ),
        fix: "docker run --ulimit memlock=-1; or in /etc/security/limits.conf: * soft memlock unlimited \
              and * hard memlock unlimited"
            .into(),
    })
}

/// `NCCL_IB_HCA` naming no port here.
pub fn hca(adapters: &[Adapter], settings: &InForce) -> Option<Reason> {
    let v = settings.value("NCCL_IB_HCA").filter(|v| !v.is_empty())?;
    let text = hca::judge(adapters, v).leaves_none()?;
    Some(Reason {
        text,
        fix: Hca::fix(adapters),
    })
}

/// Every reason NCCL leaves the fabric here, the setting that turns it
/// off first.
pub fn why_off(libs: &[(String, Option<String>)], hw: &RdmaHw, settings: &InForce) -> Vec<Reason> {
    let adapters = !hw.adapters.is_empty();
    [
        disabled(settings),
        libraries(libs, adapters),
        ports_down(&hw.adapters),
        no_device_nodes(hw),
        memlock(hw),
        hca(&hw.adapters, settings),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// When NCCL chose sockets (`NET/Socket`) although an adapter has an ACTIVE
/// port: one line naming the port and why (`None` when there is no ACTIVE
/// port, or the transport was another).
pub fn sockets_despite_an_adapter(
    transport: &str,
    libs: &[(String, Option<String>)],
    hw: &RdmaHw,
    settings: &InForce,
) -> Option<String> {
    if !transport.starts_with("NET/Socket") {
        return None;
    }
    let active: Vec<String> = hw
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
    let mut why: Vec<String> = why_off(libs, hw, settings)
        .into_iter()
        .map(|r| r.text)
        .collect();
    if why.is_empty() {
        why.push(
            "nothing nccl-find knows of is in the way: run with NCCL_DEBUG=INFO \
             NCCL_DEBUG_SUBSYS=INIT,NET and read NCCL's NET/IB lines"
                .into(),
        );
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

    fn hw(uverbs: &[&str], state: &str) -> RdmaHw {
        RdmaHw::from_json(&json!({
            "adapters": [{"name": "mlx5_0", "ports": [{"port": 1, "state": state, "phys_state": "LinkUp",
                "rate": "200 Gb/sec (4X HDR)", "link_layer": "InfiniBand", "gids": []}]}],
            "uverbs": uverbs, "memlock": "unlimited", "peermem": "nvidia_peermem", "net_plugins": [],
        }))
    }

    fn settings(vars: &[(&str, &str)]) -> InForce {
        InForce::from_vars(vars)
    }

    #[test]
    fn sockets_beside_an_active_adapter_are_explained() {
        let libs = vec![("libibverbs.so.1".to_string(), None)];
        let why = |hw: &RdmaHw, vars: &[(&str, &str)], t: &str| {
            sockets_despite_an_adapter(t, &libs, hw, &settings(vars))
        };
        let healthy = hw(&["uverbs0"], "ACTIVE");
        assert_eq!(
            why(&healthy, &[("NCCL_IB_DISABLE", "1")], "NET/Socket/0").as_deref(),
            Some("NCCL chose NET/Socket/0 although mlx5_0 port 1 is ACTIVE: NCCL_IB_DISABLE=1 turns InfiniBand/RoCE off")
        );
        assert_eq!(
            why(&hw(&[], "ACTIVE"), &[], "NET/Socket/1").as_deref(),
            Some(
                "NCCL chose NET/Socket/1 although mlx5_0 port 1 is ACTIVE: the adapters are in /sys/class/infiniband, \
                 but /dev/infiniband has no uverbs device: a container started without the RDMA devices, and NCCL \
                 cannot open the adapters"
            )
        );
        assert_eq!(
            why(&healthy, &[("NCCL_IB_HCA", "mlx5_9")], "NET/Socket/0").as_deref(),
            Some(
                "NCCL chose NET/Socket/0 although mlx5_0 port 1 is ACTIVE: NCCL_IB_HCA=mlx5_9: mlx5_9 names no \
                 adapter port here, so NCCL finds no adapter and falls back to sockets"
            )
        );
        assert!(why(&healthy, &[], "NET/Socket/0")
            .unwrap()
            .ends_with("nothing nccl-find knows of is in the way: run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and read NCCL's NET/IB lines"));
        // Not sockets, or no ACTIVE port: nothing to explain.
        assert_eq!(why(&healthy, &[], "NET/IB/0"), None);
        assert_eq!(why(&hw(&["uverbs0"], "DOWN"), &[], "NET/Socket/0"), None);
        assert_eq!(disabled(&settings(&[("NCCL_IB_DISABLE", "0")])), None);
    }
}
