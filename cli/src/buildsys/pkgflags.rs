//! pkg-config-style output: `--cflags`, `--libs` (and their `-only-`
//! parts), `--variable`, `--env`, and the module list a build system passes
//! (`nccl`, `nccl >= 2.18`). Paths are written byte for byte (a path that
//! is not UTF-8 stays the same path), escaped for a shell: a backslash
//! before every character a shell or a glob would read, as pkg-config does,
//! and single quotes for `--env`.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nccl_find::explain::LinkArg;
use nccl_find::{Linking, Nccl};

/// The target triples NCCL is built for: Linux on x86_64, aarch64 (sbsa)
/// and ppc64le. Anything else is a usage error, not an empty answer.
pub fn check_target(triple: &str) -> Result<(), String> {
    let parts: Vec<&str> = triple.split('-').collect();
    if parts.len() < 3 || parts.iter().any(|p| p.is_empty()) {
        return Err(
            "not a target triple: write ARCH-VENDOR-OS[-ENV], e.g. x86_64-unknown-linux-gnu".into(),
        );
    }
    if !["x86_64", "aarch64", "powerpc64le"].contains(&parts[0]) {
        return Err(format!(
            "NCCL is not built for {}: use an x86_64, aarch64 or powerpc64le Linux triple",
            parts[0]
        ));
    }
    if !parts[1..].contains(&"linux") {
        return Err("NCCL is built for Linux only: use a *-linux-* triple".into());
    }
    Ok(())
}

/// A flag and a path, with pkg-config's backslash escapes. A line break
/// cannot be escaped that way (a shell drops backslash-newline): refused.
fn flag(prefix: &str, p: &Path) -> Result<Vec<u8>, String> {
    let bytes = p.as_os_str().as_bytes();
    if bytes.contains(&b'\n') {
        return Err(format!(
            "{:?} holds a line break and cannot be written as a compiler flag; use a path without one",
            p
        ));
    }
    let mut out = prefix.as_bytes().to_vec();
    for &b in bytes {
        if !(b.is_ascii_alphanumeric() || b >= 0x80 || b"/._-+,:@=%".contains(&b)) {
            out.push(b'\\');
        }
        out.push(b);
    }
    Ok(out)
}

/// Which parts of the flags to print, as pkg-config's output options
/// choose them: `--cflags` is `-I` plus other compiler flags, `--libs` is
/// `-L` plus `-l` plus other linker flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parts {
    /// `-I<dir>` (`--cflags`, `--cflags-only-I`).
    pub include: bool,
    /// Other compiler flags (`--cflags`, `--cflags-only-other`): NCCL has none.
    pub cflags_other: bool,
    /// `-L<dir>` (`--libs`, `--libs-only-L`).
    pub lib_dirs: bool,
    /// `-l<name>` (`--libs`, `--libs-only-l`).
    pub libs: bool,
    /// Other linker flags (`--libs`, `--libs-only-other`): NCCL has none.
    pub libs_other: bool,
}

impl Parts {
    /// Whether any output was asked for.
    pub fn any(self) -> bool {
        self.include || self.cflags_other || self.lib_dirs || self.libs || self.libs_other
    }
}

/// The include dirs a compile of `nccl.h` needs: its own, then the CUDA
/// include dirs it needs, each once (Debian's CUDA headers share
/// `/usr/include` with `nccl.h`). Where the CUDA headers were not found, or
/// only some, why, with the line that installs them: flags without them
/// would fail in the compiler.
pub fn include_dirs(n: &Nccl) -> Result<Vec<&PathBuf>, String> {
    let cuda = n.cuda_include_dirs.as_ref().map_err(String::clone)?;
    let mut dirs: Vec<&PathBuf> = Vec::new();
    for d in n.include_paths.iter().chain(cuda) {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    Ok(dirs)
}

/// The flags `parts` selects, on one line, compiler flags first.
/// The include part is [`include_dirs`], and fails where it does.
///
/// `loader_dir`, for an install with no `libnccl.so` (a pip wheel): a
/// directory whose `libnccl.so` links to its `libnccl.so.2`, given as
/// `-L<dir> -lnccl` instead of `-L<lib dir> -l:libnccl.so.2`, for tools
/// that look each `-l` name up themselves (CMake's `pkg_check_modules`).
pub fn flags(n: &Nccl, parts: Parts, loader_dir: Option<&Path>) -> Result<Vec<u8>, String> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    if parts.include {
        for d in include_dirs(n)? {
            out.push(flag("-I", d)?);
        }
    }
    let lib_dir = |out: &mut Vec<Vec<u8>>, d: &Path| -> Result<(), String> {
        if parts.lib_dirs {
            out.push(flag("-L", d)?);
        }
        Ok(())
    };
    let libs = |out: &mut Vec<Vec<u8>>, names: &[&str]| {
        if parts.libs {
            out.extend(names.iter().map(|s| s.as_bytes().to_vec()));
        }
    };
    // A loader directory (the drop-in's shim) stands in for the library's
    // own directory, and holds `libnccl.so`: `-lnccl` finds it.
    let shim = loader_dir.filter(|_| matches!(n.linking, Linking::DynamicVerbatim));
    for a in n.linking.args(&n.lib_dir) {
        match a {
            LinkArg::SearchDir(d) => lib_dir(&mut out, shim.unwrap_or(d))?,
            LinkArg::SharedFile(_) if shim.is_some() => libs(&mut out, &["-lnccl"]),
            LinkArg::Shared(l) => libs(&mut out, &[&format!("-l{l}")]),
            LinkArg::SharedFile(f) => libs(&mut out, &[&format!("-l:{f}")]),
            LinkArg::Static { name, .. } => libs(&mut out, &[&format!("-l{name}")]),
            _ => {}
        }
    }
    Ok(out.join(&b' '))
}

