#!/usr/bin/env bash
# nccl-find smoke between machines, on a GPU machine (the device's image:
# torchrun in /opt/torch/.venv, Open MPI's mpirun): rank 0's report of the
# nodes (the facts every rank sent, the connections tested, the timings)
# under torchrun and mpirun; --min-busbw below and above the measured
# figure; and two emulated nodes (below): network and UTS namespaces, one
# GPU each, with an ib0 that NCCL's default rule takes first and that leads
# nowhere: every rank stops before NCCL with the proposal as its last line,
# the run with the proposal passes over NCCL's sockets, and torch's own
# all_reduce shows what NCCL does under both. Then the other causes found
# at the meeting: a NCCL_SOCKET_IFNAME that matches nothing (on every rank,
# on one), a rank that never comes.
# Prints a table last; each run's output is kept under $OUT (or
# ./gpu-nodes-logs).
#   scripts/gpu-nodes.sh [path/to/nccl-find]
set -u
bin=$(readlink -f "${1:-target/release/nccl-find}")
dest=${OUT:-gpu-nodes-logs}
mkdir -p "$dest"
export NCCL_NVLS_ENABLE=0
torchrun=/opt/torch/.venv/bin/torchrun
py=${PY:-/opt/torch/.venv/bin/python}
mpirun=$(command -v mpirun || true)
n=$(nvidia-smi -L | wc -l)
lib=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -1)
results=()
row() { results+=("$(printf '| %-52s | %-4s | %s |' "$1" "$2" "$3")"); }
# The last verdict line of rank 0, and its report of the nodes.
said() { grep -E '^\[rank 0\] (OK|FAILED)|^(OK|FAILED)' "$1" | tail -1 | cut -c1-110; }
run() { # file, name, command...
  local f=$1 name=$2; shift 2
  timeout 300 "$@" > "$dest/$f.txt" 2>&1; local rc=$?
  row "$name" "$rc" "$(said "$dest/$f.txt")"
}
# The nodes and timings of a --json report (rank 0's object, the one with "nodes").
nodes_of() {
  "$py" - "$1" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
dec, i, docs = json.JSONDecoder(), 0, []
while True:
    j = text.find("{", i)
    if j < 0:
        break
    try:
        d, i = dec.raw_decode(text, j)
        docs.append(d)
    except ValueError:
        i = j + 1
for d in docs:
    if "nodes" in d:
        n = d["nodes"]
        print("same:", "; ".join(n["same"]))
        print("differences:", n["differences"])
        print("tested:", len(n["reach"]["tested"]), "proposed:", n["reach"]["proposed_socket_ifname"])
        print("timings:", json.dumps(d.get("timings")))
        print("verdict:", d["verdict"])
PY
}
nvidia-smi -L > "$dest/gpus.txt"
# NODES_ONLY=1: only the two emulated nodes below.
if [ -z "${NODES_ONLY:-}" ]; then
run trj "torchrun x$n --json (rank 0's nodes and timings)" "$torchrun" --no-python --standalone --nproc-per-node="$n" "$bin" smoke --json --timeout 60
nodes_of "$dest/trj.txt" > "$dest/trj.nodes.txt" 2>&1
if [ -n "$mpirun" ]; then
  run mpj "mpirun -np $n --json (rank 0's nodes and timings)" "$mpirun" --allow-run-as-root -np "$n" "$bin" smoke --json --timeout 60
  nodes_of "$dest/mpj.txt" > "$dest/mpj.nodes.txt" 2>&1
