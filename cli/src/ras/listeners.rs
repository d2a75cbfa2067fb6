//! The processes on this host that have NCCL loaded (`libnccl.so*` in
//! `/proc/PID/maps`): which one serves the RAS address asked, and the
//! release of the `libnccl.so` it maps (read from the file, never run), so
//! that the questions put to it are ones that release survives; and, when
//! nothing answered, what their environment says of NCCL's RAS service
//! (`NCCL_RAS_ENABLE`, `NCCL_RAS_ADDR`). Every read is bounded, and at
//! most [`MAX_PROCS`] processes are looked at.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use nccl_find::Version;

use crate::rules::ras::{self, turned_off};

/// The most processes with NCCL loaded that are looked at.
const MAX_PROCS: usize = 256;

/// A process with NCCL loaded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NcclProcess {
    /// Its process id.
    pub(crate) pid: u32,
    /// Its name (`/proc/PID/comm`), safe to show.
    pub(crate) name: String,
    /// Its `NCCL_RAS_ENABLE`, and its `NCCL_RAS_ADDR`, as set.
    pub(crate) ras_enable: Option<String>,
    pub(crate) ras_addr: Option<String>,
    /// Its owner, where another user's (`None`: this user's, or unknown).
    pub(crate) other_uid: Option<u32>,
    /// The release of the `libnccl.so` it maps, where its file says (the
    /// oldest, where it maps several).
    pub(crate) version: Option<Version>,
}

/// Every process of this host, as far as `/proc` shows it, with a
/// `libnccl.so*` mapped.
pub(crate) fn nccl_processes() -> Vec<NcclProcess> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    let mut pids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let me = std::process::id();
    for pid in pids {
        if out.len() == MAX_PROCS {
            break;
        }
        if pid != me {
            if let Some(p) = look_at(pid) {
                out.push(p);
            }
        }
    }
    out
}

fn read(pid: u32, what: &str, max: u64) -> Option<Vec<u8>> {
    nccl_find::internal::read_bounded(&Path::new("/proc").join(pid.to_string()).join(what), max)
        .ok()
}

fn look_at(pid: u32) -> Option<NcclProcess> {
    let maps = read(pid, "maps", 16 << 20)?;
    let libs = libs_of(pid, &maps);
    if libs.is_empty() {
        return None;
    }
    let name = read(pid, "comm", 256).unwrap_or_default();
    let name = String::from_utf8_lossy(&name).trim_end().to_string();
    let env = super::place::env_of(u64::from(pid)).unwrap_or_default();
    let var = |key: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| nccl_rendezvous::untrusted::shown(v, 200))
    };
    let other_uid = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/{pid}"))
            .ok()
            .map(|m| m.uid())
            .filter(|&u| Some(u) != nccl_rendezvous::fsafe::my_uid())
    };
    let version = libs
        .into_iter()
        .filter_map(|(_, v)| v)
        .min_by_key(|v| (v.major, v.minor, v.patch));
    Some(NcclProcess {
        pid,
        other_uid,
        version,
        name: nccl_rendezvous::untrusted::shown(&name, 64),
        ras_enable: var("NCCL_RAS_ENABLE"),
        ras_addr: var("NCCL_RAS_ADDR"),
    })
}

/// The process that serves a RAS address on this host, and its NCCL.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Server {
    /// Its process id and name (safe to show).
    pub(crate) pid: u32,
    pub(crate) name: String,
    /// Every `libnccl.so` it maps (a job that preloads one NCCL may map
    /// its framework's too), each with the release its `NCCL version`
    /// text says, where it says one.
    pub(crate) libs: Vec<(PathBuf, Option<Version>)>,
}

/// Who serves `peer` (the address a connection reached), as `/proc` shows
/// it: `Ok` with every process that listens there and its NCCL (NCCL
/// binds with `SO_REUSEPORT`, so each process of a job on a node may, and
/// any of them may answer), or `Err` with why the release cannot be known
/// from here (another host, another user's process).
pub(crate) fn serving(peer: SocketAddr) -> Result<Vec<Server>, String> {
    let inodes = listening(peer);
    if inodes.is_empty() {
        return Err(format!(
            "nothing on this host listens at {peer}: the service is on another host, whose NCCL \
             cannot be read from here"
        ));
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Err("/proc cannot be read".into());
    };
    let mut pids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let mut hidden = 0;
    let mut found = Vec::new();
    for pid in pids.into_iter().take(1 << 16) {
        match holds(pid, &inodes) {
            Some(true) if found.len() < MAX_PROCS => found.push(server(pid)?),
            Some(_) => {}
            None => hidden += 1,
        }
    }
    // Sockets that share a port by `SO_REUSEPORT` share an owner too: one
    // found, the hidden processes hold none of them.
    match (found.is_empty(), hidden) {
        (false, _) => Ok(found),
        (true, 0) => Err(format!(
            "the process that listens at {peer} is not to be found in /proc"
        )),
        (true, _) => Err(format!(
            "the process that listens at {peer} belongs to another user: its NCCL cannot be read"
        )),
    }
}

