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
# 2.15.0). torch 2.1.2 has wheels for python 3.8 to 3.11 only: with another
# python it is left out, and its tests say so.
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

torch_venv() { # torch_venv VERSION: makes the venv once; prints its dir
  local v=$1 dir="$cache/launchers/torch-$1"
  if [ ! -f "$dir/.complete" ]; then
    echo "scripts/launchers: installing torch $v into $dir (once; about 5 GB)" >&2
    if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
      apt_install python3-venv || return 1
    fi
    rm -rf "$dir" && mkdir -p "$cache/launchers" || return 1
    "$python" -m venv "$dir" || return 1
    "$dir/bin/python" -m pip install -q --no-cache-dir --disable-pip-version-check "torch==$v" >&2 || return 1
    # It must import and serve a store before it counts as installed.
    "$dir/bin/python" -W ignore -c \
      'import torch.distributed as d; d.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)' >&2 ||
      return 1
    touch "$dir/.complete" || return 1
  fi
  echo "$dir"
}

torch_dir=$(torch_venv "$(torch_newest)") || { echo "scripts/launchers: torch could not be installed" >&2; exit 1; }
say NCCL_FIND_TORCHRUN "$torch_dir/bin/torchrun"
say NCCL_FIND_TORCH_PYTHON "$torch_dir/bin/python"
if ! "$python" -c 'import sys; sys.exit(not (3, 8) <= sys.version_info[:2] <= (3, 11))'; then
  echo "scripts/launchers: torch 2.1.2 (the old store protocol) has no wheel for $("$python" -V); left out" >&2
  say NCCL_FIND_TORCHRUN_OLD ""
  say NCCL_FIND_TORCH_PYTHON_OLD ""
else
  torch_dir=$(torch_venv 2.1.2) || { echo "scripts/launchers: torch 2.1.2 could not be installed" >&2; exit 1; }
  say NCCL_FIND_TORCHRUN_OLD "$torch_dir/bin/torchrun"
  say NCCL_FIND_TORCH_PYTHON_OLD "$torch_dir/bin/python"
fi
unset torch_dir
