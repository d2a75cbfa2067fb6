//! What a launcher is told after a verdict that names nodes: the healthy
//! set in its own syntax (Slurm's `--exclude` and the drain line, mpirun's
//! hosts, torchrun's `--nnodes`, Kubernetes' cordon), and, asked for, the
//! best N nodes by the pairs' figures.

use nccl_rendezvous::pairs::Pair;
use nccl_rendezvous::Gathered;
use serde_json::{json, Value};

use super::hosts_of;
use crate::style::shell_word;

/// The scheduler or launcher the job ran under, as far as the line to
/// paste goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Under {
    Slurm,
    Mpirun,
    Torchrun,
    Kubernetes,
    Other,
}

impl Under {
    /// From the exchange's row and whether Slurm started the job.
    pub(crate) fn of(backend: &str, slurm: bool, kubernetes: bool) -> Under {
        match backend {
            _ if slurm => Under::Slurm,
            "kubernetes" => Under::Kubernetes,
            "torchrun-store" | "torchrun-tcp" if kubernetes => Under::Kubernetes,
            "torchrun-store" | "torchrun-tcp" => Under::Torchrun,
            "pmix" | "pmi1" => Under::Mpirun,
            _ => Under::Other,
        }
    }
}

/// The hosts not in `bad`, in rank order, each with its ranks.
fn good<'a>(g: &'a Gathered, bad: &[String]) -> Vec<(&'a str, usize)> {
    let mut out: Vec<(&str, usize)> = Vec::new();
    for h in hosts_of(&g.cards, 0..g.cards.len()) {
        if !bad.iter().any(|b| b == h) {
            out.push((h, g.cards.iter().filter(|c| c.host == h).count()));
        }
    }
    out
}

/// The lines that leave `bad` out of the next run, under `under`; nothing
/// where nothing is bad.
pub(crate) fn lines(g: &Gathered, bad: &[String], why: &str, under: Under) -> Vec<String> {
    if bad.is_empty() {
        return Vec::new();
    }
    let good = good(g, bad);
    let bad_list: Vec<String> = bad.iter().map(|h| shell_word(h)).collect();
    let good_names: Vec<String> = good.iter().map(|(h, _)| shell_word(h)).collect();
    let shown = match good_names.len() {
        n if n > 8 => format!(
            "{}, and {} more (each in --json)",
            good_names[..8].join(","),
            n - 8
        ),
        _ => good_names.join(","),
    };
    let head = format!(
        "leave out {} ({} good node(s) left: {shown})",
        bad_list.join(", "),
        good.len(),
    );
    let mut out = vec![head];
    match under {
        Under::Slurm => {
            out.push(format!("  srun --exclude={} ...", bad_list.join(",")));
            for b in bad {
                out.push(format!(
                    "  scontrol update nodename={} state=drain reason={}",
                    shell_word(b),
                    shell_word(&format!("nccl-find smoke: {why}"))
                ));
            }
        }
        Under::Mpirun => {
            let hosts: Vec<String> = good
                .iter()
                .map(|(h, n)| format!("{}:{n}", shell_word(h)))
                .collect();
            out.push(format!("  mpirun --host {} ...", hosts.join(",")));
        }
        Under::Torchrun => out.push(format!(
            "  torchrun --nnodes={} ... on {} only",
            good.len(),
            good_names.join(", ")
        )),
        Under::Kubernetes => {
            for b in bad {
                out.push(format!(
                    "  kubectl cordon \"$(kubectl get pod {} -o jsonpath='{{.spec.nodeName}}')\"",
                    shell_word(b)
                ));
            }
        }
        Under::Other => {}
    }
    out
}

/// Each host's figure: the lower of its sending and receiving rates in
/// round one (`None` where it has neither).
fn score(g: &Gathered, host: &str) -> Option<f64> {
    let on = |r: usize| g.cards.get(r).is_some_and(|c| c.host == host);
    g.pairs
        .iter()
        .filter(|p| p.round == 1 && (on(p.from) || on(p.to)))
        .map(|p: &Pair| p.rate().unwrap_or(0.0))
        .reduce(f64::min)
}

