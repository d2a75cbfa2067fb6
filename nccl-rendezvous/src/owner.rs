//! Who wrote a rendezvous file, and whether that process is provably gone:
//! rank 0 writes its pid, the pid's start time, the boot, its pid namespace
//! and its host name into the file. A later run may take the file over only
//! when all but the pid are its own and that pid is gone (or is now another
//! process: another start time). Anything else (another host, another boot,
//! another pid namespace, /proc unreadable) cannot be proven dead.

use crate::untrusted::peer_text;

/// How a rendezvous file's writer stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Writer {
    /// Provably gone: the file may be replaced. In words.
    Gone(String),
    /// Still running. In words (its pid and host).
    Alive(String),
    /// Cannot be told. Why.
    Unknown(String),
}

/// The longest host name or other field kept.
const MAX_FIELD: usize = 255;

/// A small file of /proc or /sys, trimmed and bounded; `Err`: its error.
fn read_proc(path: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut s = String::new();
    std::fs::File::open(path)?
        .take(4096)
        .read_to_string(&mut s)?;
    Ok(s.trim().to_string())
}

/// A field for the owner line: one word, no control characters, bounded.
fn word(s: &str) -> String {
    let w: String = s
        .chars()
        .map(|c| {
            if c.is_whitespace() || c.is_control() {
                '?'
            } else {
                c
            }
        })
        .take(MAX_FIELD)
        .collect();
    if w.is_empty() {
        "?".into()
    } else {
        w
    }
}

/// This machine as the owner line names it: boot id, pid namespace, host.
fn here() -> (String, String, String) {
    let boot = read_proc("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let ns = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let host = read_proc("/proc/sys/kernel/hostname").unwrap_or_default();
    (word(&boot), word(&ns), word(&host))
}

/// A process's start time (field 22 of `/proc/<pid>/stat`, in clock ticks
/// after boot). `Ok(None)`: there is no such process, or it has exited (a
/// zombie); `Err`: it cannot be told.
fn start_time(pid: u32) -> Result<Option<u64>, String> {
    let stat = match read_proc(&format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("/proc/{pid}/stat: {e}")),
    };
    // The command name (field 2) is in parentheses and may hold anything:
    // the fields after the last ')' start at field 3.
    let rest = stat
        .rsplit_once(')')
        .map(|x| x.1)
        .ok_or_else(|| format!("/proc/{pid}/stat cannot be read"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    if matches!(f.first(), Some(&"Z") | Some(&"X")) {
        return Ok(None);
    }
    f.get(19)
        .and_then(|v| v.parse().ok())
        .map(Some)
        .ok_or_else(|| format!("/proc/{pid}/stat cannot be read"))
}

/// The owner line for `pid` started at `start`: `pid start boot pidns host`.
pub fn line_for(pid: u32, start: Option<u64>) -> String {
    let (boot, ns, host) = here();
    let start = start.map_or("?".to_string(), |s| s.to_string());
    format!("{pid} {start} {boot} {ns} {host}")
}

/// This process's owner line.
pub fn line() -> String {
    let pid = std::process::id();
    line_for(pid, start_time(pid).ok().flatten())
}

/// How the writer named by an owner `line` (read from a file) stands.
pub fn writer(line: &str) -> Writer {
    let f: Vec<&str> = line.splitn(5, ' ').collect();
    let [pid, start, boot, ns, host] = f[..] else {
        return Writer::Unknown("the file does not name its writer".into());
    };
    let host = peer_text(host);
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return Writer::Unknown(format!(
            "its writer on {host} is named by a pid that cannot be checked"
        ));
    };
    let who = format!("pid {pid} on {host}");
    let (my_boot, my_ns, my_host) = here();
    if my_host != host || my_boot != boot || my_ns != ns {
        return Writer::Unknown(format!(
            "its rank 0 is {who}, {}: whether it still runs cannot be told from here",
            if my_host != host {
                "another host"
            } else if my_boot != boot {
                "this host before a reboot, or another host of the same name"
            } else {
                "in another pid namespace (another container)"
            }
        ));
    }
    match start_time(pid) {
        Ok(Some(s)) if s == start => Writer::Alive(who),
        Ok(_) => Writer::Gone(who),
        Err(e) => Writer::Unknown(format!("its rank 0 is {who}, and {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_is_gone_only_when_provably_so() {
        let me = std::process::id();
        let start = start_time(me).unwrap().unwrap();
        let host = here().2;
        let who = format!("pid {me} on {host}");
        assert_eq!(writer(&line()), Writer::Alive(who.clone()));
        // The same pid, started at another time: another process now.
        assert_eq!(
            writer(&line_for(me, Some(start + 1))),
            Writer::Gone(who.clone())
        );
        // A pid that has exited (and been reaped).
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let dead = c.id();
        c.wait().unwrap();
        assert_eq!(
            writer(&line_for(dead, Some(1))),
            Writer::Gone(format!("pid {dead} on {host}"))
        );
        // Another host, another boot: cannot be told.
        let (boot, ns, _) = here();
        assert_eq!(
            writer(&format!("{me} {start} {boot} {ns} other\x1bhost")),
            Writer::Unknown(format!(
                "its rank 0 is pid {me} on other\\u{{1b}}host, another host: whether it still runs cannot \
                 be told from here"
            ))
        );
        assert!(matches!(
            writer(&format!("{me} {start} 0000 {ns} {host}")),
            Writer::Unknown(_)
        ));
        assert!(matches!(writer("garbage"), Writer::Unknown(_)));
    }
}
