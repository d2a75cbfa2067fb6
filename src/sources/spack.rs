//! A source: the NCCL installs of a Spack instance (`SPACK_ROOT`). Spack
//! puts each package in its own prefix under `$SPACK_ROOT/opt/spack`:
//! `<platform>-<target>/nccl-<version>-<hash>` (Spack 1.0's default
//! projection) or `<platform>-<os>-<target>/<compiler>-<version>/nccl-<version>-<hash>`
//! (before 1.0). Every prefix of either kind is proposed, newest NCCL first;
//! each is named from its `.spack/spec.json` (read bounded), else from its
//! directory name.

use std::path::{Path, PathBuf};

use super::{
    file_name_str, sorted_entries, versioned_entries, Ctx, Origin, Package, Site, SourceKind,
};

/// The most a `spec.json` may be: NCCL's, with its dependencies, is a few
/// kilobytes.
const MAX_SPEC: u64 = 1 << 20;

/// How deep a `spec.json` may nest before it is taken as not one.
const MAX_DEPTH: usize = 64;

/// The NCCL prefixes of the Spack instance named by `SPACK_ROOT`, newest first.
pub(crate) fn sites(ctx: &Ctx) -> Vec<Site> {
    let Some((var, root)) = ctx.var_path("SPACK_ROOT") else {
        return Vec::new();
    };
    let set = var.setting();
    let tree = root.join("opt/spack");
    if !tree.is_dir() {
        if !root.is_dir() {
            ctx.warn(format!(
                "{set} points at {}, which is not a directory.",
                ctx.show(&root)
            ));
        }
        ctx.looked(SourceKind::Spack, &tree, "no such directory");
        return Vec::new();
    }
    let mut found: Vec<Option<Site>> = Vec::new();
    let mut keys: Vec<Vec<u64>> = Vec::new();
    for prefix in prefixes(&tree) {
        let (spec, how) = spec_of(ctx, &prefix);
        let detail = format!("Spack {spec} under {set}");
        ctx.looked(SourceKind::Spack, &prefix, format!("{detail} ({how})"));
        let origin = Origin {
            source: SourceKind::Spack,
            variable: Some(set.clone()),
            package: Some(Package::Spack {
                version: spec.version.clone(),
                hash: spec.hash.clone(),
            }),
            detail,
        };
        found.push(Some(Site::of_prefix(origin, &prefix)));
        keys.push(numbers(&spec.version));
    }
    if found.is_empty() {
        ctx.looked(SourceKind::Spack, &tree, "no nccl-* install prefix");
    }
    // Newest first, in the listing order among equals.
    let mut out = Vec::with_capacity(found.len());
    for i in crate::context::order(&keys) {
        if let Some(site) = found[i].take() {
            out.push(site);
        }
    }
    out
}

/// `<tree>/*/nccl-*` and `<tree>/*/*/nccl-*`, each directory's entries
/// sorted. A second-level directory that is itself an install prefix (it
/// has `.spack/`) is a package of the new layout, not a compiler directory,
/// and is not listed.
fn prefixes(tree: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for arch in sorted_entries(tree) {
        if !visible_dir(&arch) {
            continue;
        }
        push_nccl_dirs(&mut out, &arch);
        for compiler in sorted_entries(&arch) {
            if !visible_dir(&compiler) || is_nccl(&compiler) || compiler.join(".spack").is_dir() {
                continue;
            }
            push_nccl_dirs(&mut out, &compiler);
        }
    }
    out
}

/// Adds the `nccl-*` directories in `dir` to `out`.
fn push_nccl_dirs(out: &mut Vec<PathBuf>, dir: &Path) {
    for p in versioned_entries(dir, "nccl-") {
        if p.is_dir() {
            out.push(p);
        }
    }
}

fn visible_dir(p: &Path) -> bool {
    if !p.is_dir() {
        return false;
    }
    match file_name_str(p) {
        Some(n) => !n.starts_with('.'),
        None => false,
    }
}

fn is_nccl(p: &Path) -> bool {
    match file_name_str(p) {
        Some(n) => n.starts_with("nccl-"),
        None => false,
    }
}

/// A Spack spec of NCCL: `nccl@<version>/<hash>`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spec {
    version: String,
    hash: String,
}

impl std::fmt::Display for Spec {
    /// As Spack shows it: the hash cut to 7 characters.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "nccl@{}", self.version)?;
        match self.hash.get(..7) {
            Some(short) => write!(f, "/{short}"),
            None if !self.hash.is_empty() => write!(f, "/{}", self.hash),
            None => Ok(()),
        }
    }
}

