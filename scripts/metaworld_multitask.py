#!/usr/bin/env python3
"""One head, many Meta-World tasks, told apart by the instruction.

For each seed, a tenant trains one head through nexusd on the scripted experts' demonstrations of
every task at once (one file), then each task is evaluated read-only over new episodes. The
control is the same run with every instruction (in the demonstrations and in the engine's
sessions) replaced by one fixed string. The default tasks are two pairs that share a scene's
objects (drawer-open and drawer-close, window-open and window-close); their start states differ,
so the image can tell some apart as well, and the control measures how much language adds.

    scripts/metaworld_multitask.py --out /tmp/mt [--tasks a,b,...] [--seeds 0,1,2] [--json]

Writes into OUT: multitask.json (every figure), multitask.png (per-task success, with and
without instructions, mean and each seed) and frames.png (a contact sheet: a few frames of each
task beside its instruction). Needs the build (nexusd, the nexus package) and Meta-World (the
set-up's venv): run it with that venv's python from the repository root.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_TASKS = "drawer-open-v3,drawer-close-v3,window-open-v3,window-close-v3"
FIXED = "do the task"


def log(msg):
    print(f"[multitask] {msg}", file=sys.stderr, flush=True)


def one_run(a, seed, language, work):
    """Records, trains and evaluates one (seed, condition); returns {task: success}."""
    import nexus
    from nexus.metaworld import spawn_engine
    fixed = [] if language else ["--instruction", FIXED]
    demos, sock = os.path.join(work, "experts.hdf5"), os.path.join(work, "mw.sock")
    subprocess.run([sys.executable, "-m", "nexus.metaworld", "record", *sum((["--task", t] for t in a.tasks), []),
                    "--episodes", str(a.demos), "--seed", str(1000 + 100 * seed), "--max-steps", str(a.max_steps),
                    "--out", demos, *fixed], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    engine = spawn_engine(sock, "--mode", "600", "--max-steps", str(a.max_steps), *fixed)
    nexusd = None
    try:
        nsock = os.path.join(work, "nexusd.sock")
        nexusd = subprocess.Popen([a.nexusd, "--socket", nsock, "--state-dir", os.path.join(work, "state"),
                                   "--weights", a.weights, "--log-level", "warn", "--external-env", f"mw={sock}"])
        deadline = time.monotonic() + 60
        while True:
            try:
                nexus.query_status(nsock, timeout=0.5)
                break
            except nexus.Error:
                if time.monotonic() > deadline or nexusd.poll() is not None:
                    raise RuntimeError("nexusd did not start")
                time.sleep(0.1)
        with nexus.Client.attach("multitask", socket_path=nsock, timeout=600.0) as c:
            data = c.dataset_load("experts", demos, seed=seed)
            head = nexus.HeadSpec(kind="mlp_chunk", chunk=1, state_dim=data.state_dim, action_dim=data.action_dim)
            c.register(nexus.TenantSpec(views=1, head=head, seed=seed, optimizer=nexus.OptimizerSpec(lr=1e-3)))

            def run(spec):
                info = c.run_job(spec)
                if info.state != "finished":
                    raise RuntimeError(f"{spec.kind} job {info.state}: {info.error}")
                return info

            run(nexus.JobSpec(kind="sft", dataset="experts", steps=a.steps, batch=64, chunk=1))
            c.publish()
            out = {}
            for task in a.tasks:
                ev = run(nexus.JobSpec(kind="eval", task="mw:" + task, episodes=a.episodes, seed=50000 + 1000 * seed))
                out[task] = ev.success_rate
                log(f"seed {seed} {'language' if language else 'fixed   '} {task}: {ev.success_rate:.2f}")
            return out
    finally:
        if nexusd is not None:
            nexusd.send_signal(signal.SIGTERM)
            nexusd.wait()
        engine.kill()
        engine.wait()


def contact_sheet(tasks, path, frames=4):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from nexus.metaworld import MetaWorldTask
    fig, axes = plt.subplots(len(tasks), frames, figsize=(2 * frames, 2.1 * len(tasks)), squeeze=False)
    for row, task in enumerate(tasks):
        env = MetaWorldTask(task, 64, 150)
        obs, _ = env.reset(seed=7)
        shots, step, done = [obs["image"]], 0, False
        while not done and step < 150:
            obs, _, term, trunc, _ = env.step(env.expert_action())
            done, step = term or trunc, step + 1
            if step % 12 == 0:
                shots.append(obs["image"])
        picks = [shots[round(i * (len(shots) - 1) / (frames - 1))] for i in range(frames)]
        for col, img in enumerate(picks):
            ax = axes[row][col]
            ax.imshow(img)
            ax.set_xticks([]), ax.set_yticks([])
            if col == 0:
                ax.set_ylabel(task.replace("-v3", ""), fontsize=8)
        axes[row][0].set_title(f'"{env.instruction}"', fontsize=8, loc="left")
        env.close()
    fig.suptitle("the expert in each task (corner camera, 64 px), with its instruction", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))  # room for the title above the first row's
    fig.savefig(path, dpi=110)


def plot(result, tasks, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    fig, ax = plt.subplots(figsize=(1.6 * len(tasks) + 2, 3.6))
    x = np.arange(len(tasks))
    for k, (cond, colour) in enumerate((("language", "tab:blue"), ("fixed", "tab:gray"))):
        runs = result[cond]
        means = [np.mean([r[t] for r in runs]) for t in tasks]
        ax.bar(x + (k - 0.5) * 0.38, means, 0.38, color=colour,
               label="instructions" if cond == "language" else f'one fixed string ("{FIXED}")')
        for r in runs:
            ax.scatter(x + (k - 0.5) * 0.38, [r[t] for t in tasks], s=10, color="black", zorder=3)
    ax.set_xticks(x, [t.replace("-v3", "") for t in tasks], fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("success (new episodes)")
    ax.set_title(f"one head for {len(tasks)} Meta-World tasks: mean of {len(result['language'])} seeds (dots: seeds)",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--tasks", default=DEFAULT_TASKS)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--demos", type=int, default=20, help="expert episodes per task")
    p.add_argument("--steps", type=int, default=3000, help="SFT steps")
    p.add_argument("--episodes", type=int, default=50, help="evaluation episodes per task")
    p.add_argument("--max-steps", type=int, default=150)
    p.add_argument("--nexusd", default=os.path.join(ROOT, "build/release/daemon/nexusd"))
    p.add_argument("--weights", default=os.path.join(ROOT, "weights/backbone-tiny.safetensors"))
    p.add_argument("--json", action="store_true", help="print the figures as one JSON line last")
    a = p.parse_args()
    a.tasks = [t for t in a.tasks.split(",") if t]
    os.makedirs(a.out, exist_ok=True)
    result = {"tasks": a.tasks, "demos": a.demos, "steps": a.steps, "episodes": a.episodes, "language": [], "fixed": []}
    started = time.monotonic()
    for seed in [int(s) for s in a.seeds.split(",")]:
        for language in (True, False):
            with tempfile.TemporaryDirectory(prefix="nexus-mt-") as work:
                result["language" if language else "fixed"].append(one_run(a, seed, language, work))
    for cond in ("language", "fixed"):
        result[f"{cond}_mean"] = {t: sum(r[t] for r in result[cond]) / len(result[cond]) for t in a.tasks}
    result["seconds"] = round(time.monotonic() - started)
    with open(os.path.join(a.out, "multitask.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(result, a.tasks, os.path.join(a.out, "multitask.png"))
    contact_sheet(a.tasks, os.path.join(a.out, "frames.png"))
    for t in a.tasks:
        print(f"{t:24s} instructions {result['language_mean'][t]:.2f}   fixed string {result['fixed_mean'][t]:.2f}")
    if a.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
