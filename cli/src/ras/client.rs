//! The conversation with NCCL's RAS service (NCCL 2.24 and newer): lines of
//! text on TCP, at `localhost:28028` unless the job's `NCCL_RAS_ADDR` moved
//! it. `CLIENT PROTOCOL 2` is answered `SERVER PROTOCOL 2`, `TIMEOUT N` and
//! `SET FORMAT json` (2.28.7 and newer; older releases answer `ERROR`) are
//! answered `OK`, and `STATUS` (`VERBOSE STATUS`: every rank listed) with
//! the report, after which the service closes the connection. Every read is bounded and every wait ends by the
//! deadline.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::rules::ras::Question;

/// The longest reply line taken (NCCL's are under 100 bytes).
const MAX_LINE: usize = 4096;

/// The largest report taken: NCCL's own is about 1 KiB per rank in JSON.
pub(crate) const MAX_REPORT: usize = 64 << 20;

/// The format the report came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// `SET FORMAT json` was taken (NCCL 2.28.7 and newer).
    Json,
    /// The text report (older releases, or `--text`).
    Text,
}

/// What the service said.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The report's format.
    pub(crate) format: Format,
    /// The report, as it came.
    pub(crate) body: Vec<u8>,
}

/// Why the service could not be asked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AskError {
    /// Nothing answered at the address: refused, unreachable, unresolved.
    Unreachable(String),
    /// Something answered, but not as NCCL's RAS service does.
    NotRas(String),
    /// The service did not finish within the time given.
    Slow(String),
    /// The conversation broke off, or the answer was too large.
    Broken(String),
}

/// One conversation with the service: opened, greeted, asked. Every
/// question sent is kept in `sent`, for the report.
pub(crate) struct Conversation<'a> {
    s: TcpStream,
    addr: &'a str,
    deadline: Instant,
    /// The address the connection reached.
    pub(crate) peer: SocketAddr,
}

impl<'a> Conversation<'a> {
    /// Connects to `addr`: no word is said yet.
    pub(crate) fn open(addr: &'a str, deadline: Instant) -> Result<Self, AskError> {
        let s = connect(addr, deadline)?;
        let peer = s
            .peer_addr()
            .map_err(|e| AskError::Broken(format!("{addr}: {e}")))?;
        Ok(Conversation {
            s,
            addr,
            deadline,
            peer,
        })
    }

    /// The handshake and the time NCCL may take: questions every release
    /// takes without gathering a report.
    pub(crate) fn greet(&mut self) -> Result<(), AskError> {
        let (addr, deadline) = (self.addr, self.deadline);
        let said = exchange(&mut self.s, "CLIENT PROTOCOL 2", deadline)?;
        if !said.starts_with("SERVER PROTOCOL ") {
            return Err(AskError::NotRas(format!(
                "{addr} answered \"{}\" to `CLIENT PROTOCOL 2`, not `SERVER PROTOCOL …`: it is not \
                 NCCL's RAS service",
                shown(&said)
            )));
        }
        // NCCL's own collection gets a second less than we wait, so that a
        // rank that does not answer is reported, not waited for past our end.
        let secs = left(deadline).as_secs().saturating_sub(1).max(1);
        expect_ok(&mut self.s, &format!("TIMEOUT {secs}"), deadline, addr)
    }

    /// `SET FORMAT json`: whether the service took it (2.28.7 and newer;
    /// older ones answer `ERROR` and read on).
    pub(crate) fn json(&mut self) -> Result<bool, AskError> {
        match exchange(&mut self.s, "SET FORMAT json", self.deadline)?.as_str() {
            "OK" => Ok(true),
            e if e.starts_with("ERROR") => Ok(false),
            other => Err(not_ok(self.addr, "SET FORMAT json", other)),
        }
    }

    /// Asks for the report (`VERBOSE STATUS` for [`Question::Verbose`],
    /// else `STATUS`) and reads it to its end.
    pub(crate) fn report(mut self, q: Question) -> Result<Answer, AskError> {
        let line = match q {
            Question::Verbose => "VERBOSE STATUS",
            _ => "STATUS",
        };
        send(&mut self.s, line, self.deadline)?;
        let body = read_to_end(&mut self.s, self.deadline, self.addr)?;
        let format = match q {
            Question::Json => Format::Json,
            _ => Format::Text,
        };
        Ok(Answer { format, body })
    }
}

fn connect(addr: &str, deadline: Instant) -> Result<TcpStream, AskError> {
    let mut last = format!("nothing listens at {addr}");
    for a in resolve(addr, deadline)? {
        let t = left(deadline);
        if t.is_zero() {
            return Err(AskError::Slow(format!("{addr} took no connection in time")));
        }
        match TcpStream::connect_timeout(&a, t) {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                last = format!("nothing listens at {addr} ({a}: connection refused)")
            }
            Err(e) if e.kind() == ErrorKind::TimedOut => {
                return Err(AskError::Slow(format!(
                    "{addr} ({a}) took no connection in time"
                )))
            }
            Err(e) => last = format!("{addr} cannot be reached ({a}: {e})"),
        }
    }
    Err(AskError::Unreachable(last))
}

