//! The one error type. Its message lists every place looked and every
//! candidate rejected with its reason, and says what to do.

use std::fmt;

use crate::problem::ErrorKind;
use crate::report::Report;

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

    /// The first line of the message.
    pub fn headline(&self) -> String {
        self.kind().headline()
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
