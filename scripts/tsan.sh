#!/usr/bin/env bash
# ThreadSanitizer over the service tests that run several threads on the model service at once
# (issue 34: executor lanes, the slot leases, the registry's lock): nexusd and the model-service
# integration tests built with -fsanitize=thread (preset tsan, build/tsan), then those tests run,
# each nexusd writing its reports under $OUT/reports. Exit status 1 if any report was written
# or a test failed. Not part of CI: the TSan build takes about as long as the release build, and
# TSan slows each test several times.
#
# LibTorch comes uninstrumented from the PyPI wheel, and its OpenMP runtime (libgomp) has
# barriers TSan cannot see: reports whose stack is inside those libraries say nothing about
# nexusd's own code, so tests/tsan.supp suppresses them by library. Everything nexusd itself
# does (queues, leases, the registry, the reactor) is instrumented and reported.
# Usage: scripts/tsan.sh [--out DIR] [ctest -R regex]   (default: the lanes, service and replicas tests)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d /tmp/nexus-tsan.XXXXXX)
if [ "${1:-}" = "--out" ]; then out=$2; shift 2; fi
tests=${1:-'lanes|four tenants with different heads|alone and grouped|replica|executor that throws'}
mkdir -p "$out/reports"
"$here/scripts/setup.sh" release >/dev/null  # packages and the venv (LibTorch); builds release too
cd "$here"
echo "[tsan] ThreadSanitizer build (preset tsan): nexusd, the tenants, the model-service tests" >&2
cmake --preset tsan >/dev/null
cmake --build --preset tsan --target nexusd nexus_model_integration_tests sft_tenant rl_tenant >&2
export TSAN_OPTIONS="suppressions=$here/tests/tsan.supp log_path=$out/reports/tsan second_deadlock_stack=1 history_size=4"
echo "[tsan] running: $tests (reports: $out/reports)" >&2
status=0
(cd build/tsan && ctest -R "$tests" --output-on-failure --timeout 1800) || status=1
if compgen -G "$out/reports/tsan*" >/dev/null; then
  echo "[tsan] ThreadSanitizer reports:" >&2
  grep -h -A12 "WARNING: ThreadSanitizer" "$out"/reports/tsan* | head -200 >&2
  status=1
else
  echo "[tsan] no ThreadSanitizer reports" >&2
fi
exit $status
