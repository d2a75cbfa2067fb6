//! The facts, gathered in one room before anything is judged: the host
//! (driver, shared memory, name lookups, MPI), its network interfaces and
//! routes (`net`), the node as the smoke test's card names it (`node`),
//! its RDMA stack, the Python environments and their packages, what NCCL's
//! settings are read from (`conf`: the variables and every configuration
//! file some release reads), and the parameters NCCL's own library lists
//! (asked in a child process).

pub(crate) mod conf;
pub(crate) mod host;
pub(crate) mod net;
pub(crate) mod node;
pub(crate) mod params;
pub(crate) mod python;
pub(crate) mod rdma;
