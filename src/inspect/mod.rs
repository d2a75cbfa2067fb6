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
    /// The install's CMake package (`<lib>/cmake/NCCL/NCCLConfig.cmake`,
    /// from NCCL 2.29.7's CMake install), where present.
    pub cmake_config: Option<PathBuf>,
    /// The device API's header, `nccl_device.h` (NCCL 2.28.3 on), where present.
    pub device_header: Option<PathBuf>,
    /// The device API's bitcode beside the library (`libnccl_device.bc`,
    /// `libnccl_device.ltoir`; the newest wheels), where present.
    pub device_bitcode: Vec<PathBuf>,
}

impl Candidate {
    /// Every path of the install that a build script may print.
    fn paths(&self) -> impl Iterator<Item = &PathBuf> {
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
    }

    /// The first of its paths that holds a line break (`\n` or `\r`).
    pub(crate) fn line_break(&self) -> Option<&Path> {
        for p in self.paths() {
            if crate::lines::has_line_break(&p.as_os_str().to_string_lossy()) {
                return Some(p.as_path());
            }
        }
        None
    }

    /// The first of its paths that a cargo directive cannot carry exactly,
    /// and why: not UTF-8, or beginning or ending with a blank (cargo trims
    /// a directive's value).
    pub(crate) fn not_carried(&self) -> Option<(&Path, &'static str)> {
        for p in self.paths() {
            let Some(t) = p.to_str() else {
                return Some((p, "is not UTF-8"));
            };
            for part in t.split('/') {
                if part.trim() != part {
                    return Some((p, "has a name that begins or ends with a blank"));
                }
            }
        }
        None
    }

    /// Why a build script refuses this install where the command takes it:
    /// a path that no cargo directive can carry exactly (not UTF-8, or a
    /// name that begins or ends with a blank). `None` when a build script
    /// takes it as the command does.
    pub fn build_script_refuses(&self) -> Option<Problem> {
        let (p, why) = self.not_carried()?;
        Some(Problem::NotCarried {
            path: p.to_path_buf(),
            why,
        })
    }

    /// The directory holding `nccl.h`.
    pub fn include_dir(&self) -> Option<&Path> {
        match &self.header {
            Some(h) => h.parent(),
            None => None,
        }
    }

    /// The version: the header's, else the library's.
    pub fn version(&self) -> Option<&Version> {
        match &self.header_version {
            Some(v) => Some(v),
            None => self.library_version.as_ref(),
        }
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
        Some(Package::Pip { name, version }) => format!(
            "The wheel is incomplete (its include/ was removed, as slimmed images do). Reinstall \
             it: pip install --force-reinstall --no-deps {name}=={version}"
        ),
        _ => "Install NCCL's development files there, or set NCCL_INCLUDE_DIR and NCCL_LIB_DIR.".into(),
    }
}

/// What a site's directories hold, before anything is read: the header,
/// the first library dir with NCCL files, and the dirs that cannot be read.
struct Found {
    header: Option<PathBuf>,
    lib: Option<(PathBuf, LibFiles)>,
    unreadable: Vec<Problem>,
}

impl Found {
    fn look(site: &Site) -> Found {
        let mut header = None;
        for d in &site.include_dirs {
            let p = d.join("nccl.h");
            if std::fs::symlink_metadata(&p).is_ok() {
                header = Some(p);
                break;
            }
        }
        let mut lib = None;
        for d in &site.lib_dirs {
            let files = LibFiles::list(d);
            if !files.is_empty() {
                lib = Some((d.clone(), files));
                break;
            }
        }
        // A directory we may not list would look empty: say so instead.
        let mut unreadable = Vec::new();
        for d in &site.include_dirs {
            unlistable(d, &mut unreadable);
        }
        for d in &site.lib_dirs {
            unlistable(d, &mut unreadable);
        }
        // A directory that can be listed but not entered (no execute
        // permission) hides nccl.h: name the permission, not a missing file.
        if header.is_none() {
            for d in &site.include_dirs {
                let Err(e) = std::fs::symlink_metadata(d.join("nccl.h")) else {
                    continue;
                };
                if e.kind() == std::io::ErrorKind::PermissionDenied {
                    unreadable.push(Problem::Unreadable {
                        path: d.clone(),
                        error: "permission denied: the directory cannot be entered (no execute \
                                permission), so nccl.h in it cannot be opened"
                            .into(),
                    });
                }
            }
        }
        Found {
            header,
            lib,
            unreadable,
        }
    }

