#!/usr/bin/env bash
# nccl-find smoke under the launchers of a GPU machine (the device's image:
# PyTorch's torchrun in /opt/torch/.venv, Open MPI's mpirun), with no flags:
# the real all-reduce with one process under each, and two processes meeting
# (--rendezvous-only) under each. With several GPUs (N), also one process
# per GPU under each launcher (the default sweep), and faults under each: a
# rank killed mid-sweep, a rank stopped (SIGSTOP), each with --timeout 10.
# Prints a table last; each run's output is kept under $OUT (or
# ./gpu-launchers-logs).
#   scripts/gpu-launchers.sh [path/to/nccl-find]      (ONLY=faults: the faults alone)
set -u
bin=$(readlink -f "${1:-target/release/nccl-find}")
dest=${OUT:-gpu-launchers-logs}
mkdir -p "$dest"
export NCCL_NVLS_ENABLE=0
torchrun=/opt/torch/.venv/bin/torchrun
mpirun=$(command -v mpirun || true)
results=()
row() { results+=("$(printf '| %-58s | %-9s | %7s | %s |' "$1" "$2" "$3" "$4")"); }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b-a}'; }
run() { # file, name, command...
  local f=$1 name=$2; shift 2
  local s; s=$(now)
  timeout 300 "$@" > "$dest/$f.txt" 2>&1; local rc=$?
  local e; e=$(now)
  local exch; exch=$(grep -m1 -o 'exchange: [a-z0-9-]*' "$dest/$f.txt" | cut -d' ' -f2)
  local v; v=$(grep -E '^\[rank 0\] (OK|FAILED)|^(OK|FAILED)' "$dest/$f.txt" | tail -1 | cut -c1-80)
  row "$name" "$rc" "$(secs "$s" "$e")" "${exch:-none}: ${v:-$(tail -1 "$dest/$f.txt" | cut -c1-80)}"
}
nvidia-smi -L > "$dest/gpus.txt"; "${torchrun%/*}/python" -c 'import torch; print("torch", torch.__version__)' > "$dest/versions.txt" 2>&1
[ -n "$mpirun" ] && "$mpirun" --version >> "$dest/versions.txt" 2>&1
# Faults: the second nccl-find process of the job (not the launcher, whose
# command line names the binary too) killed or stopped 8 s into a long
# sweep; every process must be gone by --timeout 10 + grace.
fault() { # file, name, signal, launcher...
  local f=$1 name=$2 sig=$3; shift 3
  timeout 120 "$@" "$bin" smoke --sizes 1G --iters 2000 --timeout 10 > "$dest/$f.txt" 2>&1 & local p=$!
  sleep 8
  local victim; victim=$(pgrep -x nccl-find | sort -n | sed -n 2p)
  local t; t=$(now)
  [ -n "$victim" ] && kill -"$sig" "$victim"
  wait $p; local rc=$?; local e; e=$(now)
  [ "$sig" = STOP ] && [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
  sleep 1; local left; left=$(pgrep -xc nccl-find || true)
  row "$name" "$rc" "$(secs "$t" "$e")" "after the $sig; left: ${left:-0}; $(grep -hE 'FAILED|interrupted' "$dest/$f.txt" | head -1 | cut -c1-90)"
}
n=$(nvidia-smi -L | wc -l)
if [ "${ONLY:-}" != faults ]; then
  run tr1 "torchrun --standalone --nproc-per-node=1 (all-reduce)" "$torchrun" --no-python --standalone --nproc-per-node=1 "$bin" smoke --timeout 60
  run tr1s "torchrun static --master-port, 1 process (all-reduce)" "$torchrun" --no-python --nnodes=1 --node-rank=0 --master-addr=127.0.0.1 --master-port=29631 --nproc-per-node=1 "$bin" smoke --timeout 60
  run tr2 "torchrun --standalone --nproc-per-node=2 --rendezvous-only" "$torchrun" --no-python --standalone --nproc-per-node=2 "$bin" smoke --rendezvous-only --timeout 60
  if [ -n "$mpirun" ]; then
    run mp1 "mpirun -np 1 (all-reduce)" "$mpirun" --allow-run-as-root -np 1 "$bin" smoke --timeout 60
    run mp2 "mpirun -np 2 --rendezvous-only" "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$bin" smoke --rendezvous-only --timeout 60
  fi
  if [ "$n" -gt 1 ]; then
    run trN "torchrun --standalone --nproc-per-node=$n (sweep)" "$torchrun" --no-python --standalone --nproc-per-node="$n" "$bin" smoke --timeout 60
    run trNs "torchrun static --master-port, $n processes (sweep)" "$torchrun" --no-python --nnodes=1 --node-rank=0 --master-addr=127.0.0.1 --master-port=29632 --nproc-per-node="$n" "$bin" smoke --timeout 60
    [ -n "$mpirun" ] && run mpN "mpirun -np $n (sweep)" "$mpirun" --allow-run-as-root -np "$n" "$bin" smoke --timeout 60
    run trNd "torchrun --standalone x$n, --dtypes all" "$torchrun" --no-python --standalone --nproc-per-node="$n" "$bin" smoke --dtypes all --timeout 60
  fi
fi
if [ "$n" -gt 1 ]; then
  fault trkill "torchrun x$n, a rank SIGKILLed mid-sweep" KILL "$torchrun" --no-python --standalone --nproc-per-node="$n"
  fault trstop "torchrun x$n, a rank SIGSTOPped mid-sweep" STOP "$torchrun" --no-python --standalone --nproc-per-node="$n"
  if [ -n "$mpirun" ]; then
    fault mpkill "mpirun -np $n, a rank SIGKILLed mid-sweep" KILL "$mpirun" --allow-run-as-root -np "$n"
    fault mpstop "mpirun -np $n, a rank SIGSTOPped mid-sweep" STOP "$mpirun" --allow-run-as-root -np "$n"
  fi
fi
echo
cat "$dest/versions.txt"
echo "| run | exit | seconds | exchange: rank 0's verdict |"
echo "|---|---|---|---|"
printf '%s\n' "${results[@]}"
