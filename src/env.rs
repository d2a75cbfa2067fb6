//! The environment the probe reads: the process's own, or a fixed set of
//! variables given by a test or a tool. Every read is recorded, so that a
//! report can print each variable as `NAME = value` or `NAME unset`, and a
//! build script can emit `rerun-if-env-changed` for each.

use std::cell::RefCell;
use std::ffi::{OsStr, OsString};

/// A source of environment variables.
///
/// [`Env::process`] reads the real environment; [`Env::fixed`] holds a
/// fixed map, so a test can drive the whole probe without touching the
/// process environment.
#[derive(Debug, Default)]
pub struct Env {
    /// A fixed set of variables; where a name is given twice, the last wins.
    fixed: Option<Vec<(OsString, OsString)>>,
    reads: RefCell<Vec<EnvRead>>,
    /// Set while reads only inform (the run-time loader check).
    informing: std::cell::Cell<bool>,
}

/// One variable the probe looked at, and what it held.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnvRead {
    /// The variable's name, as read (target-prefixed names included).
    pub name: String,
    /// Its value, or `None` when it was unset.
    pub value: Option<OsString>,
    /// Whether it can change the answer (a rerun trigger for a build
    /// script). Variables read only for the run-time loader check do not.
    decides: bool,
}

impl EnvRead {
    /// True when the variable was set to a non-empty value.
    pub fn is_set(&self) -> bool {
        self.value.as_ref().is_some_and(|v| !v.is_empty())
    }

    /// Whether the variable can change the probe's answer, so that a build
    /// script reruns when it changes. Variables read only to say what the
    /// run-time loader will do (`LD_LIBRARY_PATH`) cannot.
    pub fn decides(&self) -> bool {
        self.decides
    }
}

impl std::fmt::Display for EnvRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            None => write!(f, "{} unset", self.name),
            Some(v) if v.is_empty() => write!(f, "{} = \"\" (empty, treated as unset)", self.name),
            Some(v) => write!(f, "{} = {}", self.name, crate::lines::escape_os(v)),
        }
    }
}

/// A variable's value together with the exact name it was found under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Var {
    pub name: String,
    pub value: OsString,
}

impl Var {
    /// The variable as reports show it: `NAME=value`, its control
    /// characters and bytes that are not UTF-8 escaped.
    pub(crate) fn setting(&self) -> String {
        format!("{}={}", self.name, crate::lines::escape_os(&self.value))
    }
}

impl Env {
    /// The environment of this process.
    pub fn process() -> Env {
        Env {
            fixed: None,
            reads: RefCell::default(),
            informing: Default::default(),
        }
    }

    /// A fixed environment: exactly these variables, nothing else.
    #[cfg(test)]
    pub fn from_vars<I, K, V>(vars: I) -> Env
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        let mut fixed = Vec::new();
        for (k, v) in vars {
            fixed.push((k.into(), v.into()));
        }
        Env::fixed(fixed)
    }

    /// A fixed environment: exactly these variables, nothing else.
    pub(crate) fn fixed(vars: Vec<(OsString, OsString)>) -> Env {
        Env {
            fixed: Some(vars),
            reads: RefCell::default(),
            informing: Default::default(),
        }
    }

    /// Every variable read so far, in the order first read, without repeats.
    pub fn reads(&self) -> Vec<EnvRead> {
        self.reads.borrow().clone()
    }

    /// Reads one variable without recording the read: for variables cargo
    /// itself sets for build scripts (`OUT_DIR`), which decide how the probe
    /// runs, not what it finds.
    pub(crate) fn peek(&self, name: &str) -> Option<OsString> {
        match &self.fixed {
            Some(vars) => {
                for (k, v) in vars.iter().rev() {
                    if k == OsStr::new(name) {
                        return Some(v.clone());
                    }
                }
                None
            }
            None => std::env::var_os(name),
        }
    }

    /// Reads one variable exactly as named, and records the read.
    pub(crate) fn raw(&self, name: &str) -> Option<OsString> {
        let value = self.peek(name);
        let decides = !self.informing.get();
        let mut reads = self.reads.borrow_mut();
        match reads.iter_mut().find(|r| r.name == name) {
            // A read that decides makes the variable decide.
            Some(r) => r.decides |= decides,
            None => reads.push(EnvRead {
                name: name.to_string(),
                value: value.clone(),
                decides,
            }),
        }
        value
    }

    /// Runs `f` with its reads marked as informing only: they are reported,
    /// but are no rerun trigger (unless something else reads them too).
    pub(crate) fn informing<T>(&self, f: impl FnOnce() -> T) -> T {
        let before = self.informing.replace(true);
        let out = f();
        self.informing.set(before);
        out
    }

    /// Reads `<TARGET>_<NAME>` first, then `<NAME>`, as openssl-sys does.
    /// An empty value counts as unset (and is shown as such in reports).
    pub(crate) fn var(&self, prefix: &str, name: &str) -> Option<Var> {
        let mut names = Vec::with_capacity(2);
        if !prefix.is_empty() {
            names.push(format!("{prefix}_{name}"));
        }
        names.push(name.to_string());
        self.first_set(names)
    }

    /// The first of these variables that is set to a non-empty value,
    /// each read recorded up to that one.
    pub(crate) fn first_set(&self, names: Vec<String>) -> Option<Var> {
        for name in names {
            match self.raw(&name) {
                Some(value) if !value.is_empty() => return Some(Var { name, value }),
                _ => {}
            }
        }
        None
    }
}

/// `x86_64-unknown-linux-gnu` → `X86_64_UNKNOWN_LINUX_GNU`.
pub(crate) fn target_prefix(triple: &str) -> String {
    let mut out = String::with_capacity(triple.len());
    for c in triple.chars() {
        out.push(if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixed_variable_wins_and_both_reads_are_recorded() {
        let env = Env::from_vars([
            ("X86_64_UNKNOWN_LINUX_GNU_NCCL_HOME", "/pre"),
            ("NCCL_HOME", "/plain"),
        ]);
        let v = env.var("X86_64_UNKNOWN_LINUX_GNU", "NCCL_HOME").unwrap();
        assert_eq!(v.name, "X86_64_UNKNOWN_LINUX_GNU_NCCL_HOME");
        assert_eq!(v.value, "/pre");
        // The plain one was not needed, so it was not read.
        assert_eq!(env.reads().len(), 1);
    }

    #[test]
    fn plain_variable_is_used_when_prefixed_is_unset_or_empty() {
        let env = Env::from_vars([("A_NCCL_ROOT", ""), ("NCCL_ROOT", "/r")]);
        let v = env.var("A", "NCCL_ROOT").unwrap();
        assert_eq!(v.name, "NCCL_ROOT");
        let reads = env.reads();
        assert_eq!(
            reads[0].to_string(),
            "A_NCCL_ROOT = \"\" (empty, treated as unset)"
        );
        assert_eq!(reads[1].to_string(), "NCCL_ROOT = /r");
        assert!(env.var("A", "NCCL_DIR").is_none());
        assert_eq!(env.reads()[3].to_string(), "NCCL_DIR unset");
    }

    #[test]
    fn prefix_is_upper_snake_case() {
        assert_eq!(
            target_prefix("aarch64-unknown-linux-gnu"),
            "AARCH64_UNKNOWN_LINUX_GNU"
        );
    }
}
