//! Slurm's `srun` with no PMI (`MpiDefault=none`, or `--mpi=none`). Each
//! task gets `SLURM_PROCID`, `SLURM_LOCALID`, `SLURM_NODEID`,
//! `SLURM_NTASKS`, `SLURM_JOB_ID`, `SLURM_STEP_ID` and
//! `SLURM_STEP_NODELIST`, and nothing to meet through: no store, no port.
//!
//! So rank 0 serves our own TCP rendezvous on the FIRST host of the step's
//! node list: with block, cyclic and plane distribution (srun's default is
//! block) task 0 runs there. With `--distribution=arbitrary` it need not, and
//! the row says so instead of listening on the wrong node.
//!
//! The node list is Slurm's hostlist syntax: `node[01-04,07],gpu-a[1-2]` is
//! node01..node04, node07, gpu-a1, gpu-a2 (zero padding kept); several
//! bracket groups in one name are a cartesian product (`a[1-2]-b[3-4]` is
//! a1-b3 a1-b4 a2-b3 a2-b4), so the first host is the name with the first
//! number of every bracket. [`first_host`] reads just that, and checks the
//! whole list's syntax in one pass without expanding it (a range of a
//! billion nodes costs what its text costs).
//!
//! The port, the same for every task without talking: derived from the job
//! and step ids, in 20000..=32767 (above most well-known service ports, below
//! Linux's ephemeral range 32768-60999, where the kernel hands out the ports
//! of outgoing connections):
//!
//! ```text
//! port = 20000 + (SLURM_JOB_ID × 7891 + SLURM_STEP_ID) mod 12768
//! ```
//!
//! Consecutive steps of one job get consecutive ports; two jobs whose ids
//! differ by less than 12768 get different ports for the same step
//! (7891 is coprime with 12768, and near its golden section, which spreads
//! nearby jobs far apart). A port can still be in use on the node (another
//! program, or a step thousands of steps away); rank 0 then says so, and
//! `NCCL_FIND_SLURM_PORT` chooses the port instead.
//!
//! The job token is `slurm/JOB.STEP/SRUN_PORT`: the job and step ids and the
//! port of the `srun` that started the step (`SLURM_SRUN_COMM_PORT`, picked
//! by the kernel when `srun` starts). It keeps another job or step that
//! happens on the same port apart. It is no secret: every user can list job
//! ids, and a process on the node can read srun's port (or try them all);
//! against someone on the node who means harm, pass `--token` (or
//! `NCCL_FIND_TOKEN`) with a secret of your own.

use std::path::Path;
use std::time::Duration;

use crate::job::{Exchange, Init};
use crate::launch::{need, optional, port_number, Backend, LaunchEnv, Plan};
use crate::words::printable;

/// `srun` without PMI: our TCP rendezvous at the step's first node.
pub(crate) const SLURM: Backend = Backend {
    id: "slurm",
    launcher: "Slurm's srun with no PMI (MpiDefault=none or --mpi=none)",
    recognised_by:
        "SLURM_PROCID with SLURM_NTASKS, SLURM_STEP_NODELIST, SLURM_JOB_ID and SLURM_STEP_ID",
    carries:
        "our TCP rendezvous: rank 0 listens on the first host of SLURM_STEP_NODELIST, port 20000 + \
              (SLURM_JOB_ID * 7891 + SLURM_STEP_ID) mod 12768, or NCCL_FIND_SLURM_PORT; or \
              MASTER_ADDR:MASTER_PORT where a batch script exported them",
    never_came: "rank 0 names every rank that never said hello",
    detect,
};

/// The variable that chooses the port instead of the formula.
pub const PORT_VAR: &str = "NCCL_FIND_SLURM_PORT";

/// The longest node list read, in bytes (Linux caps one variable at
/// 128 KiB; tests pass longer ones).
const MAX_NODELIST: usize = 8 << 20;

/// The longest host name (DNS allows 253 characters).
const MAX_HOST: usize = 255;

/// The most digits in a number of a range (u64 holds 19).
const MAX_DIGITS: usize = 19;

/// The lowest port of the formula's range.
const PORT_BASE: u64 = 20000;

