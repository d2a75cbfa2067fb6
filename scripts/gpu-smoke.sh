#!/usr/bin/env bash
# The smoke test on a GPU machine (the device's nvidia-h200-x2), in one run:
# single process on 2 GPUs and on 1; two processes x 1 GPU over
# tcp://127.0.0.1 and over a file; the same with torchrun-style variables;
# a missing rank and a killed rank (the deadlines); all datatypes; then
# busbw per size against PyTorch's all_reduce, and end-to-end wall time
# against torchrun for one verified all-reduce. Prints a table last.
#   scripts/gpu-smoke.sh [path/to/nccl-find]    (logs go to $OUT, or ./gpu-smoke-logs)
set -u
bin=${1:-target/release/nccl-find}
dest=${OUT:-gpu-smoke-logs}
out=$(mktemp -d)
mkdir -p "$dest"
export NCCL_NVLS_ENABLE=0
py=/opt/torch/.venv/bin/python
torchrun=/opt/torch/.venv/bin/torchrun
torchlib=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -1)
results=()
row() { results+=("$(printf '| %-44s | %-6s | %8s | %s |' "$1" "$2" "$3" "$4")"); }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }

nvidia-smi -L | tee "$out/gpus.txt"
"$bin" --print > "$out/print.txt" 2>&1; echo "print exit $?"
VIRTUAL_ENV=/opt/torch/.venv "$bin" doctor > "$out/doctor.txt" 2>&1; echo "doctor exit $?"

run1() { # file, name, args...
  local f=$1 name=$2; shift 2
  local s=$(now); "$bin" smoke "$@" > "$out/$f.txt" 2>&1; local rc=$?; local e=$(now)
  row "$name" "$rc" "$(secs "$s" "$e")" "$(tail -1 "$out/$f.txt" | cut -c1-90)"
}
run1 one-2gpu "1 process, 2 GPUs (default sweep)" --timeout 30
run1 one-1gpu "1 process, 1 GPU" --gpus 0 --timeout 30
run1 one-dtypes "1 process, 2 GPUs, all datatypes" --dtypes all --sizes 4K,1M,8M --timeout 30

pair() { # file, name, init-url
  local f=$1 name=$2 init=$3
  local s=$(now)
  "$bin" smoke --rank 0 --world-size 2 --init "$init" --gpus 0 --timeout 30 > "$out/$f.r0.txt" 2>&1 & local p0=$!
  "$bin" smoke --rank 1 --world-size 2 --init "$init" --gpus 1 --timeout 30 > "$out/$f.r1.txt" 2>&1; local rc1=$?
  wait $p0; local rc0=$?; local e=$(now)
  row "$name" "$rc0/$rc1" "$(secs "$s" "$e")" "$(tail -1 "$out/$f.r0.txt" | cut -c1-90)"
}
pair pair-tcp "2 processes x 1 GPU, tcp://127.0.0.1" tcp://127.0.0.1:29611
pair pair-file "2 processes x 1 GPU, file://" "file://$out/rdv"

s=$(now)
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29612 "$bin" smoke --timeout 30 > "$out/torchrun-vars.r0.txt" 2>&1 & p0=$!
RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29612 "$bin" smoke --timeout 30 > "$out/torchrun-vars.r1.txt" 2>&1; rc1=$?
wait $p0; rc0=$?; e=$(now)
row "torchrun-style variables, 2 x 1 GPU" "$rc0/$rc1" "$(secs "$s" "$e")" "$(tail -1 "$out/torchrun-vars.r0.txt" | cut -c1-90)"

# A rank that never comes: world 3, two started, 10 s deadline.
s=$(now)
"$bin" smoke --rank 0 --world-size 3 --init tcp://127.0.0.1:29613 --gpus 0 --timeout 10 > "$out/missing.r0.txt" 2>&1 & p0=$!
"$bin" smoke --rank 1 --world-size 3 --init tcp://127.0.0.1:29613 --gpus 1 --timeout 10 > "$out/missing.r1.txt" 2>&1; rc1=$?
wait $p0; rc0=$?; e=$(now)
row "missing rank 2 (deadline 10 s)" "$rc0/$rc1" "$(secs "$s" "$e")" "$(tail -1 "$out/missing.r0.txt" | cut -c1-90)"

# A rank killed mid-run: rank 1 dies 4 s into a long sweep, deadline 20 s.
s=$(now)
"$bin" smoke --rank 0 --world-size 2 --init tcp://127.0.0.1:29614 --gpus 0 --sizes 1G --iters 400 --timeout 20 > "$out/killed.r0.txt" 2>&1 & p0=$!
"$bin" smoke --rank 1 --world-size 2 --init tcp://127.0.0.1:29614 --gpus 1 --sizes 1G --iters 400 --timeout 20 > "$out/killed.r1.txt" 2>&1 & p1=$!
sleep 4; kill -9 $p1; k=$(now)
wait $p0; rc0=$?; e=$(now)
row "rank 1 killed 4 s in (deadline 20 s)" "$rc0/kill" "$(secs "$k" "$e") after kill" "$(tail -1 "$out/killed.r0.txt" | cut -c1-90)"

