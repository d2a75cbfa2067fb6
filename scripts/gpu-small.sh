#!/usr/bin/env bash
# 2 GPUs, one process: time per call at 8 B, 64 KiB and 1 MiB, nccl-find smoke and the
# plain C loop (scripts/gpu-ref.c) on the same libnccl, alternating, ROUNDS runs each (a process
# lands in a fast or a slow mode for its whole run, for both, so one run of each says little);
# prints every run and the medians.  Usage: scripts/gpu-small.sh [ROUNDS] (default 12)
set -u
export NCCL_NVLS_ENABLE=0
bin=${NCCL_FIND_BIN:-target/release/nccl-find}
lib=/usr/lib/x86_64-linux-gnu/libnccl.so.2
rounds=${1:-12}
out=$(mktemp -d)
gcc -O2 -o $out/ref scripts/gpu-ref.c -ldl || exit 1
sizes="8 65536 1048576"
for i in $(seq $rounds); do
  "$out/ref" $lib 2 2 0 0 $out/id.$i 20 $sizes | awk '{printf "%s ", $2}' >> $out/ref.txt; echo >> $out/ref.txt
  "$bin" smoke --lib $lib --gpus 0,1 --sizes 8,64K,1M --iters 20 --timeout 60 --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print(' '.join(f\"{r['oop']['time_us']:.2f}\" for r in d['rows']))" >> $out/ours.txt
done
python3 - $out <<'PY'
import sys, statistics as st
o = sys.argv[1]
def rows(n): return [[float(x) for x in l.split()] for l in open(f"{o}/{n}.txt") if l.strip()]
r, u = rows("ref"), rows("ours")
print("runs:", len(r), len(u))
for name, d in (("ref", r), ("ours", u)):
    for row in d: print(name, row)
print("| size | ref median | ours median | ratio | ref best | ours best |")
for k, s in enumerate(("8 B", "64 KiB", "1 MiB")):
    a = [x[k] for x in r]; b = [x[k] for x in u]
    print(f"| {s} | {st.median(a):.2f} | {st.median(b):.2f} | {st.median(b)/st.median(a):.2f} | {min(a):.2f} | {min(b):.2f} |")
PY
