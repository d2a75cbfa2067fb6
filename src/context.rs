//! What every step of the probe works in: the environment, the filesystem
//! root (a test's fixture tree or a sysroot), the target, and the logs of
//! where the probe looked and what it should warn about. Paths are resolved
//! here, inside the root, and directories are listed here, sorted.

use std::cell::RefCell;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::env::{Env, Var};
use crate::origin::{Looked, MisleadingPc, SourceKind};
use crate::target::Target;

/// What every source gets: the environment, the filesystem root, the target,
/// and a log of where it looked.
pub(crate) struct Ctx<'a> {
    pub env: &'a Env,
    pub root: &'a Path,
    pub target: &'a Target,
    pub looked: RefCell<Vec<Looked>>,
    pub warnings: RefCell<Vec<String>>,
    pub notes: RefCell<Vec<String>>,
    pub misleading_pc: RefCell<Vec<MisleadingPc>>,
    /// Directories where an install that would rank above the answer
    /// would appear (an activated environment's site-packages with no
    /// NCCL wheel yet): a build script reruns when they change.
    pub watched: RefCell<Vec<PathBuf>>,
    /// Running as a build script: searches that depend on `PATH` are left
    /// out, so that a `PATH` change never reruns the build script.
    pub build_script: bool,
    /// The Python environment the program runs from
    /// (`Config::python_prefix`), searched for wheels.
    pub python_prefix: Option<PathBuf>,
    ld_cache: std::cell::OnceCell<Vec<(String, String)>>,
    /// The target's C library and its glibc version, once looked for
    /// (`inspect::library::system_glibc`).
    pub glibc: std::cell::OnceCell<Option<(PathBuf, (u32, u32))>>,
}

