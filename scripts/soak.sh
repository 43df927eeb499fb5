#!/usr/bin/env bash
# Soak test (not CI): 8 tenants (6 SFT, 2 PPO) on one nexusd for a while, sampling the daemon's
# RSS every 10 s; then every tenant leaves, the idle eviction runs, and RSS is compared with the
# idle daemon's at the start. Targets (issue "A fair, isolated, accountable service"): under
# steady load RSS grows by at most 2% after the first 5 minutes; after everyone left and the
# eviction ran, RSS is within 20% of the idle daemon's.
#   scripts/soak.sh [--minutes M] [--out DIR]   (default 30 minutes; writes rss.csv with RSS by kind,
#                                                smaps.csv by mapping kind, soak.json, rss.png)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
minutes=30 out=
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: scripts/soak.sh [--minutes M] [--out DIR]" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out=$(mktemp -d /tmp/nexus-soak-XXXXXX)
mkdir -p "$out"
venv=$("$here/scripts/setup.sh" release | tail -n 1)
bin=$here/build/release
run=$(mktemp -d /tmp/nexus-soak-run-XXXXXX)
sock=$run/nexusd.sock
printf '[model]\nidle_evict_s = 20\n' >"$run/nexusd.toml"
"$bin/daemon/nexusd" --socket "$sock" -c "$run/nexusd.toml" --state-dir "$run/state" --log-level warn 2>"$out/nexusd.log" &
daemon=$!
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  kill "$daemon" 2>/dev/null || true
  rm -rf "$run"
}
trap cleanup EXIT
for _ in $(seq 200); do "$bin/client/nexusctl" -s "$sock" status >/dev/null 2>&1 && break; sleep 0.05; done
rss() { awk '/VmRSS/ {print $2}' "/proc/$daemon/status"; }
# RSS split by kind (KiB): anonymous (heap, LibTorch's allocations), shared memory (the tenants'
# mapped segments and regions: pages a tenant touched count here too), file-backed (libraries).
breakdown() { awk '/RssAnon|RssShmem|RssFile/ {printf ",%s", $2}' "/proc/$daemon/status"; }
# Every 5 minutes (every minute in runs of up to 12): resident KiB per mapping kind from smaps, to
# tell which kind grows; anonymous mappings of 8 MiB or more are summed per size.
smaps_snapshot() {
  awk -v t="$1" '/^[0-9a-f]+-[0-9a-f]+ / { name = $6 }
       /^Size:/ { if (name ~ /memfd/) kind = "memfd"; else if (name ~ /[.]so/) kind = "libraries";
                  else if (name ~ /^\//) kind = "files"; else if (name != "") kind = name;
                  else if ($2 < 8192) kind = "anon<8MiB"; else kind = sprintf("anon %dMiB", $2 / 1024) }
       /^Rss:/ { rss[kind] += $2 }
       END { for (k in rss) printf "%s,%s,%d\n", t, k, rss[k] }' "/proc/$daemon/smaps" >>"$out/smaps.csv"
}
sleep 2
idle=$(rss)
echo "t_s,rss_kib,phase,anon_kib,file_kib,shmem_kib" >"$out/rss.csv"
echo "0,$idle,idle$(breakdown)" >>"$out/rss.csv"
echo "t_s,mapping,rss_kib" >"$out/smaps.csv"
smaps_snapshot 0
echo "[soak] idle daemon RSS ${idle} KiB; 6 SFT + 2 PPO tenants for $minutes min" >&2
"$bin/client/nexusctl" dataset record --task reach --episodes 50 --out "$run/reach.hdf5" >/dev/null
for i in 1 2 3 4 5 6; do
  if [ $((i % 2)) = 0 ]; then
    "$bin/examples/sft_demos_tenant" -s "$sock" -t "sft$i" --dataset "$run/reach.hdf5" --steps 100000000 --batch 16 \
      --seed "$i" --report-every 0 >/dev/null 2>"$out/sft$i.err" &
  else
    "$bin/examples/sft_tenant" -s "$sock" -t "sft$i" --steps 100000000 --seed "$i" --report-every 0 >/dev/null 2>"$out/sft$i.err" &
  fi
  pids+=($!)
done
for i in 1 2; do
  "$bin/examples/rl_tenant" -s "$sock" -t "ppo$i" --algorithm ppo --task reach --iterations 100000 --seed "$i" \
    --report-every 0 >/dev/null 2>"$out/ppo$i.err" &
  pids+=($!)
done
start=$(date +%s)
end=$((start + minutes * 60))
while [ "$(date +%s)" -lt "$end" ]; do
  sleep 10
  t=$(( $(date +%s) - start ))
  echo "$t,$(rss),load$(breakdown)" >>"$out/rss.csv"
  every=300; [ "$minutes" -le 12 ] && every=60   # short runs are for finding what grows
  if [ $((t % every)) -lt 10 ]; then
    smaps_snapshot "$t"
    echo "[soak] $t s: RSS $(rss) KiB (anon, file, shmem:$(breakdown))" >&2
  fi
done
"$bin/client/nexusctl" -s "$sock" usage --json >"$out/usage.json"
"$bin/client/nexusctl" -s "$sock" status --json >"$out/status-load.json"
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait "${pids[@]}" 2>/dev/null || true
pids=()
echo "[soak] every tenant left; waiting for the idle eviction (20 s) ..." >&2
sleep 40
t=$(( $(date +%s) - start ))
echo "$t,$(rss),after$(breakdown)" >>"$out/rss.csv"
smaps_snapshot "$t"
"$bin/client/nexusctl" -s "$sock" status --json >"$out/status-after.json"
"$venv/bin/python" - "$out" <<'PY'
import csv, json, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/rss.csv")))
idle = int(rows[0]["rss_kib"])
load = [(int(r["t_s"]), int(r["rss_kib"])) for r in rows if r["phase"] == "load"]
after5 = [rss for t, rss in load if t >= 300]
base = after5[0] if after5 else load[0][1]
peak = max(rss for _, rss in load)
final = int(rows[-1]["rss_kib"])
status = json.load(open(f"{out}/status-after.json"))
r = {"idle_kib": idle, "after_5min_kib": base, "peak_under_load_kib": peak, "end_of_load_kib": load[-1][1],
     "growth_after_5min": (load[-1][1] - base) / base, "after_all_left_kib": final,
     "after_vs_idle": final / idle, "slots_evicted": status["slots_evicted"], "slots_resident": status["slots_resident"],
     "minutes": load[-1][0] / 60}
json.dump(r, open(f"{out}/soak.json", "w"), indent=1)
print(json.dumps(r))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.figure(figsize=(9, 4))
    plt.plot([t / 60 for t, _ in load], [v / 1024 for _, v in load], label="under load")
    plt.axhline(idle / 1024, color="grey", linestyle="--", label="idle daemon")
    plt.axhline(final / 1024, color="green", linestyle=":", label="after all left + eviction")
    plt.xlabel("minutes"); plt.ylabel("nexusd RSS, MiB"); plt.legend(); plt.tight_layout()
    plt.savefig(f"{out}/rss.png", dpi=100)
except Exception as e:
    print(f"no plot: {e}", file=sys.stderr)
PY
echo "[soak] results in $out (rss.csv, soak.json, rss.png)" >&2
