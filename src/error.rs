//! The one error type. Its message lists every place looked and every
//! candidate rejected with its reason, and says what to do.

use std::fmt;

use std::path::PathBuf;

use crate::check::MissingSymbol;
use crate::inspect::Problem;
use crate::probe::Report;
use crate::version::{CudaVersion, Version};

/// What went wrong, without the report.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// One of `NCCL_INCLUDE_DIR` / `NCCL_LIB_DIR` is set without the other.
    OnlyOneOfPair {
        /// The one that is set, as `NAME=value`.
        set: String,
        /// The one that is missing.
        missing: &'static str,
    },
    /// The version requirement given to [`crate::Config`] is not valid.
    InvalidRequirement {
        /// The requirement as given.
        requirement: String,
        /// Why it is not valid.
        why: String,
    },
    /// An explicitly named install cannot be used. There is no fallback.
    Explicit {
        /// The variable(s) that named it, as `NAME=value`.
        variable: String,
        /// Why it cannot be used.
        problem: Problem,
    },
    /// No install was found at all, or none was usable.
    NotFound,
    /// Only NCCL 1 was found.
    OnlyNccl1,
    /// Usable installs were found, but none meets the version requirement.
    NoneSatisfies {
        /// The requirement, e.g. `>=2.18.0`.
        requirement: String,
    },
    /// `DOCS_RS` is set: nothing was probed.
    DocsRs,
    /// A variable holds a value that means nothing.
    BadValue {
        /// The variable, as `NAME=value`.
        variable: String,
        /// What it should hold.
        expected: &'static str,
    },
    /// Static linking was asked for, but there is no `libnccl_static.a`.
    StaticMissing {
        /// Where it was looked for.
        lib_dir: PathBuf,
        /// What to do.
        hint: String,
    },
    /// Static linking needs `libcudart_static.a`, and none was found.
    CudartStaticMissing {
        /// The directories looked in.
        looked: Vec<PathBuf>,
        /// The CUDA version the NCCL library was built for.
        cuda: Option<CudaVersion>,
    },
    /// A cargo directive would hold a line break (from a directory name),
    /// which cargo cannot carry: it would inject other directives.
    LineBreak {
        /// The directive, its line breaks escaped.
        directive: String,
    },
    /// The compile-and-run check failed.
    CompileCheck {
        /// What happened.
        why: String,
    },
    /// The library lacks functions that were required.
    MissingSymbols {
        /// The library.
        library: PathBuf,
        /// Its version.
        version: Version,
        /// What it lacks.
        missing: Vec<MissingSymbol>,
    },
}

/// The error of [`crate::Config::probe`]. Its `Debug` output is its
/// `Display` text (the whole message), so that `probe().unwrap()` in a build
/// script prints the message, not a dump of the report.
#[derive(Clone)]
pub struct Error {
    // One pointer wide, so that `Result<_, Error>` stays small for callers.
    inner: Box<(ErrorKind, Report)>,
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, report: Report) -> Error {
        Error {
            inner: Box::new((kind, report)),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.inner.0
    }

    /// Everything the probe saw: places looked, candidates, variables read.
    pub fn report(&self) -> &Report {
        &self.inner.1
    }

    /// The first line of the message.
    pub fn headline(&self) -> String {
        self.kind().headline()
    }
}

impl ErrorKind {
    /// A one-line description.
    pub fn headline(&self) -> String {
        match self {
            ErrorKind::OnlyOneOfPair { set, missing } => {
                format!("{set} is set but {missing} is not: set both, or neither.")
            }
            ErrorKind::InvalidRequirement { requirement, why } => {
                format!("the version requirement {requirement:?} is not valid: {why}")
            }
            ErrorKind::Explicit { variable, problem } => {
                format!("{variable} was set, but that install cannot be used (there is no fallback for an explicitly named install): {problem}")
            }
            ErrorKind::NotFound => "NCCL was not found.".into(),
            ErrorKind::OnlyNccl1 => "only NCCL 1 was found, and NCCL 1 is refused.".into(),
            ErrorKind::NoneSatisfies { requirement } => {
                format!("NCCL was found, but no install satisfies the requirement {requirement}.")
            }
            ErrorKind::CompileCheck { why } => format!("the compile-and-run check failed: {why}"),
            ErrorKind::LineBreak { directive } => format!(
                "the directive {directive} would hold a line break, which cargo cannot carry: printing it \
                 would inject other directives into the build. Rename the directory it names, or point the \
                 variables at one without a line break."
            ),
            ErrorKind::DocsRs => "DOCS_RS is set: NCCL was not probed (docs.rs builds need no library).".into(),
            ErrorKind::BadValue { variable, expected } => format!("{variable} means nothing here: set it to {expected}."),
            ErrorKind::StaticMissing { lib_dir, hint } => format!(
                "static linking was asked for (NCCL_STATIC=1 or Config::statik), but {} has no libnccl_static.a: {hint}.",
                lib_dir.display()
            ),
            ErrorKind::CudartStaticMissing { looked, cuda } => format!(
                "static NCCL needs the static CUDA runtime libcudart_static.a{}, and none was found (looked in {}). \
                 Install the CUDA toolkit (cuda-cudart-dev) and set CUDA_HOME, or link NCCL shared (NCCL_STATIC=0).",
                cuda.map(|c| format!(" (NCCL was built for CUDA {c})")).unwrap_or_default(),
                looked.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            ),
            ErrorKind::MissingSymbols { library, version, missing } => {
                let list: Vec<String> = missing
                    .iter()
                    .map(|m| match m.introduced_in {
                        Some(v) => format!("{} (added in NCCL {v})", m.name),
                        None => format!("{} (not an NCCL function nccl-find knows)", m.name),
                    })
                    .collect();
                let need = missing.iter().filter_map(|m| m.introduced_in).max_by(|a, b| {
                    crate::version::lenient_semver(a).ok().cmp(&crate::version::lenient_semver(b).ok())
                });
                format!(
                    "{} is NCCL {version}, which lacks {}.{}",
                    library.display(),
                    list.join(", "),
                    need.map(|v| format!(" Install NCCL {v} or newer (e.g. pip install nvidia-nccl-cu12), or point NCCL_HOME at one."))
                        .unwrap_or_default()
                )
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "nccl-find: {}", self.headline())?;
        f.write_str(&crate::emit::text::details(self.report()))?;
        f.write_str(&crate::emit::text::advice(self.kind(), self.report()))
    }
}

impl std::error::Error for Error {}
