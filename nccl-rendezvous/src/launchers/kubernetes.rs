//! Kubernetes, with no launcher inside the pod: an Indexed Job, a JobSet,
//! or a LeaderWorkerSet group, one process per pod. (Kubeflow's PyTorchJob
//! sets `RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT`, which the
//! torchrun rows read; an MPIJob starts its workers with `mpirun`, which
//! the PMI rows read.)
//!
//! - **LeaderWorkerSet**: `LWS_WORKER_INDEX` (0 is the leader) is the
//!   rank, `LWS_GROUP_SIZE` the world, `LWS_LEADER_ADDRESS` rank 0's host.
//! - **Indexed Job** and **JobSet**: `JOB_COMPLETION_INDEX` is the pod's
//!   index in its Job. A JobSet of several Jobs also sets
//!   `JOB_GLOBAL_INDEX` (or `JOB_INDEX`) and `GLOBAL_REPLICAS` (or
//!   `REPLICATED_JOB_REPLICAS`): the rank is the Job's index times the pods
//!   of each Job, and the pod's index. Neither says how many pods there
//!   are: `WORLD_SIZE` does (the Job's `completions`, times the Jobs). Rank
//!   0's host is `MASTER_ADDR` where it is set; otherwise it is this pod's
//!   own DNS name with its indexes set to 0 (`train-3.svc.ns.svc.cluster.local`
//!   gives `train-0.svc.ns.svc.cluster.local`), from the line for this pod
//!   in `/etc/hosts`, which Kubernetes writes when the pod template names a
//!   `subdomain` (a headless Service).
//!
//! Rank 0 serves our TCP rendezvous there, at `MASTER_PORT`, or 29500
//! (torch's default) where it is unset.

use crate::job::{Exchange, Init};
use crate::launch::{host_name, host_var, need, optional, port_number, Backend, LaunchEnv, Plan};
use crate::words::printable;

/// A pod of an Indexed Job, a JobSet or a LeaderWorkerSet group.
pub(crate) const KUBERNETES: Backend = Backend {
    id: "kubernetes",
    launcher: "Kubernetes: an Indexed Job, a JobSet or a LeaderWorkerSet, one process per pod",
    recognised_by:
        "JOB_COMPLETION_INDEX (Indexed Job, JobSet) or LWS_WORKER_INDEX (LeaderWorkerSet), \
                    RANK unset",
    carries:
        "our TCP rendezvous: rank 0 listens at MASTER_ADDR, LWS_LEADER_ADDRESS, or the DNS name of \
              the pod of index 0 (from this pod's line in /etc/hosts), port MASTER_PORT or 29500",
    never_came: "rank 0 names every rank that never said hello",
    detect,
};

/// torch's default port, where `MASTER_PORT` is unset.
const PORT: u16 = 29500;

fn detect(env: &LaunchEnv) -> Option<Result<Plan, String>> {
    if env.has("RANK") {
        return None;
    }
    if env.has("LWS_WORKER_INDEX") {
        return Some(leader_worker_set(env));
    }
    if env.has("JOB_COMPLETION_INDEX") {
        return Some(indexed(env));
    }
    None
}

/// What to do instead, at the end of a failure.
const INSTEAD: &str = "or pass --rank, --world-size and --init tcp://HOST:PORT";

fn port(env: &LaunchEnv, from: &mut Vec<&'static str>) -> Result<u16, String> {
    match optional(env, &["MASTER_PORT"], from)? {
        None => Ok(PORT),
        Some(p) => port_number("Kubernetes", "MASTER_PORT", p),
    }
}

fn plan(
    rank: usize,
    world: usize,
    host: String,
    port: u16,
    token: String,
    from: Vec<&'static str>,
    origin: &str,
) -> Plan {
    Plan {
        backend: KUBERNETES.id,
        launcher: "Kubernetes",
        rank,
        world,
        local_rank: None,
        exchange: Exchange::Ours(Init::Tcp { host, port }),
        token: Some(token),
        from,
        origin: Some(origin.to_string()),
    }
}

fn leader_worker_set(env: &LaunchEnv) -> Result<Plan, String> {
    let l = "Kubernetes (LeaderWorkerSet)";
    let mut from = Vec::new();
    let rank = need(env, l, "LWS_WORKER_INDEX", &mut from)?;
    let world = need(env, l, "LWS_GROUP_SIZE", &mut from)?;
    let leader = env
        .get("LWS_LEADER_ADDRESS")
        .map_err(|e| format!("{l}: {e}"))?
        .ok_or_else(|| {
            format!("{l}: LWS_LEADER_ADDRESS is not set, though LWS_WORKER_INDEX is; {INSTEAD}")
        })?;
    from.push("LWS_LEADER_ADDRESS");
    let host = host_var(l, "LWS_LEADER_ADDRESS", leader)?;
    let port = port(env, &mut from)?;
    Ok(plan(
        rank,
        world,
        host.clone(),
        port,
        format!("lws/{host}"),
        from,
        "LWS_LEADER_ADDRESS (the group's leader pod), and MASTER_PORT or 29500",
    ))
}

