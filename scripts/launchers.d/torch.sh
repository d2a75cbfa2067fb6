# torchrun, from PyTorch on PyPI (sourced by scripts/launchers).
#
# The newest torch (what `pip install torch` gives users today): its
# torchrun's agent serves the TCPStore whose protocol our store client
# speaks (torch >= 2.2's). Then torch 2.1.2, the last release of the old
# protocol, in a venv of its own.
#
# Each is a venv in the cache, made once (a .complete marker), with torch's
# nvidia-* dependencies: the newest is about 5.3 GB, torch 2.1.2 about
# 4.7 GB; each took about a minute to download and install (torch
# 2.15.0). torch 2.1.2 has wheels for python 3.8 to 3.11 only: its venv is
# made with $python when that is one, else with the first of python3.11 …
# python3.8 on PATH that runs. With none, it is left out, with a warning on
# stderr that says why and what to install; its tests then fail under
# NCCL_FIND_REQUIRE_LAUNCHERS=1 (scripts/test), and skip otherwise.
#
#   NCCL_FIND_TORCHRUN          the newest torch's torchrun
#   NCCL_FIND_TORCH_PYTHON      its python (tests start a bare TCPStore with it)
#   NCCL_FIND_TORCHRUN_OLD      torch 2.1.2's torchrun ("": left out)
#   NCCL_FIND_TORCH_PYTHON_OLD  its python ("": left out)

torch_newest() { # the newest torch on PyPI, or the newest we know of
  local v
  v=$("$python" -m pip index versions torch 2>/dev/null | sed -n 's/^torch (\([0-9][0-9.]*\))$/\1/p' | head -n1)
  if [ -z "$v" ]; then
    v=2.15.0
    echo "scripts/launchers: could not ask PyPI for the newest torch; using $v" >&2
  fi
  echo "$v"
}

torch_venv() { # torch_venv VERSION [PYTHON]: makes the venv once; prints its dir
  local v=$1 py=${2:-$python} dir="$cache/launchers/torch-$1"
  if [ ! -f "$dir/.complete" ]; then
    echo "scripts/launchers: installing torch $v into $dir with $py (once; about 5 GB)" >&2
    if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
      apt_install python3-venv || return 1
    fi
    rm -rf "$dir" && mkdir -p "$cache/launchers" || return 1
    "$py" -m venv "$dir" || return 1
    "$dir/bin/python" -m pip install -q --no-cache-dir --disable-pip-version-check "torch==$v" >&2 || return 1
    # It must import and serve a store before it counts as installed.
    "$dir/bin/python" -W ignore -c \
      'import torch.distributed as d; d.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)' >&2 ||
      return 1
    touch "$dir/.complete" || return 1
  fi
  echo "$dir"
}

torch_old_python() { # a python torch 2.1.2 has wheels for (3.8 to 3.11), or nothing
  local p
  for p in "$python" python3.11 python3.10 python3.9 python3.8; do
    p=$(command -v "$p") || continue
    # A pyenv shim of a version not installed fails here, as it should.
    if "$p" -c 'import sys; sys.exit(not (3, 8) <= sys.version_info[:2] <= (3, 11))' 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

torch_dir=$(torch_venv "$(torch_newest)") || { echo "scripts/launchers: torch could not be installed" >&2; exit 1; }
say NCCL_FIND_TORCHRUN "$torch_dir/bin/torchrun"
say NCCL_FIND_TORCH_PYTHON "$torch_dir/bin/python"
torch_old_py=
if [ -f "$cache/launchers/torch-2.1.2/.complete" ] || torch_old_py=$(torch_old_python); then
  torch_dir=$(torch_venv 2.1.2 "$torch_old_py") ||
    { echo "scripts/launchers: torch 2.1.2 could not be installed" >&2; exit 1; }
  say NCCL_FIND_TORCHRUN_OLD "$torch_dir/bin/torchrun"
  say NCCL_FIND_TORCH_PYTHON_OLD "$torch_dir/bin/python"
else
  {
    echo "scripts/launchers: WARNING *************************************************"
    echo "scripts/launchers: torch 2.1.2 (torchrun's old TCPStore protocol, and its"
    echo "scripts/launchers: --standalone without an agent store) is NOT installed: its"
    echo "scripts/launchers: wheels are for python 3.8 to 3.11 only; $python is"
    echo "scripts/launchers: $("$python" -V 2>&1), and no python3.11 ... python3.8 on PATH runs."
    echo "scripts/launchers: Its tests in cli/tests/launch_torchrun.rs FAIL under"
    echo "scripts/launchers: NCCL_FIND_REQUIRE_LAUNCHERS=1 (scripts/test), and skip otherwise."
    echo "scripts/launchers: Install a python 3.11 (apt-get install python3.11, or"
    echo "scripts/launchers: pyenv install 3.11) and run scripts/launchers again."
    echo "scripts/launchers: ***************************************************************"
  } >&2
  say NCCL_FIND_TORCHRUN_OLD ""
  say NCCL_FIND_TORCH_PYTHON_OLD ""
fi
unset torch_dir torch_old_py
