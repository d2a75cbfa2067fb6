//! What the machine has for RDMA, read as NCCL would find it, from files
//! an ordinary user can read: the adapters and their ports
//! (`/sys/class/infiniband`), the device nodes (`/dev/infiniband`), the
//! locked-memory limit, whether GPUDirect RDMA's kernel module is loaded
//! (`/proc/modules`), and the network plugins on the loader's path.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// One port of an adapter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Port {
    pub num: u32,
    /// `ACTIVE`, `DOWN`, `INIT`, … (the word of `state`, `4: ACTIVE`).
    pub state: String,
    /// `LinkUp`, `Disabled`, `Polling`, … (the word of `phys_state`).
    pub phys_state: String,
    /// `100 Gb/sec (4X EDR)`.
    pub rate: String,
    /// `InfiniBand`, or `Ethernet` (RoCE).
    pub link_layer: String,
    /// The GID indexes in use and their type (`IB/RoCE v1`, `RoCE v2`).
    pub gids: Vec<(u32, String)>,
}

/// One RDMA adapter (`mlx5_0`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Adapter {
    pub name: String,
    pub ports: Vec<Port>,
}

/// A plugin file NCCL could load, of any family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plugin {
    /// The file found (`/usr/lib/libnccl-net.so`).
    pub path: String,
    /// The version in its real file's name (`1.9.1` of
    /// `libnccl-net-ofi.so.1.9.1`), when there is one.
    pub version: Option<String>,
    /// The NCCL plugin interfaces its library exports
    /// (`ncclNetPlugin_v12`), read from its dynamic symbols (never
    /// loaded), at most [`MAX_EXPORTS`].
    pub exports: Vec<String>,
}

/// The most plugin interfaces kept of one library.
const MAX_EXPORTS: usize = 32;

/// The NCCL plugin interfaces a library exports: its dynamic symbols of
/// the form `ncclXxx_vN` (the library is read, never loaded).
fn exports(path: &Path) -> Vec<String> {
    let names = nccl_find::internal::dynamic_symbols(path).unwrap_or_default();
    let interface = |n: &str| {
        n.starts_with("nccl")
            && n.rsplit_once("_v")
                .is_some_and(|(_, v)| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
    };
    names
        .into_iter()
        .filter(|n| interface(n))
        .take(MAX_EXPORTS)
        .collect()
}

/// The RDMA facts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RdmaHw {
    pub adapters: Vec<Adapter>,
    /// `/dev/infiniband/uverbs*`.
    pub uverbs: Vec<String>,
    /// `RLIMIT_MEMLOCK`'s soft limit in bytes; `None` when unlimited.
    pub memlock: Option<u64>,
    /// Whether the limit was read at all.
    pub memlock_known: bool,
    /// `nvidia_peermem` or `nv_peer_mem`, when loaded.
    pub peermem: Option<String>,
    /// `libnccl-<family>*.so*` files on the loader's path, every family, in
    /// its search order.
    pub plugins: Vec<Plugin>,
}

/// The most of a sysfs or proc file that is read.
const SMALL: u64 = 64 << 10;
/// The most adapters, ports per adapter and GIDs per port that are read.
const MAX_ENTRIES: usize = 256;

fn small(p: &Path) -> Option<String> {
    let f = std::fs::File::open(p).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut s = String::new();
    f.take(SMALL).read_to_string(&mut s).ok()?;
    Some(s.trim().to_string())
}

/// The names in `dir`, sorted, at most [`MAX_ENTRIES`].
fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .take(MAX_ENTRIES)
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

/// `4: ACTIVE` → `ACTIVE`.
fn word(s: &str) -> String {
    s.split_once(':').map_or(s, |(_, w)| w).trim().to_string()
}

/// The RDMA adapters under `root` (`/`, or a test's tree) and their ports.
pub fn adapters(root: &Path) -> Vec<Adapter> {
    let ib = root.join("sys/class/infiniband");
    let mut adapters = Vec::new();
    for name in names(&ib) {
        let mut ports = Vec::new();
        let pdir = ib.join(&name).join("ports");
        let mut nums: Vec<u32> = names(&pdir).iter().filter_map(|n| n.parse().ok()).collect();
        nums.sort_unstable();
        for num in nums {
            let p = pdir.join(num.to_string());
            ports.push(Port {
                num,
                state: word(&small(&p.join("state")).unwrap_or_default()),
                phys_state: word(&small(&p.join("phys_state")).unwrap_or_default()),
                rate: small(&p.join("rate")).unwrap_or_default(),
                link_layer: small(&p.join("link_layer")).unwrap_or_default(),
                gids: gids(&p),
            });
        }
        adapters.push(Adapter { name, ports });
    }
    adapters
}

