#!/usr/bin/env bash
# nccl-find smoke --ops on a GPU machine (the device's image: torchrun in
# /opt/torch/.venv): every collective, one process on one GPU and on all,
# in every datatype, and under torchrun with a process per GPU. Prints each
# run's rows and verdict (every reduction and datatype too); the logs are kept under $OUT (or ./gpu-ops-logs).
#   scripts/gpu-ops.sh [path/to/nccl-find]
set -u
bin=$(readlink -f "${1:-target/release/nccl-find}")
dest=${OUT:-gpu-ops-logs}
mkdir -p "$dest"
export NCCL_NVLS_ENABLE=0
torchrun=/opt/torch/.venv/bin/torchrun
n=$(nvidia-smi -L | wc -l)
results=()
run() { # file, name, command...
  local f=$1 name=$2; shift 2
  local s; s=$(date +%s.%N)
  timeout 300 "$@" > "$dest/$f.txt" 2>&1; local rc=$?
  local e; e=$(date +%s.%N)
  local v; v=$(grep -E '^(\[rank 0\] )?(OK|FAILED)' "$dest/$f.txt" | tail -1 | cut -c1-150)
  results+=("$(printf '| %-44s | %-4s | %6.2f | %s |' "$name" "$rc" "$(awk -v a="$s" -v b="$e" 'BEGIN{print b-a}')" "$v")")
}
run one "1 GPU, every op in f32, sum" "$bin" smoke --gpus 0 --ops all --redops sum --dtypes f32 --timeout 60
run all "$n GPUs in one process, every op in f32, sum" "$bin" smoke --ops all --redops sum --dtypes f32 --timeout 60
run full "$n GPUs, --ops all (the full matrix)" "$bin" smoke --ops all --timeout 120
run dt1 "1 GPU, every op, redop and dtype, 4K,1M" "$bin" smoke --gpus 0 --ops all --redops all --dtypes all --sizes 4K,1M --timeout 60
run dt "$n GPUs, every op, redop and dtype, 4K,1M" "$bin" smoke --ops all --redops all --dtypes all --sizes 4K,1M --timeout 60
run dflt "$n GPUs, the default run" "$bin" smoke --timeout 60
run big "$n GPUs, every op in f32, sum, 256M" "$bin" smoke --ops all --redops sum --dtypes f32 --sizes 256M --timeout 60
# Each alone: its buffers sized by itself, not by the largest of several.
for op in reduce-scatter all-to-all gather scatter send-recv; do
  run "alone-$op" "$n GPUs, --ops $op alone, 64M" "$bin" smoke --ops "$op" --sizes 4K,64M --timeout 60
done
[ "$n" -gt 1 ] && run tr "torchrun x$n, every op, redop and dtype, 64K" "$torchrun" --no-python --standalone --nproc-per-node="$n" "$bin" smoke --ops all --redops all --dtypes all --sizes 64K --timeout 60
echo
for f in dt big; do echo "== $f"; grep -vE '^W1|^\*' "$dest/$f.txt" | cut -c1-150; done
echo "| run | exit | s | verdict |"
echo "|---|---|---|---|"
printf '%s\n' "${results[@]}"
