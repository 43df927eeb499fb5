#!/usr/bin/env bash
# Makes the venv nexus.lerobot's test runs in: lerobot from PyPI with the torch it pins (< 2.11,
# so not the project's venv, whose LibTorch is newer). About 8 GB on disk (torch's CUDA wheels), a few
# minutes. nexus itself needs no install there: the test puts the build's package on PYTHONPATH
# (the extension has no LibTorch in it, so it does not care which torch is beside it).
#   scripts/lerobot-venv.sh [DIR]     (default ~/.cache/nexus/lerobot-venv)
set -euo pipefail
dir=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/nexus/lerobot-venv}
version=0.4.4  # the release the adapter and its test were written against
if [ ! -x "$dir/bin/python" ]; then
  echo "==> making $dir (python3 -m venv)"
  # Debian's python3, as the project's venv (scripts/setup.sh): the build's extension is for it.
  python=/usr/bin/python3
  [ -x "$python" ] || python=python3
  "$python" -m venv "$dir"
fi
echo "==> pip install lerobot==$version into $dir"
"$dir/bin/pip" install --quiet --upgrade pip
"$dir/bin/pip" install --quiet "lerobot==$version"
"$dir/bin/python" -c "import lerobot, torch; print('lerobot', lerobot.__version__, 'torch', torch.__version__)"
echo "==> done: ctest -R python.lerobot (or NEXUS_LEROBOT_PYTHON=$dir/bin/python) runs the adapter's test"
