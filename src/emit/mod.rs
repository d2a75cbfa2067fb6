//! Step 5 of the probe: **emit**. Turns a report into what its readers
//! take: cargo directives for build scripts (`cargo`), words for people
//! (`text`), and the private loader directory (`loader_dir`).

pub mod cargo;
pub(crate) mod durable;
#[cfg(feature = "loader-dir")]
pub(crate) mod kept;
#[cfg(feature = "loader-dir")]
#[cfg_attr(docsrs, doc(cfg(feature = "loader-dir")))]
pub mod loader_dir;
#[cfg(feature = "loader-dir")]
pub(crate) mod loader_files;
pub mod text;