/// How many ports the formula's range holds: 20000..=32767.
const PORT_SPAN: u64 = 12768;

/// The multiplier of the job id (coprime with [`PORT_SPAN`]).
const JOB_STRIDE: u64 = 7891;

/// The port of a job's step: `20000 + (job × 7891 + step) mod 12768`.
pub fn step_port(job: u64, step: u64) -> u16 {
    let n = (u128::from(job) * u128::from(JOB_STRIDE) + u128::from(step)) % u128::from(PORT_SPAN);
    // The sum is below 32768.
    u16::try_from(u128::from(PORT_BASE) + n).unwrap_or(u16::MAX)
}

fn detect(env: &LaunchEnv) -> Option<Result<Plan, String>> {
    if !env.has("SLURM_PROCID") {
        return None;
    }
    let in_step = env.has("SLURM_STEP_NODELIST") || env.has("SLURM_STEP_ID");
    // A batch script (or the one task of a job) has SLURM_PROCID=0 but no
    // step: it is one process, and runs alone.
    if !in_step && matches!(env.number("SLURM_NTASKS"), Ok(None | Some(1))) {
        return None;
    }
    Some(plan(env))
}

fn plan(env: &LaunchEnv) -> Result<Plan, String> {
    let launcher = "Slurm";
    let mut from = Vec::new();
    let rank = need(env, launcher, "SLURM_PROCID", &mut from)?;
    let world = need(env, launcher, "SLURM_NTASKS", &mut from)?;
    let list = match env.get("SLURM_STEP_NODELIST") {
        Ok(Some(v)) => v,
        Ok(None) => {
            return Err(format!(
                "Slurm: SLURM_STEP_NODELIST is not set, though {} are: this process is not a task of srun (a \
                 batch script or an salloc shell has the job's variables, not a step's). Start it with srun \
                 (srun nccl-find smoke), or pass --rank, --world-size and --init tcp://HOST:PORT",
                from.join(", ")
            ))
        }
        Err(e) => return Err(format!("Slurm: {e}")),
    };
    let host = first_host(list).map_err(|e| {
        format!(
            "Slurm: SLURM_STEP_NODELIST={} is not a node list: {e}. Pass --init tcp://HOST:PORT naming rank 0's \
             node",
            printable(list, 60)
        )
    })?;
    from.push("SLURM_STEP_NODELIST");
    let job = need(env, launcher, "SLURM_JOB_ID", &mut from)?;
    let step = need(env, launcher, "SLURM_STEP_ID", &mut from)?;
    let local_rank = optional(env, &["SLURM_LOCALID"], &mut from)?;
    // Where rank 0 will be, unless the script chose (MASTER_ADDR).
    let chosen = env.has("MASTER_ADDR") && env.has("MASTER_PORT");
    if !chosen && matches!(env.get("SLURM_DISTRIBUTION"), Ok(Some(d)) if d.starts_with("arbitrary"))
    {
        return Err(
            "Slurm: with --distribution=arbitrary, task 0 need not run on the first node of \
             SLURM_STEP_NODELIST: pass --init tcp://HOST:PORT naming the node of task 0"
                .into(),
        );
    }
    if rank == 0 && !chosen {
        if let Ok(Some(node)) = env.get("SLURMD_NODENAME") {
            if node != host {
                return Err(format!(
                    "Slurm: task 0 runs on {}, not on {}, the first node of SLURM_STEP_NODELIST, where the other \
                     tasks will look for it: pass --init tcp://HOST:PORT naming the node of task 0",
                    printable(node, 60),
                    printable(&host, 60)
                ));
            }
        }
    }
    let (mut host, port, origin) = place(env, host, job, step, &mut from)?;
    let mut origin = origin.to_string();
    if !chosen {
        if let Some((addr, how)) = unresolved(env, &host, port) {
            origin = format!("{how}; {origin}");
            if let Some(addr) = addr {
                from.push("scontrol show node");
                host = addr;
            }
        }
    }
    let srun = srun_port(env, &mut from);
    Ok(Plan {
        backend: SLURM.id,
        launcher: "srun",
        rank,
        world,
        local_rank,
        exchange: Exchange::Ours(Init::Tcp { host, port }),
        token: Some(format!("slurm/{job}.{step}/{srun}")),
        from,
        origin: Some(origin),
    })
}

