# Slurm (sourced by scripts/launchers): Debian's slurmd, slurmctld and srun
# (22.05.8 on Debian 12). cli/tests/launch_slurm.rs starts its own
# controller and two node daemons from a slurm.conf in a temp dir; nothing
# here configures or starts a daemon.
#
# libpmix-dev: Debian's mpi/pmix plugin loads libpmix.so, the unversioned
# name that only the -dev package installs; without it `srun --mpi=pmix`
# cannot launch its tasks.
if ! command -v srun >/dev/null || ! command -v slurmd >/dev/null || ! command -v slurmctld >/dev/null; then
  echo "launchers: installing Slurm (slurmd slurmctld slurm-client libpmix-dev) from Debian" >&2
  apt_install slurmd slurmctld slurm-client libpmix-dev
elif dpkg -s slurmd >/dev/null 2>&1 && ! dpkg -s libpmix-dev >/dev/null 2>&1; then
  echo "launchers: installing libpmix-dev for Slurm's mpi/pmix plugin" >&2
  apt_install libpmix-dev
fi
say NCCL_FIND_SRUN "$(command -v srun)"