/// The best `n` hosts, by their figure, leaving out `bad`: fewer where
/// fewer are good.
pub(crate) fn best(g: &Gathered, bad: &[String], n: usize) -> Vec<String> {
    let mut scored: Vec<(&str, f64)> = good(g, bad)
        .into_iter()
        .map(|(h, _)| (h, score(g, h).unwrap_or(0.0)))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    scored
        .into_iter()
        .take(n)
        .map(|(h, _)| h.to_string())
        .collect()
}

/// `leave_out` in `--json`.
pub(crate) fn json(g: &Gathered, bad: &[String], under: Under, want: Option<usize>) -> Value {
    let good: Vec<&str> = good(g, bad).into_iter().map(|(h, _)| h).collect();
    json!({
        "bad": bad,
        "good": good,
        "slurm_exclude": (!bad.is_empty()).then(|| bad.join(",")),
        "under": format!("{under:?}").to_lowercase(),
        "best": want.map(|n| best(g, bad, n)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smoke::nodes::tests::{made, HOST};

    fn four() -> Gathered {
        let cards = ["a", "a", "b", "b", "c", "c", "d", "d"]
            .iter()
            .map(|h| made(h, HOST, &["eth0"]))
            .collect();
        let mut g = Gathered::new(cards, Vec::new());
        g.pairs = vec![
            Pair::new(1, 2, 1, 400, 1),
            Pair::new(3, 4, 1, 2, 1),
            Pair::new(5, 6, 1, 300, 1),
            Pair::new(7, 0, 1, 500, 1),
        ];
        g
    }

    #[test]
    fn each_launcher_gets_its_own_line() {
        let g = four();
        let bad = vec!["b".to_string()];
        let why = "sends slowly";
        assert_eq!(
            lines(&g, &bad, why, Under::Slurm),
            [
                "leave out b (3 good node(s) left: a,c,d)",
                "  srun --exclude=b ...",
                "  scontrol update nodename=b state=drain reason='nccl-find smoke: sends slowly'"
            ]
        );
        assert_eq!(
            lines(&g, &bad, why, Under::Mpirun)[1],
            "  mpirun --host a:2,c:2,d:2 ..."
        );
        assert_eq!(
            lines(&g, &bad, why, Under::Torchrun)[1],
            "  torchrun --nnodes=3 ... on a, c, d only"
        );
        assert_eq!(
            lines(&g, &bad, why, Under::Kubernetes)[1],
            "  kubectl cordon \"$(kubectl get pod b -o jsonpath='{.spec.nodeName}')\""
        );
        assert!(lines(&g, &[], why, Under::Slurm).is_empty());
        // A hostile host name is quoted where it is pasted.
        let evil = vec!["$(touch x)".to_string()];
        assert!(lines(&g, &evil, why, Under::Slurm)[1].contains("--exclude='$(touch x)'"));
    }

    #[test]
    fn the_best_n_leave_out_the_bad_and_rank_by_the_slower_direction() {
        let g = four();
        // a: sends 400, receives 500 -> 400; b: 2; c: 300 (sends), receives 2 -> 2; d: 300/500 -> 300.
        assert_eq!(best(&g, &["b".into()], 2), ["a", "d"]);
        assert_eq!(best(&g, &["b".into()], 9), ["a", "d", "c"]);
        assert_eq!(
            json(&g, &["b".into()], Under::Slurm, Some(1))["best"],
            json!(["a"])
        );
    }

    #[test]
    fn the_launcher_is_read_from_the_row_and_the_scheduler() {
        assert_eq!(Under::of("pmix", true, false), Under::Slurm);
        assert_eq!(Under::of("pmi1", false, false), Under::Mpirun);
        assert_eq!(Under::of("torchrun-tcp", false, true), Under::Kubernetes);
        assert_eq!(Under::of("torchrun-store", false, false), Under::Torchrun);
        assert_eq!(Under::of("tcp", false, false), Under::Other);
    }
}
