//! Facts about the host that `doctor` judges: the driver, network
//! interfaces (`net`), `/dev/shm`, RDMA libraries, MPI, reverse name
//! lookups. Gathered from the machine, or read from a JSON file so tests
//! can fix them.

use std::ffi::CStr;
use std::path::Path;

use serde_json::{json, Value};

pub use super::rdma::RdmaHw;

/// What `libcuda` said: read by nccl-smoke, the one place that loads the
/// driver.
pub use nccl_smoke::driver::Driver;

pub use super::net::{IfAddr, Iface};

/// Everything doctor needs from the host.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    pub driver: Driver,
    pub interfaces: Vec<Iface>,
    pub shm_bytes: Option<u64>,
    /// RDMA libraries: name, and the error when it does not load.
    pub rdma: Vec<(String, Option<String>)>,
    /// `mpirun` / `mpiexec` found on PATH.
    pub mpi: Vec<String>,
    /// Adapters, device nodes, locked memory, GPUDirect RDMA, plugins.
    pub rdma_hw: RdmaHw,
    /// Reverse name lookups of this host's addresses, timed.
    pub lookups: Vec<Lookup>,
}

/// A reverse name lookup of one of this host's addresses (what torch's
/// store does for every client it accepts), timed.
#[derive(Debug, Clone, PartialEq)]
pub struct Lookup {
    pub ip: String,
    /// How long it took, or how long it was waited for.
    pub seconds: f64,
    /// The name, when there is one.
    pub name: Option<String>,
    /// Why there is none (no name is not an error: `None` and no name).
    pub error: Option<String>,
}

/// How long doctor waits for the reverse lookups, all together: past the
/// resolver's usual 5 s timeout, so that one dropped query shows.
const LOOKUP_WAIT: std::time::Duration = std::time::Duration::from_secs(6);

/// The most addresses looked up.
const MAX_LOOKUPS: usize = 8;

