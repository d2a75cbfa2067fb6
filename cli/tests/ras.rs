//! `nccl-find ras` against a stand-in for NCCL's RAS service that replays
//! what the real one (NCCL 2.28.9, `scripts/gpu-ras.sh`) answered about a
//! two-rank torch job: healthy, a rank behind, a rank killed, in text and
//! in JSON (`tests/ras/2.28.9/`). Then what a broken, slow, oversized or
//! hostile service gets, and why nothing answered.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The report of a recorded conversation (NCCL 2.28.9's): the server's
/// last block.
fn report(name: &str) -> Vec<u8> {
    server_blocks(&format!("2.28.9/{name}")).pop().unwrap()
}

/// What the server said in a recorded conversation (`tests/ras/NAME`),
/// block by block.
fn server_blocks(name: &str) -> Vec<Vec<u8>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/ras")
        .join(name);
    let data = std::fs::read(&path).unwrap();
    let mut blocks = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let end = at + data[at..].iter().position(|&b| b == b'\n').unwrap();
        let head = std::str::from_utf8(&data[at..end]).unwrap();
        let n: usize = head.rsplit(' ').next().unwrap().parse().unwrap();
        let body = data[end + 1..end + 1 + n].to_vec();
        at = end + 1 + n;
        if data.get(at) == Some(&b'\n') && !body.ends_with(b"\n") {
            at += 1;
        }
        if head.starts_with("--- server") {
            blocks.push(body);
        }
    }
    blocks
}

/// How the stand-in behaves.
#[derive(Clone)]
enum Serve {
    /// As NCCL does, with these reports, one per connection (the last
    /// again after them); `json`: it takes `SET FORMAT json` (2.28.7+).
    Nccl { reports: Vec<Vec<u8>>, json: bool },
    /// Sends these bytes as soon as a client connects, then closes.
    Raw(Vec<u8>),
    /// Takes the connection and never says a word.
    Silent,
    /// Answers each line with the next block a real NCCL sent in a
    /// recorded conversation, and `STATUS` with its report.
    Replay(Vec<Vec<u8>>),
}

/// A stand-in RAS service on a port of its own: its address.
fn serve(how: Serve) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let served = Arc::new(Mutex::new(0usize));
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            let (how, served) = (how.clone(), served.clone());
            std::thread::spawn(move || conversation(s, how, served));
        }
    });
    addr
}

fn conversation(mut s: TcpStream, how: Serve, served: Arc<Mutex<usize>>) {
    let (reports, json) = match how {
        Serve::Raw(b) => {
            let _ = s.write_all(&b);
            return;
        }
        Serve::Silent => {
            std::thread::sleep(Duration::from_secs(60));
            return;
        }
        Serve::Replay(blocks) => return replay(s, blocks),
        Serve::Nccl { reports, json } => (reports, json),
    };
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    while r.read_line(&mut line).unwrap_or(0) > 0 {
        let cmd = line.trim_end().to_ascii_lowercase();
        let reply: Vec<u8> = if cmd.starts_with("client protocol ") {
            b"SERVER PROTOCOL 2\n".to_vec()
        } else if cmd.starts_with("timeout ") || (cmd == "set format json" && json) {
            b"OK\n".to_vec()
        } else if cmd == "status" || cmd == "verbose status" {
            let mut n = served.lock().unwrap();
            let body = reports[(*n).min(reports.len() - 1)].clone();
            *n += 1;
            let _ = s.write_all(&body);
            return;
        } else {
            format!("ERROR: Unknown command {}\n", line.trim_end()).into_bytes()
        };
        if s.write_all(&reply).is_err() {
            return;
        }
        line.clear();
    }
}

fn replay(mut s: TcpStream, blocks: Vec<Vec<u8>>) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    let mut next = blocks.iter();
    while r.read_line(&mut line).unwrap_or(0) > 0 {
        let status = line.trim_end().to_ascii_lowercase().ends_with("status");
        let block = match status {
            true => blocks.last(),
            false => next.next(),
        };
        if block.is_some_and(|b| s.write_all(b).is_err()) || status {
            return;
        }
        line.clear();
    }
}

