//! The launcher policy: this process's place in a job, from the command
//! line's flags and the launcher's environment (the table's row, the
//! variables of launchers with no row, `--init`), the job token and where
//! each came from.

use std::time::Duration;

use crate::job::{Exchange, Init, Job};
use crate::launch::{optional, LaunchEnv, Plan};
use crate::launchers::detect;
use crate::reach::Card;
use crate::words::{check_token, MAX_WORLD};

/// What the command line says of the job; `None` where it says nothing.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Flags {
    /// `--rank`.
    pub rank: Option<usize>,
    /// `--world-size`.
    pub world: Option<usize>,
    /// `--init`: `tcp://HOST:PORT` or `file:///path`.
    pub init: Option<String>,
    /// `--token`.
    pub token: Option<String>,
    /// `--timeout`.
    pub timeout: Duration,
}

impl Flags {
    /// The longest `timeout` the rendezvous takes: a year. Longer ones are
    /// a mistake (and would overflow the clock).
    pub const MAX_TIMEOUT: std::time::Duration = crate::words::MAX_TIMEOUT;
}

impl Default for Flags {
    /// No flags, and a deadline of 60 s.
    fn default() -> Flags {
        Flags {
            rank: None,
            world: None,
            init: None,
            token: None,
            timeout: Duration::from_secs(60),
        }
    }
}

/// How this process meets the others, and where that came from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Meeting {
    /// This process's place, and how to meet.
    pub job: Job,
    /// The exchange's row id, or `init` for `--init`.
    pub backend: &'static str,
    /// The launcher, in words.
    pub launcher: &'static str,
    /// The variables (and flags) it came from.
    pub from: Vec<&'static str>,
    /// Where the job token came from; `None`: there is none, and our TCP
    /// rendezvous is open to whoever reaches its port.
    pub token_from: Option<&'static str>,
    /// This process's rank on its node.
    pub local_rank: Option<usize>,
}

/// Ranks and world sizes by hand, for launchers with no row of their own.
const RANK_VARS: [&str; 4] = ["RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK"];
const WORLD_VARS: [&str; 4] = [
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "SLURM_NTASKS",
    "PMI_SIZE",
];
const LOCAL_VARS: [&str; 4] = [
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
];

/// The rank and world size: flags, else the launcher's row, else the
/// variables of launchers with no row; `None`: one process.
fn rank_and_world(
    a: &Flags,
    env: &LaunchEnv,
    plan: Option<&Plan>,
    from: &mut Vec<&'static str>,
) -> Result<Option<(usize, usize)>, String> {
    let rank = match (a.rank, plan) {
        (Some(r), _) => Some(r),
        (None, Some(p)) => Some(p.rank),
        (None, None) => optional(env, &RANK_VARS, from)?,
    };
    let world = match (a.world, plan) {
        (Some(w), _) => Some(w),
        (None, Some(p)) => Some(p.world),
        (None, None) => optional(env, &WORLD_VARS, from)?,
    };
    if let Some(w) = world.filter(|w| *w > MAX_WORLD) {
        return Err(format!(
            "a world size of {w} is more than the {} processes a job may have",
            MAX_WORLD
        ));
    }
    Ok(match (rank, world) {
        (_, None) | (_, Some(1)) if a.init.is_none() => None,
        (Some(rank), Some(world)) => Some((rank, world)),
        (None, Some(_)) => {
            return Err("a world size was given but no rank: pass --rank (or RANK)".into())
        }
        (_, None) => return Err("--init needs --world-size (or WORLD_SIZE)".into()),
    })
}

