"""Meta-World through nexusd (nexus.metaworld): the engine in its own process serves its tasks as
an external environment; resets are reproducible by seed, bad actions are the caller's typed
error and the session survives, a killed engine fails only its sessions, and the scripted
experts' recordings load with dataset_load as robomimic files.

Skipped (exit 77) where Meta-World is not installed (scripts/setup.sh installs it from PyPI;
the Debian fallback without PyPI has no Meta-World)."""
import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore")  # gymnasium's passive checker on Meta-World's spaces

# Looked up, not imported: nexus.metaworld must be the first to import MuJoCo (it picks OSMesa).
import importlib.util  # noqa: E402

if importlib.util.find_spec("metaworld") is None:
    print("skipped: Meta-World is not installed; scripts/setup.sh installs requirements-sim.txt")
    sys.exit(77)

import numpy as np

import nexus
from harness import SOURCE, Daemon, check, finish, raises
import nexus.metaworld  # noqa: E402  (first: it picks MuJoCo's GL backend)
import mujoco  # noqa: E402
from nexus.metaworld import MetaWorldTask
from nexus.metaworld_tasks import INSTRUCTIONS

work = tempfile.mkdtemp(prefix="nexus-mw-")
engine_socket = os.path.join(work, "mw.sock")


engines = []
atexit.register(lambda: [p.kill() for p in engines])  # a failed check must not leave one running


def start_engine():
    engines.append(nexus.metaworld.spawn_engine(engine_socket, "--mode", "666",
                                                stderr=open(os.path.join(work, "engine.err"), "a")))
    return engines[-1]


# --- the engine's env alone: instructions, reproducible resets, the expert -----------------------------
check(len(INSTRUCTIONS) == 50 and all(INSTRUCTIONS.values()), "an instruction for each of the 50 tasks")
a, b = MetaWorldTask("pick-place-v3"), MetaWorldTask("pick-place")
first_a, _ = a.reset(seed=11)
first_b, _ = b.reset(seed=11)
check(np.array_equal(first_a["image"], first_b["image"]) and np.array_equal(first_a["state"], first_b["state"])
      and np.array_equal(a.full_observation, b.full_observation), "two envs reset with one seed are identical")
other, _ = b.reset(seed=12)
check(not np.array_equal(a.full_observation[4:], b.full_observation[4:]),
      "another seed puts the object and the goal elsewhere")
check(first_a["state"].shape == (4,) and not np.any(first_a["state"][:3] == 0) and first_a["image"].shape == (64, 64, 3),
      "the state is the hand's position and the gripper's opening; the goal is not in it")
b.close()
# Renderers freed while another one is current (a connection's thread ending, exit): MuJoCo 3.3's
# Renderer.close() would delete their GL objects in the current context, another renderer's.
other = nexus.metaworld._ThreadRenderers()
other.by_key["x"] = mujoco.Renderer(MetaWorldTask("drawer-open-v3")._env.model, 64, 64)
a.render()  # `a`'s context is the current one
other.free()
again, _ = a.reset(seed=11)
check(np.array_equal(again["image"], first_a["image"]), "an env's frames survive another renderer being freed")
a.close()

