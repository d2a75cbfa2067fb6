//! A source: `nccl.pc`, found the way `pkg-config` finds it:
//! `PKG_CONFIG_PATH` first, then `PKG_CONFIG_LIBDIR` if set, else the
//! default directories. The file is read here rather than by running
//! `pkg-config`, so the probe's environment and root stay its inputs.
//! `PKG_CONFIG_SYSROOT_DIR` is put in front of `-I` and `-L` paths.

use std::path::{Path, PathBuf};

use super::{Ctx, Origin, Site, SourceKind};
use crate::problem::Problem;

/// What an `nccl.pc` says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PcFile {
    /// `Version:`.
    pub version: Option<String>,
    /// `-I` directories from `Cflags:`.
    pub include_dirs: Vec<String>,
    /// `-L` directories from `Libs:`.
    pub lib_dirs: Vec<String>,
    /// Variables (`prefix=…`), expanded, in the order first defined (a
    /// name defined again keeps its place and takes the new value).
    pub vars: Vec<(String, String)>,
}

impl PcFile {
    /// A variable's expanded value.
    pub fn var(&self, name: &str) -> Option<&str> {
        for (k, v) in &self.vars {
            if k == name {
                return Some(v);
            }
        }
        None
    }

    fn set(&mut self, name: String, value: String) -> Result<(), String> {
        for (k, v) in &mut self.vars {
            if *k == name {
                *v = value;
                return Ok(());
            }
        }
        if self.vars.len() >= MAX_VARS {
            return Err(format!(
                "more than {MAX_VARS} variables are defined (a real nccl.pc defines about 5)"
            ));
        }
        self.vars.push((name, value));
        Ok(())
    }
}

/// The most variables a `.pc` file may define: each reference is a search
/// of the list.
const MAX_VARS: usize = 256;

/// The longest a value may grow by expansion. Variables are expanded as
/// they are defined, so ones that each repeat the one before double at
/// every line: a few hundred bytes of them would take gigabytes.
const MAX_VALUE: usize = 65536;

/// Parses the text of a `.pc` file. `pcfiledir` is the directory holding
/// it. Errors name the line.
pub fn parse_pc(text: &str, pcfiledir: &str) -> Result<PcFile, String> {
    let mut pc = PcFile::default();
    pc.set("pcfiledir".into(), pcfiledir.into())?;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let field = line.find(':');
        let assign = line.find('=');
        // A field when its `:` comes before any `=`.
        let field = match (field, assign) {
            (Some(c), Some(a)) if a < c => None,
            _ => field,
        };
        match (field, assign) {
            (Some(c), _) => {
                let key = line[..c].trim();
                let value = expand(line[c + 1..].trim(), &pc, n + 1)?;
                match key {
                    "Version" => pc.version = Some(value),
                    "Cflags" | "CFlags" => flag_dirs(&value, "-I", &mut pc.include_dirs),
                    "Libs" => flag_dirs(&value, "-L", &mut pc.lib_dirs),
                    _ => {}
                }
            }
            (None, Some(a)) => {
                let key = line[..a].trim().to_string();
                if key.is_empty() || has_whitespace(&key) {
                    return Err(format!("line {}: bad variable name {key:?}", n + 1));
                }
                let value = expand(line[a + 1..].trim(), &pc, n + 1)?;
                pc.set(key, value)
                    .map_err(|why| format!("line {}: {why}", n + 1))?;
            }
            _ => {
                return Err(format!(
                    "line {}: neither `name=value` nor `Field: value`",
                    n + 1
                ))
            }
        }
    }
    Ok(pc)
}

fn has_whitespace(s: &str) -> bool {
    for c in s.chars() {
        if c.is_whitespace() {
            return true;
        }
    }
    false
}

fn expand(value: &str, pc: &PcFile, line: usize) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!("line {line}: unclosed ${{"));
        };
        let name = &after[..end];
        let Some(v) = pc.var(name) else {
            return Err(format!("line {line}: undefined variable ${{{name}}}"));
        };
        if out.len() + v.len() > MAX_VALUE {
            return Err(format!(
                "line {line}: a value grows past {MAX_VALUE} bytes as its variables expand (a real \
                 nccl.pc's are a few dozen)"
            ));
        }
        out.push_str(v);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Adds the directories of `flag` (`-I`, `-L`) in `value` to `out`.