fn nccl(reports: &[&str], json: bool) -> String {
    serve(Serve::Nccl {
        reports: reports.iter().map(|r| report(r)).collect(),
        json,
    })
}

/// `nccl-find ras ARGS` with none of the RAS variables around.
fn ras(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nccl-find"))
        .arg("ras")
        .args(args)
        .env_remove("NCCL_RAS_ADDR")
        .env_remove("NCCL_RAS_ENABLE")
        .output()
        .unwrap()
}

/// The host and the port of `HOST:PORT`.
fn host_of(addr: &str) -> &str {
    addr.rsplit_once(':').unwrap().0
}

fn port_of(addr: &str) -> &str {
    addr.rsplit_once(':').unwrap().1
}

/// Exit status, and the last line of the stream that carries the answer
/// (stderr's after its `nccl-find: `, when something is wrong).
fn answer(o: &Output) -> (i32, String) {
    let (code, out, err) = common::text(o);
    if code == 0 {
        return (code, out.lines().last().unwrap_or("").to_string());
    }
    let last = err.lines().last().unwrap_or("");
    let line = last
        .strip_prefix("nccl-find: ")
        .unwrap_or_else(|| panic!("{err}"));
    (code, line.to_string())
}

const RANK1: &str = "rank 1 (process 857 on 192.0.2.2, GPU 0)";

#[test]
fn a_healthy_job_is_ok_from_json_and_from_text() {
    for json in [true, false] {
        let addr = nccl(
            &["healthy-json.txt", "healthy-text.txt"][usize::from(!json)..][..1],
            json,
        );
        let o = ras(&["--host", host_of(&addr), "--port", port_of(&addr)]);
        assert_eq!(
            answer(&o),
            (
                0,
                format!(
                    "OK: 1 communicator(s), 2 rank(s), every rank answering, none behind, no errors \
                     (NCCL 2.28.9 at {addr})"
                )
            ),
            "{o:?}"
        );
        // The verdict is the whole output.
        let (_, out, err) = common::text(&o);
        assert_eq!((out.lines().count(), err.as_str()), (1, ""), "{out}");
    }
}

#[test]
fn a_rank_behind_is_named_once_two_looks_agree() {
    for (file, json) in [("behind-json.txt", true), ("behind-text.txt", false)] {
        let addr = nccl(&[file], json);
        let o = ras(&["--host", host_of(&addr), "--port", port_of(&addr)]);
        assert_eq!(
            answer(&o),
            (
                1,
                format!(
                    "look at {RANK1} first: it is 1 AllReduce behind (launched 3, the others up to \
                     4), and the counts did not move in 2 s: the others wait for it. See where \
                     process 857 is (`py-spy dump --pid 857` for Python)"
                )
            ),
            "{file}: {o:?}"
        );
    }
}

#[test]
fn a_rank_gone_between_the_two_looks_is_no_progress() {
    let addr = nccl(&["behind-json.txt", "killed-json.txt"], true);
    let o = ras(&["--host", host_of(&addr), "--port", port_of(&addr)]);
    let (code, line) = answer(&o);
    assert_eq!(code, 1);
    assert!(
        line.starts_with(&format!("look at {RANK1} first: NCCL has no data from it")),
        "{line}"
    );
}

#[test]
fn a_rank_behind_that_catches_up_is_a_job_that_moves() {
    let addr = nccl(&["behind-json.txt", "healthy-json.txt"], true);
    let o = ras(&["--host", host_of(&addr), "--port", port_of(&addr)]);
    assert_eq!(
        answer(&o),
        (
            0,
            format!(
                "OK: the job is moving: {RANK1} was behind at the first look, and the counts moved 2 s \
                 later (NCCL 2.28.9 at {addr})"
            )
        )
    );
}