/// The longest `scontrol` may take to answer.
const SCONTROL_WAIT: Duration = Duration::from_secs(10);

/// Where the first node's name does not resolve here (`NodeName` is not
/// the host's name, and only `NodeAddr` reaches it): its `NodeAddr` from
/// `scontrol show node`, where Slurm has one that differs, and what was
/// done, in words. `None` where the name resolves (or no `scontrol` is to
/// be asked).
fn unresolved(env: &LaunchEnv, node: &str, port: u16) -> Option<(Option<String>, String)> {
    use std::net::ToSocketAddrs;
    let scontrol = env.scontrol()?;
    if (node, port)
        .to_socket_addrs()
        .is_ok_and(|mut a| a.next().is_some())
    {
        return None;
    }
    Some(match node_addr(scontrol, node) {
        Ok(addr) if addr != node => (
            Some(addr.clone()),
            format!(
                "{node} does not resolve here, so its NodeAddr {addr} from `scontrol show node` was used"
            ),
        ),
        Ok(_) => (None, format!("{node} does not resolve here, and Slurm's NodeAddr for it is the same name")),
        Err(e) => (None, format!("{node} does not resolve here, and `scontrol show node` did not help ({e})")),
    })
}

/// `NodeAddr` of `node`, as `scontrol show node -o NODE` says it: bounded
/// in time and size, and checked to be an address or a host name.
fn node_addr(scontrol: &Path, node: &str) -> Result<String, String> {
    use std::io::Read;
    let mut child = std::process::Command::new(scontrol)
        .args(["show", "node", "-o", node])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", scontrol.display()))?;
    let until = std::time::Instant::now() + SCONTROL_WAIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if std::time::Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {} s", SCONTROL_WAIT.as_secs()));
            }
        }
    };
    let mut out = Vec::new();
    if let Some(o) = child.stdout.take() {
        let _ = o.take(64 << 10).read_to_end(&mut out);
    }
    if !status.success() {
        return Err(format!("it ended with {status}"));
    }
    let text = String::from_utf8_lossy(&out);
    let addr = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("NodeAddr="))
        .ok_or("its answer has no NodeAddr")?;
    let ok = !addr.is_empty()
        && addr.len() <= 253
        && addr
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'_'));
    if !ok {
        return Err(format!(
            "its NodeAddr {} is no address",
            printable(addr, 60)
        ));
    }
    Ok(addr.to_string())
}

/// Where rank 0 listens: `MASTER_ADDR` and `MASTER_PORT` where a batch
/// script exported them (as many do for torch), else the step's first host
/// and the port of the formula (or `NCCL_FIND_SLURM_PORT`); and where
/// they came from, in words.
fn place(
    env: &LaunchEnv,
    first: String,
    job: usize,
    step: usize,
    from: &mut Vec<&'static str>,
) -> Result<(String, u16, &'static str), String> {
    let port_of = |name: &str, p: usize| port_number("Slurm", name, p);
    if let (Ok(Some(addr)), Ok(Some(port))) = (env.get("MASTER_ADDR"), env.number("MASTER_PORT")) {
        from.push("MASTER_ADDR");
        from.push("MASTER_PORT");
        let host = addr
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        return Ok((
            host,
            port_of("MASTER_PORT", port)?,
            "MASTER_ADDR and MASTER_PORT, as the job's script exported them",
        ));
    }
    match env.number(PORT_VAR) {
        Ok(Some(p)) => {
            from.push(PORT_VAR);
            Ok((
                first,
                port_of(PORT_VAR, p)?,
                "the first node of SLURM_STEP_NODELIST and NCCL_FIND_SLURM_PORT (set it to another port free \
                 on that node)",
            ))
        }
        Ok(None) => Ok((
            first,
            step_port(job as u64, step as u64),
            "the first node of SLURM_STEP_NODELIST and a port made from SLURM_JOB_ID and SLURM_STEP_ID (set \
             NCCL_FIND_SLURM_PORT to choose another port, free on that node)",
        )),
        Err(e) => Err(format!("Slurm: {e}")),
    }
}

