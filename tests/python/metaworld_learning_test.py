"""Learning check on Meta-World: a head trained through nexusd on the scripted experts'
demonstrations of two tasks (reach-v3, button-press-v3; one file, each demo with its task's
instruction) succeeds in the engine's sessions, evaluated read-only over 50 new episodes per
task. The bound comes from the measured distribution over seeds (docs/results.md, Meta-World):
NEXUS_TEST_SEED picks the seed (default 0), and the last line is the figures as JSON.

Skipped (exit 77) where Meta-World is not installed."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
if importlib.util.find_spec("metaworld") is None:
    print("skipped: Meta-World is not installed; scripts/setup.sh installs requirements-sim.txt")
    sys.exit(77)

import nexus  # noqa: E402
from harness import Daemon, check, finish  # noqa: E402
from nexus.metaworld import spawn_engine  # noqa: E402

TASKS = ["reach-v3", "button-press-v3"]
DEMOS, STEPS, EPISODES, LIMIT = 20, 2000, 50, 150
# Mean success over both tasks. Five seeds measured 2026-12-05 (docs/results.md, Meta-World):
# 0.35 0.43 0.37 0.35 0.48 (reach 0.10-0.28, button-press 0.56-0.68); the untrained head 0.00 on
# both. The bound is the worst seed less about 2.5 standard errors (the spread across seeds, 0.057,
# or one run's binomial error at the worst seed, 0.048, whichever is larger).
BOUND = float(os.environ.get("NEXUS_TEST_MW_BOUND", "0.20"))

seed = int(os.environ.get("NEXUS_TEST_SEED", "0"))
work = tempfile.mkdtemp(prefix="nexus-mw-learn-")
demos, engine_socket = os.path.join(work, "experts.hdf5"), os.path.join(work, "mw.sock")
started = time.monotonic()
subprocess.run([sys.executable, "-m", "nexus.metaworld", "record", *sum((["--task", t] for t in TASKS), []),
                "--episodes", str(DEMOS), "--seed", str(1000 + 100 * seed), "--max-steps", str(LIMIT), "--out", demos],
               check=True, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "record.err"), "w"), timeout=600)
engine = spawn_engine(engine_socket, "--mode", "666", "--max-steps", str(LIMIT))

figures = {"seed": seed, "demos_per_task": DEMOS, "sft_steps": STEPS, "episodes": EPISODES}
try:
    with Daemon("--external-env", f"mw={engine_socket}") as d, \
            nexus.Client.attach("mw-learner", socket_path=d.socket, timeout=600.0) as c:
        data = c.dataset_load("experts", demos, seed=seed)
        head = nexus.HeadSpec(kind="mlp_chunk", chunk=1, state_dim=data.state_dim, action_dim=data.action_dim)
        c.register(nexus.TenantSpec(views=1, head=head, seed=seed, optimizer=nexus.OptimizerSpec(lr=1e-3)))

        sft = c.run_job(nexus.JobSpec(kind="sft", dataset="experts", steps=STEPS, batch=64, chunk=1), timeout=600)
        check(sft.state == "finished", f"the SFT job ran its {STEPS} steps: {sft.state} {sft.error}")
        figures["sft_loss"] = sft.loss
        c.publish()
        for task in TASKS:  # new episodes: seeds the recording never used
            ev = c.run_job(nexus.JobSpec(kind="eval", task="mw:" + task, episodes=EPISODES, seed=50000 + 1000 * seed),
                           timeout=600)
            check(ev.state == "finished", f"evaluation on {task}: {ev.state} {ev.error}")
            figures[task] = ev.success_rate
            print(f"[mw-learn] seed {seed} {task}: success {ev.success_rate:.2f}", flush=True)
        mean = sum(figures[t] for t in TASKS) / len(TASKS)
        figures["mean_success"], figures["seconds"] = mean, round(time.monotonic() - started, 1)
        check(mean >= BOUND, f"SFT on the experts' demonstrations succeeds: mean {mean:.2f} >= {BOUND} "
                             f"({', '.join(f'{t} {figures[t]:.2f}' for t in TASKS)})")
finally:
    engine.kill()
    engine.wait()
print(json.dumps(figures), flush=True)
finish()
