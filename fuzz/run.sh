#!/usr/bin/env bash
# Fuzzes every target for SECS seconds (default 600), two at a time, each
# corpus seeded from fuzz/seeds (fuzz/seed.sh writes them). Per-input limit:
# 1 s and 256 MiB: any input past either is a failure (the library's inputs
# are bounded, and every parser costs time and memory in proportion). Logs in fuzz/logs; crashes in
# fuzz/artifacts. Needs cargo-fuzz; works on stable with RUSTC_BOOTSTRAP=1.
set -u
cd "$(dirname "$0")"
secs=${1:-600}
export RUSTC_BOOTSTRAP=1
# AddressSanitizer holds freed memory in a quarantine (256 MiB by default),
# which the RSS limit would count: keep it small, so that the limit measures
# what the parser itself uses.
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=16}
cargo fuzz build -O >/dev/null 2>&1 || { echo "cargo fuzz build failed" >&2; exit 1; }
mkdir -p logs
run() {
  local t=$1
  mkdir -p "corpus/$t"
  nice -n 19 cargo fuzz run -O "$t" "corpus/$t" "seeds/$t" -- \
    -max_total_time="$secs" -timeout=1 -rss_limit_mb=256 -malloc_limit_mb=256 -print_final_stats=1 >"logs/$t.log" 2>&1
  echo "$t exit $?" >>logs/summary.txt
}
: >logs/summary.txt
targets=(header elf dpkg pc rendezvous ldcache spack)
for ((i = 0; i < ${#targets[@]}; i += 2)); do
  run "${targets[$i]}" &
  [ $((i + 1)) -lt ${#targets[@]} ] && run "${targets[$((i + 1))]}" &
  wait
done
echo "| target | executions | exec/s | corpus | crashes/hangs |"
echo "|---|---|---|---|---|"
for t in "${targets[@]}"; do
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$')
  n=$(ls "corpus/$t" | wc -l)
  bad=$(ls artifacts/"$t" 2>/dev/null | wc -l)
  echo "| $t | ${runs:-?} | ${rate:-?} | $n | $bad |"
done
