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

The protocol (nexus.fbs, ExtMessage; version 3) is framed and verified by the C++ extension, the
same code nexusd uses, which also echoes each request's id in its reply. It is vectorised: an
open of N sessions (a tenant's env_open of N, an RL job's sessions) is one connection, served by
one thread with N envs from make_env, and a reset or step of any of them is one exchange. An
episode that reaches its limit without the env terminating it is sent as truncated (RL jobs
bootstrap its value); terminated episodes as done alone (docs/design/env-rl.md).
"""
from __future__ import annotations

import math
import os
import socket
import tempfile
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


class _Episode:
    """One session's env and where its episode is."""

    def __init__(self, env: Any) -> None:
        self.env, self.done, self.steps = env, True, 0


class _Connection:
    """One connection: ExtOpen -> ExtSpec, then resets and steps of its sessions, until nexusd
    closes it. Requests name sessions by index; a reply has one observation per named session."""

    def __init__(self, conn: socket.socket, make_env: MakeEnv, counter: "_Counter", exchanges: "_Counter") -> None:
        self.conn, self.make_env, self.counter, self.exchanges = conn, make_env, counter, exchanges
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
        task, image_size, max_steps, count = args
        try:
            if not 1 <= count <= 1024:
                raise ValueError(f"sessions must be 1..1024, not {count}")
            episodes = [_Episode(self.make_env(task, image_size, max_steps)) for _ in range(count)]
            size, state_dim, action_dim, limit = _dims(episodes[0].env, image_size, max_steps)
        except Exception as e:  # the task cannot be opened: say why, then close
            self.ext.send_spec(0, 0, 0, 0, f"{type(e).__name__}: {e}" or "cannot open")
            return
        if not self.ext.send_spec(size, state_dim, action_dim, limit):
            return
        while True:
            kind, *args = self.ext.recv(24 * 3600.0)
            if kind not in ("reset", "step"):
                break  # closed, or out of protocol
            named = args[0]
            if not named or len(set(named)) != len(named) or max(named) >= count:
                break  # nexusd names only sessions it opened, each once
            if kind == "reset":
                seeds = args[1]
                if len(seeds) != len(named):
                    break
                replies = [self._reset(episodes[i], seed) for i, seed in zip(named, seeds)]
            else:
                actions = args[1]
                if actions.size != len(named) * action_dim:
                    replies = [_refusal(f"actions must be {action_dim} per session") for _ in named]
                else:
                    rows = actions.reshape(len(named), action_dim)
                    replies = [self._step(episodes[i], row, action_dim, limit) for i, row in zip(named, rows)]
            self.exchanges.add()
            if not self.ext.send_observations(replies):
                break

    def _reset(self, ep: _Episode, seed: int) -> tuple:
        try:  # the simulator broke, or gave an observation without image or state: this session
            obs, info = ep.env.reset(seed=int(seed))  # fails, nexusd is told; the others go on
            reply = _observation(ep.env, obs, info, 0.0, False)
        except Exception as e:
            return _broken(e)
        ep.done, ep.steps = False, 0
        return reply

    def _step(self, ep: _Episode, action: np.ndarray, action_dim: int, limit: int) -> tuple:
        if ep.done:
            return _refusal("step after the episode ended: reset first")
        if not all(math.isfinite(float(a)) for a in action):
            return _refusal("an action must be finite")
        try:
            obs, reward, terminated, truncated, info = ep.env.step(action.copy())
            ep.steps += 1
            self.counter.add()
            ep.done = bool(terminated or truncated or ep.steps >= limit)
            return _observation(ep.env, obs, info, float(reward), ep.done, ep.done and not terminated)
        except Exception as e:
            ep.done = True
            return _broken(e)


def _observation(env: Any, obs: dict, info: dict, reward: float, done: bool, truncated: bool = False) -> tuple:
    info = info or {}
    instruction = info.get("instruction", getattr(env, "instruction", ""))
    state = np.asarray(obs["state"], dtype=np.float32).ravel()
    return (reward, done, bool(info.get("success", False)), obs["image"], state, str(instruction), "", False,
            truncated)


def _refusal(why: str) -> tuple:  # the caller's mistake: the session is fine
    return (0.0, False, False, None, None, "", why, True, False)


def _broken(e: Exception) -> tuple:
    return (0.0, True, False, None, None, "", f"{type(e).__name__}: {e}", False, False)


class _Counter:
    def __init__(self) -> None:
        self._lock, self.value = threading.Lock(), 0

    def add(self) -> None:
        with self._lock:
            self.value += 1


class Server:
    """Listens on a Unix socket; one thread per connection nexusd opens, one env per session."""

    def __init__(self, socket_path: str, make_env: MakeEnv, mode: int = 0o660) -> None:
        self.path, self.make_env = socket_path, make_env
        self.steps = _Counter()        # env steps served, all sessions together
        self.connections = _Counter()  # opens nexusd made: one per env_open of any number of sessions
        self.exchanges = _Counter()    # resets and steps answered: one per call, whatever its sessions
        # The file appears at bind(), before chmod() and listen(): bound in a private directory
        # beside it (mkdtemp: 0700, so nobody can swap the file before the chmod) and renamed into
        # place, `socket_path` appears only once nexusd may connect and is accepted. A path too
        # long for the staged name is bound in place.
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stage_dir = tempfile.mkdtemp(prefix=".nexus-env-", dir=os.path.dirname(os.path.abspath(socket_path)))
        staging = os.path.join(stage_dir, "s")
        if len(os.fsencode(staging)) >= 108:  # sun_path
            staging = socket_path
            if os.path.lexists(socket_path):
                os.unlink(socket_path)
        try:
            self._listener.bind(staging)
            os.chmod(staging, mode)  # nexusd's user must be able to connect
            self._listener.listen(64)
            if staging != socket_path:
                os.replace(staging, socket_path)
        except BaseException:
            self._listener.close()
            raise
        finally:
            if staging != socket_path and os.path.lexists(staging):  # not published: a failure
                os.unlink(staging)
            os.rmdir(stage_dir)
        self._closed = False

    def serve_forever(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                if self._closed:
                    return
                raise
            self.connections.add()
            served = _Connection(conn, self.make_env, self.steps, self.exchanges)
            threading.Thread(target=served.run, daemon=True).start()

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
