//! `nccl-find smoke`: the proof that the NCCL found really works here, and
//! across processes and nodes.

pub(crate) mod nodes;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nccl_rendezvous::{self as rendezvous, Flags, LaunchEnv, Meeting};
use nccl_smoke::{self as smoke, Dtype, Event, Failure, Options, Redop};
use serde_json::json;

/// Exit status when there is no driver or no GPU.
pub const NO_GPU: u8 = 3;

/// The write end of the pipe through which the signal handler wakes the
/// cleanup thread (-1 until there is one).
static WAKE_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// The signals that end a run with its files cleaned up.
const CLEANUP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe work: one write(2) of the signal's number to a
    // non-blocking pipe, errno kept as it was.
    let fd = WAKE_FD.load(std::sync::atomic::Ordering::SeqCst);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: errno is this thread's; write(2) is async-signal-safe, and
        // `b` is a live byte on this stack.
        unsafe {
            let errno = *libc::__errno_location();
            libc::write(fd, (&b as *const u8).cast(), 1);
            *libc::__errno_location() = errno;
        }
    }
}

/// On SIGINT, SIGTERM or SIGHUP: undo what the run wrote (rendezvous files,
/// the NCCL log directory) and exit with 128 + the signal's number (130,
/// 143, 129, as shells report them), whatever the run is blocked on. The
/// handler only writes to a pipe; a thread blocked reading it wakes at once
/// (launchers like mpirun follow SIGTERM with SIGKILL soon after). Installs
/// the handlers (call it before anything is written) and returns the pipe's
/// read end for [`watch_interrupts`].
fn handle_interrupts() -> Option<libc::c_int> {
    let mut fds = [-1 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    // The handler must never block: its end does not wait for room.
    // SAFETY: fcntl on a descriptor this function just made.
    unsafe {
        libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK);
    }
    WAKE_FD.store(fds[1], std::sync::atomic::Ordering::SeqCst);
    for sig in CLEANUP_SIGNALS {
        // SAFETY: a zeroed sigaction is valid; the handler only does
        // async-signal-safe work (above).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    Some(fds[0])
}

/// The thread that waits on the pipe of [`handle_interrupts`]: cleans up
/// and exits when a signal comes.
fn watch_interrupts(wake: Option<libc::c_int>) {
    let Some(fd) = wake else { return };
    std::thread::spawn(move || loop {
        let mut b = 0u8;
        // SAFETY: reads one byte into `b` from the pipe this process made.
        let n = unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) };
        if n == 1 {
            rendezvous::cleanup::run_cleanups();
            let name = match libc::c_int::from(b) {
                libc::SIGINT => "SIGINT",
                libc::SIGTERM => "SIGTERM",
                _ => "SIGHUP",
            };
            // One write: stderr is unbuffered, and a formatted line would go
            // out in pieces, of which a SIGKILL (mpirun's follows its SIGTERM
            // within a millisecond) could leave half.
            let line = format!(
                "nccl-find smoke: interrupted ({name}); the files this run wrote were removed\n"
            );
            let _ = std::io::stderr().write_all(line.as_bytes());
            std::process::exit(128 + i32::from(b));
        }
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return;
    });
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Load this libnccl.so.2 instead of the install the probe selects
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,
    /// GPUs this process drives, e.g. 0,1 (default: all, or LOCAL_RANK's one under a launcher)
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    gpus: Option<Vec<usize>>,
    /// Sizes per rank, e.g. 4K,1M,256M (K, M, G are powers of 1024)
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    sizes: Option<Vec<String>>,
    /// Datatypes: f32 (the default; every one with --ops all), f16, bf16,
    /// f64, i32, i64, u8, i8, u32, u64, f8e4m3, f8e5m2, or all
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    dtypes: Option<Vec<String>>,
    /// Collectives: all-reduce (default), all-gather, reduce-scatter,
    /// broadcast, reduce, all-to-all, gather, scatter, send-recv, or all
    /// (the full matrix: every reduction and datatype too, unless --redops
    /// or --dtypes say otherwise)
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "all-reduce"
    )]
    ops: Vec<String>,
    /// Reductions of the collectives that reduce: sum (the default; every
    /// one with --ops all), prod, max, min, avg, or all
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    redops: Option<Vec<String>>,
    /// Seed of the inputs (default: derived from NCCL's unique id; always printed)
    #[arg(long)]
    seed: Option<u64>,
    /// Seconds each step may take: the rendezvous, communicator init, each checked call, each timed batch (at least 1)
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    timeout: f64,
    /// Timed calls per size and collective, 1 to 100000 (default: 20 up to 1 MiB, 10 up to 64 MiB, then 5)
    #[arg(long)]
    iters: Option<usize>,
    /// This process's rank (default: RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID or PMI_RANK)
    #[arg(long)]
    rank: Option<usize>,
    /// How many processes (default: WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS or PMI_SIZE)
    #[arg(long)]
    world_size: Option<usize>,
    /// Rendezvous: tcp://HOST:PORT or file:///shared/path (default: tcp://MASTER_ADDR:MASTER_PORT)
    #[arg(long, value_name = "URL")]
    init: Option<String>,
    /// Keeps two jobs on one port or file apart (default: NCCL_FIND_TOKEN, TORCHELASTIC_RUN_ID, SLURM_JOB_ID)
    #[arg(long)]
    token: Option<String>,
    /// Fail (exit 1) when the bus bandwidth at the largest size (of the
    /// first collective there), the better of out of place and in place, is
    /// below GBPS GB/s (nccl-tests' NCCL_TESTS_MIN_BW)
    #[arg(long, value_name = "GBPS")]
    min_busbw: Option<f64>,
    /// The report as JSON, at the end
    #[arg(long)]
    json: bool,
    /// Only meet the other processes, under any launcher, compare what
    /// every node brings (NCCL, driver, GPUs, settings) and test the network
    /// between the hosts as NCCL will connect, and run no all-reduce: checks
    /// the launch and the network path before a job, with no GPU needed
    #[arg(long)]
    rendezvous_only: bool,
    /// Start NCCL even where the meeting showed that it cannot work (an
    /// address NCCL will use that another node cannot reach, a
    /// NCCL_SOCKET_IFNAME that leaves a rank no interface, NCCL releases
    /// of another minor version): for NCCL's own error. Without it, every
    /// rank stops before NCCL with the cause and the fix
    #[arg(long)]
    run_nccl_anyway: bool,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mul) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size like 4096, 64K, 16M or 1G"))?;
    n.checked_mul(mul)
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("{s:?} is not a size like 4096, 64K, 16M or 1G"))
}

