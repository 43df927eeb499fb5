"""LeRobot datasets into nexusd, batch by batch.

LeRobot publishes datasets as Parquet (state, actions, indices) plus MP4 (cameras), read by
`lerobot.datasets.lerobot_dataset.LeRobotDataset`. nexusd reads HDF5 itself; a LeRobot dataset
is read here, in the tenant's process, with lerobot's own reader (its decoders, its file
layout), and each batch is written into the attachment's arena for an SFT step:

    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    import nexus, nexus.lerobot as nl

    ds = LeRobotDataset("me/pusht", root=..., delta_timestamps=nl.chunk_timestamps(10, chunk=4))
    with nexus.Client.attach("alice") as c:
        feeder = nl.LeRobotFeeder(c, ds, valid_fraction=0.1)
        feeder.register(kind="mlp_chunk")
        losses = feeder.train(steps=2000, batch_size=32)
        print(feeder.action_error(feeder.valid_indices, version=c.publish()))

What the feeder does to each sample (the same rules as nexusd's HDF5 reader, datasets/):
- cameras (`meta.camera_keys`, or the ones named) become views, in that order; LeRobot's
  float [3, H, W] in [0, 1] is resized to the backbone's square image size, each axis on its
  own (a non-square frame is stretched): area averaging along an axis that shrinks, bilinear
  with pixel centres at +0.5 along one that grows (torch's `area` is adaptive average pooling,
  so a non-integer shrink weights edge pixels slightly differently from nexusd's exact-overlap
  resize), then rounded to uint8 [S, S, 3];
- the sample's `task` string is the instruction (`instruction=` replaces it for every sample);
- `observation.state` and `action` are normalised with the dataset's own statistics
  (`meta.stats` mean and std, which lerobot computes when it writes the dataset) and
  predictions are mapped back, so the head trains and answers in one scale;
- an action chunk is what lerobot returns for `delta_timestamps` (chunk_timestamps below):
  past an episode's end lerobot repeats its last action and flags it in `action_is_pad`; those
  repeated actions are trained on (nexusd's SFT step takes no loss mask) and left out of
  `action_error`.

Batches are double-buffered in the arena: the next batch is read and converted while nexusd
runs the current step. This module needs `lerobot` (and so torch) where it runs; the rest of
the package does not.
"""
from __future__ import annotations

import sys
import time
from typing import Iterable, NamedTuple, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

import nexus


def _bad(message: str) -> "nexus.BadDataset":
    return nexus.BadDataset(nexus.BadDataset.value, message)


def chunk_timestamps(fps: float, chunk: int, action_key: str = "action") -> dict:
    """`delta_timestamps` for LeRobotDataset: each sample's action and the chunk - 1 after it."""
    return {action_key: [i / fps for i in range(chunk)]}


class Batch(NamedTuple):
    """One batch's arena tensors (views of the attachment's shared memory)."""
    images: "nexus.Tensor"   # uint8 [n, views, S, S, 3]
    tokens: "nexus.Tensor"   # int32 [n, max_tokens]
    mask: "nexus.Tensor"     # uint8 [n, max_tokens]
    actions: "nexus.Tensor"  # float32 [n, chunk, action_dim], normalised
    state: Optional["nexus.Tensor"]  # float32 [n, state_dim], normalised; None without state


def resize_image(chw: torch.Tensor, size: int) -> np.ndarray:
    """LeRobot's float [3, H, W] in [0, 1] to uint8 [size, size, 3] (see the module's rules)."""
    if chw.dim() != 3 or chw.shape[0] != 3:
        raise _bad(f"a camera frame must be [3, H, W], got {list(chw.shape)}")
    x = chw.to(torch.float32).unsqueeze(0)
    h, w = x.shape[-2:]
    if h > size or w > size:  # shrink what is too large, by area
        x = F.interpolate(x, size=(min(h, size), min(w, size)), mode="area")
    if x.shape[-2] < size or x.shape[-1] < size:  # then grow what is too small, bilinearly
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return (x[0] * 255.0).round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).contiguous().numpy()


