#!/usr/bin/env bash
# Builds the Debian package of Nexus: nexusd, nexusctl, libnexus (headers, static library, CMake
# package), systemd units, sysusers/tmpfiles entries, the configuration and the embedded weights.
# It links Debian's LibTorch (libtorch-dev, 1.13, CPU), so that every dependency is a Debian
# package (dpkg-shlibdeps computes them); a GPU box builds from source with the CUDA LibTorch.
#   scripts/package.sh [--out DIR]      (default build/deb; prints the .deb's path last)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=$here/build/deb
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    *) echo "usage: scripts/package.sh [--out DIR]" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" -eq 0 ]; then SUDO=; else SUDO=sudo; fi
"$here/scripts/setup.sh" release >/dev/null  # the build's other dependencies
need=()
for p in libtorch-dev libopenblas0-pthread dpkg-dev file; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi
# No venv: CMake finds Debian's LibTorch. No CUDA: Debian's LibTorch has none.
cmake -S "$here" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
  -DNEXUS_VENV=/nonexistent -DNEXUS_WITH_CUDA=OFF -DNEXUS_BUILD_TESTS=OFF >&2
cmake --build "$out" --target nexusd nexus-dataset-reader nexusctl nexus >&2
(cd "$out" && cpack -G DEB >&2)
ls -1 "$out"/nexus_*.deb | tail -n 1
