#!/usr/bin/env bash
# Records what NCCL's RAS service (localhost:28028, NCCL 2.24 and newer)
# answers about a real two-rank torch job, on a GPU machine with torch in
# /opt/torch/.venv, at three moments: healthy (both ranks idle after the
# same collectives), a rank behind (rank 1 asleep while rank 0 waits in an
# all-reduce) and a rank killed (SIGKILL). At each: STATUS and VERBOSE
# STATUS, in text and in JSON, each conversation's bytes from the server
# kept as they came (the transcripts `nccl-find ras`'s tests replay).
# On a one-GPU machine both ranks share the GPU as two hosts (NCCL_HOSTID).
# With NF_WHEEL=<nccl-find wheel>, also installs it (pip, into a directory
# of its own) and runs `nccl-find ras` and `nccl-find ras --json` at each
# moment, and once more after the job is gone and under a job started with
# NCCL_RAS_ENABLE=0: ras-<moment>.txt, and a table of the verdicts last.
#   scripts/gpu-ras.sh [OUTDIR]     # default: ./gpu-ras-logs
set -u
out=$(readlink -f "${1:-gpu-ras-logs}")
rm -rf "$out" && mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
py=${PY:-/opt/torch/.venv/bin/python}
work=$(mktemp -d)
here=$(dirname "$(readlink -f "$0")")
cat > "$work/ask.py" <<'PY'
import socket, sys, time
fmt, verbose, dest = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
conv = []  # (who, bytes)
s = socket.create_connection(("localhost", 28028), timeout=30)
def say(line):
    conv.append(("client", line))
    s.sendall(line)
def line():
    b = b""
    while not b.endswith(b"\n"):
        c = s.recv(1)
        if not c:
            break
        b += c
    conv.append(("server", b))
    return b
say(b"CLIENT PROTOCOL 2\n"); line()
say(b"TIMEOUT 5\n"); line()
if fmt == "json":
    say(b"SET FORMAT json\n"); line()
say((b"VERBOSE " if verbose else b"") + b"STATUS\n")
t0 = time.time()
rest = b""
while True:
    c = s.recv(65536)
    if not c:
        break
    rest += c
conv.append(("server", rest))
with open(dest, "wb") as f:
    for who, b in conv:
        f.write(f"--- {who} {len(b)}\n".encode())
        f.write(b)
        if not b.endswith(b"\n"):
            f.write(b"\n")
print(f"{dest}: {len(rest)} bytes in {time.time() - t0:.2f} s")
PY
nf=""
if [ -n "${NF_WHEEL:-}" ]; then
  "$py" -m pip install -q --no-deps --no-index --target "$work/nf" "$NF_WHEEL" > "$out/pip.txt" 2>&1
  nf="$work/nf/bin/nccl-find"
fi
: > "$out/verdicts.txt"
ras_at() { # moment
  [ -n "$nf" ] || return 0
  local t0 t1 code
  t0=$(date +%s%N)
  "$nf" ras > "$out/ras-$1.txt" 2>&1; code=$?
  t1=$(date +%s%N)
  "$nf" ras --json > "$out/ras-$1.json" 2>/dev/null
  echo "| $1 | $code | $(( (t1 - t0) / 1000000 )) ms | $(tail -n1 "$out/ras-$1.txt") |" >> "$out/verdicts.txt"
}
ask_all() { # moment
  ras_at "$1"
  for fmt in text json; do
    for v in 0 1; do
      "$py" "$work/ask.py" "$fmt" "$v" "$out/$1-$fmt$([ $v = 1 ] && echo -verbose).txt" >> "$out/asked.txt" 2>&1
    done
  done
}
# The two ranks started by hand, not by torchrun, whose agent would end
# the whole job once a worker is killed.
# NCCL_PRELOAD=<libnccl.so.2>: the job runs that NCCL instead of torch's
# (the image's dpkg 2.28.3, whose RAS service has no JSON).
for r in 0 1; do
  LD_PRELOAD=${NCCL_PRELOAD:-} MASTER_ADDR=127.0.0.1 MASTER_PORT=29650 RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 \
    "$py" "$here/gpu-ras-job.py" "$work" > "$out/job.$r.txt" 2>&1 &
done
for i in $(seq 1 600); do [ -f "$work/ready.0" ] && [ -f "$work/ready.1" ] && break; sleep 0.2; done
sleep 2
ask_all healthy
touch "$work/behind"
for i in $(seq 1 100); do [ -f "$work/launched.0" ] && break; sleep 0.2; done
sleep 3
ask_all behind
# The rank to kill: not the one that holds the RAS listener (its death
# would leave nothing to ask; that is what `ras` says then).
holder=$("$py" - <<'PYHOLD'
import os
inodes = set()
for line in open("/proc/net/tcp").read().splitlines()[1:] + open("/proc/net/tcp6").read().splitlines()[1:]:
    f = line.split()
    if f[1].endswith(":6D7C") and f[3] == "0A":
        inodes.add(f[9])
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            if os.readlink(f"/proc/{pid}/fd/{fd}").strip("socket:[]") in inodes:
                print(pid); raise SystemExit
    except (OSError, PermissionError):
        pass
PYHOLD
)
victim=$(cat "$work/pid.1")
[ "$holder" = "$victim" ] && victim=$(cat "$work/pid.0")
# KILL_HOLDER=1: kill the process that serves the RAS port instead.
[ -n "${KILL_HOLDER:-}" ] && victim=$holder
echo "the RAS listener is in pid $holder; killing pid $victim" >> "$out/asked.txt"
kill -9 "$victim"
sleep 8
ask_all killed
touch "$work/end"
sleep 2; pkill -9 -f "gpu-ras-job.py $work" 2>/dev/null
wait 2>/dev/null
ras_at gone
if [ -n "$nf" ]; then
  # A job whose NCCL runs with its RAS service turned off.
  rm -f "$work"/ready.* "$work/behind" "$work/end"
  for r in 0 1; do
    NCCL_RAS_ENABLE=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29651 RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 \
      "$py" "$here/gpu-ras-job.py" "$work" > "$out/job-off.$r.txt" 2>&1 &
  done
  for i in $(seq 1 600); do [ -f "$work/ready.0" ] && [ -f "$work/ready.1" ] && break; sleep 0.2; done
  ras_at ras-off
  touch "$work/behind" "$work/end"
  sleep 2; pkill -9 -f "gpu-ras-job.py $work" 2>/dev/null
  wait 2>/dev/null
fi
cat "$out/asked.txt"
echo "| moment | exit | took | last line of nccl-find ras |"
echo "|---|---|---|---|"
cat "$out/verdicts.txt"
rm -rf "$work"