impl RdmaHw {
    /// Reads the machine under `root` (`/`, or a test's tree); `named`:
    /// the values of the settings that name plugins (`NCCL_NET_PLUGIN`, …),
    /// whose files are looked for too.
    pub fn gather(root: &Path, named: &[String]) -> RdmaHw {
        let adapters = adapters(root);
        let uverbs = names(&root.join("dev/infiniband"))
            .into_iter()
            .filter(|n| n.starts_with("uverbs"))
            .collect();
        let (memlock_known, memlock) = memlock();
        RdmaHw {
            adapters,
            uverbs,
            memlock,
            memlock_known,
            peermem: peermem(&root.join("proc/modules")),
            plugins: plugins(root, named),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "adapters": self.adapters.iter().map(|a| json!({
                "name": a.name,
                "ports": a.ports.iter().map(|p| json!({
                    "port": p.num, "state": p.state, "phys_state": p.phys_state, "rate": p.rate,
                    "link_layer": p.link_layer,
                    "gids": p.gids.iter().map(|(i, t)| json!({"index": i, "type": t})).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "uverbs": self.uverbs,
            "memlock": match (self.memlock_known, self.memlock) {
                (false, _) => Value::Null,
                (true, None) => json!("unlimited"),
                (true, Some(b)) => json!(b),
            },
            "peermem": self.peermem,
            "plugins": self.plugins.iter().map(|p| json!({"path": p.path, "version": p.version, "exports": p.exports})).collect::<Vec<_>>(),
        })
    }

    /// Reads what `to_json` writes (missing keys read as empty).
    pub fn from_json(v: &Value) -> RdmaHw {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let arr = |v: &Value| v.as_array().cloned().unwrap_or_default();
        let adapters = arr(&v["adapters"])
            .iter()
            .map(|a| Adapter {
                name: s(&a["name"]),
                ports: arr(&a["ports"])
                    .iter()
                    .map(|p| Port {
                        num: p["port"].as_u64().unwrap_or(1) as u32,
                        state: s(&p["state"]),
                        phys_state: s(&p["phys_state"]),
                        rate: s(&p["rate"]),
                        link_layer: s(&p["link_layer"]),
                        gids: arr(&p["gids"])
                            .iter()
                            .map(|g| (g["index"].as_u64().unwrap_or(0) as u32, s(&g["type"])))
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        let (memlock_known, memlock) = match &v["memlock"] {
            Value::String(x) if x == "unlimited" => (true, None),
            Value::Number(n) => (true, n.as_u64()),
            _ => (false, None),
        };
        RdmaHw {
            adapters,
            uverbs: arr(&v["uverbs"]).iter().map(s).collect(),
            memlock,
            memlock_known,
            peermem: v["peermem"].as_str().map(String::from),
            // `net_plugins`: facts written before every family was read.
            plugins: arr(if v.get("plugins").is_some() {
                &v["plugins"]
            } else {
                &v["net_plugins"]
            })
            .iter()
            .map(|p| Plugin {
                path: s(&p["path"]),
                version: p["version"].as_str().map(String::from),
                exports: arr(&p["exports"])
                    .iter()
                    .filter_map(|e| e.as_str().map(String::from))
                    .take(MAX_EXPORTS)
                    .collect(),
            })
            .collect(),
        }
    }
}

/// The GIDs a port has in use (not all zero), with their type.
fn gids(port: &Path) -> Vec<(u32, String)> {
    let mut idx: Vec<u32> = names(&port.join("gids"))
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    idx.sort_unstable();
    let mut out = Vec::new();
    for i in idx {
        let gid = small(&port.join("gids").join(i.to_string())).unwrap_or_default();
        if gid.is_empty() || gid.chars().all(|c| c == '0' || c == ':') {
            continue;
        }
        let kind = small(&port.join("gid_attrs/types").join(i.to_string())).unwrap_or_default();
        out.push((i, kind));
    }
    out
}

/// `RLIMIT_MEMLOCK`'s soft limit: (read, `None` for unlimited).
fn memlock() -> (bool, Option<u64>) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return (false, None);
    }
    if r.rlim_cur == libc::RLIM_INFINITY {
        (true, None)
    } else {
        (true, Some(r.rlim_cur))
    }
}

/// The GPUDirect RDMA module that is loaded, from `/proc/modules`.
fn peermem(modules: &Path) -> Option<String> {
    let text = small(modules)?;
    for line in text.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if name == "nvidia_peermem" || name == "nv_peer_mem" {
            return Some(name.to_string());
        }
    }
    None
}

/// Whether a file name is a plugin's: `libnccl-<family>` (a lowercase
/// word), then `.` or `-`, and `.so`: of any family, known or new.
fn is_plugin(n: &str) -> bool {
    n.contains(".so") && family_of(n).is_some()
}

/// The plugin family a file name says: `net` of `libnccl-net-ofi.so.1.9.1`
/// (`libnccl-`, a lowercase word, then `.` or `-`); `None` for a name that
/// is no plugin's.
pub fn family_of(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("libnccl-")?;
    let n = rest.chars().take_while(|c| c.is_ascii_lowercase()).count();
    (n > 0 && rest[n..].starts_with(['.', '-'])).then(|| &rest[..n])
}

/// The file names the plugin settings give (bare names, which NCCL opens
/// through the loader's path as they are: `libfoo.so`, `ofi`), and the
/// paths (a name with a `/`, opened as it is).
fn named_plugins(values: &[String]) -> (Vec<String>, Vec<String>) {
    let (mut names, mut paths) = (Vec::new(), Vec::new());
    for value in values {
        for n in value.split(',') {
            let n = n.trim();
            if n.is_empty() || n == "none" || n.eq_ignore_ascii_case("STATIC_PLUGIN") {
                continue;
            }
            let list = if n.contains('/') {
                &mut paths
            } else {
                &mut names
            };
            if list.len() < MAX_ENTRIES && !list.iter().any(|x| x == n) {
                list.push(n.to_string());
            }
        }
    }
    (names, paths)
}

/// The plugin files in `dir` (and the files named `named`), sorted: every
/// entry is read (a library directory holds thousands), and at most
/// [`MAX_ENTRIES`] that match kept.
fn plugin_names(dir: &Path, named: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if let Ok(n) = e.file_name().into_string() {
                if (is_plugin(&n) || named.contains(&n)) && out.len() < MAX_ENTRIES {
                    out.push(n);
                }
            }
        }
    }
    out.sort();
    out
}

/// Every plugin file (`libnccl-<family>*.so*`, each family, and the files
/// the plugin settings `values` name) on the loader's path, in its order:
/// `LD_LIBRARY_PATH`, the loader cache, the default directories; and the
/// files the plugin settings name by path.
fn plugins(root: &Path, values: &[String]) -> Vec<Plugin> {
    let (named, paths) = named_plugins(values);
    let under = |d: &Path| root.join(d.strip_prefix("/").unwrap_or(d));
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(l) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(
            std::env::split_paths(&l)
                .filter(|d| d.is_absolute())
                .map(|d| under(&d)),
        );
    }
    let mut out: Vec<Plugin> = Vec::new();
    let push = |path: PathBuf, out: &mut Vec<Plugin>| {
        let shown = path.display().to_string();
        if out.iter().any(|p| p.path == shown) || out.len() >= MAX_ENTRIES {
            return;
        }
        let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        let version = real
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split_once(".so."))
            .map(|(_, v)| v.to_string())
            .filter(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'));
        out.push(Plugin {
            path: shown,
            version,
            exports: exports(&real),
        });
    };
    for p in &paths {
        let at = under(Path::new(p));
        if std::fs::metadata(&at).is_ok_and(|m| m.is_file()) {
            push(at, &mut out);
        }
    }
    for d in &dirs {
        for n in plugin_names(d, &named) {
            push(d.join(n), &mut out);
        }
    }
    if let Some(cache) = small_bytes(&under(Path::new("/etc/ld.so.cache"))) {
        let mut facts = nccl_find::internal::LoaderFacts::default();
        facts.read_ld_cache(&cache);
        for (name, path) in facts.cache {
            if is_plugin(&name) || named.contains(&name) {
                push(under(&path), &mut out);
            }
        }
    }
    for d in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ] {
        let d = under(Path::new(d));
        for n in plugin_names(&d, &named) {
            push(d.join(n), &mut out);
        }
    }
    out
}

fn small_bytes(p: &Path) -> Option<Vec<u8>> {
    let f = std::fs::File::open(p).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut b = Vec::new();
    f.take(64 << 20).read_to_end(&mut b).ok()?;
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// Every plugin family, in a library directory of more entries than
    /// any cap: the plugin that comes late in the listing is found. A
    /// family NCCL has not got (`envy`) is a file all the same: which
    /// families NCCL loads is `rules::plugins`' to say.
    #[test]
    fn plugins_of_every_family_in_a_large_directory() {
        let root = std::env::temp_dir().join(format!("nccl-find-plugins-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let lib = root.join("usr/lib/x86_64-linux-gnu");
        std::fs::create_dir_all(&lib).unwrap();
        for i in 0..3000 {
            std::fs::write(lib.join(format!("liba{i:04}.so.1")), "").unwrap();
        }
        for n in [
            "libnccl-net-ofi.so.1.9.1",
            "libnccl-tuner.so",
            "libnccl-envy.so",
            "libnccl-profiler-x.so",
            "libnccl-rma.so.2",
        ] {
            std::fs::write(lib.join(n), "").unwrap();
        }
        let got: Vec<(String, Option<String>)> = plugins(&root, &[])
            .into_iter()
            .map(|p| (p.path.rsplit('/').next().unwrap().to_string(), p.version))
            .collect();
        assert_eq!(
            got,
            [
                ("libnccl-envy.so".to_string(), None),
                (
                    "libnccl-net-ofi.so.1.9.1".to_string(),
                    Some("1.9.1".to_string())
                ),
                ("libnccl-profiler-x.so".into(), None),
                ("libnccl-rma.so.2".into(), Some("2".into())),
                ("libnccl-tuner.so".into(), None),
            ]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn reads_adapters_ports_gids_devices_and_modules_as_sysfs_has_them() {
        let root = std::env::temp_dir().join(format!("nccl-find-rdma-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let p = "sys/class/infiniband/mlx5_0/ports/1";
        put(&root, &format!("{p}/state"), "4: ACTIVE\n");
        put(&root, &format!("{p}/phys_state"), "5: LinkUp\n");
        put(&root, &format!("{p}/rate"), "100 Gb/sec (4X EDR)\n");
        put(&root, &format!("{p}/link_layer"), "Ethernet\n");
        put(
            &root,
            &format!("{p}/gids/0"),
            "fe80:0000:0000:0000:0000:0000:0000:0001\n",
        );
        put(
            &root,
            &format!("{p}/gids/1"),
            "0000:0000:0000:0000:0000:ffff:0a00:0005\n",
        );
        put(
            &root,
            &format!("{p}/gids/2"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        );
        put(&root, &format!("{p}/gid_attrs/types/0"), "IB/RoCE v1\n");
        put(&root, &format!("{p}/gid_attrs/types/1"), "RoCE v2\n");
        put(
            &root,
            "sys/class/infiniband/mlx5_1/ports/2/state",
            "1: DOWN\n",
        );
        put(&root, "dev/infiniband/uverbs0", "");
        put(&root, "dev/infiniband/rdma_cm", "");
        put(
            &root,
            "proc/modules",
            "nvidia_uvm 1 0 - Live 0x0\nnvidia_peermem 16384 0 - Live 0x0\n",
        );
        let hw = RdmaHw::gather(&root, &[]);
        assert_eq!(hw.adapters.len(), 2);
        let a = &hw.adapters[0];
        assert_eq!(a.name, "mlx5_0");
        assert_eq!(
            a.ports,
            [Port {
                num: 1,
                state: "ACTIVE".into(),
                phys_state: "LinkUp".into(),
                rate: "100 Gb/sec (4X EDR)".into(),
                link_layer: "Ethernet".into(),
                // The all-zero GID 2 is not in use.
                gids: vec![(0, "IB/RoCE v1".into()), (1, "RoCE v2".into())],
            }]
        );
        assert_eq!(hw.adapters[1].ports[0].num, 2);
        assert_eq!(hw.adapters[1].ports[0].state, "DOWN");
        assert_eq!(hw.uverbs, ["uverbs0"]);
        assert_eq!(hw.peermem.as_deref(), Some("nvidia_peermem"));
        // And back through JSON unchanged.
        assert_eq!(RdmaHw::from_json(&hw.to_json()), hw);
        // A bare machine: nothing.
        let bare = RdmaHw::gather(&root.join("nothing-here"), &[]);
        assert!(bare.adapters.is_empty() && bare.uverbs.is_empty() && bare.peermem.is_none());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
