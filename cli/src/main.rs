//! `nccl-find`: what NCCL is installed, what would be linked, and what
//! will go wrong at run time.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use nccl_find::{Config, ErrorKind, Nccl};
use pkgflags::Constraint;

// The rooms, lowest layer first (ARCHITECTURE.md, "Layers of the
// command"; tests/architecture.rs checks that imports run down them).
mod json;
mod style;

mod facts;

mod rules;

mod buildsys;
mod doctor;
mod explain;
mod ras;
mod smoke;

use buildsys::{cmake, pkgflags, shim};

const PKG_CONFIG: &str = "pkg-config drop-in (nccl-find [OPTIONS] nccl)";

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
  PKG_CONFIG=$(command -v nccl-find) cmake -S . -B build
                                            nccl-find answers CMake's and meson's pkg-config questions for nccl
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
    /// The same report as a JSON object (its keys: docs/json.md)
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
    /// Package names, with version comparisons, as pkg-config takes them:
    /// `nccl`, `nccl >= 2.18` (nccl-find answers for nccl only)
    #[arg(value_name = "PACKAGE", help_heading = PKG_CONFIG)]
    packages: Vec<String>,
    /// Print nothing; exit 0 if NCCL is found (and meets the versions asked), else 1
    #[arg(long, help_heading = PKG_CONFIG)]
    exists: bool,
    /// Print only the -L flags of --libs
    #[arg(long = "libs-only-L", help_heading = PKG_CONFIG)]
    libs_only_dirs: bool,
    /// Print only the -l flags of --libs
    #[arg(long = "libs-only-l", help_heading = PKG_CONFIG)]
    libs_only_l: bool,
    /// Print the --libs flags that are neither -L nor -l (NCCL has none)
    #[arg(long = "libs-only-other", help_heading = PKG_CONFIG)]
    libs_only_other: bool,
    /// Print only the -I flags of --cflags
    #[arg(long = "cflags-only-I", help_heading = PKG_CONFIG)]
    cflags_only_include: bool,
    /// Print the --cflags flags that are not -I (NCCL has none)
    #[arg(long = "cflags-only-other", help_heading = PKG_CONFIG)]
    cflags_only_other: bool,
    /// Print a variable of nccl.pc: prefix, includedir or libdir
    #[arg(long, value_name = "NAME", group = "mode", help_heading = PKG_CONFIG)]
    variable: Option<String>,
    /// Print the names of the variables --variable answers
    #[arg(long, group = "mode", help_heading = PKG_CONFIG)]
    print_variables: bool,
    /// Require exactly this version (X.Y.Z)
    #[arg(long, value_name = "VERSION", help_heading = PKG_CONFIG)]
    exact_version: Option<String>,
    /// Require at most this version
    #[arg(long, value_name = "VERSION", help_heading = PKG_CONFIG)]
    max_version: Option<String>,
    /// Say why, on stderr, when --exists or a version check fails
    #[arg(long, help_heading = PKG_CONFIG)]
    print_errors: bool,
    /// Say why in one line, without the hint that follows
    #[arg(long, help_heading = PKG_CONFIG)]
    short_errors: bool,
    /// Say nothing on stderr when NCCL is not found
    #[arg(long, help_heading = PKG_CONFIG)]
    silence_errors: bool,
    /// Print `export NCCL_INCLUDE_DIR=`, NCCL_LIB_DIR=, NCCL_HOME=, NCCL_ROOT= lines for a
    /// shell's eval (for a wheel, a lib dir where -lnccl links)
    #[arg(long, group = "mode")]
    env: bool,
    /// Print an LD_LIBRARY_PATH for a shell's eval that makes programs which
    /// open NCCL by name (cudarc) load the selected one: a private directory
    /// in your cache whose libnccl.so, libnccl.so.2, ... link to it
    #[arg(long, group = "mode")]
    loader_env: bool,
    /// Write NCCLConfig.cmake and NCCLConfigVersion.cmake for the selected
    /// install into DIR, so that CMake's find_package(NCCL CONFIG) (with
    /// NCCL_DIR=DIR) gives NCCL::nccl, a wheel's included
    #[arg(long, value_name = "DIR", group = "mode")]
    cmake_config: Option<PathBuf>,
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
    #[arg(long, value_name = "WHEN", default_value = "auto", global = true)]
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
        /// Judge the host facts in this JSON file (the "facts" object of
        /// `doctor --json`, from another machine) instead of this machine's;
        /// an `env` object in it stands for the environment's NCCL_* variables
        #[arg(long, value_name = "FILE")]
        host_facts: Option<PathBuf>,
        /// Treat DIR as the filesystem root (sysroots, tests)
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
        /// The Python environment to judge: an interpreter or an
        /// environment's directory (default: VIRTUAL_ENV, CONDA_PREFIX, the
        /// python on PATH)
        #[arg(long, value_name = "PATH")]
        python: Option<PathBuf>,
    },
    /// Prove NCCL works: a verified all-reduce on every GPU (--ops, --redops
    /// and --dtypes for every other collective, reduction and datatype), in
    /// one process or across processes and nodes (exit 0 only if every
    /// element of every run is right; 3 when there is no driver or no GPU)
    Smoke(Box<smoke::Args>),
    /// Ask NCCL's own RAS service (NCCL 2.24+) about the running job, and
    /// name the rank to look at: gone, in error, or behind the others
    /// (exit 0 healthy or moving, 1 a rank to look at, 2 nothing answered)
    Ras(ras::Args),
    /// Read a job's own logs (one file per rank or node, or one with every
    /// rank's lines; standard input when none is named) and name the
    /// cause of its failure, the ranks and hosts, and the fix (exit 0 the
    /// job ended well, 1 a failure or hang, 2 nothing could be read)
    Explain(explain::Args),
}