fn flag_dirs(value: &str, flag: &str, out: &mut Vec<String>) {
    let mut words = value.split_whitespace();
    while let Some(w) = words.next() {
        if w == flag {
            if let Some(d) = words.next() {
                out.push(d.to_string());
            }
        } else if let Some(d) = w.strip_prefix(flag) {
            out.push(d.to_string());
        }
    }
}

fn default_dirs(ctx: &Ctx) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for base in ["/usr/local/lib", "/usr/lib"] {
        if let Some(ma) = ctx.target.multiarch {
            dirs.push(ctx.path(format!("{base}/{ma}/pkgconfig")));
        }
        dirs.push(ctx.path(format!("{base}/pkgconfig")));
    }
    for d in [
        "/usr/lib64/pkgconfig",
        "/usr/local/share/pkgconfig",
        "/usr/share/pkgconfig",
    ] {
        dirs.push(ctx.path(d));
    }
    dirs
}

pub(crate) fn sites(ctx: &Ctx) -> Vec<Site> {
    if let Some(v) = ctx.var("NCCL_NO_PKG_CONFIG") {
        ctx.looked(
            SourceKind::PkgConfig,
            Path::new("nccl.pc"),
            format!("not looked for: {} is set", v.name),
        );
        return Vec::new();
    }
    let mut dirs: Vec<(PathBuf, String)> = Vec::new();
    if let Some((var, list)) = ctx.pkg_config_list("PKG_CONFIG_PATH") {
        for d in list {
            dirs.push((d, var.name.clone()));
        }
    }
    match ctx.pkg_config_list("PKG_CONFIG_LIBDIR") {
        Some((var, list)) => {
            for d in list {
                dirs.push((d, var.name.clone()));
            }
        }
        None => {
            for d in default_dirs(ctx) {
                dirs.push((d, "default pkg-config dir".to_string()));
            }
        }
    }
    let sysroot = match ctx.pkg_config_var("PKG_CONFIG_SYSROOT_DIR") {
        Some(v) => Some(PathBuf::from(v.value)),
        None => None,
    };
    let mut out = Vec::new();
    for (dir, why) in dirs {
        let file = dir.join("nccl.pc");
        if !file.exists() {
            ctx.looked(SourceKind::PkgConfig, &file, "not there");
            continue;
        }
        ctx.looked(SourceKind::PkgConfig, &file, format!("found ({why})"));
        out.push(site_for(ctx, &file, &why, sysroot.as_deref()));
    }
    out
}

/// The site an `nccl.pc` describes: its `-I`/`-L` dirs (else `includedir`
/// and `libdir`) under the sysroot, or its fault when it cannot be parsed.
fn site_for(ctx: &Ctx, file: &Path, why: &str, sysroot: Option<&Path>) -> Site {
    let logical_dir = ctx.show(file.parent().unwrap_or(Path::new("/")));
    let parsed = match crate::files::read_bounded(file, 1 << 20) {
        Ok(bytes) => parse_pc(&String::from_utf8_lossy(&bytes), &logical_dir),
        Err(e) => Err(e.to_string()),
    };
    let mut origin = Origin {
        source: SourceKind::PkgConfig,
        variable: None,
        package: None,
        detail: format!("{} ({why})", ctx.show(file)),
    };
    let pc = match parsed {
        Ok(pc) => pc,
        Err(why) => {
            let mut site = Site::new(origin, Vec::new(), Vec::new());
            site.fault = Some(Problem::BadPcFile {
                file: file.to_path_buf(),
                why,
            });
            return site;
        }
    };
    if let Some(v) = &pc.version {
        origin.detail = format!("{} (Version {v}; {why})", ctx.show(file));
    }
    let incs = placed(
        ctx,
        sysroot,
        &pc.include_dirs,
        pc.var("includedir"),
        "/usr/include",
    );
    let libs = placed(ctx, sysroot, &pc.lib_dirs, pc.var("libdir"), "/usr/lib");
    if !holds_nccl(&incs, &libs) {
        misleading(ctx, file, &pc, &incs, &libs);
    }
    let mut site = Site::new(origin, incs, libs);
    if let Some(prefix) = pc.var("prefix") {
        site.root = Some(place(ctx, sysroot, prefix));
    }
    site
}