class LeRobotFeeder:
    """Feeds a LeRobotDataset to one attachment's SFT steps and predictions (see the module)."""

    def __init__(self, client, dataset, *, cameras: Optional[Sequence[str]] = None,
                 state_key: Optional[str] = "observation.state", action_key: str = "action",
                 normalize: bool = True, instruction: str = "", valid_fraction: float = 0.0,
                 split_seed: int = 0, cache: bool = False):
        self.client, self.dataset = client, dataset
        meta = dataset.meta
        features = dataset.features
        self.cameras = list(cameras) if cameras else list(meta.camera_keys)
        if not self.cameras:
            raise _bad("the dataset has no camera (meta.camera_keys is empty)")
        for key in self.cameras + [action_key] + ([state_key] if state_key else []):
            if key not in features:
                raise _bad(f"'{key}' is not a feature of {dataset.repo_id} (it has {sorted(features)})")
        if state_key and len(features[state_key]["shape"]) != 1:
            raise _bad(f"'{state_key}' must be a vector")
        self.state_key = state_key
        self.action_key = action_key
        self.instruction = instruction
        self.state_dim = int(features[state_key]["shape"][0]) if state_key else 0
        self.action_dim = int(np.prod(features[action_key]["shape"]))
        first = dataset[0]
        for cam in self.cameras:  # one frame per camera: delta_timestamps on a camera would give [T, 3, H, W]
            if first[cam].dim() != 3 or first[cam].shape[0] != 3:
                raise _bad(f"'{cam}' gives {list(first[cam].shape)} per sample, not one [3, H, W] frame")
        if state_key and tuple(first[state_key].shape) != (self.state_dim,):
            raise _bad(f"'{state_key}' gives {list(first[state_key].shape)} per "
                                   f"sample, not [{self.state_dim}] (no delta_timestamps on the state)")
        action = first[action_key]
        self.chunk = int(action.shape[0]) if action.dim() == 2 else 1
        if action.numel() != self.chunk * self.action_dim:
            raise _bad(f"'{action_key}' gives {list(action.shape)} per sample")
        if not instruction and not first.get("task"):
            raise _bad("the samples name no task: pass instruction=")
        self._stats = {}
        if normalize:
            for key, dim in ((action_key, self.action_dim), (state_key, self.state_dim)):
                if not key:
                    continue
                s = (meta.stats or {}).get(key)
                if s is None or "mean" not in s or "std" not in s:
                    raise _bad(f"no mean/std statistics for '{key}' in meta.stats")
                mean = np.asarray(s["mean"], np.float32).reshape(-1)
                std = np.asarray(s["std"], np.float32).reshape(-1)
                if mean.size != dim or std.size != dim:
                    raise _bad(f"'{key}' statistics are not {dim} wide")
                # A constant entry (std 0) is centred, not divided by zero.
                self._stats[key] = (mean, np.where(std > 1e-8, std, 1.0).astype(np.float32))
        self.train_indices, self.valid_indices = self._split(valid_fraction, split_seed)
        self._cache = {} if cache else None
        self._buffers = {}  # (rows, slot) -> Batch: the training batch's two slots, predict's one
        self.backbone = None

    # --- set-up -------------------------------------------------------------------------------

    def _split(self, valid_fraction: float, seed: int):
        """Whole episodes go to validation (a seeded choice), never single frames of one."""
        episodes = np.asarray(self.dataset.hf_dataset["episode_index"]).reshape(-1)
        ids = np.unique(episodes)
        n_valid = int(round(valid_fraction * len(ids)))
        if valid_fraction > 0 and len(ids) > 1:
            n_valid = min(max(n_valid, 1), len(ids) - 1)
        valid_eps = set(np.random.default_rng(seed).permutation(ids)[:n_valid].tolist())
        is_valid = np.isin(episodes, list(valid_eps))
        return np.flatnonzero(~is_valid), np.flatnonzero(is_valid)

    def tenant_spec(self, kind: str = "mlp_chunk", seed: int = 0, lr: float = 1e-3, **head_fields):
        head = nexus.HeadSpec(kind=kind, chunk=self.chunk, action_dim=self.action_dim, state_dim=self.state_dim,
                              **head_fields)
        return nexus.TenantSpec(views=len(self.cameras), head=head, seed=seed, optimizer=nexus.OptimizerSpec(lr=lr))

    def register(self, kind: str = "mlp_chunk", seed: int = 0, lr: float = 1e-3, **head_fields):
        """Registers this attachment's head for the dataset's shapes; returns the BackboneInfo."""
        self.backbone = self.client.register(self.tenant_spec(kind, seed, lr, **head_fields))
        return self.backbone

    # --- samples and batches ------------------------------------------------------------------

    def normalize(self, key: str, values: np.ndarray) -> np.ndarray:
        if key not in self._stats:
            return values.astype(np.float32)
        mean, std = self._stats[key]
        return ((values - mean) / std).astype(np.float32)

    def denormalize(self, key: str, values: np.ndarray) -> np.ndarray:
        if key not in self._stats:
            return values.astype(np.float32)
        mean, std = self._stats[key]
        return (values * std + mean).astype(np.float32)

    def sample(self, index: int):
        """(images uint8 [views, S, S, 3], instruction, state or None, actions [chunk, dim], pad [chunk])."""
        if self._cache is not None and index in self._cache:
            return self._cache[index]
        item = self.dataset[int(index)]
        size = self._backbone().image_size
        images = np.stack([resize_image(item[cam], size) for cam in self.cameras])
        text = self.instruction or item.get("task") or ""
        state = item[self.state_key].numpy().astype(np.float32) if self.state_key else None
        actions = item[self.action_key].numpy().astype(np.float32).reshape(self.chunk, self.action_dim)
        pad_key = self.action_key + "_is_pad"
        pad = item[pad_key].numpy().astype(bool).reshape(-1) if pad_key in item else np.zeros(self.chunk, bool)
        out = (images, text, state, actions, pad)
        if self._cache is not None:
            self._cache[index] = out
        return out

    def _backbone(self):
        if self.backbone is None:  # register() sets it; a feeder for an attached slot asks once
            self.backbone = self.client.backbone()
        return self.backbone

    def _batch(self, n: int, slot: int) -> Batch:
        # Arena memory is the attachment's (64 MiB by default): a buffer per size in use, no more.
        if (n, slot) not in self._buffers:
            bb = self._backbone()
            c, s = self.client, bb.image_size
            self._buffers[(n, slot)] = Batch(
                c.alloc("uint8", [n, len(self.cameras), s, s, 3]), c.alloc("int32", [n, bb.max_tokens]),
                c.alloc("uint8", [n, bb.max_tokens]), c.alloc("float32", [n, self.chunk, self.action_dim]),
                c.alloc("float32", [n, self.state_dim]) if self.state_dim else None)
        return self._buffers[(n, slot)]

    def fill(self, indices: Sequence[int], slot: int = 0, samples=None) -> Batch:
        """Writes the samples at `indices` (or the given `sample()` tuples) into arena buffer
        `slot` of that many rows; returns its tensors. The caller must not name a slot whose
        request is still in flight (train() alternates two)."""
        samples = samples if samples is not None else [self.sample(i) for i in indices]
        b = self._batch(len(samples), slot)
        images, actions = b.images.numpy(), b.actions.numpy()
        state = b.state.numpy() if b.state is not None else None
        for row, (im, text, st, act, _) in enumerate(samples):
            images[row] = im
            nexus.tokenize(text, b.tokens, b.mask, row)
            actions[row] = self.normalize(self.action_key, act)
            if state is not None:
                state[row] = self.normalize(self.state_key, st)
        return b

    # --- training and prediction --------------------------------------------------------------

    def sft_step(self, indices: Sequence[int]):
        b = self.fill(indices, slot=0)
        return self.client.sft_step(b.images, b.tokens, b.mask, b.actions, b.state)

    def train(self, steps: int, batch_size: int = 16, seed: int = 0, report_every: int = 0,
              indices: Optional[Iterable[int]] = None, progress=sys.stderr) -> list:
        """`steps` SFT steps on batches drawn (seeded, with replacement) from `indices` (default:
        the training split); the next batch is prepared while nexusd runs the current one.
        Returns the losses."""
        if steps < 1 or batch_size < 1:
            raise ValueError("steps and batch_size must be at least 1")
        pool = np.asarray(list(indices) if indices is not None else self.train_indices)
        if pool.size == 0:
            raise _bad("no samples to train on (is every episode in validation?)")
        rng = np.random.default_rng(seed)
        draw = lambda: rng.choice(pool, size=batch_size, replace=True)  # noqa: E731
        submit = lambda b: self.client.sft_step_async(b.images, b.tokens, b.mask, b.actions, b.state)  # noqa: E731
        pending = submit(self.fill(draw(), 0))
        losses, started = [], time.monotonic()
        try:
            for step in range(1, steps + 1):
                # Slot step % 2 is free: its last request (step - 2) was answered.
                ready = self.fill(draw(), step % 2) if step < steps else None  # while nexusd computes
                r, pending = pending.result(), None
                losses.append(r.loss)
                if ready is not None:
                    pending = submit(ready)
                if progress is not None and report_every and (step % report_every == 0 or step == steps):
                    rate = step / (time.monotonic() - started)
                    print(f"[lerobot] step {step}/{steps}  {rate:.1f} steps/s  loss {r.loss:.4f}", file=progress)
        finally:
            if pending is not None:  # an error here: the request in flight still owns its buffer
                try:
                    pending.result()
                except nexus.Error:
                    pass
        return losses

    def _predict_samples(self, samples, version: int) -> np.ndarray:
        b = self.fill([], slot=0, samples=samples)
        out = self.client.predict(b.images, b.tokens, b.mask, b.state, version)
        out = np.asarray(out, np.float32).reshape(len(samples), self.chunk, self.action_dim)
        return self.denormalize(self.action_key, out)

    def _batches(self, indices: Sequence[int], batch_size: int):
        """`indices` in fixed-size groups (the last padded with its own last index, so one
        arena buffer serves them all): (samples, real rows)."""
        indices = list(indices)
        for at in range(0, len(indices), batch_size):
            part = indices[at:at + batch_size]
            real = len(part)
            part = part + [part[-1]] * (min(batch_size, len(indices)) - real)
            yield [self.sample(i) for i in part], real

    def predict(self, indices: Sequence[int], version: int = 0, batch_size: int = 64) -> np.ndarray:
        """Actions in the dataset's units, float32 [n, chunk, action_dim], `batch_size` at a time."""
        if not len(indices):
            return np.zeros((0, self.chunk, self.action_dim), np.float32)
        parts = [self._predict_samples(samples, version)[:real] for samples, real in self._batches(indices, batch_size)]
        return np.concatenate(parts)

    def train_mean_action(self) -> np.ndarray:
        """The training split's mean action per entry, from the Parquet column (no video decoded)."""
        column = self.dataset.hf_dataset.select_columns([self.action_key])[self.action_key]
        rows = np.stack([np.asarray(a, np.float32).reshape(-1) for a in column])
        return rows[self.train_indices].mean(axis=0)

    def action_error(self, indices: Sequence[int], version: int = 0, batch_size: int = 64) -> dict:
        """Mean L1 action error at `indices` (padded chunk entries left out), beside the error of
        always answering the training split's mean action: {"l1", "mean_baseline_l1", "samples"}.
        Each sample is read once; the training split's actions come from the Parquet column."""
        indices = list(indices)
        if not indices:
            raise _bad("no samples to evaluate")
        mean = self.train_mean_action().reshape(1, self.action_dim)
        err = base = count = 0.0
        for samples, real in self._batches(indices, batch_size):
            got = self._predict_samples(samples, version)
            for row in range(real):
                want, keep = samples[row][3], ~samples[row][4]
                err += float(np.abs(got[row][keep] - want[keep]).sum())
                base += float(np.abs(mean - want[keep]).sum())
                count += float(keep.sum() * self.action_dim)
        return {"l1": err / count, "mean_baseline_l1": base / count, "samples": len(indices)}
