//! Step 3b: **checks** on the selected install that catch run-time failures
//! at build time: which library the run-time loader will really load,
//! whether the library exports the functions a crate needs, and what static
//! linking needs.

use std::path::{Path, PathBuf};

#[cfg(feature = "cc")]
pub mod compile;
pub mod loader;

use crate::inspect::elf::dynamic_symbols;

/// A required function the library lacks, with the version that added it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingSymbol {
    /// The function.
    pub name: String,
    /// The first NCCL version that has it, where known.
    pub introduced_in: Option<&'static str>,
}

/// The required symbols `library` does not export.
pub(crate) fn missing_symbols(
    library: &Path,
    required: &[String],
) -> Result<Vec<MissingSymbol>, String> {
    if required.is_empty() {
        return Ok(Vec::new());
    }
    let have = dynamic_symbols(library)?;
    Ok(required
        .iter()
        .filter(|s| have.binary_search(s).is_err())
        .map(|s| MissingSymbol {
            name: s.clone(),
            introduced_in: crate::api::introduced_in(s),
        })
        .collect())
}

/// How the selected install is linked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Linking {
    /// `-lnccl` against `libnccl.so`.
    Dynamic,
    /// `libnccl.so.2` by file name (`dylib:+verbatim`), where there is no `libnccl.so`.
    DynamicVerbatim,
    /// `libnccl_static.a` with the static CUDA runtime.
    Static {
        /// `libnccl_static.a`.
        archive: PathBuf,
        /// `libcudart_static.a`.
        cudart: PathBuf,
    },
}
