//! Our own TCP rendezvous's frames: magic, version, kind, payload length,
//! payload. Anything malformed is an error, never a panic.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use super::proof::{NONCE_LEN, PROOF_LEN};

/// A message between ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// Rank 0's first word to a new connection: a fresh nonce that the
    /// peer's hello must prove the token over.
    Challenge {
        /// Rank 0's nonce for this connection.
        nonce: [u8; NONCE_LEN],
    },
    /// A peer introduces itself to rank 0, proving that it knows the job
    /// token without sending it.
    Hello {
        /// The peer's process rank.
        rank: u32,
        /// The world size it believes in.
        world: u32,
        /// GPUs it drives.
        ngpus: u32,
        /// The peer's nonce, that rank 0's welcome must prove the token over.
        nonce: [u8; NONCE_LEN],
        /// The keyed hash of the token over both nonces and the fields above.
        proof: [u8; PROOF_LEN],
    },
    /// Rank 0's answer: the unique id, and the peer's first NCCL rank.
    Welcome {
        /// NCCL's unique id.
        id: Vec<u8>,
        /// NCCL ranks in all.
        nranks: u32,
        /// The peer's first NCCL rank.
        first_rank: u32,
        /// The keyed hash of the token over both nonces and the fields above:
        /// a rank 0 of another job cannot make it.
        proof: [u8; PROOF_LEN],
    },
    /// Rank 0 turns a peer away.
    Refused {
        /// Why.
        reason: String,
    },
    /// A peer's outcome.
    Done {
        /// Whether everything it checked was right.
        ok: bool,
        /// Wrong elements it saw.
        wrong: u64,
        /// In words.
        message: String,
    },
    /// Stop: another rank failed.
    Abort {
        /// Why.
        reason: String,
    },
}

pub(super) const MAGIC: &[u8; 4] = b"NCFS";
/// Version 2: the token is proven by keyed hashes, never sent.
pub(super) const VERSION: u8 = 2;
pub(super) const MAX_PAYLOAD: usize = 64 * 1024;

pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
    let b = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(b.len() as u16).to_le_bytes());
    out.extend_from_slice(b);
}

/// A frame: magic, version, kind, payload length, payload.
pub fn encode(m: &Msg) -> Vec<u8> {
    let mut p = Vec::new();
    let kind = match m {
        Msg::Hello {
            rank,
            world,
            ngpus,
            nonce,
            proof,
        } => {
            for v in [rank, world, ngpus] {
                p.extend_from_slice(&v.to_le_bytes());
            }
            p.extend_from_slice(nonce);
            p.extend_from_slice(proof);
            1
        }
        Msg::Welcome {
            id,
            nranks,
            first_rank,
            proof,
        } => {
            p.extend_from_slice(&(id.len() as u16).to_le_bytes());
            p.extend_from_slice(id);
            p.extend_from_slice(&nranks.to_le_bytes());
            p.extend_from_slice(&first_rank.to_le_bytes());
            p.extend_from_slice(proof);
            2
        }
        Msg::Refused { reason } => {
            put_str(&mut p, reason);
            3
        }
        Msg::Done { ok, wrong, message } => {
            p.push(u8::from(*ok));
            p.extend_from_slice(&wrong.to_le_bytes());
            put_str(&mut p, message);
            4
        }
        Msg::Abort { reason } => {
            put_str(&mut p, reason);
            5
        }
        Msg::Challenge { nonce } => {
            p.extend_from_slice(nonce);
            6
        }
    };
    let mut out = Vec::with_capacity(10 + p.len());
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(kind);
    out.extend_from_slice(&(p.len() as u32).to_le_bytes());
    out.extend_from_slice(&p);
    out
}

/// Reads a frame's header: the kind and the payload length.
pub fn decode_header(h: &[u8; 10]) -> Result<(u8, usize), String> {
    if &h[..4] != MAGIC {
        return Err("not an nccl-find rendezvous message (bad magic)".into());
    }
    if h[4] != VERSION {
        return Err(format!(
            "protocol version {} (this nccl-find speaks {VERSION})",
            h[4]
        ));
    }
    let len = u32::from_le_bytes([h[6], h[7], h[8], h[9]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(format!("a {len}-byte message is too long"));
    }
    Ok((h[5], len))
}

pub(super) struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("message ends early".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u16(&mut self) -> Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    fn string(&mut self) -> Result<String, String> {
        let n = self.u16()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "a string is not UTF-8".to_string())
    }
}

/// Decodes a payload of `kind`. Anything malformed is an error, never a panic.
pub fn decode(kind: u8, payload: &[u8]) -> Result<Msg, String> {
    let mut c = Cursor(payload);
    let m = match kind {
        1 => Msg::Hello {
            rank: c.u32()?,
            world: c.u32()?,
            ngpus: c.u32()?,
            nonce: c.array()?,
            proof: c.array()?,
        },
        2 => {
            let n = c.u16()? as usize;
            if n != 128 {
                return Err(format!("a unique id of {n} bytes (NCCL's has 128)"));
            }
            Msg::Welcome {
                id: c.take(n)?.to_vec(),
                nranks: c.u32()?,
                first_rank: c.u32()?,
                proof: c.array()?,
            }
        }
        3 => Msg::Refused {
            reason: c.string()?,
        },
        4 => {
            let ok = match c.take(1)?[0] {
                0 => false,
                1 => true,
                b => return Err(format!("a done flag of {b}")),
            };
            let w = c.take(8)?;
            Msg::Done {
                ok,
                wrong: u64::from_le_bytes(w.try_into().expect("8 bytes")),
                message: c.string()?,
            }
        }
        5 => Msg::Abort {
            reason: c.string()?,
        },
        6 => Msg::Challenge { nonce: c.array()? },
        k => return Err(format!("unknown message kind {k}")),
    };
    if !c.0.is_empty() {
        return Err(format!("{} stray bytes after the message", c.0.len()));
    }
    Ok(m)
}

pub(super) fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Fills `buf`, giving up at `deadline` however the bytes trickle in.
pub(super) fn read_full(
    s: &mut TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> Result<(), String> {
    let mut got = 0;
    while got < buf.len() {
        let left = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err("no message before the deadline".into());
                }
                Some(left)
            }
            None => None,
        };
        s.set_read_timeout(left).map_err(|e| e.to_string())?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err("the connection closed".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if timed_out(&e) => return Err("no message before the deadline".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// Reads one whole message by `deadline`: the deadline is for the message,
/// not for each read, so a peer that sends a byte at a time cannot stretch it.
pub(super) fn read_msg(s: &mut TcpStream, deadline: Option<Instant>) -> Result<Msg, String> {
    let mut h = [0u8; 10];
    read_full(s, &mut h, deadline)?;
    let (kind, len) = decode_header(&h)?;
    let mut p = vec![0u8; len];
    read_full(s, &mut p, deadline).map_err(|e| format!("reading a message: {e}"))?;
    decode(kind, &p)
}

pub(super) fn send(s: &mut TcpStream, m: &Msg) -> Result<(), String> {
    s.write_all(&encode(m)).map_err(|e| e.to_string())
}

/// A message's kind, in words: what is logged of a message that came at the
/// wrong time (never its contents, which may hold a token or the id).
pub(super) fn kind_name(m: &Msg) -> &'static str {
    match m {
        Msg::Challenge { .. } => "a challenge",
        Msg::Hello { .. } => "a hello",
        Msg::Welcome { .. } => "a welcome",
        Msg::Refused { .. } => "a refusal",
        Msg::Done { .. } => "a done message",
        Msg::Abort { .. } => "an abort",
    }
}
