//! What the smoke test prints: the text report, line by line as the run
//! goes (its table, each collective named before its rows, the nodes'
//! report), its last lines, and the same as one JSON document. Nothing
//! here judges: the lines are made from what was worked out before.

use std::io::Write;

use nccl_rendezvous::Meeting;
use nccl_smoke::{self as smoke, Event};
use serde_json::json;

use super::nodes;
use crate::rules::settings::{InForce, Source};
use crate::style;

/// NCCL's log for this run ([`smoke::Capture`]), copied to stderr at the
/// end where it would otherwise have broken `--json`.
pub(super) struct Captured(pub(super) smoke::Capture);

impl Drop for Captured {
    fn drop(&mut self) {
        let mut err = std::io::stderr().lock();
        for line in self.0.echo_lines() {
            say(&mut err, &line);
        }
    }
}

/// The report's first lines, before the run: how the processes meet, the
/// settings in force, and what the capture of NCCL's log swept away (an
/// event too, for `--json`).
pub(super) fn preamble(
    as_json: bool,
    who: &str,
    meeting: Option<&Meeting>,
    settings: &InForce,
    capture: &Captured,
) -> Vec<Event> {
    let mut out = std::io::stdout();
    if let (Some(m), false) = (meeting, as_json) {
        say(&mut out, &format!("{who}note: {}", m.line()));
    }
    if let (Some(line), false) = (settings_line(settings), as_json) {
        say(&mut out, &format!("{who}{line}"));
    }
    let mut events = Vec::new();
    if let Some(n) = capture.0.swept_note() {
        if !as_json {
            say(&mut out, &format!("{who}note: {n}"));
        }
        events.push(Event::Note(n));
    }
    events
}

/// What the text report's last lines say, all of it worked out before
/// they are printed.
pub(super) struct Last<'a> {
    /// This rank's prefix: `[rank 3] `.
    pub(super) who: &'a str,
    /// The nodes the pairs over NCCL named (problems), a line each.
    pub(super) problems: &'a [String],
    /// The ranks whose times were clear outliers, a line each.
    pub(super) slow: &'a [String],
    /// Rank 0's lines that leave bad nodes out, in the launcher's syntax.
    pub(super) leave: &'a [String],
    /// NCCL's last warnings, said on stderr.
    pub(super) warnings: &'a [String],
    /// What the hardware allowed, and why NCCL chose sockets where an
    /// adapter was there.
    pub(super) judged: Option<&'a smoke::verdict::Judgement>,
    pub(super) sockets: Option<&'a str>,
    /// NCCL was not started: the meeting showed that it cannot work.
    pub(super) stopped: bool,
    pub(super) verdict: &'a str,
    pub(super) code: u8,
}

/// The text report's last lines: the slow ranks, NCCL's last warnings
/// (stderr), what the hardware allowed, and the verdict.
pub(super) fn print_ending(last: &Last) {
    let Last {
        who,
        problems,
        slow,
        leave,
        warnings,
        judged,
        sockets,
        stopped,
        verdict,
        code,
    } = *last;
    for line in problems {
        say(&mut std::io::stdout(), &format!("{who}problem: {line}"));
    }
    for line in slow {
        say(&mut std::io::stdout(), &format!("{who}note: {line}"));
    }
    for line in leave {
        say(&mut std::io::stdout(), &format!("{who}{line}"));
    }
    let mut err = std::io::stderr();
    if !warnings.is_empty() {
        say(&mut err, &format!("{who}NCCL's last warnings:"));
        for w in warnings {
            say(&mut err, &format!("{who}  {w}"));
        }
    }
    if let Some(v) = judged {
        say(
            &mut std::io::stdout(),
            &format!("{who}hardware: {}", v.line),
        );
        if let Some(line) = sockets {
            say(&mut std::io::stdout(), &format!("{who}hardware: {line}"));
        }
    }
    if stopped {
        say(
            &mut std::io::stdout(),
            &format!(
                "{who}note: NCCL was not started: it cannot work as things stand (the cause is \
                 below; --run-nccl-anyway starts it regardless)"
            ),
        );
    }
    // One process that works, at a terminal: where a job of the user's
    // still fails, its own logs say why.
    if code == 0 && who.is_empty() {
        say(
            &mut std::io::stdout(),
            "note: NCCL works here; where a job of yours fails, `nccl-find explain` reads its logs and names the cause",
        );
    }
    say(&mut std::io::stdout(), &format!("{who}{verdict}"));
    // A failure is said on stderr too, where that is somewhere else (a
    // launcher's log of errors); on a terminal, or with 2>&1, it is said once.
    if code != 0 && !same_destination() {
        say(&mut err, &format!("nccl-find smoke: {verdict}"));
    }
}

