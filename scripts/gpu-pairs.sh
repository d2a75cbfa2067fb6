#!/usr/bin/env bash
# On a GPU machine with one GPU or more (the device's image: NCCL 2.28.3 from
# dpkg, 2.28.9 in torch's venv): the end of a real two-process job, and
# the check before a job between two emulated nodes.
#
# 1. End of the job: two processes on two emulated nodes, a checked all-reduce;
#    rank 0 is killed (SIGKILL), or stopped (SIGSTOP), the moment it says
#    its data was checked: at the end-of-job fences. Rank 1's own run was
#    right; its last line must name rank 0, never say OK.
# 2. Two emulated nodes (network and UTS namespaces, scripts/netns-pair.py
#    with the pyroute2 wheel from gpu-dist/, one GPU each): the whole
#    smoke test with the pairs timed between them; one node on the image's
#    NCCL and the other on torch's (the comparison of the stacks); a
#    network plugin on one node's loader path only.
# 3. Four emulated nodes on a bridge (one rank each, the GPUs shared in
#    turn): the pairs over NCCL, healthy, then with node c's sending
#    shaped to 200 Mbit/s (the meeting's socket pairs name it first;
#    --run-nccl-anyway lets NCCL run, so that its pairs name it too).
#
# Each run's output is kept under $OUT (or ./gpu-pairs-logs); a table of
# every rank's exit status and last line is printed last.
#   scripts/gpu-pairs.sh [path/to/nccl-find]
set -u
bin=$(readlink -f "${1:-target/release/nccl-find}")
dest=${OUT:-gpu-pairs-logs}
mkdir -p "$dest"
export NCCL_NVLS_ENABLE=0
py=/opt/torch/.venv/bin/python
torchlib=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 | head -1)
dpkglib=$(ls /usr/lib/x86_64-linux-gnu/libnccl.so.2* 2>/dev/null | head -1)
n=$(nvidia-smi -L | wc -l)
rows=()
add() { rows+=("$(printf '| %s | %s | %s |' "$1" "$2" "$3")"); }
last() { grep -v '^\s*$' "$1" | tail -1 | cut -c1-260; }

# 1. The end of a real job: rank 0 killed or stopped at the end. Rank 0
# on node a, rank 1 on node b (two hosts to NCCL, so that one GPU may
# serve both).
endjob() { # name, signal, port
  local name=$1 sig=$2 port=$3 pid0 t0
  t0=$(date +%s)
  (CUDA_VISIBLE_DEVICES=$((1 % n)) NCCL_SOCKET_IFNAME=eth0 timeout 120 \
    nsenter --net=/run/netns/nf-b unshare --uts sh -c 'hostname "$0" && exec "$@"' node-b \
    "$bin" smoke --lib "$torchlib" --rank 1 --world-size 2 \
    --init "tcp://10.231.9.1:$port" --token endjob --timeout 20 > "$dest/$name.1.txt" 2>&1
   echo $? > "$dest/$name.1.rc") &
  local peer=$!
  CUDA_VISIBLE_DEVICES=0 NCCL_SOCKET_IFNAME=eth0 timeout 120 \
    nsenter --net=/run/netns/nf-a unshare --uts sh -c 'hostname "$0" && exec "$@"' node-a \
    "$bin" smoke --lib "$torchlib" --rank 0 --world-size 2 \
    --init "tcp://10.231.9.1:$port" --token endjob --timeout 20 > "$dest/$name.0.txt" 2>&1 &
  pid0=$!
  for _ in $(seq 1 6000); do
    if grep -q 'note: data:' "$dest/$name.0.txt" 2>/dev/null; then
      # The smoke process itself, below timeout, nsenter and unshare's sh.
      pkill "-$sig" -f "smoke --lib $torchlib --rank 0 .*--token endjob" 2>/dev/null; break
    fi
    sleep 0.01
  done
  wait "$peer"
  pkill -KILL -f "smoke --lib $torchlib --rank 0 .*--token endjob" 2>/dev/null; wait "$pid0" 2>/dev/null
  add "$name: rank 0 $sig at the end (rank 1, $(( $(date +%s) - t0 )) s)" "$(cat "$dest/$name.1.rc")" "$(last "$dest/$name.1.txt")"
}