/// `addr`'s addresses, looked up on a thread of its own so that a resolver
/// that hangs cannot hold us past `deadline`.
fn resolve(addr: &str, deadline: Instant) -> Result<Vec<SocketAddr>, AskError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let a = addr.to_string();
    std::thread::spawn(move || {
        let _ = tx.send(a.to_socket_addrs().map(|i| i.collect::<Vec<_>>()));
    });
    match rx.recv_timeout(left(deadline)) {
        Ok(Ok(v)) if !v.is_empty() => Ok(v),
        Ok(Ok(_)) => Err(AskError::Unreachable(format!("{addr} has no address"))),
        Ok(Err(e)) => Err(AskError::Unreachable(format!(
            "{addr} is not an address NCCL's RAS service could listen at ({e}): give HOST:PORT"
        ))),
        Err(_) => Err(AskError::Slow(format!(
            "looking up {addr} did not finish in time"
        ))),
    }
}

fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

fn send(s: &mut TcpStream, line: &str, deadline: Instant) -> Result<(), AskError> {
    let t = left(deadline).max(Duration::from_millis(1));
    let _ = s.set_write_timeout(Some(t));
    s.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| AskError::Broken(format!("sending `{line}` failed: {e}")))
}

/// Sends `line` and reads the one-line reply, without its line break.
fn exchange(s: &mut TcpStream, line: &str, deadline: Instant) -> Result<String, AskError> {
    send(s, line, deadline)?;
    let mut got = Vec::new();
    let mut b = [0u8; 256];
    loop {
        if let Some(end) = got.iter().position(|&c| c == b'\n') {
            got.truncate(end);
            if got.last() == Some(&b'\r') {
                got.pop();
            }
            return Ok(String::from_utf8_lossy(&got).into_owned());
        }
        if got.len() > MAX_LINE {
            return Err(AskError::NotRas(format!(
                "the reply to `{line}` ran past {MAX_LINE} bytes without a line break: not NCCL's RAS \
                 service"
            )));
        }
        let n = read_some(s, &mut b, deadline, line)?;
        if n == 0 {
            return Err(AskError::NotRas(format!(
                "the connection closed before a reply to `{line}` (\"{}\" so far): not NCCL's RAS \
                 service, or it turned us away",
                shown(&String::from_utf8_lossy(&got))
            )));
        }
        got.extend_from_slice(&b[..n]);
    }
}

fn read_some(
    s: &mut TcpStream,
    b: &mut [u8],
    deadline: Instant,
    what: &str,
) -> Result<usize, AskError> {
    loop {
        let t = left(deadline);
        if t.is_zero() {
            return Err(AskError::Slow(format!(
                "no whole answer to `{what}` in time"
            )));
        }
        let _ = s.set_read_timeout(Some(t));
        match s.read(b) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(AskError::Slow(format!(
                    "no whole answer to `{what}` in time"
                )))
            }
            Err(e) => {
                return Err(AskError::Broken(format!(
                    "reading the answer to `{what}` failed: {e}"
                )))
            }
        }
    }
}

fn expect_ok(s: &mut TcpStream, line: &str, deadline: Instant, addr: &str) -> Result<(), AskError> {
    match exchange(s, line, deadline)?.as_str() {
        "OK" => Ok(()),
        other => Err(not_ok(addr, line, other)),
    }
}

fn not_ok(addr: &str, line: &str, said: &str) -> AskError {
    AskError::NotRas(format!(
        "{addr} answered \"{}\" to `{line}`, not `OK`: not the RAS service of an NCCL this command \
         knows",
        shown(said)
    ))
}

/// The report: everything until the service closes the connection.
fn read_to_end(s: &mut TcpStream, deadline: Instant, addr: &str) -> Result<Vec<u8>, AskError> {
    let mut body = Vec::new();
    let mut b = vec![0u8; 64 << 10];
    loop {
        let n = read_some(s, &mut b, deadline, "STATUS")?;
        if n == 0 {
            return Ok(body);
        }
        if body.len() + n > MAX_REPORT {
            return Err(AskError::Broken(format!(
                "{addr}'s report ran past {} MiB: not one NCCL would send",
                MAX_REPORT >> 20
            )));
        }
        body.extend_from_slice(&b[..n]);
    }
}

/// Text from the other end, safe to show and short.
pub(crate) fn shown(s: &str) -> String {
    nccl_rendezvous::untrusted::shown(s, 120)
}