/// The inodes of the listening TCP sockets at `peer` (or at the any
/// address on its port), from `/proc/net/tcp` and `tcp6`.
fn listening(peer: SocketAddr) -> Vec<u64> {
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = nccl_find::internal::read_bounded(Path::new(table), 64 << 20) else {
            continue;
        };
        for l in String::from_utf8_lossy(&text).lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" {
                continue;
            }
            let Some((ip, port)) = f[1].split_once(':') else {
                continue;
            };
            let (Some(ip), Ok(port)) = (proc_ip(ip), u16::from_str_radix(port, 16)) else {
                continue;
            };
            let same = ip == peer.ip()
                || ip.is_unspecified()
                || matches!((ip, peer.ip()), (IpAddr::V6(a), IpAddr::V4(b)) if a.to_ipv4_mapped() == Some(b));
            if port == peer.port() && same {
                if let Ok(i) = f[9].parse() {
                    out.push(i);
                }
            }
        }
    }
    out
}

/// An address as `/proc/net/tcp` writes it: 32-bit words in host order.
fn proc_ip(hex: &str) -> Option<IpAddr> {
    let words: Vec<u32> = (0..hex.len() / 8)
        .map(|i| u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    match bytes.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => None,
    }
}

/// Whether `pid` holds one of `inodes` open; `None`: its files are hidden.
fn holds(pid: u32, inodes: &[u64]) -> Option<bool> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    for fd in fds.flatten().take(1 << 20) {
        let Ok(link) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let link = link.to_string_lossy();
        if let Some(i) = link
            .strip_prefix("socket:[")
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|r| r.parse::<u64>().ok())
        {
            if inodes.contains(&i) {
                return Some(true);
            }
        }
    }
    Some(false)
}

/// The process `pid` and the release of the `libnccl.so` it maps: read
/// through `/proc/PID/root`, as that process sees its files.
fn server(pid: u32) -> Result<Server, String> {
    let maps = read(pid, "maps", 16 << 20).unwrap_or_default();
    let name = read(pid, "comm", 256).unwrap_or_default();
    let name = nccl_rendezvous::untrusted::shown(String::from_utf8_lossy(&name).trim_end(), 64);
    let libs = libs_of(pid, &maps);
    if libs.is_empty() {
        return Err(format!(
            "process {pid} ({name}) listens there, but maps no libnccl.so (an NCCL linked in \
             statically, or none)"
        ));
    }
    Ok(Server { pid, name, libs })
}

/// Every `libnccl.so` (at most 8) that `pid` maps, by its `maps`, each
/// with the release its file says, read through `/proc/PID/root` (as that
/// process sees its files), never run.
fn libs_of(pid: u32, maps: &[u8]) -> Vec<(PathBuf, Option<Version>)> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for l in maps.split(|&b| b == b'\n') {
        let Some(at) = l.iter().position(|&b| b == b'/') else {
            continue;
        };
        let path = &l[at..];
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(b"");
        let path = PathBuf::from(String::from_utf8_lossy(path).into_owned());
        if name.starts_with(b"libnccl.so") && !paths.contains(&path) && paths.len() < 8 {
            paths.push(path);
        }
    }
    paths
        .into_iter()
        .map(|lib| {
            let seen = Path::new("/proc")
                .join(pid.to_string())
                .join("root")
                .join(lib.strip_prefix("/").unwrap_or(&lib));
            let version = nccl_find::internal::read_elf(&seen)
                .ok()
                .and_then(|e| e.version())
                .map(|(v, _)| v);
            (lib, version)
        })
        .collect()
}

/// The flags that ask at `addr` (`HOST:PORT`, as `NCCL_RAS_ADDR` gives
/// it), the host fit to paste into a shell.
fn flags_for(addr: &str) -> String {
    match ras::split_addr(addr) {
        (h, Some(p)) => format!("--host {} --port {p}", crate::style::shell_word(h)),
        (h, None) => format!("--host {}", crate::style::shell_word(h)),
    }
}

