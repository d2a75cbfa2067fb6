#!/usr/bin/env bash
# nccl-find smoke between machines, on a GPU machine (the device's image:
# torchrun in /opt/torch/.venv, Open MPI's mpirun): rank 0's report of the
# nodes (the facts every rank sent, the connections tested, the timings)
# under torchrun and mpirun; --min-busbw below and above the measured
# figure; and, where `ip netns` and `unshare` work, two emulated nodes: two
# network namespaces (each its own host name, one GPU each) joined by a
# veth pair, each with an unrouted interface that NCCL's default rule takes
# first: the report names it and proposes NCCL_SOCKET_IFNAME, and the run
# with that value passes over NCCL's sockets between the two "nodes".
# Prints a table last; each run's output is kept under $OUT (or
# ./gpu-nodes-logs).
#   scripts/gpu-nodes.sh [path/to/nccl-find]
set -u
bin=$(readlink -f "${1:-target/release/nccl-find}")
dest=${OUT:-gpu-nodes-logs}
mkdir -p "$dest"
export NCCL_NVLS_ENABLE=0
torchrun=/opt/torch/.venv/bin/torchrun
py=/opt/torch/.venv/bin/python
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
run trj "torchrun x$n --json (rank 0's nodes and timings)" "$torchrun" --no-python --standalone --nproc-per-node="$n" "$bin" smoke --json --timeout 60
nodes_of "$dest/trj.txt" > "$dest/trj.nodes.txt" 2>&1
if [ -n "$mpirun" ]; then
  run mpj "mpirun -np $n --json (rank 0's nodes and timings)" "$mpirun" --allow-run-as-root -np "$n" "$bin" smoke --json --timeout 60
  nodes_of "$dest/mpj.txt" > "$dest/mpj.nodes.txt" 2>&1
fi
# --min-busbw: below (1 GB/s) and far above (100000 GB/s) what any GPU does.
run floor1 "torchrun x$n --min-busbw 1" "$torchrun" --no-python --standalone --nproc-per-node="$n" "$bin" smoke --sizes 256M --min-busbw 1 --timeout 60
run floor2 "torchrun x$n --min-busbw 100000" "$torchrun" --no-python --standalone --nproc-per-node="$n" "$bin" smoke --sizes 256M --min-busbw 100000 --timeout 60
# Two emulated nodes, where the machine lets us make them.
if [ "$n" -ge 2 ] && ip netns add nf-gpu-a 2>/dev/null; then
  ok=1
  ip netns add nf-gpu-b || ok=0
  ip link add nfga type veth peer name nfgb || ok=0
  for h in a b; do
    ns=nf-gpu-$h; ip=$([ $h = a ] && echo 1 || echo 2)
    ip -n $ns link set lo up || ok=0
    ip -n $ns link add dummy0 type veth peer name dm1 && ip -n $ns link set dm1 up && ip -n $ns link set dummy0 up || ok=0
    ip -n $ns addr add 10.99.$ip.1/24 dev dummy0 || ok=0
    ip link set nfg$h netns $ns && ip -n $ns link set nfg$h name eth0 && ip -n $ns link set eth0 up || ok=0
    ip -n $ns addr add 10.231.9.$ip/24 dev eth0 || ok=0
  done
  if [ $ok = 1 ]; then
    two() { # file, name, extra env...
      local f=$1 name=$2; shift 2
      for r in 0 1; do
        h=$([ $r = 0 ] && echo a || echo b)
        env "$@" timeout 120 ip netns exec nf-gpu-$h unshare --uts sh -c 'hostname "$0" && exec "$@"' "node-$h" \
          "$bin" smoke ${lib:+--lib "$lib"} --rank $r --world-size 2 --gpus $r --init tcp://10.231.9.1:29555 --token gpu-nodes --timeout 30 \
          > "$dest/$f.$r.txt" 2>&1 &
      done
      wait
      row "$name" "-" "$(said "$dest/$f.0.txt")"
    }
    two ns1 "2 nodes (namespaces), NCCL's default rule"
    two ns2 "2 nodes, NCCL_SOCKET_IFNAME=eth0 (the proposal)" NCCL_SOCKET_IFNAME=eth0
  else
    row "2 nodes (namespaces)" "-" "skipped: the namespaces could not be made"
  fi
  ip netns del nf-gpu-a 2>/dev/null; ip netns del nf-gpu-b 2>/dev/null
else
  row "2 nodes (namespaces)" "-" "skipped: fewer than 2 GPUs, or no ip netns here"
fi
echo
for f in "$dest"/*.nodes.txt; do echo "== $f"; cat "$f"; done
for f in ns1 ns2; do [ -f "$dest/$f.0.txt" ] && { echo "== $f rank 0"; grep -E '^\[rank 0\] (nodes|problem|  |hardware|OK|FAILED|note: timing)' "$dest/$f.0.txt" | cut -c1-220; }; done
echo "| run | exit | rank 0's verdict |"
echo "|---|---|---|"
printf '%s\n' "${results[@]}"