/// The prefix's spec, from `.spack/spec.json`, else from the directory
/// name; and, in words, where it came from.
fn spec_of(ctx: &Ctx, prefix: &Path) -> (Spec, String) {
    let name = match prefix.file_name() {
        Some(n) => n.to_string_lossy().into_owned(),
        None => String::new(),
    };
    let from_name = from_dir_name(&name);
    // Links in it are followed inside the root, as a sysroot's would be.
    let read = match ctx.canonical(&prefix.join(".spack/spec.json")) {
        Ok(file) => crate::files::read_bounded(&file, MAX_SPEC),
        Err(e) => Err(e),
    };
    let why = match read {
        Ok(bytes) => match from_spec_json(&bytes) {
            Some(mut spec) => {
                if spec.hash.is_empty() {
                    spec.hash = from_name.hash;
                }
                return (spec, "named by .spack/spec.json".into());
            }
            None => "it holds no nccl node".to_string(),
        },
        Err(e) => e.to_string(),
    };
    (
        from_name,
        format!("named by its directory: .spack/spec.json: {why}"),
    )
}

/// `nccl-2.21.5-1-<hash>` → `2.21.5-1`, `<hash>`: the hash is after the
/// last `-`.
fn from_dir_name(name: &str) -> Spec {
    let rest = name.strip_prefix("nccl-").unwrap_or(name);
    match rest.rsplit_once('-') {
        Some((version, hash)) if is_hash(hash) && !version.is_empty() => Spec {
            version: clean(version),
            hash: hash.to_string(),
        },
        _ => Spec {
            version: clean(rest),
            hash: String::new(),
        },
    }
}

/// Spack's hashes: base32, lower case
/// (7 characters or more, as Spack shows them: a shorter last part of a
/// directory name is the version's, as the `1` of `2.21.5-1`).
fn is_hash(s: &str) -> bool {
    if !(7..=64).contains(&s.len()) {
        return false;
    }
    for b in s.bytes() {
        if !(b.is_ascii_lowercase() || b.is_ascii_digit()) {
            return false;
        }
    }
    true
}

fn version_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+')
}

/// A version from a directory name, as shown: the characters a version
/// has, at most 64 of them.
fn clean(s: &str) -> String {
    let mut out = String::new();
    let mut kept = 0;
    for c in s.chars() {
        if kept == 64 {
            break;
        }
        if version_char(c) {
            out.push(c);
            kept += 1;
        }
    }
    out
}

/// The version's numbers, for sorting: `2.21.5-1` → `[2, 21, 5, 1]`; a
/// number too big sorts as the newest.
fn numbers(version: &str) -> Vec<u64> {
    crate::context::digit_runs(version, u64::MAX)
}

/// The spec of `spec.json`'s first node (`{"spec": {"nodes": [{…}, …]}}`,
/// the package itself; its dependencies follow) when that node is `nccl`
/// with a version. The dependencies nest their own `name` and `hash`, so
/// only the node's own members count.
fn from_spec_json(bytes: &[u8]) -> Option<Spec> {
    let members = first_node(bytes)?;
    if member(&members, "name")? != "nccl" {
        return None;
    }
    let version = member(&members, "version")?;
    if version.is_empty() || version.len() > 64 {
        return None;
    }
    for c in version.chars() {
        if !version_char(c) {
            return None;
        }
    }
    let version = version.to_string();
    let hash = match member(&members, "hash") {
        Some(h) if is_hash(h) => h.to_string(),
        _ => String::new(),
    };
    Some(Spec { version, hash })
}

/// The Spack `spec.json` reader, for the fuzz target: the version and hash read, if
/// any.
#[cfg(fuzzing)]
pub fn spack_spec_json(bytes: &[u8]) -> Option<(String, String)> {
    from_spec_json(bytes).map(|s| (s.version, s.hash))
}

/// The first member named `key`, when its value is UTF-8.
fn member<'a>(members: &[(&[u8], &'a [u8])], key: &str) -> Option<&'a str> {
    for (k, v) in members {
        if *k == key.as_bytes() {
            return std::str::from_utf8(v).ok();
        }
    }
    None
}

/// One JSON token; strings as their raw bytes between the quotes.
enum Tok<'a> {
    Open(u8),
    Close,
    Colon,
    Comma,
    Str(&'a [u8]),
    Scalar,
}

