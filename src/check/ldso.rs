//! A model of glibc's dynamic loader (`ld.so`), worked out from files: which
//! file a process maps for a name such as `libnccl.so.2`, and why. Nothing
//! is run. The order, for a name an object needs (`DT_NEEDED`, or `dlopen`
//! from it), is glibc's (`elf/dl-load.c`, `_dl_map_object`):
//!
//! 0. an object already in the process known by that name (its `DT_SONAME`,
//!    or the name it was opened by): `LD_PRELOAD`, an earlier load by path;
//! 1. unless the object has a `DT_RUNPATH`: the `DT_RPATH` of the object,
//!    then of the object that loaded it, and on up to the program (an object
//!    with a `DT_RUNPATH` of its own gives no `DT_RPATH`);
//! 2. `LD_LIBRARY_PATH`;
//! 3. the object's own `DT_RUNPATH` (for its direct dependencies only);
//! 4. the loader cache, `/etc/ld.so.cache`;
//! 5. the system directories.
//!
//! In 1–3 and 5, `$ORIGIN` (the directory of the object, as it was opened;
//! the program's with links resolved), `$LIB` and `$PLATFORM` are
//! expanded, and each directory's `glibc-hwcaps/<level>/` subdirectories
//! the CPU supports are tried before the directory itself. A name with a
//! `/` is opened as it is. A file already mapped under another name is not
//! mapped twice.
//!
//! `tests/ldso.rs` holds this model against the real loader: programs and
//! libraries built with `cc` in a dozen shapes, each run, and
//! `/proc/self/maps` compared with the model's answer.

use std::path::{Path, PathBuf};

use crate::inspect::elf::read_dynamic;

/// What the loader knows before it searches: the machine's facts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LoaderFacts {
    /// `LD_LIBRARY_PATH`'s entries, in order (its variable's name first
    /// appears in [`Via::LdLibraryPath`]).
    pub ld_library_path: Vec<PathBuf>,
    /// `LD_PRELOAD`'s entries: paths, or names searched for.
    pub preload: Vec<String>,
    /// The loader cache: name and path of each entry, in its order.
    pub cache: Vec<(String, PathBuf)>,
    /// The system directories, searched last.
    pub system_dirs: Vec<PathBuf>,
    /// What `$LIB` expands to (`lib/x86_64-linux-gnu` on Debian, `lib64` on Fedora).
    pub lib: String,
    /// What `$PLATFORM` expands to (`haswell`, `x86_64`): glibc's
    /// `dl_platform`, which depends on the CPU, so `None` unless the running
    /// loader was asked ([`LoaderFacts::read_ld_so`]). An rpath entry that
    /// names `$PLATFORM` is then left out, as unknown.
    pub platform: Option<String>,
    /// The `glibc-hwcaps` subdirectories searched, best first (`x86-64-v3`, `x86-64-v2`).
    pub hwcaps: Vec<String>,
    /// The legacy hwcap subdirectories searched after those and before the
    /// directory itself (glibc before 2.37), best first: every combination
    /// of `tls`, the platform and the hwcap names the loader lists
    /// (`tls/haswell/avx512_1/x86_64` … `x86_64`). Empty unless asked.
    pub legacy: Vec<String>,
}

impl LoaderFacts {
    /// The facts as they follow from a target's multiarch name, for a root
    /// that holds no `ld.so` to ask: Debian's system directories where the
    /// multiarch ones exist under `root`, else `/lib64` and `/usr/lib64`
    /// where those do, else `/lib` and `/usr/lib`; no hwcaps subdirectory.
    /// `$PLATFORM` depends on the CPU (glibc says `haswell` where the CPU
    /// has AVX2 and its kin, else the architecture), so it is not guessed:
    /// `None`.
    pub fn for_target(root: &Path, multiarch: Option<&str>) -> LoaderFacts {
        let mut facts = LoaderFacts::default();
        let multiarch = multiarch.filter(|ma| {
            root.join("usr/lib").join(ma).is_dir() || root.join("lib").join(ma).is_dir()
        });
        facts.lib = match multiarch {
            Some(ma) => format!("lib/{ma}"),
            None if root.join("usr/lib64").is_dir() => "lib64".to_string(),
            None => "lib".to_string(),
        };
        for prefix in ["/", "/usr/"] {
            facts
                .system_dirs
                .push(PathBuf::from(format!("{prefix}{}", facts.lib)));
        }
        // Debian searches /lib and /usr/lib after its multiarch directories.
        if multiarch.is_some() {
            facts.system_dirs.push(PathBuf::from("/lib"));
            facts.system_dirs.push(PathBuf::from("/usr/lib"));
        }
        facts
    }

