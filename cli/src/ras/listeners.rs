//! Why nothing answered: the processes on this host that have NCCL loaded
//! (`libnccl.so*` in `/proc/PID/maps`), and what their environment says of
//! NCCL's RAS service (`NCCL_RAS_ENABLE`, `NCCL_RAS_ADDR`). Every read is
//! bounded, and at most [`MAX_PROCS`] processes are looked at.

use std::path::Path;

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
    let has_nccl = maps.split(|&b| b == b'\n').any(|l| {
        let path = l.rsplit(|&b| b == b' ').next().unwrap_or(b"");
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(b"");
        name.starts_with(b"libnccl.so")
    });
    if !has_nccl {
        return None;
    }
    let name = read(pid, "comm", 256).unwrap_or_default();
    let name = String::from_utf8_lossy(&name).trim_end().to_string();
    let env = read(pid, "environ", 4 << 20).unwrap_or_default();
    let var = |key: &str| {
        env.split(|&b| b == 0)
            .rev()
            .find_map(|kv| kv.strip_prefix(key.as_bytes())?.strip_prefix(b"="))
            .map(|v| nccl_rendezvous::untrusted::shown(&String::from_utf8_lossy(v), 200))
    };
    Some(NcclProcess {
        pid,
        name: nccl_rendezvous::untrusted::shown(&name, 64),
        ras_enable: var("NCCL_RAS_ENABLE"),
        ras_addr: var("NCCL_RAS_ADDR"),
    })
}

/// The flags that ask at `addr` (`HOST:PORT`, as `NCCL_RAS_ADDR` gives it).
fn flags_for(addr: &str) -> String {
    match ras::split_addr(addr) {
        (h, Some(p)) => format!("--host {h} --port {p}"),
        (h, None) => format!("--host {h}"),
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
    let named = |p: &NcclProcess| format!("process {} ({})", p.pid, p.name);
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
        return format!(
            "nothing answers at {addr}, though {} has NCCL loaded: its NCCL may be older than {} \
             (no RAS service), or it has made no communicator yet ({why})",
            named(p),
            ras::first_release()
        );
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
    fn why_nothing_answered_names_the_likeliest_cause() {
        let p = |enable: Option<&str>, addr: Option<&str>| NcclProcess {
            pid: 42,
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
        // Turned off wins over moved.
        let both = [p(None, Some("10.0.0.1:9")), p(Some("0"), None)];
        assert!(why_silent(at, &both, None, why).contains("NCCL_RAS_ENABLE=0"));
    }
}