/// Works out the options from flags and launcher variables; also how the
/// processes meet, for the report.
fn options(a: &Args, lib: PathBuf, env: &LaunchEnv) -> Result<(Options, Option<Meeting>), String> {
    let sizes = match &a.sizes {
        Some(v) => v
            .iter()
            .map(|s| parse_size(s))
            .collect::<Result<Vec<_>, _>>()?,
        None => smoke::DEFAULT_SIZES.to_vec(),
    };
    // `--ops all` is the full matrix: every reduction and datatype too,
    // unless asked otherwise.
    let full = a.ops.iter().any(|o| o == "all");
    let or = |given: &Option<Vec<String>>, default: &str| match given {
        Some(v) => v.clone(),
        None => vec![if full { "all" } else { default }.to_string()],
    };
    let dtypes = dtypes(&or(&a.dtypes, "f32"))?;
    let ops = ops(&a.ops)?;
    let redops = redops(&or(&a.redops, "sum"))?;
    check_timeout(a.timeout)?;
    if let Some(n) = a.iters.filter(|n| !(1..=MAX_ITERS).contains(n)) {
        return Err(format!(
            "--iters {n}: from 1 to {MAX_ITERS} timed calls per size and collective"
        ));
    }
    if let Some(g) = a.min_busbw.filter(|g| !(g.is_finite() && *g > 0.0)) {
        return Err(format!(
            "--min-busbw {g} is not a bandwidth: pass a positive number of GB/s"
        ));
    }
    let mut flags = Flags::default();
    flags.rank = a.rank;
    flags.world = a.world_size;
    flags.init = a.init.clone();
    flags.token = a.token.clone();
    flags.timeout = Duration::from_secs_f64(a.timeout);
    let meeting = Meeting::resolve(&flags, env)?;
    let job = meeting.as_ref().map(|m| m.job.clone());
    let mut opts = Options::new(lib);
    opts.gpus = a.gpus.clone();
    opts.local_rank = meeting.as_ref().and_then(|m| m.local_rank);
    opts.sizes = sizes;
    opts.dtypes = dtypes;
    opts.seed = a.seed;
    opts.timeout = Duration::from_secs_f64(a.timeout);
    opts.job = job;
    opts.iters = a.iters;
    opts.rendezvous_only = a.rendezvous_only;
    opts.ops = ops;
    opts.redops = redops;
    Ok((opts, meeting))
}

/// `--ops`: names, or `all`; each once, in the smoke test's order.
fn ops(names: &[String]) -> Result<Vec<String>, String> {
    let known = smoke::ops();
    if let Some(bad) = names
        .iter()
        .find(|n| *n != "all" && !known.contains(&n.as_str()))
    {
        return Err(format!(
            "{bad:?} is not a collective: {}, or all",
            known.join(", ")
        ));
    }
    Ok(known
        .iter()
        .filter(|k| names.iter().any(|n| n == "all" || n == *k))
        .map(|k| k.to_string())
        .collect())
}

/// `--dtypes`: names, or `all`, in the order given, each once.
fn dtypes(names: &[String]) -> Result<Vec<Dtype>, String> {
    let mut dtypes = Vec::new();
    for d in names {
        let named = match d.as_str() {
            "all" => Dtype::ALL.to_vec(),
            _ => vec![Dtype::parse(d).ok_or_else(|| {
                let known: Vec<&str> = Dtype::ALL.iter().map(|d| d.name()).collect();
                format!("{d:?} is not a datatype: {}, or all", known.join(", "))
            })?],
        };
        for t in named {
            if !dtypes.contains(&t) {
                dtypes.push(t);
            }
        }
    }
    Ok(dtypes)
}