/// The install's prefix: its root, else the deepest directory above both
/// its include dir and its library dir (`/usr` for `/usr/include` and
/// `/usr/lib/x86_64-linux-gnu`), else the parent of its library dir.
fn prefix(n: &Nccl) -> PathBuf {
    if let Some(root) = &n.root {
        return root.clone();
    }
    let mut p = n
        .lib_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    if let Some(inc) = n.include_paths.first() {
        while !inc.starts_with(&p) && p.pop() {}
    }
    p
}

/// The variables `--variable` answers, as `nccl.pc` defines them.
pub const VARIABLES: [&str; 3] = ["prefix", "includedir", "libdir"];

/// `--variable=NAME`: the path, as pkg-config prints a variable (as it is,
/// not escaped). `None` for a name NCCL's `.pc` does not define.
pub fn variable(n: &Nccl, name: &str) -> Option<Vec<u8>> {
    let p = match name {
        "prefix" => prefix(n),
        "includedir" => n.include_paths.first().cloned().unwrap_or_default(),
        "libdir" => n.lib_dir.clone(),
        _ => return None,
    };
    Some(p.as_os_str().as_bytes().to_vec())
}

/// A version comparison in a module list: `nccl >= 2.18`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraint {
    /// `=`, `!=`, `<`, `<=`, `>`, `>=` (`==` is read as `=`).
    pub op: &'static str,
    /// The version as written.
    pub version: String,
}

/// A module list that names a package other than nccl, or is malformed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleError {
    /// A package nccl-find does not answer for (pkg-config's "not found").
    NotNccl(String),
    /// A comparison with no version after it, or a version that is not
    /// `X`, `X.Y` or `X.Y.Z`.
    Malformed(String),
}

impl std::fmt::Display for ModuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModuleError::NotNccl(name) => write!(
                f,
                "No package '{name}' found (nccl-find answers for nccl only; ask pkg-config for other packages)"
            ),
            ModuleError::Malformed(why) => f.write_str(why),
        }
    }
}

const OPS: [&str; 7] = ["==", "!=", "<=", ">=", "=", "<", ">"];