# busbw against PyTorch, same NCCL file (torch's wheel), same sizes and iterations.
sizes="256M,512M,1G,2G"
"$bin" smoke --lib "$torchlib" --sizes $sizes --iters 20 --timeout 60 --json > "$out/bw-ours-1proc.json" 2> "$out/bw-ours-1proc.err"
"$bin" smoke --lib "$torchlib" --rank 0 --world-size 2 --init tcp://127.0.0.1:29615 --gpus 0 --sizes $sizes --iters 20 --timeout 60 --json > "$out/bw-ours-2proc.json" 2>&1 & p0=$!
"$bin" smoke --lib "$torchlib" --rank 1 --world-size 2 --init tcp://127.0.0.1:29615 --gpus 1 --sizes $sizes --iters 20 --timeout 60 --json > "$out/bw-ours-2proc.r1.json" 2>&1
wait $p0
cat > "$out/torch_bw.py" <<'PY'
import os, time, json, torch, torch.distributed as dist
dist.init_process_group("nccl")
lr = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(lr)
n = dist.get_world_size(); res = []
for mb in (256, 512, 1024, 2048):
    x = torch.ones(mb * (1 << 20) // 4, device="cuda")
    for _ in range(2): dist.all_reduce(x)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(20): dist.all_reduce(x)
    torch.cuda.synchronize(); dt = (time.perf_counter() - t) / 20
    res.append({"bytes": mb << 20, "time_us": dt * 1e6, "busbw": (mb << 20) / dt / 1e9 * 2 * (n - 1) / n})
if dist.get_rank() == 0: print(json.dumps({"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())), "rows": res}))
dist.destroy_process_group()
PY
$torchrun --nproc_per_node 2 --master_port 29616 "$out/torch_bw.py" > "$out/bw-torch.json" 2> "$out/bw-torch.err"
cat > "$out/torch_one.py" <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("nccl"); r = dist.get_rank(); torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.full((1024,), float(r + 1), device="cuda"); dist.all_reduce(x)
assert bool((x == sum(range(1, dist.get_world_size() + 1))).all())
dist.destroy_process_group()
PY
s=$(now); $torchrun --nproc_per_node 2 --master_port 29617 "$out/torch_one.py" > "$out/e2e-torch.txt" 2>&1; rc=$?; e=$(now)
row "e2e: torchrun, one verified all-reduce" "$rc" "$(secs "$s" "$e")" "PyTorch $($py -c 'import torch;print(torch.__version__)' 2>/dev/null)"
s=$(now); "$bin" smoke --lib "$torchlib" --sizes 4K --timeout 30 > "$out/e2e-ours.txt" 2>&1; rc=$?; e=$(now)
row "e2e: nccl-find smoke --sizes 4K (1 proc)" "$rc" "$(secs "$s" "$e")" "$(tail -1 "$out/e2e-ours.txt" | cut -c1-60)"

tar czf "$dest/logs.tgz" -C "$out" . 2>/dev/null
echo
echo "| run | exit | seconds | last line |"
echo "|---|---|---|---|"
printf '%s\n' "${results[@]}"
echo
python3 - "$out" <<'PY' || $py - "$out" <<'PY2'
import json, sys, os
o = sys.argv[1]
def load(p):
    try: return json.load(open(os.path.join(o, p)))
    except Exception as e: return {"rows": [], "err": str(e)}
a, b, t = load("bw-ours-1proc.json"), load("bw-ours-2proc.json"), load("bw-torch.json")
print(f"busbw GB/s, float32 sum, 20 iterations, NCCL {a.get('version')} ({a.get('library')}); PyTorch {t.get('torch')} NCCL {t.get('nccl')}")
print("| size | nccl-find 1 proc oop | ip | nccl-find 2 proc oop | ip | PyTorch 2 proc | ratio (best ours / torch) | #wrong |")
print("|---|---|---|---|---|---|---|---|")
for i, tr in enumerate(t.get("rows", [])):
    ra = a["rows"][i] if i < len(a.get("rows", [])) else None
    rb = b["rows"][i] if i < len(b.get("rows", [])) else None
    best = max([x for x in [ra and ra["oop"]["busbw"], ra and ra["ip"]["busbw"], rb and rb["oop"]["busbw"], rb and rb["ip"]["busbw"]] if x] or [0])
    f = lambda r, k: f"{r[k]['busbw']:.1f}" if r else "-"
    wrong = sum(r[k]["wrong"] for r in (ra, rb) if r for k in ("oop", "ip"))
    print(f"| {tr['bytes'] >> 20} MiB | {f(ra,'oop')} | {f(ra,'ip')} | {f(rb,'oop')} | {f(rb,'ip')} | {tr['busbw']:.1f} | {best / tr['busbw']:.3f} | {wrong} |")
PY
print("python3 missing")
PY2