    /// The place to show for the site: its root, else the library dir.
    fn place(&self, site: &Site) -> PathBuf {
        if let Some(root) = &site.root {
            return root.clone();
        }
        if let Some((d, _)) = &self.lib {
            return d.clone();
        }
        if let Some(d) = site.lib_dirs.first() {
            return d.clone();
        }
        match site.include_dirs.first() {
            Some(d) => d.clone(),
            None => PathBuf::new(),
        }
    }

    /// Nothing at all: no NCCL file, nothing unreadable.
    fn is_empty(&self) -> bool {
        self.header.is_none() && self.lib.is_none() && self.unreadable.is_empty()
    }
}

/// Adds a problem when `dir` may not be listed.
fn unlistable(dir: &Path, out: &mut Vec<Problem>) {
    if let Err(e) = std::fs::read_dir(dir) {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            out.push(Problem::Unreadable {
                path: dir.to_path_buf(),
                error: e.to_string(),
            });
        }
    }
}

/// Inspects one site. `None` when a non-explicit site holds no NCCL files
/// at all (it is only recorded as looked at).
pub(crate) fn inspect_site(ctx: &Ctx, site: Site) -> Option<Candidate> {
    let found = Found::look(&site);
    let place = found.place(&site);
    if found.is_empty() && site.fault.is_none() && !site.explicit {
        let mut shown = Vec::new();
        for d in &site.lib_dirs {
            shown.push(ctx.show(d));
        }
        for d in &site.include_dirs {
            shown.push(ctx.show(d));
        }
        let outcome = format!("no NCCL files (looked in {})", shown.join(", "));
        ctx.looked(site.origin.source, &place, outcome);
        return None;
    }
    let mut c = Candidate::of_site(&site, &found, place);

    // An explicitly named place that is a dangling link or a loop: its
    // files are not read (they could only be reached outside the root).
    let unreachable = matches!(
        site.fault,
        Some(
            Problem::BrokenSymlink { .. }
                | Problem::Missing { .. }
                | Problem::MissingRelative { .. }
        )
    ) || matches!(&site.fault, Some(Problem::Unreadable { error, .. }) if error == "symbolic links loop");
    let (header, lib) = if unreachable {
        (None, None)
    } else {
        (found.header, found.lib)
    };
    let mut problems = Vec::new();
    if let Some(fault) = &site.fault {
        problems.push(fault.clone());
    }
    let mut unreadable = found.unreadable;
    problems.append(&mut unreadable);
    if header.is_none() && lib.is_none() && problems.is_empty() {
        let mut dirs = site.include_dirs.clone();
        for d in &site.lib_dirs {
            dirs.push(d.clone());
        }
        problems.push(Problem::NoNccl { dirs });
    }
    let outcome = outcome(header.is_some() || lib.is_some(), problems.first());
    ctx.looked(site.origin.source, &c.place, outcome);
    if let Some(p) = &header {
        match header_version(ctx, p) {
            Ok(v) => c.header_version = Some(v),
            Err(p) => problems.push(p),
        }
    }
    if let Some((_, files)) = lib {
        match library::inspect(files, ctx) {
            Ok(info) => c.take_library(ctx, info),
            Err(p) => problems.push(p),
        }
    }
    c.find_parts();
    stale_header(&c, &mut problems);
    pair_problems(&site, &c, header.is_some(), &mut problems);
    if let Some(p) = first_to_say(&problems) {
        c.status = Status::Rejected(p.clone());
    }
    Some(c)
}

/// An NCCL 1 header beside an NCCL 2 library is a stale header, not NCCL
/// 1: both are named, with the fix.
fn stale_header(c: &Candidate, problems: &mut [Problem]) {
    let (Some(lib), Some(v)) = (&c.library, &c.library_version) else {
        return;
    };
    if v.major < 2 {
        return;
    }
    for p in problems.iter_mut() {
        if let Problem::Nccl1 { file, sign } = p {
            *p = Problem::StaleHeader {
                header: file.clone(),
                sign: sign.clone(),
                library: lib.clone(),
                library_version: v.clone(),
            };
        }
    }
}

/// What looking at a site came to, in the words of the list of places
/// looked: NCCL's files, or why there are none.
fn outcome(found: bool, first: Option<&Problem>) -> &'static str {
    match (found, first) {
        (true, _) => "NCCL files found",
        (false, Some(Problem::Missing { .. } | Problem::MissingRelative { .. })) => {
            "does not exist"
        }
        (false, Some(Problem::NotADirectory { .. })) => "a file, not a directory",
        (false, Some(Problem::BrokenSymlink { .. })) => "a broken symbolic link",
        (false, Some(Problem::Unreadable { .. })) => "cannot be read",
        (false, _) => "no NCCL files",
    }
}

