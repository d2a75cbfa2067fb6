//! doctor's `mpi` check: an MPI launcher on `PATH`.

use super::{Area, Findings, Level};
use crate::facts::host::Facts;

/// The MPI area.
pub(super) fn check(f: &mut Findings, facts: &Facts) {
    match facts.mpi.first() {
        Some(p) => f.add(
            Area::Mpi,
            Level::Ok,
            format!("MPI launcher found: {p}"),
            None,
        ),
        None => f.add(
            Area::Mpi,
            Level::Note,
            "no mpirun or mpiexec on PATH: needed only for MPI-launched jobs",
            Some(
                "apt install openmpi-bin libopenmpi-dev, if your framework launches through MPI"
                    .into(),
            ),
        ),
    }
}
