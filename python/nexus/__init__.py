"""nexus: a tenant's client for nexusd, the shared VLA post-training daemon (libnexus for Python).

    import nexus
    with nexus.Client.attach("alice", socket_path="/run/nexus/nexusd.sock") as c:
        bb = c.register(nexus.TenantSpec(head=nexus.HeadSpec(kind="mlp_chunk", chunk=4)))
        images = c.alloc("uint8", [16, 1, bb.image_size, bb.image_size, 3])
        images.numpy()[:] = ...              # written in place: the daemon reads these bytes
        r = c.sft_step(images, tokens, mask, actions)          # or await c.sft_step_async(...)

Tensors live in the attachment's shared arena; `.numpy()` and `.torch()` are views of it, not
copies. Futures have `.result(timeout=None)` and are awaitable. Failures raise nexus.Error
subclasses, one per error code (nexus.errors).
"""
from __future__ import annotations

import asyncio as _asyncio

from . import _native
from ._native import (AdapterSpec, BackboneInfo, Client, DaemonStatus, DatasetInfo, DigestFuture, DigestResult,
                      EnvSessions, EnvStepResult, FeaturesFuture, FeaturesResult, HeadSpec, JobInfo, JobSpec,
                      OptimizerSpec, PredictionFuture, Region, RlOptions, RlStatus, SftFuture, SftResult,
                      SlotDigest, Tensor,
                      TenantSpec, TenantStatus, TenantUsage, cancel_job, fnv1a, query_metrics,
                      query_status, release_tenant, synth, tokenize)
from .errors import *  # noqa: F401,F403  (Error and one class per code)
from .errors import Error, error_class

__version__ = "0.1.0"


def _await(self):
    # The wait releases the GIL; run it on the loop's executor so the loop keeps serving.
    loop = _asyncio.get_running_loop()
    return (yield from loop.run_in_executor(None, self.result).__await__())


for _future in (SftFuture, PredictionFuture, DigestFuture, FeaturesFuture):
    _future.__await__ = _await


# Blocking forms of the asynchronous calls: submit, then wait for the reply.
def _sft_step(self, images, tokens, token_mask, actions, state=None):
    """One SFT step on a batch in the arena; returns SftResult(loss, grad_norm, step)."""
    return self.sft_step_async(images, tokens, token_mask, actions, state).result()


def _predict(self, images, tokens, token_mask, state=None, version=0, dataset=""):
    """Actions float32 [n, chunk, action_dim] of the live head (version 0) or a published one."""
    return self.predict_async(images, tokens, token_mask, state, version, dataset).result()


def _digest(self, tensor):
    """DigestResult(fnv1a, bytes) of the tensor's bytes as nexusd reads them in place."""
    return self.digest_async(tensor).result()


def _features(self, images, tokens, token_mask, out):
    """Features mode: the backbone's pooled features, float32 [n, dim], written into `out`."""
    return self.features_async(images, tokens, token_mask, out).result()


def _dataset_sft_step(self, name, batch, chunk=1):
    """One SFT step on `batch` samples nexusd draws from a dataset you loaded."""
    return self.dataset_sft_step_async(name, batch, chunk).result()


def _run_job(self, spec, poll=0.5, timeout=None):
    """Starts a job (JobSpec: sft or eval) and waits for it to end; returns its last JobInfo
    (state finished, failed or cancelled: check it). Past `timeout` seconds the job is cancelled
    and nexus.Timeout raised."""
    import time
    job = self.job_start(spec)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        info = self.job(job)
        if info.state not in ("queued", "running"):
            return info
        if deadline is not None and time.monotonic() > deadline:
            self.job_cancel(job)
            from .errors import Timeout
            raise Timeout(Timeout.value, f"job {job} ({spec.kind}) still {info.state} after {timeout} s: cancelled")
        time.sleep(poll)


Client.run_job = _run_job
Client.sft_step = _sft_step
Client.predict = _predict
Client.digest = _digest
Client.dataset_sft_step = _dataset_sft_step
Client.features = _features


def _check_codes() -> None:
    # The Python classes must cover every code the extension knows (a new code in
    # error.hpp without one here would surface as a bare nexus.Error).
    missing = {name for name, value in _native.error_codes().items() if error_class(value) is Error}
    if missing:
        raise ImportError(f"nexus.errors lacks classes for {sorted(missing)}")


_check_codes()
del _future
