//! The facts, gathered in one room before anything is judged: the host
//! (driver, interfaces, shared memory, name lookups, MPI), its RDMA stack,
//! the Python environments and their packages, and NCCL's settings (the
//! variables and config files, with where each value came from).

pub(crate) mod host;
pub(crate) mod python;
pub(crate) mod rdma;
pub(crate) mod settings;
