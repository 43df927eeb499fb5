#!/usr/bin/env bash
# A sanitizer over the service tests that run several threads on the model service at once
# (issue 34: executor lanes, the slot leases, the registry's lock), with the model (LibTorch) in:
#   thread   ThreadSanitizer (preset tsan, build/tsan)
#   address  AddressSanitizer + UBSan (preset asan-model, build/asan-model); the CI's asan
#            preset builds without LibTorch, so this is where lanes run under ASan
# nexusd and the model-service integration tests are built with the sanitizer, then those tests
# run, each process writing its reports under $OUT/reports. Exit status 1 if any report was
# written or a test failed. Not part of CI: each build takes about as long as the release build,
# and a sanitizer slows each test several times.
#
# LibTorch comes uninstrumented from the PyPI wheel, and its OpenMP runtime (libgomp) has
# barriers TSan cannot see: reports whose stack is inside those libraries say nothing about
# nexusd's own code, so tests/tsan.supp (and tests/lsan.supp for leaks LibTorch keeps until
# exit) suppress them by library. Everything nexusd itself does (queues, leases, the registry,
# the reactor) is instrumented and reported.
# Usage: scripts/sanitize.sh thread|address [--out DIR] [ctest -R regex]
#        (default: the lanes, service and replicas tests)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in
  thread) preset=tsan; tag=tsan ;;
  address) preset=asan-model; tag=asan ;;
  *) echo "usage: scripts/sanitize.sh thread|address [--out DIR] [ctest -R regex]" >&2; exit 2 ;;
esac
shift
out=$(mktemp -d /tmp/nexus-$tag.XXXXXX)
if [ "${1:-}" = "--out" ]; then out=$2; shift 2; fi
tests=${1:-'lanes|four tenants with different heads|alone and grouped|replica|executor that throws|adapter tenant'}
mkdir -p "$out/reports"
"$here/scripts/setup.sh" release >/dev/null  # packages and the venv (LibTorch); builds release too
cd "$here"
echo "[$tag] build (preset $preset): nexusd, the tenants, the model-service tests" >&2
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" --target nexusd nexus_model_integration_tests nexus_model_tests sft_tenant rl_tenant >&2
export TSAN_OPTIONS="suppressions=$here/tests/tsan.supp log_path=$out/reports/tsan second_deadlock_stack=1 history_size=4"
# protect_shadow_gap=0: the CUDA runtime LibTorch loads maps memory where ASan's gap would be.
export ASAN_OPTIONS="log_path=$out/reports/asan protect_shadow_gap=0 detect_odr_violation=0"
export LSAN_OPTIONS="suppressions=$here/tests/lsan.supp"
export UBSAN_OPTIONS="log_path=$out/reports/ubsan print_stacktrace=1"
echo "[$tag] running: $tests (reports: $out/reports)" >&2
status=0
(cd "build/$preset" && ctest -R "$tests" --output-on-failure --timeout 1800) || status=1
# A report file may hold only LeakSanitizer's list of suppressions it used (Mesa's, LibTorch's):
# what counts is a report of an error.
errors='WARNING: ThreadSanitizer|ERROR: (AddressSanitizer|LeakSanitizer)|runtime error'
if compgen -G "$out/reports/*" >/dev/null && grep -q -E "$errors" "$out"/reports/*; then
  echo "[$tag] sanitizer reports:" >&2
  grep -h -B2 -A14 -E "$errors" "$out"/reports/* | head -200 >&2
  status=1
else
  echo "[$tag] no sanitizer reports" >&2
fi
exit $status
