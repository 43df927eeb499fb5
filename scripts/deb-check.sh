#!/usr/bin/env bash
# Installs the Debian package in a clean Debian 12 root (debootstrap, as a newcomer's machine),
# then: nexusd --check-config on the packaged configuration; an out-of-tree tenant built with
# find_package(nexus) against the installed package; nexusd started from the package and that
# tenant served. Not CI (a root and its packages take minutes); needs root and Debian's archive.
#   scripts/deb-check.sh [PACKAGE.deb]      (default: build it with scripts/package.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
deb=${1:-$("$here/scripts/package.sh" | tail -n 1)}
base=/tmp/nexus-deb-root-base
root=/tmp/nexus-deb-root
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
[ -x "$base/bin/bash" ] || debootstrap --variant=minbase bookworm "$base" http://deb.debian.org/debian >/tmp/nexus-debootstrap.log
cleanup() { for m in dev proc sys; do umount -l "$root/$m" 2>/dev/null || true; done; }
trap cleanup EXIT
cleanup; rm -rf "$root"; cp -a "$base" "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"; mount --rbind /sys "$root/sys"; mount --rbind /dev "$root/dev"
cp "$deb" "$root/tmp/nexus.deb"
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin bash -c "$1"; }
echo "[deb-check] installing $(basename "$deb") and its dependencies in a clean Debian 12 root" >&2
in_root "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /tmp/nexus.deb >/dev/null"
echo "[deb-check] nexusd --check-config on the packaged configuration" >&2
in_root "nexusd --check-config --config /etc/nexus/nexusd.toml"
in_root "getent passwd nexus >/dev/null && echo '[deb-check] user nexus exists'"
echo "[deb-check] an out-of-tree tenant with find_package(nexus)" >&2
in_root "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ make >/dev/null && \
  cmake -S /usr/share/doc/nexus/examples/out_of_tree -B /tmp/hello >/dev/null && cmake --build /tmp/hello >/dev/null"
echo "[deb-check] the packaged nexusd serves it" >&2
in_root "nexusd --config /etc/nexus/nexusd.toml --socket /tmp/n.sock --state-dir /tmp/nexus-state --log-level warn & \
  for i in \$(seq 100); do [ -S /tmp/n.sock ] && break; sleep 0.1; done; /tmp/hello/hello_tenant /tmp/n.sock deb-check; \
  rc=\$?; kill %1; exit \$rc"
echo "[deb-check] OK" >&2
