//! torchrun (PyTorch's elastic launcher). Its workers get `RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`,
//! `TORCHELASTIC_RUN_ID`, `TORCHELASTIC_RESTART_COUNT` and
//! `TORCHELASTIC_USE_AGENT_STORE`.
//!
//! With the agent's store (`TORCHELASTIC_USE_AGENT_STORE=True`: the static
//! rendezvous, the default, in every torch 2.x; c10d and `--standalone`
//! from torch 2.5), the agent already serves a TCPStore at
//! `MASTER_ADDR:MASTER_PORT`, and the workers, rank 0 too, are its clients
//! ([`crate::stores::tcpstore`]), each with a connection of its own, as torch's
//! own workers are. Our keys are kept apart from torch's, and from an
//! earlier restart's, under `/nccl-find/RUN/RESTART/`. torch's server looks
//! up every client's name as it accepts it, one at a time: where that is
//! slow, the report says so (the job's own workers will wait as long).
//!
//! Without the agent's store (`TORCHELASTIC_USE_AGENT_STORE=False`, or
//! `MASTER_ADDR` set by hand), rank 0 serves our own TCP rendezvous at
//! `MASTER_ADDR:MASTER_PORT`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Instant;

use crate::job::{Exchange, Init};
use crate::kv::{Connect, Kv};
use crate::launch::{host_var, need, optional, port_number, Backend, LaunchEnv, Plan};
use crate::stores::prefix::PrefixStore;
use crate::stores::tcpstore::{open_probed, Dialect, StoreKv};

/// torchrun with its agent's store: every worker is a client of the
/// TCPStore the agent serves.
pub(crate) const AGENT_STORE: Backend = Backend {
    id: "torchrun-store",
    launcher: "torchrun (agent store)",
    recognised_by: "TORCHELASTIC_USE_AGENT_STORE=True, MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE",
    carries: "the TCPStore torchrun's agent serves at MASTER_ADDR:MASTER_PORT (keys under \
              /nccl-find/RUN/RESTART/), every worker its own client, as torch's are; a barrier is a counter \
              and a key the last rank to arrive sets",
    never_came: "each rank's arrival key at the barrier, checked at the deadline",
    detect: detect_store,
};

fn detect_store(env: &LaunchEnv) -> Option<Result<Plan, String>> {
    let launcher = AGENT_STORE.launcher;
    match env.get("TORCHELASTIC_USE_AGENT_STORE") {
        Ok(Some("True")) => Some(plan_store(env)),
        Ok(Some("False")) | Ok(None) => None,
        Ok(Some(v)) => Some(Err(format!(
            "{launcher}: TORCHELASTIC_USE_AGENT_STORE={} is neither True nor False. Start every process \
             with torchrun, or pass --rank, --world-size and --init tcp://HOST:PORT",
            crate::words::printable(v, 40)
        ))),
        Err(e) => Some(Err(format!("{launcher}: {e}"))),
    }
}

/// The longest run id taken (torch's are uuids, or what `--rdzv-id` says).
const MAX_RUN_ID: usize = 256;

