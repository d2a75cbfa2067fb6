//! Our own TCP store's frames: magic, version, kind, payload length,
//! payload. A connection starts with a challenge, a hello and a welcome
//! (the job token proven both ways, never sent), and then carries the
//! store's requests (put, get, arrive at a barrier) and rank 0's answers.
//! Anything malformed is an error, never a panic.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use crate::proof::{NONCE_LEN, PROOF_LEN};

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
    /// Rank 0's answer: the peer is in, and rank 0 knows the token too.
    Welcome {
        /// The keyed hash of the token over both nonces, the peer's rank and
        /// the world size: a rank 0 of another job cannot make it.
        proof: [u8; PROOF_LEN],
    },
    /// Rank 0 turns a peer away.
    Refused {
        /// Why.
        reason: String,
    },
    /// Stop: a rank failed, or went away.
    Abort {
        /// Why.
        reason: String,
    },
    /// A peer publishes `value` under `key` (no answer).
    Put {
        /// The key.
        key: String,
        /// The value.
        value: Vec<u8>,
    },
    /// A peer asks for what rank `from` put under `key`.
    Get {
        /// The rank that put it.
        from: u32,
        /// The key.
        key: String,
    },
    /// Rank 0's answer to a get: the value, or `None` where there is none.
    Value {
        /// The value.
        value: Option<Vec<u8>>,
    },
    /// A peer has reached barrier `n`.
    Arrive {
        /// The barrier's number.
        n: u32,
    },
    /// Rank 0: every rank has reached barrier `n`.
    Pass {
        /// The barrier's number.
        n: u32,
    },
    /// Rank 0: barrier `n` failed, and why (the ranks that never came).
    Stop {
        /// In words.
        reason: String,
        /// The ranks that never came, the first `MAX_LISTED`.
        missing: Vec<u32>,
    },
}

/// The most missing ranks a [`Msg::Stop`] lists (the words say the rest).
pub(crate) const MAX_LISTED: usize = 4096;

pub(crate) const MAGIC: &[u8; 4] = b"NCFS";
/// Version 3: a store after the welcome (version 2 handed out the unique
/// id in the welcome); the token is proven by keyed hashes, never sent.
pub(crate) const VERSION: u8 = 3;
pub(crate) const MAX_PAYLOAD: usize = 64 * 1024;

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    let b = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(b.len() as u16).to_le_bytes());
    out.extend_from_slice(b);
}

/// Bytes, their length first (u32), at most [`MAX_VALUE`] of them.
fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    let b = &b[..b.len().min(MAX_VALUE)];
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// The longest value a put carries.
pub(crate) const MAX_VALUE: usize = 32 * 1024;

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
        Msg::Welcome { proof } => {
            p.extend_from_slice(proof);
            2
        }
        Msg::Refused { reason } => {
            put_str(&mut p, reason);
            3
        }
        Msg::Abort { reason } => {
            put_str(&mut p, reason);
            5
        }
        Msg::Put { key, value } => {
            put_str(&mut p, key);
            put_bytes(&mut p, value);
            7
        }
        Msg::Get { from, key } => {
            p.extend_from_slice(&from.to_le_bytes());
            put_str(&mut p, key);
            8
        }
        Msg::Value { value } => {
            if let Some(v) = value {
                p.push(1);
                put_bytes(&mut p, v);
            } else {
                p.push(0);
            }
            9
        }
        Msg::Arrive { n } => {
            p.extend_from_slice(&n.to_le_bytes());
            10
        }
        Msg::Pass { n } => {
            p.extend_from_slice(&n.to_le_bytes());
            11
        }
        Msg::Stop { reason, missing } => {
            put_str(&mut p, reason);
            let listed = &missing[..missing.len().min(MAX_LISTED)];
            p.extend_from_slice(&(listed.len() as u32).to_le_bytes());
            for r in listed {
                p.extend_from_slice(&r.to_le_bytes());
            }
            12
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

pub(crate) struct Cursor<'a>(&'a [u8]);

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
    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        if n > MAX_VALUE {
            return Err(format!("a value of {n} bytes is too long"));
        }
        Ok(self.take(n)?.to_vec())
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
        2 => Msg::Welcome { proof: c.array()? },
        3 => Msg::Refused {
            reason: c.string()?,
        },
        5 => Msg::Abort {
            reason: c.string()?,
        },
        7 => Msg::Put {
            key: c.string()?,
            value: c.bytes()?,
        },
        8 => Msg::Get {
            from: c.u32()?,
            key: c.string()?,
        },
        9 => Msg::Value {
            value: match c.take(1)?[0] {
                0 => None,
                1 => Some(c.bytes()?),
                b => return Err(format!("a value flag of {b}")),
            },
        },
        10 => Msg::Arrive { n: c.u32()? },
        11 => Msg::Pass { n: c.u32()? },
        12 => {
            let reason = c.string()?;
            let n = c.u32()? as usize;
            if n > MAX_LISTED {
                return Err(format!("{n} missing ranks listed (at most {MAX_LISTED})"));
            }
            let mut missing = Vec::with_capacity(n);
            for _ in 0..n {
                missing.push(c.u32()?);
            }
            Msg::Stop { reason, missing }
        }
        6 => Msg::Challenge { nonce: c.array()? },
        k => return Err(format!("unknown message kind {k}")),
    };
    if !c.0.is_empty() {
        return Err(format!("{} stray bytes after the message", c.0.len()));
    }
    Ok(m)
}

pub(crate) fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Fills `buf`, giving up at `deadline` however the bytes trickle in.
pub(crate) fn read_full(
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
pub(crate) fn read_msg(s: &mut TcpStream, deadline: Option<Instant>) -> Result<Msg, String> {
    let mut h = [0u8; 10];
    read_full(s, &mut h, deadline)?;
    let (kind, len) = decode_header(&h)?;
    let mut p = vec![0u8; len];
    read_full(s, &mut p, deadline).map_err(|e| format!("reading a message: {e}"))?;
    decode(kind, &p)
}

pub(crate) fn send(s: &mut TcpStream, m: &Msg) -> Result<(), String> {
    s.write_all(&encode(m)).map_err(|e| e.to_string())
}

/// A message's kind, in words: what is logged of a message that came at the
/// wrong time (never its contents, which may hold a token or the id).
pub(crate) fn kind_name(m: &Msg) -> &'static str {
    match m {
        Msg::Challenge { .. } => "a challenge",
        Msg::Hello { .. } => "a hello",
        Msg::Welcome { .. } => "a welcome",
        Msg::Refused { .. } => "a refusal",
        Msg::Abort { .. } => "an abort",
        Msg::Put { .. } => "a put",
        Msg::Get { .. } => "a get",
        Msg::Value { .. } => "a value",
        Msg::Arrive { .. } => "an arrival at a barrier",
        Msg::Pass { .. } => "a barrier's opening",
        Msg::Stop { .. } => "a barrier's failure",
    }
}
