#!/usr/bin/env bash
# The README's test command: set-up (packages, venv, build), the libFuzzer build, then the whole
# suite through CTest. Needs root (or sudo) because the access tests create Unix users.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then exec sudo -E "$0" "$@"; fi
"$here/scripts/setup.sh" release >/dev/null
cd "$here"
echo "[test] building the libFuzzer target (clang, preset fuzz)" >&2
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz >&2
echo "[test] AddressSanitizer/UBSan build (preset asan): the suite without the fuzz run" >&2
cmake --preset asan >/dev/null
cmake --build --preset asan >&2
ctest --preset asan -j2 -E '^fuzz\.'
echo "[test] release build: the whole suite, with the bounded libFuzzer run" >&2
ctest --preset release -j2