/// `--redops`: names, or `all`; each once, in the smoke test's order.
fn redops(names: &[String]) -> Result<Vec<Redop>, String> {
    let known: Vec<&str> = Redop::ALL.iter().map(|r| r.name()).collect();
    if let Some(bad) = names
        .iter()
        .find(|n| *n != "all" && Redop::parse(n).is_none())
    {
        return Err(format!(
            "{bad:?} is not a reduction: {}, or all",
            known.join(", ")
        ));
    }
    Ok(Redop::ALL
        .into_iter()
        .filter(|r| names.iter().any(|n| n == "all" || n == r.name()))
        .collect())
}

/// The shortest `--timeout`: the processes need about that to meet, and
/// NCCL longer to make its communicators.
const MIN_TIMEOUT: f64 = 1.0;

/// The most timed calls per size and collective (`--iters`): enough for
/// the smallest size to be timed well; a batch longer than `--timeout` is
/// stopped by the watchdog anyway.
const MAX_ITERS: usize = 100_000;

/// `--timeout`: a number of seconds from [`MIN_TIMEOUT`] to the
/// rendezvous's longest.
fn check_timeout(timeout: f64) -> Result<(), String> {
    if !(timeout > 0.0 && timeout.is_finite()) {
        return Err(format!("--timeout {timeout} is not a number of seconds"));
    }
    if timeout < MIN_TIMEOUT {
        return Err(format!(
            "--timeout {timeout}: at least {MIN_TIMEOUT:.0} second (the processes need about that to \
             meet); pass a longer deadline"
        ));
    }
    let max_timeout = rendezvous::Flags::MAX_TIMEOUT.as_secs_f64();
    if timeout > max_timeout {
        return Err(format!(
            "--timeout {timeout}: at most {max_timeout:.0} seconds (a year); pass a shorter deadline"
        ));
    }
    Ok(())
}

/// What rank 0 gathered from every rank, once they met.
fn gathered(events: &[Event]) -> Option<&rendezvous::Gathered> {
    events.iter().find_map(|e| match e {
        Event::Gathered(g) => Some(g),
        _ => None,
    })
}

/// Rank 0's ruling, where the job runs NCCL although it found a cause.
fn cause(events: &[Event]) -> Option<&str> {
    events.iter().find_map(|e| match e {
        Event::Cause(c) => Some(c.as_str()),
        _ => None,
    })
}

/// `settings` in `--json`: each `NCCL_*` setting in force and its source.
fn settings_json(settings: &[crate::facts::settings::Setting]) -> serde_json::Value {
    json!(settings
        .iter()
        .map(|s| json!({"name": s.name, "value": s.value, "source": s.source.to_string()}))
        .collect::<Vec<_>>())
}

/// `exchange` in `--json`: how this process meets the others.
fn meeting_json(m: &Meeting) -> serde_json::Value {
    json!({
        "id": m.backend,
        "launcher": m.launcher,
        "at": m.job.exchange.describe(),
        "from": m.from,
        "token": m.token_from,
        "rank": m.job.rank,
        "world": m.job.world,
        "local_rank": m.local_rank,
    })
}

fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// NCCL's log for this run ([`smoke::Capture`]), copied to stderr at the
/// end where it would otherwise have broken `--json`.
struct Captured(smoke::Capture);

impl Drop for Captured {
    fn drop(&mut self) {
        let mut err = std::io::stderr().lock();
        for line in self.0.echo_lines() {
            say(&mut err, &line);
        }
    }
}

/// The options and the NCCL to load, or the exit status: a usage error
/// comes first (2), before the search for NCCL.
fn prepared(
    a: &Args,
    probed: impl FnOnce() -> Result<PathBuf, String>,
) -> Result<(Options, Option<Meeting>), ExitCode> {
    let (mut opts, meeting) =
        options(a, PathBuf::new(), &LaunchEnv::from_process()).map_err(|e| {
            say(&mut std::io::stderr(), &format!("nccl-find smoke: {e}"));
            ExitCode::from(2)
        })?;
    opts.lib = library(a, probed)?;
    Ok((opts, meeting))
}

/// NCCL logs through C's stdio, which holds its lines back when stdout is
/// a file (`NCCL_DEBUG=INFO > log`): out with them before the verdict, so
/// that the verdict stays the last line.
fn flush_nccls_log() {
    // SAFETY: fflush(NULL) flushes every C output stream and closes none.
    unsafe { libc::fflush(std::ptr::null_mut()) };
}

