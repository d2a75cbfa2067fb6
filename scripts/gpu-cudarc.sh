#!/usr/bin/env bash
# examples/cudarc-nccl on a GPU machine: which NCCL cudarc loads with no
# setup and with `nccl-find --loader-env`, and a checked all-reduce on every
# GPU; a table at the end. The GPU machine needs no cargo: build both
# binaries elsewhere and put them beside this script, in one directory:
#
#   (cd examples/cudarc-nccl && NCCL_HOME=<any NCCL 2> cargo build --release)
#   cargo build --release -p nccl-find-cli
#   mkdir -p target/gpu-cudarc && cp scripts/gpu-cudarc.sh \
#     examples/cudarc-nccl/target/release/cudarc-nccl target/release/nccl-find target/gpu-cudarc/
#   NCCL_NVLS_ENABLE=0 bash target/gpu-cudarc/gpu-cudarc.sh     # on the GPU machine
set -u
export NCCL_NVLS_ENABLE=0
B=$(cd "$(dirname "$0")" && pwd)
unset LD_LIBRARY_PATH VIRTUAL_ENV NCCL_HOME
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1
ls -la /usr/lib/x86_64-linux-gnu/libnccl* 2>&1 | head; ldconfig -p | grep nccl
declare -a rows
case_() { # name, then the command
  local name=$1; shift
  echo "=== $name"
  local t0=$(date +%s%N)
  out=$("$@" 2>/tmp/err); rc=$?
  local t1=$(date +%s%N)
  echo "$out"; cat /tmp/err
  rows+=("$name|rc=$rc|$(( (t1 - t0) / 1000000 )) ms|$(echo "$out" | tr '\n' ' ')")
}
case_ "no setup (rpath dir absent here)" timeout 300 "$B/cudarc-nccl"
sel=$("$B/nccl-find" --modversion); echo "nccl-find default selects $sel"
env_default=$("$B/nccl-find" --loader-env); echo "$env_default"
case_ "loader-env, default pick ($sel)" timeout 300 env $(echo "$env_default" | head -1) "$B/cudarc-nccl"
env_wheel=$(VIRTUAL_ENV=/opt/torch/.venv "$B/nccl-find" --loader-env); echo "$env_wheel"
case_ "loader-env, VIRTUAL_ENV torch wheel" timeout 300 env $(echo "$env_wheel" | head -1) "$B/cudarc-nccl"
echo; echo "=== table"
for r in "${rows[@]}"; do echo "$r"; done
