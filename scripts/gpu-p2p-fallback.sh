#!/usr/bin/env bash
# The grouped sends and receives that stand in for all-to-all, gather and
# scatter before NCCL 2.28.3, run on a GPU machine whose NCCL is newer: a
# copy of that libnccl.so.2 with ncclAlltoAll, ncclGather and ncclScatter
# renamed in its symbol table (same length, so the library stays valid and
# loads; only those three lookups fail), so that the smoke test falls back
# as it does on an older NCCL. One process on every GPU, then torchrun with
# a process per GPU; prints each verdict.
#   scripts/gpu-p2p-fallback.sh [path/to/nccl-find] [path/to/libnccl.so.2]
set -u
bin=$(readlink -f "${1:-target/release/nccl-find}")
lib=${2:-$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 | head -1)}
export NCCL_NVLS_ENABLE=0
dir=$(mktemp -d)
python3 - "$lib" "$dir/libnccl.so.2" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
for name in (b"ncclAlltoAll", b"ncclGather", b"ncclScatter"):
    new = name[:-1] + b"X"
    n = data.count(name + b"\0")
    assert n > 0, name
    data = data.replace(name + b"\0", new + b"\0")
    print(f"{name.decode()}: {n} name(s) renamed to {new.decode()}")
open(sys.argv[2], "wb").write(data)
PY
n=$(nvidia-smi -L | wc -l)
ops=all-to-all,gather,scatter
"$bin" smoke --lib "$dir/libnccl.so.2" --ops "$ops" --redops all --dtypes all --sizes 4K,1M --timeout 60 2>&1 |
  grep -E "^NCCL|OK|FAILED|skipped|note: data|grouped" | cut -c1-200
/opt/torch/.venv/bin/torchrun --no-python --standalone --nproc-per-node="$n" "$bin" smoke --lib "$dir/libnccl.so.2" \
  --ops "$ops" --dtypes all --sizes 4K,64M --timeout 60 2>&1 | grep -E "rank 0\] (OK|FAILED|note: .*grouped)" | cut -c1-200
rm -rf "$dir"
