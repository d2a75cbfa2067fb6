//! Which adapter ports `NCCL_IB_HCA` leaves NCCL (its `net_ib` transport
//! reads the value in NCCL's list grammar, [`super::list`]: each entry
//! `name[:port]`, a prefix unless `=`, `^` to exclude).

use super::list::{List, HCAS};
use crate::facts::rdma::Adapter;

/// What `NCCL_IB_HCA` leaves NCCL here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hca {
    /// The value, as set.
    pub value: String,
    /// Whether it excludes (`^`).
    pub exclude: bool,
    /// The ports NCCL may use under it: adapter and port.
    pub usable: Vec<(String, u32)>,
    /// The entries that name no port here (of a list that includes).
    pub unmatched: Vec<String>,
    /// Every port here.
    pub total: usize,
}

/// `NCCL_IB_HCA=value` over `adapters`.
pub fn judge(adapters: &[Adapter], value: &str) -> Hca {
    let list = List::parse(value, HCAS);
    let mut usable = Vec::new();
    let mut total = 0;
    for a in adapters {
        for p in &a.ports {
            total += 1;
            if list.takes(&a.name, Some(p.num as i32)) {
                usable.push((a.name.clone(), p.num));
            }
        }
    }
    let mut unmatched = Vec::new();
    if !list.exclude {
        for e in &list.entries {
            let named = adapters.iter().any(|a| {
                a.ports
                    .iter()
                    .any(|p| list.entry_names(e, &a.name, Some(p.num as i32)))
            });
            if !named {
                unmatched.push(e.to_string());
            }
        }
    }
    Hca {
        value: value.to_string(),
        exclude: list.exclude,
        usable,
        unmatched,
        total,
    }
}

impl Hca {
    /// Where it leaves NCCL no port of the adapters here: why, in words
    /// (NCCL then falls back to sockets).
    pub fn leaves_none(&self) -> Option<String> {
        if !self.usable.is_empty() || self.total == 0 {
            return None;
        }
        Some(match self.exclude {
            true => format!(
                "NCCL_IB_HCA={} excludes every adapter here: NCCL falls back to sockets",
                self.value
            ),
            false => format!(
                "NCCL_IB_HCA={}: {} names no adapter port here, so NCCL finds no adapter and falls \
                 back to sockets",
                self.value,
                self.unmatched.join(", ")
            ),
        })
    }

    /// The ports to name instead: `name one of: mlx5_0 (port 1), …`.
    pub fn fix(adapters: &[Adapter]) -> String {
        let here: Vec<String> = adapters
            .iter()
            .map(|a| {
                let ports: Vec<String> = a.ports.iter().map(|p| p.num.to_string()).collect();
                format!("{} (port {})", a.name, ports.join(", "))
            })
            .collect();
        format!("name one of: {}", here.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::rdma::Port;

    fn adapters() -> Vec<Adapter> {
        let port = |num| Port {
            num,
            state: "ACTIVE".into(),
            ..Port::default()
        };
        vec![
            Adapter {
                name: "mlx5_0".into(),
                ports: vec![port(1)],
            },
            Adapter {
                name: "mlx5_1".into(),
                ports: vec![port(1), port(2)],
            },
        ]
    }

    #[test]
    fn the_ports_nccl_ib_hca_leaves() {
        let a = adapters();
        let usable = |v: &str| judge(&a, v).usable.len();
        assert_eq!(
            (usable("mlx5"), usable("mlx5_1:2"), usable("=mlx5")),
            (3, 1, 0)
        );
        assert_eq!((usable("^mlx5_0"), usable("^mlx5")), (2, 0));
        let h = judge(&a, "mlx5_0,mlx5_9");
        assert_eq!(
            (h.usable.len(), h.unmatched.clone()),
            (1, vec!["mlx5_9".to_string()])
        );
        assert_eq!(h.leaves_none(), None);
        assert_eq!(
            judge(&a, "mlx5_9").leaves_none().as_deref(),
            Some("NCCL_IB_HCA=mlx5_9: mlx5_9 names no adapter port here, so NCCL finds no adapter and falls back to sockets")
        );
        assert_eq!(
            judge(&a, "^mlx5").leaves_none().as_deref(),
            Some("NCCL_IB_HCA=^mlx5 excludes every adapter here: NCCL falls back to sockets")
        );
        assert_eq!(judge(&[], "mlx5_9").leaves_none(), None);
        assert_eq!(
            Hca::fix(&a),
            "name one of: mlx5_0 (port 1), mlx5_1 (port 1, 2)"
        );
    }
}
