#!/usr/bin/env bash
# `nccl-find ras` against a real two-rank torch job, once with torch's own
# NCCL (2.28.9, JSON reports) and once with the image's (2.28.3 through
# LD_PRELOAD: text reports only, a hazard there): healthy, then a rank
# behind (rank 1 asleep while rank 0 waits in an all-reduce). At each, the
# verdict, what was sent (`--json`'s `sent`), the release read from the
# serving process, and whether both ranks still run afterwards. Prints a
# table last.
#   NF=target/release/nccl-find scripts/gpu-ras-hazards.sh [OUTDIR]
set -u
out=$(readlink -f "${1:-gpu-ras-hazards}")
rm -rf "$out" && mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
py=${PY:-/opt/torch/.venv/bin/python}
nf=$(readlink -f "${NF:-target/release/nccl-find}")
work=$(mktemp -d)
here=$(dirname "$(readlink -f "$0")")
row() { # nccl moment flags...
  local nccl=$1 moment=$2; shift 2
  local name="$nccl-$moment${1:+-${1#--}}"
  "$nf" ras "$@" > "$out/$name.txt" 2>&1; local code=$?
  "$nf" ras --json "$@" > "$out/$name.json" 2>/dev/null
  local alive=yes
  for r in 0 1; do kill -0 "$(cat "$work/pid.$r")" 2>/dev/null || alive=no; done
  local facts
  facts=$("$py" - "$out/$name.json" <<'PYF'
import json, sys
v = json.load(open(sys.argv[1]))
libs = v.get("server", {}).get("libraries") or []
read = " and ".join(sorted(str(l.get("nccl_version")) for l in libs)) or "?"
print("%s · %s" % (read, ", ".join(v.get("sent", [])) or "nothing"))
PYF
)
  echo "| $nccl | $moment | ${*:-} | $code | $facts | $alive | $(tail -n1 "$out/$name.txt" | cut -c1-230) |" >> "$out/table.md"
}
: > "$out/table.md"
for nccl in torch image; do
  rm -f "$work"/ready.* "$work"/pid.* "$work"/behind "$work"/end "$work"/launched.* "$work"/done.*
  pre=""
  [ "$nccl" = image ] && pre=/usr/lib/x86_64-linux-gnu/libnccl.so.2
  for r in 0 1; do
    LD_PRELOAD=$pre MASTER_ADDR=127.0.0.1 MASTER_PORT=29651 RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 \
      "$py" "$here/gpu-ras-job.py" "$work" > "$out/job-$nccl.$r.txt" 2>&1 &
  done
  for i in $(seq 1 600); do [ -f "$work/ready.0" ] && [ -f "$work/ready.1" ] && break; sleep 0.2; done
  sleep 2
  row "$nccl" healthy
  [ "$nccl" = image ] && row "$nccl" healthy --ask-anyway
  touch "$work/behind"
  for i in $(seq 1 100); do [ -f "$work/launched.0" ] && break; sleep 0.2; done
  sleep 3
  row "$nccl" behind
  [ "$nccl" = image ] && row "$nccl" behind --ask-anyway
  touch "$work/end"
  for i in $(seq 1 150); do [ -f "$work/done.0" ] && [ -f "$work/done.1" ] && break; sleep 0.2; done
  ended="ran on to its end"
  { [ -f "$work/done.0" ] && [ -f "$work/done.1" ]; } || ended="did NOT finish"
  echo "| $nccl | end | | | | | the job $ended |" >> "$out/table.md"
  sleep 1; pkill -9 -f "gpu-ras-job.py $work" 2>/dev/null; sleep 1
done
echo "| NCCL | moment | flags | exit | release read · sent | ranks alive after | last line |"
echo "|---|---|---|---|---|---|---|"
cat "$out/table.md"