/// What the flags ask for, worked out once from them.
struct Asked {
    /// The parts of `--cflags` and `--libs` to print.
    parts: pkgflags::Parts,
    /// pkg-config's style: `--exists`, or package names.
    pkg_mode: bool,
    /// A check with no output (`--exists`, or a package and versions alone):
    /// it answers with its exit status.
    check_only: bool,
    /// Whether pkg-config's rules keep stderr quiet.
    quiet: bool,
}

impl Asked {
    fn of(cli: &Cli) -> Asked {
        let parts = pkgflags::Parts {
            include: cli.cflags || cli.cflags_only_include,
            cflags_other: cli.cflags || cli.cflags_only_other,
            lib_dirs: cli.libs || cli.libs_only_dirs,
            libs: cli.libs || cli.libs_only_l,
            libs_other: cli.libs || cli.libs_only_other,
        };
        let output = parts.any() || cli.print || cli.json || cli.loader_env || prints_value(cli);
        let versions = cli.atleast_version.is_some()
            || cli.exact_version.is_some()
            || cli.max_version.is_some();
        // pkg-config's rules: a check with no output (--exists, or a package
        // and versions alone) answers with its exit status, and says why only
        // with --print-errors.
        let pkg_mode = cli.exists || !cli.packages.is_empty();
        let check_only = cli.exists || (!output && (pkg_mode || versions));
        let quiet = !cli.print_errors && (cli.silence_errors || (check_only && pkg_mode));
        Asked {
            parts,
            pkg_mode,
            check_only,
            quiet,
        }
    }

    /// Says `msg` on stderr, unless pkg-config's rules keep quiet.
    fn say(&self, msg: &str) {
        if !self.quiet {
            style::complain(msg);
        }
    }
}

/// Whether the flags ask for one of pkg-config's values (other than the
/// flags of `--cflags` and `--libs`).
fn prints_value(cli: &Cli) -> bool {
    cli.modversion || cli.env || cli.variable.is_some() || cli.print_variables
}

fn main() -> ExitCode {
    // doctor's child, which loads one NCCL library and asks it for its
    // parameters (never shown in --help: it is no user's command).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let [_, flag, file] = &args[..] {
        if flag == facts::params::CHILD_FLAG {
            return facts::params::child(std::path::Path::new(file));
        }
    }
    let cli = Cli::parse();
    if let Some(Command::Ras(args)) = &cli.command {
        json::quiet_on_closed_pipe();
        return ras::run(args, cli.color);
    }
    if let Some(Command::Explain(args)) = &cli.command {
        json::quiet_on_closed_pipe();
        return explain::run(args, cli.color);
    }
    if !matches!(cli.command, Some(Command::Smoke(_))) {
        json::quiet_on_closed_pipe();
    }
    let asked = Asked::of(&cli);
    let (mut config, constraints) = match configure(&cli, &asked) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match &cli.command {
        Some(Command::Doctor {
            json,
            host_facts,
            root,
            python,
        }) => {
            if let Some(r) = root {
                config.root(r);
            }
            // Python processes run on this machine, not in a sysroot.
            let py = match root.is_none() && cli.root.is_none() {
                true => doctor::PythonReport::gather(python.as_deref()),
                false => None,
            };
            let root = root.as_deref().or(cli.root.as_deref());
            let root = root.unwrap_or(std::path::Path::new("/"));
            doctor::run(&config, root, *json, host_facts.as_deref(), cli.color, py)
        }
        Some(Command::Smoke(args)) => smoke::run(args, || smoke::probed_library(&config)),
        Some(Command::Ras(_) | Command::Explain(_)) => unreachable!("answered above"),
        None => answer(&cli, &asked, config, &constraints),
    }
}