/// Runs the smoke test; `lib` is the probe's choice when `--lib` is absent.
pub fn run(a: &Args, probed: impl FnOnce() -> Result<PathBuf, String>) -> ExitCode {
    let started = Instant::now();
    let (mut opts, meeting) = match prepared(a, probed) {
        Ok(o) => o,
        Err(code) => return code,
    };
    // What the user set, before the capture of NCCL's log sets its own.
    let settings = settings_in_force();
    bring_card(&mut opts, &settings, a.run_nccl_anyway);
    let wake = handle_interrupts();
    let capture = Captured(smoke::Capture::start(a.json));
    watch_interrupts(wake);
    let who = opts
        .job
        .as_ref()
        .map(|j| format!("[rank {}] ", j.rank))
        .unwrap_or_default();
    let mut events = preamble(a, &who, meeting.as_ref(), &settings, &capture);
    let mut out = std::io::stdout();
    let mut table = Table::default();
    let result = smoke::run(&opts, &mut |e: Event| {
        let line = event_line(&who, &e, &mut table);
        if !a.json && !line.is_empty() {
            say(&mut out, &line);
            let _ = out.flush();
        }
        events.push(e);
    });
    flush_nccls_log();
    let wall = started.elapsed().as_secs_f64();
    let (code, verdict, top, floor) = ending(a, &result, wall, gathered(&events), cause(&events));
    let judged = judge(&result, top, &capture);
    let slow = result
        .as_ref()
        .ok()
        .map(|s| crate::smoke::nodes::slow_ranks(s, gathered(&events)));
    let warnings = if code == 1 {
        capture.0.last_warnings(10)
    } else {
        Vec::new()
    };
    if a.json {
        let mut doc = json_report(code, &verdict, wall, &events, &warnings, judged.as_ref());
        doc["settings"] = settings_json(&settings);
        if let Some((_, t)) = &slow {
            doc["timings"] = t.clone();
        }
        if let Some(m) = &meeting {
            doc["exchange"] = meeting_json(m);
        }
        if let Some(min) = a.min_busbw {
            doc["min_busbw"] = json!({
                "floor": min,
                "bytes": top.map(|t| t.0),
                "busbw": top.map(|t| t.1),
                "ok": floor.is_none(),
            });
        }
        // A closed pipe (`| head`) ends the output quietly; the exit
        // status is still the test's.
        let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
        let _ = writeln!(std::io::stdout(), "{text}");
    } else {
        for line in slow.iter().flat_map(|s| &s.0) {
            say(&mut std::io::stdout(), &format!("{who}note: {line}"));
        }
        print_ending(
            &who,
            &result,
            &warnings,
            judged.as_ref(),
            &settings,
            &verdict,
            code,
        );
    }
    ExitCode::from(code)
}

/// The report's first lines, before the run: how the processes meet, the
/// settings in force, and what the capture of NCCL's log swept away (an
/// event too, for `--json`).
fn preamble(
    a: &Args,
    who: &str,
    meeting: Option<&Meeting>,
    settings: &[crate::facts::settings::Setting],
    capture: &Captured,
) -> Vec<Event> {
    let mut out = std::io::stdout();
    if let (Some(m), false) = (meeting, a.json) {
        say(&mut out, &format!("{who}note: {}", m.line()));
    }
    if let (Some(line), false) = (settings_line(settings), a.json) {
        say(&mut out, &format!("{who}{line}"));
    }
    let mut events = Vec::new();
    if let Some(n) = capture.0.swept_note() {
        if !a.json {
            say(&mut out, &format!("{who}note: {n}"));
        }
        events.push(Event::Note(n));
    }
    events
}

/// What this process brings to the meeting ([`crate::smoke::nodes::card`]), under
/// a launcher or `--init`: the NCCL it will load, read from the file.
/// Rank 0 judges every card with [`crate::smoke::nodes::blocker`], and stops the
/// job before NCCL on what it finds, unless `run_anyway`.
fn bring_card(opts: &mut Options, settings: &[crate::facts::settings::Setting], run_anyway: bool) {
    let (lib, local_rank) = (opts.lib.clone(), opts.local_rank);
    if let Some(job) = opts.job.as_mut() {
        let version = nccl_find::internal::read_elf(&lib)
            .ok()
            .and_then(|e| e.version())
            .map(|(v, _)| (v.major, v.minor, v.patch));
        job.card = crate::smoke::nodes::card(&lib, version, settings, local_rank);
        job.judge = Some(crate::smoke::nodes::blocker);
        job.run_anyway = run_anyway;
    }
}

/// The text report's last lines: NCCL's last warnings (stderr), what the
/// hardware allowed, and the verdict.
#[allow(clippy::too_many_arguments)]
fn print_ending(
    who: &str,
    result: &Result<smoke::Summary, Failure>,
    warnings: &[String],
    judged: Option<&smoke::verdict::Judgement>,
    settings: &[crate::facts::settings::Setting],
    verdict: &str,
    code: u8,
) {
    let mut err = std::io::stderr();
    if !warnings.is_empty() {
        say(&mut err, &format!("{who}NCCL's last warnings:"));
        for w in warnings {
            say(&mut err, &format!("{who}  {w}"));
        }
    }
    if let Some(v) = judged {
        say(
            &mut std::io::stdout(),
            &format!("{who}hardware: {}", v.line),
        );
        if let Some(line) = sockets_why(v, settings) {
            say(&mut std::io::stdout(), &format!("{who}hardware: {line}"));
        }
    }
    if matches!(result, Err(Failure::Stopped(_))) {
        say(
            &mut std::io::stdout(),
            &format!(
                "{who}note: NCCL was not started: the meeting showed that it cannot work here \
                 (--run-nccl-anyway starts it regardless)"
            ),
        );
    }
    say(&mut std::io::stdout(), &format!("{who}{verdict}"));
    // A failure is said on stderr too, where that is somewhere else (a
    // launcher's log of errors); on a terminal, or with 2>&1, it is said once.
    if code != 0 && !same_destination() {
        say(&mut err, &format!("nccl-find smoke: {verdict}"));
    }
}

/// One line of the human report, made safe for a terminal (paths,
/// variables, addresses and peers' text may hold anything).
fn say(w: &mut impl Write, line: &str) {
    let _ = writeln!(w, "{}", crate::style::terminal_safe(line));
}