fn plan_store(env: &LaunchEnv) -> Result<Plan, String> {
    let launcher = AGENT_STORE.launcher;
    let mut from = vec!["TORCHELASTIC_USE_AGENT_STORE"];
    let host = match env.get("MASTER_ADDR") {
        Ok(Some(h)) => h,
        Ok(None) => {
            return Err(format!(
                "{launcher}: MASTER_ADDR is not set, though TORCHELASTIC_USE_AGENT_STORE is: the launcher's \
                 environment is half set. Start every process with torchrun, or pass --rank, --world-size \
                 and --init tcp://HOST:PORT"
            ))
        }
        Err(e) => return Err(format!("{launcher}: {e}")),
    };
    from.push("MASTER_ADDR");
    let host = host_var(launcher, "MASTER_ADDR", host)?;
    let port = need(env, launcher, "MASTER_PORT", &mut from)?;
    let port = port_number(launcher, "MASTER_PORT", port)?;
    let rank = need(env, launcher, "RANK", &mut from)?;
    let world = need(env, launcher, "WORLD_SIZE", &mut from)?;
    let local_rank = optional(env, &["LOCAL_RANK"], &mut from)?;
    let run = match env
        .get("TORCHELASTIC_RUN_ID")
        .map_err(|e| format!("{launcher}: {e}"))?
    {
        Some(r) if r.len() > MAX_RUN_ID => {
            return Err(format!(
                "{launcher}: TORCHELASTIC_RUN_ID is {} bytes long; at most {MAX_RUN_ID} are taken",
                r.len()
            ))
        }
        Some(r) => {
            from.push("TORCHELASTIC_RUN_ID");
            r
        }
        None => "none",
    };
    let restart = optional(env, &["TORCHELASTIC_RESTART_COUNT"], &mut from)
        .map_err(|e| format!("{launcher}: {e}"))?
        .unwrap_or(0);
    let dialect = dialect_of(env, &mut from);
    let run = escape(run);
    let prefix = format!("/nccl-find/{run}/{restart}/");
    Ok(Plan {
        backend: AGENT_STORE.id,
        launcher: "torchrun",
        rank,
        world,
        local_rank,
        exchange: Exchange::Launcher(std::sync::Arc::new(AgentStore {
            host,
            port,
            prefix,
            dialect,
        })),
        token: Some(format!("torchrun/{run}/{restart}")),
        from,
        origin: None,
    })
}

/// The store's protocol the worker's environment suggests: torch 2.2
/// renamed NCCL_ASYNC_ERROR_HANDLING, which torchrun sets for its workers,
/// when it changed the store's protocol.
fn dialect_of(env: &LaunchEnv, from: &mut Vec<&'static str>) -> Dialect {
    if env.has("TORCH_NCCL_ASYNC_ERROR_HANDLING") {
        from.push("TORCH_NCCL_ASYNC_ERROR_HANDLING");
        Dialect::New
    } else if env.has("NCCL_ASYNC_ERROR_HANDLING") {
        from.push("NCCL_ASYNC_ERROR_HANDLING");
        Dialect::Old
    } else {
        Dialect::New
    }
}

/// Text as a part of a key: letters, digits, `.`, `_` and `-` as they are,
/// every other byte as `%XX`.
fn escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"._-".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The agent's store: where it is, and where our keys go in it.
#[derive(Debug, Clone)]
pub(crate) struct AgentStore {
    host: String,
    port: u16,
    /// `/nccl-find/RUN/RESTART/`.
    prefix: String,
    /// The dialect the worker's environment suggests (the other is tried
    /// when the server does not answer in it).
    dialect: Dialect,
}

impl AgentStore {
    fn url(&self) -> String {
        if self.host.contains(':') {
            format!("tcp://[{}]:{}", self.host, self.port)
        } else {
            format!("tcp://{}:{}", self.host, self.port)
        }
    }
}

impl AgentStore {
    /// This process's own connection to the store.
    fn open(&self, rank: usize, world: usize, deadline: Instant) -> Result<StoreKv, String> {
        let at = self.url();
        let addrs: Vec<SocketAddr> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve MASTER_ADDR {}: {e}", self.host))?
            .collect();
        if addrs.is_empty() {
            return Err(format!("MASTER_ADDR {} has no address", self.host));
        }
        let (conn, accepted_in) = open_probed(
            &addrs,
            self.dialect,
            &format!("{}probe", self.prefix),
            deadline,
        )
        .map_err(|e| {
            format!(
                "cannot reach the agent's TCPStore at {at}: {e}. Is this process started by \
                         torchrun, and is its agent still running?"
            )
        })?;
        let mut kv = StoreKv {
            store: PrefixStore::new(conn, &self.prefix),
            addrs,
            at,
            rank,
            world,
            fences: 0,
            since: Instant::now(),
            until: deadline,
            accepted_in,
        };
        kv.begin_run()?;
        Ok(kv)
    }
}

impl Connect for AgentStore {
    fn connect(&self, rank: usize, world: usize, deadline: Instant) -> Result<Box<dyn Kv>, String> {
        Ok(Box::new(self.open(rank, world, deadline)?))
    }

