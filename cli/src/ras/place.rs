//! Where a rank runs, in its scheduler's words, and the line that takes
//! that node out: Slurm's node, job, step and task (`scontrol update …
//! state=drain`, `--exclude`), Kubernetes' pod and node (`kubectl
//! cordon`), torchrun's and mpirun's host and local rank.
//!
//! A rank on this host is read from its own process (`/proc/PID/environ`:
//! the variables its launcher gave it). A rank on another host is matched
//! by its address: against the Slurm job's nodes (`scontrol show node`,
//! their `NodeAddr`), or, for a pod, by the line that asks Kubernetes.
//! What the job runs under comes from the process that serves RAS here,
//! else from this command's own environment. Every read is bounded, every
//! wait ends, and every value offered to paste is checked or quoted.

use std::io::Read;
use std::net::{IpAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::status::Who;
use crate::style::shell_word;

/// A process's environment, as `KEY=VALUE` pairs.
pub(crate) type Env = Vec<(String, String)>;

/// A Slurm job's nodes and their `NodeAddr`, or why they are not known.
type Nodes = Result<Vec<(String, String)>, String>;

/// The longest `scontrol` may take.
const SCONTROL_WAIT: Duration = Duration::from_secs(5);

/// A rank's node, in its scheduler's words.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Place {
    /// `slurm`, `kubernetes`, `torchrun`, `mpirun`.
    pub(crate) scheduler: &'static str,
    /// The node (Slurm's node name, the pod's node) where known.
    pub(crate) node: Option<String>,
    /// The rest, in words: `job 12, step 0, task 1, local rank 1`.
    pub(crate) words: String,
    /// The line that takes the node out of service.
    pub(crate) take_out: Option<String>,
    /// The line that keeps the next run off it.
    pub(crate) next: Option<String>,
}

impl Place {
    /// `Slurm node node02 (job 12, step 0, task 1)`.
    pub(crate) fn said(&self) -> String {
        let what = match self.scheduler {
            "slurm" => "Slurm node",
            "kubernetes" => "Kubernetes",
            "torchrun" => "torchrun",
            _ => "mpirun",
        };
        match (&self.node, self.words.is_empty()) {
            (Some(n), true) => format!("{what} node {n}"),
            (Some(n), false) if self.scheduler == "slurm" => {
                format!("{what} {n} ({})", self.words)
            }
            (Some(n), false) => format!("{what} {} on node {n}", self.words),
            (None, _) => {
                let who = match self.scheduler {
                    "slurm" => "Slurm",
                    _ => what,
                };
                format!("{who} {}", self.words)
            }
        }
    }
}

/// A process's environment (`/proc/PID/environ`, at most 4 MiB), where it
/// can be read.
pub(crate) fn env_of(pid: u64) -> Option<Env> {
    let raw = nccl_find::internal::read_bounded(
        &Path::new("/proc").join(pid.to_string()).join("environ"),
        4 << 20,
    )
    .ok()?;
    Some(parse_env(&raw))
}

/// This command's own environment.
pub(crate) fn own_env() -> Env {
    std::env::vars_os()
        .map(|(k, v)| (k.to_string_lossy().into(), v.to_string_lossy().into()))
        .collect()
}

