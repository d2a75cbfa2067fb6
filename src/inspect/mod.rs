//! Step 2 of the probe: **inspect**. Each site from [`crate::sources`] is
//! looked at closely: the header's version, the library's files, soname and
//! version, the signs of NCCL 1, and whether header and library belong
//! together. The outcome is a [`Candidate`], accepted or rejected with a
//! [`Problem`] that says what to do.

use std::path::{Path, PathBuf};

use crate::context::Ctx;
use crate::origin::{Origin, Package};
pub use crate::problem::Problem;
use crate::problem::{broken, list};
use crate::sources::Site;
use crate::version::{CudaVersion, Version};

pub mod elf;
pub mod header;
pub(crate) mod library;

use header::Header;
use library::LibFiles;

/// Where a candidate stands after selection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    /// The install that was chosen.
    Selected,
    /// Usable, but another install came first; the reason says which.
    Lost(String),
    /// Not usable, with the problem.
    Rejected(Problem),
}

impl Status {
    /// A fixed word for tools (`--json`): `selected`, `lost` or `rejected`.
    pub fn id(&self) -> &'static str {
        match self {
            Status::Selected => "selected",
            Status::Lost(_) => "lost",
            Status::Rejected(_) => "rejected",
        }
    }

    /// Why, in words: `selected`, the reason it lost, or the problem.
    pub fn reason(&self) -> String {
        match self {
            Status::Selected => "selected".into(),
            Status::Lost(why) => why.clone(),
            Status::Rejected(p) => p.to_string(),
        }
    }
}

/// One install the probe found, with everything read from it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidate {
    /// Where it was found.
    pub origin: Origin,
    /// Other sources that found the very same files.
    pub also_found_by: Vec<Origin>,
    /// Named by an NCCL variable.
    pub explicit: bool,
    /// The place to show for it: its root, else its library dir.
    pub place: PathBuf,
    /// The install root, where there is one.
    pub root: Option<PathBuf>,
    /// `nccl.h`.
    pub header: Option<PathBuf>,
    /// The header's version.
    pub header_version: Option<Version>,
    /// The library directory.
    pub lib_dir: Option<PathBuf>,
    /// The shared library a linker would use (`libnccl.so`, else `libnccl.so.2`).
    pub library: Option<PathBuf>,
    /// That file with every symbolic link resolved.
    pub library_real: Option<PathBuf>,
    /// Whether `libnccl.so` exists, so that `-lnccl` works.
    pub has_dev_link: bool,
    /// The library's soname.
    pub soname: Option<String>,
    /// `libnccl_static.a`, where present.
    pub static_library: Option<PathBuf>,
    /// The library's version.
    pub library_version: Option<Version>,
    /// The CUDA version the library was built for.
    pub cuda_version: Option<CudaVersion>,
    /// Selected, lost, or rejected.
    pub status: Status,
    /// Set when this install is usable but differs from the selected one.
    pub conflict: Option<String>,
}

