//! The stores the ranks meet through, each a [`Kv`](crate::kv::Kv): our own
//! TCP store that rank 0 serves, our store in files, torch's TCPStore (as
//! a client of the agent's), and the prefix that scopes keys over any store
//! of c10d's shape. The launchers' own stores (PMIx, PMI-1) live beside
//! their launcher in `launchers/`.

pub(crate) mod file;
pub(crate) mod prefix;
pub(crate) mod tcp;
pub(crate) mod tcpstore;
