//! The plugins NCCL loads (`src/plugin/plugin_open.cc`): one family per
//! kind, each a library `libnccl-<family>.so` on the loader's path, or the
//! one `NCCL_<FAMILY>_PLUGIN` names; the families a release has, by the
//! table of releases ([`Change`]); and how a name becomes the file NCCL
//! opens.

use nccl_find::explain::Change;
use nccl_find::Version;

use crate::facts::rdma::Plugin;

/// The plugin families, in NCCL's order, each with the change that
/// brought it (`None`: the network plugin, older than every release
/// nccl-find reads).
pub const FAMILIES: [(&str, Option<Change>); 6] = [
    ("net", None),
    ("gin", Some(Change::GinPlugins)),
    ("rma", Some(Change::RmaPlugins)),
    ("tuner", Some(Change::TunerPlugins)),
    ("profiler", Some(Change::ProfilerPlugins)),
    ("env", Some(Change::EnvPlugins)),
];

/// The variable that names a family's plugin: `NCCL_TUNER_PLUGIN`.
pub fn variable(family: &str) -> String {
    format!("NCCL_{}_PLUGIN", family.to_ascii_uppercase())
}

/// Whether NCCL `release` loads plugins of `family` (an unknown release
/// is taken as the newest).
pub fn loads(family: &str, release: Option<&Version>) -> bool {
    match FAMILIES.iter().find(|(f, _)| *f == family) {
        Some((_, Some(c))) => c.in_release(release),
        Some((_, None)) => true,
        None => false,
    }
}

/// The names `NCCL_NET_PLUGIN=value` gives, tried in turn: a
/// comma-separated list from 2.27.3, one name before.
pub fn net_names<'a>(value: &'a str, release: Option<&Version>) -> Vec<&'a str> {
    match Change::NetPluginList.in_release(release) {
        true => value
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect(),
        false => vec![value.trim()],
    }
}

/// The file name of a plugin (its last path component).
pub fn file_name(p: &Plugin) -> &str {
    p.path.rsplit('/').next().unwrap_or(&p.path)
}

/// The file NCCL opens for one name of a plugin family, by its rule
/// (`openPluginLib`): the name as it is (a path, or a file name the loader
/// searches for); then, for a bare name (no `/`, not `lib….so`),
/// `libnccl-<family>-<name>.so`. Unset: `libnccl-<family>.so`. The names
/// tried, and the plugin found among `plugins`.
pub fn find<'a>(
    plugins: &'a [Plugin],
    family: &str,
    name: Option<&str>,
) -> (Vec<String>, Option<&'a Plugin>) {
    let mut tried = Vec::new();
    match name {
        None => tried.push(format!("libnccl-{family}.so")),
        Some(n) => {
            tried.push(n.to_string());
            let library = n.starts_with("lib") && n.ends_with(".so");
            if !n.contains('/') && !library {
                tried.push(format!("libnccl-{family}-{n}.so"));
            }
        }
    }
    for t in &tried {
        // A path is opened as it is: the file found there (under the
        // root, where there is one).
        let hit = plugins.iter().find(|p| match t.starts_with('/') {
            true => p.path == *t || p.path.ends_with(t.as_str()),
            false => file_name(p) == t,
        });
        if hit.is_some() {
            return (tried, hit);
        }
    }
    (tried, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_names_by_release() {
        let v = |a, b, c| Version::new(a, b, c, "");
        assert!(loads("net", Some(&v(2, 13, 4))));
        assert!(!loads("gin", Some(&v(2, 29, 3))) && loads("gin", Some(&v(2, 29, 7))));
        assert!(!loads("rma", Some(&v(2, 30, 4))) && loads("rma", None));
        assert!(!loads("nosuch", None));
        assert_eq!(net_names("ofi, ib", None), ["ofi", "ib"]);
        assert_eq!(net_names("ofi,ib", Some(&v(2, 26, 6))), ["ofi,ib"]);
        let plugins = [Plugin {
            path: "/usr/lib/libnccl-net-ofi.so".into(),
            version: None,
        }];
        let (tried, hit) = find(&plugins, "net", Some("ofi"));
        assert_eq!(tried, ["ofi", "libnccl-net-ofi.so"]);
        assert!(hit.is_some());
        assert_eq!(find(&plugins, "tuner", None).0, ["libnccl-tuner.so"]);
        assert_eq!(variable("profiler"), "NCCL_PROFILER_PLUGIN");
    }

    /// The plugin variables each cached release's library holds are the
    /// families of [`FAMILIES`] it loads by the table of releases: a
    /// release with a new family, or one a row puts in the wrong release,
    /// turns this red.
    #[test]
    fn each_release_holds_the_variables_of_its_families() {
        for (dir, v) in crate::rules::cached_releases() {
            let lib = dir.join("lib/libnccl.so.2");
            let names = nccl_find::internal::rodata_names(&lib, "NCCL_").unwrap();
            let held: Vec<String> = names
                .iter()
                .filter_map(|n| n.strip_prefix("NCCL_")?.strip_suffix("_PLUGIN"))
                .filter(|f| f.chars().all(|c| c.is_ascii_uppercase()))
                .map(|f| f.to_ascii_lowercase())
                .collect();
            for f in &held {
                assert!(
                    FAMILIES.iter().any(|(g, _)| g == f),
                    "NCCL {v} has a plugin family {f}"
                );
            }
            for (f, _) in FAMILIES {
                assert_eq!(
                    held.iter().any(|h| h == f),
                    loads(f, Some(&v)),
                    "NCCL {v}: {f}"
                );
            }
        }
    }
}
