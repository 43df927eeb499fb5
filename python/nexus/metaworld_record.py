"""Meta-World's scripted experts recorded as demonstrations, in robomimic's HDF5 layout (the one
nexusd's dataset loader recognises: datasets/demo_file.hpp), so an SFT tenant trains on them with
dataset_load.

    /data                             attrs total, env_args (JSON: env_name "metaworld:<task>", ...)
    /data/demo_<i>                    attrs num_samples, language_instruction, success (0/1)
    /data/demo_<i>/obs/agentview_image      uint8 [T, S, S, 3]  the camera the engine serves
    /data/demo_<i>/obs/robot0_eef_pos       float32 [T, 3]      hand position
    /data/demo_<i>/obs/robot0_gripper_qpos  float32 [T, 1]      gripper opening
    /data/demo_<i>/actions                  float32 [T, 4]      what was sent to the env
    /data/demo_<i>/states                   float32 [T, 39]     Meta-World's full observation
    /data/demo_<i>/rewards, dones           [T]

Step t pairs the observation before action t with action t, exactly what the engine serves a
tenant at that step (same camera, image size and state), so a head trained here acts there.
Several tasks go in one file (the multi-task case); each demo carries its own instruction.
"""
from __future__ import annotations

import json
import os
import time
from typing import Callable, Optional, Sequence

import numpy as np

from .metaworld import MetaWorldTask


def record_episode(env: MetaWorldTask, seed: int, noise: float, rng: np.random.Generator) -> dict:
    obs, _ = env.reset(seed=seed)
    images, states, full, actions, rewards, dones = [], [], [], [], [], []
    success = False
    while True:
        action = env.expert_action()
        if noise > 0:
            action = np.clip(action + rng.normal(0.0, noise, size=4), -1.0, 1.0).astype(np.float32)
        images.append(obs["image"])
        states.append(env.full_observation[:4])
        full.append(env.full_observation)
        actions.append(action)
        obs, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        dones.append(terminated or truncated)
        success = success or info["success"]
        if terminated or truncated:
            break
    return {"images": np.stack(images), "state": np.stack(states).astype(np.float32),
            "full": np.stack(full).astype(np.float32), "actions": np.stack(actions).astype(np.float32),
            "rewards": np.asarray(rewards, np.float32), "dones": np.asarray(dones, np.uint8),
            "success": bool(success), "instruction": env.instruction}


def record(tasks: Sequence[str], episodes: int, out: str, *, seed: int = 0, noise: float = 0.0,
           image_size: int = 64, camera: str = "corner", max_steps: int = 0, successes_only: bool = False,
           instruction: str = "", progress: Optional[Callable[[str], None]] = None) -> dict:
    """Records `episodes` expert episodes of each task into `out`; returns a summary."""
    import h5py  # in the project's venv (requirements.txt)

    if not 1 <= episodes <= 10000:
        raise ValueError(f"episodes must be 1..10000, not {episodes}")
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise must be 0..1, not {noise}")
    rng = np.random.default_rng(seed)
    per_task: dict = {}
    started = time.monotonic()
    tmp = out + ".tmp"
    try:
        demos, total = _write(h5py, tmp, tasks, episodes, seed, noise, image_size, camera, max_steps, successes_only, instruction,
               rng, per_task, progress)
    except BaseException:
        if os.path.exists(tmp):  # a failure (or ^C) leaves no partial file behind
            os.unlink(tmp)
        raise
    os.replace(tmp, out)  # a reader never sees half a file
    return {"out": out, "demos": demos, "samples": total, "tasks": per_task,
            "seconds": round(time.monotonic() - started, 1)}


def _write(h5py, tmp, tasks, episodes, seed, noise, image_size, camera, max_steps, successes_only, instruction, rng,
           per_task, progress) -> tuple[int, int]:
    """Writes the file at `tmp`; returns (demos, samples) written."""
    demos = total = 0
    with h5py.File(tmp, "w") as f:
        data = f.create_group("data")
        for task in tasks:
            env = MetaWorldTask(task, image_size, max_steps, camera, stop_on_success=True, instruction=instruction)
            kept = successes = 0
            try:
                for i in range(episodes):
                    ep = record_episode(env, seed + i, noise, rng)
                    successes += ep["success"]
                    if successes_only and not ep["success"]:
                        continue
                    g = data.create_group(f"demo_{demos}")
                    demos, kept, total = demos + 1, kept + 1, total + len(ep["actions"])
                    g.attrs["num_samples"] = len(ep["actions"])
                    g.attrs["language_instruction"] = ep["instruction"]
                    g.attrs["success"] = int(ep["success"])
                    g.attrs["task"] = env.task
                    g.attrs["seed"] = seed + i
                    g.create_dataset("obs/agentview_image", data=ep["images"])
                    g.create_dataset("obs/robot0_eef_pos", data=ep["state"][:, :3])
                    g.create_dataset("obs/robot0_gripper_qpos", data=ep["state"][:, 3:4])
                    g.create_dataset("actions", data=ep["actions"])
                    g.create_dataset("states", data=ep["full"])
                    g.create_dataset("rewards", data=ep["rewards"])
                    g.create_dataset("dones", data=ep["dones"])
                    if progress:
                        progress(f"[record] {env.task} {i + 1}/{episodes}: {len(ep['actions'])} steps, "
                                 f"{'success' if ep['success'] else 'no success'}")
            finally:
                env.close()
            per_task[env.task] = {"episodes": episodes, "expert_successes": successes, "kept": kept}
        if demos == 0:
            raise RuntimeError("no episode was kept (--successes-only and the expert never succeeded)")
        data.attrs["total"] = total
        data.attrs["env_args"] = json.dumps({
            "env_name": "metaworld:" + ",".join(per_task), "type": "metaworld",
            "env_kwargs": {"camera": camera, "image_size": image_size, "max_steps": max_steps, "noise": noise,
                           "seed": seed, "tasks": list(per_task),
                           "instruction": instruction}})
    return demos, total
