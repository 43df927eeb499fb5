#!/usr/bin/env bash
# The README's main command: set-up, then the main job. For now (the transport milestone):
# start nexusd, attach two example tenants that exchange requests with it, show what the daemon
# sees while they run, and stop everything cleanly.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/setup.sh" release >/dev/null
bin=$here/build/release
run=$(mktemp -d /tmp/nexus-demo-XXXXXX)
chmod 755 "$run"
sock=$run/nexusd.sock
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$run"
}
trap cleanup EXIT

echo "== starting nexusd on $sock"
"$bin/daemon/nexusd" --socket "$sock" 2>"$run/nexusd.log" &
daemon_pid=$!
for _ in $(seq 100); do "$bin/client/nexusctl" -s "$sock" status >/dev/null 2>&1 && break; sleep 0.05; done

echo "== attaching two tenants: alice (asynchronous window of 8, tensor digests) and bob (blocking waits)"
"$bin/examples/ping_tenant" -s "$sock" -t alice -n 1000000 --window 8 --digest-every 100 --hold-ms 1500 >"$run/alice.json" &
alice=$!
"$bin/examples/ping_tenant" -s "$sock" -t bob -n 100000 --window 1 --wait block --hold-ms 1500 >"$run/bob.json" &
bob=$!
sleep 0.5
echo "== nexusctl status (while they run)"
"$bin/client/nexusctl" -s "$sock" status
wait "$alice" "$bob"
echo "== tenant reports (every reply matched to its request)"
cat "$run/alice.json" "$run/bob.json"
echo "== nexusctl status (after they detached)"
"$bin/client/nexusctl" -s "$sock" status
kill "$daemon_pid"; wait "$daemon_pid"; daemon_pid=
echo "== daemon log"
cat "$run/nexusd.log"
echo "== done: nexusd stopped cleanly"
