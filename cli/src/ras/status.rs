//! What NCCL's RAS report says, read into one shape whichever format it
//! came in, and the verdict: which rank to look at, and why. A rank that is
//! gone outranks the errors it causes in the others (NCCL's "Remote process
//! error"), and an error outranks a rank that is merely behind.

use serde_json::Value;

use super::client::{shown, Format};

/// A rank, as the report names it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Who {
    /// Its rank in the communicator (`None`: a process with no rank named).
    pub(crate) rank: Option<u64>,
    /// Its process.
    pub(crate) pid: Option<u64>,
    /// Its node, as NCCL names it (an address).
    pub(crate) host: String,
    /// Its GPU (CUDA device number).
    pub(crate) gpu: Option<u64>,
}

/// What is wrong with a rank.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Trouble {
    /// NCCL has no data from it: its process is gone, or does not answer.
    Missing {
        /// The RAS network considers the process dead.
        dead: bool,
    },
    /// It reported an error of its own (`remote`: a peer's failure, seen here).
    Error { what: String, remote: bool },
    /// It has launched fewer of one collective than the others.
    Behind {
        op: String,
        launched: u64,
        most: u64,
    },
}

/// One rank that needs looking at.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Finding {
    /// The communicator, by NCCL's hash.
    pub(crate) comm: String,
    /// The rank.
    pub(crate) who: Who,
    /// What is wrong.
    pub(crate) trouble: Trouble,
}

/// One rank's facts (the JSON report has them for every rank).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rank {
    /// Who it is.
    pub(crate) who: Who,
    /// How many of each collective it launched, in the report's order.
    pub(crate) counts: Vec<(String, u64)>,
    /// Its asynchronous error code (0: none), init state, abort flag.
    pub(crate) async_error: i64,
    /// Whether NCCL has data from it.
    pub(crate) missing: bool,
}

/// One communicator.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Comm {
    /// NCCL's hash of it.
    pub(crate) hash: String,
    /// Its ranks (`size`).
    pub(crate) size: u64,
    /// Every rank the report names.
    pub(crate) ranks: Vec<Rank>,
}

/// The report, read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Status {
    /// The format it came in.
    pub(crate) format: Format,
    /// The job's NCCL version, as the report gives it.
    pub(crate) nccl: Option<String>,
    /// How many communicators, and ranks in all.
    pub(crate) comms: u64,
    pub(crate) ranks: u64,
    /// Every rank's facts (from JSON; empty from text).
    pub(crate) detail: Vec<Comm>,
    /// The ranks that need looking at, the one to look at first first.
    pub(crate) findings: Vec<Finding>,
    /// Whether the JSON needed mending (NCCL 2.28.9 leaves out a comma
    /// after a missing rank's `nvml_dev`).
    pub(crate) mended: bool,
    /// Why the JSON report was not read, where the text report was read
    /// in its stead.
    pub(crate) fell_back: Option<String>,
}

/// The most communicators and ranks read from one report.
const MAX_ITEMS: usize = 1 << 20;

/// Reads the report `body` in `format`. JSON that does not parse even once
/// mended is an error; so is a text report with none of NCCL's headings.
pub(crate) fn read(format: Format, body: &[u8]) -> Result<Status, String> {
    let text = String::from_utf8_lossy(body);
    let mut st = match format {
        Format::Json => read_json(&text)?,
        Format::Text => read_text(&text)?,
    };
    rank_findings(&mut st.findings);
    Ok(st)
}