/// The port of the `srun` that started the step, for the token; `-` when
/// it is not there.
fn srun_port<'a>(env: &'a LaunchEnv, from: &mut Vec<&'static str>) -> &'a str {
    match env.get("SLURM_SRUN_COMM_PORT") {
        Ok(Some(p)) if p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            from.push("SLURM_SRUN_COMM_PORT");
            p
        }
        _ => "-",
    }
}

/// The first host of a Slurm hostlist (`node[01-04,07],gpu-a[1-2]` gives
/// `node01`), after checking the whole list's syntax in one pass, without
/// expanding it. The error says what is wrong, and where.
pub fn first_host(list: &str) -> Result<String, String> {
    if list.len() > MAX_NODELIST {
        return Err(format!(
            "it is {} bytes long; at most {MAX_NODELIST}",
            list.len()
        ));
    }
    let bytes = list.as_bytes();
    let mut host = String::new();
    // Whether the current name is the first one, which gives the host.
    let mut first = true;
    // Whether the current name has anything in it yet.
    let mut name_started = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => {
                if first {
                    host.push(char::from(b));
                }
                name_started = true;
                i += 1;
            }
            b',' => {
                if !name_started {
                    return Err(format!("an empty name at byte {i}"));
                }
                first = false;
                name_started = false;
                i += 1;
            }
            b'[' => {
                let (lo, next) = bracket(bytes, i)?;
                if first {
                    host.push_str(lo);
                }
                name_started = true;
                i = next;
            }
            b']' => return Err(format!("a ']' with no '[' before it at byte {i}")),
            _ => return Err(format!("a character no node name holds at byte {i}")),
        }
        if first && host.len() > MAX_HOST {
            return Err(format!("its first name is longer than {MAX_HOST} bytes"));
        }
    }
    if !name_started {
        return Err(if list.is_empty() {
            "it is empty".into()
        } else {
            format!("an empty name at its end (byte {})", list.len())
        });
    }
    Ok(host)
}

/// Checks the bracket that opens at `open`: `[RANGE,RANGE,...]`, each range
/// `N` or `N-M` with `N <= M`. Returns its first number, as written (zero
/// padding kept), and where the text after the bracket starts.
fn bracket(bytes: &[u8], open: usize) -> Result<(&str, usize), String> {
    let mut i = open + 1;
    let mut first: Option<&str> = None;
    loop {
        let (lo, next) = number(bytes, i, open)?;
        first.get_or_insert(lo);
        i = next;
        if bytes.get(i) == Some(&b'-') {
            let (hi, next) = number(bytes, i + 1, open)?;
            if value(hi) < value(lo) {
                return Err(format!(
                    "the range {lo}-{hi} runs backwards, in the bracket at byte {open}"
                ));
            }
            i = next;
        }
        match bytes.get(i) {
            Some(b',') => i += 1,
            Some(b']') => return Ok((first.unwrap_or_default(), i + 1)),
            None => return Err(format!("the bracket at byte {open} is never closed")),
            Some(_) => {
                return Err(format!(
                    "a character that is not a digit, '-', ',' or ']' at byte {i}, in the bracket at byte {open}"
                ))
            }
        }
    }
}

/// The digits at `at` (one to [`MAX_DIGITS`] of them), and where they end.
fn number(bytes: &[u8], at: usize, open: usize) -> Result<(&str, usize), String> {
    let len = bytes
        .get(at..)
        .unwrap_or_default()
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if len == 0 {
        return Err(match bytes.get(at) {
            None => format!("the bracket at byte {open} is never closed"),
            Some(_) => format!("a number is missing at byte {at}, in the bracket at byte {open}"),
        });
    }
    if len > MAX_DIGITS {
        return Err(format!(
            "a number of more than {MAX_DIGITS} digits at byte {at}"
        ));
    }
    // Digits are ASCII, so `at..at + len` falls on character boundaries.
    let s = std::str::from_utf8(&bytes[at..at + len]).unwrap_or_default();
    Ok((s, at + len))
}

