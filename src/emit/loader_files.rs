//! The loader directory's files: the names a loader opens, each a link to
//! the selected `libnccl.so.2`, made in a directory of the user's own
//! ([`make_loader_dir`]), and the checks on paths that go into one
//! ([`check_loader_path`]). Below both the build script's directives
//! (`loader_dir`) and the cache's kept copy (`kept`).

use std::fmt;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::context::file_name_str;
use crate::inspect::library::file_version;
use crate::version::Version;

/// The names a loader directory holds, each a link to the selected
/// `libnccl.so.2`:
///
/// - `libnccl.so`: cudarc's first try, and the file `-lnccl` opens at link
///   time (cudarc's `dynamic-linking` feature);
/// - `libnccl.so.2`: the soname, which a binary linked with `-lnccl` names
///   as `DT_NEEDED`;
/// - the other names cudarc 0.19 tries before `libnccl.so.1` for CUDA 11,
///   12 and 13 (`libnccl64*.so`, `libnccl.so.9` … `libnccl.so.13`), so that
///   no later name can reach another library through this directory's gap.
pub const LOADER_NAMES: &[&str] = &[
    "libnccl.so",
    "libnccl.so.2",
    "libnccl64.so",
    "libnccl64_9.so",
    "libnccl64_10.so",
    "libnccl64_11.so",
    "libnccl64_12.so",
    "libnccl64_13.so",
    "libnccl64_110_0.so",
    "libnccl64_120_0.so",
    "libnccl64_130_0.so",
    "libnccl.so.9",
    "libnccl.so.10",
    "libnccl.so.11",
    "libnccl.so.12",
    "libnccl.so.13",
];

/// The file that marks a directory as one nccl-find made. A directory
/// without it is never written into.
pub const MARKER: &str = ".nccl-find-loader-dir";

/// The directory's name under `OUT_DIR`.
pub(crate) const OUT_DIR_NAME: &str = "nccl-loader";

/// A loader directory that exists and is up to date.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoaderDir {
    /// The directory: put it first on the loader's path.
    pub dir: PathBuf,
    /// The file every name in it links to (the selected library, links resolved).
    pub library: PathBuf,
    /// Why the loader might still pick another library, if anything says so.
    pub warnings: Vec<String>,
    /// What else happened that the caller should say: from
    /// [`make_in_user_cache`](crate::loader_dir::make_in_user_cache), a
    /// cache passed over, and why.
    pub notes: Vec<String>,
    /// The copy in the user's cache that the binary falls back to once
    /// `dir` is gone (an installed binary, a cleaned `target/`), when one
    /// could be made.
    pub kept: Option<PathBuf>,
}

/// Why a loader directory could not be made or used. The message names the
/// file or variable and says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoaderDirError(String);

impl LoaderDirError {
    pub(crate) fn new(msg: impl Into<String>) -> LoaderDirError {
        LoaderDirError(msg.into())
    }
}

impl fmt::Display for LoaderDirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoaderDirError {}

/// Refuses a path that cannot be put, unchanged, into an rpath, a cargo
/// directive or `LD_LIBRARY_PATH`: not absolute, not UTF-8, a control
/// character (a newline would end a cargo directive), `:` (it separates
/// rpath and `LD_LIBRARY_PATH` entries), `$` (the loader expands `$ORIGIN`,
/// `$LIB` and `$PLATFORM` in an rpath), or blanks at either end.
pub fn check_loader_path(path: &Path, what: &str) -> Result<(), LoaderDirError> {
    let shown = path.display();
    let Some(text) = path.to_str() else {
        return Err(LoaderDirError::new(format!(
            "{what} {shown} is not valid UTF-8, which cargo directives cannot carry: use a directory whose path is plain text"
        )));
    };
    let bad = if !path.is_absolute() {
        Some("is not an absolute path")
    } else if text.chars().any(char::is_control) {
        Some("holds a control character (a newline or carriage return would end a cargo directive)")
    } else if text.contains(':') {
        Some("holds a `:`, which separates rpath and LD_LIBRARY_PATH entries")
    } else if text.contains('$') {
        Some("holds a `$`, which the loader would expand in an rpath ($ORIGIN, $LIB, $PLATFORM)")
    } else if text.trim() != text {
        Some("begins or ends with a blank")
    } else {
        None
    };
    match bad {
        Some(why) => Err(LoaderDirError::new(format!(
            "{what} {:?} {why}: use a directory whose path has none of these (set CARGO_TARGET_DIR, or XDG_CACHE_HOME for the CLI)",
            text
        ))),
        None => Ok(()),
    }
}