/// The probe's configuration from the flags, and the version constraints
/// asked for (a `!=` one is checked after the probe). `Err` is the exit
/// status of an error already reported.
fn configure(cli: &Cli, asked: &Asked) -> Result<(Config, Vec<Constraint>), ExitCode> {
    let mut config = Config::new();
    config.cargo_metadata(false);
    if let Some(t) = &cli.target {
        if let Err(e) = pkgflags::check_target(t) {
            style::complain(&format!("--target {t}: {e}"));
            return Err(ExitCode::from(2));
        }
        config.target(t);
    } else {
        config.target(env!("NCCL_FIND_BUILT_FOR"));
    }
    if let Some(r) = &cli.root {
        config.root(r);
    }
    let doctor_root = matches!(&cli.command, Some(Command::Doctor { root: Some(_), .. }));
    if cli.root.is_none() && !doctor_root {
        if let Some(prefix) = installed_prefix() {
            config.python_prefix(prefix);
        }
    }
    let constraints = versions(cli, asked, &mut config)?;
    if cli.statik {
        config.statik(true);
    }
    Ok((config, constraints))
}

/// The Python environment this program is installed in, where it is one:
/// `<prefix>/bin/nccl-find` (as pip installs it) with `<prefix>/pyvenv.cfg`
/// (a venv) or `<prefix>/lib/python3*` (conda, `pip install --user`). The
/// file the process runs (its links resolved), so a pipx link finds pipx's
/// venv.
fn installed_prefix() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?;
    if bin.file_name()? != "bin" {
        return None;
    }
    let prefix = bin.parent()?;
    let python_lib = || {
        std::fs::read_dir(prefix.join("lib")).is_ok_and(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("python3"))
        })
    };
    (prefix.join("pyvenv.cfg").is_file() || python_lib()).then(|| prefix.to_path_buf())
}

/// The versions asked for, by package arguments (`nccl >= 2.18`) and the
/// `--*-version` flags, set on `config`; returns them all.
fn versions(cli: &Cli, asked: &Asked, config: &mut Config) -> Result<Vec<Constraint>, ExitCode> {
    let mut constraints = match pkgflags::parse_modules(&cli.packages) {
        Ok(c) => c,
        Err(e @ pkgflags::ModuleError::NotNccl(_)) => {
            asked.say(&e.to_string());
            return Err(ExitCode::from(1));
        }
        Err(e) => {
            // A usage error: said even where pkg-config's rules are quiet.
            style::complain(&e.to_string());
            return Err(ExitCode::from(2));
        }
    };
    match (&cli.atleast_version, constraints.is_empty()) {
        (Some(v), true) if cli.exact_version.is_none() && cli.max_version.is_none() => {
            config.atleast_version(v);
        }
        _ => {
            for (op, v) in [
                (">=", &cli.atleast_version),
                ("=", &cli.exact_version),
                ("<=", &cli.max_version),
            ] {
                if let Some(v) = v {
                    constraints.push(Constraint {
                        op,
                        version: v.clone(),
                    });
                }
            }
            if let Some(req) = pkgflags::semver_requirement(&constraints) {
                config.version_req(&req);
            }
        }
    }
    Ok(constraints)
}

