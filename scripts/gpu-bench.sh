#!/usr/bin/env bash
# `nccl-find smoke` against a plain C all-reduce loop (scripts/gpu-ref.c) on
# the same libnccl, on every GPU of this machine: one process, and one
# process per GPU; then the 4 GiB sweep's wall time, the verdict with NCCL's
# network transport forced, a cross-node-style pair over the machine's own
# address (with the right and a wrong NCCL_SOCKET_IFNAME), and the
# deadlines (a killed rank, a stopped rank). Prints tables last.
#   scripts/gpu-bench.sh [path/to/nccl-find] [path/to/gpu-ref] [quick]
#   GPU_BENCH_REPS=8 GPU_BENCH_SIZES="8 65536 ..."   runs and sizes of the timing
#   GPU_BENCH_ONLY=timing                            the timing tables alone
set -u
bin=${1:-target/release/nccl-find}
ref=${2:-target/gpu14/gpu-ref}
quick=${3:-}
export NCCL_NVLS_ENABLE=0
lib=/usr/lib/x86_64-linux-gnu/libnccl.so.2
n=$(nvidia-smi -L | wc -l)
out=$(mktemp -d)
dest=${OUT:-gpu-bench-logs}
mkdir -p "$dest"
py=$(command -v python3 || echo /opt/torch/.venv/bin/python)
if command -v gcc >/dev/null; then gcc -O2 -o "$out/gpu-ref" scripts/gpu-ref.c -ldl && ref=$out/gpu-ref; fi
echo "compiler: $(command -v gcc cc | head -1) ref: $ref"
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }
rows=()
row() { rows+=("$(printf '| %-50s | %-9s | %8s | %s |' "$1" "$2" "$3" "$4")"); }

if [ -n "$quick" ]; then sizes="8 1048576 268435456"; reps=1; else sizes="8 1024 65536 1048576 16777216 268435456 1073741824"; reps=2; fi
sizes=${GPU_BENCH_SIZES:-$sizes}; reps=${GPU_BENCH_REPS:-$reps}
csv=$(echo $sizes | tr ' ' ,)
gpus=$(seq -s, 0 $((n - 1)))

# The reference and ours, one process on every GPU, then one per GPU; twice, interleaved.
for rep in $(seq $reps); do
  "$ref" $lib $n $n 0 0 "$out/id.$rep" 20 $sizes > "$out/ref1.$rep.txt" 2> "$out/ref1.$rep.err"
  "$bin" smoke --lib $lib --sizes $csv --iters 20 --timeout 60 --json > "$out/ours1.$rep.json" 2> "$out/ours1.$rep.err"
  pids=()
  for ((r = 1; r < n; r++)); do "$ref" $lib 1 $n $r $r "$out/idp.$rep" 20 $sizes > /dev/null 2>> "$out/refn.$rep.err" & pids+=($!); done
  "$ref" $lib 1 $n 0 0 "$out/idp.$rep" 20 $sizes > "$out/refn.$rep.txt" 2>> "$out/refn.$rep.err"; wait "${pids[@]}"
  pids=()
  for ((r = 1; r < n; r++)); do "$bin" smoke --lib $lib --rank $r --world-size $n --init tcp://127.0.0.1:2970$rep --gpus $r --sizes $csv --iters 20 --timeout 60 --json > "$out/oursn.$rep.$r.json" 2>&1 & pids+=($!); done
  "$bin" smoke --lib $lib --rank 0 --world-size $n --init tcp://127.0.0.1:2970$rep --gpus 0 --sizes $csv --iters 20 --timeout 60 --json > "$out/oursn.$rep.json" 2> "$out/oursn.$rep.err"; wait "${pids[@]}"
done

if [ "${GPU_BENCH_ONLY:-}" != timing ]; then
# Every datatype, checked on the GPU.
s=$(now); "$bin" smoke --lib $lib --dtypes all --sizes 8,4K,1M,64M --timeout 60 > "$out/dtypes.txt" 2>&1; rc=$?; e=$(now)
row "1 process, $n GPUs, all datatypes 8 B-64 MiB" "$rc" "$(secs $s $e)" "$(tail -1 "$out/dtypes.txt" | cut -c1-90)"

# The 4 GiB sweep: wall time against the time spent in all-reduces.
big=4G; [ -n "$quick" ] && big=1G
s=$(now); "$bin" smoke --lib $lib --sizes $big --timeout 120 --json > "$out/big.json" 2> "$out/big.err"; rc=$?; e=$(now)
row "1 process, $n GPUs, --sizes $big" "$rc" "$(secs $s $e)" "$($py -c "import json,sys;d=json.load(open(sys.argv[1]));r=d['rows'][0];t=(1+1+5)*(r['oop']['time_us']+r['ip']['time_us'])/1e6;print(f\"wall {d['wall_s']:.2f} s, all-reduces {t:.2f} s; {[x for x in d.get('notes',[]) if 'setup' in x or 'ready' in x or 'data:' in x]}; {d['verdict'][:60]}\")" "$out/big.json" 2>&1 | cut -c1-250)"

# The verdict with NCCL's network transport forced.
s=$(now); NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 "$bin" smoke --lib $lib --sizes 256M --iters 5 --timeout 60 > "$out/net.txt" 2>&1; rc=$?; e=$(now)
row "forced NET (P2P and SHM disabled), 256M" "$rc" "$(secs $s $e)" "$(grep hardware: "$out/net.txt" | cut -c1-400)"
"$bin" smoke --lib $lib --sizes 1G --iters 10 --timeout 60 > "$out/fast.txt" 2>&1
row "default transport, 1G" "$?" "-" "$(grep hardware: "$out/fast.txt" | cut -c1-300)"

