//! Proofs of the job token for the TCP rendezvous: neither side ever sends
//! the token. Each side sends a fresh random nonce; each proves that it
//! knows the token by a keyed hash (HMAC-SHA-256, keyed with the token) over
//! both nonces and what it says, so a proof is good for one connection and
//! one message only, and a listener that does not know the token learns
//! nothing it could answer with.
//!
//! SHA-256 and HMAC are written out here from their public definitions
//! (FIPS 180-4, RFC 2104) so that the rendezvous needs no new dependency;
//! the tests check them against the published test vectors.
//!
//! What a proof cannot do: a token that is easy to guess can be found by
//! trying guesses against a proof seen on the wire. Use a long random token
//! where the network is not trusted.

/// The length of a proof, in bytes.
pub const PROOF_LEN: usize = 32;

/// The length of a nonce, in bytes.
pub const NONCE_LEN: usize = 16;

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

const H0: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// SHA-256, fed in pieces.
struct Sha256 {
    h: [u32; 8],
    block: [u8; 64],
    filled: usize,
    total: u64,
}

impl Sha256 {
    fn new() -> Sha256 {
        Sha256 {
            h: H0,
            block: [0; 64],
            filled: 0,
            total: 0,
        }
    }

    fn update(&mut self, mut data: &[u8]) {
        self.total = self.total.wrapping_add(data.len() as u64);
        while !data.is_empty() {
            let n = (64 - self.filled).min(data.len());
            self.block[self.filled..self.filled + n].copy_from_slice(&data[..n]);
            self.filled += n;
            data = &data[n..];
            if self.filled == 64 {
                let b = self.block;
                self.compress(&b);
                self.filled = 0;
            }
        }
    }

    fn compress(&mut self, b: &[u8; 64]) {
        let mut w = [0u32; 64];
        for (i, c) in b.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = self.h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = h
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            h = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in self.h.iter_mut().zip([a, b, c, d, e, f, g, h]) {
            *x = x.wrapping_add(y);
        }
    }

    fn finish(mut self) -> [u8; 32] {
        let bits = self.total.wrapping_mul(8);
        self.update(&[0x80]);
        while self.filled != 56 {
            self.update(&[0]);
        }
        self.update(&bits.to_be_bytes());
        let mut out = [0u8; 32];
        for (o, h) in out.chunks_exact_mut(4).zip(self.h) {
            o.copy_from_slice(&h.to_be_bytes());
        }
        out
    }
}

/// HMAC-SHA-256 of the pieces of `parts`, in order, keyed with `key`.
fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        let mut s = Sha256::new();
        s.update(key);
        k[..32].copy_from_slice(&s.finish());
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(&k.map(|b| b ^ 0x36));
    for p in parts {
        inner.update(p);
    }
    let mut outer = Sha256::new();
    outer.update(&k.map(|b| b ^ 0x5c));
    outer.update(&inner.finish());
    outer.finish()
}

/// What a proof is about: each kind of message has its own label, so a
/// proof of one kind is never good for another.
#[derive(Clone, Copy)]
pub enum Label {
    /// A peer's hello (the peer proves the token to rank 0).
    Hello,
    /// Rank 0's welcome (rank 0 proves the token to the peer).
    Welcome,
}

/// The proof that the sender knows `token`: HMAC-SHA-256 keyed with the
/// token over the label, the nonce of the side that proves, then that of the
/// side that checks, then the message's fields, each with its length first.
pub fn prove(
    token: &str,
    label: Label,
    mine: &[u8; NONCE_LEN],
    theirs: &[u8; NONCE_LEN],
    fields: &[&[u8]],
) -> [u8; PROOF_LEN] {
    let name: &[u8] = match label {
        Label::Hello => b"nccl-find rendezvous 2 hello",
        Label::Welcome => b"nccl-find rendezvous 2 welcome",
    };
    let lens: Vec<[u8; 8]> = fields
        .iter()
        .map(|f| (f.len() as u64).to_le_bytes())
        .collect();
    let mut parts: Vec<&[u8]> = vec![name, mine, theirs];
    for (f, l) in fields.iter().zip(&lens) {
        parts.push(l);
        parts.push(f);
    }
    hmac(token.as_bytes(), &parts)
}

/// Whether two proofs are the same, in time that does not depend on where
/// they first differ.
pub fn same_proof(a: &[u8; PROOF_LEN], b: &[u8; PROOF_LEN]) -> bool {
    let diff = a
        .iter()
        .zip(b)
        .fold(0u8, |d, (x, y)| d | std::hint::black_box(x ^ y));
    diff == 0
}

/// A fresh nonce nobody can guess (the kernel's random source).
pub fn nonce() -> [u8; NONCE_LEN] {
    let hex = crate::fsafe::nonce();
    let mut out = [0u8; NONCE_LEN];
    for (i, o) in out.iter_mut().enumerate() {
        *o = hex
            .get(2 * i..2 * i + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .unwrap_or(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hexed(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn sha(data: &[u8]) -> String {
        let mut s = Sha256::new();
        s.update(data);
        hexed(&s.finish())
    }

    #[test]
    fn sha256_and_hmac_match_the_published_vectors() {
        assert_eq!(
            sha(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        assert_eq!(
            sha(&vec![b'a'; 1_000_000]),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        );
        // RFC 4231, test cases 2 and 6 (a key longer than a block).
        assert_eq!(
            hexed(&hmac(b"Jefe", &[b"what do ya want ", b"for nothing?"])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hexed(&hmac(
                &[0xaa; 131],
                &[b"Test Using Larger Than Block-Size Key - Hash Key First"]
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn a_proof_is_bound_to_its_token_label_nonces_and_fields() {
        let (a, b) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let p = prove("t", Label::Hello, &a, &b, &[b"x"]);
        assert!(same_proof(&p, &prove("t", Label::Hello, &a, &b, &[b"x"])));
        for q in [
            prove("u", Label::Hello, &a, &b, &[b"x"]),
            prove("t", Label::Welcome, &a, &b, &[b"x"]),
            prove("t", Label::Hello, &b, &a, &[b"x"]),
            prove("t", Label::Hello, &a, &b, &[b"y"]),
            prove("t", Label::Hello, &a, &b, &[b"", b"x"]),
        ] {
            assert!(!same_proof(&p, &q));
        }
        assert_ne!(nonce(), nonce());
    }
}