/// One line of the human report, made safe for a terminal (paths,
/// variables, addresses and peers' text may hold anything).
pub(super) fn say(w: &mut impl Write, line: &str) {
    let _ = writeln!(w, "{}", style::terminal_safe(line));
}

/// Whether stdout and stderr are the same file (one terminal, or `2>&1`).
pub(super) fn same_destination() -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |fd: &str| {
        std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    matches!((id("1"), id("2")), (Some(a), Some(b)) if a == b)
}

/// The settings line of the report, where any is set: each `NAME=value`,
/// and the file it came from where a configuration file set it.
fn settings_line(settings: &InForce) -> Option<String> {
    if settings.settings.is_empty() {
        return None;
    }
    let list: Vec<String> = settings
        .settings
        .iter()
        .map(|s| match &s.source {
            Source::Environment => format!("{}={}", s.name, s.value),
            Source::File(p) => format!("{}={} ({})", s.name, s.value, p.display()),
        })
        .collect();
    Some(format!(
        "settings: {}",
        nccl_find::internal::escape_os(list.join(", ").as_ref())
    ))
}

/// Where the text report's table is: its header said, the collective (and
/// reduction) of the last row.
#[derive(Default)]
pub(super) struct Table {
    header: bool,
    op: String,
}

/// A row's collective, with its reduction where it reduces:
/// `reduce-scatter (prod)`.
fn op_label(r: &smoke::Row) -> String {
    match r.redop {
        Some(red) => format!("{} ({})", r.op, red.name()),
        None => r.op.to_string(),
    }
}

/// An event as a line of the text report (`who`: this rank's prefix); the
/// table's header comes before the first row, and a collective's name
/// before its first row (but the all-reduce's, when it comes first).
pub(super) fn event_line(who: &str, e: &Event, table: &mut Table) -> String {
    match e {
        Event::Loaded { path, version } => format!("{who}NCCL {version} from {}", path.display()),
        Event::Devices { gpus, nranks, first_rank, seed } => {
            let g: Vec<String> = gpus.iter().map(|(o, n)| format!("{o} {n}")).collect();
            let last = first_rank + gpus.len() - 1;
            let ranks = if last == *first_rank { format!("rank {first_rank}") } else { format!("ranks {first_rank}-{last}") };
            format!("{who}GPUs: {}; {ranks} of {nranks}; seed {seed}", g.join(", "))
        }
        Event::Note(n) => format!("{who}note: {n}"),
        Event::Cause(c) => format!("{who}note: NCCL runs (--run-nccl-anyway), although the meeting showed: {c}"),
        Event::Gathered(g) => nodes::report(g)
            .into_iter()
            .enumerate()
            .map(|(i, (problem, l))| {
                let tag = if problem { "problem: " } else if i == 0 { "" } else { "  " };
                format!("{who}{tag}{l}")
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Event::Row(r) => format!(
            "{}{}{who}{:>10} {:>11} {:>6} | {:>10.1} {:>8.2} {:>8.2} {:>7} | {:>10.1} {:>8.2} {:>8.2} {:>7}",
            // Each collective but the default's first row names it.
            match std::mem::replace(&mut table.op, op_label(r)) {
                last if last == table.op || (last.is_empty() && table.op == "all-reduce (sum)") => String::new(),
                _ => format!("{who}{}:\n", table.op),
            },
            if std::mem::replace(&mut table.header, true) {
                String::new()
            } else {
                format!(
                    "{who}{:>10} {:>11} {:>6} | {:>10} {:>8} {:>8} {:>7} | {:>10} {:>8} {:>8} {:>7}\n{who}{:>10} {:>11} {:>6} | {:>10} {:>8} {:>8} {:>7} | {:>10} {:>8} {:>8} {:>7}\n",
                    "size", "count", "type", "oop us", "algbw", "busbw", "#wrong", "ip us", "algbw", "busbw", "#wrong",
                    "(bytes)", "(elements)", "", "", "(GB/s)", "(GB/s)", "", "", "(GB/s)", "(GB/s)", ""
                )
            },
            human(r.bytes), r.count, r.dtype.name(),
            r.oop.time_us, r.oop.algbw, r.oop.busbw, r.oop.wrong,
            r.ip.time_us, r.ip.algbw, r.ip.busbw, r.ip.wrong
        ),
        // An event of a newer nccl-smoke: shown as it is.
        e => format!("{who}{e:?}"),
    }
}

pub(super) fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// The `--json` report.
pub(super) fn json_report(
    code: u8,
    verdict: &str,
    wall: f64,
    events: &[Event],
    warnings: &[String],
    judged: Option<&smoke::verdict::Judgement>,
) -> serde_json::Value {
    let rows: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Row(r) => Some(json!({
                "op": r.op, "redop": r.redop.map(|x| x.name()), "bytes": r.bytes, "count": r.count, "dtype": r.dtype.name(),
                "oop": {"time_us": r.oop.time_us, "algbw": r.oop.algbw, "busbw": r.oop.busbw, "wrong": r.oop.wrong},
                "ip": {"time_us": r.ip.time_us, "algbw": r.ip.algbw, "busbw": r.ip.busbw, "wrong": r.ip.wrong},
            })),
            _ => None,
        })
        .collect();
    let mut doc = json!({"ok": code == 0, "exit": code, "verdict": verdict, "wall_s": wall, "rows": rows,
                         "nccl_warnings": warnings});
    if let Some(v) = judged {
        doc["hardware"] = json!({
            "verdict": v.line,
            "predicted_busbw": v.predicted.as_ref().map(|p| p.0),
            "links": v.predicted.as_ref().map(|p| p.1.clone()),
            "measured_busbw": v.measured,
            "ratio": v.ratio,
            "transport": v.transport.as_ref().map(|t| format!("{t:?}")),
        });
    }
    for e in events {
        match e {
            Event::Loaded { path, version } => {
                doc["library"] = json!(path.display().to_string());
                doc["version"] = json!(version);
            }
            Event::Devices {
                gpus,
                nranks,
                first_rank,
                seed,
            } => {
                doc["gpus"] = json!(gpus
                    .iter()
                    .map(|(o, n)| json!({"ordinal": o, "name": n}))
                    .collect::<Vec<_>>());
                doc["nranks"] = json!(nranks);
                doc["first_rank"] = json!(first_rank);
                doc["seed"] = json!(seed);
            }
            Event::Gathered(g) => doc["nodes"] = nodes::json(g),
            Event::Note(n) => {
                if let Some(a) = doc["notes"].as_array_mut() {
                    a.push(json!(n));
                } else {
                    doc["notes"] = json!([n]);
                }
            }
            // Rows go under "rows"; an event of a newer nccl-smoke, nowhere.
            _ => {}
        }
    }
    doc
}

