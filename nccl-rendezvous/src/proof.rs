//! Proofs of the job token for the TCP rendezvous: neither side ever sends
//! the token. Each side sends a fresh random nonce; each proves that it
//! knows the token by a keyed hash (HMAC-SHA-256, keyed with the token) over
//! both nonces and what it says, so a proof is good for one connection and
//! one message only, and a listener that does not know the token learns
//! nothing it could answer with.
//!
//! HMAC-SHA-256 is RustCrypto's (`hmac`, `sha2`), and proofs are compared
//! in constant time (`subtle`).
//!
//! What a proof cannot do: a token that is easy to guess can be found by
//! trying guesses against a proof seen on the wire. Use a long random token
//! where the network is not trusted.

/// The length of a proof, in bytes.
pub const PROOF_LEN: usize = 32;

/// The length of a nonce, in bytes.
pub const NONCE_LEN: usize = 16;

/// HMAC-SHA-256 of the pieces of `parts`, in order, keyed with `key`.
fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    use hmac::Mac;
    // HMAC takes a key of any length: a longer one is hashed first.
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(key) else {
        unreachable!("HMAC accepts every key length")
    };
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
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
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

/// A fresh nonce nobody can guess (the kernel's random source).
pub fn nonce() -> [u8; NONCE_LEN] {
    crate::fsafe::random_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hexed(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn sha(data: &[u8]) -> String {
        use sha2::Digest;
        hexed(&sha2::Sha256::digest(data))
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
