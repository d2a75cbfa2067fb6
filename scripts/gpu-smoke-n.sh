#!/usr/bin/env bash
# The smoke test on every GPU of a machine with N GPUs (4 or 8): one process
# on all of them, N processes x 1 GPU with torchrun-style variables, a missing
# rank, busbw against PyTorch's all_reduce over N processes, and end-to-end
# wall time against torchrun. Prints a table last.
#   scripts/gpu-smoke-n.sh [path/to/nccl-find]
set -u
bin=${1:-target/release/nccl-find}
export NCCL_NVLS_ENABLE=0
n=$(nvidia-smi -L | wc -l)
out=$(mktemp -d)
py=/opt/torch/.venv/bin/python
torchrun=/opt/torch/.venv/bin/torchrun
torchlib=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 | head -1)
rows=()
row() { rows+=("$(printf '| %-46s | %-12s | %8s | %s |' "$1" "$2" "$3" "$4")"); }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }
nvidia-smi topo -m > "$out/topo.txt" 2>&1; head -$((n + 1)) "$out/topo.txt"

for i in 1 2 3; do
  s=$(now); "$bin" smoke --timeout 60 > "$out/one.$i.txt" 2>&1; rc=$?; e=$(now)
  row "1 process, $n GPUs (default sweep), run $i" "$rc" "$(secs $s $e)" "$(tail -1 "$out/one.$i.txt" | cut -c1-80)"
done
s=$(now); "$bin" smoke --dtypes all --sizes 4K,1M,8M --timeout 60 > "$out/dtypes.txt" 2>&1; rc=$?; e=$(now)
row "1 process, $n GPUs, all datatypes" "$rc" "$(secs $s $e)" "$(tail -1 "$out/dtypes.txt" | cut -c1-80)"

multi() { # tag port world started
  local tag=$1 port=$2 world=$3 started=$4 pids=() r
  for ((r = 1; r < started; r++)); do
    RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" smoke --timeout "$5" > "$out/$tag.$r.txt" 2>&1 & pids+=($!)
  done
  RANK=0 WORLD_SIZE=$world LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" smoke --timeout "$5" > "$out/$tag.0.txt" 2>&1
  local rc0=$? rcs=""
  for p in "${pids[@]}"; do wait $p; rcs="$rcs/$?"; done
  echo "$rc0$rcs"
}
s=$(now); rc=$(multi procs 29901 $n $n 60); e=$(now)
row "$n processes x 1 GPU, torchrun-style variables" "$rc" "$(secs $s $e)" "$(tail -1 "$out/procs.0.txt" | cut -c1-80)"
s=$(now); rc=$(multi missing 29902 $((n + 1)) $n 10); e=$(now)
row "world of $((n + 1)), rank $n never started (10 s)" "$rc" "$(secs $s $e)" "$(tail -1 "$out/missing.0.txt" | cut -c1-80)"

sizes=256M,512M,1G,2G
"$bin" smoke --lib "$torchlib" --sizes $sizes --iters 20 --timeout 120 --json > "$out/bw-1proc.json" 2> "$out/bw-1proc.err"
cat > "$out/torch_bw.py" <<'PY'
import os, time, json, torch, torch.distributed as dist
dist.init_process_group("nccl"); torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
n = dist.get_world_size(); res = []
for mb in (256, 512, 1024, 2048):
    x = torch.ones(mb * (1 << 20) // 4, device="cuda")
    for _ in range(2): dist.all_reduce(x)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(20): dist.all_reduce(x)
    torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 20
    res.append({"bytes": mb << 20, "busbw": (mb << 20) / dt / 1e9 * 2 * (n - 1) / n})
if dist.get_rank() == 0: print(json.dumps({"torch": torch.__version__, "rows": res}))
dist.destroy_process_group()
PY
$torchrun --nproc_per_node $n --master_port 29903 "$out/torch_bw.py" > "$out/bw-torch.json" 2> "$out/bw-torch.err"
cat > "$out/torch_one.py" <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("nccl"); r = dist.get_rank(); torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.full((1024,), float(r + 1), device="cuda"); dist.all_reduce(x)
assert bool((x == sum(range(1, dist.get_world_size() + 1))).all())
dist.destroy_process_group()
PY
s=$(now); $torchrun --nproc_per_node $n --master_port 29904 "$out/torch_one.py" > "$out/e2e-torch.txt" 2>&1; rc=$?; e=$(now)
row "e2e: torchrun x$n, one verified all-reduce" "$rc" "$(secs $s $e)" ""
s=$(now); "$bin" smoke --lib "$torchlib" --sizes 4K > "$out/e2e-ours.txt" 2>&1; rc=$?; e=$(now)
row "e2e: nccl-find smoke --sizes 4K ($n GPUs)" "$rc" "$(secs $s $e)" "$(tail -1 "$out/e2e-ours.txt" | cut -c1-60)"

echo "| run | exit | seconds | last line |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
$py - "$out" <<'PY'
import json, sys, os
o = sys.argv[1]
a = json.load(open(os.path.join(o, "bw-1proc.json")))
t = json.load(open(os.path.join(o, "bw-torch.json")))
print(f"busbw GB/s, float32 sum, 20 iterations, NCCL {a.get('version')}; PyTorch {t['torch']} ({len(a.get('gpus', []))} GPUs)")
print("| size | nccl-find oop | ip | PyTorch | ratio (best / PyTorch) | #wrong |")
print("|---|---|---|---|---|---|")
for r, tr in zip(a["rows"], t["rows"]):
    best = max(r["oop"]["busbw"], r["ip"]["busbw"])
    print(f"| {r['bytes'] >> 20} MiB | {r['oop']['busbw']:.1f} | {r['ip']['busbw']:.1f} | {tr['busbw']:.1f} | {best / tr['busbw']:.3f} | {r['oop']['wrong'] + r['ip']['wrong']} |")
PY