fn read_json(text: &str) -> Result<Status, String> {
    let (v, mended) = match serde_json::from_str::<Value>(text) {
        Ok(v) => (v, false),
        Err(first) => match serde_json::from_str::<Value>(&mend(text)) {
            Ok(v) => (v, true),
            Err(_) => return Err(format!("its JSON report does not parse ({first})")),
        },
    };
    let comms = v["communicators"]
        .as_array()
        .ok_or("its JSON report has no \"communicators\" list")?;
    let mut st = Status {
        format: Format::Json,
        nccl: v["nccl_version"].as_str().map(shown),
        comms: comms.len() as u64,
        ranks: 0,
        detail: Vec::new(),
        findings: Vec::new(),
        mended,
        fell_back: None,
    };
    for c in comms.iter().take(MAX_ITEMS) {
        let comm = json_comm(c);
        st.ranks += comm.size;
        judge_comm(&comm, &mut st.findings);
        st.detail.push(comm);
    }
    Ok(st)
}

/// NCCL 2.28.9 writes a missing rank's `"nvml_dev": N` with no comma
/// before its `"status"`: a comma goes wherever a line ends a value and the
/// next line starts a key.
fn mend(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::with_capacity(text.len() + 64);
    for (i, l) in lines.iter().enumerate() {
        out.push_str(l);
        let t = l.trim_end();
        let next = lines[i + 1..]
            .iter()
            .map(|n| n.trim())
            .find(|n| !n.is_empty());
        let ends_value = !t.is_empty() && !t.ends_with([',', '{', '[', ':']);
        if ends_value && next.is_some_and(|n| n.starts_with('"')) {
            out.push(',');
        }
        out.push('\n');
    }
    out
}

fn json_who(r: &Value) -> Who {
    Who {
        rank: r["rank"].as_u64(),
        pid: r["pid"].as_u64(),
        host: shown(r["host"].as_str().unwrap_or("?")),
        gpu: r["cuda_dev"].as_u64(),
    }
}

fn json_comm(c: &Value) -> Comm {
    let mut ranks = Vec::new();
    for r in c["ranks"].as_array().into_iter().flatten().take(MAX_ITEMS) {
        let mut counts = Vec::new();
        if let Some(m) = r["collective_counts"].as_object() {
            for (op, n) in m.iter().take(64) {
                counts.push((shown(op), n.as_u64().unwrap_or(0)));
            }
        }
        let s = &r["status"];
        let mut async_error = s["async_error"].as_i64().unwrap_or(0);
        if async_error == 0 && s["init_state"].as_i64().unwrap_or(0) != 0 {
            async_error = s["init_state"].as_i64().unwrap_or(0);
        }
        ranks.push(Rank {
            who: json_who(r),
            counts,
            async_error,
            missing: false,
        });
    }
    for r in c["missing_ranks"]
        .as_array()
        .into_iter()
        .flatten()
        .take(MAX_ITEMS)
    {
        let dead = r["status"]["considered_dead"].as_bool().unwrap_or(false);
        ranks.push(Rank {
            who: json_who(r),
            counts: Vec::new(),
            async_error: if dead { -2 } else { -1 },
            missing: true,
        });
    }
    Comm {
        hash: shown(c["hash"].as_str().unwrap_or("?")),
        size: c["size"].as_u64().unwrap_or(ranks.len() as u64),
        ranks,
    }
}

/// NCCL's result codes, as its `ncclGetErrorString` words them.
fn nccl_error(code: i64) -> String {
    match code {
        1 => "unhandled CUDA error".into(),
        2 => "system error".into(),
        3 => "internal error".into(),
        4 => "invalid argument".into(),
        5 => "invalid usage".into(),
        6 => "Remote process error".into(),
        7 => "in progress".into(),
        c => format!("error {c}"),
    }
}