# Cross-node style: two processes, the rendezvous on this machine's address.
# `ip -4 -o addr` where there is `ip`; else ask the kernel through Python.
if command -v ip >/dev/null; then
  read -r ifc addr <<< "$(ip -4 -o addr | awk '$2 != "lo" {split($4, a, "/"); print $2, a[1]; exit}')"
else
  read -r ifc addr <<< "$($py -c '
import socket, fcntl, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _, n in socket.if_nameindex():
    if n == "lo": continue
    try:
        a = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", n.encode()))
        print(n, socket.inet_ntoa(a[20:24])); break
    except OSError: pass')"
fi
if [ -z "$addr" ]; then
  ifc=$(awk '$2 == "00000000" {print $1; exit}' /proc/net/route); addr=$(hostname -I 2>/dev/null | awk '{print $1}')
fi
echo "interfaces: $(ls /sys/class/net | tr '\n' ' '); hostname -I: $(hostname -I 2>&1)"
echo "interface $ifc address $addr"
xpair() { # tag ifname timeout
  local s=$(now)
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=$2 "$bin" smoke --lib $lib --rank 1 --world-size 2 --init tcp://$addr:29720 --gpus 1 --sizes 1M,64M --timeout $3 > "$out/$1.r1.txt" 2>&1 & local p1=$!
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=$2 "$bin" smoke --lib $lib --rank 0 --world-size 2 --init tcp://$addr:29720 --gpus 0 --sizes 1M,64M --timeout $3 > "$out/$1.r0.txt" 2>&1; local rc0=$?
  wait $p1; local rc1=$?; local e=$(now)
  row "2 processes over $addr, NCCL_SOCKET_IFNAME=$2" "$rc0/$rc1" "$(secs $s $e)" "$(tail -1 "$out/$1.r0.txt" | cut -c1-300)"
}
xpair xnode "$ifc" 30
xpair xwrong nosuchif0 15

# Deadlines with blocking communicators: a killed rank, a stopped rank.
dl() { # tag signal
  local s=$(now)
  "$bin" smoke --lib $lib --rank 1 --world-size 2 --init tcp://127.0.0.1:2973${3} --gpus 1 --sizes 1G --iters 2000 --timeout 10 > "$out/$1.r1.txt" 2>&1 & local p1=$!
  "$bin" smoke --lib $lib --rank 0 --world-size 2 --init tcp://127.0.0.1:2973${3} --gpus 0 --sizes 1G --iters 2000 --timeout 10 > "$out/$1.r0.txt" 2>&1 & local p0=$!
  sleep 6; kill -$2 $p1; local k=$(now)
  wait $p0; local rc0=$?; local e=$(now); kill -9 $p1 2>/dev/null; wait $p1 2>/dev/null
  row "rank 1 sent SIG$2 6 s in (deadline 10 s)" "$rc0" "$(secs $k $e) after" "$(tail -1 "$out/$1.r0.txt" | cut -c1-200)"
}
dl killed KILL 1
dl stopped STOP 2
fi

tar czf "$dest/logs.tgz" -C "$out" . 2>/dev/null
echo
echo "| run | exit | seconds | result |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
$py - "$out" "$reps" <<'PY'
import json, sys, os
o, reps = sys.argv[1], int(sys.argv[2])
def ref(p):
    try: return {int(l.split()[0]): float(l.split()[1]) for l in open(os.path.join(o, p)) if l.strip()}
    except Exception as e: return {}
def ours(p):
    try: return {r["bytes"]: r["oop"]["time_us"] for r in json.load(open(os.path.join(o, p)))["rows"]}
    except Exception as e: return {}
def ok(p):
    try: d = json.load(open(os.path.join(o, p))); return d["verdict"][:40]
    except Exception as e: return str(e)[:40]
for mode, rf, of in () if reps == 0 else (("1 process", "ref1", "ours1"), ("1 process per GPU", "refn", "oursn")):
    print(f"\n{mode}: time per all-reduce, us (float32, out of place, 20 iterations; {reps} runs of each, alternating; median [min-max])")
    print("| size | reference | nccl-find | time ratio (median) | busbw ratio (median) |")
    print("|---|---|---|---|---|")
    R = [ref(f"{rf}.{i+1}.txt") for i in range(reps)]; O = [ours(f"{of}.{i+1}.json") for i in range(reps)]
    med = lambda v: sorted(v)[len(v) // 2] if len(v) % 2 else (sorted(v)[len(v) // 2 - 1] + sorted(v)[len(v) // 2]) / 2
    for b in sorted(R[0]):
        r = [x[b] for x in R if b in x]; u = [x[b] for x in O if b in x]
        if not (r and u):
            print(f"| {b} | - | - | - | - |"); continue
        rs = f"{med(r):.1f} [{min(r):.1f}-{max(r):.1f}]"; us = f"{med(u):.1f} [{min(u):.1f}-{max(u):.1f}]"
        print(f"| {b} | {rs} | {us} | {med(u) / med(r):.2f} | {med(r) / med(u):.3f} |")
    print("  " + "; ".join(ok(f"{of}.{i+1}.json") for i in range(reps)))
PY