/// This process's place in a job of several, from the flags and the
/// launcher's environment; `None`: one process.
fn resolve(a: &Flags, env: &LaunchEnv) -> Result<Option<Meeting>, String> {
    // A launcher the table knows; a half-set one is an error, unless
    // everything it would give is passed by flag.
    let plan = match detect(env) {
        Ok(p) => p,
        Err(_) if a.init.is_some() && a.rank.is_some() && a.world.is_some() => None,
        Err(e) => return Err(e),
    };
    let mut from: Vec<&'static str> = plan.as_ref().map(|p| p.from.clone()).unwrap_or_default();
    let (rank, world) = match rank_and_world(a, env, plan.as_ref(), &mut from)? {
        Some(rw) => rw,
        None => return Ok(None),
    };
    if rank >= world {
        return Err(format!("rank {rank} is outside a world of {world}"));
    }
    let (exchange, backend, launcher) = match (&a.init, &plan) {
        (Some(u), _) => (Exchange::Ours(Init::parse(u)?), "init", "--init"),
        (None, Some(p)) => (p.exchange.clone(), p.backend, p.launcher),
        (None, None) => {
            return Err(format!(
                "several processes need a rendezvous, and no launcher this command knows started this one ({} \
                 of {world}, from {}): pass --init tcp://HOST:PORT or file:///shared/path, or set MASTER_ADDR \
                 and MASTER_PORT",
                rank,
                from.join(", ")
            ))
        }
    };
    // Given by hand, the token is a secret; the launcher's job identity
    // and the default are public.
    let (token, token_from, token_secret) = match (
        &a.token,
        env.get("NCCL_FIND_TOKEN")?,
        plan.as_ref().and_then(|p| p.token.clone()),
    ) {
        (Some(t), _, _) => (t.clone(), Some("--token"), true),
        (None, Some(t), _) => (t.to_string(), Some("NCCL_FIND_TOKEN"), true),
        (None, None, Some(t)) => (t, Some("the launcher's job identity"), false),
        (None, None, None) => ("nccl-find".to_string(), None, false),
    };
    // A bad token is named by where it came from.
    let named = match (token_from, token.split('/').next()) {
        (Some(from @ ("--token" | "NCCL_FIND_TOKEN")), _) => from.to_string(),
        (Some(_), Some("torchrun")) => "TORCHELASTIC_RUN_ID (torchrun's job identity)".into(),
        (Some(_), Some("slurm")) => "SLURM_JOB_ID or SLURM_STEP_ID (Slurm's job identity)".into(),
        (Some(_), Some("pmix")) => "PMIX_NAMESPACE (PMIx's job identity)".into(),
        (Some(from), _) => from.to_string(),
        (None, _) => "the default token".into(),
    };
    check_token(&token).map_err(|e| format!("{named}: {e}"))?;
    let local_rank = match &plan {
        Some(p) => p.local_rank,
        None => optional(env, &LOCAL_VARS, &mut from)?,
    };
    Ok(Some(Meeting {
        job: Job {
            rank,
            world,
            ngpus: 1,
            token,
            token_secret,
            exchange,
            timeout: a.timeout,
            // --init names its own address.
            origin: plan
                .as_ref()
                .filter(|_| a.init.is_none())
                .and_then(|p| p.origin.clone()),
            card: Card::default(),
            judge: None,
            run_anyway: false,
        },
        backend,
        launcher,
        from,
        token_from,
        local_rank,
    }))
}

impl Meeting {
    /// This process's place in a job of several, from the flags and the
    /// launcher's environment: `None` for a job of one process. Flags win
    /// over the launcher's variables; a half-set launcher environment is an
    /// error, unless the flags give everything it would.
    pub fn resolve(flags: &Flags, env: &LaunchEnv) -> Result<Option<Meeting>, String> {
        resolve(flags, env)
    }

    /// The report's line on how the processes meet.
    pub fn line(&self) -> String {
        let from = if self.from.is_empty() {
            String::new()
        } else {
            format!(" (from {})", self.from.join(", "))
        };
        let open = match (&self.job.exchange, self.token_from) {
            (Exchange::Ours(Init::Tcp { .. }), None) => {
                "; no job token: the port is open to whoever can reach it (pass --token or set NCCL_FIND_TOKEN)"
            }
            _ => "",
        };
        format!(
            "exchange: {} via {}, at {}{from}{open}",
            self.backend,
            self.launcher,
            self.job.exchange.describe()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token that cannot be used is named by where it came from, not as
    /// `--token` whatever set it.
    #[test]
    fn a_bad_token_is_named_by_its_source() {
        let base = [
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
        ];
        let err = |more: &[(&str, &str)]| {
            let pairs: Vec<(&str, &str)> = base.iter().chain(more).copied().collect();
            Meeting::resolve(&Flags::default(), &LaunchEnv::from_pairs(&pairs)).unwrap_err()
        };
        assert!(
            err(&[("NCCL_FIND_TOKEN", "a\nb")])
                .starts_with("NCCL_FIND_TOKEN: the token holds a line break"),
            "{}",
            err(&[("NCCL_FIND_TOKEN", "a\nb")])
        );
        let e = err(&[
            ("TORCHELASTIC_RUN_ID", "a\nb"),
            ("TORCHELASTIC_RESTART_COUNT", "0"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("GROUP_RANK", "0"),
        ]);
        assert!(
            e.starts_with(
                "TORCHELASTIC_RUN_ID (torchrun's job identity): the token holds a line break"
            ),
            "{e}"
        );
    }
}