fn judge_comm(c: &Comm, out: &mut Vec<Finding>) {
    let add = |out: &mut Vec<Finding>, who: &Who, trouble| {
        out.push(Finding {
            comm: c.hash.clone(),
            who: who.clone(),
            trouble,
        });
    };
    for r in &c.ranks {
        if r.missing {
            add(
                out,
                &r.who,
                Trouble::Missing {
                    dead: r.async_error == -2,
                },
            );
        } else if r.async_error != 0 {
            let what = nccl_error(r.async_error);
            add(
                out,
                &r.who,
                Trouble::Error {
                    what,
                    remote: r.async_error == 6,
                },
            );
        }
    }
    // The collectives each present rank launched: the ones behind the most.
    let present: Vec<&Rank> = c.ranks.iter().filter(|r| !r.missing).collect();
    let mut ops: Vec<&str> = Vec::new();
    for r in &present {
        for (op, _) in &r.counts {
            if !ops.contains(&op.as_str()) {
                ops.push(op);
            }
        }
    }
    for op in ops {
        let count = |r: &Rank| {
            r.counts
                .iter()
                .find(|(o, _)| o == op)
                .map_or(0, |(_, n)| *n)
        };
        let most = present.iter().map(|r| count(r)).max().unwrap_or(0);
        for r in &present {
            let launched = count(r);
            if launched < most {
                let trouble = Trouble::Behind {
                    op: op.to_string(),
                    launched,
                    most,
                };
                add(out, &r.who, trouble);
            }
        }
    }
}

/// How urgent a finding is: the cause before the symptoms it makes.
fn urgency(t: &Trouble) -> (u8, u64) {
    match t {
        Trouble::Missing { dead: true } => (0, 0),
        Trouble::Missing { dead: false } => (1, 0),
        Trouble::Error { remote: false, .. } => (2, 0),
        Trouble::Behind { launched, .. } => (3, *launched),
        Trouble::Error { remote: true, .. } => (4, 0),
    }
}

fn rank_findings(f: &mut [Finding]) {
    f.sort_by_key(|x| (urgency(&x.trouble), x.who.rank));
}

fn read_text(text: &str) -> Result<Status, String> {
    if !text.contains("Communicators") || !text.contains("Errors") {
        return Err(format!(
            "its report has none of NCCL's headings (it begins {:?})",
            shown(text.lines().next().unwrap_or(""))
        ));
    }
    let mut st = Status {
        format: Format::Text,
        nccl: text
            .lines()
            .find_map(|l| l.strip_prefix("NCCL version "))
            .and_then(|l| l.split_whitespace().next())
            .map(shown),
        comms: 0,
        ranks: 0,
        detail: Vec::new(),
        findings: Vec::new(),
        mended: false,
        fell_back: None,
    };
    text_table(text, &mut st);
    text_findings(text, &mut st.findings);
    Ok(st)
}

/// The communicators table: `Group  Comms-in-group  Nodes-per-comm
/// Ranks-per-node  Ranks-per-comm  Ranks-in-group  Status  Errors`.
fn text_table(text: &str, st: &mut Status) {
    let Some(at) = text.find("\nCommunicators") else {
        return;
    };
    for l in text[at..].lines().skip(1) {
        if l.starts_with("Errors") {
            break;
        }
        let w: Vec<&str> = l.split_whitespace().collect();
        let n: Vec<u64> = w.iter().take(6).filter_map(|x| x.parse().ok()).collect();
        if n.len() == 6 {
            st.comms += n[1];
            st.ranks += n[1] * n[4];
        }
    }
}

