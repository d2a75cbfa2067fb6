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
# One frame of each message kind, written by the encoder itself.
printf 'NCFS\002\001\074\000\000\000\003\000\000\000\004\000\000\000\002\000\000\000\001\001\001\001\001\001\001\001\001\001\001\001\001\001\001\001\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002\002' >"$s/rendezvous/hello"
printf 'NCFS\002\003\020\000\000\000\016\000token mismatch' >"$s/rendezvous/refused"
printf 'NCFS\002\004\024\000\000\000\000\014\000\000\000\000\000\000\000\011\00012 wrong!' >"$s/rendezvous/done"
printf 'NCFS\002\006\020\000\000\000\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003\003' >"$s/rendezvous/challenge"
printf 'NCFS\002\002\252\000\000\000\200\000\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\011\010\000\000\000\006\000\000\000\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004\004' >"$s/rendezvous/welcome"
ls -R "$s" | head -40