#[test]
fn a_killed_rank_outranks_the_error_it_causes() {
    for (file, json) in [("killed-json.txt", true), ("killed-text.txt", false)] {
        let addr = nccl(&[file], json);
        let o = ras(&["--host", host_of(&addr), "--port", port_of(&addr)]);
        assert_eq!(
            answer(&o),
            (
                1,
                format!(
                    "look at {RANK1} first: NCCL has no data from it, so process 857 is gone or stuck, \
                     and the job cannot go on without it. Check whether it still runs, and why it \
                     ended (its output; `dmesg` for the out-of-memory killer) (1 other finding(s) \
                     above follow from it or come after it)"
                )
            ),
            "{file}: {o:?}"
        );
        let (_, out, _) = common::text(&o);
        assert!(
            out.ends_with(&format!(
                "  {RANK1}: missing: NCCL has no data from it (its process is gone or does not \
                 answer)\n  rank 0 (process 856 on 192.0.2.2, GPU 0): Remote process error (how a \
                 peer's failure looks from here)\n"
            )),
            "{file}: {out}"
        );
    }
}

#[test]
fn json_gives_the_verdict_and_every_ranks_facts() {
    let addr = nccl(&["killed-json.txt"], true);
    let o = ras(&["--host", host_of(&addr), "--port", port_of(&addr), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "look");
    assert_eq!(v["exit"], 1);
    assert_eq!(v["mended"], true);
    assert_eq!(v["format"], "json");
    assert_eq!(v["nccl_version"], "2.28.9");
    assert_eq!(
        v["look_at"],
        serde_json::json!({"rank": 1, "pid": 857, "host": "192.0.2.2", "gpu": 0,
            "communicator": "0x26140adec988a11a", "kind": "missing", "considered_dead": false})
    );
    let ranks = &v["communicators"][0]["ranks"];
    assert_eq!(ranks[0]["async_error"], 6);
    assert_eq!(ranks[0]["collective_counts"]["AllReduce"], 4);
    assert_eq!(ranks[1]["missing"], true);
    assert_eq!(
        v["message"],
        answer(&ras(&["--host", host_of(&addr), "--port", port_of(&addr)])).1
    );
    // Healthy, in text: the same keys, no communicators' detail.
    let addr = nccl(&["healthy-text.txt"], false);
    let v: serde_json::Value = serde_json::from_slice(
        &ras(&["--host", host_of(&addr), "--port", port_of(&addr), "--json"]).stdout,
    )
    .unwrap();
    assert_eq!(
        (
            &v["verdict"],
            &v["exit"],
            &v["format"],
            &v["look_at"],
            &v["ranks_count"]
        ),
        (
            &"healthy".into(),
            &0.into(),
            &"text".into(),
            &serde_json::Value::Null,
            &2.into()
        )
    );
}

/// A process that has a file named `libnccl.so.2` mapped, as a job's
/// process has NCCL, with `env` set; killed when dropped.
struct FakeJob(std::process::Child);

impl FakeJob {
    fn start(env: &[(&str, &str)]) -> FakeJob {
        let dir = common::scratch("ras-job");
        let lib = dir.join("libnccl.so.2");
        std::fs::write(&lib, vec![0u8; 4096]).unwrap();
        let mut c = Command::new("python3");
        c.args(["-c", "import mmap,sys,time\nf=open(sys.argv[1],'rb')\nm=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\nprint('ready',flush=True)\ntime.sleep(120)"])
            .arg(&lib)
            .env_remove("NCCL_RAS_ADDR")
            .env_remove("NCCL_RAS_ENABLE")
            .stdout(std::process::Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        let mut ready = [0u8; 6];
        child.stdout.take().unwrap().read_exact(&mut ready).unwrap();
        FakeJob(child)
    }
}

impl Drop for FakeJob {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn when_nothing_answers_the_job_says_why() {
    let port = common::free_port();
    let addr = format!("127.0.0.1:{port}");
    let refused = format!("nothing listens at {addr} ({addr}: connection refused)");
    let job = FakeJob::start(&[("NCCL_RAS_ENABLE", "0")]);
    assert_eq!(
        answer(&ras(&["--host", host_of(&addr), "--port", port_of(&addr)])),
        (
            2,
            format!(
                "cannot ask NCCL about the job: process {} (python3) runs NCCL with NCCL_RAS_ENABLE=0, so \
                 no RAS service answers: start the job without it to ask NCCL about it ({refused})",
                job.0.id()
            )
        )
    );
    drop(job);
    let job = FakeJob::start(&[("NCCL_RAS_ADDR", "127.0.0.1:1")]);
    assert_eq!(
        answer(&ras(&["--host", host_of(&addr), "--port", port_of(&addr)])),
        (
            2,
            format!(
                "cannot ask NCCL about the job: process {} (python3) moved NCCL's RAS service to \
                 NCCL_RAS_ADDR=127.0.0.1:1: ask there, `nccl-find ras --host 127.0.0.1 --port 1` ({refused})",
                job.0.id()
            )
        )
    );
}

/// The exit status and last line, and how long it took.
fn timed(args: &[&str]) -> ((i32, String), Duration) {
    let t = Instant::now();
    let o = ras(args);
    (answer(&o), t.elapsed())
}

#[test]
fn a_slow_broken_or_hostile_service_ends_in_time_with_a_clear_error() {
    // Silent: the whole wait ends by --timeout.
    let addr = serve(Serve::Silent);
    let ((code, line), took) = timed(&[
        "--host",
        host_of(&addr),
        "--port",
        port_of(&addr),
        "--timeout",
        "2",
    ]);
    assert_eq!(
        (code, line),
        (
            2,
            format!(
                "cannot ask NCCL about the job: NCCL's RAS service did not answer in time: no whole \
                 answer to `CLIENT PROTOCOL 2` in time. Its node may be overloaded, or the address \
                 ({addr}) leads elsewhere; give it longer with --timeout"
            )
        )
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    // Another protocol.
    let addr = serve(Serve::Raw(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec()));
    assert_eq!(
        timed(&["--host", host_of(&addr), "--port", port_of(&addr)]).0,
        (
            2,
            format!(
                "cannot ask NCCL about the job: {addr} answered \"HTTP/1.1 400 Bad Request\" to `CLIENT \
                 PROTOCOL 2`, not `SERVER PROTOCOL …`: it is not NCCL's RAS service"
            )
        )
    );
    // A line that never ends.
    let addr = serve(Serve::Raw(vec![b'x'; 1 << 20]));
    assert_eq!(
        timed(&["--host", host_of(&addr), "--port", port_of(&addr)]).0,
        (
            2,
            "cannot ask NCCL about the job: the reply to `CLIENT PROTOCOL 2` ran past 4096 bytes \
             without a line break: not NCCL's RAS service"
                .to_string()
        )
    );
    // A report too large for any job.
    let addr = serve(Serve::Nccl {
        reports: vec![vec![b' '; (64 << 20) + 1]],
        json: true,
    });
    assert_eq!(
        timed(&["--host", host_of(&addr), "--port", port_of(&addr)]).0,
        (2, format!("cannot ask NCCL about the job: {addr}'s report ran past 64 MiB: not one NCCL would send"))
    );
    // A report that is neither JSON nor text.
    let addr = serve(Serve::Nccl {
        reports: vec![b"{\"communicators\": [".to_vec()],
        json: true,
    });
    let (code, line) = timed(&["--host", host_of(&addr), "--port", port_of(&addr)]).0;
    assert_eq!(code, 2);
    let port = addr.rsplit(':').next().unwrap();
    assert!(
        line.starts_with(&format!(
            "cannot ask NCCL about the job: the RAS service at {addr} answered, but its JSON report \
             does not parse ("
        )) && line.ends_with(&format!(
            "; asked for text, the RAS service at {addr} answered, but its report has none of \
             NCCL's headings (it begins \"{{\\\"communicators\\\": [\"): see its answer with `nc \
             127.0.0.1 {port}`"
        )),
        "{line}"
    );
    // A JSON report that does not parse, then a good text report: read.
    let addr = serve(Serve::Nccl {
        reports: vec![b"{\"communicators\": [".to_vec(), report("killed-text.txt")],
        json: true,
    });
    let o = ras(&["--host", host_of(&addr), "--port", port_of(&addr)]);
    let (code, line) = answer(&o);
    assert_eq!(code, 1);
    assert!(
        line.starts_with(&format!("look at {RANK1} first:")),
        "{line}"
    );
    let (_, out, _) = common::text(&o);
    assert!(
        out.contains("\n  (read from its text report: its JSON report does not parse ("),
        "{out}"
    );
}

#[test]
fn what_the_service_says_reaches_the_terminal_escaped() {
    let evil = String::from_utf8(report("killed-json.txt"))
        .unwrap()
        .replace("192.0.2.2", "\\u001b[2J\\u001b]0;pwned\\u0007\\n9.9.9.9");
    let addr = serve(Serve::Nccl {
        reports: vec![evil.into_bytes()],
        json: true,
    });
    let o = ras(&["--host", host_of(&addr), "--port", port_of(&addr)]);
    let (code, out, err) = common::text(&o);
    assert_eq!(code, 1);
    for s in [&out, &err] {
        assert!(!s.contains('\u{1b}') && !s.contains('\u{7}'), "{s:?}");
    }
    assert!(err.lines().last().unwrap().starts_with(
        "nccl-find: look at rank 1 (process 857 on \\u{1b}[2J\\u{1b}]0;pwned\\u{7}\\u{a}9.9.9.9, GPU 0) first:"
    ), "{err}");
}

/// Every recorded conversation whose questions are ours (the handshake,
/// `TIMEOUT`, `SET FORMAT json`, `STATUS`), replayed answer by answer:
/// NCCL 2.28.9's in JSON, 2.28.3's, which refuses JSON, in text. Each gets
/// the verdict `nccl-find ras` gave on the GPU machine.
#[test]
fn every_recorded_conversation_gets_the_verdict_the_real_job_got() {
    let behind = "it is 1 AllReduce behind (launched 3";
    let gone = "NCCL has no data";
    let cases = [
        ("2.28.9/healthy-json.txt", None, "JSON"),
        (
            "2.28.9/behind-json.txt",
            Some(("rank 1 (process 857", behind)),
            "JSON",
        ),
        (
            "2.28.9/killed-json.txt",
            Some(("rank 1 (process 857", gone)),
            "JSON",
        ),
        ("2.28.3/healthy.txt", None, "text"),
        (
            "2.28.3/behind.txt",
            Some(("rank 1 (process 508", behind)),
            "text",
        ),
        (
            "2.28.3/killed.txt",
            Some(("rank 1 (process 508", gone)),
            "text",
        ),
    ];
    for (file, named, format) in cases {
        let addr = serve(Serve::Replay(server_blocks(file)));
        let o = ras(&["--host", host_of(&addr), "--port", port_of(&addr)]);
        let (code, line) = answer(&o);
        let version = &file[..6];
        match named {
            None => assert_eq!(
                (code, line),
                (
                    0,
                    format!(
                        "OK: 1 communicator(s), 2 rank(s), every rank answering, none behind, no \
                         errors (NCCL {version} at {addr})"
                    )
                ),
                "{file}"
            ),
            Some((who, what)) => assert!(
                code == 1
                    && line
                        .starts_with(&format!("look at {who} on 192.0.2.2, GPU 0) first: {what}")),
                "{file}: {code} {line}"
            ),
        }
        // A rank to look at: the verdict first, then what the service said.
        let (_, out, _) = common::text(&o);
        let lines: Vec<&str> = out.lines().collect();
        if let Some((who, _)) = named {
            assert!(
                lines[0].starts_with(&format!("LOOK AT {who} on 192.0.2.2, GPU 0): ")),
                "{out}"
            );
            assert_eq!(
                lines[1],
                format!(
                    "NCCL's RAS service at {addr} (NCCL {version}, {format} report): 1 \
                     communicator(s), 2 rank(s)"
                ),
                "{file}"
            );
        }
    }
}