    /// Adds the entries of a loader cache (`/etc/ld.so.cache`, as bytes) to
    /// [`LoaderFacts::cache`]: what the loader finds there by name. Bytes
    /// that do not read as a cache add nothing. (Feature `command`.)
    #[cfg(feature = "command")]
    #[cfg_attr(docsrs, doc(cfg(feature = "command")))]
    pub fn read_ld_cache(&mut self, data: &[u8]) {
        for (name, path) in crate::ldcache::parse_ld_cache(data) {
            self.cache.push((name, PathBuf::from(path)));
        }
    }

    /// Reads what the real loader says of itself: `ld.so --help` (the
    /// system directories, the `glibc-hwcaps` and legacy hwcap
    /// subdirectories it searches) and `ld.so --list-diagnostics`
    /// (`dl_dst_lib`, `dl_platform`), as the two texts. What they do not say
    /// is left as it was. (Feature `command`.)
    #[cfg(feature = "command")]
    #[cfg_attr(docsrs, doc(cfg(feature = "command")))]
    pub fn read_ld_so(&mut self, help: &str, diagnostics: &str) {
        let mut section = "";
        let mut dirs = Vec::new();
        let mut hwcaps = Vec::new();
        let mut legacy = Vec::new();
        for line in help.lines() {
            if !line.starts_with(' ') {
                section = line;
                continue;
            }
            let item = line.trim();
            if section.starts_with("Shared library search path") {
                if let Some(d) = item.strip_suffix(" (system search path)") {
                    dirs.push(PathBuf::from(d));
                }
            } else if section.starts_with("Subdirectories of glibc-hwcaps") {
                if let Some(name) = item.strip_suffix(" (supported, searched)") {
                    hwcaps.push(name.to_string());
                }
            } else if section.starts_with("Legacy HWCAP subdirectories") {
                // `haswell (AT_PLATFORM; supported, searched)`, `tls (supported, searched)`.
                if let Some((name, why)) = item.split_once(" (") {
                    if why.ends_with("searched)") && !why.contains("not searched") {
                        let platform = why.starts_with("AT_PLATFORM");
                        legacy.push((name.to_string(), platform));
                    }
                }
            }
        }
        if !dirs.is_empty() {
            self.system_dirs = dirs;
            self.hwcaps = hwcaps;
            self.legacy = legacy_subdirs(&legacy);
        }
        for line in diagnostics.lines() {
            let value = |key: &str| {
                let v = line.strip_prefix(key)?.strip_prefix("=\"")?;
                Some(v.strip_suffix('"')?.to_string())
            };
            if let Some(v) = value("dl_dst_lib") {
                self.lib = v;
            }
            if let Some(v) = value("dl_platform") {
                self.platform = Some(v);
            }
        }
    }
}

/// glibc's legacy hwcap subdirectories (2.36 and older), in its search
/// order, from the names `ld.so --help` lists (each with whether it is the
/// platform): the names ordered `tls`, the platform, then the others as
/// listed; then every non-empty combination of them, in that order, from
/// all of them down, as binary numbers count down (`tls/haswell/x86_64`,
/// `tls/haswell`, `tls/x86_64`, `tls`, `haswell/x86_64`, …). Checked
/// against the real loader's own search path (`LD_DEBUG=libs`) in
/// `tests/ldso.rs`.
#[cfg(feature = "command")]
fn legacy_subdirs(listed: &[(String, bool)]) -> Vec<String> {
    let mut names: Vec<&str> = Vec::new();
    for pass in 0..3 {
        for (name, platform) in listed {
            let this = match pass {
                0 => name == "tls",
                1 => *platform && name != "tls",
                _ => !*platform && name != "tls",
            };
            if this {
                names.push(name);
            }
        }
    }
    // More than a handful would be 2^n subdirectories: glibc lists at most
    // a few (tls, the platform, two or three hwcap names).
    if names.is_empty() || names.len() > 8 {
        return Vec::new();
    }
    let n = names.len();
    let mut out = Vec::new();
    let mut bits = (1u32 << n) - 1;
    while bits > 0 {
        let mut parts = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if bits & (1 << (n - 1 - i)) != 0 {
                parts.push(*name);
            }
        }
        out.push(parts.join("/"));
        bits -= 1;
    }
    out
}

