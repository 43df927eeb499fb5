#!/usr/bin/env bash
# Re-pretrains the embedded tiny backbone and rewrites the committed files in weights/:
#   backbone-tiny.safetensors     the weights nexusd, the demo and the tests load
#   backbone-tiny-report.json     nexus-pretrain's report (training loss, held-out grounding)
#   backbone-tiny-report.png      the same, drawn
#   backbone-tiny.recipe          SHA-256 of every source the result depends on (weights/recipe.cmake)
# Run it when the recipe changes (the test unit.pretrain_recipe says so), then re-measure the
# learning margins (scripts/learning-margins.sh) and commit both. About 6 minutes on 2 cores.
#   scripts/pretrain.sh [--out DIR]     (default: weights/ in this tree)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=$here/weights
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    *) echo "usage: scripts/pretrain.sh [--out DIR]" >&2; exit 2 ;;
  esac
done
venv=$("$here/scripts/setup.sh" release | tail -n 1)
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The recipe: 1500 steps of 64 scenes, seed 7 (nexus-pretrain's defaults), on every core.
"$here/build/release/tools/pretrain/nexus-pretrain" --size tiny --steps 1500 --batch 64 --seed 7 \
  -o "$tmp/backbone-tiny.safetensors" --report "$tmp/backbone-tiny-report.json"
"$venv/bin/python" "$here/scripts/plot_report.py" "$tmp/backbone-tiny-report.json" "$tmp/backbone-tiny-report.png"
cmake -DMODE=write -DOUT="$tmp/backbone-tiny.recipe" -P "$here/weights/recipe.cmake"
mv "$tmp"/backbone-tiny* "$out/"
echo "[pretrain] wrote $out/backbone-tiny.{safetensors,recipe} and its report; re-measure the margins:" \
     "scripts/learning-margins.sh" >&2