impl Candidate {
    /// The first of its paths that holds a line break (`\n` or `\r`).
    pub(crate) fn line_break(&self) -> Option<&Path> {
        [
            Some(&self.place),
            self.root.as_ref(),
            self.header.as_ref(),
            self.lib_dir.as_ref(),
            self.library.as_ref(),
            self.library_real.as_ref(),
            self.static_library.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(PathBuf::as_path)
        .find(|p| crate::lines::has_line_break(&p.as_os_str().to_string_lossy()))
    }

    /// The directory holding `nccl.h`.
    pub fn include_dir(&self) -> Option<&Path> {
        self.header.as_deref().and_then(Path::parent)
    }

    /// The version: the header's, else the library's.
    pub fn version(&self) -> Option<&Version> {
        self.header_version
            .as_ref()
            .or(self.library_version.as_ref())
    }

    /// True when it can be used.
    pub fn is_usable(&self) -> bool {
        !matches!(self.status, Status::Rejected(_))
    }

    /// The problem, when rejected.
    pub fn problem(&self) -> Option<&Problem> {
        match &self.status {
            Status::Rejected(p) => Some(p),
            _ => None,
        }
    }
}

/// What to do about a missing header, for this kind of install.
fn no_header_hint(origin: &Origin) -> String {
    match &origin.package {
        Some(Package::Dpkg { runtime: Some(v), dev: None }) => format!(
            "Only the runtime package libnccl2 {v} is installed. Install the headers: apt install libnccl-dev={v}"
        ),
        Some(Package::Pip { name, .. }) => format!(
            "The wheel is incomplete. Reinstall it: pip install --force-reinstall {name}"
        ),
        _ => "Install NCCL's development files there, or set NCCL_INCLUDE_DIR and NCCL_LIB_DIR.".into(),
    }
}

/// Inspects one site. `None` when a non-explicit site holds no NCCL files
/// at all (it is only recorded as looked at).
pub(crate) fn inspect_site(ctx: &Ctx, site: Site) -> Option<Candidate> {
    let header = site
        .include_dirs
        .iter()
        .map(|d| d.join("nccl.h"))
        .find(|p| std::fs::symlink_metadata(p).is_ok());
    // A directory that can be listed but not entered (no execute
    // permission) hides nccl.h: name the permission, not a missing file.
    let unenterable: Vec<Problem> = site
        .include_dirs
        .iter()
        .filter(|d| {
            header.is_none()
                && std::fs::symlink_metadata(d.join("nccl.h"))
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
        })
        .map(|d| Problem::Unreadable {
            path: d.clone(),
            error: "permission denied: the directory cannot be entered (no execute permission), \
                    so nccl.h in it cannot be opened"
                .into(),
        })
        .collect();
    let lib = site
        .lib_dirs
        .iter()
        .map(|d| (d.clone(), LibFiles::list(d)))
        .find(|(_, f)| !f.is_empty());
    let place = site
        .root
        .clone()
        .or_else(|| lib.as_ref().map(|(d, _)| d.clone()))
        .or_else(|| site.lib_dirs.first().cloned())
        .or_else(|| site.include_dirs.first().cloned())
        .unwrap_or_default();
    // A directory we may not list would look empty: say so instead.
    let unreadable: Vec<Problem> = site
        .include_dirs
        .iter()
        .chain(&site.lib_dirs)
        .filter_map(|d| match std::fs::read_dir(d) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                Some(Problem::Unreadable {
                    path: d.clone(),
                    error: e.to_string(),
                })
            }
            _ => None,
        })
        .chain(unenterable)
        .collect();
    if header.is_none()
        && lib.is_none()
        && site.fault.is_none()
        && !site.explicit
        && unreadable.is_empty()
    {
        let mut dirs = site.lib_dirs.clone();
        dirs.extend(site.include_dirs.iter().cloned());
        ctx.looked(
            site.origin.source,
            &place,
            format!(
                "no NCCL files (looked in {})",
                dirs.iter()
                    .map(|d| ctx.show(d))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        return None;
    }
    let mut c = Candidate {
        origin: site.origin.clone(),
        also_found_by: Vec::new(),
        explicit: site.explicit,
        place: place.clone(),
        root: site.root.clone(),
        header: header.clone(),
        header_version: None,
        lib_dir: lib.as_ref().map(|(d, _)| d.clone()),
        library: None,
        library_real: None,
        has_dev_link: false,
        soname: None,
        static_library: None,
        library_version: None,
        cuda_version: None,
        status: Status::Selected,
        conflict: None,
    };
    ctx.looked(site.origin.source, &place, "NCCL files found");

    // An explicitly named place that is a dangling link or a loop: its
    // files are not read (they could only be reached outside the root).
    let unreachable = matches!(
        site.fault,
        Some(Problem::BrokenSymlink { .. } | Problem::Missing { .. })
    ) || matches!(&site.fault, Some(Problem::Unreadable { error, .. }) if error == "symbolic links loop");
    let header = header.filter(|_| !unreachable);
    let lib = lib.filter(|_| !unreachable);
    let mut problems: Vec<Problem> = site.fault.into_iter().collect();
    problems.extend(unreadable.iter().cloned());
    if header.is_none() && lib.is_none() && problems.is_empty() {
        let mut dirs = site.include_dirs.clone();
        dirs.extend(site.lib_dirs.iter().cloned());
        problems.push(Problem::NoNccl { dirs });
    }
    let header_read = header.as_ref().map(|p| match ctx.canonical(p) {
        Err(e) => Err(broken(ctx.root, p, e)),
        Ok(real) => match header::read_header(&real) {
            Err(error) => Err(Problem::Unreadable {
                path: p.clone(),
                error,
            }),
            Ok(Header::Nccl2(v)) => Ok(v),
            Ok(Header::Nccl1 { sign }) => Err(Problem::Nccl1 {
                file: p.clone(),
                sign,
            }),
            Ok(Header::Template) => Err(Problem::UnbuiltSource {
                template: p.clone(),
            }),
            Ok(Header::Bad(why)) => Err(Problem::BadHeader {
                file: p.clone(),
                why,
            }),
        },
    });
    let lib_read = lib.map(|(_, files)| library::inspect(files, ctx));

    match &header_read {
        Some(Ok(v)) => c.header_version = Some(v.clone()),
        Some(Err(p)) => problems.push(p.clone()),
        None => {}
    }
    match &lib_read {
        Some(Ok(info)) => {
            c.library = Some(info.primary.clone());
            c.library_real = Some(info.real.clone());
            c.has_dev_link = info.files.link.is_some();
            c.soname = info.soname.clone();
            c.static_library = info.files.static_lib.clone();
            c.library_version = info.version.clone();
            c.cuda_version = info.cuda;
            for w in &info.warnings {
                ctx.warn(w.clone());
            }
            if info.version.is_none() {
                if let Some(hv) = &c.header_version {
                    ctx.warn(format!(
                        "{} is NCCL (soname {}, exports ncclGetVersion) but its version cannot be read \
                         from the file; the header's version, {hv}, is taken for it.",
                        info.real.display(),
                        info.soname.as_deref().unwrap_or("?")
                    ));
                    c.library_version = Some(hv.clone());
                }
            }
        }
        Some(Err(p)) => problems.push(p.clone()),
        None => {}
    }
    if header.is_none() && c.lib_dir.is_some() {
        problems.push(Problem::NoHeader {
            looked: site.include_dirs.clone(),
            hint: no_header_hint(&site.origin),
        });
    }
    if c.lib_dir.is_none() && header.is_some() {
        problems.push(Problem::NoLibrary {
            hint: format!("Looked in {}.", list(&site.lib_dirs)),
        });
    }
    if let (Some(hv), Some(lv), Some(h), Some(l)) = (
        &c.header_version,
        &c.library_version,
        &c.header,
        &c.library_real,
    ) {
        if hv.major != lv.major || lv.minor < hv.minor {
            problems.push(Problem::Mismatch {
                header: h.clone(),
                header_version: hv.clone(),
                library: l.clone(),
                library_version: lv.clone(),
            });
        }
    }
    // NCCL 1 is the most important thing to say; then the order found.
    problems.sort_by_key(|p| !p.is_nccl1());
    if let Some(p) = problems.into_iter().next() {
        c.status = Status::Rejected(p);
    }
    Some(c)
}
