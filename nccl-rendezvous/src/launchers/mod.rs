//! The table of exchanges, [`BACKENDS`]: which launcher started this
//! process, read from its environment, and how its processes meet.
//!
//! Each row names a launcher, the variables that give it away, how NCCL's
//! unique id and the "all here" barrier travel, and how ranks that never
//! came are named. The first row that recognises the environment wins; an
//! explicit `--init tcp://…` or `file://…` wins over every row. Adding a
//! launcher is one module (its `detect` and, for a store of its own, a
//! [`Connect`](crate::kv::Connect)) and one row here.

pub(crate) mod kubernetes;
pub(crate) mod pmi1;
pub(crate) mod pmix;
pub(crate) mod slurm;
pub(crate) mod torchrun;

use crate::launch::{Backend, LaunchEnv, Plan};

/// The exchanges, in the order they are tried.
pub static BACKENDS: &[Backend] = &[
    crate::launchers::torchrun::AGENT_STORE,
    crate::launchers::kubernetes::KUBERNETES,
    crate::launchers::torchrun::NO_AGENT_STORE,
    crate::launchers::pmix::PMIX,
    crate::launchers::pmi1::PMI1,
    crate::launchers::slurm::SLURM,
];

/// The first row that recognises `env`: `Ok(None)` when none does.
pub fn detect(env: &LaunchEnv) -> Result<Option<Plan>, String> {
    for b in BACKENDS {
        if let Some(p) = (b.detect)(env) {
            return p.map(Some);
        }
    }
    Ok(None)
}

/// The table of launchers as Markdown, in the order the rows are tried: what
/// the README shows.
pub fn table_markdown() -> String {
    let mut t = String::from(
        "| exchange | launcher | recognised by | how the id and the barrier travel | ranks that never came |\n\
         |---|---|---|---|---|\n",
    );
    for b in BACKENDS {
        t.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            b.id, b.launcher, b.recognised_by, b.carries, b.never_came
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_its_words() {
        let mut ids = Vec::new();
        for b in BACKENDS {
            assert!(!ids.contains(&b.id), "{} twice", b.id);
            ids.push(b.id);
            for w in [b.launcher, b.recognised_by, b.carries, b.never_came] {
                assert!(!w.is_empty() && !w.contains('\n'), "{}", b.id);
            }
        }
    }
}