/// Why nothing answered at `addr`, in one line that leads with the fix:
/// the job's own environment first (`procs`), then ours (`own_enable`).
pub(crate) fn why_silent(
    addr: &str,
    procs: &[NcclProcess],
    own_enable: Option<&str>,
    why: &str,
) -> String {
    let named = |p: &NcclProcess| match p.other_uid {
        Some(u) => format!("process {} ({}, another user's: uid {u})", p.pid, p.name),
        None => format!("process {} ({})", p.pid, p.name),
    };
    if let Some(p) = procs.iter().find(|p| turned_off(p.ras_enable.as_deref())) {
        return format!(
            "{} runs NCCL with NCCL_RAS_ENABLE=0, so no RAS service answers: start the job without \
             it to ask NCCL about it ({why})",
            named(p)
        );
    }
    if let Some((p, a)) = procs
        .iter()
        .find_map(|p| Some((p, p.ras_addr.as_deref()?)).filter(|(_, a)| *a != addr))
    {
        return format!(
            "{} moved NCCL's RAS service to NCCL_RAS_ADDR={a}: ask there, `nccl-find ras {}` \
             ({why})",
            named(p),
            flags_for(a)
        );
    }
    if let Some(p) = procs.first() {
        let first = ras::first_release();
        let t = |v: &Version| (v.major, v.minor, v.patch);
        return match &p.version {
            Some(v) if t(v) < t(&first) => format!(
                "{} runs NCCL {v}, older than {first}, which has no RAS service to ask: read the \
                 job's logs with `nccl-find explain` instead ({why})",
                named(p)
            ),
            Some(v) => format!(
                "nothing answers at {addr}, though {} runs NCCL {v}, which serves RAS once it has \
                 made a communicator: it has made none yet, or its service is at another \
                 NCCL_RAS_ADDR than this process can see ({why})",
                named(p)
            ),
            None => format!(
                "nothing answers at {addr}, though {} has NCCL loaded: its NCCL may be older than \
                 {first} (no RAS service), or it has made no communicator yet ({why})",
                named(p)
            ),
        };
    }
    if turned_off(own_enable) {
        return format!(
            "NCCL_RAS_ENABLE=0 is set here, and a job started from here has no RAS service: unset \
             it and start the job again ({why})"
        );
    }
    format!(
        "no NCCL job runs on this host (no process has libnccl loaded): run `nccl-find ras` on a \
         node of the job, or ask another with --host and --port ({why})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_tcp_addresses_are_read_in_host_order() {
        assert_eq!(
            proc_ip("0100007F"),
            Some(IpAddr::from([127, 0, 0, 1])),
            "little-endian hosts"
        );
        assert_eq!(
            proc_ip("00000000000000000000000001000000"),
            Some("::1".parse().unwrap())
        );
        assert_eq!(proc_ip("zz"), None);
        assert_eq!(proc_ip("0100007"), None);
    }

    #[test]
    fn the_process_that_serves_a_port_is_found_with_its_library() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        // This test's own process listens, and maps no libnccl.so.
        let e = serving(at).unwrap_err();
        assert!(e.contains("maps no libnccl.so"), "{e}");
        drop(l);
        let e = serving(at).unwrap_err();
        assert!(e.contains("nothing on this host listens"), "{e}");
    }

    #[test]
    fn why_nothing_answered_names_the_likeliest_cause() {
        let p = |enable: Option<&str>, addr: Option<&str>| NcclProcess {
            pid: 42,
            other_uid: None,
            version: None,
            name: "python".into(),
            ras_enable: enable.map(String::from),
            ras_addr: addr.map(String::from),
        };
        let why = "nothing listens at localhost:28028";
        let at = "localhost:28028";
        assert_eq!(
            why_silent(at, &[p(None, None)], None, why),
            "nothing answers at localhost:28028, though process 42 (python) has NCCL loaded: its NCCL \
             may be older than 2.24.3 (no RAS service), or it has made no communicator yet (nothing \
             listens at localhost:28028)"
        );
        // The job's own address, given: not "moved".
        assert!(why_silent(at, &[p(None, Some(at))], None, why).starts_with("nothing answers at"));
        assert_eq!(
            why_silent(at, &[], Some("0"), why),
            "NCCL_RAS_ENABLE=0 is set here, and a job started from here has no RAS service: unset it \
             and start the job again (nothing listens at localhost:28028)"
        );
        assert_eq!(
            why_silent(at, &[], None, why),
            "no NCCL job runs on this host (no process has libnccl loaded): run `nccl-find ras` on a \
             node of the job, or ask another with --host and --port (nothing listens at \
             localhost:28028)"
        );
        // Another user's address is quoted, and said to be theirs.
        let evil = NcclProcess {
            other_uid: Some(1001),
            ..p(None, Some("$(touch /tmp/x)x:28028"))
        };
        assert_eq!(
            why_silent(at, &[evil], None, why),
            "process 42 (python, another user's: uid 1001) moved NCCL's RAS service to \
             NCCL_RAS_ADDR=$(touch /tmp/x)x:28028: ask there, `nccl-find ras --host '$(touch \
             /tmp/x)x' --port 28028` (nothing listens at localhost:28028)"
        );
        // A release read from the file is said, not guessed at.
        let old = NcclProcess {
            version: Some(Version::new(2, 21, 5, "")),
            ..p(None, None)
        };
        assert_eq!(
            why_silent(at, &[old], None, why),
            "process 42 (python) runs NCCL 2.21.5, older than 2.24.3, which has no RAS service to \
             ask: read the job's logs with `nccl-find explain` instead (nothing listens at \
             localhost:28028)"
        );
        let new = NcclProcess {
            version: Some(Version::new(2, 28, 9, "")),
            ..p(None, None)
        };
        assert!(why_silent(at, &[new], None, why).contains(
            "though process 42 (python) runs NCCL 2.28.9, which serves RAS once it has made a \
             communicator: it has made none yet"
        ));
        // Turned off wins over moved.
        let both = [p(None, Some("10.0.0.1:9")), p(Some("0"), None)];
        assert!(why_silent(at, &both, None, why).contains("NCCL_RAS_ENABLE=0"));
    }
}