/// A number of at most [`MAX_DIGITS`] digits (which always fits).
fn value(digits: &str) -> u64 {
    digits.parse().unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launchers::detect;
    use std::time::{Duration, Instant};

    #[test]
    fn the_first_host_of_a_node_list() {
        for (list, host) in [
            ("node[01-04,07],gpu-a[1-2]", "node01"),
            ("gpu-a[1-2],node[01-04,07]", "gpu-a1"),
            ("a[1-2]-b[3-4]", "a1-b3"),
            ("rack[2-3]node[007-009,011]x", "rack2node007x"),
            ("node[7]", "node7"),
            ("node[10,2-3]", "node10"),
            ("n[0001-0100]", "n0001"),
            ("node01", "node01"),
            ("node01,node02", "node01"),
            ("[1-2]", "1"),
            ("gpu.cluster_x-1", "gpu.cluster_x-1"),
            ("a,b[1-2]c[3-4]", "a"),
            ("n[1-9999999999999999999]", "n1"),
            ("n[0000000000000000001-2]", "n0000000000000000001"),
        ] {
            assert_eq!(first_host(list).as_deref(), Ok(host), "{list}");
        }
    }

    #[test]
    fn a_malformed_node_list_says_what_and_where() {
        for (list, why) in [
            ("", "it is empty"),
            ("node[01-02", "the bracket at byte 4 is never closed"),
            ("node[01-", "the bracket at byte 4 is never closed"),
            ("node[", "the bracket at byte 4 is never closed"),
            ("node01]", "a ']' with no '[' before it at byte 6"),
            ("node[]", "a number is missing at byte 5, in the bracket at byte 4"),
            ("node[1-]", "a number is missing at byte 7, in the bracket at byte 4"),
            ("node[,1]", "a number is missing at byte 5, in the bracket at byte 4"),
            ("node[1,]", "a number is missing at byte 7, in the bracket at byte 4"),
            ("node[a-b]", "a number is missing at byte 5, in the bracket at byte 4"),
            ("node[1-2-3]", "a character that is not a digit, '-', ',' or ']' at byte 8, in the bracket at byte 4"),
            ("node[1[2]]", "a character that is not a digit, '-', ',' or ']' at byte 6, in the bracket at byte 4"),
            ("node[09-1]", "the range 09-1 runs backwards, in the bracket at byte 4"),
            ("node01,,node02", "an empty name at byte 7"),
            (",node01", "an empty name at byte 0"),
            ("node01,", "an empty name at its end (byte 7)"),
            ("node 01", "a character no node name holds at byte 4"),
            ("node01\n", "a character no node name holds at byte 6"),
            ("nöde", "a character no node name holds at byte 1"),
            ("n[99999999999999999999]", "a number of more than 19 digits at byte 2"),
            ("n[1-99999999999999999999]", "a number of more than 19 digits at byte 4"),
        ] {
            assert_eq!(first_host(list), Err(why.to_string()), "{list:?}");
        }
        let long = "n".repeat(256);
        assert_eq!(
            first_host(&long),
            Err("its first name is longer than 255 bytes".into())
        );
        // Only the first name is bounded by a host name's length.
        assert_eq!(first_host(&format!("a,{long}")).as_deref(), Ok("a"));
    }

    #[test]
    fn a_long_node_list_is_read_quickly_and_checked_to_its_end() {
        let mut list = String::from("node[0001-4096]");
        while list.len() < 1 << 20 {
            list.push_str(",rack[01-64]gpu[0001-1024,2000]");
        }
        let t = Instant::now();
        assert_eq!(first_host(&list).as_deref(), Ok("node0001"));
        let mut bad = list.clone();
        bad.push_str(",x[2-1]");
        assert_eq!(
            first_host(&bad),
            Err(format!(
                "the range 2-1 runs backwards, in the bracket at byte {}",
                list.len() + 2
            ))
        );
        // One pass over 2 MB, with generous headroom for a busy machine.
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let huge = "n".repeat(MAX_NODELIST + 1);
        assert_eq!(
            first_host(&huge),
            Err(format!(
                "it is {} bytes long; at most {MAX_NODELIST}",
                MAX_NODELIST + 1
            ))
        );
    }

    #[test]
    fn the_port_of_a_step() {
        assert_eq!(step_port(0, 0), 20000);
        assert_eq!(step_port(1, 0), 27891);
        assert_eq!(step_port(1, 1), 27892);
        assert_eq!(step_port(2, 0), 23014);
        assert_eq!(step_port(12345, 0), 27323);
        assert_eq!(step_port(12345, 7), 27330);
        assert_eq!(step_port(u64::MAX, u64::MAX), 24140);
        // A step of the same job, and nearby jobs, get other ports.
        let mut seen = std::collections::HashSet::new();
        for job in 1_000_000..1_000_000 + 12768 {
            assert!(seen.insert(step_port(job, 0)), "{job}");
        }
        for job in [0, 1, 777, 4_000_000_000, u64::MAX] {
            for step in 0..100 {
                let p = step_port(job, step);
                assert!((20000..=32767).contains(&p), "{job}.{step}: {p}");
                assert_ne!(p, step_port(job, step + 1));
            }
        }
    }

    /// A fake `scontrol` that runs `body` (sh), in a scratch directory.
    fn fake_scontrol(body: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let d = crate::testutil::scratch("scontrol");
        let p = d.join("scontrol");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// The plan of task 1, whose first node is `node` (which does not
    /// resolve, unless it is `localhost`), asking `scontrol`.
    fn asking(node: &str, scontrol: &std::path::Path) -> Plan {
        let mut vars = without(task("1", "1"), &["SLURM_STEP_NODELIST", "SLURMD_NODENAME"]);
        vars.push(("SLURM_STEP_NODELIST", node.to_string()));
        plan(&env_of(&vars).with_scontrol(scontrol.to_path_buf())).unwrap()
    }

    #[test]
    fn a_first_node_that_does_not_resolve_is_reached_at_its_node_addr() {
        let node = "nf-unresolved-xq1.invalid";
        let answer = format!(
            "echo NodeName={node} Arch=x86_64 NodeAddr=10.1.2.3 NodeHostName=gpu7 State=IDLE"
        );
        let p = asking(node, &fake_scontrol(&answer));
        assert_eq!(
            p.exchange,
            Exchange::Ours(Init::Tcp {
                host: "10.1.2.3".into(),
                port: 27330
            })
        );
        assert!(p.from.contains(&"scontrol show node"), "{:?}", p.from);
        let origin = p.origin.unwrap();
        assert!(
            origin.starts_with(&format!(
                "{node} does not resolve here, so its NodeAddr 10.1.2.3 from `scontrol show node` was used; the first node"
            )),
            "{origin}"
        );
        // An answer that is no address, a failing scontrol, none at all: the
        // name stays, and the report says why.
        for (body, why) in [
            (
                "echo NodeName=x NodeAddr='a;b'",
                "its NodeAddr \"a;b\" is no address",
            ),
            ("echo NodeName=x", "its answer has no NodeAddr"),
            ("exit 1", "it ended with exit status: 1"),
        ] {
            let p = asking(node, &fake_scontrol(body));
            assert!(matches!(&p.exchange, Exchange::Ours(Init::Tcp { host, .. }) if host == node));
            let origin = p.origin.unwrap();
            assert!(
                origin.starts_with(&format!(
                    "{node} does not resolve here, and `scontrol show node` did not help ({why})"
                )),
                "{origin}"
            );
        }
        // A name that resolves: scontrol is not asked.
        let marker = crate::testutil::scratch("scontrol-asked").join("asked");
        let p = asking(
            "localhost",
            &fake_scontrol(&format!("touch {}", marker.display())),
        );
        assert!(p.origin.unwrap().starts_with("the first node"));
        assert!(!marker.exists());
    }

    fn task(rank: &str, local: &str) -> Vec<(&'static str, String)> {
        [
            ("SLURM_PROCID", rank),
            ("SLURM_LOCALID", local),
            ("SLURM_NODEID", "0"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_ID", "12345"),
            ("SLURM_STEP_ID", "7"),
            ("SLURM_STEP_NODELIST", "node[01-02]"),
            ("SLURM_SRUN_COMM_PORT", "37405"),
            ("SLURMD_NODENAME", "node01"),
            ("SLURM_DISTRIBUTION", "block"),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect()
    }

    fn env_of(vars: &[(&'static str, String)]) -> LaunchEnv {
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        LaunchEnv::from_pairs(&pairs)
    }

    fn without(
        mut vars: Vec<(&'static str, String)>,
        names: &[&str],
    ) -> Vec<(&'static str, String)> {
        vars.retain(|(k, _)| !names.contains(k));
        vars
    }

    fn with(
        mut vars: Vec<(&'static str, String)>,
        k: &'static str,
        v: &str,
    ) -> Vec<(&'static str, String)> {
        vars.push((k, v.to_string()));
        vars
    }

    #[test]
    fn a_task_of_srun_meets_at_the_first_node() {
        let p = detect(&env_of(&task("2", "1"))).unwrap().unwrap();
        assert_eq!(
            (p.backend, p.launcher, p.rank, p.world, p.local_rank),
            ("slurm", "srun", 2, 4, Some(1))
        );
        assert_eq!(
            p.exchange,
            Exchange::Ours(Init::Tcp {
                host: "node01".into(),
                port: 27330
            })
        );
        assert_eq!(p.token.as_deref(), Some("slurm/12345.7/37405"));
        assert_eq!(
            p.origin.as_deref(),
            Some(
                "the first node of SLURM_STEP_NODELIST and a port made from SLURM_JOB_ID and SLURM_STEP_ID \
                 (set NCCL_FIND_SLURM_PORT to choose another port, free on that node)"
            )
        );
        assert_eq!(
            p.from,
            [
                "SLURM_PROCID",
                "SLURM_NTASKS",
                "SLURM_STEP_NODELIST",
                "SLURM_JOB_ID",
                "SLURM_STEP_ID",
                "SLURM_LOCALID",
                "SLURM_SRUN_COMM_PORT"
            ]
        );
        // Task 0 on the first node; the port chosen by hand; no srun port.
        let env = with(
            without(task("0", "0"), &["SLURM_SRUN_COMM_PORT", "SLURM_LOCALID"]),
            PORT_VAR,
            "29999",
        );
        let p = detect(&env_of(&env)).unwrap().unwrap();
        assert_eq!((p.rank, p.local_rank), (0, None));
        assert_eq!(
            p.exchange,
            Exchange::Ours(Init::Tcp {
                host: "node01".into(),
                port: 29999
            })
        );
        assert_eq!(p.token.as_deref(), Some("slurm/12345.7/-"));
        assert!(p.from.contains(&PORT_VAR));
        // Another step of the job: another port, another token.
        let p8 = detect(&env_of(&with(task("0", "0"), "SLURM_STEP_ID", "8")))
            .unwrap()
            .unwrap();
        assert_eq!(p8.exchange.describe(), "tcp://node01:27331");
        assert_eq!(p8.token.as_deref(), Some("slurm/12345.8/37405"));
    }

    #[test]
    fn a_batch_script_that_exports_master_addr_chose_the_meeting_place() {
        let env = with(
            with(task("1", "1"), "MASTER_ADDR", "node02"),
            "MASTER_PORT",
            "29400",
        );
        // The whole table: torchrun's row leaves a task with no RANK to this one.
        let p = crate::launchers::detect(&env_of(&env)).unwrap().unwrap();
        assert_eq!((p.backend, p.rank, p.world), ("slurm", 1, 4));
        assert_eq!(p.exchange.describe(), "tcp://node02:29400");
        assert_eq!(p.token.as_deref(), Some("slurm/12345.7/37405"));
        assert_eq!(
            &p.from[p.from.len() - 3..],
            ["MASTER_ADDR", "MASTER_PORT", "SLURM_SRUN_COMM_PORT"]
        );
        // With RANK too, it is torchrun's (or a script's own) choice.
        let p = crate::launchers::detect(&env_of(&with(with(env, "RANK", "1"), "WORLD_SIZE", "4")))
            .unwrap()
            .unwrap();
        assert_eq!(p.backend, "torchrun-tcp");
    }

    #[test]
    fn not_slurm_or_not_a_step() {
        assert!(detect(&LaunchEnv::from_pairs(&[("SLURM_JOB_ID", "3")]))
            .unwrap()
            .is_none());
        // A batch script of one task (or with no task count) runs alone.
        for ntasks in [None, Some("1")] {
            let mut env = vec![
                ("SLURM_PROCID", "0"),
                ("SLURM_JOB_ID", "3"),
                ("SLURM_JOB_NODELIST", "node01"),
            ];
            env.extend(ntasks.map(|n| ("SLURM_NTASKS", n)));
            assert!(detect(&LaunchEnv::from_pairs(&env)).unwrap().is_none());
        }
    }

    #[test]
    fn a_half_set_environment_names_slurm_and_what_is_missing() {
        // The batch script of a job of four tasks: no step.
        let env = LaunchEnv::from_pairs(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_ID", "3"),
        ]);
        assert_eq!(
            detect(&env).unwrap_err(),
            "Slurm: SLURM_STEP_NODELIST is not set, though SLURM_PROCID, SLURM_NTASKS are: this process is not \
             a task of srun (a batch script or an salloc shell has the job's variables, not a step's). Start it \
             with srun (srun nccl-find smoke), or pass --rank, --world-size and --init tcp://HOST:PORT"
        );
        let half = without(task("1", "1"), &["SLURM_NTASKS"]);
        assert_eq!(
            detect(&env_of(&half)).unwrap_err(),
            "Slurm: SLURM_NTASKS is not set, though SLURM_PROCID are: the launcher's environment is half set. \
             Start every process with the launcher, or pass --rank, --world-size and --init tcp://HOST:PORT"
        );
        let half = without(task("1", "1"), &["SLURM_STEP_ID"]);
        assert!(detect(&env_of(&half))
            .unwrap_err()
            .starts_with("Slurm: SLURM_STEP_ID is not set, though SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST, SLURM_JOB_ID are"));
        let bad = with(task("1", "1"), "SLURM_STEP_NODELIST", "node[02-01]");
        assert_eq!(
            detect(&env_of(&bad)).unwrap_err(),
            "Slurm: SLURM_STEP_NODELIST=\"node[02-01]\" is not a node list: the range 02-01 runs backwards, in \
             the bracket at byte 4. Pass --init tcp://HOST:PORT naming rank 0's node"
        );
        let bad = with(task("1", "1"), "SLURM_STEP_NODELIST", "n\u{1b}[2J");
        assert_eq!(
            detect(&env_of(&bad)).unwrap_err(),
            "Slurm: SLURM_STEP_NODELIST=\"n\\u{1b}[2J\" is not a node list: a character no node name holds at \
             byte 1. Pass --init tcp://HOST:PORT naming rank 0's node"
        );
        let bad = with(task("1", "1"), "SLURM_PROCID", "x");
        assert_eq!(
            detect(&env_of(&bad)).unwrap_err(),
            "Slurm: SLURM_PROCID=\"x\" is not a number. Pass --rank, --world-size and --init tcp://HOST:PORT instead"
        );
        let bad = with(task("1", "1"), PORT_VAR, "65536");
        assert_eq!(
            detect(&env_of(&bad)).unwrap_err(),
            "Slurm: NCCL_FIND_SLURM_PORT=65536 is not a port number"
        );
    }

    #[test]
    fn task_0_off_the_first_node_is_named() {
        let env = with(task("0", "0"), "SLURMD_NODENAME", "node02");
        assert_eq!(
            detect(&env_of(&env)).unwrap_err(),
            "Slurm: task 0 runs on \"node02\", not on \"node01\", the first node of SLURM_STEP_NODELIST, where \
             the other tasks will look for it: pass --init tcp://HOST:PORT naming the node of task 0"
        );
        // Other tasks cannot tell; they look at the first node.
        assert!(detect(&env_of(&with(task("1", "0"), "SLURMD_NODENAME", "node02"))).is_ok());
        let env = with(task("1", "0"), "SLURM_DISTRIBUTION", "arbitrary");
        assert!(detect(&env_of(&env)).unwrap_err().starts_with(
            "Slurm: with --distribution=arbitrary, task 0 need not run on the first node"
        ));
    }
}
