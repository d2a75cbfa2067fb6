//! The facts, gathered in one room before anything is judged: the host
//! (driver, interfaces, shared memory, name lookups, MPI), its RDMA stack,
//! the Python environments and their packages, NCCL's settings (the
//! variables and config files, with where each value came from), and the
//! parameters NCCL's own library lists (asked in a child process).

pub(crate) mod host;
pub(crate) mod params;
pub(crate) mod python;
pub(crate) mod rdma;
pub(crate) mod settings;