fn token<'a>(b: &'a [u8], i: &mut usize) -> Option<Tok<'a>> {
    while let Some(c) = b.get(*i) {
        if !c.is_ascii_whitespace() {
            break;
        }
        *i += 1;
    }
    let c = *b.get(*i)?;
    *i += 1;
    Some(match c {
        b'{' | b'[' => Tok::Open(c),
        b'}' | b']' => Tok::Close,
        b':' => Tok::Colon,
        b',' => Tok::Comma,
        b'"' => {
            let start = *i;
            loop {
                match *b.get(*i)? {
                    b'\\' => *i += 2,
                    b'"' => break,
                    _ => *i += 1,
                }
            }
            *i += 1;
            Tok::Str(&b[start..*i - 1])
        }
        _ => {
            while let Some(c) = b.get(*i) {
                if b"{}[]:,\" \t\r\n".contains(c) {
                    break;
                }
                *i += 1;
            }
            Tok::Scalar
        }
    })
}

/// An open object or array while scanning: the key it sits under in its
/// parent, the key whose value is next (objects), how many commas were
/// seen (arrays: the index of the current element).
struct Frame<'a> {
    object: bool,
    under: &'a [u8],
    key: Option<&'a [u8]>,
    commas: usize,
    target: bool,
}

/// The string members of the first object in the first array under a key
/// `nodes`. A scanner, not a validator: it never recurses, stops at
/// [`MAX_DEPTH`], and gives up (`None`) on anything it cannot follow.
fn first_node(b: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut stack: Vec<Frame> = Vec::new();
    let mut members = Vec::new();
    let mut i = 0;
    while let Some(tok) = token(b, &mut i) {
        match tok {
            Tok::Open(c) => {
                if stack.len() >= MAX_DEPTH {
                    return None;
                }
                let (under, target) = match stack.last_mut() {
                    Some(p) if p.object => (p.key.take().unwrap_or(b""), false),
                    Some(p) => (
                        b"".as_slice(),
                        c == b'{' && p.under == b"nodes" && p.commas == 0,
                    ),
                    None => (b"".as_slice(), false),
                };
                stack.push(Frame {
                    object: c == b'{',
                    under,
                    key: None,
                    commas: 0,
                    target,
                });
            }
            Tok::Close => {
                if stack.pop()?.target {
                    return Some(members);
                }
            }
            Tok::Str(s) => {
                let top = stack.last_mut()?;
                match top.key.take() {
                    Some(k) if top.object && top.target => members.push((k, s)),
                    Some(_) => {}
                    None if top.object => top.key = Some(s),
                    None => {}
                }
            }
            Tok::Comma => {
                let top = stack.last_mut()?;
                top.commas += 1;
                top.key = None;
            }
            Tok::Scalar => {
                if let Some(top) = stack.last_mut() {
                    top.key = None;
                }
            }
            Tok::Colon => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_json_names_the_first_node_only() {
        let json = br#"{"spec": {"_meta": {"version": 4}, "nodes": [
            {"name": "nccl", "version": "2.21.5-1", "arch": {"platform": "linux",
             "target": {"name": "x86_64_v3"}}, "compiler": {"name": "gcc", "version": "11.4.0"},
             "dependencies": [{"name": "cuda", "hash": "zzzzzzz"}], "hash": "abcdefghij"},
            {"name": "cuda", "version": "12.4.0", "hash": "qqqqqqq"}]}}"#;
        assert_eq!(
            from_spec_json(json),
            Some(Spec {
                version: "2.21.5-1".into(),
                hash: "abcdefghij".into()
            })
        );
    }

    #[test]
    fn spec_json_garbage_gives_nothing() {
        for bad in [
            &b""[..],
            b"not json",
            b"{\"spec\": {\"nodes\": [",
            b"{\"spec\": {\"nodes\": [{\"name\": \"nccl\", \"version\": \"2.1\"",
            b"\"\\",
            b"]]]}}}",
            b"{\"nodes\": [{\"name\": \"cuda\", \"version\": \"12.4\"}]}",
            b"{\"nodes\": [{\"name\": \"nccl\", \"version\": \"\\n\\n\"}]}",
        ] {
            assert_eq!(
                from_spec_json(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let deep = "[".repeat(100_000);
        assert_eq!(from_spec_json(deep.as_bytes()), None);
    }

    #[test]
    fn directory_names() {
        assert_eq!(
            from_dir_name("nccl-2.21.5-1-abcdefghijklmnopqrstuvwxyz012345"),
            Spec {
                version: "2.21.5-1".into(),
                hash: "abcdefghijklmnopqrstuvwxyz012345".into()
            }
        );
        assert_eq!(
            from_dir_name("nccl-2.21.5"),
            Spec {
                version: "2.21.5".into(),
                hash: String::new()
            }
        );
        assert_eq!(numbers("2.21.5-1"), [2, 21, 5, 1]);
    }
}
