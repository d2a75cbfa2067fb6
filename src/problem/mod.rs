//! The words of failure: why an install cannot be used ([`Problem`]), why a
//! probe failed ([`ErrorKind`]), and a function a library lacks
//! ([`MissingSymbol`]). Sources, inspection, selection and checks all speak
//! them, so they sit below all of those: this module imports only the base
//! modules (version, target, text safety, files).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::version::{lenient_version, CudaVersion, Version};

mod wanted;
pub(crate) use wanted::{needed, newest_release, pip_pin, wanted};

/// Why a candidate install cannot be used. Each message names the file and
/// says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// A relative path named explicitly that does not exist from the
    /// current directory (a build script's is its package's).
    MissingRelative {
        /// The variable.
        var: String,
        /// Its value, as given.
        given: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A directory named explicitly that is an install's `lib/` or
    /// `include/`: the variable names the prefix above it.
    InnerDir {
        /// The variable.
        var: String,
        /// The directory it names.
        path: PathBuf,
        /// What the directory is, in words.
        what: &'static str,
        /// The prefix it belongs to.
        prefix: PathBuf,
    },
    /// A directory named explicitly that holds no install itself, but a
    /// pip wheel's NCCL below it (`site-packages`, or a virtualenv).
    WheelBelow {
        /// The variable.
        var: String,
        /// What it names.
        path: PathBuf,
        /// The wheel's `nvidia/nccl` directory below it.
        wheel: PathBuf,
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
    /// An NCCL 1 header beside an NCCL 2 library: a stale copy of the
    /// header, left where the library was upgraded.
    StaleHeader {
        /// The NCCL 1 header.
        header: PathBuf,
        /// The sign that gave it away.
        sign: String,
        /// The library beside it.
        library: PathBuf,
        /// The library's release.
        library_version: Version,
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
    /// A library that needs a newer glibc than the target's C library
    /// defines: linking it fails (`undefined reference to …@GLIBC_2.38`),
    /// and so does loading it (`version GLIBC_2.38 not found`).
    GlibcTooOld {
        /// The library.
        file: PathBuf,
        /// The newest glibc version it needs, `(2, 38)`.
        needs: (u32, u32),
        /// The target's C library.
        libc: PathBuf,
        /// The glibc version that defines, `(2, 36)`.
        have: (u32, u32),
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
    /// A path that a cargo directive cannot carry exactly (a build script
    /// would name another path): not UTF-8, or beginning or ending with a
    /// blank.
    NotCarried {
        /// The path, as found.
        path: PathBuf,
        /// Why, in words.
        why: &'static str,
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

/// Paths as a comma-separated list, for messages.
pub(crate) fn list(paths: &[PathBuf]) -> String {
    let mut out = String::new();
    let mut sep = "";
    for p in paths {
        out.push_str(sep);
        out.push_str(&p.display().to_string());
        sep = ", ";
    }
    out
}

impl fmt::Display for Problem {
    // Long: one arm per variant, each the whole message a user reads: a
    // table of messages, read best side by side.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Missing { var, path } => write!(
                f,
                "{var} points at {}, which does not exist. Point it at an NCCL install \
                 (with include/nccl.h and lib/libnccl.so*), or unset it.",
                path.display()
            ),
            Problem::MissingRelative { var, given, path } => write!(
                f,
                "{var}={given} is a relative path, taken from the current directory as {}, which \
                 does not exist: a build script runs in its package's directory, not where cargo \
                 was started. Give an absolute path ({var}=\"$PWD/{given}\" where it exists).",
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
            Problem::InnerDir {
                var,
                path,
                what,
                prefix,
            } => write!(
                f,
                "{var}={} is {what}, and {var} names the prefix above it: did you mean {var}={}?",
                path.display(),
                prefix.display()
            ),
            Problem::WheelBelow { var, path, wheel } => write!(
                f,
                "{} is not an NCCL install, but a pip wheel's NCCL is below it: did you mean \
                 {var}={}?",
                path.display(),
                wheel.display()
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
            Problem::StaleHeader {
                header,
                sign,
                library,
                library_version,
            } => write!(
                f,
                "the header {} is NCCL 1 ({sign}), but the library {} beside it is NCCL \
                 {library_version}: the header is a stale copy. Replace it with NCCL \
                 {library_version}'s nccl.h (reinstall the package or archive the library came \
                 from), or point NCCL_INCLUDE_DIR at that release's include directory.",
                header.display(),
                library.display()
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
                crate::target::machine_name(*machine)
            ),
            Problem::GlibcTooOld {
                file,
                needs,
                libc,
                have,
            } => write!(
                f,
                "use an NCCL built for glibc {}.{} or older (NVIDIA's pip wheels need 2.27 at most), or \
                 build on a system with glibc {}.{} or newer: {} needs glibc {}.{}, and this system's \
                 C library, {}, is glibc {}.{}; linking it fails (undefined reference to …@GLIBC_{}.{}), \
                 and so does loading it",
                have.0,
                have.1,
                needs.0,
                needs.1,
                file.display(),
                needs.0,
                needs.1,
                libc.display(),
                have.0,
                have.1,
                needs.0,
                needs.1,
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
                crate::lines::escape(&path.display().to_string())
            ),
            Problem::NotCarried { path, why } => write!(
                f,
                "{} {why}, which a cargo directive cannot carry exactly: a build script would name \
                 another path, and the link would fail. Rename it, or use an install whose path is plain \
                 text.",
                crate::lines::escape_os(path.as_os_str())
            ),
            Problem::Unsatisfied {
                version,
                requirement,
            } => write!(
                f,
                "NCCL {version} does not satisfy the requirement {requirement}: {}.",
                needed(requirement)
            ),
        }
    }
}

/// A required function the library lacks, with the version that added it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingSymbol {
    /// The function.
    pub name: String,
    /// The first NCCL version that has it, where known.
    pub introduced_in: Option<&'static str>,
}

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
    OnlyNccl1 {
        /// The NCCL 1 files found (headers or libraries).
        files: Vec<PathBuf>,
    },
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
            ErrorKind::NotFound => "NCCL was not found: install it (pip install nvidia-nccl-cu12 in \
                                    the environment you build in, or apt install libnccl2 \
                                    libnccl-dev), or point NCCL_HOME at an install."
                .into(),
            ErrorKind::OnlyNccl1 { files } => format!(
                "only NCCL 1 was found ({}), and NCCL 1 is refused: delete those stale copies or take \
                 them off your paths, then install NCCL 2 (pip install nvidia-nccl-cu12, or apt \
                 install libnccl2 libnccl-dev).",
                list(files)
            ),
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
                match cuda {
                    Some(c) => format!(" (NCCL was built for CUDA {c})"),
                    None => String::new(),
                },
                list(looked)
            ),
            ErrorKind::MissingSymbols { library, version, missing } => {
                let mut names = Vec::new();
                // The newest API level among them (the last of equals).
                let mut need: Option<&str> = None;
                for m in missing {
                    match m.introduced_in {
                        Some(v) => {
                            names.push(format!("{} (added in NCCL {v})", m.name));
                            let newer = match need {
                                Some(n) => lenient_version(v).ok() >= lenient_version(n).ok(),
                                None => true,
                            };
                            if newer {
                                need = Some(v);
                            }
                        }
                        None => names.push(format!("{} (not an NCCL function nccl-find knows)", m.name)),
                    }
                }
                let install = match need {
                    Some(v) => format!(" Install NCCL {v} or newer (e.g. pip install nvidia-nccl-cu12), or point NCCL_HOME at one."),
                    None => String::new(),
                };
                format!(
                    "{} is NCCL {version}, which lacks {}.{install}",
                    library.display(),
                    names.join(", "),
                )
            }
        }
    }
}

/// Why a path could not be resolved: a dangling link (naming the missing
/// file at the end of the chain), a loop, or an unreadable file.
pub(crate) fn broken(root: &Path, path: &Path, e: std::io::Error) -> Problem {
    let mut cur = path.to_path_buf();
    for _ in 0..40 {
        let Ok(target) = std::fs::read_link(&cur) else {
            break;
        };
        // An absolute target is taken from the root, as a sysroot's are.
        let next = match target.strip_prefix("/") {
            Ok(rel) => root.join(rel),
            Err(_) => cur.parent().unwrap_or(Path::new("/")).join(&target),
        };
        if std::fs::symlink_metadata(&next).is_err() {
            return Problem::BrokenSymlink {
                link: path.to_path_buf(),
                target: next,
            };
        }
        cur = next;
    }
    if std::fs::read_link(&cur).is_ok() {
        return Problem::Unreadable {
            path: path.to_path_buf(),
            error: "symbolic links loop".into(),
        };
    }
    Problem::Unreadable {
        path: path.to_path_buf(),
        error: e.to_string(),
    }
}