with Daemon("--external-env", f"mw={engine_socket}") as d:
    engine = start_engine()
    with nexus.Client.attach("mw-user", socket_path=d.socket, timeout=120.0) as c, \
            nexus.Client.attach("mw-neighbour", socket_path=d.socket, timeout=120.0) as n:
        bb = c.backbone()
        envs = c.env_open("mw:reach-v3", 2)
        check(envs.state_dim == 4 and envs.action_dim == 4 and envs.image_size == bb.image_size and envs.max_steps == 500,
              f"nexusd opened two reach sessions at the backbone's image size, with the task's limit: {envs}")
        short = c.env_open("mw:button-press", 1, 20)
        check(short.max_steps == 20, f"a tenant's shorter limit is the session's: {short.max_steps}")
        images = c.alloc("uint8", [2, 1, bb.image_size, bb.image_size, 3])
        state = c.alloc("float32", [2, 4])
        r = c.env_reset(envs.ids, [5, 5], images, state)
        check(r.errors == ["", ""] and r.instructions[0] == INSTRUCTIONS["reach-v3"],
              f"reset, with the task's instruction: {r.instructions}")
        check(np.array_equal(images.numpy()[0], images.numpy()[1]) and np.array_equal(state.numpy()[0], state.numpy()[1]),
              "two sessions reset with one seed see identical frames and states")
        local = MetaWorldTask("reach-v3", bb.image_size)
        obs, _ = local.reset(seed=5)
        check(np.array_equal(images.numpy()[0, 0], obs["image"]) and np.array_equal(state.numpy()[0], obs["state"]),
              "the frame and state arrive in the arena as the engine rendered them")
        # Bad actions: the caller's typed error, and the session survives.
        r = c.env_step(envs.ids, np.array([[0.1, 0.2, 0.0, 0.0], [np.nan, 0.0, 0.0, 0.0]], np.float32), images, state)
        expected, reward, _, _, _ = local.step(np.array([0.1, 0.2, 0.0, 0.0]))
        check(r.errors[0] == "" and np.allclose(state.numpy()[0], expected["state"]) and abs(r.reward[0] - reward) < 1e-4,
              f"a step is the task's step: {r.errors[0]!r} reward {r.reward[0]} vs {reward}")
        check(r.errors[1] != "" and not r.failed[1], f"a NaN action is refused as the caller's: {r.errors[1]!r}")
        raises(nexus.Error, lambda: c.env_step(envs.ids, np.zeros((2, 3), np.float32), images, state),
               "three values for a four-dimensional action")
        r = c.env_step(envs.ids, np.zeros((2, 4), np.float32), images, state)
        check(r.errors == ["", ""] and r.failed == [False, False], f"both sessions step on after bad actions: {r.errors}")
        # The expert on the live session: success terminates the episode.
        one_image, one_state = c.alloc("uint8", [1, 1, bb.image_size, bb.image_size, 3]), c.alloc("float32", [1, 4])
        c.env_reset(short.ids, [3], one_image, one_state)
        expert = MetaWorldTask("button-press-v3", bb.image_size, 20)
        expert.reset(seed=3)
        ends = []
        for _ in range(20):
            act = expert.expert_action()
            expert.step(act)
            e = c.env_step(short.ids, act[None], one_image, one_state)
            ends.append((e.done[0], e.success[0], e.truncated[0]))
            if e.done[0]:
                break
        check(ends[-1] == (True, False, True), f"the episode limit truncates: {ends[-1]}")
        # A killed engine fails its sessions alone: the neighbour's built-in sessions step on.
        mine = n.env_open("reach", 1)
        n_image = n.alloc("uint8", [1, 1, bb.image_size, bb.image_size, 3])
        n_state = n.alloc("float32", [1, mine.state_dim])
        n.env_reset(mine.ids, [1], n_image, n_state)
        engine.send_signal(signal.SIGKILL)
        engine.wait(10)
        r = c.env_step(envs.ids, np.zeros((2, 4), np.float32), images, state)
        check(r.failed == [True, True] and "external environment" in r.errors[0],
              f"the engine's sessions fail with a reason: {r.failed} {r.errors}")
        check(n.env_step(mine.ids, np.zeros((1, mine.action_dim), np.float32), n_image, n_state).errors == [""],
              "another tenant's built-in session steps on")
        raises(nexus.EnvFailed, lambda: c.env_open("mw:reach-v3", 1), "nobody listens: opening is a typed error")
        engine = start_engine()
        fresh = c.env_open("mw:reach-v3", 1)
        check(c.env_reset(fresh.ids, [5], one_image, one_state).errors == [""]
              and np.array_equal(one_image.numpy()[0, 0], obs["image"]),
              "a restarted engine serves new sessions, reproducibly")
        raises(nexus.EnvFailed, lambda: c.env_open("mw:no-such-task", 1), "an unknown task is refused by the engine")
        # The experts' recordings load as robomimic files.
        demos = os.path.join(work, "experts.hdf5")
        run = subprocess.run([sys.executable, "-m", "nexus.metaworld", "record", "--task", "reach-v3", "--task",
                              "button-press-v3", "--episodes", "3", "--max-steps", "150", "--out", demos],
                             capture_output=True, text=True, timeout=600)
        summary = json.loads(run.stdout.strip().splitlines()[-1])
        check(run.returncode == 0 and summary["demos"] == 6 and all(t["expert_successes"] == 3 for t in summary["tasks"].values()),
              f"the experts succeed in every recorded episode: {summary}")
        info = c.dataset_load("experts", demos)
        check(info.layout == "robomimic" and info.episodes == 6 and info.state_dim == 4 and info.action_dim == 4
              and info.views == ["agentview_image"], f"dataset_load recognises the layout: {info.layout} {info.views}")
        check(not os.path.exists(demos + ".tmp"), "the recorder leaves no partial file")
        broken = os.path.join(work, "broken.hdf5")
        run = subprocess.run([sys.executable, "-m", "nexus.metaworld", "record", "--task", "reach-v3", "--task",
                              "no-such-task", "--episodes", "1", "--max-steps", "20", "--out", broken],
                             capture_output=True, text=True, timeout=300)
        check(run.returncode != 0 and "no-such-task" in run.stderr and not os.path.exists(broken)
              and not os.path.exists(broken + ".tmp"), "a recording that fails half-way leaves no file at all")
    # An RL job on a Meta-World task: rl_tenant.py sizes its head from the task (4 actions).
    run = subprocess.run([sys.executable, os.path.join(SOURCE, "examples", "python", "rl_tenant.py"), "-s", d.socket,
                          "-t", "mw-rl", "--task", "mw:reach-v3", "--sessions", "2", "--horizon", "16",
                          "--iterations", "2", "--report-every", "0"], capture_output=True, text=True, timeout=300)
    status = json.loads(run.stdout.strip().splitlines()[-1]) if run.stdout.strip() else {}
    check(run.returncode == 0 and status.get("state") == "done" and status.get("env_steps", 0) >= 2 * 2 * 16,
          f"a PPO job ran on Meta-World sessions: {status or run.stderr[-1500:]}")
    engine.kill()
    engine.wait()
finish()
