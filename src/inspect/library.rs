//! Looks at one library directory: which `libnccl` files are there, what
//! they link to, their soname, and their version, read both from a
//! versioned file name and from the `NCCL version` text inside the file.

use std::path::{Path, PathBuf};

use super::elf::{dynamic_symbols, parse_u32, parse_version_text, read_elf};
use crate::context::file_name_str;
use crate::problem::{broken, Problem};
use crate::version::{CudaVersion, Version};

/// The `libnccl` files of one directory.
#[derive(Debug, Clone, Default)]
pub(crate) struct LibFiles {
    /// `libnccl.so`: what `-lnccl` links.
    pub link: Option<PathBuf>,
    /// `libnccl.so.2`: the soname file.
    pub soname_file: Option<PathBuf>,
    /// `libnccl.so.2.X.Y` files.
    pub versioned: Vec<PathBuf>,
    /// `libnccl.so.1*` files.
    pub nccl1: Vec<PathBuf>,
    /// `libnccl_static.a`.
    pub static_lib: Option<PathBuf>,
}

impl LibFiles {
    pub fn list(dir: &Path) -> LibFiles {
        let mut f = LibFiles {
            link: None,
            soname_file: None,
            versioned: Vec::new(),
            nccl1: Vec::new(),
            static_lib: None,
        };
        for p in crate::context::sorted_entries(dir) {
            let Some(name) = file_name_str(&p) else {
                continue;
            };
            match name {
                "libnccl.so" => f.link = Some(p),
                "libnccl.so.2" => f.soname_file = Some(p),
                "libnccl_static.a" => f.static_lib = Some(p),
                n if n.starts_with("libnccl.so.1") => f.nccl1.push(p),
                n if n.starts_with("libnccl.so.2.") => f.versioned.push(p),
                _ => {}
            }
        }
        f
    }

    pub fn is_empty(&self) -> bool {
        self.link.is_none()
            && self.soname_file.is_none()
            && self.versioned.is_empty()
            && self.nccl1.is_empty()
            && self.static_lib.is_none()
    }

    /// The file a linker would use: `libnccl.so`, else `libnccl.so.2`,
    /// else the newest `libnccl.so.2.X.Y`, else an NCCL 1 file.
    pub fn primary(&self) -> Option<&PathBuf> {
        self.link
            .as_ref()
            .or(self.soname_file.as_ref())
            .or(self.versioned.last())
            .or(self.nccl1.first())
    }
}

/// A library that passed inspection.
#[derive(Debug, Clone)]
pub(crate) struct LibInfo {
    pub files: LibFiles,
    pub primary: PathBuf,
    pub real: PathBuf,
    pub soname: Option<String>,
    /// `None` for a real NCCL library whose version text could not be read
    /// and whose file name has none: the header's version stands in.
    pub version: Option<Version>,
    pub cuda: Option<CudaVersion>,
    /// What was worked around (a stale NCCL 1 beside it, a version taken
    /// from the file name): notes for the report.
    pub notes: Vec<String>,
}

/// The soname's major version, for `libnccl.so.N`.
fn soname_major(soname: &str) -> Option<u32> {
    parse_u32(soname.strip_prefix("libnccl.so.")?)
}

/// `libnccl.so.2.21.5` → 2.21.5.
pub(crate) fn version_from_name(path: &Path) -> Option<Version> {
    let rest = file_name_str(path)?.strip_prefix("libnccl.so.")?;
    let mut it = rest.split('.');
    let (Some(x), Some(y), Some(z), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return None;
    };
    let (Some(x), Some(y), Some(z)) = (parse_u32(x), parse_u32(y), parse_u32(z)) else {
        return None;
    };
    Some(Version::new(x, y, z, ""))
}

/// Inspects the library files of one directory.
pub(crate) fn inspect(files: LibFiles, ctx: &crate::context::Ctx) -> Result<LibInfo, Problem> {
    let Some(primary) = files.primary() else {
        return Err(Problem::NoLibrary {
            hint: String::new(),
        });
    };
    let primary = primary.clone();
    let real = match ctx.canonical(&primary) {
        Ok(real) => real,
        Err(e) => return Err(broken(ctx.root, &primary, e)),
    };
    let elf = read_library(ctx, &primary, &real)?;
    let mut notes = Vec::new();
    let (version, cuda) = version_of(&elf, &real, &mut notes)?;
    if let Some(v) = &version {
        if v.major == 1 {
            return Err(Problem::Nccl1 {
                file: primary,
                sign: format!("it says it is NCCL {v}"),
            });
        }
    }
    for old in &files.nccl1 {
        let next_to = match &version {
            Some(v) => format!("NCCL {v}"),
            None => format!("the NCCL 2 library {}", real.display()),
        };
        notes.push(format!(
            "{} is a stale NCCL 1 library next to {next_to}; remove it.",
            old.display()
        ));
    }
    Ok(LibInfo {
        files,
        soname: elf.soname,
        primary,
        real,
        version,
        cuda,
        notes,
    })
}

