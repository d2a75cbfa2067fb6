//! Facts about the host that `doctor` judges: the driver, network
//! interfaces and routes, `/dev/shm`, RDMA libraries, MPI. Gathered from the
//! machine, or read from a JSON file so tests can fix them.

use std::ffi::CStr;
use std::path::Path;

use serde_json::{json, Value};

pub mod rdma;
pub use rdma::RdmaHw;

/// What `libcuda` said: read by nccl-smoke, the one place that loads the
/// driver.
pub use nccl_smoke::driver::Driver;

/// One address of an interface.
#[derive(Debug, Clone, PartialEq)]
pub struct Addr {
    pub ip: String,
    pub prefix: u8,
    pub v6: bool,
    pub link_local: bool,
    /// Whether the routing table has a route through this interface for
    /// this address family.
    pub routed: bool,
}

/// A network interface.
#[derive(Debug, Clone, PartialEq)]
pub struct Iface {
    pub name: String,
    /// Up and attached (`IFF_RUNNING`): NCCL 2.28.3 and later skip the rest.
    pub running: bool,
    pub addrs: Vec<Addr>,
}

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
}

pub const RDMA_LIBS: [&str; 3] = ["libibverbs.so.1", "libmlx5.so.1", "librdmacm.so.1"];

impl Facts {
    /// Reads the machine.
    pub fn gather() -> Facts {
        Facts {
            driver: Driver::probe(),
            interfaces: interfaces(),
            shm_bytes: shm_size(Path::new("/dev/shm")),
            rdma: RDMA_LIBS
                .iter()
                .map(|l| (l.to_string(), loadable(l).err()))
                .collect(),
            mpi: mpi(),
            rdma_hw: RdmaHw::gather(Path::new("/")),
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
                addrs.push(Addr {
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
        })
    }
}

fn loadable(name: &str) -> Result<libloading::Library, String> {
    // SAFETY: loading a system library runs its initialisers; these are the
    // driver's and rdma-core's own libraries, loaded the way NCCL loads them.
    unsafe { libloading::Library::new(name) }.map_err(|e| e.to_string())
}

fn interfaces() -> Vec<Iface> {
    let (r4, r6) = nccl_smoke::net::routed_interfaces();
    let mut out: Vec<Iface> = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a linked list we walk read-only and free once.
    unsafe {
        if libc::getifaddrs(&mut ifap) != 0 {
            return out;
        }
        let mut cur = ifap;
        while !cur.is_null() {
            let ifa = &*cur;
            cur = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
                continue;
            }
            let name = CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned();
            let family = i32::from((*ifa.ifa_addr).sa_family);
            let addr = match family {
                libc::AF_INET => {
                    let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    let ip = std::net::Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr));
                    let prefix = if ifa.ifa_netmask.is_null() {
                        32
                    } else {
                        let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in);
                        u32::from_be(m.sin_addr.s_addr).count_ones() as u8
                    };
                    Addr {
                        ip: ip.to_string(),
                        prefix,
                        v6: false,
                        link_local: ip.is_link_local(),
                        routed: r4.contains(&name),
                    }
                }
                libc::AF_INET6 => {
                    let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    let ip = std::net::Ipv6Addr::from(sa.sin6_addr.s6_addr);
                    let prefix = if ifa.ifa_netmask.is_null() {
                        128
                    } else {
                        let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in6);
                        m.sin6_addr
                            .s6_addr
                            .iter()
                            .map(|b| b.count_ones())
                            .sum::<u32>() as u8
                    };
                    Addr {
                        ip: ip.to_string(),
                        prefix,
                        v6: true,
                        link_local: (ip.segments()[0] & 0xffc0) == 0xfe80,
                        routed: r6.contains(&name),
                    }
                }
                _ => continue,
            };
            let running = ifa.ifa_flags & libc::IFF_RUNNING as libc::c_uint != 0;
            match out.iter_mut().find(|i| i.name == name) {
                Some(i) => i.addrs.push(addr),
                None => out.push(Iface {
                    name,
                    running,
                    addrs: vec![addr],
                }),
            }
        }
        libc::freeifaddrs(ifap);
    }
    out
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