/// Without a subcommand: probes, and prints what the flags ask for.
fn answer(cli: &Cli, asked: &Asked, mut config: Config, constraints: &[Constraint]) -> ExitCode {
    let result = probe(cli, asked, &mut config);
    let (report, nccl, error) = match &result {
        Ok(n) => (&n.report, Some(n), None),
        Err(e) => (e.report(), None, Some(e.kind())),
    };
    // The failure's first line: the install that came nearest and its fix.
    let headline = result.as_ref().err().map(nccl_find::Error::headline);
    if cli.loader_env {
        return shim::loader_env(nccl, headline.as_deref());
    }
    if let Some(dir) = &cli.cmake_config {
        return cmake_config(nccl, headline.as_deref(), dir);
    }
    // A `!=` the selected version breaks: not found, as pkg-config says.
    let unwanted = nccl.and_then(|n| pkgflags::excluded(constraints, &n.version));
    if let (Some(n), Some(c)) = (nccl, unwanted) {
        if !cli.json && !cli.print {
            asked.say(&format!(
                "NCCL {} was found, but 'nccl != {}' was asked for",
                n.version, c.version
            ));
            return ExitCode::from(1);
        }
    }
    if cli.json {
        println!("{}", json::report(report, nccl, headline.as_deref()));
    } else if asked.check_only {
        if let Some(h) = &headline {
            asked.say(h);
        }
        // pkg-config's check (CMake's pkg_check_modules makes it first):
        // an NCCL whose nccl.h cannot compile here, for want of the CUDA
        // headers it includes, is not one a build can use.
        if let (true, Some(Err(why))) = (asked.pkg_mode, nccl.map(|n| &n.cuda_include_dirs)) {
            asked.say(&format!(
                "NCCL is here, but its nccl.h cannot compile: {why}"
            ));
            return ExitCode::from(1);
        }
    } else if asked.parts.any() || prints_value(cli) {
        return print_value(cli, asked, nccl, error, headline.as_deref());
    } else {
        let directives = nccl.map(|n| n.cargo_directives()).unwrap_or_default();
        let text = nccl_find::internal::report(
            report,
            error,
            &directives,
            nccl.map(|n| &n.cuda_include_dirs),
        );
        print!("{}", style::human(&text, cli.color));
        if let Some(h) = &headline {
            style::complain(h);
        }
    }
    exit_status(error)
}

