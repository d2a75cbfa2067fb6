//! What NCCL will do here: typed answers, by the release that runs, over
//! the facts. Which settings are in force and from where (`settings`),
//! what each does (`knobs`), NCCL's list grammar (`list`), which
//! interfaces it lists and takes and why (`ifaces`), which adapter ports
//! `NCCL_IB_HCA` leaves it (`hca`), why it leaves the RDMA fabric
//! (`fabric`), which plugins it loads (`plugins`), what its RAS service
//! answers (`ras`), what its results mean (`messages`), and what must be
//! the same on every rank (`agree`). Every rule
//! that depends on the release asks the one table of releases,
//! `nccl_find::explain::Change`; the commands ask here, and never judge
//! NCCL's behaviour themselves.

pub(crate) mod agree;
pub(crate) mod fabric;
pub(crate) mod hca;
pub(crate) mod ifaces;
pub(crate) mod knobs;
pub(crate) mod list;
pub(crate) mod messages;
pub(crate) mod plugins;
pub(crate) mod ras;
pub(crate) mod settings;