/// Whether stdout and stderr are the same file (one terminal, or `2>&1`).
fn same_destination() -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |fd: &str| {
        std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    matches!((id("1"), id("2")), (Some(a), Some(b)) if a == b)
}

/// Why NCCL chose sockets although an RDMA adapter is ACTIVE here, from
/// doctor's findings on this machine.
fn sockets_why(
    v: &smoke::verdict::Judgement,
    settings: &[crate::facts::settings::Setting],
) -> Option<String> {
    let Some(smoke::verdict::Transport::Net(t)) = &v.transport else {
        return None;
    };
    // Only sockets need explaining: the host is read for nothing else.
    if !t.starts_with("NET/Socket") {
        return None;
    }
    let env: Vec<(String, String)> = settings
        .iter()
        .map(|s| (s.name.clone(), s.value.clone()))
        .collect();
    crate::doctor::sockets_despite_an_adapter(t, &crate::facts::host::Facts::gather(), &env)
}

/// The settings line of the report, where any is set: each `NAME=value`,
/// and the file it came from where a configuration file set it.
fn settings_line(settings: &[crate::facts::settings::Setting]) -> Option<String> {
    if settings.is_empty() {
        return None;
    }
    let list: Vec<String> = settings
        .iter()
        .map(|s| match &s.source {
            crate::facts::settings::Source::Environment => format!("{}={}", s.name, s.value),
            crate::facts::settings::Source::File(p) => {
                format!("{}={} ({})", s.name, s.value, p.display())
            }
        })
        .collect();
    Some(format!(
        "settings: {}",
        nccl_find::internal::escape_os(list.join(", ").as_ref())
    ))
}

/// The `NCCL_*` settings NCCL will run with here: this process's
/// environment, then NCCL's configuration files.
fn settings_in_force() -> Vec<crate::facts::settings::Setting> {
    crate::facts::settings::read(
        &crate::facts::settings::process_env(),
        std::path::Path::new("/"),
        crate::facts::settings::ConfRules::of(None),
    )
    .0
}

/// The exit status and the verdict, with `--min-busbw`'s figure and why it
/// failed the run, where it did (or, on rank 0, a problem between nodes).
/// The one place that ranks what the last line says: a cause the meeting
/// found (rank 0's ruling, on every rank: the job stopped before NCCL, or
/// NCCL ran anyway and failed) outranks the symptom it causes (NCCL's
/// error, a timeout, a rank gone), which follows it.
fn ending(
    a: &Args,
    result: &Result<smoke::Summary, Failure>,
    wall: f64,
    gathered: Option<&rendezvous::Gathered>,
    cause: Option<&str>,
) -> (u8, String, Option<(usize, f64)>, Option<String>) {
    let top = largest(result);
    let floor = a.min_busbw.and_then(|min| below_floor(&top, min));
    let between = gathered.and_then(|g| {
        let problems: Vec<String> = crate::smoke::nodes::report(g)
            .into_iter()
            .filter(|(p, _)| *p)
            .map(|(_, l)| l)
            .collect();
        (!problems.is_empty()).then(|| {
            format!(
                "{} problem(s) between nodes, first: {}",
                problems.len(),
                problems[0]
            )
        })
    });
    let why = floor.clone().or(between);
    let code = match (exit_code(result), &why) {
        (0, Some(_)) => 1,
        (c, _) => c,
    };
    let ok = result.as_ref().is_ok_and(|s| s.ok);
    let (code, verdict) = match (cause, &why) {
        // NCCL ran anyway and failed, or nothing ran that could show the
        // cause wrong: the cause first, then what NCCL said.
        (Some(c), _) if !ok || a.rendezvous_only => {
            let then = match failed_text(result) {
                Some(t) => format!(" (then: {t})"),
                None => String::new(),
            };
            (code.max(1), format!("FAILED: {c}{then} ({wall:.2} s)"))
        }
        (_, Some(why)) if ok => (code, format!("FAILED: {why} ({wall:.2} s)")),
        _ => (code, verdict_line(result, a.rendezvous_only, wall)),
    };
    (code, verdict, top, floor)
}

/// The largest size of a run that finished, and the better bus bandwidth
/// there (out of place or in place) of its first row (the all-reduce's,
/// where it ran); `None` when nothing was timed.
fn largest(result: &Result<smoke::Summary, Failure>) -> Option<(usize, f64)> {
    let s = result.as_ref().ok()?;
    smoke::Row::first_largest(&s.rows).map(|r| (r.bytes, r.oop.busbw.max(r.ip.busbw)))
}

/// Why `--min-busbw GBPS` fails the run: the bus bandwidth at the largest
/// size is below it (`None`: it is not, or nothing was timed).
fn below_floor(largest: &Option<(usize, f64)>, min: f64) -> Option<String> {
    let (bytes, busbw) = (*largest)?;
    (busbw < min).then(|| {
        format!(
            "the bus bandwidth at {} is {busbw:.1} GB/s, below --min-busbw {min} GB/s",
            match human(bytes) {
                h if h.ends_with(['K', 'M', 'G']) => format!("{h}iB"),
                h => format!("{h} bytes"),
            }
        )
    })
}

