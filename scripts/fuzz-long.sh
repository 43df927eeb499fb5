#!/usr/bin/env bash
# Long fuzzing (not CI; CI runs its short runs): every surface that reads hostile bytes, a
# million executions each under ASan and UBSan (halt on error), from the committed corpora
# (tests/fuzz/corpus/<target>) and fresh seeds. Prints, per target, executions, coverage
# (libFuzzer's cov: edges), corpus size and crashes; the last line is one JSON object.
# Afterwards the corpora are merged (minimized) into --out DIR/corpus: copy them over
# tests/fuzz/corpus to commit what the run found.
#   scripts/fuzz-long.sh --out DIR [--runs N] [--targets "decode requests ring front_door dataset transfer"]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out= runs=1000000 targets="requests ring front_door dataset transfer decode"
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    *) echo "usage: scripts/fuzz-long.sh --out DIR [--runs N] [--targets LIST]" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "scripts/fuzz-long.sh: --out DIR is required" >&2; exit 2; }
mkdir -p "$out"
"$here/scripts/setup.sh" release >/dev/null
(cd "$here" && cmake --preset fuzz >/dev/null && cmake --build --preset fuzz >&2)
bin=$here/build/fuzz/tests/fuzz
rm -rf "$out/seeds" && "$bin/nexus_fuzz_seeds" "$out/seeds"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
json="{"
for t in $targets; do
  work=$out/work/$t
  mkdir -p "$work" "$out/artifacts/$t" "$out/corpus/$t"
  [ -d "$here/tests/fuzz/corpus/$t" ] && cp -n "$here/tests/fuzz/corpus/$t"/* "$work/" 2>/dev/null || true
  seeds=$out/seeds/$t
  [ -d "$seeds" ] || seeds=$out/seeds/requests
  echo "[fuzz] $t: $runs executions" >&2
  # The dataset target runs libhdf5 as the sandboxed reader does (tests/CMakeLists.txt): no leak
  # check (libhdf5 leaks on some damaged files) and a failed malloc returns NULL, as it does there
  # (libhdf5 asks for terabytes given a crafted size; RLIMIT_AS makes that fail in the reader).
  # It also loops forever on some corrupt heaps (H5HG), and reads past a buffer on some (heap
  # overflows in H5MM_strdup): in nexusd only the sandboxed reader meets them (its deadline,
  # RLIMIT_CPU and its own address space). Here fork mode goes on past them, and each finding is
  # then replayed and counted as libhdf5's (its first frame outside the sanitizer is libhdf5's)
  # or ours.
  opts=halt_on_error=1:abort_on_error=1:detect_leaks=1
  mode=()
  if [ "$t" = dataset ]; then
    opts=halt_on_error=1:abort_on_error=1:detect_leaks=0:allocator_may_return_null=1
    mode=(-fork=1 -ignore_timeouts=1 -ignore_ooms=1 -ignore_crashes=1 -timeout=2)
  fi
  export ASAN_OPTIONS=$opts
  start=$(date +%s)
  set +e
  "$bin/nexus_${t}_fuzz" "$work" "$seeds" -runs="$runs" -seed=1 -max_len=65536 -timeout=30 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$out/artifacts/$t/" "${mode[@]}" >"$out/$t.log" 2>&1
  rc=$?
  set -e
  secs=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$t.log" | grep -o '[0-9]*$' | tail -1)
  [ -n "$execs" ] || execs=$(grep -o '^#[0-9]*: cov' "$out/$t.log" | tail -1 | grep -o '[0-9]*')  # fork mode
  cov=$(grep -o 'cov: [0-9]*' "$out/$t.log" | tail -1 | grep -o '[0-9]*')
  timeouts=$(find "$out/artifacts/$t" -type f -name 'timeout-*' | wc -l)
  crashes=0 libhdf5=0
  for a in $(find "$out/artifacts/$t" -type f ! -name 'timeout-*'); do
    frame=$("$bin/nexus_${t}_fuzz" "$a" 2>&1 | grep -E '^ +#[0-9]+ ' | grep -v -E 'libclang_rt|compiler-rt|sanitizer|in (malloc|calloc|realloc|free|strdup|strlen|memcpy|memmove|memset|__interceptor)' | head -1)
    case $frame in *libhdf5*) libhdf5=$((libhdf5 + 1)) ;; *) crashes=$((crashes + 1)) ;; esac
  done
  "$bin/nexus_${t}_fuzz" -merge=1 "$out/corpus/$t" "$work" >/dev/null 2>&1 || true
  corpus=$(find "$out/corpus/$t" -type f | wc -l)
  printf '[fuzz] %-10s execs %-9s cov %-6s corpus %-5s crashes %s (in libhdf5 %s) timeouts %s  (%ss, exit %s)\n' "$t" \
    "${execs:-0}" "${cov:-0}" "$corpus" "$crashes" "$libhdf5" "$timeouts" "$secs" "$rc" >&2
  json+="\"$t\": {\"execs\": ${execs:-0}, \"cov\": ${cov:-0}, \"corpus\": $corpus, \"crashes\": $crashes, \"libhdf5_findings\": $libhdf5, \"timeouts\": $timeouts, \"seconds\": $secs, \"exit\": $rc},"
done
echo "${json%,}}"
