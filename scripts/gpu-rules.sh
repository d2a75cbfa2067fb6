#!/usr/bin/env bash
# What NCCL does here, asked of NCCL itself and of nccl-find, on a GPU
# machine (one GPU is enough): the interface NCCL's bootstrap takes
# (ncclGetUniqueId with NCCL_DEBUG=INFO, for the dpkg NCCL and PyTorch's)
# against doctor's; the smoke test on the GPU under both NCCLs, every
# datatype; a NCCL_SOCKET_IFNAME that names nothing, stopped before NCCL
# and, with --run-nccl-anyway, NCCL's own error after the cause; two ranks
# on one GPU, named from NCCL's own warning; torchrun. Prints a table last.
#   scripts/gpu-rules.sh [path/to/nccl-find]    (logs go to $OUT, or ./gpu-rules-logs)
set -u
bin=${1:-target/release/nccl-find}
dest=${OUT:-gpu-rules-logs}
out=$(mktemp -d)
mkdir -p "$dest"
export NCCL_NVLS_ENABLE=0
py=/opt/torch/.venv/bin/python
torchrun=/opt/torch/.venv/bin/torchrun
torchlib=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 | head -1)
dpkglib=/usr/lib/x86_64-linux-gnu/libnccl.so.2
results=()
row() { results+=("$(printf '| %-46s | %-5s | %s |' "$1" "$2" "$3")"); }
last() { tail -1 "$1" | cut -c1-150; }

cat > "$out/uid.py" <<'PY'
import ctypes, sys
l = ctypes.CDLL(sys.argv[1])
b = ctypes.create_string_buffer(128)
print("rc", l.ncclGetUniqueId(b), flush=True)
PY
# NCCL's own pick, and doctor's, for each NCCL file and setting.
pick() { # name, lib, NCCL_HOME, env...
  local name=$1 lib=$2 home=$3; shift 3
  local nccl ours
  nccl=$(env "$@" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALL $py "$out/uid.py" "$lib" 2>&1 | sed -n 's/.*Bootstrap *: Using \([^:]*\):.*/\1/p' | head -1)
  ours=$(env "$@" NCCL_HOME="$home" "$bin" doctor --json --root / 2>/dev/null | $py -c '
import json, sys
for f in json.load(sys.stdin)["findings"]:
    t = f["text"]
    if t.startswith("NCCL would use "): print(t.split()[3]); break
    if t.startswith("NCCL would find no interface"): print("none"); break')
  row "pick: $name" "$([ "$nccl" = "$ours" ] && echo same || echo DIFF)" "NCCL ${nccl:-none}, nccl-find ${ours:-?}"
}
torchhome=$(dirname "$(dirname "$torchlib")")
ip_names=$($py -c 'import socket; print(",".join(n for _, n in socket.if_nameindex()))')
echo "interfaces: $ip_names" > "$out/ifaces.txt"
pick "2.28.3 (dpkg), default" "$dpkglib" /usr
pick "2.28.9 (torch), default" "$torchlib" "$torchhome"
pick "2.28.9, NCCL_SOCKET_IFNAME=lo" "$torchlib" "$torchhome" NCCL_SOCKET_IFNAME=lo
pick "2.28.9, NCCL_SOCKET_IFNAME=e (one char)" "$torchlib" "$torchhome" NCCL_SOCKET_IFNAME=e
pick "2.28.3, NCCL_SOCKET_IFNAME=^lo" "$dpkglib" /usr NCCL_SOCKET_IFNAME=^lo

VIRTUAL_ENV=/opt/torch/.venv "$bin" doctor > "$out/doctor.txt" 2>&1; rc=$?
row "doctor (torch's venv)" "$rc" "$(last "$out/doctor.txt")"
"$bin" smoke --lib "$torchlib" --timeout 60 > "$out/smoke-torch.txt" 2>&1; rc=$?
row "smoke, 2.28.9, 1 GPU" "$rc" "$(last "$out/smoke-torch.txt")"
"$bin" smoke --lib "$dpkglib" --dtypes all --sizes 4K,1M --timeout 60 > "$out/smoke-dpkg.txt" 2>&1; rc=$?
row "smoke, 2.28.3, every datatype" "$rc" "$(last "$out/smoke-dpkg.txt")"
NCCL_SOCKET_IFNAME=nosuch0 "$bin" smoke --lib "$torchlib" --timeout 30 > "$out/smoke-noif.txt" 2>&1; rc=$?
row "smoke, NCCL_SOCKET_IFNAME=nosuch0" "$rc" "$(last "$out/smoke-noif.txt")"
NCCL_SOCKET_IFNAME=nosuch0 "$bin" smoke --lib "$torchlib" --timeout 30 --run-nccl-anyway > "$out/smoke-noif-anyway.txt" 2>&1; rc=$?
row "smoke, nosuch0, --run-nccl-anyway" "$rc" "$(last "$out/smoke-noif-anyway.txt")"
"$bin" smoke --lib "$torchlib" --rank 0 --world-size 2 --init tcp://127.0.0.1:29641 --gpus 0 --timeout 30 > "$out/dup.r0.txt" 2>&1 & p0=$!
"$bin" smoke --lib "$torchlib" --rank 1 --world-size 2 --init tcp://127.0.0.1:29641 --gpus 0 --timeout 30 > "$out/dup.r1.txt" 2>&1; rc1=$?
wait $p0; rc0=$?
row "two ranks on one GPU" "$rc0/$rc1" "$(last "$out/dup.r0.txt")"
$torchrun --nproc-per-node 1 --master-port 29642 --no-python "$bin" smoke --timeout 60 > "$out/torchrun.txt" 2>&1; rc=$?
row "torchrun --nproc-per-node 1 --no-python smoke" "$rc" "$(last "$out/torchrun.txt")"

tar czf "$dest/logs.tgz" -C "$out" . 2>/dev/null
echo
cat "$out/ifaces.txt"
echo "| run | exit | last line, or the answers |"
echo "|---|---|---|"
printf '%s\n' "${results[@]}"
