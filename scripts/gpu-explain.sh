#!/usr/bin/env bash
# Torch jobs that fail on a GPU machine, their logs kept for `nccl-find
# explain` (cli/tests/explain/gpu/ holds them, docs/explain.md quotes
# them): a NCCL_SOCKET_IFNAME that names nothing; an interface that leads
# nowhere between two emulated nodes (network namespaces, scripts/netns-pair.py,
# each node with an ib0 that NCCL's default rule takes and that reaches
# nothing), at NCCL_DEBUG=WARN and INFO; two ranks on one GPU (torchrun);
# a /dev/shm of 64 KiB; a rank that stops calling collectives with RAS
# turned off; a job that ends well. Then explain on each, and --here on
# node b. One GPU is enough. Prints a table last.
#   scripts/gpu-explain.sh [path/to/nccl-find]   (logs.tgz and table.txt go to $OUT, or ./gpu-explain-logs)
set -u
bin=$(readlink -f "${1:-target/release/nccl-find}")
out=${OUT:-gpu-explain-logs}
dest=$(mktemp -d)
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
py=/opt/torch/.venv/bin/python
torchrun=/opt/torch/.venv/bin/torchrun
results=()
row() { results+=("$(printf '| %-34s | %-4s | %s |' "$1" "$2" "$3")"); }

cat > /tmp/ge-job.py <<'PY'
import datetime, os, sys, time
import torch, torch.distributed as d
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(0)
d.init_process_group("nccl", timeout=datetime.timedelta(seconds=int(os.environ.get("JOB_TIMEOUT", "30"))))
x = torch.ones(1 << 20, device="cuda")
d.all_reduce(x); torch.cuda.synchronize()
print(f"rank {rank}: first all_reduce done", flush=True)
if os.environ.get("JOB_STALL") == str(rank):
    time.sleep(90)
d.all_reduce(x); torch.cuda.synchronize()
print(f"rank {rank}: done", flush=True)
d.destroy_process_group()
PY
printf '127.0.0.1 localhost\n10.231.9.1 node-a\n10.231.9.2 node-b\n' > /tmp/nf-hosts
printf '127.0.0.1 localhost\n' > /tmp/nf-nohosts

# pair NAME SHM ENV...: ranks 0 and 1 on nodes a and b, one log each.
pair() {
  local name=$1 shm=$2; shift 2
  local r h
  for r in 0 1; do
    h=$([ $r = 0 ] && echo a || echo b)
    (env RANK=$r WORLD_SIZE=2 MASTER_ADDR=10.231.9.1 MASTER_PORT=29700 "$@" timeout 75 \
      nsenter --net=/run/netns/nf-$h unshare --uts --mount sh -c '
        mount --bind /tmp/nf-hosts /etc/hosts && hostname "$0" &&
        if [ "$1" != - ]; then mount -t tmpfs -o size="$1" tmpfs /dev/shm; fi && shift && exec "$@"' \
      "node-$h" "$shm" "$py" /tmp/ge-job.py > "$dest/$name.rank$r.log" 2>&1
     echo $? > "$dest/$name.rank$r.rc") &
  done
  wait
}

# explain NAME FILES...: explain's first and last lines, and its exit.
explain() {
  local name=$1; shift
  (cd "$dest" && "$bin" explain "$@") > "$dest/$name.explain.txt" 2>&1
  local rc=$?
  row "$name" "$rc" "$(head -1 "$dest/$name.explain.txt" | cut -c1-220)"
  row "" "" "$(tail -1 "$dest/$name.explain.txt" | cut -c1-220)"
}

pyroute=$(ls gpu-dist/pyroute2-*.whl 2>/dev/null | head -1)
if [ -n "$pyroute" ]; then
  rm -rf /tmp/nf-pyroute2 && "$py" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall('/tmp/nf-pyroute2')" "$pyroute"
  export PYTHONPATH=/tmp/nf-pyroute2
  if "$py" scripts/netns-pair.py up > "$dest/netns.txt" 2>&1; then
    unset PYTHONPATH
    pair ok - NCCL_SOCKET_IFNAME=eth0 NCCL_DEBUG=INFO
    explain ok ok.rank0.log ok.rank1.log
    pair bad-ifname - NCCL_SOCKET_IFNAME=nosuch0 NCCL_DEBUG=WARN
    explain bad-ifname bad-ifname.rank0.log bad-ifname.rank1.log
    pair nowhere-warn - NCCL_DEBUG=WARN JOB_TIMEOUT=40
    explain nowhere-warn nowhere-warn.rank0.log nowhere-warn.rank1.log
    pair nowhere-info - NCCL_DEBUG=INFO JOB_TIMEOUT=40
    explain nowhere-info nowhere-info.rank0.log nowhere-info.rank1.log
    (cd "$dest" && nsenter --net=/run/netns/nf-b "$bin" explain --here nowhere-info.rank1.log) > "$dest/nowhere-info.here.txt" 2>&1
    row "nowhere-info --here, on node b" "$?" "$(tail -1 "$dest/nowhere-info.here.txt" | cut -c1-220)"
    pair shm 64k NCCL_SOCKET_IFNAME=eth0 NCCL_DEBUG=WARN
    explain shm shm.rank0.log shm.rank1.log
    pair ras-off - NCCL_SOCKET_IFNAME=eth0 NCCL_DEBUG=INFO NCCL_RAS_ENABLE=0 JOB_STALL=1 JOB_TIMEOUT=20
    explain ras-off ras-off.rank0.log ras-off.rank1.log
  else
    row "two nodes" "-" "the namespaces could not be made: $(tail -1 "$dest/netns.txt")"
  fi
  PYTHONPATH=/tmp/nf-pyroute2 "$py" scripts/netns-pair.py down >> "$dest/netns.txt" 2>&1
else
  row "two nodes" "-" "skipped: no pyroute2 wheel in gpu-dist/"
fi

# Two ranks on one GPU, under torchrun (its --tee prefixes each line).
(env NCCL_DEBUG=WARN CUDA_VISIBLE_DEVICES=0 timeout 75 "$torchrun" --standalone --nproc-per-node=2 --tee 3 \
  /tmp/ge-job.py > "$dest/dup-gpu.log" 2>&1; echo $? > "$dest/dup-gpu.rc")
explain dup-gpu dup-gpu.log

{
  for f in "$dest"/*.rc; do echo "$(basename "$f" .rc): exit $(cat "$f")"; done
  echo
  echo "| run | exit | explain's first and last lines |"
  echo "|---|---|---|"
  printf '%s\n' "${results[@]}"
} > "$dest/table.txt"
tar czf "$out/logs.tgz" -C "$dest" .
cp "$dest/table.txt" "$out/table.txt"
cat "$dest/table.txt"