/// Reads the package arguments as pkg-config does: joined, then split on
/// spaces and commas into names, each optionally followed by a comparison
/// and a version (`nccl`, `nccl >= 2.18`, `nccl>=2.18, nccl < 3`). Every
/// name must be `nccl`; the constraints of all of them are returned.
pub fn parse_modules(args: &[String]) -> Result<Vec<Constraint>, ModuleError> {
    let joined = args.join(" ");
    // Tokens: split on separators, and around comparison operators.
    let mut tokens: Vec<String> = Vec::new();
    let mut rest = joined.as_str();
    while let Some(c) = rest.chars().next() {
        if c == ' ' || c == ',' || c.is_whitespace() {
            rest = &rest[c.len_utf8()..];
        } else if let Some(op) = OPS.iter().find(|op| rest.starts_with(*op)) {
            tokens.push(op.to_string());
            rest = &rest[op.len()..];
        } else {
            let end = rest
                .find(|c: char| c == ',' || c.is_whitespace() || "=!<>".contains(c))
                .unwrap_or(rest.len());
            tokens.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    let mut out = Vec::new();
    let mut it = tokens.into_iter().peekable();
    while let Some(name) = it.next() {
        if OPS.contains(&name.as_str()) {
            return Err(ModuleError::Malformed(format!(
                "'{name}' with no package name before it: write e.g. 'nccl >= 2.18'"
            )));
        }
        if name != "nccl" {
            return Err(ModuleError::NotNccl(name));
        }
        let Some(op) = it.next_if(|t| OPS.contains(&t.as_str())) else {
            continue;
        };
        let op = OPS
            .iter()
            .copied()
            .find(|o| *o == op)
            .map(|o| if o == "==" { "=" } else { o })
            .unwrap_or("=");
        let Some(version) = it.next() else {
            return Err(ModuleError::Malformed(format!(
                "'nccl {op}' has no version after it: write e.g. 'nccl {op} 2.18'"
            )));
        };
        padded(&version).map_err(ModuleError::Malformed)?;
        out.push(Constraint { op, version });
    }
    Ok(out)
}

/// `X`, `X.Y` or `X.Y.Z` as a full `X.Y.Z` (missing parts are 0).
fn padded(v: &str) -> Result<String, String> {
    let parts: Vec<&str> = v.split('.').collect();
    if parts.len() > 3
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.len() > 9)
    {
        return Err(format!(
            "'{v}' is not an NCCL version: write X, X.Y or X.Y.Z, e.g. 2.18"
        ));
    }
    let mut full: Vec<&str> = parts;
    full.resize(3, "0");
    Ok(full.join("."))
}

/// The constraints as a semver requirement for the probe (`>=2.18.0,
/// <3.0.0`), leaving out `!=`, which semver cannot say: check those with
/// [`excluded`] after the probe. `None` when nothing is left.
pub fn semver_requirement(cs: &[Constraint]) -> Option<String> {
    let parts: Vec<String> = cs
        .iter()
        .filter(|c| c.op != "!=")
        .map(|c| format!("{}{}", c.op, padded(&c.version).unwrap_or_default()))
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// The `!=` constraint that `version` (`X.Y.Z`) breaks, if any.
pub fn excluded<'a>(cs: &'a [Constraint], version: &nccl_find::Version) -> Option<&'a Constraint> {
    let v = format!("{}.{}.{}", version.major, version.minor, version.patch);
    cs.iter()
        .find(|c| c.op == "!=" && padded(&c.version).ok().as_deref() == Some(v.as_str()))
}

/// `--env`: `export` lines a POSIX shell can `eval`, so that the builds it
/// starts see them, each path byte for byte. `NCCL_HOME` and `NCCL_ROOT`
/// (which CMake's `find_package` reads) name the same prefix. With
/// `prefix`, a directory whose `lib/libnccl.so` and `include/` lead to the
/// install (for a wheel, which has no `libnccl.so`), `NCCL_LIB_DIR` and the
/// prefix are that directory's, so that `-lnccl` links. `cuda_home`, where
/// there is one, is a directory whose `include/` holds the CUDA headers
/// `nccl.h` includes (what NVIDIA's `nccl-sys` and CMake's CUDA find
/// modules read). `NCCL_CFLAGS` and `NCCL_LIBS` (the names autoconf's
/// `PKG_CHECK_MODULES([NCCL], [nccl])` reads before it asks pkg-config) are
/// `--cflags` and `--libs`: the first only where `nccl.h` compiles with it
/// (`compiles`: the CUDA headers it includes were found).
pub fn env(
    n: &Nccl,
    prefix_dir: Option<&Path>,
    cuda_home: Option<&Path>,
    compiles: bool,
) -> Vec<u8> {
    let include = n.include_paths.first().cloned().unwrap_or_default();
    let (lib, home) = match prefix_dir {
        Some(d) => (d.to_path_buf(), d.to_path_buf()),
        None => (n.lib_dir.clone(), prefix(n)),
    };
    let mut out = Vec::new();
    let mut vars = vec![
        ("NCCL_INCLUDE_DIR", include.as_path()),
        ("NCCL_LIB_DIR", lib.as_path()),
        ("NCCL_HOME", home.as_path()),
        ("NCCL_ROOT", home.as_path()),
    ];
    if let Some(c) = cuda_home {
        vars.push(("CUDA_HOME", c));
    }
    let cflags = Parts {
        include: true,
        cflags_other: true,
        ..Parts::default()
    };
    let libs = Parts {
        lib_dirs: true,
        libs: true,
        libs_other: true,
        ..Parts::default()
    };
    let mut values: Vec<(&str, Vec<u8>)> = vars
        .into_iter()
        .map(|(k, v)| (k, v.as_os_str().as_bytes().to_vec()))
        .collect();
    // A path with a line break has no flag (it is refused as one).
    if let (true, Ok(f)) = (compiles, flags(n, cflags, None)) {
        values.push(("NCCL_CFLAGS", f));
    }
    if let Ok(f) = flags(n, libs, prefix_dir) {
        values.push(("NCCL_LIBS", f));
    }
    for (k, v) in values {
        if !out.is_empty() {
            out.push(b'\n');
        }
        out.extend_from_slice(format!("export {k}=").as_bytes());
        out.extend(quote(&v));
    }
    out
}

