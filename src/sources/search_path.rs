//! A source: the linker's and loader's search paths: `LIBRARY_PATH`, then
//! `LD_LIBRARY_PATH`, then the loader cache (`/etc/ld.so.cache`, read as a
//! file; `ldconfig` is not run). The header is looked for next to each
//! library directory: `<dir>/../include`, and `<dir>/../../include` for a
//! multiarch dir.

use std::path::{Path, PathBuf};

use super::{file_name_str, Ctx, Origin, Site, SourceKind};

/// The sites of this source.
pub(crate) fn sites(ctx: &Ctx) -> Vec<Site> {
    let mut dirs: Vec<(PathBuf, String)> = Vec::new();
    for list in [ctx.var_list("LIBRARY_PATH"), ctx.ld_library_path()] {
        if let Some((var, list)) = list {
            for dir in list {
                dirs.push((dir, var.name.clone()));
            }
        }
    }
    let cache = ctx.path("/etc/ld.so.cache");
    if cache.exists() {
        let mut entries: usize = 0;
        for (name, _) in ctx.ld_cache() {
            if name.starts_with("libnccl") {
                entries += 1;
            }
        }
        ctx.looked(
            SourceKind::SearchPath,
            &cache,
            format!("{entries} libnccl entries"),
        );
        for (name, path) in ctx.ld_cache() {
            if !name.starts_with("libnccl") {
                continue;
            }
            if let Some(dir) = Path::new(path).parent() {
                dirs.push((ctx.path(dir), "loader cache".to_string()));
            }
        }
    }
    let mut listed = Vec::with_capacity(dirs.len());
    for (dir, _) in &dirs {
        listed.push(dir.clone());
    }
    let first = crate::context::first_occurrences(&listed);
    let mut out = Vec::new();
    for ((dir, why), first) in dirs.into_iter().zip(first) {
        if !first {
            continue;
        }
        if !dir.is_dir() {
            ctx.looked(
                SourceKind::SearchPath,
                &dir,
                format!("no such directory ({why})"),
            );
            continue;
        }
        out.push(Site::new(
            Origin {
                source: SourceKind::SearchPath,
                variable: None,
                package: None,
                detail: format!("{} ({why})", ctx.show(&dir)),
            },
            includes_beside(&dir),
            vec![dir],
        ));
    }
    out
}

/// Where the header of a library directory would be: `<dir>/../include`,
/// and `<dir>/../../include` for a multiarch dir.
fn includes_beside(dir: &Path) -> Vec<PathBuf> {
    let mut includes = Vec::new();
    if let Some(parent) = dir.parent() {
        includes.push(parent.join("include"));
        let multiarch = match file_name_str(dir) {
            Some(n) => n.contains("-linux-"),
            None => false,
        };
        if multiarch {
            if let Some(grand) = parent.parent() {
                includes.push(grand.join("include"));
            }
        }
    }
    includes
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::ldcache::parse_ld_cache;

    /// Writes a loader cache in glibc's new format, for tests.
    pub(crate) fn write_ld_cache(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut strings = Vec::new();
        let strings_at = 48 + entries.len() * 24;
        let mut offs = Vec::new();
        for (k, v) in entries {
            let ko = strings_at + strings.len();
            strings.extend_from_slice(k.as_bytes());
            strings.push(0);
            let vo = strings_at + strings.len();
            strings.extend_from_slice(v.as_bytes());
            strings.push(0);
            offs.push((ko as u32, vo as u32));
        }
        let mut out = Vec::new();
        out.extend_from_slice(crate::ldcache::NEW_MAGIC);
        out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        out.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0u8; 4 + 4 + 12]);
        for (k, v) in offs {
            out.extend_from_slice(&3i32.to_le_bytes());
            out.extend_from_slice(&k.to_le_bytes());
            out.extend_from_slice(&v.to_le_bytes());
            out.extend_from_slice(&[0u8; 12]);
        }
        out.extend_from_slice(&strings);
        out
    }

    #[test]
    fn round_trips_and_survives_truncation() {
        let data = write_ld_cache(&[
            ("libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"),
            ("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"),
        ]);
        let got = parse_ld_cache(&data);
        assert_eq!(
            got[0],
            (
                "libnccl.so.2".into(),
                "/usr/lib/x86_64-linux-gnu/libnccl.so.2".into()
            )
        );
        assert_eq!(got.len(), 2);
        for cut in 0..data.len() {
            assert!(parse_ld_cache(&data[..cut]).len() <= 2);
        }
    }

    #[test]
    fn reads_this_machines_cache_when_there_is_one() {
        // A cache written by glibc's own ldconfig: every one lists libc.
        if let Ok(data) = std::fs::read("/etc/ld.so.cache") {
            let got = parse_ld_cache(&data);
            assert!(got
                .iter()
                .any(|(k, v)| k == "libc.so.6" && v.ends_with("/libc.so.6")));
        }
    }
}