/// A directory of an `nccl.pc`, under the sysroot.
fn place(ctx: &Ctx, sysroot: Option<&Path>, d: &str) -> PathBuf {
    let d = match sysroot {
        Some(s) => s.join(d.trim_start_matches('/')),
        None => PathBuf::from(d),
    };
    ctx.path(&d)
}

/// The flag directories, placed; else the variable's directory (`var`,
/// else `default`).
fn placed(
    ctx: &Ctx,
    sysroot: Option<&Path>,
    dirs: &[String],
    var: Option<&str>,
    default: &str,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in dirs {
        out.push(place(ctx, sysroot, d));
    }
    if out.is_empty() {
        out.push(place(ctx, sysroot, var.unwrap_or(default)));
    }
    out
}

/// Whether any of the dirs holds `nccl.h` or a `libnccl*` file.
fn holds_nccl(incs: &[PathBuf], libs: &[PathBuf]) -> bool {
    for d in incs {
        if std::fs::symlink_metadata(d.join("nccl.h")).is_ok() {
            return true;
        }
    }
    for d in libs {
        for p in crate::sources::sorted_entries(d) {
            if let Some(n) = super::file_name_str(&p) {
                if n.starts_with("libnccl") {
                    return true;
                }
            }
        }
    }
    false
}

/// Names an `nccl.pc` whose dirs hold no NCCL (a build machine's
/// `prefix=`): a note or a warning, and a record for `doctor`.
fn misleading(ctx: &Ctx, file: &Path, pc: &PcFile, incs: &[PathBuf], libs: &[PathBuf]) {
    let prefix = match pc.var("prefix") {
        Some(p) => p.to_string(),
        None => "(none)".to_string(),
    };
    let mut flags: Vec<String> = Vec::new();
    for d in incs {
        flags.push(format!("-I{}", ctx.show(d)));
    }
    for d in libs {
        flags.push(format!("-L{}", ctx.show(d)));
    }
    let flags = flags.join(" ");
    let tree = defined_prefix(file);
    let use_tree = match &tree {
        Some(t) => format!(
            " The tree it sits in, {}, holds an NCCL (as `pkg-config --define-prefix` finds it): \
             use it with NCCL_HOME={}.",
            ctx.show(t),
            ctx.show(t)
        ),
        None => String::new(),
    };
    let text = format!(
        "{} says prefix={prefix} ({flags}), but there is no nccl.h and no libnccl there: the file \
         describes the machine NCCL was built on, or where `make install` would put it. \
         `pkg-config --cflags --libs nccl` gives C and CMake builds wrong flags here; nccl-find \
         ignores the file. Fix its prefix= line, or use `nccl-find --cflags --libs`.{use_tree}",
        ctx.show(file)
    );
    // Looked past already (a distribution's own file, which dpkg owns and
    // the user cannot mend): a note. A tree beside it that holds an NCCL
    // nccl-find does not take by itself (a source build) is for the user
    // to name: a warning.
    match tree {
        Some(_) => ctx.warn(text),
        None => ctx.note(text),
    }
    ctx.misleading_pc
        .borrow_mut()
        .push(crate::origin::MisleadingPc {
            file: file.to_path_buf(),
            prefix,
            flags,
            tree,
        });
}

/// The prefix `pkg-config --define-prefix` gives a `.pc` file in
/// `<prefix>/lib*/pkgconfig/` or `<prefix>/share/pkgconfig/`, when that
/// tree holds an NCCL (`include/nccl.h` with `lib/` or `lib64/`).
fn defined_prefix(file: &Path) -> Option<PathBuf> {
    let pkgconfig = file.parent()?;
    if super::file_name_str(pkgconfig) != Some("pkgconfig") {
        return None;
    }
    let tree = pkgconfig.parent()?.parent()?;
    let incs = [tree.join("include")];
    let libs = [tree.join("lib"), tree.join("lib64")];
    let regular = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file());
    let has_header = regular(&incs[0].join("nccl.h"));
    (has_header && holds_nccl(&[], &libs)).then(|| tree.to_path_buf())
}

#[cfg(test)]
mod tests;