impl<'a> Ctx<'a> {
    pub fn new(env: &'a Env, root: &'a Path, target: &'a Target) -> Ctx<'a> {
        Ctx {
            env,
            root,
            target,
            looked: RefCell::default(),
            warnings: RefCell::default(),
            notes: RefCell::default(),
            misleading_pc: RefCell::default(),
            watched: RefCell::default(),
            build_script: false,
            python_prefix: None,
            ld_cache: std::cell::OnceCell::new(),
            glibc: std::cell::OnceCell::new(),
        }
    }

    /// The loader cache's entries (`/etc/ld.so.cache` under the root), read once.
    pub fn ld_cache(&self) -> &[(String, String)] {
        self.ld_cache.get_or_init(|| {
            match crate::files::read_bounded(&self.path("/etc/ld.so.cache"), 64 << 20) {
                Ok(data) => crate::ldcache::parse_ld_cache(&data),
                Err(_) => Vec::new(),
            }
        })
    }

    /// A variable, read with the target prefix first.
    pub fn var(&self, name: &str) -> Option<Var> {
        self.env.var(&self.target.env_prefix, name)
    }

    /// A variable holding a directory, resolved under the root. A relative
    /// value is taken from the current directory, with a warning, since
    /// build scripts run in their package's directory.
    pub fn var_path(&self, name: &str) -> Option<(Var, PathBuf)> {
        let var = self.var(name)?;
        let path = self.value_path(&var.name, &var.value);
        Some((var, path))
    }

    /// Turns a value from a variable into a path under the root.
    pub fn value_path(&self, name: &str, value: &OsString) -> PathBuf {
        let raw = PathBuf::from(value);
        let raw = match raw.strip_prefix("~") {
            Ok(rest) if value.to_string_lossy().starts_with("~/") || value == "~" => {
                match self.env.raw("HOME") {
                    Some(home) => PathBuf::from(home).join(rest),
                    None => raw.clone(),
                }
            }
            _ => raw,
        };
        if raw.is_absolute() {
            self.path(&raw)
        } else {
            let cwd = std::env::current_dir().unwrap_or_default();
            self.warn(format!(
                "{name}={} is a relative path; it was taken from the current directory {}. \
                 Build scripts run in their package's directory: use an absolute path.",
                value.to_string_lossy(),
                cwd.display()
            ));
            cwd.join(raw)
        }
    }

    /// A logical absolute path (`/usr/include`) under the root, with the
    /// links along it resolved inside the root (an absolute link in a
    /// sysroot points into the sysroot, never out of it).
    pub fn path(&self, logical: impl AsRef<Path>) -> PathBuf {
        self.path_of(logical.as_ref())
    }

    fn path_of(&self, logical: &Path) -> PathBuf {
        let joined = match logical.strip_prefix("/") {
            Ok(rel) => self.root.join(rel),
            Err(_) => self.root.join(logical),
        };
        if self.root == Path::new("/") {
            return joined;
        }
        match crate::files::resolve_in(self.root, &joined, false) {
            Ok(p) if p.exists() => p,
            // A dangling link keeps its name, so that the error names it
            // (see `home::check_dir`); so does a loop.
            Ok(_)
                if std::fs::symlink_metadata(&joined).is_ok_and(|m| m.file_type().is_symlink()) =>
            {
                joined
            }
            Ok(p) => p,
            Err(_) => joined,
        }
    }

    /// A file's real path, every link resolved inside the root.
    pub fn canonical(&self, path: &Path) -> std::io::Result<PathBuf> {
        crate::files::resolve_in(self.root, path, true)
    }

    /// A path as seen inside the root, for messages: `<root>/usr/lib` → `/usr/lib`.
    pub fn show(&self, real: &Path) -> String {
        under_root(self.root, real).display().to_string()
    }

    /// Records a place looked at.
    pub fn looked(&self, source: SourceKind, path: &Path, outcome: impl Into<String>) {
        self.looked.borrow_mut().push(Looked {
            source,
            path: path.to_path_buf(),
            outcome: outcome.into(),
        });
    }

    /// Records a warning: something the user can and should act on, which
    /// a build script prints as a `cargo:warning`.
    pub fn warn(&self, message: String) {
        let mut w = self.warnings.borrow_mut();
        if !w.contains(&message) {
            w.push(message);
        }
    }

    /// Records a note: something nccl-find already worked around (an
    /// install skipped, a wrong `nccl.pc` bypassed). `--print` and `--json`
    /// show it; a build script does not print it.
    pub fn note(&self, message: String) {
        let mut n = self.notes.borrow_mut();
        if !n.contains(&message) {
            n.push(message);
        }
    }

    /// A variable holding a `:`-separated list of directories.
    pub fn var_list(&self, name: &str) -> Option<(Var, Vec<PathBuf>)> {
        self.list_of(self.var(name)?)
    }

    /// `LD_LIBRARY_PATH`'s directories, less those cargo itself puts there
    /// for a build script or `cargo run` (its target directory's profile and
    /// `deps`, and the toolchain's `lib` and `lib/rustlib/<host>/lib`, known
    /// from `OUT_DIR` and `CARGO`): they are not the user's, hold no NCCL,
    /// and are not there when the program runs.
    pub fn ld_library_path(&self) -> Option<(Var, Vec<PathBuf>)> {
        let (var, dirs) = self.var_list("LD_LIBRARY_PATH")?;
        let cargos = self.cargo_dirs();
        if cargos.is_empty() {
            return Some((var, dirs));
        }
        let mut mine = Vec::with_capacity(dirs.len());
        for d in dirs {
            if !cargos.contains(&d) && !is_rustlib(&d, &cargos) {
                mine.push(d);
            }
        }
        Some((var, mine))
    }

    /// The directories cargo puts on a build script's `LD_LIBRARY_PATH`,
    /// under the root as `var_list` gives them, from `OUT_DIR`
    /// (`<target>/<profile>/build/<pkg>/out`, also under `<triple>/` when
    /// cross-compiling) and `CARGO` (`<toolchain>/bin/cargo`).
    fn cargo_dirs(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if let Some(o) = self.env.peek("OUT_DIR") {
            let o = PathBuf::from(o);
            if let Some(profile) = o.ancestors().nth(3) {
                let name = profile.file_name().unwrap_or_default();
                for base in profile.ancestors().skip(1).take(2) {
                    out.push(self.path(base.join(name)));
                    out.push(self.path(base.join(name).join("deps")));
                }
            }
        }
        if let Some(c) = self.env.peek("CARGO") {
            if let Some(toolchain) = Path::new(&c).ancestors().nth(2) {
                out.push(self.path(toolchain.join("lib")));
            }
        }
        out
    }

    /// A pkg-config variable, looked up as the `pkg-config` crate does:
    /// `<NAME>_<target>`, `<NAME>_<target with underscores>`, then
    /// `HOST_<NAME>` (host == target) or `TARGET_<NAME>` (cross), then
    /// `<NAME>`. Empty values count as unset.
    pub fn pkg_config_var(&self, name: &str) -> Option<Var> {
        let triple = &self.target.triple;
        let mut names = vec![
            format!("{name}_{triple}"),
            format!("{name}_{}", triple.replace('-', "_")),
        ];
        if let Some(host) = self.env.raw("HOST") {
            let kind = if host == std::ffi::OsStr::new(triple) {
                "HOST"
            } else {
                "TARGET"
            };
            names.push(format!("{kind}_{name}"));
        }
        names.push(name.to_string());
        self.env.first_set(names)
    }

    /// [`Ctx::pkg_config_var`] as a list of directories.
    pub fn pkg_config_list(&self, name: &str) -> Option<(Var, Vec<PathBuf>)> {
        self.list_of(self.pkg_config_var(name)?)
    }

    fn list_of(&self, var: Var) -> Option<(Var, Vec<PathBuf>)> {
        let mut dirs = Vec::new();
        for p in std::env::split_paths(&var.value) {
            if !p.as_os_str().is_empty() {
                dirs.push(self.value_path(&var.name, &p.into_os_string()));
            }
        }
        Some((var, dirs))
    }
}

/// A real path as seen inside `root`: `<root>/usr/lib` → `/usr/lib`. Paths
/// outside the root, and every path when the root is `/`, stay as they are.
pub(crate) fn under_root<'a>(root: &Path, real: &'a Path) -> std::borrow::Cow<'a, Path> {
    if root == Path::new("/") {
        return real.into();
    }
    match real.strip_prefix(root) {
        Ok(rel) => Path::new("/").join(rel).into(),
        Err(_) => real.into(),
    }
}

