# Hydra, the `mpiexec` of MPICH and Intel MPI (MVAPICH ships it too): it
# gives each process PMI_FD (an open socket to its PMI-1 proxy), PMI_RANK,
# PMI_SIZE, MPI_LOCALRANKID and MPI_LOCALNRANKS. Sourced by
# scripts/launchers ($cache, $python, `say`); progress goes to stderr.
#
# Both come from PyPI, the newest release of each (the one `pip install`
# gives users), installed once with `pip install --target` into
# $cache/launchers/<name>-<version> (a `.complete` file marks a finished
# install):
#   mpich    MPICH's wheel, about 5 MB: bin/mpiexec (Hydra).
#   impi-rt  Intel MPI's runtime, about 90 MB installed: bin/mpiexec
#            (Intel's Hydra, the same file as bin/mpiexec.hydra).
# Neither needs a setting to start processes on this host, as root or
# not: a local launch forks its proxy, no ssh and no I_MPI_* variable
# (checked with an `ssh` on PATH that always fails). Their mpiexec and
# proxies need only the C library.
#
# Prints NCCL_FIND_MPICH_MPIEXEC and NCCL_FIND_IMPI_MPIEXEC; a family that
# cannot be installed is said on stderr and left out (the tests then skip,
# or fail under NCCL_FIND_REQUIRE_LAUNCHERS=1).

hydra_newest() { # hydra_newest NAME KNOWN: the newest release on PyPI
  local v
  v=$(PIP_DISABLE_PIP_VERSION_CHECK=1 "$python" -m pip index versions "$1" 2>/dev/null \
      | sed -n 's/^'"$1"' (\([0-9][0-9A-Za-z.]*\))$/\1/p' | head -n1) || v=
  if [ -z "$v" ]; then
    echo "scripts/launchers: could not ask PyPI for the newest $1; using $2" >&2
    v=$2
  fi
  echo "$v"
}

hydra_install() { # hydra_install NAME VERSION: prints the install dir
  local dir="$cache/launchers/$1-$2"
  if [ ! -f "$dir/.complete" ]; then
    echo "scripts/launchers: installing $1 $2 from PyPI into $dir (once)" >&2
    rm -rf "$dir" && mkdir -p "$dir" || return 1
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
      "$python" -m pip install -q --no-deps --only-binary=:all: --target "$dir" "$1==$2" >&2 || return 1
    if ! "$dir/bin/mpiexec" --version >/dev/null 2>&1; then
      echo "scripts/launchers: $dir/bin/mpiexec does not run" >&2
      return 1
    fi
    touch "$dir/.complete" || return 1
  fi
  echo "$dir"
}

hydra_family() { # hydra_family VAR NAME KNOWN
  local v dir
  v=$(hydra_newest "$2" "$3")
  if dir=$(hydra_install "$2" "$v"); then
    say "$1" "$dir/bin/mpiexec"
  elif [ "$v" != "$3" ] && dir=$(hydra_install "$2" "$3"); then
    echo "scripts/launchers: $2 $v could not be installed; using $3" >&2
    say "$1" "$dir/bin/mpiexec"
  else
    echo "scripts/launchers: $2 could not be installed; its tests will skip (or fail when required)" >&2
  fi
}

hydra_family NCCL_FIND_MPICH_MPIEXEC mpich 5.0.2
hydra_family NCCL_FIND_IMPI_MPIEXEC impi-rt 2021.19.0
