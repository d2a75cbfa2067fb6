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

use std::path::{Path, PathBuf};

use crate::report::Nccl;

use super::loader_files::OUT_DIR_NAME;
pub use super::loader_files::{check_loader_path, make_loader_dir, LoaderDir, LoaderDirError};

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
    /// `OUT_DIR` whose names (`libnccl.so`, `libnccl.so.2`, and the names cudarc tries) all link to this install's
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
    use std::os::unix::fs::PermissionsExt;

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
        for n in crate::emit::loader_files::LOADER_NAMES {
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
