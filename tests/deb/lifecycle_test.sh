#!/usr/bin/env bash
# The Debian package's life in a fresh, empty root: install -> upgrade -> remove -> purge, with
# dpkg itself (--root, maintainer scripts run chrootless with DPKG_ROOT) and the package's own
# maintainer scripts, units, sysusers/tmpfiles entries and configuration (systemd/). Checks that
# the user is made, the state survives an upgrade and a remove and goes with a purge, the
# administrator's configuration edit survives an upgrade, nexusd is disabled on remove, and that a
# postinst that cannot make the user fails loudly. The package is staged from the source tree and
# this build's binaries (scripts/package.sh builds the real one, with Debian's LibTorch, and
# scripts/deb-check.sh installs it in a debootstrapped root with its dependencies: not CI).
#   tests/deb/lifecycle_test.sh SOURCE_DIR BINARY_DIR        (root; exit 77: skipped)
set -euo pipefail
src=$1 bin=$2
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root (dpkg --root)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

stage() {  # version -> .deb path
  local v=$1 d=$work/stage-$1
  mkdir -p "$d/DEBIAN" "$d/usr/bin" "$d/usr/lib/systemd/system" "$d/usr/lib/sysusers.d" "$d/usr/lib/tmpfiles.d" "$d/etc/nexus"
  for b in daemon/nexusd datasets/nexus-dataset-reader client/nexusctl; do strip -o "$d/usr/bin/$(basename "$b")" "$bin/$b"; done
  sed -e 's|@CMAKE_INSTALL_FULL_BINDIR@|/usr/bin|g' -e 's|@CMAKE_INSTALL_FULL_SYSCONFDIR@|/etc|g' \
      -e 's|@CMAKE_INSTALL_FULL_DOCDIR@|/usr/share/doc/nexus|g' "$src/systemd/nexusd.service.in" >"$d/usr/lib/systemd/system/nexusd.service"
  cp "$src/systemd/nexusd.socket" "$d/usr/lib/systemd/system/"
  cp "$src/systemd/sysusers.d/nexus.conf" "$d/usr/lib/sysusers.d/"
  cp "$src/systemd/tmpfiles.d/nexus.conf" "$d/usr/lib/tmpfiles.d/"
  cp "$src/systemd/nexusd.toml" "$d/etc/nexus/"
  cp "$src/systemd/debian/postinst" "$src/systemd/debian/prerm" "$src/systemd/debian/postrm" "$src/systemd/debian/conffiles" "$d/DEBIAN/"
  cat >"$d/DEBIAN/control" <<CONTROL
Package: nexus
Version: $v
Architecture: $(dpkg --print-architecture)
Maintainer: nexus maintainers <nexus@localhost>
Depends: systemd, init-system-helpers
Description: Multi-tenant post-training of VLA robot models on one shared box (lifecycle test)
CONTROL
  dpkg-deb --root-owner-group -Znone --build "$d" "$work/nexus_$v.deb" >/dev/null
  echo "$work/nexus_$v.deb"
}

fresh_root() {
  local r=$1
  mkdir -p "$r/var/lib/dpkg/info" "$r/var/lib/dpkg/updates" "$r/var/lib/dpkg/triggers" "$r/etc"
  : >"$r/var/lib/dpkg/status"
  : >"$r/var/lib/dpkg/available"
}

in_root() {  # dpkg on root $1 with the rest of the arguments
  local r=$1
  shift
  dpkg --root="$r" --force-script-chrootless --force-depends --force-not-root --log=/dev/null "$@"
}

v1=$(stage 0.9.0)
v2=$(stage 0.9.1)
root=$work/root
fresh_root "$root"

echo "[deb] install into a fresh root"
in_root "$root" -i "$v1" >"$work/install.log" 2>&1 || { cat "$work/install.log"; fail "install failed"; }
grep -q '^nexus:' "$root/etc/passwd" || fail "no nexus user after install"
grep -q '^nexus:' "$root/etc/group" || fail "no nexus group after install"
nexus_uid=$(awk -F: '$1 == "nexus" {print $3}' "$root/etc/passwd")
[ "$(stat -c '%a %u' "$root/var/lib/nexus")" = "700 $nexus_uid" ] || fail "state dir is $(stat -c '%a %u' "$root/var/lib/nexus"), want 700 $nexus_uid"
[ "$(stat -c '%a %u' "$root/var/lib/nexus-metrics")" = "2750 $nexus_uid" ] || fail "metrics dir is $(stat -c '%a %u' "$root/var/lib/nexus-metrics")"
[ -L "$root/etc/systemd/system/sockets.target.wants/nexusd.socket" ] || fail "nexusd.socket not enabled"
[ -x "$root/usr/bin/nexusd" ] || fail "nexusd not installed"

echo "[deb] tenants' state and a local configuration edit, then an upgrade"
echo '{"format": "nexus-tenant-bindings-v1", "bindings": {"alice": 1000}}' >"$root/var/lib/nexus/tenants.json"
echo '# edited by the administrator' >>"$root/etc/nexus/nexusd.toml"
in_root "$root" -i "$v2" >"$work/upgrade.log" 2>&1 || { cat "$work/upgrade.log"; fail "upgrade failed"; }
grep -q alice "$root/var/lib/nexus/tenants.json" || fail "state lost on upgrade"
grep -q 'edited by the administrator' "$root/etc/nexus/nexusd.toml" || fail "configuration edit lost on upgrade"
[ -L "$root/etc/systemd/system/sockets.target.wants/nexusd.socket" ] || fail "nexusd.socket disabled by the upgrade"
[ "$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Version}' nexus)" = 0.9.1 ] || fail "not upgraded"

echo "[deb] remove: binaries and enablement go, state and configuration stay"
in_root "$root" -r nexus >"$work/remove.log" 2>&1 || { cat "$work/remove.log"; fail "remove failed"; }
[ ! -e "$root/usr/bin/nexusd" ] || fail "nexusd still installed after remove"
[ ! -e "$root/etc/systemd/system/sockets.target.wants/nexusd.socket" ] || fail "nexusd.socket still enabled after remove"
grep -q alice "$root/var/lib/nexus/tenants.json" || fail "state deleted on remove"
[ -f "$root/etc/nexus/nexusd.toml" ] || fail "configuration deleted on remove"

echo "[deb] purge: state and configuration go"
in_root "$root" -P nexus >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "purge failed"; }
[ ! -e "$root/var/lib/nexus" ] || fail "state kept after purge"
[ ! -e "$root/var/lib/nexus-metrics" ] || fail "metrics directory kept after purge"
[ ! -e "$root/etc/nexus/nexusd.toml" ] || fail "configuration kept after purge"

echo "[deb] a postinst that cannot make the user fails, loudly"
broken=$work/broken
fresh_root "$broken"
mkdir -p "$broken/etc/passwd"  # a directory: no user can be written there
if in_root "$broken" -i "$v1" >"$work/broken.log" 2>&1; then cat "$work/broken.log"; fail "install succeeded without a nexus user"; fi
grep -q "could not create the 'nexus' user" "$work/broken.log" || { cat "$work/broken.log"; fail "no clear reason given"; }
status=$(dpkg-query --admindir="$broken/var/lib/dpkg" -W -f='${db:Status-Status}' nexus 2>/dev/null || true)
[ "$status" != installed ] || fail "the package reads as installed after its postinst failed"
echo "[deb] OK"
