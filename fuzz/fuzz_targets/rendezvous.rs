#![no_main]
//! The smoke test's rendezvous decoder: what a hostile peer can send.
use libfuzzer_sys::fuzz_target;
use nccl_rendezvous as rendezvous;

fuzz_target!(|data: &[u8]| {
    if data.len() >= 10 {
        let head: [u8; 10] = data[..10].try_into().unwrap();
        if let Ok((kind, len)) = rendezvous::decode_header(&head) {
            let body = &data[10..];
            if let Ok(m) = rendezvous::decode(kind, &body[..len.min(body.len())]) {
                // Whatever decodes re-encodes to the same message.
                let again = rendezvous::encode(&m);
                let (k2, l2) = rendezvous::decode_header(again[..10].try_into().unwrap()).unwrap();
                assert_eq!(rendezvous::decode(k2, &again[10..10 + l2]).unwrap(), m);
            }
        }
    }
    if let Some((&kind, rest)) = data.split_first() {
        let _ = rendezvous::decode(kind, rest);
    }
});
