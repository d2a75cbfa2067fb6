//! A job as the rendezvous sees it: how the ranks meet ([`Init`],
//! [`Exchange`]) and one process's place ([`Job`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::kv;
use crate::reach::{Card, Judge};

/// The most bytes the file store adds to the rendezvous file's name:
/// `.<run>.new-<nonce>.<rank>`, a rank of up to 20 digits.
pub(crate) const SIDE_SUFFIX_MAX: usize = 1 + 32 + 1 + 4 + 32 + 1 + 20;

/// The longest file name Linux filesystems take (`NAME_MAX`).
pub(crate) const NAME_MAX: usize = 255;

/// How the ranks meet.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Init {
    /// Rank 0 listens at `host:port`.
    Tcp {
        /// Host to listen at / connect to.
        host: String,
        /// Port.
        port: u16,
    },
    /// Everyone reads and writes files next to this path.
    File {
        /// The rendezvous file.
        path: PathBuf,
    },
}

impl Init {
    /// Parses `tcp://HOST:PORT` or `file:///path`.
    pub fn parse(s: &str) -> Result<Init, String> {
        if let Some(rest) = s.strip_prefix("tcp://") {
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| format!("{s:?} has no port: write tcp://HOST:PORT"))?;
            let port: u16 = port
                .parse()
                .map_err(|_| format!("{s:?}: {port:?} is not a port number"))?;
            // Port 0 would make rank 0 listen on a port of the kernel's
            // choosing, which no peer could know.
            if port == 0 {
                return Err(format!(
                    "{s:?}: name a port every rank can reach, as in tcp://HOST:29500 (port 0 is one the kernel picks, which no peer could know)"
                ));
            }
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() {
                return Err(format!("{s:?} has no host: write tcp://HOST:PORT"));
            }
            Ok(Init::Tcp {
                host: host.to_string(),
                port,
            })
        } else if let Some(rest) = s.strip_prefix("file://") {
            if !rest.starts_with('/') {
                return Err(format!(
                    "{s:?}: the file must be an absolute path, as in file:///shared/smoke"
                ));
            }
            // The side files beside it get longer names: say so now, not
            // as a failed write at the deadline.
            let name = Path::new(rest).file_name().map_or(0, |n| n.len());
            let most = NAME_MAX - SIDE_SUFFIX_MAX;
            if name > most {
                return Err(format!(
                    "{s:?}: the file's name is {name} bytes long; name one of at most {most} bytes (the rendezvous writes files beside it whose names add up to {} bytes, and a name may have {})",
                    SIDE_SUFFIX_MAX,
                    NAME_MAX
                ));
            }
            Ok(Init::File {
                path: PathBuf::from(rest),
            })
        } else {
            Err(format!("{s:?} is neither tcp://HOST:PORT nor file:///path"))
        }
    }
}

/// How the processes meet: our own rendezvous, or a launcher's channel.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Exchange {
    /// Our TCP or file rendezvous.
    Ours(Init),
    /// A launcher's key-value store and barrier (torchrun's agent store, a
    /// PMI or PMIx server).
    Launcher(Arc<dyn kv::Connect>),
}

impl PartialEq for Exchange {
    fn eq(&self, other: &Exchange) -> bool {
        match (self, other) {
            (Exchange::Ours(a), Exchange::Ours(b)) => a == b,
            (Exchange::Launcher(a), Exchange::Launcher(b)) => {
                a.launcher() == b.launcher() && a.describe() == b.describe()
            }
            _ => false,
        }
    }
}

/// `host:port`, an IPv6 address in brackets.
pub(crate) fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl Exchange {
    /// Where the processes meet, in words (never a secret).
    pub fn describe(&self) -> String {
        match self {
            Exchange::Ours(Init::Tcp { host, port }) => format!("tcp://{}", host_port(host, *port)),
            Exchange::Ours(Init::File { path }) => format!("file://{}", path.display()),
            Exchange::Launcher(c) => c.describe(),
        }
    }
}

/// One process's place in the job.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Job {
    /// This process's rank among the processes.
    pub rank: usize,
    /// How many processes.
    pub world: usize,
    /// GPUs this process drives.
    pub ngpus: usize,
    /// Keeps jobs apart.
    pub token: String,
    /// Whether the token is a secret: given by `--token` or
    /// `NCCL_FIND_TOKEN`. Otherwise it is the default or the launcher's
    /// job identity (`SLURM_JOB_ID`, `TORCHELASTIC_RUN_ID`), which others
    /// can know, and rank 0 of a file rendezvous in a directory other
    /// users can write says so.
    pub token_secret: bool,
    /// How to meet.
    pub exchange: Exchange,
    /// Deadline for each wait.
    pub timeout: Duration,
    /// Where our TCP rendezvous' address came from, when a launcher gave
    /// it, and how to choose another (`MASTER_ADDR and MASTER_PORT, from
    /// torchrun …`): a failure to reach or hold it says so. `None`: the
    /// flags gave it.
    pub origin: Option<String>,
    /// What this process brings to the meeting: its host, facts for rank 0
    /// to compare, and the addresses the others test (empty: none).
    pub card: Card,
    /// How rank 0 judges what every rank brought ([`Judge`]): a cause it
    /// finds goes to every rank, and stops the job before NCCL unless
    /// `run_anyway`. `None`: nothing is judged.
    pub judge: Option<Judge>,
    /// Whether the job goes on to NCCL although rank 0 found a cause that
    /// will make it fail (rank 0's own choice rules).
    pub run_anyway: bool,
}
