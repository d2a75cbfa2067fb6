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
/// nccl-find reads) and the symbol NCCL looks up in its library, less the
/// interface's version (`ncclNetPlugin_v12`).
pub const FAMILIES: [(&str, Option<Change>, &str); 6] = [
    ("net", None, "ncclNetPlugin_v"),
    ("gin", Some(Change::GinPlugins), "ncclGinPlugin_v"),
    ("rma", Some(Change::RmaPlugins), "ncclRmaPlugin_v"),
    ("tuner", Some(Change::TunerPlugins), "ncclTunerPlugin_v"),
    ("profiler", Some(Change::ProfilerPlugins), "ncclProfiler_v"),
    ("env", Some(Change::EnvPlugins), "ncclEnvPlugin_v"),
];

/// The newest interface of `family` that plugin `p` exports
/// (`ncclNetPlugin_v12`: 12), by the symbols its library exports.
pub fn interface(p: &Plugin, family: &str) -> Option<u32> {
    let (_, _, symbol) = FAMILIES.iter().find(|(f, _, _)| *f == family)?;
    p.exports
        .iter()
        .filter_map(|e| e.strip_prefix(symbol)?.parse::<u32>().ok())
        .max()
}

/// The variable that names a family's plugin: `NCCL_TUNER_PLUGIN`.
pub fn variable(family: &str) -> String {
    format!("NCCL_{}_PLUGIN", family.to_ascii_uppercase())
}

/// Whether NCCL `release` loads plugins of `family` (an unknown release
/// is taken as the newest).
pub fn loads(family: &str, release: Option<&Version>) -> bool {
    match FAMILIES.iter().find(|(f, _, _)| *f == family) {
        Some((_, Some(c), _)) => c.in_release(release),
        Some((_, None, _)) => true,
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
            exports: vec!["ncclNetPlugin_v8".into(), "ncclNetPlugin_v10".into()],
        }];
        assert_eq!(interface(&plugins[0], "net"), Some(10));
        assert_eq!(interface(&plugins[0], "tuner"), None);
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
                    FAMILIES.iter().any(|(g, _, _)| g == f),
                    "NCCL {v} has a plugin family {f}"
                );
            }
            for (f, _, _) in FAMILIES {
                assert_eq!(
                    held.iter().any(|h| h == f),
                    loads(f, Some(&v)),
                    "NCCL {v}: {f}"
                );
            }
            // And the symbol each family's plugin is looked up by: a
            // release that names it otherwise turns this red.
            let bytes = std::fs::read(&lib).unwrap();
            for (f, _, symbol) in FAMILIES.iter().filter(|(f, _, _)| loads(f, Some(&v))) {
                assert!(
                    bytes.windows(symbol.len()).any(|w| w == symbol.as_bytes()),
                    "NCCL {v} looks up no {symbol}N for its {f} plugins"
                );
            }
        }
    }
}