/// Refuses NCCL 1: a version of 1, a soname `libnccl.so.1`, a file named
/// `libnccl.so.1*`.
fn refuse_nccl1(
    real: &Path,
    version: Option<&Version>,
    soname: Option<&str>,
) -> Result<(), LoaderDirError> {
    let name = file_name_str(real).unwrap_or("");
    let one = version.is_some_and(|v| v.major < 2)
        || soname.is_some_and(|s| s == "libnccl.so.1" || s.starts_with("libnccl.so.1."))
        || name == "libnccl.so.1"
        || name.starts_with("libnccl.so.1.");
    if one {
        return Err(LoaderDirError::new(format!(
            "{} is NCCL 1{}: cudarc and every NCCL 2 program need NCCL 2. Install NCCL 2 (a pip wheel \
             nvidia-nccl-cu12, or libnccl2) and point NCCL_HOME at it",
            real.display(),
            match version {
                Some(v) => format!(" ({v})"),
                None => String::new(),
            }
        )));
    }
    Ok(())
}

fn io_error(what: &Path, doing: &str, e: io::Error) -> LoaderDirError {
    LoaderDirError::new(format!(
        "{doing} {}: {e}. Check that the directory is yours and writable, or remove it so that it is made again",
        what.display()
    ))
}

/// Makes `dir` a loader directory for `library`, or brings one up to date.
/// No cargo directive is printed: [`crate::Nccl::emit_loader_dir`] does that.
///
/// `mode` is the directory's mode when it is created: `0o755` in `OUT_DIR`
/// (whoever runs the binary must be able to read it), `0o700` in a user
/// cache. The parent must exist.
///
/// It is careful with what it finds: `dir` must be a real directory (not a
/// link), owned by the owner of its parent, writable by no one else, and
/// hold its marker file (`.nccl-find-loader-dir`) unless this call created it. Each name is made as a new
/// link and renamed into place, so an existing link is replaced and never
/// followed; a name that is anything but a link is refused. `library` is
/// resolved, must be a regular file, and must not be NCCL 1.
pub fn make_loader_dir(dir: &Path, library: &Path, mode: u32) -> Result<LoaderDir, LoaderDirError> {
    check_loader_path(dir, "the loader directory")?;
    if mode & 0o022 != 0 {
        return Err(LoaderDirError::new(format!(
            "mode {mode:o} for {} would let others write into it: use 0o755 or 0o700",
            dir.display()
        )));
    }
    let real = selected_library(library)?;
    // Made by this call or by another, the directory holds its marker.
    own_directory(dir, mode)?;
    let marker = dir.join(MARKER);
    match std::fs::symlink_metadata(&marker) {
        Ok(mm) if mm.file_type().is_file() => {}
        _ => {
            return Err(LoaderDirError::new(format!(
                "{} exists but nccl-find did not make it (no {MARKER} in it): remove it, or move it away",
                dir.display()
            )))
        }
    }
    for name in LOADER_NAMES {
        link_into(dir, name, &real)?;
    }
    Ok(LoaderDir {
        dir: dir.to_path_buf(),
        library: real,
        warnings: Vec::new(),
        notes: Vec::new(),
        kept: None,
    })
}

/// The library resolved: a regular file under a plain path, not NCCL 1.
fn selected_library(library: &Path) -> Result<PathBuf, LoaderDirError> {
    let real = std::fs::canonicalize(library).map_err(|e| {
        LoaderDirError::new(format!(
            "the selected library {} cannot be resolved: {e}. Check that the install is still there",
            library.display()
        ))
    })?;
    if let Some(text) = real.to_str() {
        if text.chars().any(char::is_control) {
            return Err(LoaderDirError::new(format!(
                "the library path {text:?} holds a control character: install NCCL under a plain path"
            )));
        }
    }
    let meta = std::fs::metadata(&real).map_err(|e| io_error(&real, "reading", e))?;
    if !meta.is_file() {
        return Err(LoaderDirError::new(format!(
            "{} is not a regular file: point nccl-find at an install holding libnccl.so.2",
            real.display()
        )));
    }
    let (version, soname) = file_version(&real);
    refuse_nccl1(&real, version.as_ref(), soname.as_deref())?;
    Ok(real)
}

