# torchrun, from PyTorch on PyPI (sourced by scripts/launchers).
#
# The newest torch (what `pip install torch` gives users today): its
# torchrun serves the agent's TCPStore, whose protocol our store client
# speaks (the "new dialect", torch >= 2.2). Then torch 2.1.2, the last
# release of the old dialect, in a venv of its own.
#
# Each is a venv in the cache, made once (a .complete marker). The newest
# is about 4 GB with its nvidia-* dependencies, torch 2.1.2 about 3 GB; each
# takes a few minutes on a fresh machine.
#
#   NCCL_FIND_TORCHRUN       the newest torch's torchrun
#   NCCL_FIND_TORCH_PYTHON   its python (tests start a bare TCPStore with it)
#   NCCL_FIND_TORCHRUN_OLD   torch 2.1.2's torchrun
#   NCCL_FIND_TORCH_PYTHON_OLD  its python

torch_newest() { # the newest torch on PyPI, or the newest we know of
  local v
  v=$("$python" -m pip index versions torch 2>/dev/null | sed -n 's/^torch (\([0-9][0-9.]*\))$/\1/p' | head -n1)
  if [ -z "$v" ]; then
    v=2.15.0
    echo "scripts/launchers: could not ask PyPI for the newest torch; using $v" >&2
  fi
  echo "$v"
}

torch_venv() { # torch_venv VERSION: the venv's dir, made once
  local v=$1 dir="$cache/launchers/torch-$1"
  if [ ! -f "$dir/.complete" ]; then
    echo "scripts/launchers: installing torch $v into $dir (once; a few GB)" >&2
    if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
      apt_install python3-venv
    fi
    rm -rf "$dir"
    mkdir -p "$cache/launchers"
    "$python" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --no-cache-dir --disable-pip-version-check "torch==$v" >&2
    # It must import and serve a store before it counts as installed.
    "$dir/bin/python" -c 'import torch.distributed as d; d.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)' >&2
    touch "$dir/.complete"
  fi
  echo "$dir"
}

torch_dir=$(torch_venv "$(torch_newest)")
say NCCL_FIND_TORCHRUN "$torch_dir/bin/torchrun"
say NCCL_FIND_TORCH_PYTHON "$torch_dir/bin/python"
torch_dir=$(torch_venv 2.1.2)
say NCCL_FIND_TORCHRUN_OLD "$torch_dir/bin/torchrun"
say NCCL_FIND_TORCH_PYTHON_OLD "$torch_dir/bin/python"
unset torch_dir