fn parse_env(raw: &[u8]) -> Env {
    raw.split(|&b| b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

fn get<'a>(env: &'a Env, key: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// Whether `host` (an address, as RAS names a node) is this host's: an
/// address a socket can be bound to here.
fn on_this_host(host: &str) -> bool {
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback() || UdpSocket::bind((ip, 0)).is_ok(),
        Err(_) => false,
    }
}

/// Where `who` runs, in its scheduler's words: read from its own process
/// where it is on this host, else matched against `job` (the environment
/// of the job's process here, or this command's), `why` a short account
/// of the rank's trouble for Slurm's drain reason.
pub(crate) fn place(who: &Who, job: &Env, why: &str) -> Option<Place> {
    let own = match (who.pid, on_this_host(&who.host)) {
        (Some(pid), true) => {
            env_of(pid).map(|e| (e, Path::new("/proc").join(pid.to_string()).join("root")))
        }
        _ => None,
    };
    if let Some((env, root)) = &own {
        if let Some(p) = from_own(env, root, who, why) {
            return Some(p);
        }
    }
    from_job(job, who, why, &scontrol_nodes)
}

/// A short file the process at `root` sees (its pod's service account,
/// its host name): one line of a name's characters, or nothing.
fn name_in(root: &Path, file: &str) -> Option<String> {
    let raw = nccl_find::internal::read_bounded(&root.join(file), 256).ok()?;
    let v = String::from_utf8(raw).ok()?;
    let v = v.trim();
    (!v.is_empty()
        && v.len() <= 253
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-')))
    .then(|| v.to_string())
}

/// What the rank's own launcher told it (`env`), and the files its
/// process sees (`root`, its `/proc/PID/root`).
fn from_own(env: &Env, root: &Path, who: &Who, why: &str) -> Option<Place> {
    if let Some(jobid) = get(env, "SLURM_JOB_ID") {
        let node = get(env, "SLURMD_NODENAME").map(str::to_string);
        let mut words = vec![format!("job {jobid}")];
        if let Some(s) = get(env, "SLURM_STEP_ID") {
            words.push(format!("step {s}"));
        }
        if let Some(t) = get(env, "SLURM_PROCID") {
            words.push(format!("task {t}"));
        }
        if let Some(l) = get(env, "SLURM_LOCALID") {
            words.push(format!("local rank {l}"));
        }
        return Some(slurm(node, words.join(", "), who, why));
    }
    if get(env, "KUBERNETES_SERVICE_HOST").is_some() {
        let pod = get(env, "HOSTNAME")
            .map(shell_word)
            .or_else(|| name_in(root, "etc/hostname"));
        let ns = name_in(
            root,
            "var/run/secrets/kubernetes.io/serviceaccount/namespace",
        );
        let pod = match (ns, pod) {
            (Some(ns), Some(p)) => Some(format!("{ns}/{p}")),
            (_, p) => p,
        };
        let node = ["NODE_NAME", "KUBE_NODE_NAME", "MY_NODE_NAME"]
            .iter()
            .find_map(|k| get(env, k))
            .map(str::to_string);
        let words = match pod {
            Some(p) => format!("pod {p}"),
            None => "a pod".into(),
        };
        return Some(kubernetes(node, words, &who.host));
    }
    let local = |k: &str| get(env, k).map(|l| format!("local rank {l} on {}", who.host));
    if get(env, "TORCHELASTIC_RUN_ID").is_some() {
        let words = local("LOCAL_RANK").unwrap_or_else(|| format!("host {}", who.host));
        return Some(plain("torchrun", words));
    }
    if let Some(words) = local("OMPI_COMM_WORLD_LOCAL_RANK").or_else(|| local("MPI_LOCALRANKID")) {
        return Some(plain("mpirun", words));
    }
    None
}

/// What the job's environment says of a rank on another host: the Slurm
/// node whose address it is (`nodes` asks `scontrol` for the job's nodes
/// and their addresses), or the line that finds the pod.
fn from_job(job: &Env, who: &Who, why: &str, nodes: &dyn Fn(&str) -> Nodes) -> Option<Place> {
    if let (Some(jobid), Some(list)) = (
        get(job, "SLURM_JOB_ID"),
        get(job, "SLURM_JOB_NODELIST").or_else(|| get(job, "SLURM_NODELIST")),
    ) {
        let words = format!("job {jobid}");
        let matched = nodes(list).map(|all| {
            all.into_iter()
                .filter(|(_, addr)| addr_is(addr, &who.host))
                .map(|(n, _)| n)
                .collect::<Vec<_>>()
        });
        return Some(match matched {
            Ok(m) if m.len() == 1 => slurm(m.into_iter().next(), words, who, why),
            Ok(m) if m.len() > 1 => Place {
                node: None,
                words: format!(
                    "{words}: one of {} (each has the address {})",
                    m.join(", "),
                    who.host
                ),
                ..slurm(None, String::new(), who, why)
            },
            Ok(_) => Place {
                node: None,
                words: format!("{words}: no node of {list} has the address {}", who.host),
                ..slurm(None, String::new(), who, why)
            },
            Err(e) => Place {
                node: None,
                words: format!("{words}: its nodes could not be asked ({e})"),
                ..slurm(None, String::new(), who, why)
            },
        });
    }
    if get(job, "KUBERNETES_SERVICE_HOST").is_some() {
        return Some(kubernetes(None, format!("pod at {}", who.host), &who.host));
    }
    if get(job, "TORCHELASTIC_RUN_ID").is_some() {
        return Some(plain("torchrun", format!("host {}", who.host)));
    }
    if get(job, "OMPI_COMM_WORLD_SIZE").is_some() {
        return Some(plain("mpirun", format!("host {}", who.host)));
    }
    None
}

/// Whether Slurm's `NodeAddr` (an address or a name) is `host`.
fn addr_is(node_addr: &str, host: &str) -> bool {
    match (node_addr.parse::<IpAddr>(), host.parse::<IpAddr>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => node_addr.eq_ignore_ascii_case(host),
    }
}

fn slurm(node: Option<String>, words: String, who: &Who, why: &str) -> Place {
    let rank = who.rank.map_or(String::new(), |r| format!("rank {r} "));
    let (take_out, next) = match &node {
        Some(n) => (
            Some(format!(
                "scontrol update nodename={} state=drain reason={}",
                shell_word(n),
                shell_word(&format!("nccl-find ras: {rank}{why}"))
            )),
            Some(format!("--exclude={}", shell_word(n))),
        ),
        None => (None, None),
    };
    Place {
        scheduler: "slurm",
        node,
        words,
        take_out,
        next,
    }
}

fn kubernetes(node: Option<String>, words: String, host: &str) -> Place {
    let take_out = match (&node, host.parse::<IpAddr>()) {
        (Some(n), _) => Some(format!("kubectl cordon {}", shell_word(n))),
        (None, Ok(ip)) => Some(format!(
            "kubectl cordon \"$(kubectl get pods -A --field-selector status.podIP={ip} -o \
             jsonpath='{{.items[0].spec.nodeName}}')\""
        )),
        (None, Err(_)) => None,
    };
    Place {
        scheduler: "kubernetes",
        node,
        words,
        take_out,
        next: None,
    }
}

fn plain(scheduler: &'static str, words: String) -> Place {
    Place {
        scheduler,
        node: None,
        words,
        take_out: None,
        next: None,
    }
}

/// The job's nodes and their `NodeAddr`, from `scontrol show node -o
/// LIST` (one line a node), bounded in time and size.
fn scontrol_nodes(list: &str) -> Nodes {
    if list.len() > 64 << 10 || list.bytes().any(|b| b.is_ascii_whitespace() || b == 0) {
        return Err("the node list is not one Slurm writes".into());
    }
    let mut child = Command::new("scontrol")
        .args(["show", "node", "-o", list])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("scontrol: {e}"))?;
    let mut out = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = (&mut out).take(16 << 20).read_to_end(&mut b);
        b
    });
    let until = Instant::now() + SCONTROL_WAIT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "scontrol gave no answer within {} s",
                    SCONTROL_WAIT.as_secs()
                ));
            }
        }
    }
    let text = reader.join().unwrap_or_default();
    Ok(nodes_of(&String::from_utf8_lossy(&text)))
}

