#!/usr/bin/env bash
# The README's main command: set-up, then the main job. nexusd holds one frozen, pretrained
# backbone; four lab members' SFT jobs (different heads) attach and train at once; their
# requests are group-batched into shared backbone passes. At the end: each job's held-out
# result and what grouping saved.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/setup.sh" release >/dev/null
bin=$here/build/release
weights=$here/build/weights/backbone-tiny.safetensors
steps=${NEXUS_DEMO_STEPS:-300}
demo_steps=${NEXUS_DEMO_REACH_STEPS:-3000}
run=$(mktemp -d /tmp/nexus-demo-XXXXXX)
chmod 755 "$run"
sock=$run/nexusd.sock
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$run"
}
trap cleanup EXIT

echo "== starting nexusd: tiny backbone, pretrained weights $weights"
"$bin/daemon/nexusd" --socket "$sock" --weights "$weights" 2>"$run/nexusd.log" &
daemon_pid=$!
for _ in $(seq 200); do "$bin/client/nexusctl" -s "$sock" status >/dev/null 2>&1 && break; sleep 0.05; done

echo "== recording 200 demonstrations of the MuJoCo reach task from its scripted expert"
"$bin/client/nexusctl" dataset record --task reach --episodes 200 --out "$run/reach.hdf5"

echo "== five tenants train at once: four on the synthetic reach task ($steps SFT steps of 16),"
echo "   erin on the recorded MuJoCo demonstrations ($demo_steps steps of 32)"
pids=()
for job in alice:mlp_chunk:1 bob:flow:2 carol:gaussian:3 dave:mlp_chunk:4; do
  IFS=: read -r name head seed <<<"$job"
  "$bin/examples/sft_tenant" -s "$sock" -t "$name" --head "$head" --seed "$seed" --steps "$steps" \
    --report-every 50 >"$run/$name.json" &
  pids+=($!)
done
"$bin/examples/sft_demos_tenant" -s "$sock" -t erin --dataset "$run/reach.hdf5" --steps "$demo_steps" \
  --batch 32 --report-every 500 >"$run/erin.json" &
pids+=($!)
sleep 3
echo "== nexusctl status (while they train)"
"$bin/client/nexusctl" -s "$sock" status
wait "${pids[@]}"
echo "== results: held-out action error vs predicting the mean (improvement = baseline / error)"
python3 - "$run"/alice.json "$run"/bob.json "$run"/carol.json "$run"/dave.json <<'PY'
import json, sys
print(f"{'tenant':8} {'head':10} {'loss first -> last':>22} {'held-out L1':>12} {'baseline':>9} {'improvement':>12}")
for path in sys.argv[1:]:
    r = json.load(open(path))
    print(f"{r['tenant']:8} {r['head']:10} {r['first_loss']:10.4f} -> {r['last_loss']:8.4f} "
          f"{r['heldout_l1']:12.4f} {r['baseline_l1']:9.4f} {r['improvement']:11.1f}x")
PY
echo "== erin's published policy in the simulator: 50 new reach episodes, read-only"
"$bin/examples/eval_tenant" -s "$sock" -t erin --task reach --episodes 50 --version 1 >"$run/erin-eval.json"
python3 - "$run/erin-eval.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"reach success {100 * r['success_rate']:.0f}% (an untrained head: 0%), mean return {r['mean_return']:.2f}; "
      f"parameters and optimizer state unchanged by the evaluation: {'yes' if r['unchanged'] else 'NO'}")
PY
echo "== grouping"
"$bin/client/nexusctl" -s "$sock" status | grep backbone
"$bin/client/nexusctl" -s "$sock" status --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
g, r = s["model_groups"], s["model_requests"]
print(f"one by one, the {r} requests would have needed {r} backbone passes; grouped they took {g} "
      f"({100 * (1 - g / r):.0f}% fewer passes, {r / g:.2f} requests per pass)")'
kill "$daemon_pid"; wait "$daemon_pid" || true; daemon_pid=
echo "== done: nexusd stopped cleanly"