/// `  Rank N <what> -- GPU G managed by process P on node H`, under a
/// heading that says what it is (`#0-0 (hash) INCOMPLETE|ERROR|MISMATCH`).
fn text_findings(text: &str, out: &mut Vec<Finding>) {
    let (mut comm, mut kind, mut about) = (String::new(), String::new(), String::new());
    let mut launched: Vec<(Who, u64)> = Vec::new();
    for l in text.lines().take(MAX_ITEMS) {
        if let Some(rest) = l.strip_prefix('#') {
            flush_behind(&mut launched, &comm, &about, out);
            let mut w = rest.split_whitespace();
            w.next();
            comm = shown(
                w.next()
                    .unwrap_or("?")
                    .trim_matches(|c| c == '(' || c == ')'),
            );
            kind = w.next().unwrap_or("").to_string();
            continue;
        }
        let Some(line) = l.strip_prefix("  ") else {
            continue;
        };
        if !line.starts_with("Rank ") {
            about = line.to_string();
            continue;
        }
        let Some((head, tail)) = line.split_once(" -- ") else {
            continue;
        };
        let mut hw = head.split_whitespace().skip(1);
        let rank = hw.next().and_then(|r| r.parse().ok());
        let what: Vec<&str> = hw.collect();
        let who = text_who(rank, tail);
        match kind.as_str() {
            "INCOMPLETE" => out.push(Finding {
                comm: comm.clone(),
                who,
                trouble: Trouble::Missing { dead: false },
            }),
            "MISMATCH" => {
                let n = what.last().and_then(|n| n.parse().ok()).unwrap_or(0);
                launched.push((who, n));
            }
            _ => {
                let what = what.join(" ");
                let what = what.strip_prefix("reported ").unwrap_or(&what).to_string();
                let remote = what.contains("Remote process error");
                out.push(Finding {
                    comm: comm.clone(),
                    who,
                    trouble: Trouble::Error {
                        what: shown(&what),
                        remote,
                    },
                });
            }
        }
    }
    flush_behind(&mut launched, &comm, &about, out);
}

/// `GPU G managed by process P on node H`.
fn text_who(rank: Option<u64>, tail: &str) -> Who {
    let w: Vec<&str> = tail.split_whitespace().collect();
    let after = |word: &str| w.iter().position(|x| *x == word).and_then(|i| w.get(i + 1));
    Who {
        rank,
        pid: after("process").and_then(|p| p.parse().ok()),
        host: shown(after("node").copied().unwrap_or("?")),
        gpu: after("GPU").and_then(|g| g.parse().ok()),
    }
}

/// The ranks of a MISMATCH block that launched fewer than the most.
fn flush_behind(launched: &mut Vec<(Who, u64)>, comm: &str, about: &str, out: &mut Vec<Finding>) {
    // "Communicator ranks have different AllReduce operation counts"
    let op = about
        .strip_prefix("Communicator ranks have different ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or("collective");
    let most = launched.iter().map(|(_, n)| *n).max().unwrap_or(0);
    for (who, n) in launched.drain(..) {
        if n < most {
            out.push(Finding {
                comm: comm.to_string(),
                who,
                trouble: Trouble::Behind {
                    op: shown(op),
                    launched: n,
                    most,
                },
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comma_nccl_left_out_is_put_back_and_nothing_else_changes() {
        let broken = "{\n  \"a\": 0\n  \"b\": {\n    \"c\": [\n\n    ]\n  }\n}\n";
        assert!(serde_json::from_str::<Value>(broken).is_err());
        let mended = mend(broken);
        assert_eq!(
            mended,
            "{\n  \"a\": 0,\n  \"b\": {\n    \"c\": [\n\n    ]\n  }\n}\n"
        );
        let good = "{\n  \"a\": 0,\n  \"b\": [1,\n 2]\n}\n";
        assert_eq!(mend(good), good);
    }

    #[test]
    fn an_error_of_its_own_outranks_a_rank_behind_and_a_remote_error() {
        let who = |r| Who {
            rank: Some(r),
            pid: None,
            host: "h".into(),
            gpu: None,
        };
        let f = |r, trouble| Finding {
            comm: "c".into(),
            who: who(r),
            trouble,
        };
        let mut v = vec![
            f(
                0,
                Trouble::Error {
                    what: "Remote process error".into(),
                    remote: true,
                },
            ),
            f(
                1,
                Trouble::Behind {
                    op: "AllReduce".into(),
                    launched: 3,
                    most: 4,
                },
            ),
            f(
                2,
                Trouble::Error {
                    what: "unhandled CUDA error".into(),
                    remote: false,
                },
            ),
            f(3, Trouble::Missing { dead: false }),
        ];
        rank_findings(&mut v);
        let order: Vec<u64> = v.iter().map(|x| x.who.rank.unwrap()).collect();
        assert_eq!(order, [3, 2, 1, 0]);
    }
}
