//! The smoke test's arguments: the flags, read with the launcher's
//! variables into the run's [`Options`] and the meeting; and the NCCL file
//! to load. A usage error is said before anything else is done.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use nccl_rendezvous::{Flags, LaunchEnv, Meeting};
use nccl_smoke::{self as smoke, Dtype, Options, Redop};

use super::output::say;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
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
    pub(super) min_busbw: Option<f64>,
    /// The report as JSON, at the end
    #[arg(long)]
    pub(super) json: bool,
    /// Only meet the other processes, under any launcher, compare what
    /// every node brings (NCCL, driver, GPUs, settings) and test the network
    /// between the hosts as NCCL will connect, and run no all-reduce: checks
    /// the launch and the network path before a job, with no GPU needed
    #[arg(long)]
    pub(super) rendezvous_only: bool,
    /// After the meeting, name the best N nodes by the pairs' figures
    /// (each node's slower direction), leaving out any node found bad
    /// (rank 0; `leave_out.best` in --json)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) best: Option<u32>,
    /// Start NCCL even where the meeting showed that it cannot work (an
    /// address NCCL will use that another node cannot reach, a
    /// NCCL_SOCKET_IFNAME that leaves a rank no interface, NCCL releases
    /// of another minor version): for NCCL's own error. Without it, every
    /// rank stops before NCCL with the cause and the fix
    #[arg(long)]
    pub(super) run_nccl_anyway: bool,
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
pub(super) fn options(
    a: &Args,
    lib: PathBuf,
    env: &LaunchEnv,
) -> Result<(Options, Option<Meeting>), String> {
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
    if a.rendezvous_only && meeting.is_none() {
        return Err("--rendezvous-only meets other processes: run it under a launcher (torchrun, srun, mpirun), or pass --world-size N and --init tcp://HOST:PORT".into());
    }
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
pub(super) fn dtypes(names: &[String]) -> Result<Vec<Dtype>, String> {
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
pub(super) fn redops(names: &[String]) -> Result<Vec<Redop>, String> {
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
    let max_timeout = Flags::MAX_TIMEOUT.as_secs_f64();
    if timeout > max_timeout {
        return Err(format!(
            "--timeout {timeout}: at most {max_timeout:.0} seconds (a year); pass a shorter deadline"
        ));
    }
    Ok(())
}

/// The options and the NCCL to load, or the exit status: a usage error
/// comes first (2), before the search for NCCL.
pub(super) fn prepared(
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
            // The cause and its fix last: `--print` and `--lib` before it.
            say(&mut std::io::stderr(), &format!("nccl-find smoke: `nccl-find --print` shows where NCCL was looked for; --lib PATH names one\nnccl-find smoke: no NCCL to load: {e}"));
            ExitCode::from(1)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each datatype and reduction once: in the order given, and in the
    /// smoke test's.
    #[test]
    fn each_datatype_and_reduction_once() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let d = dtypes(&names(&["u64", "all", "f32"])).unwrap();
        assert_eq!((d.len(), d[0], d[1]), (12, Dtype::U64, Dtype::F32));
        let r = redops(&names(&["avg", "sum", "avg"])).unwrap();
        assert_eq!(r, [Redop::Sum, Redop::Avg]);
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
}
