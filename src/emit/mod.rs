//! Step 4 of the probe: **emit**. Turns a report into words for people.
//! (Cargo directives for build scripts come with the linking work.)

pub mod cargo;
pub(crate) mod durable;
pub(crate) mod kept;
pub mod loader_dir;
pub mod text;