/// Looks up the name of each address (not link-local) of the interfaces
/// that are up, at most [`MAX_LOOKUPS`], at once, each on a thread of its
/// own, for at most [`LOOKUP_WAIT`]: a lookup still waiting then is
/// recorded as such (its thread is left to end with the process).
fn lookups(ifaces: &[Iface]) -> Vec<Lookup> {
    let mut ips: Vec<std::net::IpAddr> = Vec::new();
    for i in ifaces.iter().filter(|i| i.running) {
        for a in i.addrs.iter().filter(|a| !a.link_local) {
            if let Ok(ip) = a.ip.parse() {
                if ips.len() < MAX_LOOKUPS && !ips.contains(&ip) {
                    ips.push(ip);
                }
            }
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let start = std::time::Instant::now();
    for (k, ip) in ips.iter().enumerate() {
        let (tx, ip) = (tx.clone(), *ip);
        let _ = std::thread::Builder::new()
            .name("nccl-find-lookup".into())
            .spawn(move || {
                let t = std::time::Instant::now();
                let got = reverse_lookup(ip);
                let _ = tx.send((k, t.elapsed().as_secs_f64(), got));
            });
    }
    drop(tx);
    let mut out: Vec<Lookup> = ips
        .iter()
        .map(|ip| Lookup {
            ip: ip.to_string(),
            seconds: LOOKUP_WAIT.as_secs_f64(),
            name: None,
            error: Some(format!("no answer within {} s", LOOKUP_WAIT.as_secs())),
        })
        .collect();
    while let Some(left) = LOOKUP_WAIT.checked_sub(start.elapsed()) {
        let Ok((k, seconds, got)) = rx.recv_timeout(left) else {
            break;
        };
        let l = &mut out[k];
        l.seconds = seconds;
        (l.name, l.error) = match got {
            Ok(name) => (name, None),
            Err(e) => (None, Some(e)),
        };
    }
    out
}

/// `getnameinfo` with `NI_NAMEREQD`: the name, `None` where the resolver
/// says there is none.
fn reverse_lookup(ip: std::net::IpAddr) -> Result<Option<String>, String> {
    let (ss, len) = sockaddr_of(ip);
    let mut host = [0 as libc::c_char; 1025];
    // SAFETY: `ss` is a sockaddr of `len` bytes we built; `host` is a buffer
    // of the length passed; no service buffer is asked for.
    let rc = unsafe {
        libc::getnameinfo(
            &ss as *const libc::sockaddr_storage as *const libc::sockaddr,
            len,
            host.as_mut_ptr(),
            host.len() as libc::socklen_t,
            std::ptr::null_mut(),
            0,
            libc::NI_NAMEREQD,
        )
    };
    match rc {
        0 => {
            // SAFETY: getnameinfo wrote a NUL-terminated name into `host`.
            let name = unsafe { CStr::from_ptr(host.as_ptr()) };
            Ok(Some(name.to_string_lossy().into_owned()))
        }
        libc::EAI_NONAME => Ok(None),
        e => {
            // SAFETY: gai_strerror returns a static NUL-terminated string.
            let why = unsafe { CStr::from_ptr(libc::gai_strerror(e)) };
            Err(why.to_string_lossy().into_owned())
        }
    }
}

fn sockaddr_of(ip: std::net::IpAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is a valid value of it.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match ip {
        std::net::IpAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from(v4).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and aligned for it.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        std::net::IpAddr::V6(v6) => {
            // SAFETY: an all-zero sockaddr_in6 is a valid value of it.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_addr.s6_addr = v6.octets();
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and aligned for it.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

pub const RDMA_LIBS: [&str; 3] = ["libibverbs.so.1", "libmlx5.so.1", "librdmacm.so.1"];

/// Whether each RDMA library NCCL loads for InfiniBand and RoCE loads
/// here: its name, and the error where it does not.
pub fn rdma_libraries() -> Vec<(String, Option<String>)> {
    RDMA_LIBS
        .iter()
        .map(|l| (l.to_string(), loadable(l).err()))
        .collect()
}

impl Facts {
    /// Reads the machine; `plugins_named`: the values of the settings
    /// that name plugins, whose files are looked for too.
    pub fn gather(plugins_named: &[String]) -> Facts {
        let interfaces = super::net::interfaces();
        Facts {
            driver: Driver::probe(),
            lookups: lookups(&interfaces),
            interfaces,
            shm_bytes: shm_size(Path::new("/dev/shm")),
            rdma: rdma_libraries(),
            mpi: mpi(),
            rdma_hw: RdmaHw::gather(Path::new("/"), plugins_named),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "driver": {
                "libcuda": self.driver.libcuda,
                "version": self.driver.version,
                "gpus": self.driver.gpus,
                "error": self.driver.error,
            },
            "interfaces": self.interfaces.iter().map(|i| json!({
                "name": i.name,
                "running": i.running,
                "addrs": i.addrs.iter().map(|a| json!({
                    "ip": a.ip, "prefix": a.prefix, "v6": a.v6, "link_local": a.link_local, "routed": a.routed,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "shm_bytes": self.shm_bytes,
            "rdma": self.rdma.iter().map(|(l, e)| json!({"lib": l, "error": e})).collect::<Vec<_>>(),
            "mpi": self.mpi,
            "rdma_hardware": self.rdma_hw.to_json(),
            "lookups": self.lookups.iter().map(|l| json!({
                "ip": l.ip, "seconds": l.seconds, "name": l.name, "error": l.error,
            })).collect::<Vec<_>>(),
        })
    }

    /// Reads facts written by `to_json` (missing keys read as empty).
    pub fn from_json(v: &Value) -> Result<Facts, String> {
        let s = |v: &Value| v.as_str().map(String::from);
        let d = &v["driver"];
        let mut interfaces = Vec::new();
        for i in v["interfaces"].as_array().into_iter().flatten() {
            let mut addrs = Vec::new();
            for a in i["addrs"].as_array().into_iter().flatten() {
                addrs.push(IfAddr {
                    ip: s(&a["ip"]).ok_or("an address without \"ip\"")?,
                    prefix: a["prefix"].as_u64().unwrap_or(0) as u8,
                    v6: a["v6"].as_bool().unwrap_or(false),
                    link_local: a["link_local"].as_bool().unwrap_or(false),
                    routed: a["routed"].as_bool().unwrap_or(false),
                });
            }
            interfaces.push(Iface {
                name: s(&i["name"]).ok_or("an interface without \"name\"")?,
                // Facts files from before this key: running.
                running: i["running"].as_bool().unwrap_or(true),
                addrs,
            });
        }
        Ok(Facts {
            driver: Driver {
                libcuda: s(&d["libcuda"]),
                version: d["version"].as_i64().map(|x| x as i32),
                gpus: d["gpus"].as_i64().map(|x| x as i32),
                error: s(&d["error"]),
            },
            interfaces,
            shm_bytes: v["shm_bytes"].as_u64(),
            rdma: v["rdma"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| (s(&r["lib"]).unwrap_or_default(), s(&r["error"])))
                .collect(),
            mpi: v["mpi"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(s)
                .collect(),
            rdma_hw: RdmaHw::from_json(&v["rdma_hardware"]),
            lookups: v["lookups"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| Lookup {
                    ip: s(&l["ip"]).unwrap_or_default(),
                    seconds: l["seconds"].as_f64().unwrap_or(0.0),
                    name: s(&l["name"]),
                    error: s(&l["error"]),
                })
                .collect(),
        })
    }
}

fn loadable(name: &str) -> Result<libloading::Library, String> {
    // SAFETY: loading a system library runs its initialisers; these are the
    // driver's and rdma-core's own libraries, loaded the way NCCL loads them.
    unsafe { libloading::Library::new(name) }.map_err(|e| e.to_string())
}

fn shm_size(p: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs writes into a zeroed struct we own.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut st) == 0).then(|| st.f_blocks as u64 * st.f_frsize as u64)
    }
}

fn mpi() -> Vec<String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut out = Vec::new();
    for dir in std::env::split_paths(&path) {
        for exe in ["mpirun", "mpiexec"] {
            let p = dir.join(exe);
            if p.is_file() && !out.contains(&p.display().to_string()) {
                out.push(p.display().to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(ip: &str, link_local: bool) -> IfAddr {
        IfAddr {
            ip: ip.into(),
            prefix: 8,
            v6: ip.contains(':'),
            link_local,
            routed: true,
        }
    }

    /// The real resolver, on the one address every machine names
    /// (/etc/hosts): a name, no error, well within the wait. Link-local
    /// addresses and interfaces that are down are not looked up.
    #[test]
    fn this_hosts_loopback_is_looked_up_and_timed() {
        let ifaces = [
            Iface {
                name: "lo".into(),
                running: true,
                addrs: vec![addr("127.0.0.1", false), addr("fe80::1", true)],
            },
            Iface {
                name: "eth9".into(),
                running: false,
                addrs: vec![addr("10.9.9.9", false)],
            },
        ];
        let got = lookups(&ifaces);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((got[0].ip.as_str(), &got[0].error), ("127.0.0.1", &None));
        assert!(
            got[0].name.as_deref().is_some_and(|n| !n.is_empty()),
            "{got:?}"
        );
        assert!(got[0].seconds < LOOKUP_WAIT.as_secs_f64(), "{got:?}");
    }
}
