#!/usr/bin/env bash
# `pip install` from the source tree works: builds nexus._native with the project's CMake (no
# LibTorch) into a fresh target folder, then imports the package from there (not through the
# venv's .pth route) and uses it; and the install leaves nothing in the source tree. No build
# isolation: the set-up's venv has setuptools, and PyPI may be unreachable.
#   tests/python/pip_install_test.sh PYTHON SOURCE_DIR
set -euo pipefail
python=$1 source=$2
target=$(mktemp -d /tmp/nexus-pip-target-XXXXXX)
trap 'rm -rf "$target"' EXIT
tree_state() { (cd "$source" && git status --porcelain --ignored python 2>/dev/null || true); }
before=$(tree_state)
"$python" -m pip install --quiet --no-build-isolation --no-deps --no-index --target "$target" "$source/python"
after=$(tree_state)
if [ "$before" != "$after" ]; then
  echo "FAIL  pip install wrote into the source tree:"; diff <(echo "$before") <(echo "$after") || true
  exit 1
fi
PYTHONPATH=$target "$python" - "$target" <<'PY'
import os, sys
import nexus
where = os.path.dirname(nexus.__file__)
assert where.startswith(sys.argv[1]), f"nexus came from {where}, not the pip target"
assert nexus.fnv1a(b"") == 0xcbf29ce484222325 and nexus.fnv1a(b"nexus") == 0x98ef1c1e2079a078, "fnv1a"
assert os.path.exists(os.path.join(where, "_native.pyi")) and issubclass(nexus.BadBatch, nexus.Error)
print(f"ok    pip install ./python: import nexus from {where}; the source tree is as it was")
PY
