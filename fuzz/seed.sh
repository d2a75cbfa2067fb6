#!/usr/bin/env bash
# Seeds each fuzz target's corpus from the fixtures (and, for the rendezvous
# decoder, from messages the encoder writes). Run from the repo root.
set -euo pipefail
cd "$(dirname "$0")/.."
s=fuzz/seeds
rm -rf "$s" && mkdir -p "$s"/{header,elf,dpkg,pc,rendezvous,ldcache,spack}
i=0
while IFS= read -r f; do i=$((i+1)); cp "$f" "$s/header/$i.h"; done < <(find fixtures/trees -name 'nccl.h*' -type f | sort)
i=0
while IFS= read -r f; do i=$((i+1)); cp "$f" "$s/elf/$i.so"; done < <(find fixtures/trees -name 'libnccl.so*' -type f | sort | head -12)
i=0
while IFS= read -r f; do i=$((i+1)); cp "$f" "$s/dpkg/$i.status"; done < <(find fixtures/trees -path '*dpkg/status' -type f | sort)
cp fixtures/trees/tarball/opt/*/lib/pkgconfig/nccl.pc "$s/pc/tarball.pc"
cp fixtures/trees/ldcache/etc/ld.so.cache "$s/ldcache/fixture.cache"
i=0
while IFS= read -r f; do i=$((i+1)); cp "$f" "$s/spack/$i.json"; done < <(find fixtures/trees -name spec.json -type f | sort)
# One frame of each message kind (most of them), as the encoder writes it
# (nccl-smoke's fuzz_seeds_are_real_frames checks).
printf 'NCFS\003\001<\000\000\000\003\000\000\000\004\000\000\000\002\000\000\000\001\001\001\001\001\001\001\001\001\001\001\001\001\001\001\001\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002' >"$s/rendezvous/hello"
printf 'NCFS\003\006\020\000\000\000\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003' >"$s/rendezvous/challenge"
printf 'NCFS\003\002 \000\000\000\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004' >"$s/rendezvous/welcome"
printf 'NCFS\003\003\020\000\000\000\016\000token mismatch' >"$s/rendezvous/refused"
printf 'NCFS\003\007\033\000\000\000\021\000nccl-find/hello/3\004\000\000\000\002\000\000\000' >"$s/rendezvous/put"
printf 'NCFS\003\014\036\000\000\000\024\000rank(s) 2 never came\001\000\000\000\002\000\000\000' >"$s/rendezvous/stop"
ls -R "$s" | head -40
