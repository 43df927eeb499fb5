#!/usr/bin/env python3
"""point_env.py: a simulator written in Python, served to nexusd as an external environment with
nexus.environment (the SDK). The task: move a blue dot onto the red one; the image shows both,
the state gives both positions. It follows gymnasium's Env API (and subclasses gymnasium.Env when
gymnasium is installed), so any gymnasium env with image+state observations is served the same way.

    python examples/python/point_env.py --socket /tmp/point.sock &
    build/release/daemon/nexusd --socket /tmp/nexus.sock --external-env py=/tmp/point.sock
    # tenants now open "py:point" sessions, and RL jobs run on task "py:point"
"""
import argparse

import numpy as np

try:  # optional: the SDK needs only the API, not the package
    import gymnasium
    from gymnasium import spaces
    _Base = gymnasium.Env
except ImportError:
    gymnasium, spaces, _Base = None, None, object


class PointEnv(_Base):
    """Blue dot to red dot in the unit square. Actions: 2 velocities in [-1, 1], times 0.1 per step."""

    state_dim, action_dim = 4, 2

    def __init__(self, image_size=64, max_steps=30):
        self.image_size, self.max_steps = image_size, max_steps
        self.instruction = "move the blue dot onto the red dot"
        if spaces is not None:
            self.observation_space = spaces.Dict({
                "image": spaces.Box(0, 255, (image_size, image_size, 3), np.uint8),
                "state": spaces.Box(0.0, 1.0, (4,), np.float32)})
            self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.agent = self.goal = np.zeros(2)

    def _obs(self):
        n = self.image_size
        image = np.full((n, n, 3), 200, np.uint8)
        for pos, colour in ((self.goal, (220, 30, 30)), (self.agent, (30, 30, 220))):
            x, y = (pos * (n - 1)).round().astype(int)
            image[max(0, y - 2):y + 3, max(0, x - 2):x + 3] = colour
        return {"image": image, "state": np.concatenate([self.agent, self.goal]).astype(np.float32)}

    def reset(self, seed=None, options=None):
        rng = np.random.default_rng(seed)
        self.agent, self.goal = rng.uniform(0.1, 0.9, 2), rng.uniform(0.1, 0.9, 2)
        return self._obs(), {"instruction": self.instruction}

    def step(self, action):
        before = np.linalg.norm(self.agent - self.goal)
        self.agent = np.clip(self.agent + 0.1 * np.clip(np.asarray(action, dtype=np.float64), -1, 1), 0, 1)
        after = np.linalg.norm(self.agent - self.goal)
        success = bool(after < 0.05)
        reward = float(before - after) + (1.0 if success else 0.0)
        return self._obs(), reward, success, False, {"success": success}


def make_env(task, image_size, max_steps):
    if task != "point":
        raise ValueError(f"this simulator serves 'point', not {task!r}")
    return PointEnv(image_size, max_steps if max_steps > 0 else 30)


if __name__ == "__main__":
    import nexus.environment

    p = argparse.ArgumentParser(description="a Python simulator served to nexusd")
    p.add_argument("--socket", required=True)
    a = p.parse_args()
    print(f"point_env: serving 'point' on {a.socket}", flush=True)
    nexus.environment.serve(a.socket, make_env, mode=0o666)