/// Single-quotes a value for a POSIX shell when it needs it (inside single
/// quotes every byte but the quote itself is taken as it is).
pub fn quote(s: &[u8]) -> Vec<u8> {
    let plain = !s.is_empty()
        && s.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"/._-+,:@%".contains(c));
    if plain {
        return s.to_vec();
    }
    let mut out = vec![b'\''];
    for &c in s {
        if c == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(c);
        }
    }
    out.push(b'\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn quoting() {
        assert_eq!(
            quote(b"/opt/nccl_2.21.5-1+cuda12.4_x86_64"),
            b"/opt/nccl_2.21.5-1+cuda12.4_x86_64"
        );
        assert_eq!(quote(b"/a b/it's"), b"'/a b/it'\\''s'");
        assert_eq!(quote(b"/a\xff"), b"'/a\xff'");
    }

    #[test]
    fn flags_are_escaped_as_pkg_config_does() {
        let p = Path::new(OsStr::from_bytes(b"/o p/$x*[1]\xff'\"\\/inc"));
        assert_eq!(
            flag("-I", p).unwrap(),
            b"-I/o\\ p/\\$x\\*\\[1\\]\xff\\'\\\"\\\\/inc"
        );
        assert!(flag("-I", Path::new("/a\nb"))
            .unwrap_err()
            .contains("holds a line break"));
    }

    #[test]
    fn module_lists_are_read_as_pkg_config_reads_them() {
        let c = |op: &'static str, v: &str| Constraint {
            op,
            version: v.to_string(),
        };
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(parse_modules(&args(&[])), Ok(vec![]));
        assert_eq!(parse_modules(&args(&["nccl"])), Ok(vec![]));
        for form in [
            &["nccl >= 2.18"][..],
            &["nccl>=2.18"],
            &["nccl", ">=", "2.18"],
            &["  nccl >=2.18 ,"],
        ] {
            assert_eq!(
                parse_modules(&args(form)),
                Ok(vec![c(">=", "2.18")]),
                "{form:?}"
            );
        }
        assert_eq!(
            parse_modules(&args(&["nccl == 2.21.5, nccl != 2.20 nccl<3"])),
            Ok(vec![c("=", "2.21.5"), c("!=", "2.20"), c("<", "3")])
        );
        assert_eq!(
            parse_modules(&args(&["nccl", "cuda"])),
            Err(ModuleError::NotNccl("cuda".into()))
        );
        assert_eq!(
            parse_modules(&args(&["nccl <="])),
            Err(ModuleError::Malformed(
                "'nccl <=' has no version after it: write e.g. 'nccl <= 2.18'".into()
            ))
        );
        assert!(matches!(
            parse_modules(&args(&["nccl >= 2.18.1.4"])),
            Err(ModuleError::Malformed(_))
        ));
        assert!(matches!(
            parse_modules(&args(&["nccl >= -1"])),
            Err(ModuleError::Malformed(_))
        ));
        assert_eq!(
            semver_requirement(&[c(">=", "2.18"), c("!=", "2.20"), c("<", "3")]).as_deref(),
            Some(">=2.18.0, <3.0.0")
        );
        assert_eq!(semver_requirement(&[c("!=", "2.20")]), None);
        let v = nccl_find::Version::new(2, 20, 0, "");
        assert_eq!(excluded(&[c("!=", "2.20")], &v), Some(&c("!=", "2.20")));
        assert_eq!(excluded(&[c("!=", "2.20.1")], &v), None);
    }

    #[test]
    fn targets_nccl_is_not_built_for_are_refused() {
        for ok in [
            "x86_64-unknown-linux-gnu",
            "aarch64-unknown-linux-gnu",
            "powerpc64le-unknown-linux-gnu",
        ] {
            assert_eq!(check_target(ok), Ok(()));
        }
        assert!(check_target("x86_64-apple-darwin")
            .unwrap_err()
            .contains("Linux only"));
        assert!(check_target("wasm32-unknown-unknown")
            .unwrap_err()
            .contains("not built for wasm32"));
        assert!(check_target("nonsense")
            .unwrap_err()
            .contains("not a target triple"));
    }
}
