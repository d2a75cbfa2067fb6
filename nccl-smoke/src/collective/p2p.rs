//! Grouped sends and receives, for the collectives that NCCL before 2.28.3
//! lacks (all-to-all, gather, scatter), as nccl-tests makes them.

use std::ffi::c_void;

use super::Call;
use crate::nccl::{NcclLib, NcclResult, INVALID_USAGE, SUCCESS};

/// One transfer: to (`Send`) or from (`Recv`) `peer`, `count` elements at
/// `offset` elements into the buffer.
pub(crate) enum Move {
    Send {
        buf: *const c_void,
        offset: usize,
        peer: usize,
    },
    Recv {
        buf: *mut c_void,
        offset: usize,
        peer: usize,
    },
}

/// Enqueues each move (the caller's group holds them together).
///
/// # Safety
///
/// Every buffer holds `offset + c.count` elements of `c.t` on the GPU of
/// `c.comm`.
pub(crate) unsafe fn moves(nc: &NcclLib, moves: &[Move], c: &Call) -> NcclResult {
    let (Some(send), Some(recv)) = (nc.send, nc.recv) else {
        return INVALID_USAGE;
    };
    let e = c.t.size();
    for m in moves {
        // SAFETY: the caller's contract: each pointer plus its offset stays
        // within its buffer on this GPU.
        let rc = unsafe {
            match *m {
                Move::Send { buf, offset, peer } => send(
                    buf.cast::<u8>().add(offset * e).cast(),
                    c.count,
                    c.t.nccl().0,
                    peer as i32,
                    c.comm,
                    c.stream,
                ),
                Move::Recv { buf, offset, peer } => recv(
                    buf.cast::<u8>().add(offset * e).cast(),
                    c.count,
                    c.t.nccl().0,
                    peer as i32,
                    c.comm,
                    c.stream,
                ),
            }
        };
        if rc != SUCCESS {
            return rc;
        }
    }
    SUCCESS
}
