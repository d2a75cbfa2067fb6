//! Grouped sends and receives, for the collectives that NCCL before 2.28.3
//! lacks (all-to-all, gather, scatter), as nccl-tests makes them.

use std::ffi::c_void;

use super::Place;
use crate::data::Dtype;
use crate::nccl::{Nccl, NcclResult, INVALID_USAGE, SUCCESS};

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
/// Every buffer holds `offset + count` elements of `t` on the GPU of
/// `at.comm`.
pub(crate) unsafe fn moves(
    nc: &Nccl,
    moves: &[Move],
    count: usize,
    t: Dtype,
    at: Place,
) -> NcclResult {
    let (Some(send), Some(recv)) = (nc.send, nc.recv) else {
        return INVALID_USAGE;
    };
    let e = t.size();
    for m in moves {
        // SAFETY: the caller's contract: each pointer plus its offset stays
        // within its buffer on this GPU.
        let rc = unsafe {
            match *m {
                Move::Send { buf, offset, peer } => send(
                    buf.cast::<u8>().add(offset * e).cast(),
                    count,
                    t.nccl().0,
                    peer as i32,
                    at.comm,
                    at.stream,
                ),
                Move::Recv { buf, offset, peer } => recv(
                    buf.cast::<u8>().add(offset * e).cast(),
                    count,
                    t.nccl().0,
                    peer as i32,
                    at.comm,
                    at.stream,
                ),
            }
        };
        if rc != SUCCESS {
            return rc;
        }
    }
    SUCCESS
}