fn indexed(env: &LaunchEnv) -> Result<Plan, String> {
    let l = "Kubernetes (Indexed Job or JobSet)";
    let mut from = Vec::new();
    let index = need(env, l, "JOB_COMPLETION_INDEX", &mut from)?;
    let world = match env.number("WORLD_SIZE").map_err(|e| format!("{l}: {e}"))? {
        Some(w) => {
            from.push("WORLD_SIZE");
            w
        }
        None => {
            return Err(format!(
                "{l}: WORLD_SIZE is not set: a Job does not tell its pods how many there are. Set \
                 WORLD_SIZE in the pod template to the Job's completions (times the Jobs of a JobSet), \
                 {INSTEAD}"
            ))
        }
    };
    // A JobSet of several Jobs: the Job's index, and how many Jobs.
    let job = optional(env, &["JOB_GLOBAL_INDEX", "JOB_INDEX"], &mut from)?.unwrap_or(0);
    let jobs = optional(
        env,
        &["GLOBAL_REPLICAS", "REPLICATED_JOB_REPLICAS"],
        &mut from,
    )?
    .unwrap_or(1);
    if jobs == 0 || world % jobs != 0 || job >= jobs {
        return Err(format!(
            "{l}: WORLD_SIZE={world} is not {jobs} Job(s) of the same number of pods (this is Job {job}): \
             set WORLD_SIZE to the pods of every Job, {INSTEAD}"
        ));
    }
    let rank = job * (world / jobs) + index;
    let port = port(env, &mut from)?;
    let (host, origin) = match env.get("MASTER_ADDR").map_err(|e| format!("{l}: {e}"))? {
        Some(h) => {
            from.push("MASTER_ADDR");
            let h = host_var(l, "MASTER_ADDR", h)?;
            (h, "MASTER_ADDR, and MASTER_PORT or 29500")
        }
        None => (
            first_pod(env, l, job, index, &mut from)?,
            "the DNS name of the pod of index 0, from this pod's line in /etc/hosts, and MASTER_PORT or 29500",
        ),
    };
    let name = host.split('.').next().unwrap_or("").to_string();
    let token = format!("k8s/{}", name);
    Ok(plan(rank, world, host, port, token, from, origin))
}

