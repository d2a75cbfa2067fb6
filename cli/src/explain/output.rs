//! The answer on its way out: text (the verdict first, the evidence, the
//! echoes and notes, the fix last) or `--json`, both from the one
//! [`Answer`]. Every byte from a log is escaped on the way.

use serde_json::{json, Value};

use super::judge::{ranks_words, Answer, Verdict};
use super::read::Input;
use nccl_rendezvous::untrusted::shown;

/// A log line is shown to this many characters.
const SHOWN: usize = 300;

/// `rank 1 on node2`, `ranks 0 and 1 on node1, node2`, `node2`, the files.
fn who(a: &Answer, inputs: &[Input]) -> String {
    let ranks: std::collections::BTreeSet<u32> = a.ranks.iter().copied().collect();
    let hosts: Vec<String> = a.hosts.iter().take(4).map(|h| shown(h, 64)).collect();
    let mut hosts_words = hosts.join(", ");
    if a.hosts.len() > 4 {
        hosts_words.push_str(&format!(" and {} more", a.hosts.len() - 4));
    }
    match (ranks.is_empty(), hosts.is_empty()) {
        (false, false) => format!("{} on {hosts_words}", ranks_words(&ranks)),
        (false, true) => ranks_words(&ranks),
        (true, false) => hosts_words,
        (true, true) => {
            let names: Vec<&str> = a
                .inputs
                .iter()
                .take(3)
                .filter_map(|&i| inputs.get(i).map(|x| x.name.as_str()))
                .collect();
            names.join(", ")
        }
    }
}

/// The first line.
pub fn headline(a: &Answer, inputs: &[Input]) -> String {
    let who = who(a, inputs);
    let who = if who.is_empty() {
        String::new()
    } else {
        format!("{who}: ")
    };
    match a.verdict {
        Verdict::Cause => format!("Cause: {who}{}.", a.what),
        Verdict::NoCause => format!("No cause in these logs: {who}{}.", a.what),
        Verdict::NoFailure => format!("No failure: {}.", a.what),
    }
}

/// The last line.
pub fn last_line(a: &Answer) -> String {
    match a.verdict {
        Verdict::NoFailure => format!("Nothing to fix: {}.", a.fix),
        _ => format!("Fix: {}.", a.fix),
    }
}

/// `name:line`.
fn place(inputs: &[Input], input: usize, line: u64) -> String {
    let name = inputs.get(input).map_or("?", |i| i.name.as_str());
    format!("{name}:{line}")
}

/// The notes on the inputs: skipped, or read in part.
fn input_notes(inputs: &[Input]) -> Vec<String> {
    inputs
        .iter()
        .filter_map(|i| i.note.as_ref().map(|n| format!("{}: {n}", i.name)))
        .collect()
}

/// The answer as text.
pub fn text(a: &Answer, inputs: &[Input]) -> String {
    let mut out = headline(a, inputs);
    out.push('\n');
    if !a.evidence.is_empty() {
        out.push_str("  Evidence:\n");
        for q in &a.evidence {
            out.push_str(&format!(
                "    {}: {}\n",
                place(inputs, q.input, q.line),
                shown(&q.text, SHOWN)
            ));
        }
    }
    if a.echoes.lines > 0 {
        let classes: Vec<&str> = a.echoes.classes.iter().copied().collect();
        out.push_str(&format!(
            "  Echoes: {} more line{}{} ({}) follow{} from it.\n",
            a.echoes.lines,
            if a.echoes.lines == 1 { "" } else { "s" },
            if a.echoes.ranks.is_empty() {
                String::new()
            } else {
                format!(" on {}", ranks_words(&a.echoes.ranks))
            },
            classes.join(", "),
            if a.echoes.lines == 1 { "s" } else { "" }
        ));
    }
    for n in a.notes.iter().cloned().chain(input_notes(inputs)) {
        out.push_str(&format!("  note: {}\n", shown(&n, SHOWN)));
    }
    out.push_str(&last_line(a));
    out.push('\n');
    out
}

/// The answer as JSON.
pub fn to_json(a: &Answer, inputs: &[Input], exit: u8) -> Value {
    let quote = |q: &super::judge::Quote| {
        json!({
            "file": inputs.get(q.input).map(|i| i.name.clone()),
            "line": q.line,
            "printer": q.printer,
            "text": shown(&q.text, SHOWN),
        })
    };
    json!({
        "schema": 1,
        "verdict": a.verdict.id(),
        "class": a.failure.map(|f| f.class().id),
        "headline": headline(a, inputs),
        "what": a.what,
        "ranks": a.ranks,
        "hosts": a.hosts.iter().map(|h| shown(h, 64)).collect::<Vec<_>>(),
        "files": a.inputs.iter().filter_map(|&i| inputs.get(i).map(|x| x.name.clone())).collect::<Vec<_>>(),
        "evidence": a.evidence.iter().map(quote).collect::<Vec<_>>(),
        "echoes": {
            "lines": a.echoes.lines,
            "ranks": a.echoes.ranks,
            "classes": a.echoes.classes,
        },
        "notes": a.notes.iter().map(|n| shown(n, SHOWN)).collect::<Vec<_>>(),
        "inputs": inputs_json(inputs),
        "fix": last_line(a),
        "exit": exit,
    })
}

/// Each input: its name, what was read, and its note.
pub fn inputs_json(inputs: &[Input]) -> Value {
    Value::Array(
        inputs
            .iter()
            .map(|i| json!({"name": i.name, "lines": i.lines, "bytes": i.bytes, "note": i.note}))
            .collect(),
    )
}