/// The hardware verdict at the largest size (`top`, from [`largest`]),
/// after a run that finished.
fn judge(
    result: &Result<smoke::Summary, Failure>,
    top: Option<(usize, f64)>,
    capture: &Captured,
) -> Option<smoke::verdict::Judgement> {
    let s = result.as_ref().ok()?;
    let (bytes, busbw) = top?;
    Some(smoke::verdict::judge(
        &s.topology,
        busbw,
        bytes,
        s.nranks,
        &capture.0.transport_lines(),
        &|n| std::env::var(n).ok(),
    ))
}

/// The NCCL file to load: `--lib` (which must be a readable file), else the
/// probe's choice. Says why not, and the exit status, when there is none.
fn library(
    a: &Args,
    probed: impl FnOnce() -> Result<PathBuf, String>,
) -> Result<PathBuf, ExitCode> {
    match &a.lib {
        Some(p) => {
            // The exact file checked is the file loaded: a bare name given to
            // dlopen would be searched for on the loader's path instead.
            let p = &match std::path::absolute(p) {
                Ok(abs) => abs,
                Err(e) => {
                    say(&mut std::io::stderr(), &format!("nccl-find smoke: --lib {}: {e}", p.display()));
                    return Err(ExitCode::from(2));
                }
            };
            let why = match std::fs::metadata(p) {
                Ok(m) if m.is_file() => None,
                Ok(_) => Some("not a file".to_string()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    Some("no such file".to_string())
                }
                Err(e) => Some(format!("cannot be read ({e})")),
            };
            if let Some(why) = why {
                say(&mut std::io::stderr(), &format!("nccl-find smoke: --lib {}: {why}", p.display()));
                return Err(ExitCode::from(2));
            }
            Ok(p.clone())
        }
        None => probed().map_err(|e| {
            say(&mut std::io::stderr(), &format!("nccl-find smoke: no NCCL to load: {e}\nRun `nccl-find --print`, or pass --lib PATH."));
            ExitCode::from(1)
        }),
    }
}

/// Where the text report's table is: its header said, the collective (and
/// reduction) of the last row.
#[derive(Default)]
struct Table {
    header: bool,
    op: String,
}

/// A row's collective, with its reduction where it reduces:
/// `reduce-scatter (prod)`.
fn op_label(r: &smoke::Row) -> String {
    match r.redop {
        Some(red) => format!("{} ({})", r.op, red.name()),
        None => r.op.to_string(),
    }
}