/// `(NodeName, NodeAddr)` of each line of `scontrol show node -o`.
fn nodes_of(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let field = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(k))
                    .map(str::to_string)
            };
            Some((field("NodeName=")?, field("NodeAddr=")?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(host: &str) -> Who {
        Who {
            rank: Some(3),
            pid: Some(42),
            host: host.into(),
            gpu: Some(0),
        }
    }

    fn env(kv: &[(&str, &str)]) -> Env {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_slurm_task_names_its_node_step_and_task_and_the_drain_line() {
        let e = env(&[
            ("SLURM_JOB_ID", "812"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "3"),
            ("SLURM_LOCALID", "1"),
            ("SLURMD_NODENAME", "gpu07"),
        ]);
        let p = from_own(&e, Path::new("/nonexistent"), &who("10.0.0.7"), "missing").unwrap();
        assert_eq!(
            p.said(),
            "Slurm node gpu07 (job 812, step 0, task 3, local rank 1)"
        );
        assert_eq!(
            p.take_out.as_deref(),
            Some(
                "scontrol update nodename=gpu07 state=drain reason='nccl-find ras: rank 3 missing'"
            )
        );
        assert_eq!(p.next.as_deref(), Some("--exclude=gpu07"));
    }

    #[test]
    fn a_rank_on_another_node_is_matched_by_its_address() {
        let job = env(&[("SLURM_JOB_ID", "9"), ("SLURM_JOB_NODELIST", "gpu[01-02]")]);
        let nodes = |list: &str| -> Nodes {
            assert_eq!(list, "gpu[01-02]");
            Ok(nodes_of(
                "NodeName=gpu01 Arch=x86_64 NodeAddr=10.0.0.1 NodeHostName=gpu01\n\
                 NodeName=gpu02 Arch=x86_64 NodeAddr=10.0.0.2 NodeHostName=gpu02\n",
            ))
        };
        let p = from_job(&job, &who("10.0.0.2"), "missing", &nodes).unwrap();
        assert_eq!(p.said(), "Slurm node gpu02 (job 9)");
        assert_eq!(p.next.as_deref(), Some("--exclude=gpu02"));
        let p = from_job(&job, &who("10.9.9.9"), "missing", &nodes).unwrap();
        assert_eq!(
            (p.said(), p.take_out),
            (
                "Slurm job 9: no node of gpu[01-02] has the address 10.9.9.9".to_string(),
                None
            )
        );
        let failed =
            |_: &str| -> Result<Vec<(String, String)>, String> { Err("no scontrol".into()) };
        let p = from_job(&job, &who("10.0.0.2"), "missing", &failed).unwrap();
        assert!(
            p.words
                .ends_with("its nodes could not be asked (no scontrol)"),
            "{p:?}"
        );
    }

    #[test]
    fn a_pod_gets_the_cordon_line_and_hostile_values_are_quoted() {
        let e = env(&[
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("HOSTNAME", "train-worker-1"),
            ("NODE_NAME", "ip-10-0-0-7"),
        ]);
        let p = from_own(&e, Path::new("/nonexistent"), &who("10.244.1.5"), "missing").unwrap();
        assert_eq!(
            p.said(),
            "Kubernetes pod train-worker-1 on node ip-10-0-0-7"
        );
        assert_eq!(p.take_out.as_deref(), Some("kubectl cordon ip-10-0-0-7"));
        // Another pod: the line that finds its node by the pod's address.
        let p = from_job(&e, &who("10.244.1.9"), "missing", &|_| Ok(vec![])).unwrap();
        assert_eq!(
            p.take_out.as_deref(),
            Some(
                "kubectl cordon \"$(kubectl get pods -A --field-selector status.podIP=10.244.1.9 \
                 -o jsonpath='{.items[0].spec.nodeName}')\""
            )
        );
        assert_eq!(shell_word("$(touch x)"), "'$(touch x)'");
        assert_eq!(shell_word("a'b"), "'a'\\''b'");
        assert_eq!(shell_word("\u{1b}[2J"), "'\\u{1b}[2J'");
        let e = env(&[("SLURM_JOB_ID", "1"), ("SLURMD_NODENAME", "n1;reboot")]);
        let p = from_own(&e, Path::new("/nonexistent"), &who("10.0.0.1"), "missing").unwrap();
        assert_eq!(p.next.as_deref(), Some("--exclude='n1;reboot'"));
    }

    #[test]
    fn a_pods_namespace_and_name_come_from_the_files_it_sees() {
        let root = std::env::temp_dir().join(format!("nf-place-{}", std::process::id()));
        let sa = root.join("var/run/secrets/kubernetes.io/serviceaccount");
        std::fs::create_dir_all(&sa).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(sa.join("namespace"), "training\n").unwrap();
        std::fs::write(root.join("etc/hostname"), "job-worker-0\n").unwrap();
        let e = env(&[("KUBERNETES_SERVICE_HOST", "10.96.0.1")]);
        let p = from_own(&e, &root, &who("10.244.1.5"), "missing").unwrap();
        assert_eq!(p.said(), "Kubernetes pod training/job-worker-0");
        // A file that is not a name is not taken.
        std::fs::write(sa.join("namespace"), "a b;$(x)").unwrap();
        let p = from_own(&e, &root, &who("10.244.1.5"), "missing").unwrap();
        assert_eq!(p.said(), "Kubernetes pod job-worker-0");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn torchrun_and_mpirun_name_the_host_and_local_rank() {
        let e = env(&[("TORCHELASTIC_RUN_ID", "x"), ("LOCAL_RANK", "2")]);
        assert_eq!(
            from_own(&e, Path::new("/nonexistent"), &who("10.0.0.3"), "")
                .unwrap()
                .said(),
            "torchrun local rank 2 on 10.0.0.3"
        );
        let e = env(&[("OMPI_COMM_WORLD_LOCAL_RANK", "5")]);
        assert_eq!(
            from_own(&e, Path::new("/nonexistent"), &who("10.0.0.3"), "")
                .unwrap()
                .said(),
            "mpirun local rank 5 on 10.0.0.3"
        );
        assert_eq!(
            from_own(&env(&[]), Path::new("/nonexistent"), &who("10.0.0.3"), ""),
            None
        );
        assert!(on_this_host("127.0.0.1") && !on_this_host("192.0.2.99"));
        assert!(!on_this_host("node7"));
        assert_eq!(
            parse_env(b"A=1\0B=x=y\0junk\0"),
            env(&[("A", "1"), ("B", "x=y")])
        );
    }
}
