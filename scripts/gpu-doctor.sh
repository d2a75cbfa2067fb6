#!/usr/bin/env bash
# On a GPU machine with PyTorch (the image's /opt/torch/.venv): what
# `nccl-find doctor` says each Python package will map, beside what the real
# interpreter maps (/proc/self/maps), with and without the system's NCCL
# first on LD_LIBRARY_PATH; then one smoke run. Prints a table last.
#   Usage: scripts/gpu-doctor.sh [BIN] [VENV]
set -u
export NCCL_NVLS_ENABLE=0
bin=${1:-target/release/nccl-find}
venv=${2:-/opt/torch/.venv}
sysdir=/usr/lib/x86_64-linux-gnu
out=$(mktemp -d)
maps() { # CODE: the libnccl file the venv's python maps after CODE
  "$venv/bin/python" -W ignore -c "$1
for l in open('/proc/self/maps'):
    if 'libnccl' in l: print(l.split()[-1]); break" 2>"$out/py.err" | xargs -r readlink -f
}
rows=()
for ld in "" "$sysdir"; do
  tag=${ld:-none}
  echo "=== doctor, VIRTUAL_ENV=$venv, LD_LIBRARY_PATH first: $tag"
  LD_LIBRARY_PATH="${ld:+$ld:}${LD_LIBRARY_PATH:-}" VIRTUAL_ENV=$venv "$bin" doctor; echo "exit $?"
  LD_LIBRARY_PATH="${ld:+$ld:}${LD_LIBRARY_PATH:-}" VIRTUAL_ENV=$venv "$bin" doctor --json >"$out/d.json"
  for pkg in $(python3 -c "import json,sys; print(' '.join(p['package'] for p in json.load(open(sys.argv[1]))['python']['packages']))" "$out/d.json"); do
    case $pkg in
      torch) code="import torch";;
      cupy) code="from cupy.cuda import nccl";;
      jax) code="import jax; jax.devices()";;
      *) code="import $pkg";;
    esac
    real=$(LD_LIBRARY_PATH="${ld:+$ld:}${LD_LIBRARY_PATH:-}" maps "$code")
    said=$(python3 -c "import json,sys; p=[p for p in json.load(open(sys.argv[1]))['python']['packages'] if p['package']==sys.argv[2]][0]; print(p['library'], p['nccl_version'], p['version'])" "$out/d.json" "$pkg")
    rows+=("| $tag | $pkg ${said##* } | ${said%% *} | $(echo "$said" | awk '{print $2}') | ${real:-none} | $([ "${said%% *}" = "$real" ] && echo same || echo DIFFERENT) |")
  done
done
echo "=== torch's own answer"
"$venv/bin/python" -W ignore -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version(), 'cuda', torch.cuda.is_available())"
echo "=== smoke (all-reduce, this GPU)"
VIRTUAL_ENV=$venv "$bin" smoke --timeout 120 >"$out/smoke.txt" 2>&1; rc=$?
tail -n 4 "$out/smoke.txt"; echo "exit $rc"
echo
echo "| LD_LIBRARY_PATH first | package | doctor says it maps | NCCL | the interpreter maps | |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
