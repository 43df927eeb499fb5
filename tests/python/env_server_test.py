"""A simulator written in Python (examples/python/point_env.py, gymnasium's Env API) served
through nexus.environment: nexusd opens its sessions as an external environment, a tenant steps
them, and an RL job in nexusd trains on them."""
import os
import sys
import tempfile
import time

import numpy as np

import nexus
import nexus.environment
from harness import SOURCE, Daemon, check, finish

sys.path.insert(0, os.path.join(SOURCE, "examples", "python"))
import point_env  # noqa: E402

sim_dir = tempfile.mkdtemp(prefix="nexus-pysim-")
sim_socket = os.path.join(sim_dir, "point.sock")
server = nexus.environment.Server(sim_socket, point_env.make_env, mode=0o666).start()

with Daemon("--external-env", f"py={sim_socket}") as d:
    with nexus.Client.attach("py-rl", socket_path=d.socket, timeout=60.0) as c:
        bb = c.backbone()
        envs = c.env_open("py:point", 2)
        check(envs.state_dim == 4 and envs.action_dim == 2 and envs.image_size == bb.image_size
              and envs.max_steps == 30, f"nexusd opened two sessions of the Python simulator: {envs}")
        images = c.alloc("uint8", [2, 1, bb.image_size, bb.image_size, 3])
        state = c.alloc("float32", [2, 4])
        r = c.env_reset(envs.ids, [5, 6], images, state)
        local = point_env.PointEnv(bb.image_size)
        obs, _ = local.reset(seed=5)
        check(np.array_equal(state.numpy()[0], obs["state"]) and np.array_equal(images.numpy()[0, 0], obs["image"]),
              "the reset observation arrives in the arena as the simulator rendered it")
        check(r.instructions[0] == local.instruction, f"with the simulator's instruction: {r.instructions[0]!r}")
        r = c.env_step(envs.ids, np.array([[1.0, 0.0], [np.nan, 0.0]], np.float32), images, state)
        expected, reward, _, _, _ = local.step(np.array([1.0, 0.0]))
        check(r.errors[0] == "" and abs(r.reward[0] - reward) < 1e-6
              and np.allclose(state.numpy()[0], expected["state"]),
              f"a step is the simulator's step: {r.errors[0]!r}, reward {r.reward[0]} vs {reward}, "
              f"state {state.numpy()[0]} vs {expected['state']}")
        check(r.errors[1] != "" and not r.failed[1], f"a NaN action is refused as the caller's: {r.errors[1]!r}")
        check(c.env_close(envs.ids) == 2, "both sessions close")

        c.register(nexus.TenantSpec(seed=2, head=nexus.HeadSpec(kind="gaussian", state_dim=4, action_dim=2, chunk=1)))
        served_before = server.steps.value
        first = c.rl_start(nexus.RlOptions(algorithm="ppo", task="py:point", sessions=4, horizon=16, iterations=4,
                                           minibatch=64, seed=3))
        deadline = time.monotonic() + 300
        status = c.rl_status()
        while status.state == "running" and time.monotonic() < deadline:
            time.sleep(0.5)
            status = c.rl_status()
        print(f"rl job: {status}", flush=True)
        check(status.state == "done" and status.iterations == 4, "the PPO job on the Python simulator ran its 4 updates")
        check(status.env_steps >= 4 * 4 * 16 and server.steps.value - served_before >= status.env_steps,
              f"every env step it counted was served by the Python simulator "
              f"({status.env_steps} counted, {server.steps.value - served_before} served)")
        check(status.episodes > 0 and status.version > first, "it finished episodes and published new versions")
server.close()
finish()
