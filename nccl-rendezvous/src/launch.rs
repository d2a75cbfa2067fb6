//! What a launcher's row is made of: the environment as an input
//! ([`LaunchEnv`]), a row ([`Backend`]) and what it reads ([`Plan`]), and
//! the helpers every row's `detect` uses. The rows themselves are in
//! [`crate::launchers`].

use crate::job::Exchange;

/// The environment, as an input: [`LaunchEnv::from_process`] in the
/// command, a list of pairs in tests.
#[derive(Debug, Clone, Default)]
pub struct LaunchEnv {
    /// Name and value; `None`: a value that is not UTF-8.
    vars: Vec<(String, Option<String>)>,
    /// Slurm's `scontrol`, asked for a node's address where the node's name
    /// does not resolve; `None`: never asked.
    scontrol: Option<std::path::PathBuf>,
    /// The hosts file a Kubernetes pod's DNS name is read from; `None`:
    /// never read.
    hosts: Option<std::path::PathBuf>,
}

impl LaunchEnv {
    /// This process's environment (variables whose names are not UTF-8 are
    /// no launcher's and are left out).
    pub fn from_process() -> LaunchEnv {
        let mut vars = Vec::new();
        for (k, v) in std::env::vars_os() {
            if let Ok(k) = k.into_string() {
                vars.push((k, v.into_string().ok()));
            }
        }
        LaunchEnv {
            vars,
            scontrol: Some("scontrol".into()),
            hosts: Some("/etc/hosts".into()),
        }
    }

    /// The same environment, with `scontrol` at `path` to ask for a Slurm
    /// node's address where its name does not resolve (the process's own
    /// environment asks the `scontrol` on `PATH`; a list of pairs, none).
    pub fn with_scontrol(mut self, path: std::path::PathBuf) -> LaunchEnv {
        self.scontrol = Some(path);
        self
    }

    /// The `scontrol` to ask, where there is one.
    pub(crate) fn scontrol(&self) -> Option<&std::path::Path> {
        self.scontrol.as_deref()
    }

    /// An environment of these pairs (tests).
    pub fn from_pairs(pairs: &[(&str, &str)]) -> LaunchEnv {
        LaunchEnv {
            vars: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Some(v.to_string())))
                .collect(),
            scontrol: None,
            hosts: None,
        }
    }

    /// The same environment, with the hosts file at `path` (a pod's own
    /// line names its DNS name).
    pub fn with_hosts_file(mut self, path: std::path::PathBuf) -> LaunchEnv {
        self.hosts = Some(path);
        self
    }

    /// The DNS domain the hosts file gives `name`: `svc.ns.svc.cluster.local`
    /// of a line that names both `name` and `name.svc.ns.svc.cluster.local`
    /// (as the kubelet writes a pod's own line). `None` where there is none,
    /// or no hosts file to read.
    pub(crate) fn hosts_domain(&self, name: &str) -> Option<String> {
        let (bytes, _) = crate::fsafe::read_small(self.hosts.as_deref()?, 1 << 20).ok()??;
        let text = String::from_utf8_lossy(&bytes);
        let dotted = format!("{name}.");
        text.lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .filter(|l| l.split_whitespace().skip(1).any(|n| n == name))
            .find_map(|l| {
                l.split_whitespace()
                    .skip(1)
                    .find_map(|n| n.strip_prefix(&dotted).filter(|d| !d.is_empty()))
                    .map(str::to_string)
            })
    }

    /// A variable's value; an empty one counts as unset. A value that is
    /// not UTF-8 is an error naming the variable.
    pub fn get(&self, name: &str) -> Result<Option<&str>, String> {
        match self.vars.iter().rev().find(|(k, _)| k == name) {
            None => Ok(None),
            Some((_, Some(v))) if v.is_empty() => Ok(None),
            Some((_, Some(v))) => Ok(Some(v)),
            Some((_, None)) => Err(format!("{name} is not UTF-8 text")),
        }
    }

    /// Whether the variable is set (to anything, even a bad value).
    pub fn has(&self, name: &str) -> bool {
        !matches!(self.get(name), Ok(None))
    }

    /// A variable holding a whole number.
    pub fn number(&self, name: &str) -> Result<Option<usize>, String> {
        match self.get(name)? {
            None => Ok(None),
            // Digits only; a number too large for this machine is named so.
            Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => match v.parse() {
                Ok(n) => Ok(Some(n)),
                Err(_) => Err(format!(
                    "{name}=\"{}\" is too large (at most {})",
                    crate::untrusted::shown(v, 40),
                    usize::MAX
                )),
            },
            Some(v) => Err(not_number(name, v)),
        }
    }

    /// The first of `names` that holds a number, and which one it was.
    pub fn first_number(
        &self,
        names: &[&'static str],
    ) -> Result<Option<(usize, &'static str)>, String> {
        for n in names {
            if let Some(v) = self.number(n)? {
                return Ok(Some((v, n)));
            }
        }
        Ok(None)
    }
}

