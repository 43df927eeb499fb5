"""nexus.metaworld: Meta-World's 50 tasks served to nexusd, and its scripted experts recorded as
demonstrations.

    python -m nexus.metaworld serve --socket /tmp/mw.sock           # the rollout engine
    nexusd --external-env metaworld=/tmp/mw.sock                     # tenants open "metaworld:reach-v3"
    python -m nexus.metaworld record --task reach-v3 --episodes 20 --out reach.hdf5

A session is one task (`reach-v3` or `reach`) at the backbone's image size, served through the
external simulator protocol (nexus.environment): several tasks and any number of sessions per
process, one thread per nexusd connection.

What a tenant sees (MetaWorldTask):
- image: one camera, `corner` by default: it sees the table, the arm and every task's objects in
  depth, where `topview` loses height (reach's goal floats) and `gripperPOV`/`behindGripper` lose
  the goal once the hand moves. One view because the protocol carries one frame per step and a
  frame is the engine's main cost.
- state: the hand's position and the gripper's opening (4 values). The goal's position is not in
  it: the policy must find the goal in the image and the task in the instruction. `--full-state`
  gives Meta-World's whole 39-d observation, goal included.
- instruction: an English sentence per task (nexus.metaworld_tasks).
- actions: 4 in [-1, 1] (hand motion, gripper); values outside are clipped as the task's action
  space says. Success is the task's own info["success"]; an episode ends at success
  (terminated) or at the limit (truncated): the task's 500 steps, or less where nexusd or
  `--max-steps` ask for less.
- resets are reproducible by seed: the seed draws the task's random positions (its rand_vec) and
  seeds the env, so the same seed gives the same frames and states.

Rendering: OSMesa (software; EGL does not start on a machine without a GPU). What a frame costs
is not its size but multisampling and the shadow and reflection passes: with them off
(model.vis.quality.offsamples = 0, scene flags) a step with its 64x64 frame ran about 14x faster
than with gymnasium's default render (docs/results.md).
"""
from __future__ import annotations

import os

# Before mujoco is imported: it picks its GL backend once. OSMesa runs everywhere (no display, no GPU).
os.environ.setdefault("MUJOCO_GL", "osmesa")
if os.environ["MUJOCO_GL"] in ("osmesa", "egl"):  # PyOpenGL's names for the same two (glfw is not one)
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

import argparse  # noqa: E402
import atexit  # noqa: E402
import copy  # noqa: E402
import pickle  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from typing import Any, Optional  # noqa: E402

import numpy as np  # noqa: E402

from .metaworld_tasks import INSTRUCTIONS, canonical  # noqa: E402

CAMERAS = ("corner", "corner2", "corner3", "topview", "behindGripper", "gripperPOV")


def _metaworld():
    """Meta-World and MuJoCo, imported on first use, with what to do when they are missing."""
    try:
        import gymnasium
        import metaworld.env_dict
        import metaworld.policies
        import metaworld.types
        import mujoco
    except ImportError as e:
        raise ImportError(f"{e}: Meta-World is installed by scripts/setup.sh (pinned in requirements-sim.txt)") from e
    return gymnasium, metaworld, mujoco


