#!/usr/bin/env bash
# The crash tests at stress strength (not CI): 100 tenants SIGKILLed mid-SFT step and mid-RL
# rollout beside two tenants whose trajectories must not change, then the daemon-kill resume.
#   scripts/crash-stress.sh [ITERATIONS]      (default 100; CI runs 6)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/setup.sh" release >/dev/null
NEXUS_CRASH_ITERATIONS=${1:-100} "$here/build/release/tests/nexus_model_integration_tests" "[crash]"
