//! Step 2 of the probe: **inspect**. Each site from [`crate::sources`] is
//! looked at closely: the header's version, the library's files, soname and
//! version, the signs of NCCL 1, and whether header and library belong
//! together. The outcome is a [`Candidate`], accepted or rejected with a
//! [`Problem`] that says what to do.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::sources::{Ctx, Origin, Package, Site};
use crate::version::{CudaVersion, Version};

pub mod elf;
pub mod header;
pub(crate) mod library;

use header::Header;
use library::LibFiles;

/// Why a candidate install cannot be used. Each message names the file and
/// says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// An explicitly set variable names something that does not exist.
    Missing {
        /// The variable.
        var: String,
        /// What it names.
        path: PathBuf,
    },
    /// An explicitly set variable names a file where a directory is needed.
    NotADirectory {
        /// The variable.
        var: String,
        /// What it names.
        path: PathBuf,
    },
    /// A directory or file that cannot be read.
    Unreadable {
        /// The path.
        path: PathBuf,
        /// The system's error.
        error: String,
    },
    /// A directory named explicitly holds neither `nccl.h` nor `libnccl`.
    NoNccl {
        /// The directories looked in.
        dirs: Vec<PathBuf>,
    },
    /// An NCCL source checkout that was never built.
    UnbuiltSource {
        /// The `nccl.h.in` template found.
        template: PathBuf,
    },
    /// A library without `nccl.h` beside it.
    NoHeader {
        /// Where the header was looked for.
        looked: Vec<PathBuf>,
        /// What to do, for this kind of install.
        hint: String,
    },
    /// A header without a shared library beside it.
    NoLibrary {
        /// What to do, for this kind of install.
        hint: String,
    },
    /// NCCL 1, which is refused.
    Nccl1 {
        /// The file that is NCCL 1.
        file: PathBuf,
        /// The sign that gave it away.
        sign: String,
    },
    /// An `nccl.h` whose version cannot be read or does not add up.
    BadHeader {
        /// The header.
        file: PathBuf,
        /// Why.
        why: String,
    },
    /// A library file that is not a readable NCCL library.
    BadLibrary {
        /// The file.
        file: PathBuf,
        /// Why.
        why: String,
    },
    /// A symbolic link whose target does not exist.
    BrokenSymlink {
        /// The link.
        link: PathBuf,
        /// The missing target at the end of its chain.
        target: PathBuf,
    },
    /// A `libnccl.so.2.X.Y` whose contents say another version.
    FileNameMismatch {
        /// The file.
        file: PathBuf,
        /// The version in its name.
        name_version: Version,
        /// The version inside it.
        content_version: Version,
    },
    /// Header and library versions that cannot go together.
    Mismatch {
        /// The header.
        header: PathBuf,
        /// Its version.
        header_version: Version,
        /// The library.
        library: PathBuf,
        /// Its version.
        library_version: Version,
    },
    /// `libnccl2` and `libnccl-dev` installed at different versions.
    DpkgSkew {
        /// `libnccl2`'s version.
        runtime: String,
        /// `libnccl-dev`'s version.
        dev: String,
    },
    /// A library built for another machine than the target.
    WrongArch {
        /// The file.
        file: PathBuf,
        /// Its ELF `e_machine`.
        machine: u16,
        /// The target's machine, in words.
        wanted: String,
    },
    /// An `nccl.pc` that cannot be parsed.
    BadPcFile {
        /// The file.
        file: PathBuf,
        /// Why.
        why: String,
    },
    /// A path holding a line break, which no cargo directive can carry.
    LineBreak {
        /// The path, as found.
        path: PathBuf,
    },
    /// A version that does not meet the requirement.
    Unsatisfied {
        /// The version found.
        version: Version,
        /// The requirement, e.g. `>=2.18.0`.
        requirement: String,
    },
}