/// Reads the library's ELF header and dynamic section, refusing NCCL 1 by
/// its file name or soname, an unreadable file, a file that is not ELF, and
/// a library for another machine than the target.
fn read_library(
    ctx: &crate::context::Ctx,
    primary: &Path,
    real: &Path,
) -> Result<super::elf::ElfInfo, Problem> {
    if is_nccl1_file(primary) || is_nccl1_file(real) {
        return Err(Problem::Nccl1 {
            file: primary.to_path_buf(),
            sign: format!("{} is an NCCL 1 library file", real.display()),
        });
    }
    if let Err(e) = crate::files::open_regular(real) {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            return Err(Problem::Unreadable {
                path: real.to_path_buf(),
                error: e.to_string(),
            });
        }
    }
    let elf = match read_elf(real) {
        Ok(elf) => elf,
        Err(why) => {
            return Err(Problem::BadLibrary {
                file: real.to_path_buf(),
                why,
            })
        }
    };
    if let Some((machine, wanted)) = ctx.target.elf_machine {
        if elf.machine != machine {
            return Err(Problem::WrongArch {
                file: real.to_path_buf(),
                machine: elf.machine,
                wanted: format!("{wanted} ({})", ctx.target.triple),
            });
        }
    }
    if let (Some(needs), Some((libc, have))) = (elf.glibc_needed, system_glibc(ctx)) {
        if needs > have {
            return Err(Problem::GlibcTooOld {
                file: real.to_path_buf(),
                needs,
                libc: libc.to_path_buf(),
                have,
            });
        }
    }
    if let Some(soname) = &elf.soname {
        if soname.starts_with("libnccl.so.1") {
            return Err(Problem::Nccl1 {
                file: primary.to_path_buf(),
                sign: "its soname is libnccl.so.1".into(),
            });
        }
    }
    Ok(elf)
}

/// The target's C library under the root (`libc.so.6` in the
/// multiarch, `lib64` or `lib` directories) and the glibc version it
/// defines, read once; `None` where there is none for the target's
/// machine (a cross build with no sysroot).
pub(crate) fn system_glibc<'c>(ctx: &'c crate::context::Ctx) -> Option<(&'c Path, (u32, u32))> {
    let found = ctx.glibc.get_or_init(|| {
        let mut dirs = Vec::new();
        if let Some(m) = ctx.target.multiarch {
            dirs.push(format!("/lib/{m}"));
            dirs.push(format!("/usr/lib/{m}"));
        }
        dirs.extend(["/lib64", "/usr/lib64", "/lib", "/usr/lib"].map(String::from));
        for d in dirs {
            let libc = ctx.path(&d).join("libc.so.6");
            match (super::elf::glibc_defined(&libc), ctx.target.elf_machine) {
                (Ok((m, _)), Some((want, _))) if m != want => {}
                (Ok((_, Some(v))), _) => return Some((libc, v)),
                _ => {}
            }
        }
        None
    });
    found.as_ref().map(|(p, v)| (p.as_path(), *v))
}

/// An NCCL 1 file name: `libnccl.so.1*`.
fn is_nccl1_file(path: &Path) -> bool {
    match file_name_str(path) {
        Some(name) => name.starts_with("libnccl.so.1"),
        None => false,
    }
}

/// What a library file says its version is, without judging it (for the
/// run-time loader's view and the loader directory): its embedded version
/// string, else its file name (`libnccl.so.1.3.4`); and its soname.
pub(crate) fn file_version(real: &Path) -> (Option<Version>, Option<String>) {
    let mut soname = None;
    if let Ok(elf) = read_elf(real) {
        soname = elf.soname;
        if let Some((v, _)) = elf.version_text.as_deref().and_then(parse_version_text) {
            return (Some(v), soname);
        }
    }
    (version_from_name(real), soname)
}

/// The library's version and CUDA version: from its `NCCL version` text,
/// else from its file name (with a warning); a real NCCL with neither has
/// no version here (the header's is taken later). Text and name that
/// disagree are refused.
fn version_of(
    elf: &super::elf::ElfInfo,
    real: &Path,
    notes: &mut Vec<String>,
) -> Result<(Option<Version>, Option<CudaVersion>), Problem> {
    let from_text = match &elf.version_text {
        Some(text) => parse_version_text(text),
        None => None,
    };
    let from_name = version_from_name(real);
    match (from_text, from_name) {
        (Some((t, _)), Some(n))
            if t.major != n.major || t.minor != n.minor || t.patch != n.patch =>
        {
            Err(Problem::FileNameMismatch {
                file: real.to_path_buf(),
                name_version: n,
                content_version: t,
            })
        }
        (Some((t, cuda)), _) => Ok((Some(t), cuda)),
        (None, Some(n)) => {
            notes.push(format!(
                "{} has no readable `NCCL version` text; its version, {n}, is taken from its file name.",
                real.display()
            ));
            Ok((Some(n), None))
        }
        (None, None) => {
            is_nccl_without_version(elf, real)?;
            Ok((None, None))
        }
    }
}

/// Never refuse a real NCCL for its strings: a library for the target
/// whose soname is `libnccl.so.2` (or a later major) and that exports
/// `ncclGetVersion` is NCCL. Anything else is not.
fn is_nccl_without_version(elf: &super::elf::ElfInfo, real: &Path) -> Result<(), Problem> {
    let major = match &elf.soname {
        Some(soname) => soname_major(soname),
        None => None,
    };
    let mut exports = false;
    if let Ok(symbols) = dynamic_symbols(real) {
        for n in &symbols {
            if n == "ncclGetVersion" {
                exports = true;
                break;
            }
        }
    }
    if let Some(m) = major {
        if m >= 2 && exports {
            return Ok(());
        }
    }
    let mut lacks = String::from("no `NCCL version X.Y.Z` text, no version in its file name");
    if major.is_none() {
        lacks.push_str(", no libnccl.so.N soname");
    }
    if !exports {
        lacks.push_str(", no ncclGetVersion");
    }
    Err(Problem::BadLibrary {
        file: real.to_path_buf(),
        why: format!("it has {lacks}: it is not an NCCL library"),
    })
}