    fn describe(&self) -> String {
        format!(
            "{} (the agent's TCPStore; keys under {})",
            self.url(),
            self.prefix
        )
    }

    fn launcher(&self) -> &'static str {
        "torchrun (agent store)"
    }
}

/// torchrun without an agent store, or `MASTER_ADDR`/`MASTER_PORT` set by
/// hand: our TCP rendezvous there.
pub(crate) const NO_AGENT_STORE: Backend = Backend {
    id: "torchrun-tcp",
    launcher: "torchrun (no agent store), or MASTER_ADDR and MASTER_PORT set by hand",
    recognised_by:
        "MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE (TORCHELASTIC_USE_AGENT_STORE unset or False)",
    carries: "our TCP rendezvous: rank 0 listens at MASTER_ADDR:MASTER_PORT",
    never_came: "rank 0 names every rank that never said hello",
    detect: detect_tcp,
};

fn detect_tcp(env: &LaunchEnv) -> Option<Result<Plan, String>> {
    let agent = env.get("TORCHELASTIC_USE_AGENT_STORE");
    if matches!(agent, Ok(Some(v)) if v != "False") || !env.has("MASTER_ADDR") {
        return None;
    }
    // A Slurm batch script that exports MASTER_ADDR and MASTER_PORT for its
    // tasks, and no RANK: the Slurm row reads it (and that meeting place).
    if !env.has("RANK") && env.has("SLURM_PROCID") {
        return None;
    }
    Some(plan_tcp(env, agent.is_ok_and(|a| a.is_some())))
}

fn plan_tcp(env: &LaunchEnv, torchrun: bool) -> Result<Plan, String> {
    let launcher = NO_AGENT_STORE.launcher;
    let mut from = vec!["MASTER_ADDR"];
    if torchrun {
        from.insert(0, "TORCHELASTIC_USE_AGENT_STORE");
    }
    let host = env
        .get("MASTER_ADDR")
        .map_err(|e| format!("{launcher}: {e}"))?
        .unwrap_or_default()
        .to_string();
    let port = need(env, launcher, "MASTER_PORT", &mut from)?;
    let port = port_number(launcher, "MASTER_PORT", port)?;
    let rank = need(env, launcher, "RANK", &mut from)?;
    let world = need(env, launcher, "WORLD_SIZE", &mut from)?;
    let local_rank = optional(env, &["LOCAL_RANK"], &mut from)?;
    let token = job_identity(env, &mut from);
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok(Plan {
        backend: NO_AGENT_STORE.id,
        launcher: if torchrun {
            "torchrun"
        } else {
            "MASTER_ADDR/MASTER_PORT"
        },
        rank,
        world,
        local_rank,
        exchange: Exchange::Ours(Init::Tcp { host, port }),
        token,
        from,
        origin: Some(if torchrun {
            "MASTER_ADDR and MASTER_PORT, set by torchrun (its --master-addr and --master-port choose them)".into()
        } else {
            "MASTER_ADDR and MASTER_PORT".into()
        }),
    })
}