/// The problem a rejected candidate is known by: NCCL 1 is the most
/// important thing to say; then the order found.
fn first_to_say(problems: &[Problem]) -> Option<&Problem> {
    for p in problems {
        if p.is_nccl1() {
            return Some(p);
        }
    }
    problems.first()
}

/// The header's version, or why it cannot be used.
fn header_version(ctx: &Ctx, p: &Path) -> Result<Version, Problem> {
    let real = match ctx.canonical(p) {
        Ok(real) => real,
        Err(e) => return Err(broken(ctx.root, p, e)),
    };
    match header::read_header(&real) {
        Err(error) => Err(Problem::Unreadable {
            path: p.to_path_buf(),
            error,
        }),
        Ok(Header::Nccl2(v)) => Ok(v),
        Ok(Header::Nccl1 { sign }) => Err(Problem::Nccl1 {
            file: p.to_path_buf(),
            sign,
        }),
        Ok(Header::Template) => Err(Problem::UnbuiltSource {
            template: p.to_path_buf(),
        }),
        Ok(Header::Bad(why)) => Err(Problem::BadHeader {
            file: p.to_path_buf(),
            why,
        }),
    }
}

/// What is wrong with the header and library as a pair: one missing, or
/// versions that cannot go together; added to `out`.
fn pair_problems(site: &Site, c: &Candidate, has_header: bool, out: &mut Vec<Problem>) {
    if !has_header && c.lib_dir.is_some() {
        out.push(Problem::NoHeader {
            looked: site.include_dirs.clone(),
            hint: no_header_hint(&site.origin),
        });
    }
    if c.lib_dir.is_none() && has_header {
        out.push(Problem::NoLibrary {
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
            out.push(Problem::Mismatch {
                header: h.clone(),
                header_version: hv.clone(),
                library: l.clone(),
                library_version: lv.clone(),
            });
        }
    }
}

impl Candidate {
    /// A candidate for a site, before its files are read.
    fn of_site(site: &Site, found: &Found, place: PathBuf) -> Candidate {
        let mut c = Candidate {
            origin: site.origin.clone(),
            also_found_by: Vec::new(),
            explicit: site.explicit,
            place,
            root: site.root.clone(),
            header: found.header.clone(),
            header_version: None,
            lib_dir: None,
            library: None,
            library_real: None,
            has_dev_link: false,
            soname: None,
            static_library: None,
            library_version: None,
            cuda_version: None,
            status: Status::Selected,
            conflict: None,
            cmake_config: None,
            device_header: None,
            device_bitcode: Vec::new(),
        };
        if let Some((d, _)) = &found.lib {
            c.lib_dir = Some(d.clone());
        }
        c
    }

    /// The install's other parts, where present: its CMake package, the
    /// device API's header and bitcode.
    fn find_parts(&mut self) {
        let file = |p: PathBuf| {
            std::fs::metadata(&p)
                .is_ok_and(|m| m.is_file())
                .then_some(p)
        };
        if let Some(inc) = self.include_dir() {
            self.device_header = file(inc.join("nccl_device.h"));
        }
        if let Some(lib) = &self.lib_dir {
            self.cmake_config = file(lib.join("cmake/NCCL/NCCLConfig.cmake"));
            for name in ["libnccl_device.bc", "libnccl_device.ltoir"] {
                if let Some(p) = file(lib.join(name)) {
                    self.device_bitcode.push(p);
                }
            }
        }
    }

    /// Takes what was read from the library. A real NCCL whose version
    /// cannot be read from the file takes the header's, with a warning.
    fn take_library(&mut self, ctx: &Ctx, info: library::LibInfo) {
        self.library = Some(info.primary.clone());
        self.library_real = Some(info.real.clone());
        self.has_dev_link = info.files.link.is_some();
        self.soname = info.soname.clone();
        self.static_library = info.files.static_lib.clone();
        self.library_version = info.version.clone();
        self.cuda_version = info.cuda;
        for w in &info.notes {
            ctx.note(w.clone());
        }
        if info.version.is_none() {
            if let Some(hv) = &self.header_version {
                ctx.note(format!(
                    "{} is NCCL (soname {}, exports ncclGetVersion) but its version cannot be read \
                     from the file; the header's version, {hv}, is taken for it.",
                    info.real.display(),
                    info.soname.as_deref().unwrap_or("?")
                ));
                self.library_version = Some(hv.clone());
            }
        }
    }
}