fn not_number(name: &str, v: &str) -> String {
    format!(
        "{name}=\"{}\" is not a number",
        crate::untrusted::shown(v, 40)
    )
}

/// One way the processes of a job meet: a row of [`crate::BACKENDS`].
#[derive(Debug)]
pub struct Backend {
    /// A short id, as the report and `--json` give it.
    pub id: &'static str,
    /// The launcher, in words.
    pub launcher: &'static str,
    /// The variables that give it away.
    pub recognised_by: &'static str,
    /// How the unique id and the barrier travel.
    pub carries: &'static str,
    /// How the ranks that never came are named.
    pub never_came: &'static str,
    /// `None`: not this launcher. `Some(Err)`: this launcher, but its
    /// environment is half set (the message says what is missing and what
    /// to pass instead).
    pub detect: fn(&LaunchEnv) -> Option<Result<Plan, String>>,
}

/// What a row read from the environment: this process's place, and how to
/// meet the others.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The row's id.
    pub backend: &'static str,
    /// The launcher, in words.
    pub launcher: &'static str,
    /// This process's rank.
    pub rank: usize,
    /// How many processes.
    pub world: usize,
    /// This process's rank on its node, for its GPU.
    pub local_rank: Option<usize>,
    /// How to meet.
    pub exchange: Exchange,
    /// The job's identity, to keep two jobs on one port apart (never
    /// printed); `None`: the launcher gives none.
    pub token: Option<String>,
    /// The variables it came from.
    pub from: Vec<&'static str>,
    /// For our TCP rendezvous at an address the launcher gave: where it
    /// came from and how to choose another, in words; a failure to reach
    /// or hold the address says so ([`crate::Job::origin`]).
    pub origin: Option<String>,
}

/// Reads a required number for a launcher's row: the value, or what is
/// missing, in words, with what to pass instead.
pub(crate) fn need(
    env: &LaunchEnv,
    launcher: &str,
    name: &'static str,
    from: &mut Vec<&'static str>,
) -> Result<usize, String> {
    match env.number(name) {
        Ok(Some(v)) => {
            from.push(name);
            Ok(v)
        }
        Ok(None) => Err(format!(
            "{launcher}: {name} is not set, though {} are: the launcher's environment is half set. Start \
             every process with the launcher, or pass --rank, --world-size and --init tcp://HOST:PORT",
            from.join(", ")
        )),
        Err(e) => Err(format!(
            "{launcher}: {e}. Pass --rank, --world-size and --init tcp://HOST:PORT instead"
        )),
    }
}

/// A host name or address as given (brackets around an IPv6 address
/// dropped), when it is one: letters, digits, `.`, `-`, `_`, `:`, `%`.
pub(crate) fn host_name(h: &str) -> Option<String> {
    let h = h
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(h);
    let ok = !h.is_empty()
        && h.len() <= 255
        && h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:%".contains(&b));
    ok.then(|| h.to_string())
}

/// `value` of variable `name` as a host ([`host_name`]), or the
/// launcher's words for one that is not.
pub(crate) fn host_var(launcher: &str, name: &str, value: &str) -> Result<String, String> {
    host_name(value).ok_or_else(|| {
        format!(
            "{launcher}: {name}={} is not a host name",
            crate::words::printable(value, 60)
        )
    })
}

/// A number read from variable `name` as a TCP port (1 to 65535), or the
/// launcher's words for one that is not.
pub(crate) fn port_number(launcher: &str, name: &str, v: usize) -> Result<u16, String> {
    u16::try_from(v)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("{launcher}: {name}={v} is not a port number"))
}

/// The first of `names` that holds a number, its name noted in `from` (the
/// variables a plan came from).
pub fn optional(
    env: &LaunchEnv,
    names: &[&'static str],
    from: &mut Vec<&'static str>,
) -> Result<Option<usize>, String> {
    Ok(env.first_number(names)?.map(|(v, n)| {
        from.push(n);
        v
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_read_strictly() {
        let env = LaunchEnv::from_pairs(&[
            ("A", "12"),
            ("B", ""),
            ("C", "1x"),
            ("D", "99999999999999999999"),
            ("A", "3"),
        ]);
        assert_eq!(env.number("A"), Ok(Some(3)));
        assert_eq!(env.number("B"), Ok(None));
        assert!(!env.has("B"));
        assert_eq!(env.number("C"), Err("C=\"1x\" is not a number".into()));
        assert_eq!(
            env.number("D"),
            Err("D=\"99999999999999999999\" is too large (at most 18446744073709551615)".into())
        );
        assert_eq!(env.number("E"), Ok(None));
        let bad = LaunchEnv {
            vars: vec![("R".into(), None)],
            scontrol: None,
            hosts: None,
        };
        assert_eq!(bad.get("R"), Err("R is not UTF-8 text".into()));
        assert!(bad.has("R"));
    }
}