/// torchrun's run id and restart count: `None` when the run id is torch's
/// placeholder `none` (static rendezvous without `--rdzv-id`).
pub(crate) fn job_identity(env: &LaunchEnv, from: &mut Vec<&'static str>) -> Option<String> {
    let id = env.get("TORCHELASTIC_RUN_ID").ok().flatten()?;
    if id == "none" {
        return None;
    }
    from.push("TORCHELASTIC_RUN_ID");
    let restart = match env.get("TORCHELASTIC_RESTART_COUNT").ok().flatten() {
        Some(r) => {
            from.push("TORCHELASTIC_RESTART_COUNT");
            r
        }
        None => "0",
    };
    Some(format!("torchrun/{id}/{restart}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launchers::detect;

    #[test]
    fn without_the_agent_store_rank_0_serves_our_rendezvous() {
        let env = LaunchEnv::from_pairs(&[
            ("TORCHELASTIC_USE_AGENT_STORE", "False"),
            ("MASTER_ADDR", "node7"),
            ("MASTER_PORT", "29500"),
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("TORCHELASTIC_RUN_ID", "c0ffee"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
        ]);
        let p = detect(&env).unwrap().unwrap();
        assert_eq!(
            (p.backend, p.launcher, p.rank, p.world, p.local_rank),
            ("torchrun-tcp", "torchrun", 3, 4, Some(1))
        );
        assert_eq!(
            p.exchange,
            Exchange::Ours(Init::Tcp {
                host: "node7".into(),
                port: 29500
            })
        );
        assert_eq!(p.token.as_deref(), Some("torchrun/c0ffee/2"));
        assert_eq!(
            p.from,
            [
                "TORCHELASTIC_USE_AGENT_STORE",
                "MASTER_ADDR",
                "MASTER_PORT",
                "RANK",
                "WORLD_SIZE",
                "LOCAL_RANK",
                "TORCHELASTIC_RUN_ID",
                "TORCHELASTIC_RESTART_COUNT"
            ]
        );
    }

    #[test]
    fn by_hand_with_no_run_id_there_is_no_token() {
        let env = LaunchEnv::from_pairs(&[
            ("MASTER_ADDR", "[::1]"),
            ("MASTER_PORT", "1234"),
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("TORCHELASTIC_RUN_ID", "none"),
        ]);
        let p = detect(&env).unwrap().unwrap();
        assert_eq!(p.launcher, "MASTER_ADDR/MASTER_PORT");
        assert_eq!(p.token, None);
        assert_eq!(
            p.exchange,
            Exchange::Ours(Init::Tcp {
                host: "::1".into(),
                port: 1234
            })
        );
    }

    #[test]
    fn a_half_set_environment_says_what_is_missing() {
        let env = LaunchEnv::from_pairs(&[
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1234"),
            ("WORLD_SIZE", "2"),
        ]);
        assert_eq!(
            detect(&env).unwrap_err(),
            "torchrun (no agent store), or MASTER_ADDR and MASTER_PORT set by hand: RANK is not set, though \
             MASTER_ADDR, MASTER_PORT are: the launcher's environment is half set. Start every process with \
             the launcher, or pass --rank, --world-size and --init tcp://HOST:PORT"
        );
        let env = LaunchEnv::from_pairs(&[("MASTER_ADDR", "h"), ("MASTER_PORT", "70000")]);
        assert_eq!(
            detect(&env).unwrap_err(),
            "torchrun (no agent store), or MASTER_ADDR and MASTER_PORT set by hand: MASTER_PORT=70000 is not a \
             port number"
        );
    }

    fn store_env(extra: &[(&'static str, &'static str)]) -> LaunchEnv {
        let mut v = vec![
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("MASTER_ADDR", "node7"),
            ("MASTER_PORT", "29500"),
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("TORCHELASTIC_RUN_ID", "c0ffee"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
        ];
        v.extend_from_slice(extra);
        LaunchEnv::from_pairs(&v)
    }

    /// The store a plan meets through, as its Debug form says it.
    fn store_of(p: &Plan) -> String {
        match &p.exchange {
            Exchange::Launcher(c) => format!("{c:?}"),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn with_the_agent_store_every_rank_is_a_client() {
        let env = store_env(&[("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")]);
        let p = detect(&env).unwrap().unwrap();
        assert_eq!(
            (p.backend, p.launcher, p.rank, p.world, p.local_rank),
            ("torchrun-store", "torchrun", 3, 4, Some(1))
        );
        assert_eq!(
            store_of(&p),
            "AgentStore { host: \"node7\", port: 29500, prefix: \"/nccl-find/c0ffee/2/\", dialect: New }"
        );
        assert_eq!(
            p.exchange.describe(),
            "tcp://node7:29500 (the agent's TCPStore; keys under /nccl-find/c0ffee/2/)"
        );
        assert_eq!(p.token.as_deref(), Some("torchrun/c0ffee/2"));
        assert_eq!(
            p.from,
            [
                "TORCHELASTIC_USE_AGENT_STORE",
                "MASTER_ADDR",
                "MASTER_PORT",
                "RANK",
                "WORLD_SIZE",
                "LOCAL_RANK",
                "TORCHELASTIC_RUN_ID",
                "TORCHELASTIC_RESTART_COUNT",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING"
            ]
        );
        // The agent store's row comes before the one without it.
        assert_eq!(crate::launchers::BACKENDS[0].id, "torchrun-store");
    }

    #[test]
    fn the_dialect_follows_torchs_renamed_variable() {
        let old = store_env(&[("NCCL_ASYNC_ERROR_HANDLING", "1")]);
        assert!(store_of(&detect(&old).unwrap().unwrap()).ends_with("dialect: Old }"));
        let both = store_env(&[
            ("NCCL_ASYNC_ERROR_HANDLING", "1"),
            ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        ]);
        assert!(store_of(&detect(&both).unwrap().unwrap()).ends_with("dialect: New }"));
        let neither = store_env(&[]);
        assert!(store_of(&detect(&neither).unwrap().unwrap()).ends_with("dialect: New }"));
    }

    #[test]
    fn run_ids_and_hosts_from_outside_are_kept_in_bounds() {
        let env = store_env(&[
            ("TORCHELASTIC_RUN_ID", "a b/../\u{202e}"),
            ("MASTER_ADDR", "[::1]"),
        ]);
        let p = detect(&env).unwrap().unwrap();
        assert_eq!(
            p.exchange.describe(),
            "tcp://[::1]:29500 (the agent's TCPStore; keys under /nccl-find/a%20b%2F..%2F%E2%80%AE/2/)"
        );
        // No run id (torch's placeholder, or none at all): "none".
        let env = LaunchEnv::from_pairs(&[
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
        ]);
        let p = detect(&env).unwrap().unwrap();
        assert!(store_of(&p).contains("prefix: \"/nccl-find/none/0/\""));
        assert_eq!(p.from.len(), 5);
        let long = "x".repeat(MAX_RUN_ID + 1);
        let env = LaunchEnv::from_pairs(&[
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("TORCHELASTIC_RUN_ID", &long),
        ]);
        assert_eq!(
            detect(&env).unwrap_err(),
            "torchrun (agent store): TORCHELASTIC_RUN_ID is 257 bytes long; at most 256 are taken"
        );
        let env = store_env(&[("MASTER_ADDR", "evil\nhost")]);
        assert_eq!(
            detect(&env).unwrap_err(),
            "torchrun (agent store): MASTER_ADDR=\"evil\\u{a}host\" is not a host name"
        );
    }

    #[test]
    fn a_half_set_agent_store_says_what_is_missing() {
        let env = LaunchEnv::from_pairs(&[
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
        ]);
        assert_eq!(
            detect(&env).unwrap_err(),
            "torchrun (agent store): MASTER_PORT is not set, though TORCHELASTIC_USE_AGENT_STORE, MASTER_ADDR \
             are: the launcher's environment is half set. Start every process with the launcher, or pass \
             --rank, --world-size and --init tcp://HOST:PORT"
        );
        let env = LaunchEnv::from_pairs(&[("TORCHELASTIC_USE_AGENT_STORE", "True"), ("RANK", "0")]);
        assert_eq!(
            detect(&env).unwrap_err(),
            "torchrun (agent store): MASTER_ADDR is not set, though TORCHELASTIC_USE_AGENT_STORE is: the \
             launcher's environment is half set. Start every process with torchrun, or pass --rank, \
             --world-size and --init tcp://HOST:PORT"
        );
        let env = LaunchEnv::from_pairs(&[("TORCHELASTIC_USE_AGENT_STORE", "yes")]);
        assert_eq!(
            detect(&env).unwrap_err(),
            "torchrun (agent store): TORCHELASTIC_USE_AGENT_STORE=\"yes\" is neither True nor False. Start \
             every process with torchrun, or pass --rank, --world-size and --init tcp://HOST:PORT"
        );
        let env = store_env(&[("TORCHELASTIC_RESTART_COUNT", "2x")]);
        assert_eq!(
            detect(&env).unwrap_err(),
            "torchrun (agent store): TORCHELASTIC_RESTART_COUNT=\"2x\" is not a number"
        );
    }
}
