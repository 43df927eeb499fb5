#!/usr/bin/env bash
# Measures every learning check over several seeds (not CI: about 10 minutes a seed on 2 cores).
# Runs the [learning] tests of the model test binaries once per seed variant (NEXUS_TEST_SEED;
# tests/support/figures.hpp), collects each checked figure with its bound, and writes
#   DIR/figures.jsonl   every figure of every seed
#   DIR/margins.md      min / median / max per figure against its bound (docs/design/learning-margins.md)
#   DIR/margins.json    the same for machines
#   DIR/margins.png     each figure's seeds beside its bound
#   scripts/learning-margins.sh [--seeds N] [--from K] [--out DIR] [--only PATTERN]
# --from K starts at seed variant K (to add seeds to an earlier run's DIR: its figures are kept).
# --no-build uses the binaries already built (and the venv their build was made with);
# --build-dir DIR names that build (default build/release).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
seeds=5 from=0 out= only= build=1 build_dir=
while [ $# -gt 0 ]; do
  case $1 in
    --seeds) seeds=$2; shift 2 ;;
    --from) from=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;  # a Catch2 test-name pattern instead of every [learning] test
    *) echo "usage: scripts/learning-margins.sh [--seeds N] [--from K] [--no-build] [--build-dir DIR] [--out DIR] [--only PATTERN]" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out=$(mktemp -d /tmp/nexus-margins-XXXXXX)
mkdir -p "$out"
if [ "$build" = 1 ]; then
  venv=$("$here/scripts/setup.sh" release | tail -n 1)
else
  venv=$(sed -n 's/^NEXUS_VENV:PATH=//p' "${build_dir:-$here/build/release}/CMakeCache.txt")
fi
tests=${build_dir:-$here/build/release}/tests
filter=${only:-[learning]}
[ "$from" -gt 0 ] || : >"$out/figures.jsonl"
started=$(date +%s)
for k in $(seq "$from" $((seeds - 1))); do
  for bin in nexus_model_tests nexus_model_integration_tests; do
    echo "[margins] seed variant $k: $bin $filter ($(( $(date +%s) - started )) s so far)" >&2
    NEXUS_TEST_SEED=$k NEXUS_TEST_FIGURES=$out/figures.jsonl \
      "$tests/$bin" "$filter" >"$out/seed$k-$bin.log" 2>&1 ||
      echo "[margins] seed variant $k: a check failed in $bin (see $out/seed$k-$bin.log)" >&2
    grep -h '^\[figure\]' "$out/seed$k-$bin.log" | sed 's/^/  /' >&2 || true
  done
done
"$venv/bin/python" "$here/scripts/learning_margins.py" "$out/figures.jsonl" "$out"
echo "[margins] $(( $(date +%s) - started )) s; results in $out" >&2