/// An event as a line of the text report (`who`: this rank's prefix); the
/// table's header comes before the first row, and a collective's name
/// before its first row (but the all-reduce's, when it comes first).
fn event_line(who: &str, e: &Event, table: &mut Table) -> String {
    match e {
        Event::Loaded { path, version } => format!("{who}NCCL {version} from {}", path.display()),
        Event::Devices { gpus, nranks, first_rank, seed } => {
            let g: Vec<String> = gpus.iter().map(|(o, n)| format!("{o} {n}")).collect();
            let last = first_rank + gpus.len() - 1;
            let ranks = if last == *first_rank { format!("rank {first_rank}") } else { format!("ranks {first_rank}-{last}") };
            format!("{who}GPUs: {}; {ranks} of {nranks}; seed {seed}", g.join(", "))
        }
        Event::Note(n) => format!("{who}note: {n}"),
        Event::Cause(c) => format!("{who}note: NCCL runs (--run-nccl-anyway), although the meeting showed: {c}"),
        Event::Gathered(g) => crate::smoke::nodes::report(g)
            .into_iter()
            .enumerate()
            .map(|(i, (problem, l))| {
                let tag = if problem { "problem: " } else if i == 0 { "" } else { "  " };
                format!("{who}{tag}{l}")
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Event::Row(r) => format!(
            "{}{}{who}{:>10} {:>11} {:>6} | {:>10.1} {:>8.2} {:>8.2} {:>7} | {:>10.1} {:>8.2} {:>8.2} {:>7}",
            // Each collective but the default's first row names it.
            match std::mem::replace(&mut table.op, op_label(r)) {
                last if last == table.op || (last.is_empty() && table.op == "all-reduce (sum)") => String::new(),
                _ => format!("{who}{}:\n", table.op),
            },
            if std::mem::replace(&mut table.header, true) {
                String::new()
            } else {
                format!(
                    "{who}{:>10} {:>11} {:>6} | {:>10} {:>8} {:>8} {:>7} | {:>10} {:>8} {:>8} {:>7}\n{who}{:>10} {:>11} {:>6} | {:>10} {:>8} {:>8} {:>7} | {:>10} {:>8} {:>8} {:>7}\n",
                    "size", "count", "type", "oop us", "algbw", "busbw", "#wrong", "ip us", "algbw", "busbw", "#wrong",
                    "(bytes)", "(elements)", "", "", "(GB/s)", "(GB/s)", "", "", "(GB/s)", "(GB/s)", ""
                )
            },
            human(r.bytes), r.count, r.dtype.name(),
            r.oop.time_us, r.oop.algbw, r.oop.busbw, r.oop.wrong,
            r.ip.time_us, r.ip.algbw, r.ip.busbw, r.ip.wrong
        ),
        // An event of a newer nccl-smoke: shown as it is.
        e => format!("{who}{e:?}"),
    }
}

/// The exit status: 0 every element right everywhere, 1 a wrong element or
/// a failure, 2 a usage error, [`NO_GPU`] no driver or no GPU.
fn exit_code(result: &Result<smoke::Summary, Failure>) -> u8 {
    match result {
        Ok(s) if s.ok => 0,
        Ok(_) => 1,
        Err(Failure::NoDriver(_) | Failure::NoGpu(_)) => NO_GPU,
        Err(Failure::Usage(_)) => 2,
        Err(_) => 1,
    }
}

/// The last line: OK, or FAILED with every reason (here and on the other
/// ranks), and the wall time. With `--rendezvous-only` an OK says that the
/// ranks met, and that no all-reduce ran.
fn verdict_line(result: &Result<smoke::Summary, Failure>, met_only: bool, wall: f64) -> String {
    match result {
        Ok(s) if s.ok => {
            let agree = if s.peers.is_empty() {
                String::new()
            } else {
                format!(", {} other process(es) agree", s.peers.len())
            };
            if met_only {
                format!(
                    "OK: {} rank(s) met, no all-reduce run (--rendezvous-only){agree} ({wall:.2} s)",
                    s.nranks
                )
            } else {
                if s.rows.is_empty() {
                    return format!(
                        "OK: no call ran: each one asked for was skipped (the notes say why){agree} ({wall:.2} s)"
                    );
                }
                let calls = calls(&s.rows);
                format!(
                    "OK: every element of {} {calls} right on {} rank(s){agree} ({wall:.2} s)",
                    s.rows.len() * 2,
                    s.nranks
                )
            }
        }
        _ => format!(
            "FAILED: {} ({wall:.2} s)",
            failed_text(result).unwrap_or_default()
        ),
    }
}

/// What failed, in words: every reason (here and on the other ranks), or
/// the failure; `None` where every element everywhere was right.
fn failed_text(result: &Result<smoke::Summary, Failure>) -> Option<String> {
    match result {
        Ok(s) if s.ok => None,
        Ok(s) => {
            let mut why = Vec::new();
            if s.wrong > 0 {
                why.push(format!("{} wrong element(s) here", s.wrong));
            }
            for p in &s.peers {
                match &p.done {
                    Some((true, _, _)) => {}
                    Some((false, 0, m)) => why.push(format!("rank {} failed: {m}", p.rank)),
                    Some((false, w, m)) => {
                        why.push(format!("rank {} reported {w} wrong ({m})", p.rank))
                    }
                    None => why.push(match &p.why {
                        Some(w) => format!("rank {} never reported: {w}", p.rank),
                        None => format!(
                            "rank {} never reported (killed, or past the deadline)",
                            p.rank
                        ),
                    }),
                }
            }
            Some(why.join("; "))
        }
        Err(f) => Some(f.to_string()),
    }
}

/// What the rows ran, for the verdict: `all-reduce(s)` (the default), or
/// `call(s) (all-reduce, all-gather)`, with the reductions where any is
/// not `sum`: `call(s) (all-reduce, all-gather; sum, prod)`.
fn calls(rows: &[smoke::Row]) -> String {
    let mut ops: Vec<&str> = rows.iter().map(|r| r.op).collect();
    ops.dedup();
    let mut redops: Vec<&str> = Vec::new();
    for r in rows.iter().filter_map(|r| r.redop) {
        if !redops.contains(&r.name()) {
            redops.push(r.name());
        }
    }
    if ops.iter().all(|o| *o == "all-reduce") && redops == ["sum"] {
        "all-reduce(s)".to_string()
    } else if redops.iter().all(|r| *r == "sum") {
        format!("call(s) ({})", ops.join(", "))
    } else {
        format!("call(s) ({}; {})", ops.join(", "), redops.join(", "))
    }
}

/// The `--json` report.
fn json_report(
    code: u8,
    verdict: &str,
    wall: f64,
    events: &[Event],
    warnings: &[String],
    judged: Option<&smoke::verdict::Judgement>,
) -> serde_json::Value {
    let rows: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Row(r) => Some(json!({
                "op": r.op, "redop": r.redop.map(|x| x.name()), "bytes": r.bytes, "count": r.count, "dtype": r.dtype.name(),
                "oop": {"time_us": r.oop.time_us, "algbw": r.oop.algbw, "busbw": r.oop.busbw, "wrong": r.oop.wrong},
                "ip": {"time_us": r.ip.time_us, "algbw": r.ip.algbw, "busbw": r.ip.busbw, "wrong": r.ip.wrong},
            })),
            _ => None,
        })
        .collect();
    let mut doc = json!({"ok": code == 0, "exit": code, "verdict": verdict, "wall_s": wall, "rows": rows,
                         "nccl_warnings": warnings});
    if let Some(v) = judged {
        doc["hardware"] = json!({
            "verdict": v.line,
            "predicted_busbw": v.predicted.as_ref().map(|p| p.0),
            "links": v.predicted.as_ref().map(|p| p.1.clone()),
            "measured_busbw": v.measured,
            "ratio": v.ratio,
            "transport": v.transport.as_ref().map(|t| format!("{t:?}")),
        });
    }
    for e in events {
        match e {
            Event::Loaded { path, version } => {
                doc["library"] = json!(path.display().to_string());
                doc["version"] = json!(version);
            }
            Event::Devices {
                gpus,
                nranks,
                first_rank,
                seed,
            } => {
                doc["gpus"] = json!(gpus
                    .iter()
                    .map(|(o, n)| json!({"ordinal": o, "name": n}))
                    .collect::<Vec<_>>());
                doc["nranks"] = json!(nranks);
                doc["first_rank"] = json!(first_rank);
                doc["seed"] = json!(seed);
            }
            Event::Gathered(g) => doc["nodes"] = crate::smoke::nodes::json(g),
            Event::Note(n) => {
                if let Some(a) = doc["notes"].as_array_mut() {
                    a.push(json!(n));
                } else {
                    doc["notes"] = json!([n]);
                }
            }
            // Rows go under "rows"; an event of a newer nccl-smoke, nowhere.
            _ => {}
        }
    }
    doc
}

