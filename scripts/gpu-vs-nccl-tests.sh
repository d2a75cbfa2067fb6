#!/usr/bin/env bash
# Time per call of each collective: nccl-find smoke --ops against NVIDIA's
# nccl-tests (<op>_perf), built here from source (a copy of the nccl-tests
# repository at $2) against the same libnccl (torch's wheel in
# /opt/torch/.venv), one process driving G GPUs in both (G=${G:-1}).
# Sizes 8 B, 16 B, 1 KiB, 1 MiB, 128 MiB, 1 GiB (per rank; nccl-tests' own
# size for all-gather, gather, reduce-scatter, scatter and all-to-all is
# the whole buffer: the same as ours on one GPU). nccl-tests rounds those
# five's count per rank down to a multiple of 16 bytes: at 8 B it moves
# nothing, so 16 B is their smallest real size. Up to 1 MiB both time 1000
# calls, above it their defaults. Prints a table last.
#   G=1 scripts/gpu-vs-nccl-tests.sh [path/to/nccl-find] [path/to/nccl-tests]
set -u
bin=$(readlink -f "${1:-target/release/nccl-find}")
src=$(readlink -f "${2:-gpu-dist/nccl-tests}")
g=${G:-1}
dest=${OUT:-gpu-vs-logs}
mkdir -p "$dest"
export NCCL_NVLS_ENABLE=0
lib=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 | head -1)
home=$(mktemp -d)
mkdir -p "$home/lib" && ln -s "$lib" "$home/lib/libnccl.so" && ln -s "${lib%/lib/*}/include" "$home/include"
build=${BUILD:-/tmp/nccl-tests-build}
[ -x "$build/sendrecv_perf" ] || make -C "$src/src" -j16 MPI=0 NCCL_HOME="$home" CUDA_HOME=/usr/local/cuda BUILDDIR="$build" \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > "$dest/build.txt" 2>&1 || { tail -20 "$dest/build.txt"; exit 1; }
export LD_LIBRARY_PATH="${lib%/*}:${LD_LIBRARY_PATH:-}"
sizes="8 16 1024 1048576 134217728 1073741824"
rows=()
for pair in all_reduce:all-reduce all_gather:all-gather reduce_scatter:reduce-scatter broadcast:broadcast \
            reduce:reduce alltoall:all-to-all gather:gather scatter:scatter sendrecv:send-recv; do
  t=${pair%%:*}; ours=${pair##*:}
  gpus=$(seq -s, 0 $((g - 1)))
  timeout 300 "$bin" smoke --lib "$lib" --gpus "$gpus" --ops "$ours" --sizes 8,16,1K,1M --iters 1000 --timeout 120 \
    > "$dest/ours-$t.txt" 2>&1
  timeout 300 "$bin" smoke --lib "$lib" --gpus "$gpus" --ops "$ours" --sizes 128M,1G --timeout 120 \
    >> "$dest/ours-$t.txt" 2>&1
  for s in $sizes; do
    # nccl-tests counts the whole buffer of these: n × ours per rank.
    case $t in all_gather|reduce_scatter|alltoall|gather|scatter) ts=$((s * g)) ;; *) ts=$s ;; esac
    n=20; [ "$s" -le 1048576 ] && n=1000
    "$build/${t}_perf" -b "$ts" -e "$ts" -g "$g" -n "$n" > "$dest/nt-one.txt" 2>&1
    cat "$dest/nt-one.txt" >> "$dest/nt-$t.txt"
    nt=$(awk '$1 ~ /^[0-9]+$/ && NF >= 12 {print $6; exit}' "$dest/nt-one.txt")
    h=$(case $s in 8) echo 8;; 16) echo 16;; 1024) echo 1K;; 1048576) echo 1M;; 134217728) echo 128M;; *) echo 1G;; esac)
    mine=$(awk -v h="$h" '$1 == h && $4 == "|" {print $5; exit}' "$dest/ours-$t.txt")
    rows+=("$(printf '| %-14s | %10s | %10s | %10s | %5s |' "$ours" "$h" "${nt:-?}" "${mine:-?}" \
      "$(awk -v a="${mine:-0}" -v b="${nt:-0}" 'BEGIN{if (b > 0) printf "%.2f", a/b; else print "?"}')")")
  done
done
rm -f "$dest/nt-one.txt"
echo "$(grep -m1 -o 'nccl-tests version [0-9.]*' "$dest/nt-all_reduce.txt"), $(nvidia-smi -L | head -"$g" | cut -d'(' -f1 | tr '\n' ' ')"
echo "| op | size | nccl-tests us | ours us | ours / nccl-tests |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
