#!/usr/bin/env bash
# The one command that verifies Nexus's GPU path (docs/design/gpu.md). On any machine it sets up
# and builds (scripts/setup.sh), checks that every CUDA source was compiled by nvcc, and runs the
# kernel tests; where an NVIDIA GPU is visible, the CUDA kernels are run against their CPU
# references and `nexus-bench group` measures grouped passes, each cell repeated. Without a GPU
# it says so, and what it could not run, and exits 0 when everything it could run passed. Where
# a GPU is it also runs the model code's device path (the backbone at bf16 and tf32 among it): a slot on cuda:0 against one on the CPU
# (model.devices: ...), CUDA regions exported by a tenant and mapped by nexusd (their tests skip
# the mapping half without a driver), and eight tenants through a nexusd on cuda:0 against one
# on the CPU.
#   scripts/gpu-check.sh [--out DIR] [--preset release]   (figures: DIR/gpu-check.json)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out= preset=release
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --preset) preset=$2; shift 2 ;;
    *) echo "usage: scripts/gpu-check.sh [--out DIR] [--preset PRESET]" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out=$(mktemp -d /tmp/nexus-gpu-check-XXXXXX)
mkdir -p "$out"
log() { printf '[gpu-check] %s\n' "$*" >&2; }

gpus=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >"$out/gpus.txt" 2>/dev/null; then
  gpus=$(grep -c '^GPU ' "$out/gpus.txt" || true)
fi
if [ "$gpus" -gt 0 ]; then log "GPUs: $(paste -sd';' "$out/gpus.txt")"; else log "no NVIDIA GPU here (nvidia-smi finds none)"; fi

venv=$("$here/scripts/setup.sh" "$preset" | tail -n 1)
build=$here/build/$preset
torch=$("$venv/bin/python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>/dev/null ||
        echo "not importable from $venv")
log "LibTorch: $torch"

# Every .cu under kernels/ must have been compiled by nvcc into this build (CI compiles them too).
cuda_sources=$(cd "$here" && ls kernels/*.cu | wc -l)
cuda_objects=$(find "$build/kernels" -name '*.cu.o' | wc -l)
nvcc_version=$(command -v nvcc >/dev/null && nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p' || echo none)
log "nvcc $nvcc_version: $cuda_objects of $cuda_sources CUDA sources compiled"
if [ "$cuda_objects" -ne "$cuda_sources" ]; then log "FAIL: a CUDA source was not compiled"; exit 1; fi

log "kernel and device tests (CPU references always; CUDA against them where a GPU is)"
if ! (cd "$here" && ctest --preset "$preset" -V -R 'CUDA kernels|group pack|partition scatter|SGMV|model\.devices: |CUDA region|device region') >"$out/kernels.log" 2>&1; then
  cat "$out/kernels.log" >&2
  log "FAIL: kernel tests (log: $out/kernels.log)"
  exit 1
fi
grep -E 'tests passed|Passed|no CUDA device' "$out/kernels.log" | sed 's/^/  /' >&2
cuda_run=false
if [ "$gpus" -gt 0 ] && ! grep -q "no CUDA device here" "$out/kernels.log"; then cuda_run=true; fi

bench=null bench_bf16=null bench_tf32=null
adapters=null
device_path=not_run
if [ "$gpus" -gt 0 ]; then
  log "nexusd on cuda:0 against the CPU: eight tenants' loss trajectories"
  if (cd "$here" && NEXUS_TEST_CUDA=1 ctest --preset "$preset" -V -R 'a CUDA replica') >"$out/cuda-replica.log" 2>&1; then
    device_path=passed
  else
    device_path=failed
  fi
  grep -E 'max relative loss difference|Passed|Failed' "$out/cuda-replica.log" | sed 's/^/  /' >&2 || true
  # The daemon and its in-process ceiling on cuda:0, at each [model] precision: the cells the
  # issue's figures name (8 x 1, 8 x 8) and one tenant for the baseline; batch-1 latency (p50,
  # p99); NVML's utilization while the 8-tenant cells run again.
  log "nexus-bench group on cuda:0 (small backbone, 3 repeats per cell), float32, then bf16 and tf32"
  "$build/bench/nexus-bench" group --backbone small --device cuda:0 --tenants 1,8 --batch 1,8 --repeats 3 \
    --csv "$out/group.csv" --png "$out/group.png" --json | tee "$out/group.txt"
  bench=$(tail -n 1 "$out/group.txt")
  for p in bf16 tf32; do
    "$build/bench/nexus-bench" group --backbone small --device cuda:0 --precision $p --tenants 8 --batch 1,8 \
      --repeats 3 --out "$out/group-$p" --png none --json | tee "$out/group-$p.txt"
    printf -v "bench_$p" '%s' "$(tail -n 1 "$out/group-$p.txt")"
  done
  log "nexus-bench adapters on cuda:0 (small backbone, rank 16 on every block; grouped vs a pass per tenant vs none)"
  "$build/bench/nexus-bench" adapters --device cuda --json | tee "$out/adapters.txt"
  adapters=$(tail -n 1 "$out/adapters.txt")
else
  log "not run without a GPU: the CUDA kernels (compiled and linked only), the model's device path, the GPU group and adapters benchmarks"
fi
printf '{"gpus": %d, "torch": "%s", "nvcc": "%s", "cuda_sources": %d, "cuda_objects": %d, "cuda_kernels_run": %s, "device_path": "%s", "group": %s, "group_bf16": %s, "group_tf32": %s, "adapters": %s}\n' \
  "$gpus" "$torch" "$nvcc_version" "$cuda_sources" "$cuda_objects" "$cuda_run" "$device_path" "$bench" "$bench_bf16" \
  "$bench_tf32" "$adapters" | tee "$out/gpu-check.json"
[ "$device_path" != failed ] || { log "FAIL: the device path (log: $out/cuda-replica.log)"; exit 1; }
