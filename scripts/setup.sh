#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks, makes the Python virtual environment that carries
# LibTorch, and builds Nexus (the embedded backbone's weights are committed: no pretraining). Idempotent: a second run installs nothing and rebuilds incrementally.
# Works as root or through sudo. Prints the venv path on its last line for the other scripts.
#   scripts/setup.sh [preset]        (preset: release (default), debug, asan)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
preset=${1:-release}
log() { printf '[setup] %s\n' "$*" >&2; }

if [ "$(id -u)" -eq 0 ]; then SUDO=; else SUDO=sudo; fi

# --- Debian packages -------------------------------------------------------------------------
packages=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates
  clang libclang-rt-14-dev                     # libFuzzer target (fuzz test)
  libboost-dev libflatbuffers-dev flatbuffers-compiler libsystemd-dev catch2
  libtomlplusplus-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libmujoco-dev libosmesa6-dev libhdf5-dev hdf5-tools   # simulators, datasets (h5dump in tests)
  libseccomp-dev                               # the dataset reader's sandbox (seccomp filter)
  libssl-dev                                   # SHA-256 of the feature cache's keys (OpenSSL)
  python3 python3-venv python3-dev pybind11-dev python3-wheel  # the Python client (python/; wheel: pip install ./python offline)
  passwd procps util-linux                     # useradd/runuser for the access tests; pgrep
  tmux                                         # nexusctl top is tested in a real 80x24 terminal
  systemd                                      # systemd-analyze verify, systemd-socket-activate (tests)
  init-system-helpers                          # deb-systemd-helper: the package lifecycle test
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# --- Python virtual environment with LibTorch -------------------------------------------------
# Kept outside the clone, keyed by the requirements' hash, so CI and later clones reuse it.
# LibTorch comes from the PyTorch wheel on PyPI (current, CUDA-enabled). Where PyPI cannot be
# reached, the fallback is Debian's LibTorch 1.13 (CPU only) with Debian's Python packages; the
# choice is recorded in $venv/torch-source. Delete the venv to try PyPI again.
key=$(sha256sum "$here/requirements.txt" | cut -c1-12)
venv=${NEXUS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/nexus/venv-$key}
if [ ! -f "$venv/.complete" ]; then
  log "creating virtual environment $venv (the torch wheel is large; this takes a while once)"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  /usr/bin/python3 -m venv "$venv"
  if "$venv/bin/pip" install -q --retries 2 --upgrade pip >&2 &&
     "$venv/bin/pip" install --retries 2 --progress-bar off -r "$here/requirements.txt" >&2; then
    echo pypi >"$venv/torch-source"
  else
    log "PyPI unreachable: falling back to Debian's LibTorch 1.13 (CPU) and Python packages"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libtorch-dev python3-torch libopenblas0-pthread python3-numpy python3-h5py python3-matplotlib \
      python3-prometheus-client >&2
    rm -rf "$venv"
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    echo debian >"$venv/torch-source"
  fi
  touch "$venv/.complete"
fi
log "LibTorch from $(cat "$venv/torch-source" 2>/dev/null || echo pypi) in $venv"
# Simulators (Meta-World) into the same venv, keyed by their own file: a change there reinstalls
# them without remaking the torch venv. Without PyPI they are skipped with a warning; the tests
# that need them say so (exit 77: skipped) rather than fail.
sim_key=$(sha256sum "$here/requirements-sim.txt" | cut -c1-12)
if [ "$(cat "$venv/torch-source" 2>/dev/null)" = debian ]; then
  log "no PyPI (Debian's LibTorch): Meta-World (requirements-sim.txt) is not installed; its tests skip"
elif [ ! -f "$venv/.sim-$sim_key" ]; then
  log "installing simulators into the venv (requirements-sim.txt: Meta-World)"
  if "$venv/bin/pip" install --retries 2 --timeout 30 --progress-bar off -q -r "$here/requirements-sim.txt" >&2; then
    rm -f "$venv"/.sim-* && touch "$venv/.sim-$sim_key"
  else
    log "WARNING: could not install requirements-sim.txt (no PyPI?): Meta-World tests will be skipped"
  fi
fi

# --- Build ------------------------------------------------------------------------------------
export NEXUS_VENV=$venv
log "building preset $preset (build/$preset)"
cfg_log=$(mktemp)
if ! (cd "$here" && cmake --preset "$preset" >"$cfg_log" 2>&1); then cat "$cfg_log" >&2; exit 1; fi
rm -f "$cfg_log"
(cd "$here" && cmake --build --preset "$preset") >&2
# --- The Python client ---------------------------------------------------------------------------
# `import nexus` in the venv: a .pth file puts this build's package folder on its path (the
# package stays in the build tree; nothing is copied into the venv or the source tree).
if [ -f "$here/build/$preset/python/nexus/__init__.py" ]; then
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$here/build/$preset/python" >"$site/nexus-build.pth"
  log "Python client: import nexus in $venv (from build/$preset/python)"
fi
# --- The embedded backbone ----------------------------------------------------------------------
# Its pretrained weights are committed (weights/backbone-tiny.safetensors, made by
# scripts/pretrain.sh from the sources its recipe lists): every machine loads the same ones, and
# set-up does not pretrain. nexusd finds them by default; the tests and the demo name them.
[ -f "$here/weights/backbone-tiny.safetensors" ] ||
  log "WARNING: weights/backbone-tiny.safetensors is missing from this checkout (scripts/pretrain.sh makes it)"

echo "$venv"
