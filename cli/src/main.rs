//! `nccl-find`: what NCCL is installed, what would be linked, and why.

use std::process::ExitCode;

const HELP: &str = "\
nccl-find: find NVIDIA's NCCL, check it, and say which install would be linked and why.

Usage: nccl-find [--print] [OPTIONS]

Options:
  --print                    Show the selected install, every other install with
                             why it lost, where nccl-find looked, and every
                             variable it read (the default)
  --atleast-version VERSION  Require at least this version, e.g. 2.18
  --target TRIPLE            Probe for this target (default: the one built for)
  --root DIR                 Treat DIR as the filesystem root (sysroots, tests)
  -h, --help                 Show this help
  -V, --version              Show the version

Exit status: 0 when NCCL is found, 1 when it is not, 2 for a usage error.

Examples:
  nccl-find --print
  NCCL_HOME=/opt/nccl nccl-find --print
  nccl-find --atleast-version 2.18
";

fn main() -> ExitCode {
    let mut config = nccl_find::Config::new();
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        let arg = arg.to_string_lossy().into_owned();
        let mut value = |name: &str| match args.next() {
            Some(v) => Ok(v),
            None => Err(format!("{name} needs a value")),
        };
        let r = match arg.as_str() {
            "--print" => Ok(()),
            "-h" | "--help" => {
                print!("{HELP}");
                return ExitCode::SUCCESS;
            }
            "-V" | "--version" => {
                println!("nccl-find {}", env!("CARGO_PKG_VERSION"));
                return ExitCode::SUCCESS;
            }
            "--atleast-version" => value(&arg).map(|v| {
                config.atleast_version(&v.to_string_lossy());
            }),
            "--target" => value(&arg).map(|v| {
                config.target(&v.to_string_lossy());
            }),
            "--root" => value(&arg).map(|v| {
                config.root(v);
            }),
            other => Err(format!("unknown argument {other:?}")),
        };
        if let Err(e) = r {
            eprintln!("nccl-find: {e}\nRun `nccl-find --help` for usage.");
            return ExitCode::from(2);
        }
    }
    let (report, error) = config.report();
    print!("{}", nccl_find::emit::text::report(&report, error.as_ref()));
    match error {
        None => ExitCode::SUCCESS,
        Some(kind) => {
            eprintln!("nccl-find: {}", kind.headline());
            ExitCode::from(1)
        }
    }
}