/// The directory's entries, sorted by name, so that results never depend on
/// the order the filesystem lists them in. Unreadable or missing: empty.
pub(crate) fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut names = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd {
            let Ok(e) = e else { continue };
            names.push(e.file_name());
        }
    }
    // Entries of one directory differ only in their last component, so
    // their order as paths is the order of their names' bytes.
    let mut bytes: Vec<&[u8]> = Vec::with_capacity(names.len());
    for name in &names {
        bytes.push(name.as_encoded_bytes());
    }
    let mut v = Vec::with_capacity(names.len());
    for i in by_bytes(&bytes) {
        v.push(dir.join(&names[i]));
    }
    v
}

/// A path's last component as UTF-8, if it has one.
pub(crate) fn file_name_str(p: &Path) -> Option<&str> {
    p.file_name()?.to_str()
}

/// Entries of `dir` whose names start with `prefix`, sorted with the highest
/// version first (`python3.12` before `python3.9`, `cuda-12.4` before
/// `cuda-11.8`), then by name.
pub(crate) fn versioned_entries(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut keyed = Vec::new();
    for p in sorted_entries(dir) {
        let Some(name) = file_name_str(&p) else {
            continue;
        };
        let rest = match name.strip_prefix(prefix) {
            Some(rest) if !rest.is_empty() => rest,
            _ => continue,
        };
        keyed.push((digit_runs(rest, 0), p));
    }
    newest_first(keyed)
}

/// The runs of ASCII digits in `text`, as numbers (`2.21.5-1` → `[2, 21,
/// 5, 1]`), for sorting by version; a run too big for a `u64` is `too_big`.
pub(crate) fn digit_runs(text: &str, too_big: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for s in text.split(|c: char| !c.is_ascii_digit()) {
        if !s.is_empty() {
            out.push(s.parse().unwrap_or(too_big));
        }
    }
    out
}

/// The items, highest version numbers first, in their given order among
/// equals.
pub(crate) fn newest_first<T>(items: Vec<(Vec<u64>, T)>) -> Vec<T> {
    let mut keys = Vec::with_capacity(items.len());
    let mut slots = Vec::with_capacity(items.len());
    for (k, t) in items {
        keys.push(k);
        slots.push(Some(t));
    }
    let mut out = Vec::with_capacity(slots.len());
    for i in order(&keys) {
        if let Some(t) = slots[i].take() {
            out.push(t);
        }
    }
    out
}

/// The indices of `texts` in ascending order of their bytes, for texts
/// without NUL bytes (file names, C strings: all it is used for) that are
/// distinct or, where equal, identical: among equals the order is reversed,
/// which such texts cannot show.
pub(crate) fn by_bytes(texts: &[&[u8]]) -> Vec<usize> {
    let mut keys = Vec::with_capacity(texts.len());
    for t in texts {
        keys.push(byte_key(t));
    }
    let mut ascending = order(&keys);
    ascending.reverse();
    ascending
}

