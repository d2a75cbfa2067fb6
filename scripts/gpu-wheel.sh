#!/usr/bin/env bash
# On a GPU machine with PyTorch (the image's /opt/torch/.venv): the command
# as Python users get it. Installs the wheel scripts/wheel built into that
# venv with pip (no index), then runs the installed nccl-find with an empty
# environment (no VIRTUAL_ENV, no PATH): --print's selection, doctor, and a
# smoke run on every GPU. Prints a table last.
#   Usage: scripts/gpu-wheel.sh WHEEL [VENV]
set -u
export NCCL_NVLS_ENABLE=0
whl=$1
venv=${2:-/opt/torch/.venv}
"$venv/bin/python" -m pip install -q --no-index --no-deps --force-reinstall "$whl" || exit 1
bin="$venv/bin/nccl-find"
rows=()
sel=$(env -i "$bin" --print | sed -n 's/^Selected: //p' | head -n1)
echo "=== --print: $sel"
rows+=("print|$(env -i "$bin" --json | python3 -c 'import json,sys; s=json.load(sys.stdin)["selected"]; print(s["version"], s["source"]["display"])')")
echo "=== doctor (empty environment)"
env -i NCCL_NVLS_ENABLE=0 "$bin" doctor; rc=$?
rows+=("doctor|exit $rc")
echo "=== smoke (empty environment but NCCL_NVLS_ENABLE=0)"
env -i NCCL_NVLS_ENABLE=0 "$bin" smoke; rc=$?
rows+=("smoke|exit $rc")
objdump -p "$bin" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n1 | sed 's/^/newest glibc symbol: /'
ldd --version | head -n1
echo
echo "| step | result |"
echo "|---|---|"
for r in "${rows[@]}"; do echo "| ${r%%|*} | ${r#*|} |"; done
