//! NCCL's Parameter API (NCCL 2.30.4 and newer): the parameters the
//! library registers, each with the value it will use and its default,
//! asked of that exact library file in a child process.
//!
//! The child is this program again (`nccl-find --nccl-params-of FILE`,
//! never shown in `--help`): it loads the file by its path, calls
//! `ncclParamDumpAll` with `NCCL_PARAM_DUMP_ALL=1` (private parameters
//! too), and exits. NCCL itself applies the environment, its
//! configuration files and its env plugin, so the values are the ones a
//! job started here would get. The parent reads at most [`OUT_MAX`] bytes
//! and waits at most [`WAIT`].

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The hidden flag that makes this program the child.
pub const CHILD_FLAG: &str = "--nccl-params-of";
/// The function the child calls; its presence says the API is there.
const DUMP: &str = "ncclParamDumpAll";
/// The most the child may print: a dump is about 10 KiB.
const OUT_MAX: u64 = 1 << 20;
/// The longest the child may take: loading a 500 MB library takes 0.1 s.
const WAIT: Duration = Duration::from_secs(30);
/// The variable that makes the dump list private parameters too; the
/// child sets it, so it is no finding.
pub const DUMP_ALL: &str = "NCCL_PARAM_DUMP_ALL";

/// One parameter as NCCL reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// `NCCL_DEBUG`.
    pub key: String,
    /// The value NCCL will use, in NCCL's words (`<unset>` for none).
    pub value: String,
    /// Its default.
    pub default: String,
    /// `EnvPlugin` (the environment, a configuration file or an env
    /// plugin set it, and NCCL accepted it) or `Default`.
    pub set_by: String,
    /// What it accepts: `String`, `Boolean: …`, or the names of a list.
    pub accepted: String,
}

/// What asking the library gave.
#[derive(Debug)]
pub enum Asked {
    /// The library has no Parameter API (older than 2.30.4).
    NoApi,
    /// The parameters, in NCCL's order.
    Params(Vec<Param>),
    /// The library has the API, but the child failed: why.
    Failed(String),
    /// The child was not run: why (the variables came from a facts file).
    Withheld(String),
}

/// The variables that make NCCL write a file, which the child never gets:
/// asking NCCL for its parameters must not truncate a log or dump a
/// topology. (Variables that load code, `NCCL_*_PLUGIN`, reach it only
/// from this process's own environment, as they reach every job started
/// here; a facts file's variables never reach it.)
pub const WRITES_FILES: &[&str] = &[
    "NCCL_DEBUG_FILE",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_TOPO_DUMP_FILE_RANK",
    "NCCL_GRAPH_DUMP_FILE",
    "NCCL_GRAPH_DUMP_FILE_RANK",
];

/// Asks `library` for its parameters, with `env` as the `NCCL_*`
/// environment (the rest of this process's environment is kept: the
/// loader needs it).
pub fn ask(library: &Path, env: &[(String, String)]) -> Asked {
    match nccl_find::internal::dynamic_symbols(library) {
        Ok(syms) if syms.iter().any(|s| s == DUMP) => {}
        _ => return Asked::NoApi,
    }
    // Loading a library runs its code: only one that this user or root
    // installed, in directories no one else can write, is loaded.
    if let Err(why) = owned(library) {
        return Asked::Withheld(format!(
            "{why}, and a library another user could change is never loaded: its code would run \
             as you"
        ));
    }
    match run_child(library, env) {
        Ok(text) => match parse(&text) {
            p if p.is_empty() => Asked::Failed("the library listed no parameters".into()),
            p => Asked::Params(p),
        },
        Err(e) => Asked::Failed(e),
    }
}

/// Whether `library` (its real file) and every directory above it belong
/// to this user or root, and no one else can write them.
fn owned(library: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(library)
        .map_err(|e| format!("{} cannot be resolved ({e})", library.display()))?;
    let me = nccl_rendezvous::fsafe::my_uid()
        .ok_or("who this process runs as cannot be told (/proc/self cannot be read)")?;
    let m = std::fs::metadata(&real).map_err(|e| format!("{}: {e}", real.display()))?;
    if m.uid() != me && m.uid() != 0 {
        return Err(format!(
            "{} belongs to user {}, not to you (user {me}) or root",
            real.display(),
            m.uid()
        ));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "{} has mode {:o}: others can write it",
            real.display(),
            m.mode() & 0o7777
        ));
    }
    let dir = real.parent().unwrap_or(Path::new("/"));
    nccl_find::loader_dir::check_owned_path(dir).map_err(|e| e.to_string())
}