/// `settings` in `--json`: each `NCCL_*` setting in force and its source.
pub(super) fn settings_json(settings: &InForce) -> serde_json::Value {
    json!(settings
        .settings
        .iter()
        .map(|s| json!({"name": s.name, "value": s.value, "source": s.source.to_string()}))
        .collect::<Vec<_>>())
}

/// `exchange` in `--json`: how this process meets the others.
pub(super) fn meeting_json(m: &Meeting) -> serde_json::Value {
    json!({
        "id": m.backend,
        "launcher": m.launcher,
        "at": m.job.exchange.describe(),
        "from": m.from,
        "token": m.token_from,
        "rank": m.job.rank,
        "world": m.job.world,
        "local_rank": m.local_rank,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use nccl_smoke::{Dtype, Redop};

    /// Rows of a run of two collectives, the second in two reductions.
    pub(crate) fn rows() -> Vec<smoke::Row> {
        let t = smoke::Timing::of(4096, 5e-6, 1.0, 0);
        let row = |op, redop, dtype, count| smoke::Row::new(op, redop, dtype, count, t, t);
        vec![
            row("all-reduce", Some(Redop::Sum), Dtype::F32, 1024),
            row("all-reduce", Some(Redop::Sum), Dtype::F8e4m3, 4096),
            row("all-reduce", Some(Redop::Prod), Dtype::F32, 1024),
            row("all-gather", None, Dtype::F32, 1024),
        ]
    }

    /// The text report names each collective and reduction before its
    /// rows, but the default's first.
    #[test]
    fn each_collective_and_reduction_is_named_before_its_rows() {
        let mut table = Table::default();
        let text: Vec<String> = rows()
            .iter()
            .map(|r| event_line("", &Event::Row(r.clone()), &mut table))
            .collect();
        let text = text.join("\n");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2 + 4 + 2, "{text}");
        assert!(lines[2].ends_with(
            "   f32 |        5.0     0.82     0.82       0 |        5.0     0.82     0.82       0"
        ));
        assert!(lines[3].contains("  4096 f8e4m3 |"), "{text}");
        assert_eq!(lines[4], "all-reduce (prod):");
        assert_eq!(lines[6], "all-gather:");
        let _ = (Dtype::F32, Redop::Sum);
    }
}