/// The DNS name of the first pod of the job: this pod's own name
/// (`HOSTNAME`, as its line in `/etc/hosts` writes it with its domain),
/// with its indexes (`-<job>-<index>` of a JobSet's, `-<index>` of an
/// Indexed Job's) set to 0.
fn first_pod(
    env: &LaunchEnv,
    l: &str,
    job: usize,
    index: usize,
    from: &mut Vec<&'static str>,
) -> Result<String, String> {
    let me = env
        .get("HOSTNAME")
        .map_err(|e| format!("{l}: {e}"))?
        .ok_or_else(|| {
            format!("{l}: neither MASTER_ADDR nor HOSTNAME is set: set MASTER_ADDR, {INSTEAD}")
        })?;
    from.push("HOSTNAME");
    let jobset = env.has("JOB_GLOBAL_INDEX") || env.has("JOB_INDEX") || env.has("JOBSET_NAME");
    let tail = match jobset {
        true => format!("-{job}-{index}"),
        false => format!("-{index}"),
    };
    let stem = me.strip_suffix(&tail).ok_or_else(|| {
        format!(
            "{l}: this pod's name {} does not end in {tail}, as a Job's pods' names do: set MASTER_ADDR to \
             the first pod's DNS name, {INSTEAD}",
            printable(me, 60)
        )
    })?;
    let zero = match jobset {
        true => format!("{stem}-0-0"),
        false => format!("{stem}-0"),
    };
    let domain = env.hosts_domain(me).ok_or_else(|| {
        format!(
            "{l}: /etc/hosts gives this pod ({}) no DNS name: give the pod template a subdomain (the name of \
             a headless Service), or set MASTER_ADDR, {INSTEAD}",
            printable(me, 60)
        )
    })?;
    host_name(&format!("{zero}.{domain}")).ok_or_else(|| {
        format!(
            "{l}: the first pod's name {zero}.{} is not a host name",
            printable(&domain, 80)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launchers::detect;

    fn plan_of(pairs: &[(&str, &str)], hosts: Option<&str>) -> Result<Plan, String> {
        let mut env = LaunchEnv::from_pairs(pairs);
        if let Some(text) = hosts {
            let dir = std::env::temp_dir().join(format!(
                "nf-k8s-hosts-{}-{}",
                std::process::id(),
                crate::fsafe::nonce()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let f = dir.join("hosts");
            std::fs::write(&f, text).unwrap();
            env = env.with_hosts_file(f.clone());
            let p = detect(&env).map(|p| p.unwrap());
            std::fs::remove_dir_all(&dir).unwrap();
            return p;
        }
        detect(&env).map(|p| p.unwrap())
    }

    fn at(p: &Plan) -> (usize, usize, String, u16) {
        match &p.exchange {
            Exchange::Ours(Init::Tcp { host, port }) => (p.rank, p.world, host.clone(), *port),
            e => panic!("{e:?}"),
        }
    }

    /// The pod's line as the kubelet writes it for a pod with a subdomain.
    const HOSTS: &str =
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n\
                         10.244.1.7\ttrain-3.train-svc.ml.svc.cluster.local\ttrain-3\n";

    #[test]
    fn an_indexed_job_meets_at_the_first_pod_by_its_dns_name() {
        let p = plan_of(
            &[
                ("JOB_COMPLETION_INDEX", "3"),
                ("HOSTNAME", "train-3"),
                ("WORLD_SIZE", "4"),
                ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ],
            Some(HOSTS),
        )
        .unwrap();
        assert_eq!(
            at(&p),
            (3, 4, "train-0.train-svc.ml.svc.cluster.local".into(), 29500)
        );
        assert_eq!(
            (p.backend, p.token.as_deref()),
            ("kubernetes", Some("k8s/train-0"))
        );
        // MASTER_ADDR and MASTER_PORT, where the template sets them, win.
        let p = plan_of(
            &[
                ("JOB_COMPLETION_INDEX", "1"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "train-0.train-svc"),
                ("MASTER_PORT", "23456"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(at(&p), (1, 2, "train-0.train-svc".into(), 23456));
    }

    #[test]
    fn a_jobset_of_several_jobs_counts_ranks_across_them() {
        let hosts = "10.244.2.9\tpt-workers-1-2.pt.ml.svc.cluster.local\tpt-workers-1-2\n";
        let p = plan_of(
            &[
                ("JOB_COMPLETION_INDEX", "2"),
                ("JOB_INDEX", "1"),
                ("JOB_GLOBAL_INDEX", "1"),
                ("GLOBAL_REPLICAS", "2"),
                ("REPLICATED_JOB_REPLICAS", "2"),
                ("REPLICATED_JOB_NAME", "workers"),
                ("JOBSET_NAME", "pt"),
                ("HOSTNAME", "pt-workers-1-2"),
                ("WORLD_SIZE", "8"),
            ],
            Some(hosts),
        )
        .unwrap();
        assert_eq!(
            at(&p),
            (6, 8, "pt-workers-0-0.pt.ml.svc.cluster.local".into(), 29500)
        );
    }

    #[test]
    fn a_leader_worker_set_group_meets_at_its_leader() {
        let p = plan_of(
            &[
                ("LWS_WORKER_INDEX", "2"),
                ("LWS_GROUP_SIZE", "4"),
                ("LWS_LEADER_ADDRESS", "llm-0.llm.default"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(at(&p), (2, 4, "llm-0.llm.default".into(), 29500));
        assert_eq!(p.token.as_deref(), Some("lws/llm-0.llm.default"));
    }

    #[test]
    fn what_is_missing_is_said_with_what_to_set() {
        let e = plan_of(
            &[("JOB_COMPLETION_INDEX", "0"), ("HOSTNAME", "train-0")],
            None,
        )
        .unwrap_err();
        assert!(
            e.contains("WORLD_SIZE is not set: a Job does not tell its pods how many there are"),
            "{e}"
        );
        let e = plan_of(
            &[
                ("JOB_COMPLETION_INDEX", "0"),
                ("HOSTNAME", "train-0"),
                ("WORLD_SIZE", "2"),
            ],
            Some("10.0.0.1\ttrain-0\n"),
        )
        .unwrap_err();
        assert!(e.contains("/etc/hosts gives this pod (\"train-0\") no DNS name: give the pod template a subdomain"), "{e}");
        let e = plan_of(
            &[
                ("JOB_COMPLETION_INDEX", "1"),
                ("HOSTNAME", "other"),
                ("WORLD_SIZE", "2"),
            ],
            Some(HOSTS),
        )
        .unwrap_err();
        assert!(
            e.contains("this pod's name \"other\" does not end in -1"),
            "{e}"
        );
        // PyTorchJob sets RANK: the torchrun rows read it, not this one.
        let p = plan_of(
            &[
                ("JOB_COMPLETION_INDEX", "1"),
                ("RANK", "1"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "pt-master-0"),
                ("MASTER_PORT", "23456"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(p.backend, "torchrun-tcp");
    }
}
