#!/usr/bin/env bash
# Time per call of each collective: nccl-find smoke --ops against NVIDIA's
# nccl-tests (<op>_perf), built here from source (a copy of the nccl-tests
# repository at $2) against the same libnccl (torch's wheel in
# /opt/torch/.venv), one process driving G GPUs in both (G=${G:-1}).
#
# Sizes 8 B, 16 B, 1 KiB, 1 MiB, 128 MiB, 1 GiB per rank (nccl-tests' own
# size for all-gather, gather, reduce-scatter, scatter and all-to-all is
# the whole buffer, G times ours). nccl-tests rounds those five's count per
# rank down to a multiple of 16 bytes: at 8 B it moves nothing, so 16 B is
# their smallest real size. Up to 1 MiB both time 1000 calls, REPS times
# in turn (default 5), and the table gives the best of each: at these
# sizes a run's time per call lands in one of two modes (on 2 H200s about
# 12 and 18 us, in both tools alike), so a median of a few runs compares
# draws, not tools. Above 1 MiB, their default counts, once. Prints a
# table last; every time measured is kept in $OUT/times.txt, and
# TIMES=that/file prints the table again without measuring.
#   G=1 REPS=5 scripts/gpu-vs-nccl-tests.sh [path/to/nccl-find] [path/to/nccl-tests]
set -u
ops="all_reduce:all-reduce all_gather:all-gather reduce_scatter:reduce-scatter broadcast:broadcast reduce:reduce
     alltoall:all-to-all gather:gather scatter:scatter sendrecv:send-recv"
table() { # the times file: lines "op size who microseconds"
  echo "| op | size | nccl-tests us | ours us | ours / nccl-tests |"
  echo "|---|---|---|---|---|"
  for pair in $ops; do
    o=${pair##*:}
    for h in 8 16 1K 1M 128M 1G; do
      best() { awk -v o="$o" -v h="$h" -v w="$2" '$1 == o && $2 == h && $3 == w {print $4}' "$1" | sort -g | head -1; }
      nt=$(best "$1" nt); mine=$(best "$1" ours)
      printf '| %-14s | %5s | %10s | %10s | %5s |\n' "$o" "$h" "${nt:-?}" "${mine:-?}" \
        "$(awk -v a="${mine:-0}" -v b="${nt:-0}" 'BEGIN{if (b + 0 > 0) printf "%.2f", a/b; else print "?"}')"
    done
  done
}
if [ -n "${TIMES:-}" ]; then table "$TIMES"; exit 0; fi
bin=$(readlink -f "${1:-target/release/nccl-find}")
src=$(readlink -f "${2:-gpu-dist/nccl-tests}")
g=${G:-1}
reps=${REPS:-5}
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
gpus=$(seq -s, 0 $((g - 1)))
times="$dest/times.txt"
: > "$times"
human() { case $1 in 8) echo 8;; 16) echo 16;; 1024) echo 1K;; 1048576) echo 1M;; 134217728) echo 128M;; *) echo 1G;; esac; }
# One op at the sizes given (bytes per rank): ours in one process, then
# nccl-tests size by size.
measure() { # nccl-tests name, our name, iterations (0: defaults), sizes...
  local t=$1 ours=$2 n=$3; shift 3
  local list; list=$(for s in "$@"; do human "$s"; done | paste -sd,)
  local it=(); [ "$n" -gt 0 ] && it=(--iters "$n")
  timeout 300 "$bin" smoke --lib "$lib" --gpus "$gpus" --ops "$ours" --sizes "$list" "${it[@]}" --timeout 120 \
    > "$dest/ours.txt" 2>&1
  for s in "$@"; do
    local h; h=$(human "$s")
    awk -v h="$h" -v o="$ours" '$1 == h && $4 == "|" {print o, h, "ours", $5; exit}' "$dest/ours.txt" >> "$times"
    # nccl-tests counts the whole buffer of these: G times ours per rank.
    case $t in all_gather|reduce_scatter|alltoall|gather|scatter) ts=$((s * g)) ;; *) ts=$s ;; esac
    local nt=(); [ "$n" -gt 0 ] && nt=(-n "$n")
    "$build/${t}_perf" -b "$ts" -e "$ts" -g "$g" "${nt[@]}" > "$dest/nt.txt" 2>&1
    awk -v h="$h" -v o="$ours" '$1 ~ /^[0-9]+$/ && NF >= 12 {print o, h, "nt", $6; exit}' "$dest/nt.txt" >> "$times"
  done
}
for rep in $(seq "$reps"); do
  for pair in $ops; do measure "${pair%%:*}" "${pair##*:}" 1000 8 16 1024 1048576; done
done
for pair in $ops; do measure "${pair%%:*}" "${pair##*:}" 0 134217728 1073741824; done
echo "$(grep -m1 -o 'nccl-tests version [0-9.]*' "$dest/nt.txt"), $(nvidia-smi -L | head -"$g" | cut -d'(' -f1 | tr '\n' ' '), best of $reps runs up to 1 MiB"
table "$times"
