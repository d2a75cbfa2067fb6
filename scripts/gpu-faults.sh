#!/usr/bin/env bash
# Faults on real NCCL, on the GPU machine: SIGINT during a sweep (exit 130,
# no process or temp dir left); a rank that stalls mid-collective (SIGSTOP),
# which must end rank 0 at its collective deadline with the communicators
# aborted; and the rank killed mid-collective. And a timed batch that
# outlives --timeout (one process, 1 and 2 GPUs, NCCL_DEBUG=WARN): the
# run thread stops queuing before any abort, so NCCL never finds a freed
# communicator ("corrupted comm object detected"); --iters out of bounds.
# Prints a table last.
#   scripts/gpu-faults.sh [path/to/nccl-find]
#   FAULTS=batch scripts/gpu-faults.sh …   # only the timed-batch rows
set -u
bin=${1:-target/release/nccl-find}
export NCCL_NVLS_ENABLE=0
out=$(mktemp -d)
rows=()
row() { rows+=("$(printf '| %-40s | %-8s | %-18s | %s |' "$1" "$2" "$3" "$4")"); }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }

# A timed batch of 100000 calls of 1 GiB outlives --timeout 5.
all=$(seq -s, 0 $(( $(nvidia-smi -L | wc -l) - 1 )))
for gpus in $(echo 0 "$all" | tr ' ' '\n' | sort -u); do
  s=$(now)
  NCCL_DEBUG=WARN "$bin" smoke --gpus $gpus --sizes 1G --iters 100000 --timeout 5 >"$out/batch.$gpus.txt" 2>&1; rc=$?; e=$(now)
  row "1 GiB x 100000 past --timeout 5, GPUs $gpus" "$rc" "$(secs $s $e) s" \
    "corrupted: $(grep -c 'corrupted comm' "$out/batch.$gpus.txt"); $(tail -1 "$out/batch.$gpus.txt" | cut -c1-200)"
done
for n in 0 100001; do
  "$bin" smoke --iters $n >"$out/iters.$n.txt" 2>&1; rc=$?
  row "--iters $n" "$rc" "-" "$(tail -1 "$out/iters.$n.txt" | cut -c1-120)"
done
if [ "${FAULTS:-}" = batch ]; then
  echo "| fault | exit | time | the last line |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  exit 0
fi

# SIGINT during a long single-process sweep.
"$bin" smoke --sizes 1G --iters 400 --timeout 60 >"$out/int.txt" 2>&1 & p=$!
sleep 5; s=$(now); kill -INT $p; wait $p; rc=$?; e=$(now)
left=$(ls -d /tmp/nccl-find-smoke-$p-* 2>/dev/null | wc -l); alive=$(ls -d /proc/$p 2>/dev/null | wc -l)
row "SIGINT 5 s into a 1 GiB sweep" "$rc" "$(secs $s $e) s to exit" "temp dirs left: $left, process alive: $alive; $(tail -1 "$out/int.txt" | cut -c1-70)"

# Rank 1 stalls (SIGSTOP) mid-collective; deadline 10 s.
"$bin" smoke --rank 0 --world-size 2 --init tcp://127.0.0.1:29801 --gpus 0 --sizes 1G --iters 400 --timeout 10 >"$out/stall.r0.txt" 2>&1 & p0=$!
"$bin" smoke --rank 1 --world-size 2 --init tcp://127.0.0.1:29801 --gpus 1 --sizes 1G --iters 400 --timeout 10 >"$out/stall.r1.txt" 2>&1 & p1=$!
sleep 6; kill -STOP $p1; s=$(now)
wait $p0; rc=$?; e=$(now)
kill -KILL $p1 2>/dev/null; wait $p1 2>/dev/null
row "rank 1 stopped mid-collective (deadline 10 s)" "$rc" "$(secs $s $e) s after stop" "$(grep -h FAILED "$out/stall.r0.txt" | tail -1 | cut -c1-120)"

# Rank 1 killed mid-collective; deadline 30 s.
"$bin" smoke --rank 0 --world-size 2 --init tcp://127.0.0.1:29802 --gpus 0 --sizes 1G --iters 400 --timeout 30 >"$out/kill.r0.txt" 2>&1 & p0=$!
"$bin" smoke --rank 1 --world-size 2 --init tcp://127.0.0.1:29802 --gpus 1 --sizes 1G --iters 400 --timeout 30 >"$out/kill.r1.txt" 2>&1 & p1=$!
sleep 6; kill -KILL $p1; s=$(now)
wait $p0; rc=$?; e=$(now)
row "rank 1 killed mid-collective (deadline 30 s)" "$rc" "$(secs $s $e) s after kill" "$(grep -h FAILED "$out/kill.r0.txt" | tail -1 | cut -c1-120)"

echo "| fault | exit | time | rank 0 says |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo; echo "--- stall.r0.txt"; cat "$out/stall.r0.txt" | tail -8
