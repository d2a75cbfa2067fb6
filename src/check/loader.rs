//! Which `libnccl.so.2` the dynamic loader will load at run time for a
//! program with no rpath of its own, worked out from files by the loader
//! model ([`super::ldso`]): `LD_LIBRARY_PATH`, then the program's
//! `RUNPATH` (`Config::runpath`), then the loader cache, then the system
//! directories. Nothing is run.

use std::path::{Path, PathBuf};

use super::ldso::{LoaderFacts, Object, Process, Via};
use crate::context::Ctx;
use crate::inspect::library::file_version;
use crate::version::Version;

/// One `libnccl.so.2` the loader can see.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Visible {
    /// The path the loader opens.
    pub path: PathBuf,
    /// That file with links resolved.
    pub real: PathBuf,
    /// How the loader gets there: `LD_LIBRARY_PATH`, `RUNPATH`, `loader cache`, `default dir`.
    pub via: String,
    /// Its version, where it says.
    pub version: Option<Version>,
}

/// What the loader would do for `libnccl.so.2`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Loader {
    /// The file it would load: the first one visible.
    pub pick: Option<Visible>,
    /// Every distinct file it could see, in its search order.
    pub visible: Vec<Visible>,
    /// Whether `LD_LIBRARY_PATH` was taken into account (not when cross-compiling).
    pub used_ld_library_path: bool,
}

const SONAME: &str = "libnccl.so.2";

pub(crate) fn resolve(ctx: &Ctx, runpath: &[PathBuf], cross: bool) -> Loader {
    let mut facts = LoaderFacts::for_target(ctx.root, ctx.target.multiarch);
    let mut ld_var = String::from("LD_LIBRARY_PATH");
    if !cross {
        if let Some((var, dirs)) = ctx.ld_library_path() {
            ld_var = var.name.clone();
            facts.ld_library_path = dirs
                .iter()
                .map(|d| Path::new("/").join(d.strip_prefix(ctx.root).unwrap_or(d)))
                .collect();
        }
    }
    for (name, path) in ctx.ld_cache() {
        if name == SONAME {
            facts.cache.push((name.clone(), PathBuf::from(path)));
        }
    }
    // A program not built yet, with the RUNPATH it was told it will have.
    let mut program = Object::default();
    if !runpath.is_empty() {
        let dirs: Vec<String> = runpath
            .iter()
            .map(|d| {
                Path::new("/")
                    .join(d.strip_prefix(ctx.root).unwrap_or(d))
                    .display()
                    .to_string()
            })
            .collect();
        program.runpath = Some(dirs.join(":"));
    }
    let process = Process::with_program(&facts, ctx.root, program);
    let mut visible: Vec<Visible> = Vec::new();
    for (path, via) in process.places(SONAME, 0) {
        let Some(real) = process.file(&path) else {
            continue;
        };
        if visible.iter().any(|v| v.real == real) {
            continue;
        }
        let via = match via {
            Via::LdLibraryPath => ld_var.clone(),
            Via::Runpath(_) => "RUNPATH".to_string(),
            other => other.to_string(),
        };
        let (version, _) = file_version(&real);
        // The name the loader opens, its directory under the root.
        let shown = match (path.parent(), path.file_name()) {
            (Some(dir), Some(name)) => ctx.path(dir).join(name),
            _ => ctx.path(&path),
        };
        visible.push(Visible {
            path: shown,
            real,
            via,
            version,
        });
    }
    Loader {
        pick: visible.first().cloned(),
        visible,
        used_ld_library_path: !cross,
    }
}

/// The directories the loader searches last, after the cache: the
/// multiarch ones (Debian), then `/lib64`, `/usr/lib64`, `/lib`, `/usr/lib`.
pub(crate) fn default_dirs(multiarch: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(ma) = multiarch {
        out.push(format!("/lib/{ma}"));
        out.push(format!("/usr/lib/{ma}"));
    }
    for d in ["/lib64", "/usr/lib64", "/lib", "/usr/lib"] {
        out.push(d.to_string());
    }
    out
}

