"""A simulator written in Python (examples/python/point_env.py, gymnasium's Env API) served
through nexus.environment: nexusd opens its sessions as an external environment, a tenant steps
them, and an RL job in nexusd trains on them."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import nexus
import nexus.environment
from harness import SOURCE, Daemon, check, finish, raises

sys.path.insert(0, os.path.join(SOURCE, "examples", "python"))
import point_env  # noqa: E402

sim_dir = tempfile.mkdtemp(prefix="nexus-pysim-")
sim_socket = os.path.join(sim_dir, "point.sock")
server = nexus.environment.Server(sim_socket, point_env.make_env, mode=0o666).start()


class Diverging(point_env.PointEnv):
    """A simulator that breaks at its first step."""

    def step(self, action):
        raise FloatingPointError("the integrator diverged")


made = []


def flaky_env(task, image_size, max_steps):  # every second env made diverges
    made.append(task)
    kind = Diverging if len(made) % 2 == 0 else point_env.PointEnv
    return kind(image_size, 30)


flaky_socket = os.path.join(sim_dir, "flaky.sock")
flaky = nexus.environment.Server(flaky_socket, flaky_env, mode=0o666).start()

with Daemon("--external-env", f"py={sim_socket}", "--external-env", f"flaky={flaky_socket}") as d:
    with nexus.Client.attach("py-rl", socket_path=d.socket, timeout=60.0) as c:
        bb = c.backbone()
        envs = c.env_open("py:point", 2)
        # Vectorised (protocol 3): the two sessions are one connection, and a reset or step of
        # both is one exchange.
        check(server.connections.value == 1, f"two sessions, one connection: {server.connections.value}")
        exchanges_before = server.exchanges.value
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
        check(server.exchanges.value - exchanges_before == 2,
              f"a reset and a step of both sessions are two exchanges: {server.exchanges.value - exchanges_before}")
        one_image, one_state = c.alloc("uint8", [1, 1, bb.image_size, bb.image_size, 3]), c.alloc("float32", [1, 4])
        r = c.env_step(envs.ids[1:], np.array([[0.0, 1.0]], np.float32), one_image, one_state)
        check(r.errors[0] == "" and server.exchanges.value - exchanges_before == 3,
              f"one of the connection's sessions steps alone: {r.errors[0]!r}")
        check(c.env_close(envs.ids) == 2, "both sessions close")
        # Episode ends cross the protocol apart: the limit truncates (the state is not terminal),
        # reaching the goal terminates.
        one = c.env_open("py:point", 1, 3)
        img1, st1 = c.alloc("uint8", [1, 1, bb.image_size, bb.image_size, 3]), c.alloc("float32", [1, 4])
        c.env_reset(one.ids, [7], img1, st1)
        ends = [c.env_step(one.ids, np.zeros((1, 2), np.float32), img1, st1) for _ in range(3)]
        check([(e.done[0], e.truncated[0], e.success[0]) for e in ends] == [(False, False, False)] * 2 + [(True, True, False)],
              f"the episode limit truncates: {[(e.done, e.truncated) for e in ends]}")
        goal = c.env_open("py:point", 1, 30)
        c.env_reset(goal.ids, [7], img1, st1)
        for _ in range(30):
            agent, target = st1.numpy()[0, :2], st1.numpy()[0, 2:]
            e = c.env_step(goal.ids, np.clip((target - agent) / 0.1, -1, 1).astype(np.float32)[None], img1, st1)
            if e.done[0]:
                break
        check(e.done[0] and e.success[0] and not e.truncated[0], f"reaching the goal terminates: {e.done} {e.truncated}")
        # One env of a connection breaks: its session fails, its neighbour on the same
        # connection steps on.
        pair = c.env_open("flaky:point", 2)
        c.env_reset(pair.ids, [1, 2], images, state)
        r = c.env_step(pair.ids, np.zeros((2, 2), np.float32), images, state)
        check(r.failed == [False, True] and "diverged" in r.errors[1],
              f"the diverging env fails its session alone: {r.failed} {r.errors}")
        r = c.env_step(pair.ids[:1], np.zeros((1, 2), np.float32), img1, st1)
        check(r.errors == [""], f"the other session of that connection steps on: {r.errors}")
        e = raises(nexus.EnvFailed, lambda: c.env_open("py:nosuch", 1), "a task the simulator does not serve")
        check(e is not None and "nosuch" in str(e), "the refusal carries the simulator's reason")

    # The RL job through examples/python/rl_tenant.py, in its own process.
    served_before, connections_before = server.steps.value, server.connections.value
    run = subprocess.run([sys.executable, os.path.join(SOURCE, "examples", "python", "rl_tenant.py"), "-s", d.socket,
                          "-t", "py-rl-job", "--task", "py:point", "--sessions", "4", "--horizon", "16",
                          "--iterations", "4", "--seed", "3", "--report-every", "0", "--synchronous"],
                         capture_output=True, text=True, timeout=300)
    print(run.stderr[-2000:], flush=True)
    status = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"rl job: {status}", flush=True)
    check(run.returncode == 0 and status["state"] == "done" and status["iterations"] == 4,
          "rl_tenant.py's PPO job on the Python simulator ran its 4 updates")
    check(status["records_behind"] == 0, "--synchronous (RlOptions.synchronous): every record acted by the latest version")
    served = server.steps.value - served_before
    check(status["env_steps"] >= 4 * 4 * 16 and served >= status["env_steps"],
          f"every env step it counted was served by the Python simulator ({status['env_steps']} counted, {served} served)")
    check(status["episodes"] > 0 and status["version"] > status["first_version"],
          "it finished episodes and published new versions")
    # Two: the one session rl_tenant.py opens to size its head from the task, then the job's 4.
    check(server.connections.value - connections_before == 2,
          f"the job's 4 sessions were one connection: {server.connections.value - connections_before} "
          "(with the probe that sized the head)")

    # rl_tenant.py --demos: a warm start on recorded push demonstrations, then a job that keeps
    # them in its loss (the behaviour-cloning term), as examples/rl_tenant does.
    demos = os.path.join(sim_dir, "push.hdf5")
    subprocess.run([os.environ["NEXUS_TEST_NEXUSCTL"], "dataset", "record", "--task", "push", "--episodes", "3",
                    "--out", demos], check=True, capture_output=True, timeout=300)
    run = subprocess.run([sys.executable, os.path.join(SOURCE, "examples", "python", "rl_tenant.py"), "-s", d.socket,
                          "-t", "py-rl-demos", "--task", "push", "--sessions", "2", "--horizon", "8",
                          "--iterations", "2", "--demos", demos, "--warm-start-steps", "10", "--demo-weight", "0.5",
                          "--eval-untrained", "2",
                          "--report-every", "0"],
                         capture_output=True, text=True, timeout=300)
    print(run.stderr[-2000:], flush=True)
    status = json.loads(run.stdout.strip().splitlines()[-1])
    check(run.returncode == 0 and status["state"] == "done" and status["warm_start_steps"] == 10
          and status["warm_start_loss"] is not None and status["demo_loss"] != 0
          and 0 < status["untrained_version"] < status["first_version"]
          and 0 <= status["untrained_success"] <= 1
          and status["observation_bytes"] == 0 and status["split_minibatches"] == 0,
          f"rl_tenant.py --demos published the untrained head, warm-started on the file, and its job computed the "
          f"demonstrations' term (a head-only tenant: no observations kept, minibatches whole): {status}")
server.close()
flaky.close()
finish()