fn run_child(library: &Path, env: &[(String, String)]) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot run nccl-find again: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg(CHILD_FLAG).arg(library);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("NCCL_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(
        env.iter()
            .filter(|(k, _)| !WRITES_FILES.contains(&k.as_str()))
            .map(|(k, v)| (k, v)),
    )
    .env(DUMP_ALL, "1")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run nccl-find again: {e}"))?;
    let mut out = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = (&mut out).take(OUT_MAX).read_to_end(&mut bytes);
        bytes
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if start.elapsed() < WAIT => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("loading it took longer than {} s", WAIT.as_secs()));
            }
        }
    };
    // The child has exited: its end of the pipe is closed, unless it left
    // a process behind holding it; the reader then stops at OUT_MAX or
    // when that one exits, and is not waited for.
    let bytes = if reader.is_finished() || wait_briefly(&reader) {
        reader.join().unwrap_or_default()
    } else {
        return Err("its output did not end".into());
    };
    if !status.success() {
        return Err(format!("loading it failed ({status})"));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn wait_briefly<T>(t: &std::thread::JoinHandle<T>) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        if t.is_finished() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// The child: loads `library` and prints NCCL's dump of its parameters.
pub fn child(library: &Path) -> std::process::ExitCode {
    // SAFETY: the library is the NCCL library doctor selected; loading it
    // runs its initialisers, which start nothing before a communicator.
    let lib = match unsafe { libloading::Library::new(library) } {
        Ok(l) => l,
        Err(e) => {
            eprintln!("nccl-find: cannot load {}: {e}", library.display());
            return std::process::ExitCode::from(1);
        }
    };
    // SAFETY: nccl.h declares `void ncclParamDumpAll(void)`.
    let dump = match unsafe { lib.get::<unsafe extern "C" fn()>(b"ncclParamDumpAll\0") } {
        Ok(f) => f,
        Err(e) => {
            eprintln!("nccl-find: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    // SAFETY: a call with no arguments; it prints with C's printf, whose
    // buffer is flushed next, before this process exits.
    unsafe {
        dump();
        libc::fflush(std::ptr::null_mut());
    }
    // Never unloaded: NCCL's code may still be referred to at exit.
    std::mem::forget(lib);
    std::process::ExitCode::SUCCESS
}

/// The parameters in `ncclParamDumpAll`'s text: per parameter, a line
/// `KEY (type) [flags] description`, then `    Current value=V set_by=S
/// default=D`, then `    Accepted value: …` with, for lists, one
/// `        NAME - description` line per name. Other lines (NCCL's log, where
/// it logs to stdout) are skipped.
pub fn parse(text: &str) -> Vec<Param> {
    let mut out: Vec<Param> = Vec::new();
    let mut key: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("    Current value=") {
            let (Some(k), Some((rest, default))) = (key.take(), rest.rsplit_once(" default="))
            else {
                continue;
            };
            let Some((value, set_by)) = rest.rsplit_once(" set_by=") else {
                continue;
            };
            out.push(Param {
                key: k,
                value: value.to_string(),
                default: default.to_string(),
                set_by: set_by.to_string(),
                accepted: String::new(),
            });
        } else if let Some(a) = line.strip_prefix("    Accepted value: ") {
            if let Some(p) = out.last_mut() {
                p.accepted = a.trim_end_matches(':').to_string();
            }
        } else if let Some(item) = line.strip_prefix("        ") {
            // One name of a list: `NAME - what it means`.
            if let (Some(p), Some((name, _))) = (out.last_mut(), item.split_once(" - ")) {
                p.accepted.push_str(if p.accepted.ends_with(" of") {
                    " "
                } else {
                    ", "
                });
                p.accepted.push_str(name.trim());
            }
        } else {
            key = line
                .split_once(" (")
                .map(|(k, _)| k)
                .filter(|k| is_key(k))
                .map(str::to_string);
        }
    }
    out
}

fn is_key(k: &str) -> bool {
    k.len() > 5
        && k.starts_with("NCCL_")
        && k.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NCCL 2.32.3's own text (`NCCL_DEBUG=warnx NCCL_DEBUG_SUBSYS=INIT,ENV`),
    /// shortened, with a log line in between.
    const DUMP_TEXT: &str = "=== ncclParam Registry Dump ===
NCCL_DEBUG_TIMESTAMP_FORMAT (const char*) [NoEnvPluginInit] Set the format used when printing debug log messages
    Current value=[%F %T]  set_by=Default default=[%F %T] 
    Accepted value: String

host:1:2 [0] NCCL INFO something (logged to stdout)
NCCL_DEBUG_SUBSYS (uint64_t) [NoEnvPluginInit] Filter debug output by (comma-separated)
    Current value=INIT,ENV set_by=EnvPlugin default=INIT,ENV,BOOTSTRAP
    Accepted value: Comma-separated list of:
        INIT - NCCL and comm initialization (included in default)
        ENV - Parameter settings by config file, EnvVar or EnvPlugins (included in default)
        ALL - All categories

NCCL_DEBUG (ncclDebugLogLevel) [NoEnvPluginInit] Set the debug output level. Each level includes less-verbose levels.
    Current value=<unknown> set_by=Default default=<unknown>
    Accepted value: One of:
        VERSION - Prints NCCL version information only.
        ABORT - 
        TRACE - Prints replayable trace information on all calls.
";

    #[test]
    fn the_dump_is_read_parameter_by_parameter() {
        let p = |key: &str, value: &str, default: &str, set_by: &str, accepted: &str| Param {
            key: key.into(),
            value: value.into(),
            default: default.into(),
            set_by: set_by.into(),
            accepted: accepted.into(),
        };
        assert_eq!(
            parse(DUMP_TEXT),
            [
                p(
                    "NCCL_DEBUG_TIMESTAMP_FORMAT",
                    "[%F %T] ",
                    "[%F %T] ",
                    "Default",
                    "String"
                ),
                p(
                    "NCCL_DEBUG_SUBSYS",
                    "INIT,ENV",
                    "INIT,ENV,BOOTSTRAP",
                    "EnvPlugin",
                    "Comma-separated list of INIT, ENV, ALL"
                ),
                p(
                    "NCCL_DEBUG",
                    "<unknown>",
                    "<unknown>",
                    "Default",
                    "One of VERSION, ABORT, TRACE"
                ),
            ]
        );
    }

    #[test]
    fn text_that_is_no_dump_gives_no_parameters() {
        assert!(parse("").is_empty());
        assert!(parse("    Current value=1 set_by=Default default=1\n").is_empty());
        assert!(parse(
            "nccl_x (int) [] lower case\n    Current value=1 set_by=Default default=1\n"
        )
        .is_empty());
        // A header whose value line never comes names nothing.
        assert!(parse("NCCL_A (int) [] a\nNCCL_B (int) [] b\n").is_empty());
    }
}
