//! torchrun (PyTorch's elastic launcher). Its workers get `RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`,
//! `TORCHELASTIC_RUN_ID`, `TORCHELASTIC_RESTART_COUNT` and
//! `TORCHELASTIC_USE_AGENT_STORE`.
//!
//! Without the agent's store (`TORCHELASTIC_USE_AGENT_STORE=False`, or
//! `MASTER_ADDR` set by hand), rank 0 serves our own TCP rendezvous at
//! `MASTER_ADDR:MASTER_PORT`.

use super::launch::{need, optional, Backend, LaunchEnv, Plan};
use super::{Exchange, Init};

/// torchrun without an agent store, or `MASTER_ADDR`/`MASTER_PORT` set by
/// hand: our TCP rendezvous there.
pub(super) const NO_AGENT_STORE: Backend = Backend {
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
    let port = u16::try_from(port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("{launcher}: MASTER_PORT={port} is not a port number"))?;
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
    })
}

/// torchrun's run id and restart count: `None` when the run id is torch's
/// placeholder `none` (static rendezvous without `--rdzv-id`).
pub(super) fn job_identity(env: &LaunchEnv, from: &mut Vec<&'static str>) -> Option<String> {
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
    use super::super::launch::detect;
    use super::*;

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
}