/// `--cmake-config DIR`: writes the package, and says how CMake finds it.
fn cmake_config(nccl: Option<&Nccl>, headline: Option<&str>, dir: &std::path::Path) -> ExitCode {
    let Some(n) = nccl else {
        style::complain(&style::not_found(headline));
        return ExitCode::from(1);
    };
    // A relative DIR is checked, written and named as the path it means.
    let dir = &match std::path::absolute(dir) {
        Ok(d) => d,
        Err(e) => {
            style::complain(&format!(
                "--cmake-config: cannot resolve {}: {e}",
                dir.display()
            ));
            return ExitCode::from(1);
        }
    };
    match cmake::write(n, dir) {
        Ok(files) => {
            for f in files {
                println!("wrote {}", nccl_find::internal::escape_os(f.as_os_str()));
            }
            println!(
                "find_package(NCCL CONFIG) finds NCCL {} there with -DNCCL_DIR={}",
                n.library_version,
                nccl_find::internal::escape_os(dir.as_os_str())
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            style::complain(&format!("--cmake-config: {e}"));
            ExitCode::from(1)
        }
    }
}

/// `config.probe()`, where pkg-config's `--static` falls back to the
/// dynamic flags.
fn probe(cli: &Cli, asked: &Asked, config: &mut Config) -> Result<Nccl, nccl_find::Error> {
    let result = config.probe();
    if asked.pkg_mode && cli.statik {
        // pkg-config's --static adds a package's private dependencies; it
        // never fails for want of a static archive, and CMake asks for
        // --static flags on every configure. So where the install has no
        // static library, the drop-in answers with the dynamic flags.
        if let Err(e) = &result {
            if matches!(
                e.kind(),
                ErrorKind::StaticMissing { .. } | ErrorKind::CudartStaticMissing { .. }
            ) {
                config.statik(false);
                return config.probe();
            }
        }
    }
    result
}

/// Prints one of pkg-config's values: `--modversion`, the flags of
/// `--cflags` and `--libs` (or their parts), `--env`, `--variable` or
/// `--print-variables`.
fn print_value(
    cli: &Cli,
    asked: &Asked,
    nccl: Option<&Nccl>,
    error: Option<&ErrorKind>,
    headline: Option<&str>,
) -> ExitCode {
    let Some(n) = nccl else {
        if cli.short_errors {
            asked.say(headline.unwrap_or_default());
        } else {
            asked.say(&style::not_found(headline));
        }
        // `eval "$(nccl-find --env)" && make`: an empty output would let
        // the eval succeed and the build start; `false` stops it, in every
        // POSIX shell.
        if cli.env {
            println!("false");
        }
        return exit_status(error);
    };
    let out = if cli.modversion {
        Ok(n.version.to_string().into_bytes())
    } else if cli.env {
        let prefix = env_prefix(asked, n);
        let (cuda, compiles) = match shim::cuda_home(n, prefix.as_deref()) {
            Ok(home) => (home, true),
            Err(why) => {
                asked.say(&format!(
                    "{why}. No CUDA_HOME or NCCL_CFLAGS is exported: builds that compile nccl.h will fail"
                ));
                (None, false)
            }
        };
        let lines = pkgflags::env(n, prefix.as_deref(), cuda.as_deref(), compiles);
        // A shell takes the quoted values as they are; make does not.
        if lines.iter().any(|b| matches!(b, b'$' | b'`')) {
            asked.say(
                "warning: a path exported holds `$` or a backtick: make expands a variable it \
                 imports (a `$(shell …)` in it would run), so in a Makefile read it as \
                 $(value NCCL_HOME), or move the install to a path without them",
            );
        }
        Ok(lines)
    } else if cli.print_variables {
        Ok(pkgflags::VARIABLES.join("\n").into_bytes())
    } else if let Some(name) = &cli.variable {
        // Like pkg-config: an undefined variable is an empty line.
        Ok(pkgflags::variable(n, name).unwrap_or_else(|| {
            asked.say(&format!(
                "nccl has no variable '{name}' (it has {}): printed an empty line, as pkg-config does",
                pkgflags::VARIABLES.join(", ")
            ));
            Vec::new()
        }))
    } else {
        pkg_config_flags(asked, n)
    };
    match out {
        // Paths byte for byte: one that is not UTF-8 stays the same path.
        Ok(mut bytes) => {
            bytes.push(b'\n');
            let _ = std::io::Write::write_all(&mut std::io::stdout(), &bytes);
            ExitCode::SUCCESS
        }
        Err(e) => {
            asked.say(&e);
            ExitCode::from(1)
        }
    }
}

/// The flags of `--cflags` and `--libs`, or the parts asked for.
fn pkg_config_flags(asked: &Asked, n: &Nccl) -> Result<Vec<u8>, String> {
    // A wheel has no libnccl.so, and CMake's pkg_check_modules looks each -l
    // name up with find_library, which cannot find -l:libnccl.so.2: the
    // drop-in names a loader directory whose libnccl.so links to the wheel's
    // libnccl.so.2.
    let loader_dir = if asked.pkg_mode
        && (asked.parts.lib_dirs || asked.parts.libs)
        && matches!(n.linking, nccl_find::Linking::DynamicVerbatim)
    {
        match shim::make(n, false) {
            Ok(d) => Some(d),
            Err(e) => {
                asked.say(&format!("{e}; giving -l:libnccl.so.2 instead"));
                None
            }
        }
    } else {
        None
    };
    pkgflags::flags(n, asked.parts, loader_dir.as_deref())
}

/// For `--env` where the install has no `libnccl.so` (a wheel): a prefix
/// in the user's cache whose `lib/libnccl.so` links to the wheel's
/// `libnccl.so.2` and whose `include/` is the wheel's, so that `-lnccl`
/// and `NCCL_HOME`-style builds link. `None` otherwise, or with a warning
/// when none can be made.
fn env_prefix(asked: &Asked, n: &Nccl) -> Option<PathBuf> {
    if !matches!(n.linking, nccl_find::Linking::DynamicVerbatim) {
        return None;
    }
    match shim::make_prefix(n) {
        Ok(d) => Some(d),
        Err(e) => {
            asked.say(&format!(
                "warning: -lnccl will not link from NCCL_LIB_DIR, the wheel's own lib dir (it has only \
                 libnccl.so.2: link -l:libnccl.so.2), since no loader directory could be made. To make \
                 one, {e}"
            ));
            None
        }
    }
}

/// 2 for a malformed version requirement (a usage error), 1 for any other
/// error, else 0.
fn exit_status(error: Option<&ErrorKind>) -> ExitCode {
    match error {
        Some(ErrorKind::InvalidRequirement { .. }) => ExitCode::from(2),
        Some(_) => ExitCode::from(1),
        None => ExitCode::SUCCESS,
    }
}