/// How the loader got to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Via {
    /// The name holds a `/`: opened as it is.
    Path,
    /// `LD_PRELOAD`.
    Preload,
    /// The `DT_RPATH` of this object (the one that needs the name, or one
    /// that loaded it).
    Rpath(PathBuf),
    /// `LD_LIBRARY_PATH`.
    LdLibraryPath,
    /// The `DT_RUNPATH` of the object that needs the name.
    Runpath(PathBuf),
    /// The loader cache.
    Cache,
    /// A system directory.
    System,
}

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Via::Path => f.write_str("its path"),
            Via::Preload => f.write_str("LD_PRELOAD"),
            Via::Rpath(o) => write!(f, "DT_RPATH of {}", o.display()),
            Via::LdLibraryPath => f.write_str("LD_LIBRARY_PATH"),
            Via::Runpath(o) => write!(f, "DT_RUNPATH of {}", o.display()),
            Via::Cache => f.write_str("loader cache"),
            Via::System => f.write_str("default dir"),
        }
    }
}

/// An object as the loader sees it: where it was opened, and its dynamic
/// section's names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Object {
    /// The path it was opened by, as the process sees it (`$ORIGIN` is
    /// its directory).
    pub path: PathBuf,
    /// Its file, links resolved (under the root).
    pub real: PathBuf,
    /// `DT_SONAME`.
    pub soname: Option<String>,
    /// `DT_NEEDED`, in order.
    pub needed: Vec<String>,
    /// `DT_RPATH`.
    pub rpath: Option<String>,
    /// `DT_RUNPATH`.
    pub runpath: Option<String>,
}

/// One object mapped into the modelled process.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mapped {
    /// The object.
    pub object: Object,
    /// The names it answers to: its soname and every name it was asked for.
    pub names: Vec<String>,
    /// How it was found.
    pub via: Via,
    /// The index of the object whose need or `dlopen` brought it in.
    pub loader: Option<usize>,
}

/// A process as the loader builds it, one object at a time.
#[derive(Debug, Clone)]
pub struct Process<'a> {
    facts: &'a LoaderFacts,
    root: PathBuf,
    /// The objects mapped, in the order they were.
    pub mapped: Vec<Mapped>,
}

/// The most objects one process model maps: a real PyTorch process maps a
/// few hundred; a loop of `DT_NEEDED` names cannot grow past this.
const MAX_OBJECTS: usize = 4096;

