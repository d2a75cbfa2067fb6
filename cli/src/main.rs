//! `nccl-find`: what NCCL is installed, what would be linked, and what
//! will go wrong at run time.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod doctor;
mod host;
mod json;
mod pkgflags;
mod shim;
mod smoke;
mod style;

const AFTER_HELP: &str = "\
Examples:
  nccl-find --print                         what is installed, what would be linked, and why
  nccl-find --json | jq .selected.version   the same, for tools
  cc app.c $(nccl-find --cflags --libs)     build a C program against the NCCL found
  eval \"$(nccl-find --env)\" && python setup.py build
                                            hand the choice to a Makefile, CMake or setup.py build
  eval \"$(nccl-find --loader-env)\" && cargo run
                                            cudarc (and any dlopen of libnccl.so) loads the NCCL found
  nccl-find --atleast-version 2.18          exit 0 if NCCL >= 2.18 is found
  NCCL_HOME=/opt/nccl nccl-find --print     check an install before building against it
  nccl-find doctor                          what will go wrong when NCCL runs, and the fixes
  nccl-find smoke                           a verified all-reduce on every GPU of this machine
  RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 nccl-find smoke
                                            one rank of a job across processes or nodes

Exit status:
  0  found and healthy
  1  not found, or a problem found (smoke: a wrong element, an NCCL error, a deadline)
  2  usage error
  3  smoke: no NVIDIA driver or no GPU";

/// Find NVIDIA's NCCL, check it, and say which install would be linked and why.
#[derive(Parser, Debug)]
#[command(name = "nccl-find", version, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Show the selected install, the cargo directives, every other install
    /// with why it lost, the run-time loader's pick, where it looked, and
    /// every variable read (the default)
    #[arg(long, group = "mode")]
    print: bool,
    /// The same report as a JSON object (keys documented in the README)
    #[arg(long, group = "mode")]
    json: bool,
    /// Print the version, like pkg-config --modversion
    #[arg(long, group = "mode")]
    modversion: bool,
    /// Print the compiler flags (-I...), like pkg-config --cflags
    #[arg(long)]
    cflags: bool,
    /// Print the linker flags, like pkg-config --libs (-l:libnccl.so.2 where
    /// there is no libnccl.so, as in pip wheels)
    #[arg(long)]
    libs: bool,
    /// Print NCCL_INCLUDE_DIR=, NCCL_LIB_DIR=, NCCL_HOME= lines for a shell's eval
    #[arg(long, group = "mode")]
    env: bool,
    /// Print an LD_LIBRARY_PATH for a shell's eval that makes programs which
    /// open NCCL by name (cudarc) load the selected one: a private directory
    /// in your cache whose libnccl.so, libnccl.so.2, ... link to it
    #[arg(long, group = "mode")]
    loader_env: bool,
    /// Require at least this version; alone, print nothing and exit 0 or 1
    #[arg(long, value_name = "VERSION")]
    atleast_version: Option<String>,
    /// Link statically: libnccl_static.a and the static CUDA runtime
    #[arg(long = "static")]
    statik: bool,
    /// Probe for this target triple (default: the one nccl-find was built for)
    #[arg(long, value_name = "TRIPLE")]
    target: Option<String>,
    /// Treat DIR as the filesystem root (sysroots, tests)
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// When to colour the report: auto (a terminal, and NO_COLOR unset), always, never
    #[arg(long, value_name = "WHEN", default_value = "auto")]
    color: style::When,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check what will go wrong when NCCL runs: driver, NCCL variables,
    /// network interfaces, RDMA libraries, /dev/shm, MPI, competing libraries
    Doctor {
        /// The findings as JSON
        #[arg(long)]
        json: bool,
        /// Read the host's facts from this JSON file instead of the machine (tests)
        #[arg(long, value_name = "FILE", hide = true)]
        host_facts: Option<PathBuf>,
        /// Treat DIR as the filesystem root (sysroots, tests)
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
    },
    /// Prove NCCL works: a verified all-reduce on every GPU, in one process
    /// or across processes and nodes (exit 0 only if every element of every
    /// run is right; 3 when there is no driver or no GPU)
    Smoke(smoke::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Some(Command::Smoke(_))) {
        json::quiet_on_closed_pipe();
    }
    let mut config = nccl_find::Config::new();
    config.cargo_metadata(false);
    if let Some(t) = &cli.target {
        if let Err(e) = pkgflags::check_target(t) {
            eprintln!("nccl-find: --target {t}: {e}");
            return ExitCode::from(2);
        }
        config.target(t);
    } else {
        config.target(env!("NCCL_FIND_BUILT_FOR"));
    }
    if let Some(r) = &cli.root {
        config.root(r);
    }
    if let Some(v) = &cli.atleast_version {
        config.atleast_version(v);
    }
    if cli.statik {
        config.statik(true);
    }
    if let Some(Command::Doctor {
        json,
        host_facts,
        root,
    }) = &cli.command
    {
        if let Some(r) = root {
            config.root(r);
        }
        return doctor::run(&config, *json, host_facts.as_deref(), cli.color);
    }
    if let Some(Command::Smoke(args)) = &cli.command {
        return smoke::run(args, || smoke::probed_library(&config));
    }
    let result = config.probe();
    let (report, nccl, error) = match &result {
        Ok(n) => (&n.report, Some(n), None),
        Err(e) => (e.report(), None, Some(e.kind())),
    };
    if cli.loader_env {
        return shim::loader_env(nccl, error);
    }
    let flags = cli.cflags || cli.libs;
    if cli.json {
        println!("{}", json::report(report, nccl, error));
    } else if cli.modversion || flags || cli.env {
        let Some(n) = nccl else {
            eprintln!(
                "nccl-find: {}\nRun `nccl-find --print` to see where it looked and what to do.",
                error.map(|k| k.headline()).unwrap_or_default()
            );
            return ExitCode::from(1);
        };
        let out = if cli.modversion {
            Ok(n.version.to_string().into_bytes())
        } else if cli.env {
            Ok(pkgflags::env(n))
        } else {
            pkgflags::flags(n, cli.cflags, cli.libs)
        };
        match out {
            // Paths byte for byte: one that is not UTF-8 stays the same path.
            Ok(mut bytes) => {
                bytes.push(b'\n');
                let _ = std::io::Write::write_all(&mut std::io::stdout(), &bytes);
            }
            Err(e) => {
                eprintln!("nccl-find: {e}");
                return ExitCode::from(1);
            }
        }
    } else if cli.atleast_version.is_some() && !cli.print {
        // pkg-config style: the answer is the exit status.
        if let Some(kind) = error {
            eprintln!("nccl-find: {}", kind.headline());
        }
    } else {
        let directives = nccl.map(|n| n.cargo_directives()).unwrap_or_default();
        let text = nccl_find::emit::text::report(report, error, &directives);
        print!("{}", style::paint(&text, cli.color.enabled()));
        if let Some(kind) = error {
            eprintln!("nccl-find: {}", kind.headline());
        }
    }
    if let Some(nccl_find::ErrorKind::InvalidRequirement { .. }) = error {
        // A malformed --atleast-version is a usage error.
        ExitCode::from(2)
    } else if error.is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