class MetaWorldTask:
    """One Meta-World task as a gymnasium env with {"image", "state"} observations."""

    action_dim = 4

    def __init__(self, task: str, image_size: int = 64, max_steps: int = 0, camera: str = "corner",
                 full_state: bool = False, stop_on_success: bool = True, instruction: str = "") -> None:
        gymnasium, metaworld, mujoco = _metaworld()
        if camera not in CAMERAS:
            raise ValueError(f"camera must be one of {', '.join(CAMERAS)}, not {camera!r}")
        if not 8 <= image_size <= 480:  # Meta-World's offscreen buffer is 480 x 480
            raise ValueError(f"image_size must be 8..480, not {image_size}")
        self.task = canonical(task)
        self.instruction = instruction or INSTRUCTIONS[self.task]  # one for every task: a control
        self.image_size, self.camera, self.stop_on_success = image_size, camera, stop_on_success
        self._cls = metaworld.env_dict.ALL_V3_ENVIRONMENTS[self.task]
        self._env = _compiled_once(self._cls, mujoco)()  # no render_mode: this class renders (_renderer_for)
        limit = self._env.max_path_length
        self.max_steps = min(max_steps, limit) if max_steps > 0 else limit
        self.state_dim = 39 if full_state else 4
        self._mujoco = mujoco
        self._camera = mujoco.MjvCamera()
        self._camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._camera.fixedcamid = self._env.model.camera(camera).id
        spaces = gymnasium.spaces
        self.observation_space = spaces.Dict({
            "image": spaces.Box(0, 255, (image_size, image_size, 3), np.uint8),
            "state": spaces.Box(-np.inf, np.inf, (self.state_dim,), np.float32)})
        self.action_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
        # set_task once (Meta-World refuses to step without it), with the goal in the env's
        # observation (the expert needs it; what the tenant gets is cut in _observation); then
        # positions are drawn at each reset from the env's seeded generator.
        space = self._env._random_reset_space
        data = {"env_cls": self._cls, "rand_vec": (space.low + space.high) / 2, "partially_observable": False}
        self._env.set_task(metaworld.types.Task(env_name=self.task, data=pickle.dumps(data)))
        self._env._freeze_rand_vec, self._env.seeded_rand_vec = False, True
        self._full_obs: Optional[np.ndarray] = None  # Meta-World's 39-d observation, goal included
        self._expert = None
        self.steps = 0

    def reset(self, seed: Optional[int] = None, options: Optional[dict] = None) -> tuple[dict, dict]:
        # The seed seeds the env's generator, and the task draws its object and goal positions
        # from it (seeded_rand_vec): a frozen rand_vec (Meta-World's benchmark tasks) would loop
        # forever in the tasks that redraw until the goal is far enough from the object.
        if seed is not None:
            self._env.seed(int(seed) % (2 ** 32))
        obs, _ = self._env.reset()
        self._full_obs, self.steps = obs, 0
        return self._observation(obs), {"instruction": self.instruction, "success": False}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        if self._full_obs is None:
            raise RuntimeError("step before reset")
        a = np.asarray(action, dtype=np.float32).reshape(-1)
        if a.size != 4 or not np.all(np.isfinite(a)):
            raise ValueError(f"an action is 4 finite values, got {a.size}: {a}")
        obs, reward, _, _, info = self._env.step(np.clip(a, -1.0, 1.0))
        self._full_obs = obs
        self.steps += 1
        success = bool(info.get("success", 0.0))
        terminated = success and self.stop_on_success
        truncated = not terminated and self.steps >= self.max_steps
        return (self._observation(obs), float(reward), terminated, truncated,
                {"success": success, "instruction": self.instruction})

    def render(self) -> np.ndarray:
        r = _renderer_for(self._env.model, self.task, self.image_size)
        # This env's own model: tasks move bodies in the model (not the data) at reset.
        m = self._mujoco
        m.mjv_updateScene(self._env.model, self._env.data, r._scene_option, None, self._camera,
                          m.mjtCatBit.mjCAT_ALL, r.scene)
        r.scene.flags[m.mjtRndFlag.mjRND_SHADOW] = 0
        r.scene.flags[m.mjtRndFlag.mjRND_REFLECTION] = 0
        return r.render()

    def expert_action(self) -> np.ndarray:
        """The task's scripted expert (shipped with Meta-World) on the current observation."""
        if self._expert is None:
            _, metaworld, _ = _metaworld()
            self._expert = metaworld.policies.ENV_POLICY_MAP[self.task]()
        return np.clip(self._expert.get_action(self._full_obs), -1.0, 1.0).astype(np.float32)

    @property
    def full_observation(self) -> np.ndarray:
        return np.asarray(self._full_obs, dtype=np.float32)

    def close(self) -> None:
        self._env.close()

    def _observation(self, obs: np.ndarray) -> dict:
        state = obs if self.state_dim == 39 else obs[:4]  # hand xyz, gripper opening
        return {"image": self.render(), "state": np.asarray(state, dtype=np.float32)}


_compiled: dict = {}  # the task's XML path -> its compiled model, copied for each env
_compiled_lock = threading.Lock()
_subclasses: dict = {}


def _compiled_once(cls: type, mujoco: Any) -> type:
    """`cls` with its model compiled once per process and copied for every further env:
    compiling a task's XML takes about 0.1 s, a copy a tenth of that, and nexusd gives an open of
    N sessions 10 s. (A subclass, so Meta-World's isinstance checks in set_task still hold.)"""
    def _initialize_simulation(self):  # gymnasium's MujocoEnv, with the compile cached
        with _compiled_lock:
            if self.fullpath not in _compiled:
                _compiled[self.fullpath] = mujoco.MjModel.from_xml_path(self.fullpath)
            model = copy.deepcopy(_compiled[self.fullpath])
        model.vis.global_.offwidth, model.vis.global_.offheight = self.width, self.height
        return model, mujoco.MjData(model)

    with _compiled_lock:
        if cls not in _subclasses:
            _subclasses[cls] = type(cls.__name__, (cls,), {"_initialize_simulation": _initialize_simulation})
        return _subclasses[cls]


class _ThreadRenderers:
    """The renderers of one thread, a task and image size each. A renderer costs about 0.3 s to
    make (its GL context and the scene's textures, in software), and a connection's sessions
    are served by one thread one at a time, so they share it: 50 sessions open in well under
    nexusd's 10 s. Each env draws its own model and data into the shared scene; the context
    only holds the task's meshes and textures, which no reset changes."""

    def __init__(self) -> None:
        self.by_key: dict = {}

    def __del__(self) -> None:
        self.free()

    def free(self) -> None:
        renderers, self.by_key = list(self.by_key.values()), {}
        for r in renderers:
            # MuJoCo 3.3's Renderer.close() destroys the GL context before the GL objects it
            # holds, so those would be deleted in whichever context is current: another
            # renderer's, whose frames would then come out wrong. Free them in their own first.
            try:
                r._gl_context.make_current()
                r._mjr_context.free()
                r._mjr_context = None
                r.close()
            except Exception:  # interpreter shutdown: the GL library may already be gone
                pass


