//! The one error type. Its message lists every place looked and every
//! candidate rejected with its reason, and says what to do.

use std::fmt;

use crate::inspect::Problem;
use crate::probe::Report;

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
}

/// The error of [`crate::Config::probe`].
#[derive(Debug, Clone)]
pub struct Error {
    // One pointer wide, so that `Result<_, Error>` stays small for callers.
    inner: Box<(ErrorKind, Report)>,
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