/// Where the smoke test's NCCL comes from when `--lib` is absent.
pub fn probed_library(config: &nccl_find::Config) -> Result<PathBuf, String> {
    let n = config.probe().map_err(|e| e.headline())?;
    Ok(n.library_real)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text report of a run of two collectives, the second in two
    /// reductions: each names its rows but the default's first, and the
    /// verdict names the collectives and the reductions.
    #[test]
    fn each_collective_and_reduction_is_named_before_its_rows() {
        let t = |us: f64| smoke::Timing::of(4096, us * 1e-6, 1.0, 0);
        let rows = vec![
            smoke::Row::new(
                "all-reduce",
                Some(Redop::Sum),
                Dtype::F32,
                1024,
                t(5.0),
                t(5.0),
            ),
            smoke::Row::new(
                "all-reduce",
                Some(Redop::Sum),
                Dtype::F8e4m3,
                4096,
                t(5.0),
                t(5.0),
            ),
            smoke::Row::new(
                "all-reduce",
                Some(Redop::Prod),
                Dtype::F32,
                1024,
                t(5.0),
                t(5.0),
            ),
            smoke::Row::new("all-gather", None, Dtype::F32, 1024, t(5.0), t(5.0)),
        ];
        let mut table = Table::default();
        let text: Vec<String> = rows
            .iter()
            .map(|r| event_line("", &Event::Row(r.clone()), &mut table))
            .collect();
        let text = text.join("\n");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2 + 4 + 2, "{text}");
        assert!(lines[2].ends_with(
            "   f32 |        5.0     0.82     0.82       0 |        5.0     0.82     0.82       0"
        ));
        assert!(lines[3].contains("  4096 f8e4m3 |"), "{text}");
        assert_eq!(lines[4], "all-reduce (prod):");
        assert_eq!(lines[6], "all-gather:");
        assert_eq!(calls(&rows), "call(s) (all-reduce, all-gather; sum, prod)");
        // Each datatype and reduction once: in the order given, and in the
        // smoke test's.
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let d = dtypes(&names(&["u64", "all", "f32"])).unwrap();
        assert_eq!((d.len(), d[0], d[1]), (12, Dtype::U64, Dtype::F32));
        let r = redops(&names(&["avg", "sum", "avg"])).unwrap();
        assert_eq!(r, [Redop::Sum, Redop::Avg]);
        assert_eq!(calls(&rows[3..]), "call(s) (all-gather)");
        assert_eq!(calls(&rows[..2]), "all-reduce(s)");
    }

    /// `--ops all` is the full matrix, but for what `--redops` and
    /// `--dtypes` say; otherwise the defaults are the all-reduce's sum in
    /// f32.
    #[test]
    fn ops_all_is_the_full_matrix() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: Args,
        }
        let opts = |args: &[&str]| {
            use clap::Parser;
            let cli = Cli::try_parse_from([&["smoke"], args].concat()).unwrap();
            options(&cli.a, PathBuf::from("/x"), &LaunchEnv::default())
                .unwrap()
                .0
        };
        let o = opts(&[]);
        assert_eq!(
            (o.ops, o.redops, o.dtypes),
            (
                vec!["all-reduce".to_string()],
                vec![Redop::Sum],
                vec![Dtype::F32]
            )
        );
        let o = opts(&["--ops", "all"]);
        assert_eq!((o.ops.len(), o.redops.len(), o.dtypes.len()), (9, 5, 12));
        let o = opts(&["--ops", "all", "--dtypes", "bf16"]);
        assert_eq!((o.redops.len(), o.dtypes), (5, vec![Dtype::Bf16]));
        let o = opts(&["--ops", "all-gather,all-reduce", "--redops", "max"]);
        assert_eq!(
            (o.ops.len(), o.redops, o.dtypes),
            (2, vec![Redop::Max], vec![Dtype::F32])
        );
    }

    #[test]
    fn the_bandwidth_floor_is_the_largest_sizes() {
        assert_eq!(below_floor(&None, 10.0), None);
        assert_eq!(below_floor(&Some((1 << 30, 327.1)), 300.0), None);
        assert_eq!(below_floor(&Some((1 << 30, 300.0)), 300.0), None);
        assert_eq!(
            below_floor(&Some((1 << 30, 327.1)), 400.0).as_deref(),
            Some("the bus bandwidth at 1GiB is 327.1 GB/s, below --min-busbw 400 GB/s")
        );
        assert_eq!(
            below_floor(&Some((1000, 0.25)), 0.5).as_deref(),
            Some("the bus bandwidth at 1000 bytes is 0.2 GB/s, below --min-busbw 0.5 GB/s")
        );
    }
}
