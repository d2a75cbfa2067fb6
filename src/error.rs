//! The one error type. Its message leads with the fix: the install that
//! came nearest and what it lacks, the others, what to do. Every place
//! looked and every variable read follow with `NCCL_FIND_VERBOSE=1`.

use std::fmt;

use crate::problem::ErrorKind;
use crate::report::Report;

/// The error of [`crate::Config::probe`]. Its `Debug` output is its
/// `Display` text (the whole message), so that `probe().unwrap()` in a build
/// script prints the message, not a dump of the report.
#[derive(Clone)]
pub struct Error {
    // One pointer wide, so that `Result<_, Error>` stays small for callers.
    inner: Box<(ErrorKind, Report, bool)>,
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, report: Report) -> Error {
        Error {
            inner: Box::new((kind, report, false)),
        }
    }

    /// The message in full: every place looked, every variable read
    /// (`NCCL_FIND_VERBOSE=1`).
    pub(crate) fn verbose(mut self, on: bool) -> Error {
        self.inner.2 = on;
        self
    }

    /// True under docs.rs (`DOCS_RS` set), where nothing is probed and
    /// nothing is needed: a build script that uses [`crate::Config::probe`]
    /// with `?` or `unwrap` treats this as success.
    ///
    /// ```no_run
    /// match nccl_find::Config::new().probe() {
    ///     Ok(nccl) => { /* use nccl.include_paths, nccl.version, … */ }
    ///     Err(e) if e.is_docs_rs() => {}
    ///     Err(e) => panic!("{e}"),
    /// }
    /// ```
    pub fn is_docs_rs(&self) -> bool {
        matches!(self.kind(), ErrorKind::DocsRs)
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.inner.0
    }

    /// Everything the probe saw: places looked, candidates, variables read.
    pub fn report(&self) -> &Report {
        &self.inner.1
    }

    /// The head of the message: what went wrong; where an install came near,
    /// that install, what it lacks and the fix (then on a second line).
    pub fn headline(&self) -> String {
        crate::emit::text::headline(self.kind(), self.report())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "nccl-find: {}", self.headline())?;
        if self.inner.2 {
            f.write_str(&crate::emit::text::details(self.report()))?;
            f.write_str(&crate::emit::text::advice(self.kind(), self.report()))
        } else {
            f.write_str(&crate::emit::text::brief(self.kind(), self.report()))
        }
    }
}

impl std::error::Error for Error {}