/// Creates `dir` with `mode`, or takes the one there if it is a real
/// directory owned by its parent's owner and writable by no one else.
/// Whether this call created it.
fn own_directory(dir: &Path, mode: u32) -> Result<bool, LoaderDirError> {
    let parent = dir
        .parent()
        .ok_or_else(|| LoaderDirError::new(format!("{} has no parent", dir.display())))?;
    let parent_meta = std::fs::metadata(parent).map_err(|e| io_error(parent, "reading", e))?;
    let created = match std::fs::symlink_metadata(dir) {
        Ok(_) => false,
        Err(e) if e.kind() == io::ErrorKind::NotFound => create_marked(dir, parent, mode)?,
        Err(e) => return Err(io_error(dir, "reading", e)),
    };
    let m = std::fs::symlink_metadata(dir).map_err(|e| io_error(dir, "reading", e))?;
    if !m.file_type().is_dir() {
        return Err(LoaderDirError::new(format!(
            "{} exists and is not a directory (a link, or a file): remove it, and nccl-find makes the directory again",
            dir.display()
        )));
    }
    if m.uid() != parent_meta.uid() {
        return Err(LoaderDirError::new(format!(
            "{} belongs to user {}, not to the owner of {} (user {}): remove it",
            dir.display(),
            m.uid(),
            parent.display(),
            parent_meta.uid()
        )));
    }
    if m.permissions().mode() & 0o022 != 0 {
        return Err(LoaderDirError::new(format!(
            "{} can be written by others (mode {:o}): remove it, and nccl-find makes it again",
            dir.display(),
            m.permissions().mode() & 0o7777
        )));
    }
    Ok(created)
}

/// The text of the marker file.
const MARKER_TEXT: &str =
    "This directory was made by nccl-find: links to the NCCL it selected, for the run-time loader.\n";

/// Makes `dir` whole, its marker already in it: made under a temporary name
/// and renamed into place, so that two builds making it at once (one
/// `OUT_DIR`, or one user cache) never see it without its marker. Whether
/// this call made it: `false` when another got there first.
fn create_marked(dir: &Path, parent: &Path, mode: u32) -> Result<bool, LoaderDirError> {
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tmp = parent.join(format!(".{name}.{}.{stamp:x}.new", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(mode)
        .create(&tmp)
        .map_err(|e| io_error(&tmp, "creating", e))?;
    let marker = tmp.join(MARKER);
    let undo = || {
        let _ = std::fs::remove_file(&marker);
        let _ = std::fs::remove_dir(&tmp);
    };
    if let Err(e) = std::fs::write(&marker, MARKER_TEXT) {
        undo();
        return Err(io_error(&marker, "writing", e));
    }
    match std::fs::rename(&tmp, dir) {
        Ok(()) => Ok(true),
        // Another build renamed its own into place first: that one serves.
        Err(_) if std::fs::symlink_metadata(dir).is_ok() => {
            undo();
            Ok(false)
        }
        Err(e) => {
            undo();
            Err(io_error(dir, "creating", e))
        }
    }
}

/// Makes `dir/name` a link to `target`: a new link under a temporary name,
/// renamed over the old one (rename replaces a link, never follows it).
fn link_into(dir: &Path, name: &str, target: &Path) -> Result<(), LoaderDirError> {
    let path = dir.join(name);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => {
            if std::fs::read_link(&path).ok().as_deref() == Some(target) {
                return Ok(());
            }
        }
        Ok(_) => {
            return Err(LoaderDirError::new(format!(
                "{} is not a link that nccl-find made: remove it, and run again",
                path.display()
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(&path, "reading", e)),
    }
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    if let Ok(m) = std::fs::symlink_metadata(&tmp) {
        if m.file_type().is_symlink() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    std::os::unix::fs::symlink(target, &tmp).map_err(|e| io_error(&tmp, "creating the link", e))?;
    std::fs::rename(&tmp, &path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_error(&path, "replacing", e)
    })
}
