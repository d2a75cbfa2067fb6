//! `nccl-find explain`: reads a job's own logs (one file per rank, node
//! or pod, or one file with every rank's lines and a launcher's prefixes,
//! or standard input), and names the cause of the failure, the ranks and
//! hosts that show it, the lines that show it, and the fix, last. What a
//! line means comes from the one table of `rules::messages`; this room
//! reads (`read`), takes lines apart (`line`), judges (`judge`), adds what
//! this host knows (`here`, with `--here`) and prints (`output`). Exit 0:
//! the logs show a job that ended well; 1: a failure or a hang (with its
//! cause, or saying that the logs show none); 2: nothing could be read.

pub(crate) mod here;
pub(crate) mod judge;
pub(crate) mod line;
pub(crate) mod output;
pub(crate) mod read;

use std::collections::HashMap;
use std::io::IsTerminal;
use std::process::ExitCode;

use crate::rules::messages::{Hit, Known, Shape, UNKNOWN_WARNING};
use crate::style;
use judge::{Event, Verdict};

/// `nccl-find explain`'s flags.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The job's logs: one file per rank, node or pod, or one with every
    /// rank's lines (standard input when none is named, or -)
    #[arg(value_name = "FILE")]
    files: Vec<String>,
    /// The answer as JSON
    #[arg(long)]
    json: bool,
    /// Add what this host, a node of the job, knows: its interfaces and
    /// routes, for the fix
    #[arg(long)]
    here: bool,
}

/// At most this many lines of one row are kept from one input; the rest
/// are counted. Memory stays bounded whatever the logs hold.
const PER_ROW: usize = 64;
/// At most this many lines are kept in all.
const EVENTS: usize = 100_000;

/// Runs `nccl-find explain`.
pub(crate) fn run(args: &Args, color: style::When) -> ExitCode {
    let mut names = args.files.clone();
    if names.is_empty() {
        if std::io::stdin().is_terminal() {
            style::complain(
                "explain reads a job's logs: name them (nccl-find explain slurm-*.out), or pipe them in (kubectl logs job/x | nccl-find explain)",
            );
            return ExitCode::from(2);
        }
        names.push("-".into());
    }
    let known = Known::new();
    // NCCL's warnings that no row knows are kept too: said in passing.
    let finder = read::finder(&Known::words(&[" NCCL WARN "]));
    let mut events: Vec<Event> = Vec::new();
    let mut per_row: HashMap<(usize, *const ()), usize> = HashMap::new();
    let mut take = |c: read::Candidate| {
        if events.len() >= EVENTS {
            return;
        }
        let parsed = line::parse(&c.text);
        let shape = Shape {
            level: parsed.level,
            file: parsed.file,
        };
        let hit = match known.read(parsed.text, shape) {
            Some(hit) => hit,
            None if parsed.level == Some("WARN") => Hit {
                row: &UNKNOWN_WARNING,
                says: UNKNOWN_WARNING.says,
                fields: vec![("words", parsed.text.trim().to_string())],
            },
            None => return,
        };
        let n = per_row
            .entry((c.input, hit.row as *const _ as *const ()))
            .or_default();
        *n += 1;
        if *n <= PER_ROW {
            events.push(Event::new(c.input, c.line, &c.text, &parsed, hit));
        }
    };
    let inputs = read::read_all(&names, &finder, &mut take);
    if !inputs.iter().any(|i| i.read) {
        return unreadable(&inputs, args.json, color);
    }
    let hw = std::cell::OnceCell::new();
    let extra = |name: &str, fields: &std::collections::BTreeMap<&'static str, String>| {
        if !args.here {
            return None;
        }
        match name {
            "route" => here::route_here(fields),
            "plugins_here" => Some(here::plugins(hw.get_or_init(here::rdma))),
            "peermem_here" => Some(here::peermem(hw.get_or_init(here::rdma))),
            _ => None,
        }
    };
    let ends: Vec<u64> = inputs.iter().map(|i| i.lines).collect();
    let answer = judge::judge(&events, &ends, &extra);
    let code = match answer.verdict {
        Verdict::NoFailure => 0,
        Verdict::Cause | Verdict::NoCause => 1,
    };
    if args.json {
        let v = output::to_json(&answer, &inputs, code);
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("JSON from plain values")
        );
    } else {
        print!("{}", style::human(&output::text(&answer, &inputs), color));
    }
    ExitCode::from(code)
}

/// Nothing could be read: why, for each input, and what to do, last.
fn unreadable(inputs: &[read::Input], json: bool, color: style::When) -> ExitCode {
    let why: Vec<String> = inputs
        .iter()
        .map(|i| format!("{}: {}", i.name, i.note.as_deref().unwrap_or("empty")))
        .collect();
    let first = format!("Nothing could be read: {}.", why.join("; "));
    let last = "Fix: name the job's log files (nccl-find explain slurm-*.out), or pipe them in (… | nccl-find explain -).";
    if json {
        let v = serde_json::json!({
            "schema": 1,
            "verdict": "unreadable",
            "class": null,
            "headline": first,
            "inputs": output::inputs_json(inputs),
            "fix": last,
            "exit": 2,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).expect("JSON from plain values")
        );
    } else {
        print!("{}", style::human(&format!("{first}\n{last}\n"), color));
    }
    ExitCode::from(2)
}