# 2. Two emulated nodes.
pyroute=$(ls gpu-dist/pyroute2-*.whl 2>/dev/null | head -1)
nodes() { # name, then per-rank "host:lib:env" items (world 2)
  local name=$1; shift
  local item h l extra r=0
  for item in "$@"; do
    IFS=: read -r h l extra <<<"$item"
    (env CUDA_VISIBLE_DEVICES=$((r % n)) NCCL_SOCKET_IFNAME=eth0 $extra timeout 120 \
      nsenter --net=/run/netns/nf-$h unshare --uts sh -c 'hostname "$0" && exec "$@"' "node-$h" \
      "$bin" smoke --lib "$l" --rank "$r" --world-size 2 --init tcp://10.231.9.1:29581 --token pairs \
      --timeout 30 > "$dest/$name.$r.txt" 2>&1
     echo $? > "$dest/$name.$r.rc") &
    r=$((r + 1))
  done
  wait
  for r in 0 1; do add "$name rank $r" "$(cat "$dest/$name.$r.rc")" "$(last "$dest/$name.$r.txt")"; done
  grep -h '^\[rank 0\]   pairs:\|^\[rank 0\] nodes:\|^\[rank 0\] problem:\|^\[rank 0\]   [a-zA-Z]' \
    "$dest/$name.0.txt" | cut -c1-400 > "$dest/$name.report.txt"
}
# A namespace's sending shaped (tbf through pyroute2: no `tc` in the
# image): namespace, rate, burst.
shape() {
  "$py" - "$@" <<'PY'
import sys
from pyroute2 import NetNS
with NetNS(sys.argv[1]) as ns:
    i = ns.link_lookup(ifname="eth0")[0]
    ns.tc("add", "tbf", i, 0x10000, rate=sys.argv[2], burst=int(sys.argv[3]), latency="400ms")
print("shaped")
PY
}
# Four emulated nodes, one rank each, the GPUs in turn: name, extra flags.
four() {
  local name=$1 r h; shift
  for r in 0 1 2 3; do
    h=$(echo abcd | cut -c$((r + 1)))
    (CUDA_VISIBLE_DEVICES=$((r % n)) NCCL_SOCKET_IFNAME=eth0 timeout 200 \
      nsenter --net=/run/netns/nf-$h unshare --uts sh -c 'hostname "$0" && exec "$@"' "node-$h" \
      "$bin" smoke --lib "$torchlib" --rank "$r" --world-size 4 --init tcp://10.231.9.1:29591 \
      --token four --sizes 1M,8M --timeout 60 "$@" > "$dest/$name.$r.txt" 2>&1
     echo $? > "$dest/$name.$r.rc") &
  done
  wait
  for r in 0 1 2 3; do add "$name rank $r" "$(cat "$dest/$name.$r.rc")" "$(last "$dest/$name.$r.txt")"; done
  grep -h 'pairs over NCCL\|problem:\|^\[rank 0\]   pairs:\|leave out\|srun\|mpirun --host' \
    "$dest/$name".?.txt | cut -c1-400 > "$dest/$name.report.txt"
}
if [ -n "$pyroute" ] && [ "$n" -ge 1 ]; then
  rm -rf /tmp/nf-pyroute2 && "$py" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall('/tmp/nf-pyroute2')" "$pyroute"
  export PYTHONPATH=/tmp/nf-pyroute2
  if "$py" scripts/netns-pair.py up > "$dest/netns.txt" 2>&1; then
    endjob end-kill KILL 29571
    endjob end-stop STOP 29572
    nodes two-healthy "a:$torchlib:" "b:$torchlib:"
    if [ -n "$dpkglib" ]; then nodes two-nccls "a:$dpkglib:" "b:$torchlib:"; fi
    # A network plugin as NCCL finds one (it exports ncclNetPlugin_v8),
    # on node b's loader path only.
    mkdir -p /tmp/nf-plugin && printf 'const char ncclNetPlugin_v8[256] = "test";\n' > /tmp/nf-plugin/p.c &&
      cc -shared -fPIC -o /tmp/nf-plugin/libnccl-net.so /tmp/nf-plugin/p.c
    nodes two-plugin "a:$torchlib:" "b:$torchlib:LD_LIBRARY_PATH=/tmp/nf-plugin"
    # Node b's sending shaped to 20 Mbit/s: two nodes, so the pairs name
    # the link.
    if shape nf-b 20mbit 4096 > "$dest/shape.txt" 2>&1; then
      nodes two-shaped "a:$torchlib:" "b:$torchlib:"
    else
      add "two nodes, b shaped" "-" "tbf could not be added: $(tail -1 "$dest/shape.txt")"
    fi
  else
    add "two nodes" "-" "the namespaces could not be made: $(tail -1 "$dest/netns.txt")"
  fi
  "$py" scripts/netns-pair.py down >> "$dest/netns.txt" 2>&1
  if "$py" scripts/netns-pair.py up 4 >> "$dest/netns.txt" 2>&1; then
    four four-healthy
    if shape nf-c 200mbit 65536 > "$dest/shape4.txt" 2>&1; then
      four four-c-shaped --run-nccl-anyway
    else
      add "four nodes, c shaped" "-" "tbf could not be added: $(tail -1 "$dest/shape4.txt")"
    fi
  else
    add "four nodes" "-" "the bridge could not be made: $(tail -1 "$dest/netns.txt")"
  fi
  "$py" scripts/netns-pair.py down >> "$dest/netns.txt" 2>&1
else
  add "two nodes" "-" "skipped (no pyroute2 wheel in gpu-dist/)"
fi
for f in "$dest"/*.report.txt; do echo "== $f"; cat "$f"; done
# One file back, whatever the number of runs.
(cd "$dest" && tar czf logs.tgz --remove-files -- *.txt *.rc 2>/dev/null)
echo
echo "| run | exit | last line |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