/// For each path, whether it is the first of its place in the list (links
/// resolved where they can be): the ones to keep when dropping repeats. In
/// O(n log n) through [`order`]: a search of the kept ones for each (10,000
/// `LD_LIBRARY_PATH` entries) would be quadratic.
pub(crate) fn first_occurrences(paths: &[PathBuf]) -> Vec<bool> {
    use std::os::unix::ffi::OsStrExt;
    let mut keys = Vec::with_capacity(paths.len());
    for p in paths {
        let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        // Equal as paths are: by components (`/a/` is `/a`, `a//b` is `a/b`).
        let p: PathBuf = real.components().collect();
        let mut k = byte_key(p.as_os_str().as_bytes());
        // The length last, so that no padding makes two paths equal.
        k.push(p.as_os_str().len() as u64);
        keys.push(k);
    }
    let mut first = vec![false; paths.len()];
    let mut prev: Option<usize> = None;
    // Equal keys come together, in the given order: the first of each run
    // is the first occurrence.
    for i in order(&keys) {
        if prev.map_or(true, |p| keys[p] != keys[i]) {
            first[i] = true;
        }
        prev = Some(i);
    }
    first
}

/// A key for [`order`] that orders as the bytes do, for text without NUL
/// bytes. Eight bytes go into each number, big-endian, the last padded with
/// zeros, so the key takes no more memory than the text (a directory may
/// hold very many names).
fn byte_key(bytes: &[u8]) -> Vec<u64> {
    let mut key = Vec::with_capacity(bytes.len().div_ceil(8));
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        key.push(u64::from_be_bytes(word));
    }
    key
}

/// The indices of `keys`, highest key first, in their given order among
/// equals ([`by_bytes`] reverses it for ascending order).
///
/// This is the crate's one sort: a sort with its own element type or
/// comparison is compiled anew, and every downstream build script pays for
/// each one.
pub(crate) fn order(keys: &[Vec<u64>]) -> Vec<usize> {
    let mut idx: Vec<(std::cmp::Reverse<&[u64]>, usize)> = Vec::with_capacity(keys.len());
    for (i, k) in keys.iter().enumerate() {
        idx.push((std::cmp::Reverse(k.as_slice()), i));
    }
    // The index makes every key distinct, so this order is the stable one.
    idx.sort_unstable();
    let mut out = Vec::with_capacity(idx.len());
    for (_, i) in idx {
        out.push(i);
    }
    out
}

/// Whether `d` is `<toolchain>/lib/rustlib/<host>/lib` for one of cargo's
/// `<toolchain>/lib` directories.
fn is_rustlib(d: &Path, cargos: &[PathBuf]) -> bool {
    let Some(rustlib) = d.parent().and_then(Path::parent) else {
        return false;
    };
    if !d.ends_with("lib") || !rustlib.ends_with("lib/rustlib") {
        return false;
    }
    match rustlib.parent() {
        Some(lib) => cargos.contains(&lib.to_path_buf()),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_occurrences_keep_the_first_of_each_path_as_a_search_would() {
        // Repeats, prefixes of each other, padding-length neighbours, and
        // names that differ only past the first eight bytes.
        let pool = [
            "/a",
            "/a/",
            "/ab",
            "/a/b",
            "/a//b",
            "/a/./b",
            "/",
            "/usr/lib",
            "/usr/lib64",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnv",
            "/12345678",
            "/1234567",
            "/123456789",
        ];
        for seed in 1..40u64 {
            let mut x = seed;
            let mut paths = Vec::new();
            for _ in 0..(seed as usize * 7) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                paths.push(PathBuf::from(pool[(x % pool.len() as u64) as usize]));
            }
            let mut naive = Vec::new();
            for (i, p) in paths.iter().enumerate() {
                naive.push(!paths[..i].contains(p));
            }
            assert_eq!(first_occurrences(&paths), naive, "seed {seed}");
        }
        assert!(first_occurrences(&[]).is_empty());
    }

    #[test]
    fn byte_keys_order_as_the_bytes_do() {
        let names: [&[u8]; 10] = [
            b"ba",
            b"libnccl.so.2",
            b"libnccl.so",
            b"",
            b"a",
            b"ab",
            b"abcdefgh",
            b"abcdefghi",
            b"abcdefgg\xff",
            "\u{e9}t\u{e9}".as_bytes(),
        ];
        let ours: Vec<&[u8]> = by_bytes(&names).iter().map(|&i| names[i]).collect();
        let mut std_order = names.to_vec();
        std_order.sort();
        assert_eq!(ours, std_order);
        assert_eq!(byte_key(b"abcdefghi").len(), 2);
    }

    #[test]
    fn versioned_entries_sort_highest_first() {
        let dir = std::env::temp_dir().join(format!("nccl-find-ve-{}", std::process::id()));
        for n in ["cuda-11.8", "cuda-12.10", "cuda-12.4", "cuda", "other"] {
            std::fs::create_dir_all(dir.join(n)).unwrap();
        }
        let names: Vec<String> = versioned_entries(&dir, "cuda-")
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(names, ["cuda-12.10", "cuda-12.4", "cuda-11.8"]);
    }
}
