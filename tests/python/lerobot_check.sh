#!/usr/bin/env bash
# Runs tests/python/lerobot_test.py under an interpreter that has `lerobot`: $NEXUS_LEROBOT_PYTHON,
# else the venv scripts/lerobot-venv.sh makes. lerobot pins torch < 2.11 and the project's venv
# has a newer one, so it lives in a venv of its own; where there is none, the test is skipped
# (exit 77, CTest's SKIP_RETURN_CODE) and says how to make one. The venv must be of the same
# python3 as the project's (the build's nexus._native is imported there).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${NEXUS_LEROBOT_PYTHON:-}" ]; then  # named on purpose: a broken one is a failure, not a skip
  exec "$NEXUS_LEROBOT_PYTHON" "$here/lerobot_test.py"
fi
python=${XDG_CACHE_HOME:-$HOME/.cache}/nexus/lerobot-venv/bin/python
if [ ! -x "$python" ] || ! "$python" -c "import lerobot.datasets.lerobot_dataset" 2>/dev/null; then
  echo "SKIP  no interpreter with lerobot at $python: scripts/lerobot-venv.sh makes one (about 8 GB from PyPI)"
  exit 77
fi
exec "$python" "$here/lerobot_test.py"