/// What the loader's pick means for the library a program is linked
/// against: the one verdict that build scripts' warnings and `doctor` give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict<'a> {
    /// The loader loads the linked file itself.
    Same,
    /// The loader finds no `libnccl.so.2`: the program will not start
    /// without an rpath or `LD_LIBRARY_PATH`.
    NoneFound,
    /// The loader loads another file of the same version: it works, but it
    /// is not the file that was inspected.
    OtherSameVersion(&'a Visible),
    /// The loader loads another file of the same major and minor version
    /// (the same API), or of a newer minor (NCCL runs programs built against
    /// older headers): it works, with that file's fixes.
    OtherCompatible(&'a Visible),
    /// The loader loads another file, older in minor version than the
    /// linked one, or of unknown version: expect `undefined symbol` errors
    /// for anything newer than it.
    OtherOlder(&'a Visible),
}

impl Loader {
    /// The verdict for a program linked against `real` (links resolved),
    /// whose version is `version`.
    pub fn verdict(&self, real: &Path, version: &Version) -> Verdict<'_> {
        match &self.pick {
            None => Verdict::NoneFound,
            Some(p) if p.real == real => Verdict::Same,
            Some(p) => match &p.version {
                Some(v) if v == version => Verdict::OtherSameVersion(p),
                Some(v) if (v.major, v.minor) >= (version.major, version.minor) => {
                    Verdict::OtherCompatible(p)
                }
                _ => Verdict::OtherOlder(p),
            },
        }
    }
}

/// What to say of a library that will not be the one loaded, if anything,
/// and whether it is a warning (`true`: an older NCCL, the program may
/// fail) or a note (the same or a newer minor version runs the program).
pub(crate) fn warning(
    loader: &Loader,
    library: &Path,
    real: &Path,
    version: &Version,
    lib_dir: &Path,
) -> Option<(String, bool)> {
    let fix = format!(
        "Put {} first on LD_LIBRARY_PATH, or give the final binary an rpath (nccl_find::emit_rpath_from_dep in its build script).",
        lib_dir.display()
    );
    let other = |p: &Visible, tail: &str| {
        let theirs = match &p.version {
            Some(v) => format!("NCCL {v}"),
            None => "of unknown version".to_string(),
        };
        format!(
            "at run time the loader picks {} ({theirs}, via {}), not the linked {} (NCCL {version}){tail}. {fix}",
            p.path.display(),
            p.via,
            library.display(),
        )
    };
    match loader.verdict(real, version) {
        // Nothing to warn a -sys crate about: whether the program starts is
        // the final binary's setup (its rpath, from emit_rpath_from_dep,
        // which warns when it cannot give one), and doctor says it.
        Verdict::Same | Verdict::NoneFound => None,
        Verdict::OtherSameVersion(p) => Some((other(p, ""), false)),
        Verdict::OtherCompatible(p) => Some((
            other(
            p,
            match &p.version {
                Some(v) if v.minor == version.minor => {
                    ": the same minor version has the same API, so the program runs, with that file's fixes"
                }
                _ => ": a newer minor version runs programs built against older ones",
            },
            ),
            false,
        )),
        Verdict::OtherOlder(p) => Some((
            other(
                p,
                ": expect `undefined symbol` errors for anything newer than that library",
            ),
            true,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(path: &str, version: Option<Version>) -> Visible {
        Visible {
            path: PathBuf::from(path),
            real: PathBuf::from(path),
            via: "loader cache".into(),
            version,
        }
    }

    #[test]
    fn one_verdict_for_every_pick() {
        let v = Version::new(2, 21, 5, "");
        let mine = Path::new("/opt/nccl/lib/libnccl.so.2.21.5");
        let loader = |pick: Option<Visible>| Loader {
            visible: pick.iter().cloned().collect(),
            pick,
            used_ld_library_path: true,
        };
        assert_eq!(loader(None).verdict(mine, &v), Verdict::NoneFound);
        let same = loader(Some(seen(
            "/opt/nccl/lib/libnccl.so.2.21.5",
            Some(v.clone()),
        )));
        assert_eq!(same.verdict(mine, &v), Verdict::Same);
        let twin = seen("/usr/lib/libnccl.so.2", Some(v.clone()));
        let copy = loader(Some(twin.clone()));
        assert_eq!(copy.verdict(mine, &v), Verdict::OtherSameVersion(&twin));
        let older = seen("/usr/lib/libnccl.so.2", Some(Version::new(2, 18, 1, "")));
        let old = loader(Some(older.clone()));
        assert_eq!(old.verdict(mine, &v), Verdict::OtherOlder(&older));
        let unknown = seen("/usr/lib/libnccl.so.2", None);
        let unread = loader(Some(unknown.clone()));
        assert_eq!(unread.verdict(mine, &v), Verdict::OtherOlder(&unknown));
        // The same minor, older or newer in patch, and any newer minor: the
        // same API or a newer one.
        for (minor, patch) in [(21, 0), (21, 9), (22, 0), (28, 9)] {
            let twin = seen(
                "/usr/lib/libnccl.so.2",
                Some(Version::new(2, minor, patch, "")),
            );
            let l = loader(Some(twin.clone()));
            assert_eq!(
                l.verdict(mine, &v),
                Verdict::OtherCompatible(&twin),
                "2.{minor}.{patch}"
            );
        }
        // An older minor, whatever its patch.
        for (minor, patch) in [(20, 9), (18, 1), (3, 7)] {
            let old = seen(
                "/usr/lib/libnccl.so.2",
                Some(Version::new(2, minor, patch, "")),
            );
            let l = loader(Some(old.clone()));
            assert_eq!(
                l.verdict(mine, &v),
                Verdict::OtherOlder(&old),
                "2.{minor}.{patch}"
            );
        }
        // The build-script warning follows the verdict: a warning for an
        // older NCCL, a note where the program runs.
        let lib = Path::new("/opt/nccl/lib/libnccl.so.2");
        let dir = Path::new("/opt/nccl/lib");
        assert_eq!(warning(&same, lib, mine, &v, dir), None);
        let (w, act) = warning(&copy, lib, mine, &v, dir).unwrap();
        assert!(!act);
        assert!(w.starts_with("at run time the loader picks /usr/lib/libnccl.so.2 (NCCL 2.21.5, via loader cache), not the linked /opt/nccl/lib/libnccl.so.2 (NCCL 2.21.5). Put /opt/nccl/lib first"), "{w}");
        let (w, act) = warning(&old, lib, mine, &v, dir).unwrap();
        assert!(act);
        assert!(w.contains("(NCCL 2.18.1, via loader cache), not the linked /opt/nccl/lib/libnccl.so.2 (NCCL 2.21.5): expect `undefined symbol` errors"), "{w}");
        let newer = seen("/usr/lib/libnccl.so.2", Some(Version::new(2, 21, 7, "")));
        let (w, act) = warning(&loader(Some(newer)), lib, mine, &v, dir).unwrap();
        assert!(!act);
        assert!(w.contains("(NCCL 2.21.7, via loader cache), not the linked /opt/nccl/lib/libnccl.so.2 (NCCL 2.21.5): the same minor version has the same API, so the program runs, with that file's fixes. Put /opt/nccl/lib first"), "{w}");
        assert_eq!(warning(&loader(None), lib, mine, &v, dir), None);
    }
}