impl<'a> Process<'a> {
    /// An empty process under `root` (`/` for this machine).
    pub fn new(facts: &'a LoaderFacts, root: &Path) -> Process<'a> {
        Process {
            facts,
            root: root.to_path_buf(),
            mapped: Vec::new(),
        }
    }

    /// Starts a program as `execve` and `ld.so` do: the program, its
    /// `LD_PRELOAD` objects, then every `DT_NEEDED`, breadth first.
    /// (Feature `command`.)
    #[cfg(feature = "command")]
    #[cfg_attr(docsrs, doc(cfg(feature = "command")))]
    pub fn exec(facts: &'a LoaderFacts, root: &Path, program: &Path) -> Process<'a> {
        let mut p = Process::new(facts, root);
        let real = p.real(program);
        let object = p.read(program, real.clone());
        p.mapped.push(Mapped {
            names: Vec::new(),
            object,
            via: Via::Path,
            loader: None,
        });
        let mut queue = vec![0];
        for name in &facts.preload {
            if let Some(i) = p.map(name, 0, true) {
                queue.push(i);
            }
        }
        p.load_needed(queue);
        p
    }

    /// An object that stands for a program not built yet: no file, with
    /// these search paths.
    pub fn with_program(facts: &'a LoaderFacts, root: &Path, program: Object) -> Process<'a> {
        let mut p = Process::new(facts, root);
        p.mapped.push(Mapped {
            names: Vec::new(),
            object: program,
            via: Via::Path,
            loader: None,
        });
        for name in &facts.preload {
            p.map(name, 0, true);
        }
        p
    }

    /// `dlopen(name)` called from the object `caller`: the object and its
    /// `DT_NEEDED`, breadth first. The index of the object, or `None` when
    /// the loader finds no file. (Feature `command`.)
    #[cfg(feature = "command")]
    #[cfg_attr(docsrs, doc(cfg(feature = "command")))]
    pub fn dlopen(&mut self, name: &str, caller: usize) -> Option<usize> {
        let i = self.map(name, caller, false)?;
        self.load_needed(vec![i]);
        Some(i)
    }

    /// The object answering to `name` in the process, if one does.
    pub fn find_mapped(&self, name: &str) -> Option<usize> {
        for (i, m) in self.mapped.iter().enumerate() {
            let own = m.object.soname.as_deref() == Some(name) || m.object.path == Path::new(name);
            if own || m.names.iter().any(|n| n == name) {
                return Some(i);
            }
        }
        None
    }

    /// The file the loader would open for `name`, needed by the object
    /// `requester`, and how; `None` when there is none. Objects already
    /// mapped are not looked at: [`Process::find_mapped`] does that.
    pub fn search(&self, name: &str, requester: usize) -> Option<(PathBuf, PathBuf, Via)> {
        for (path, via) in self.places(name, requester) {
            if let Some(real) = self.file(&path) {
                return Some((path, real, via));
            }
        }
        None
    }

    /// Every place the loader would try for `name`, in its order, each with
    /// how it got there; whether a file is there is not looked at.
    pub fn places(&self, name: &str, requester: usize) -> Vec<(PathBuf, Via)> {
        let mut out = Vec::new();
        if name.contains('/') {
            out.push((PathBuf::from(name), Via::Path));
            return out;
        }
        let me = &self.mapped[requester].object;
        if me.runpath.is_none() {
            let mut at = Some(requester);
            let mut seen_program = false;
            while let Some(i) = at {
                let o = &self.mapped[i].object;
                if o.runpath.is_none() {
                    if let Some(r) = &o.rpath {
                        for d in self.expand(r, i) {
                            self.dir_places(&d, name, Via::Rpath(o.path.clone()), &mut out);
                        }
                    }
                }
                seen_program |= i == 0;
                at = self.mapped[i].loader;
            }
            // The program's own DT_RPATH, when the chain did not reach it.
            let program = &self.mapped[0].object;
            if !seen_program && program.runpath.is_none() {
                if let Some(r) = &program.rpath {
                    for d in self.expand(r, 0) {
                        self.dir_places(&d, name, Via::Rpath(program.path.clone()), &mut out);
                    }
                }
            }
        }
        for d in &self.facts.ld_library_path {
            self.dir_places(d, name, Via::LdLibraryPath, &mut out);
        }
        if let Some(r) = &me.runpath {
            for d in self.expand(r, requester) {
                self.dir_places(&d, name, Via::Runpath(me.path.clone()), &mut out);
            }
        }
        for (n, p) in &self.facts.cache {
            if n == name {
                out.push((p.clone(), Via::Cache));
            }
        }
        for d in &self.facts.system_dirs {
            self.dir_places(d, name, Via::System, &mut out);
        }
        out
    }

    /// `dir/glibc-hwcaps/<level>/name` for each level searched, then
    /// `dir/<legacy>/name` for each legacy subdirectory, then `dir/name`.
    fn dir_places(&self, dir: &Path, name: &str, via: Via, out: &mut Vec<(PathBuf, Via)>) {
        for level in &self.facts.hwcaps {
            out.push((dir.join("glibc-hwcaps").join(level).join(name), via.clone()));
        }
        for sub in &self.facts.legacy {
            out.push((dir.join(sub).join(name), via.clone()));
        }
        out.push((dir.join(name), via));
    }

    /// An rpath's entries, `$ORIGIN`, `$LIB` and `$PLATFORM` expanded
    /// (also in braces). Empty and relative entries, and an `$ORIGIN` of an
    /// object with no path, are left out.
    fn expand(&self, rpath: &str, of: usize) -> Vec<PathBuf> {
        let o = &self.mapped[of].object;
        let origin = if of == 0 {
            o.real
                .strip_prefix(&self.root)
                .map(|p| Path::new("/").join(p))
                .unwrap_or_else(|_| o.real.clone())
                .parent()
                .map(Path::to_path_buf)
        } else {
            o.path.parent().map(Path::to_path_buf)
        };
        let origin = origin.map(|p| p.display().to_string());
        let tokens = [
            ("${ORIGIN}", origin.as_deref()),
            ("$ORIGIN", origin.as_deref()),
            ("${LIB}", Some(self.facts.lib.as_str())),
            ("$LIB", Some(self.facts.lib.as_str())),
            ("${PLATFORM}", self.facts.platform.as_deref()),
            ("$PLATFORM", self.facts.platform.as_deref()),
        ];
        let mut out = Vec::new();
        for entry in rpath.split(':') {
            let mut text = entry.to_string();
            for (spelled, value) in tokens {
                if text.contains(spelled) {
                    match value {
                        Some(v) => text = text.replace(spelled, v),
                        None => text.clear(),
                    }
                }
            }
            if text.starts_with('/') {
                out.push(PathBuf::from(text));
            }
        }
        out
    }

    /// A path as the process sees it, under the root, links resolved; or
    /// `None` when no regular file is there.
    pub fn file(&self, path: &Path) -> Option<PathBuf> {
        let under = self.root.join(path.strip_prefix("/").unwrap_or(path));
        let real = crate::files::resolve_in(&self.root, &under, true).ok()?;
        std::fs::metadata(&real).ok()?.is_file().then_some(real)
    }

    #[cfg(feature = "command")]
    fn real(&self, path: &Path) -> PathBuf {
        self.file(path).unwrap_or_else(|| path.to_path_buf())
    }

    /// The object at `path` (as the process names it), read from `real`.
    fn read(&self, path: &Path, real: PathBuf) -> Object {
        let elf = read_dynamic(&real).unwrap_or_default();
        Object {
            path: path.to_path_buf(),
            real,
            soname: elf.soname,
            needed: elf.needed,
            rpath: elf.rpath,
            runpath: elf.runpath,
        }
    }

    /// Maps `name` for the object `requester` (no `DT_NEEDED` of its own
    /// yet): the object already there, or the file the search finds.
    fn map(&mut self, name: &str, requester: usize, preload: bool) -> Option<usize> {
        if let Some(i) = self.find_mapped(name) {
            return Some(i);
        }
        let (path, real, via) = self.search(name, requester)?;
        // The same file under another name is not mapped twice.
        for (i, m) in self.mapped.iter_mut().enumerate() {
            if m.object.real == real {
                m.names.push(name.to_string());
                return Some(i);
            }
        }
        if self.mapped.len() >= MAX_OBJECTS {
            return None;
        }
        let object = self.read(&path, real);
        self.mapped.push(Mapped {
            object,
            names: vec![name.to_string()],
            via: if preload { Via::Preload } else { via },
            loader: Some(requester),
        });
        Some(self.mapped.len() - 1)
    }

    /// Maps the `DT_NEEDED` names of the objects in `queue`, breadth first,
    /// as `ld.so` does.
    #[cfg(feature = "command")]
    fn load_needed(&mut self, mut queue: Vec<usize>) {
        let mut next = 0;
        while next < queue.len() {
            let i = queue[next];
            next += 1;
            let needed = self.mapped[i].object.needed.clone();
            for name in needed {
                let before = self.mapped.len();
                if let Some(j) = self.map(&name, i, false) {
                    if j >= before {
                        queue.push(j);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "command")]
    fn ld_so_describes_itself() {
        let help = "Usage: ld.so [OPTION]...\n\nShared library search path:\n  (libraries located via /etc/ld.so.cache)\n  /lib/x86_64-linux-gnu (system search path)\n  /usr/lib/x86_64-linux-gnu (system search path)\n  /lib (system search path)\n  /usr/lib (system search path)\n\nSubdirectories of glibc-hwcaps directories, in priority order:\n  x86-64-v4\n  x86-64-v3 (supported, searched)\n  x86-64-v2 (supported, searched)\n\nLegacy HWCAP subdirectories under library search path directories:\n  x86_64 (AT_PLATFORM; supported, searched)\n";
        let diag = "dl_dst_lib=\"lib/x86_64-linux-gnu\"\ndl_hwcap=0x2\ndl_platform=\"x86_64\"\n";
        let mut f = LoaderFacts::default();
        f.read_ld_so(help, diag);
        assert_eq!(
            f.system_dirs,
            [
                "/lib/x86_64-linux-gnu",
                "/usr/lib/x86_64-linux-gnu",
                "/lib",
                "/usr/lib"
            ]
            .map(PathBuf::from)
        );
        assert_eq!(f.hwcaps, ["x86-64-v3", "x86-64-v2"]);
        assert_eq!(
            (f.lib.as_str(), f.platform.as_deref()),
            ("lib/x86_64-linux-gnu", Some("x86_64"))
        );
        assert_eq!(f.legacy, ["x86_64"]);
        // An Intel CPU with AVX2 under glibc 2.36: `tls` first, then the
        // platform, then the hwcap names, in every combination.
        let help = help.replace(
            "  x86_64 (AT_PLATFORM; supported, searched)\n",
            "  haswell (AT_PLATFORM; supported, searched)\n  tls (supported, searched)\n  avx512_1 (supported, searched)\n  x86_64 (supported, searched)\n",
        );
        f.read_ld_so(&help, "dl_platform=\"haswell\"\n");
        assert_eq!(f.platform.as_deref(), Some("haswell"));
        assert_eq!(f.legacy.len(), 15);
        assert_eq!(
            f.legacy[..5],
            [
                "tls/haswell/avx512_1/x86_64",
                "tls/haswell/avx512_1",
                "tls/haswell/x86_64",
                "tls/haswell",
                "tls/avx512_1/x86_64"
            ]
        );
        assert_eq!(f.legacy[14], "x86_64");
    }

    #[test]
    fn the_search_order_is_glibcs() {
        let facts = LoaderFacts {
            ld_library_path: vec![PathBuf::from("/ld")],
            cache: vec![("libx.so.2".into(), PathBuf::from("/cache/libx.so.2"))],
            system_dirs: vec![PathBuf::from("/usr/lib")],
            lib: "lib64".into(),
            platform: Some("x86_64".into()),
            hwcaps: vec!["x86-64-v2".into()],
            ..LoaderFacts::default()
        };
        let program = Object {
            path: PathBuf::from("/bin/app"),
            real: PathBuf::from("/bin/app"),
            rpath: Some("/prog-rpath".into()),
            ..Object::default()
        };
        let mut p = Process::with_program(&facts, Path::new("/"), program);
        p.mapped.push(Mapped {
            object: Object {
                path: PathBuf::from("/opt/m/libmid.so"),
                rpath: Some("$ORIGIN/../r:${LIB}/$PLATFORM:rel".into()),
                ..Object::default()
            },
            names: Vec::new(),
            via: Via::Path,
            loader: Some(0),
        });
        let places: Vec<String> = p
            .places("libx.so.2", 1)
            .iter()
            .map(|(d, v)| format!("{} ({v})", d.display()))
            .collect();
        assert_eq!(
            places,
            [
                "/opt/m/../r/glibc-hwcaps/x86-64-v2/libx.so.2 (DT_RPATH of /opt/m/libmid.so)",
                "/opt/m/../r/libx.so.2 (DT_RPATH of /opt/m/libmid.so)",
                "/prog-rpath/glibc-hwcaps/x86-64-v2/libx.so.2 (DT_RPATH of /bin/app)",
                "/prog-rpath/libx.so.2 (DT_RPATH of /bin/app)",
                "/ld/glibc-hwcaps/x86-64-v2/libx.so.2 (LD_LIBRARY_PATH)",
                "/ld/libx.so.2 (LD_LIBRARY_PATH)",
                "/cache/libx.so.2 (loader cache)",
                "/usr/lib/glibc-hwcaps/x86-64-v2/libx.so.2 (default dir)",
                "/usr/lib/libx.so.2 (default dir)",
            ]
        );
        // With a DT_RUNPATH, the object's and its loaders' DT_RPATHs are
        // not searched, and its DT_RUNPATH comes after LD_LIBRARY_PATH.
        p.mapped[1].object.runpath = Some("/own".into());
        let places: Vec<String> = p
            .places("libx.so.2", 1)
            .iter()
            .filter(|(d, _)| !d.to_string_lossy().contains("hwcaps"))
            .map(|(d, v)| format!("{} ({v})", d.display()))
            .collect();
        assert_eq!(
            places,
            [
                "/ld/libx.so.2 (LD_LIBRARY_PATH)",
                "/own/libx.so.2 (DT_RUNPATH of /opt/m/libmid.so)",
                "/cache/libx.so.2 (loader cache)",
                "/usr/lib/libx.so.2 (default dir)",
            ]
        );
    }
}