_thread_local = threading.local()


def _renderer_for(model: Any, task: str, image_size: int) -> Any:
    import mujoco
    if not hasattr(_thread_local, "renderers"):
        _thread_local.renderers = _ThreadRenderers()
        if threading.current_thread() is threading.main_thread():  # freed before the GL library is
            atexit.register(_thread_local.renderers.free)
    cache = _thread_local.renderers.by_key
    key = (task, image_size)
    if key not in cache:
        # No multisampling (the offscreen buffer is made with this): with the shadow and
        # reflection passes off (per frame), a step with its frame runs about 14x faster.
        model.vis.quality.offsamples = 0
        cache[key] = mujoco.Renderer(model, image_size, image_size)
    return cache[key]


def env_factory(camera: str = "corner", max_steps: int = 0, full_state: bool = False, instruction: str = ""):
    """make_env for nexus.environment: nexusd's requested limit (0: the task's own) is capped by
    `max_steps` when that is set."""
    def make_env(task: str, image_size: int, requested: int) -> MetaWorldTask:
        limit = min(x for x in (requested, max_steps) if x > 0) if requested > 0 or max_steps > 0 else 0
        return MetaWorldTask(task, image_size, limit, camera, full_state, instruction=instruction)
    return make_env


def spawn_engine(socket_path: str, *args: str, timeout: float = 60.0, stderr: Any = None) -> Any:
    """Starts `python -m nexus.metaworld serve --socket socket_path *args` in a process of its own
    and returns it (a subprocess.Popen) once its socket exists: the server publishes the path only
    when it accepts connections. A stale file at the path (a killed engine's) is removed first."""
    import subprocess
    import time
    if os.path.lexists(socket_path):
        os.unlink(socket_path)
    proc = subprocess.Popen([sys.executable, "-m", "nexus.metaworld", "serve", "--socket", socket_path, *args],
                            stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.monotonic() + timeout
    while not os.path.exists(socket_path):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"the Meta-World engine did not start within {timeout} s (exit {proc.returncode})")
        time.sleep(0.05)
    return proc


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m nexus.metaworld", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve Meta-World tasks to nexusd (nexusd --external-env metaworld=SOCKET)")
    s.add_argument("--socket", required=True)
    s.add_argument("--camera", default="corner", choices=CAMERAS)
    s.add_argument("--max-steps", type=int, default=0, help="cap every episode (0: the task's 500)")
    s.add_argument("--full-state", action="store_true", help="Meta-World's 39-d observation (goal included)")
    s.add_argument("--mode", default="660", help="the socket's permissions (octal): nexusd's user must connect")
    s.add_argument("--instruction", default="", help="one instruction for every task (a control: no language)")
    r = sub.add_parser("record", help="record a task's scripted expert into a robomimic HDF5 file")
    r.add_argument("--task", required=True, action="append", help="a task; repeat for several (one file)")
    r.add_argument("--episodes", type=int, default=20, help="per task")
    r.add_argument("--out", required=True)
    r.add_argument("--seed", type=int, default=0, help="episode i of a task resets with seed + i")
    r.add_argument("--noise", type=float, default=0.0, help="Gaussian noise (std) added to the expert's actions")
    r.add_argument("--image-size", type=int, default=64)
    r.add_argument("--camera", default="corner", choices=CAMERAS)
    r.add_argument("--max-steps", type=int, default=0, help="cap every episode (0: the task's 500)")
    r.add_argument("--successes-only", action="store_true", help="keep only episodes the expert completed")
    r.add_argument("--instruction", default="", help="one instruction for every task (a control: no language)")
    a = p.parse_args(argv)
    if a.command == "serve":
        import nexus.environment
        print(f"nexus.metaworld: serving {len(INSTRUCTIONS)} tasks on {a.socket} (camera {a.camera})", flush=True)
        nexus.environment.serve(a.socket, env_factory(a.camera, a.max_steps, a.full_state, a.instruction),
                                mode=int(a.mode, 8))
        return 0
    from .metaworld_record import record
    try:
        summary = record(a.task, a.episodes, a.out, seed=a.seed, noise=a.noise, image_size=a.image_size,
                         camera=a.camera, max_steps=a.max_steps, successes_only=a.successes_only,
                         instruction=a.instruction, progress=lambda line: print(line, file=sys.stderr, flush=True))
    except (KeyError, ValueError, RuntimeError, OSError) as e:  # a bad task or value, a file we cannot write
        print(f"nexus.metaworld record: {e}", file=sys.stderr)
        return 2
    import json
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