fi
# --min-busbw: below (1 GB/s) and far above (100000 GB/s) what any GPU does.
run floor1 "torchrun x$n --min-busbw 1" "$torchrun" --no-python --standalone --nproc-per-node="$n" "$bin" smoke --sizes 256M --min-busbw 1 --timeout 60
run floor2 "torchrun x$n --min-busbw 100000" "$torchrun" --no-python --standalone --nproc-per-node="$n" "$bin" smoke --sizes 256M --min-busbw 100000 --timeout 60
fi
# Two emulated nodes: network and UTS namespaces (scripts/netns-pair.py,
# with the pure-Python pyroute2 from a wheel in gpu-dist/, since the image
# has no `ip`), one GPU each (rank r takes GPU r mod the GPUs there are: on
# a one-GPU machine both nodes share it, which NCCL allows across hosts),
# NCCL over its sockets between them. Each has
# an ib0 that NCCL's default rule takes first and that leads nowhere, and
# an eth0 that joins them. Every rank's exit status and last line, and the
# wall time of the slowest, per run.
nodes=()
noderow() { # name, file stem, ranks
  local name=$1 f=$2 ranks=$3 cells="" r
  for r in $(seq 0 $((ranks - 1))); do
    cells+="$(cat "$dest/$f.$r.rc" 2>/dev/null || echo -) "
  done
  nodes+=("$(printf '| %s | %s| %s s |' "$name" "$cells" "$(cat "$dest/$f.wall")")")
  for r in $(seq 0 $((ranks - 1))); do
    [ -f "$dest/$f.$r.txt" ] || continue
    nodes+=("|   rank $r: $(grep -v '^\s*$' "$dest/$f.$r.txt" | tail -1 | cut -c1-300) | | |")
  done
}
# ranks: file, name, world, env for every rank, then per-rank "host:rank:env" items.
ranks() {
  local f=$1 name=$2 world=$3 common=$4; shift 4
  local t0 item h r extra
  t0=$(date +%s%N)
  for item in "$@"; do
    IFS=: read -r h r extra <<<"$item"
    (
      if [ "$h" = host ]; then pre=(); else pre=(nsenter --net=/run/netns/nf-$h unshare --uts sh -c 'hostname "$0" && exec "$@"' "node-$h"); fi
      # shellcheck disable=SC2086
      env CUDA_VISIBLE_DEVICES=$((r % n)) $common $extra timeout 120 "${pre[@]}" "$bin" smoke ${lib:+--lib "$lib"} \
        --rank "$r" --world-size "$world" --init "tcp://$addr:29555" --token gpu-nodes --timeout "${tmo:-30}" $flags \
        > "$dest/$f.$r.txt" 2>&1
      echo $? > "$dest/$f.$r.rc"
    ) &
  done
  wait
  local tenths=$(( ($(date +%s%N) - t0) / 100000000 ))
  echo "$((tenths / 10)).$((tenths % 10))" > "$dest/$f.wall"
  noderow "$name" "$f" "$world"
}
# torch's own all_reduce between the two nodes, as NCCL does it. Each node
# has an /etc/hosts that names both: torch's store looks up every client it
# accepts, and a namespace with no name server would stall it there.
printf '127.0.0.1 localhost\n10.231.9.1 node-a\n10.231.9.2 node-b\n' > /tmp/nf-hosts
torch_pair() { # file, name, env...
  local f=$1 name=$2; shift 2
  local t0 r h
  t0=$(date +%s%N)
  for r in 0 1; do
    h=$([ $r = 0 ] && echo a || echo b)
    (env CUDA_VISIBLE_DEVICES=$((r % n)) "$@" timeout 45 nsenter --net=/run/netns/nf-$h unshare --uts --mount \
      sh -c 'mount --bind /tmp/nf-hosts /etc/hosts && hostname "$0" && exec "$@"' "node-$h" \
      "$py" -c "
import torch, torch.distributed as d
d.init_process_group('nccl', init_method='tcp://10.231.9.1:29600', rank=$r, world_size=2)
x = torch.full((1 << 20,), $r + 1.0, device='cuda')
d.all_reduce(x); torch.cuda.synchronize()
print('all_reduce', 'right' if bool((x == 3).all()) else 'WRONG', x[0].item())
d.destroy_process_group()
" > "$dest/$f.$r.txt" 2>&1
    echo $? > "$dest/$f.$r.rc") &
  done
  wait
  local tenths=$(( ($(date +%s%N) - t0) / 100000000 ))
  echo "$((tenths / 10)).$((tenths % 10))" > "$dest/$f.wall"
  for r in 0 1; do
    if grep -q '^all_reduce' "$dest/$f.$r.txt"; then :; else
      [ "$(cat "$dest/$f.$r.rc")" = 124 ] && echo "hung: killed after 45 s" >> "$dest/$f.$r.txt"
    fi
  done
  noderow "$name" "$f" 2
}
pyroute=$(ls gpu-dist/pyroute2-*.whl 2>/dev/null | head -1)
if [ "$n" -ge 1 ] && [ -n "$pyroute" ]; then
  rm -rf /tmp/nf-pyroute2 && "$py" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall('/tmp/nf-pyroute2')" "$pyroute"
  export PYTHONPATH=/tmp/nf-pyroute2
  if "$py" scripts/netns-pair.py up > "$dest/netns.txt" 2>&1; then
    addr=10.231.9.1 flags=
    # ONLY=torch: torch's two runs alone.
    if [ "${ONLY:-}" != torch ]; then
    ranks ns-default "2 nodes, NCCL's default rule (ib0 leads nowhere)" 2 "" a:0: b:1:
    ranks ns-eth0 "2 nodes, NCCL_SOCKET_IFNAME=eth0 (the proposal)" 2 "NCCL_SOCKET_IFNAME=eth0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET" a:0: b:1:
    grep -h 'NET/Socket : Using' "$dest"/ns-eth0.*.txt | sort -u | cut -c1-160 > "$dest/ns-eth0.transport.txt"
    flags=--run-nccl-anyway tmo=20 ranks ns-anyway "2 nodes, default rule, --run-nccl-anyway --timeout 20" 2 "" a:0: b:1:
    ranks ns-nosuch "2 nodes, NCCL_SOCKET_IFNAME=nosuch0 on both" 2 "NCCL_SOCKET_IFNAME=nosuch0" a:0: b:1:
    ranks ns-nosuch1 "2 nodes, NCCL_SOCKET_IFNAME=nosuch0 on rank 1" 2 "NCCL_SOCKET_IFNAME=eth0" a:0: b:1:NCCL_SOCKET_IFNAME=nosuch0
    tmo=8 ranks ns-absent "world of 3, rank 2 never starts (--timeout 8)" 3 "NCCL_SOCKET_IFNAME=eth0" a:0: b:1:
    fi
    torch_pair torch-default "torch all_reduce, NCCL's default rule"
    torch_pair torch-eth0 "torch all_reduce, NCCL_SOCKET_IFNAME=eth0" NCCL_SOCKET_IFNAME=eth0
  else
    nodes+=("| 2 nodes: the namespaces could not be made ($(tail -1 "$dest/netns.txt")) | | |")
  fi
  "$py" scripts/netns-pair.py down >> "$dest/netns.txt" 2>&1
else
  nodes+=("| 2 nodes: skipped (no GPU, or no pyroute2 wheel in gpu-dist/) | | |")
fi
echo
for f in "$dest"/*.nodes.txt; do echo "== $f"; cat "$f"; done
[ -f "$dest/ns-eth0.transport.txt" ] && { echo "== NCCL's transport with the proposal"; cat "$dest/ns-eth0.transport.txt"; }
if [ ${#results[@]} -gt 0 ]; then
  echo "| run | exit | rank 0's verdict |"
  echo "|---|---|---|"
  printf '%s\n' "${results[@]}"
  echo
fi
echo "| two nodes | exit of each rank | wall |"
echo "|---|---|---|"
printf '%s\n' "${nodes[@]}"
