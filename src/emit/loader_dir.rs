//! A private **loader directory** for programs that open NCCL by name at run
//! time, as cudarc does.
//!
//! cudarc's NCCL module calls `dlopen("libnccl.so")`, then a list of other
//! names ending with `libnccl.so.1`, and never names `libnccl.so.2` or a
//! path. A pip wheel or a runtime-only package has no `libnccl.so`, so
//! cudarc finds nothing, or a stale NCCL 1. A loader directory holds every
//! name cudarc tries before `libnccl.so.1`, each a link to the
//! `libnccl.so.2` that nccl-find selected, and the final binary gets a
//! `DT_RPATH` to it, which the loader searches before `LD_LIBRARY_PATH`.
//!
//! ```no_run
//! // build.rs of the binary that uses cudarc
//! let nccl = nccl_find::Config::new().cargo_metadata(false).probe_or_exit();
//! if let Some(nccl) = nccl {
//!     nccl.emit_loader_dir_or_exit();
//! }
//! ```
//!
//! The install itself is never touched: only links in a directory of the
//! build's own (`OUT_DIR`) or of the user's cache (`nccl-find --loader-env`).

use std::fmt;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::context::file_name_str;
use crate::inspect::library::file_version;
use crate::report::Nccl;
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
const OUT_DIR_NAME: &str = "nccl-loader";

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
    fn new(msg: impl Into<String>) -> LoaderDirError {
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
/// No cargo directive is printed: [`Nccl::emit_loader_dir`] does that.
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

/// Why the loader might still pick another library than the loader
/// directory's, judged from the build's environment.
fn build_warnings(dir: &Path) -> Vec<String> {
    let var = |k: &str| std::env::var(k).ok();
    let mut out = Vec::new();
    if let (Some(t), Some(h)) = (var("TARGET"), var("HOST")) {
        if t != h {
            out.push(format!(
                "cross-compiling for {t}: the rpath names {} on this machine, which the target will not have. \
                 There, run `eval \"$(nccl-find --loader-env)\"` before the program",
                dir.display()
            ));
        }
    }
    if let Some(flags) = var("CARGO_ENCODED_RUSTFLAGS") {
        if flags.contains("enable-new-dtags") {
            out.push(
                "RUSTFLAGS hold --enable-new-dtags: the binary would get a RUNPATH, which LD_LIBRARY_PATH overrides, \
                 so another libnccl.so on LD_LIBRARY_PATH would win. Remove that flag"
                    .to_string(),
            );
        }
    }
    if let Some(pre) = var("LD_PRELOAD") {
        if pre.contains("nccl") {
            out.push(format!(
                "LD_PRELOAD={pre} loads a library before any search; if it is set when the program runs, that NCCL is used"
            ));
        }
    }
    out
}

/// Every line this module prints goes through the one guarded printer: a
/// line with a line break is never printed as it is.
fn print_all(lines: &[String]) {
    crate::emit::cargo::print(lines);
}

/// A path as a directive carries it, or why it cannot: not UTF-8 (the
/// directive would name another path), or holding a control character.
fn directive_path(p: &Path, what: &str) -> Result<String, LoaderDirError> {
    match p.to_str() {
        Some(t) if !t.chars().any(char::is_control) => Ok(t.to_string()),
        _ => Err(LoaderDirError::new(format!(
            "{what} {} cannot be named in a cargo directive exactly (it is not UTF-8, or holds a control \
             character): move it, or point the variables at an install whose path is plain text",
            crate::lines::escape(&p.to_string_lossy())
        ))),
    }
}

fn out_dir() -> Result<PathBuf, LoaderDirError> {
    match std::env::var_os("OUT_DIR") {
        Some(d) if !d.is_empty() => Ok(PathBuf::from(d)),
        _ => Err(LoaderDirError::new(
            "OUT_DIR is unset: emit_loader_dir is for build scripts, which cargo runs with OUT_DIR set",
        )),
    }
}

fn check_target_os() -> Result<(), LoaderDirError> {
    match std::env::var("CARGO_CFG_TARGET_OS") {
        Ok(os) if os != "linux" => Err(LoaderDirError::new(format!(
            "a loader directory is for Linux's loader; the target OS is {os}. Leave emit_loader_dir out for this target"
        ))),
        _ => Ok(()),
    }
}

/// Makes the loader directory `$OUT_DIR/nccl-loader` for `library` and
/// prints the directives; the shared part of the two `emit_*` functions.
///
/// The binary gets a `DT_RPATH` entry for each directory that will stay
/// the user's: the one in `OUT_DIR` unless that is temporary (`cargo
/// install` builds in one), and the kept copy in the user's cache unless
/// that lies where another user could make it again. Neither is given when
/// the library itself lies in such a place: a warning says why, and what
/// to do.
fn emit_for(library: &Path, rerun: Vec<String>) -> Result<LoaderDir, LoaderDirError> {
    print_all(&rerun);
    check_target_os()?;
    directive_path(library, "the library")?;
    let dir = out_dir()?.join(OUT_DIR_NAME);
    let mut made = make_loader_dir(&dir, library, 0o755)?;
    let mut lines = vec![format!(
        "cargo:rerun-if-changed={}",
        directive_path(&made.library, "the library")?
    )];
    for k in ["LD_PRELOAD", "CARGO_ENCODED_RUSTFLAGS"] {
        lines.push(format!("cargo:rerun-if-env-changed={k}"));
    }
    check_loader_path(&dir, "the loader directory")?;
    lines.push(format!("cargo:rustc-link-search=native={}", dir.display()));
    let mut rpath: Vec<PathBuf> = Vec::new();
    let mut why_not: Vec<String> = Vec::new();
    let home = made.library.parent().unwrap_or(Path::new("/"));
    if let Some(why) = super::durable::rpath_risk(home) {
        why_not.push(format!("the library's own directory: {why}"));
    } else {
        match super::durable::rpath_risk(&dir) {
            None => rpath.push(dir.clone()),
            Some(why) => why_not.push(why),
        }
        // A second entry, searched when the first directory is gone.
        match super::kept::kept_dir(&made.library) {
            Ok(kept) => {
                lines.push(format!(
                    "cargo:rerun-if-changed={}",
                    kept.join("libnccl.so.2").display()
                ));
                rpath.push(kept.clone());
                made.kept = Some(kept);
            }
            Err(why) => why_not.push(format!("no copy in your cache: {why}")),
        }
    }
    if !rpath.is_empty() {
        lines.push("cargo:rustc-link-arg=-Wl,--disable-new-dtags".to_string());
    }
    for d in &rpath {
        check_loader_path(d, "the loader directory")?;
        for arg in ["-Xlinker", "-rpath", "-Xlinker"] {
            lines.push(format!("cargo:rustc-link-arg={arg}"));
        }
        lines.push(format!("cargo:rustc-link-arg={}", d.display()));
    }
    let fix =
        "Set XDG_CACHE_HOME to a directory of your own (not below /tmp), or start the program \
               after `eval \"$(nccl-find --loader-env)\"`";
    if rpath.is_empty() {
        made.warnings.push(format!(
            "no rpath was given, so the binary finds no NCCL of its own: {}. {fix}",
            why_not.join("; ")
        ));
    } else if made.kept.is_none() {
        made.warnings.push(format!(
            "the binary finds its NCCL only while {} exists ({}), so an installed one (cargo install) will not. {fix}",
            dir.display(),
            why_not.join("; ")
        ));
    }
    made.warnings.append(&mut build_warnings(&dir));
    for w in &made.warnings {
        lines.push(format!(
            "cargo:warning=nccl-find: {}",
            crate::lines::escape(w)
        ));
    }
    print_all(&lines);
    Ok(made)
}

#[cfg_attr(docsrs, doc(cfg(feature = "loader-dir")))]
impl Nccl {
    /// For the **final binary's** build script, when something opens NCCL
    /// by name at run time (cudarc's `dynamic-loading`) or links it with
    /// `-lnccl` (cudarc's `dynamic-linking`): makes a loader directory in
    /// `OUT_DIR` whose names ([`LOADER_NAMES`]) all link to this install's
    /// `libnccl.so.2`, and prints
    ///
    /// - `cargo:rustc-link-search=native=<dir>`,
    /// - a `DT_RPATH` to it (`-Wl,--disable-new-dtags`, `-rpath <dir>`),
    ///   which the loader searches before `LD_LIBRARY_PATH`,
    /// - `rerun-if-*` for every variable the probe read and the library,
    /// - a `cargo:warning` for anything that could still make the loader
    ///   pick another library.
    ///
    /// It must run in the final binary's build script: a dependency's
    /// `rustc-link-arg` does not reach it. Refuses NCCL 1 and non-Linux
    /// targets; never touches the install. The binary then works on this
    /// machine while `target/` is there; to ship it, see `nccl-find
    /// --loader-env`.
    pub fn emit_loader_dir(&self) -> Result<LoaderDir, LoaderDirError> {
        let rerun = crate::emit::cargo::rerun_env(&self.report.env);
        if self.library_real.as_os_str().is_empty() {
            print_all(&rerun);
            return Err(LoaderDirError::new(format!(
                "the selected NCCL in {} has no shared library (libnccl.so.2), which cudarc needs: \
                 install one, or point NCCL_HOME at an install that has it",
                self.lib_dir.display()
            )));
        }
        if self.library_version.major < 2 || self.version.major < 2 {
            print_all(&rerun);
            return Err(LoaderDirError::new(format!(
                "the selected {} is NCCL {}: cudarc needs NCCL 2",
                self.library_real.display(),
                self.library_version
            )));
        }
        emit_for(&self.library_real, rerun)
    }

    /// [`Nccl::emit_loader_dir`], and on failure print the message to
    /// stderr and exit with status 1 (no panic, no backtrace).
    pub fn emit_loader_dir_or_exit(&self) -> LoaderDir {
        self.emit_loader_dir().unwrap_or_else(|e| {
            eprintln!("nccl-find: {e}");
            std::process::exit(1)
        })
    }
}

/// [`Nccl::emit_loader_dir`] for a final binary that depends on a
/// `links = "nccl"` -sys crate instead of probing itself: reads
/// `DEP_NCCL_LIB_DIR` and uses the `libnccl.so.2` (else `libnccl.so`) in
/// it. `None` (printing only the rerun line) when the variable is unset.
pub fn emit_loader_dir_from_dep() -> Option<Result<LoaderDir, LoaderDirError>> {
    let rerun = vec!["cargo:rerun-if-env-changed=DEP_NCCL_LIB_DIR".to_string()];
    let Some(dir) = std::env::var_os("DEP_NCCL_LIB_DIR") else {
        print_all(&rerun);
        return None;
    };
    let dir = PathBuf::from(dir);
    let mut library = None;
    for name in ["libnccl.so.2", "libnccl.so"] {
        let path = dir.join(name);
        if path.exists() {
            library = Some(path);
            break;
        }
    }
    Some(match library {
        Some(lib) => emit_for(&lib, rerun),
        None => {
            print_all(&rerun);
            Err(LoaderDirError::new(format!(
                "DEP_NCCL_LIB_DIR={} holds no libnccl.so.2 or libnccl.so (a static-only install?): \
                 cudarc needs the shared library",
                crate::lines::escape(&dir.to_string_lossy())
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nccl-find-loader-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn paths_that_cannot_be_carried_are_refused() {
        for bad in ["/a\nb", "/a\rb", "/a:b", "/a/$ORIGIN", "rel/dir", "/a "] {
            let e = check_loader_path(Path::new(bad), "the loader directory").unwrap_err();
            assert!(e.to_string().starts_with("the loader directory"), "{e}");
        }
        check_loader_path(Path::new("/a,b/c d"), "x").unwrap();
    }

    #[test]
    fn makes_links_replaces_its_own_and_refuses_others() {
        let t = tmp("make");
        let lib = t.join("libnccl.so.2.21.5");
        std::fs::write(&lib, b"not really a library").unwrap();
        let other = t.join("libnccl.so.2.18.1");
        std::fs::write(&other, b"another").unwrap();
        let dir = t.join("loader");
        let made = make_loader_dir(&dir, &other, 0o700).unwrap();
        assert_eq!(made.library, std::fs::canonicalize(&other).unwrap());
        let made = make_loader_dir(&dir, &lib, 0o700).unwrap();
        for n in LOADER_NAMES {
            assert_eq!(
                std::fs::read_link(dir.join(n)).unwrap(),
                made.library,
                "{n}"
            );
        }
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        // A planted regular file is refused, not overwritten.
        std::fs::remove_file(dir.join("libnccl.so.12")).unwrap();
        std::fs::write(dir.join("libnccl.so.12"), b"planted").unwrap();
        let e = make_loader_dir(&dir, &lib, 0o700).unwrap_err();
        assert!(
            e.to_string()
                .contains("libnccl.so.12 is not a link that nccl-find made"),
            "{e}"
        );
        // A directory without the marker is never written into.
        let foreign = t.join("foreign");
        std::fs::create_dir(&foreign).unwrap();
        let e = make_loader_dir(&foreign, &lib, 0o700).unwrap_err();
        assert!(e.to_string().contains("nccl-find did not make it"), "{e}");
        // A link in place of the directory is not followed.
        let link = t.join("linked");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = make_loader_dir(&link, &lib, 0o700).unwrap_err();
        assert!(e.to_string().contains("is not a directory"), "{e}");
        let _ = std::fs::remove_dir_all(&t);
    }

    #[test]
    fn nccl1_is_refused() {
        let t = tmp("one");
        let lib = t.join("libnccl.so.1.3.4");
        std::fs::write(&lib, b"x").unwrap();
        let e = make_loader_dir(&t.join("loader"), &lib, 0o700).unwrap_err();
        assert!(e.to_string().contains("is NCCL 1"), "{e}");
        assert!(!t.join("loader").exists());
        let _ = std::fs::remove_dir_all(&t);
    }
}