impl Problem {
    /// True for the NCCL 1 refusal.
    pub fn is_nccl1(&self) -> bool {
        matches!(self, Problem::Nccl1 { .. })
    }
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Missing { var, path } => write!(
                f,
                "{var} points at {}, which does not exist. Point it at an NCCL install \
                 (with include/nccl.h and lib/libnccl.so*), or unset it.",
                path.display()
            ),
            Problem::NotADirectory { var, path } => write!(
                f,
                "{var} points at {}, which is a file, not a directory. Point it at a directory.",
                path.display()
            ),
            Problem::Unreadable { path, error } if error.contains("ermission denied") => write!(
                f,
                "{} cannot be read ({error}): this user lacks the permission. Make it readable \
                 (chmod a+r for a file, a+rx for a directory, or ask its owner), or point the variables \
                 at an install this user can read.",
                path.display()
            ),
            Problem::Unreadable { path, error } => write!(
                f,
                "{} cannot be read ({error}). Check its permissions, or point the variables elsewhere.",
                path.display()
            ),
            Problem::NoNccl { dirs } => write!(
                f,
                "no nccl.h and no libnccl in {}. Point the variable at an NCCL install.",
                list(dirs)
            ),
            Problem::UnbuiltSource { template } => write!(
                f,
                "{} is the template of an NCCL source checkout that was never built. Build it first \
                 (`make -j src.build` in the checkout), then set NCCL_HOME to its build/ directory.",
                template.display()
            ),
            Problem::NoHeader { looked, hint } => {
                write!(f, "no nccl.h beside the library (looked in {}).", list(looked))?;
                if !hint.is_empty() {
                    write!(f, " {hint}")?;
                }
                Ok(())
            }
            Problem::NoLibrary { hint } => {
                write!(f, "nccl.h is there but no libnccl.so* beside it.")?;
                if !hint.is_empty() {
                    write!(f, " {hint}")?;
                }
                Ok(())
            }
            Problem::Nccl1 { file, sign } => write!(
                f,
                "{} is NCCL 1 ({sign}). It is probably a stale copy: an old build cache such as \
                 torch/lib/tmp_install or build/, or an old conda package. NCCL 1 lacks ncclGroupStart \
                 and everything since. Delete the stale copy or take it off your paths, and install NCCL 2.",
                file.display()
            ),
            Problem::BadHeader { file, why } => write!(
                f,
                "{} is not a usable nccl.h: {why}. Reinstall NCCL's headers, or point NCCL_INCLUDE_DIR \
                 at a real NCCL 2 include directory.",
                file.display()
            ),
            Problem::BadLibrary { file, why } => write!(
                f,
                "{} is not a usable NCCL library: {why}. Reinstall NCCL there, or point NCCL_LIB_DIR \
                 at a real NCCL 2 library directory.",
                file.display()
            ),
            Problem::BrokenSymlink { link, target } => write!(
                f,
                "{} is a symbolic link to {}, which does not exist. Reinstall the package that owns it, \
                 or fix the link.",
                link.display(),
                target.display()
            ),
            Problem::FileNameMismatch {
                file,
                name_version,
                content_version,
            } => write!(
                f,
                "{}'s name says NCCL {name_version} but its contents say NCCL {content_version}: \
                 the file was renamed or replaced. Reinstall NCCL.",
                file.display()
            ),
            Problem::Mismatch {
                header,
                header_version,
                library,
                library_version,
            } => write!(
                f,
                "the header {} is NCCL {header_version} but the library {} is NCCL {library_version}: \
                 they come from different installs. Point NCCL_INCLUDE_DIR and NCCL_LIB_DIR at one install, \
                 or reinstall it.",
                header.display(),
                library.display()
            ),
            Problem::DpkgSkew { runtime, dev } => write!(
                f,
                "dpkg has libnccl2 {runtime} but libnccl-dev {dev}; the header and library disagree. \
                 Install matching versions: apt install libnccl2={runtime} libnccl-dev={runtime}"
            ),
            Problem::WrongArch { file, machine, wanted } => write!(
                f,
                "{} is built for another machine (ELF machine {machine}, {}), not for {wanted}. \
                 Install NCCL for the target, or point NCCL_HOME / NCCL_SYSROOT at the target's files.",
                file.display(),
                match machine {
                    62 => "x86-64",
                    183 => "AArch64",
                    21 => "POWER",
                    3 => "i386",
                    _ => "unknown",
                }
            ),
            Problem::BadPcFile { file, why } => write!(
                f,
                "{} cannot be parsed: {why}. Fix or remove it.",
                file.display()
            ),
            Problem::LineBreak { path } => write!(
                f,
                "{} holds a line break, which no cargo directive can carry: printing it would inject \
                 other directives into the build. Rename it, or use an install whose path has none.",
                crate::emit::cargo::escape(&path.display().to_string())
            ),
            Problem::Unsatisfied {
                version,
                requirement,
            } => write!(
                f,
                "NCCL {version} does not satisfy the requirement {requirement}."
            ),
        }
    }
}

/// Where a candidate stands after selection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// The install that was chosen.
    Selected,
    /// Usable, but another install came first; the reason says which.
    Lost(String),
    /// Not usable, with the problem.
    Rejected(Problem),
}

/// One install the probe found, with everything read from it.
#[derive(Debug, Clone, PartialEq, Eq)]
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
        .find(|p| crate::emit::cargo::has_line_break(&p.as_os_str().to_string_lossy()))
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
        Err(e) => Err(library::broken(ctx.root, p, e)),
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
