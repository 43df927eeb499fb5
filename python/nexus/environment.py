"""Serve a Python simulator to nexusd as an external environment.

    import nexus.environment

    def make_env(task, image_size, max_steps):      # one env per session nexusd opens
        return MyGymnasiumEnv(task, image_size)     # reset/step as in gymnasium

    nexus.environment.serve("/tmp/mysim.sock", make_env)   # nexusd --external-env mysim=/tmp/mysim.sock

Tenants then open "mysim:<task>" sessions and RL jobs on them like built-in tasks. The env
follows gymnasium's API (reset(seed=) -> (obs, info); step(action) -> (obs, reward,
terminated, truncated, info)); obs is {"image": uint8 [H, W, 3], "state": float32 [state_dim]};
info may carry "success" (bool) and "instruction" (str, else env.instruction). Its dimensions
come from observation_space["image"|"state"] and action_space when they exist (gymnasium
spaces), else from the attributes image_size, state_dim, action_dim; the episode limit from
max_steps (else env.spec.max_episode_steps, else the one nexusd asked for).

The protocol (nexus.fbs, ExtMessage; version 2) is framed and verified by the C++ extension, the
same code nexusd uses, which also echoes each request's id in its reply. An episode that reaches
its limit without the env terminating it is sent as truncated (RL jobs bootstrap its value);
terminated episodes as done alone (docs/design/env-rl.md).
"""
from __future__ import annotations

import math
import os
import socket
import threading
from typing import Any, Callable

import numpy as np

from ._native import ExtConnection

MakeEnv = Callable[[str, int, int], Any]


def _dims(env: Any, image_size: int, max_steps: int) -> tuple[int, int, int, int]:
    spaces = getattr(env, "observation_space", None)
    try:
        image = spaces["image"].shape  # gymnasium Dict space
        state_dim = int(np.prod(spaces["state"].shape))
        size = int(image[0])
    except (TypeError, KeyError, AttributeError):
        size, state_dim = int(getattr(env, "image_size", image_size)), int(env.state_dim)
    action_space = getattr(env, "action_space", None)
    action_dim = int(np.prod(action_space.shape)) if action_space is not None else int(env.action_dim)
    limit = getattr(env, "max_steps", None)
    if limit is None:
        spec = getattr(env, "spec", None)
        limit = getattr(spec, "max_episode_steps", None) or max_steps
    return size, state_dim, action_dim, int(limit)


class _Session:
    """One connection: ExtOpen -> ExtSpec, then resets and steps, until nexusd closes it."""

    def __init__(self, conn: socket.socket, make_env: MakeEnv, counter: "_Counter") -> None:
        self.conn, self.make_env, self.counter = conn, make_env, counter
        self.ext = ExtConnection(conn.fileno())

    def run(self) -> None:
        try:
            self._serve()
        finally:
            self.conn.close()

    def _serve(self) -> None:
        kind, *args = self.ext.recv(30.0)
        if kind != "open":
            return
        task, image_size, max_steps = args
        try:
            env = self.make_env(task, image_size, max_steps)
            size, state_dim, action_dim, limit = _dims(env, image_size, max_steps)
        except Exception as e:  # the task cannot be opened: say why, then close
            self.ext.send_spec(0, 0, 0, 0, f"{type(e).__name__}: {e}" or "cannot open")
            return
        if not self.ext.send_spec(size, state_dim, action_dim, limit):
            return
        done, steps = True, 0
        while True:
            kind, *args = self.ext.recv(24 * 3600.0)
            if kind == "closed":
                break
            if kind == "reset":
                obs, info = env.reset(seed=int(args[0]))
                done, steps = False, 0
                ok = self._send(env, obs, info, 0.0, False)
            elif kind == "step":
                action = args[0]
                refusal = self._check(action, action_dim, done)
                if refusal:
                    ok = self.ext.send_observation(0.0, done, False, None, None, "", refusal, True)
                    continue
                try:
                    obs, reward, terminated, truncated, info = env.step(action)
                except Exception as e:  # the simulator broke: the session fails, nexusd is told
                    ok = self.ext.send_observation(0.0, True, False, None, None, "", f"{type(e).__name__}: {e}")
                    break
                steps += 1
                self.counter.add()
                done = bool(terminated or truncated or steps >= limit)
                ok = self._send(env, obs, info, float(reward), done, done and not terminated)
            else:
                break
            if not ok:
                break

    @staticmethod
    def _check(action: np.ndarray, action_dim: int, done: bool) -> str:
        if done:
            return "step after the episode ended: reset first"
        if action.shape != (action_dim,):
            return f"an action has {action_dim} numbers, not {action.size}"
        if not all(math.isfinite(float(a)) for a in action):
            return "an action must be finite"
        return ""

    def _send(self, env: Any, obs: dict, info: dict, reward: float, done: bool, truncated: bool = False) -> bool:
        info = info or {}
        instruction = info.get("instruction", getattr(env, "instruction", ""))
        return self.ext.send_observation(reward, done, bool(info.get("success", False)), obs["image"],
                                         np.asarray(obs["state"], dtype=np.float32).ravel(), str(instruction),
                                         truncated=truncated)


class _Counter:
    def __init__(self) -> None:
        self._lock, self.value = threading.Lock(), 0

    def add(self) -> None:
        with self._lock:
            self.value += 1


class Server:
    """Listens on a Unix socket; one thread and one env per session nexusd opens."""

    def __init__(self, socket_path: str, make_env: MakeEnv, mode: int = 0o660) -> None:
        self.path, self.make_env = socket_path, make_env
        self.steps = _Counter()  # env steps served, all sessions together
        if os.path.exists(socket_path):
            os.unlink(socket_path)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(socket_path)
        os.chmod(socket_path, mode)  # nexusd's user must be able to connect
        self._listener.listen(64)
        self._closed = False

    def serve_forever(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                if self._closed:
                    return
                raise
            threading.Thread(target=_Session(conn, self.make_env, self.steps).run, daemon=True).start()

    def start(self) -> "Server":
        """Serves from a background thread; returns self."""
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in accept()
        except OSError:
            pass
        self._listener.close()
        if os.path.exists(self.path):
            os.unlink(self.path)


def serve(socket_path: str, make_env: MakeEnv, mode: int = 0o660) -> None:
    """Serves sessions until interrupted."""
    server = Server(socket_path, make_env, mode)
    try:
        server.serve_forever()
    finally:
        server.close()
