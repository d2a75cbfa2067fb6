//! What the command hands to other build systems, in one room: the
//! pkg-config flags and `--env` (`pkgflags`), `--cmake-config` (`cmake`),
//! and `--loader-env` with the private loader directory it needs (`shim`).

pub(crate) mod cmake;
pub(crate) mod pkgflags;
pub(crate) mod shim;
