"""The Python client against a real nexusd: zero-copy arena views, typed errors, the model API,
asyncio, lifetimes, and a Python tenant whose losses equal the C++ tenant's on the same seeds."""
import asyncio
import gc
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

import nexus
from harness import SOURCE, Daemon, check, finish, raises

SFT_TENANT = os.environ["NEXUS_TEST_SFT_TENANT"]
SFT_DEMOS_TENANT = os.environ["NEXUS_TEST_SFT_DEMOS_TENANT"]
NEXUSCTL = os.environ["NEXUS_TEST_NEXUSCTL"]
PY_EXAMPLES = os.path.join(SOURCE, "examples", "python")
PY_SFT_TENANT = os.path.join(PY_EXAMPLES, "sft_tenant.py")


def error_classes():
    codes = nexus._native.error_codes()
    check(len(codes) >= 30 and all(nexus.error_class(v).code == n for n, v in codes.items()),
          "every ErrorCode of libnexus has its own nexus.Error subclass")
    check(issubclass(nexus.Timeout, TimeoutError) and issubclass(nexus.ConnectFailed, ConnectionError)
          and issubclass(nexus.BadBatch, nexus.Error), "error classes also derive from the matching built-ins")
    raises(nexus.ConnectFailed, lambda: nexus.Client.attach("nobody", socket_path="/nonexistent/nexusd.sock"),
           "attaching where no daemon listens")
    raises(AttributeError, lambda: nexus.HeadSpec(knd="flow"), "a misspelt field in a spec")
    check(nexus.HeadSpec(kind="gaussian", token_queries=3).token_queries == 3, "a head spec carries token_queries")
    check(nexus.HeadSpec(adapter=nexus.AdapterSpec(rank=8, alpha=16)).adapter.rank == 8, "a head spec carries an adapter")
    raises(ValueError, lambda: nexus.Client.attach("x", timeout=-1), "a negative timeout")


def zero_copy(c):
    t = c.alloc("uint8", [1 << 16])
    a = t.numpy()
    a[:] = np.arange(a.size) % 251
    first = c.digest(t)
    check(first.fnv1a == nexus.fnv1a(a) and first.bytes == a.nbytes,
          "nexusd's digest of the arena tensor equals the digest of numpy's bytes")
    a[12345] ^= 0xFF
    second = c.digest(t)
    check(second.fnv1a == nexus.fnv1a(a) and second.fnv1a != first.fnv1a,
          "a byte written through the numpy view is what nexusd reads in place (no copy)")
    view = t.torch()
    view[0] = 77
    check(a[0] == 77 and c.digest(t).fnv1a == nexus.fnv1a(a), "the torch view writes the same arena bytes")
    check(np.asarray(t).ctypes.data == a.ctypes.data == view.data_ptr(),
          "buffer protocol, .numpy() and .torch() all point at the arena")
    f = c.alloc(np.float32, [3, 4])
    check(f.numpy().shape == (3, 4) and f.numpy().dtype == np.float32 and f.nbytes == 48, "dtype and shape")
    b = c.alloc("bfloat16", [5])
    check(b.numpy().dtype == np.uint16 and str(b.torch().dtype) == "torch.bfloat16", "bfloat16 views")
    copy = c.from_numpy(np.arange(6, dtype=np.int64).reshape(2, 3))
    check(copy.shape == (2, 3) and copy.numpy().tolist() == [[0, 1, 2], [3, 4, 5]], "from_numpy")
    orphan = c.alloc("float32", [8]).numpy()  # the Tensor object is gone at once; its array keeps it
    gc.collect()
    orphan[:] = 1.5
    check(orphan.sum() == 12.0, "an array outlives its Tensor object safely (it holds the tensor)")
    raises(nexus.ArenaFull, lambda: c.alloc("uint8", [1 << 40]), "a tensor larger than the arena")
    raises(ValueError, lambda: c.alloc("complex64", [2]), "a dtype nexus tensors do not have")


def features_mode(c):
    bb = c.backbone()
    n, dim = 4, bb.feature_dim
    region = c.register_host_region(1 << 20)
    images = region.tensor("uint8", [n, 1, bb.image_size, bb.image_size, 3], 0)
    tokens = region.tensor("int32", [n, bb.max_tokens], images.nbytes)
    mask = region.tensor("uint8", [n, bb.max_tokens], images.nbytes + tokens.nbytes)
    out = region.tensor("float32", [n, dim], (images.nbytes + tokens.nbytes + mask.nbytes + 63) // 64 * 64)
    images.numpy().reshape(-1)[:] = np.arange(images.nbytes) % 251
    for i in range(n):
        nexus.tokenize("reach the red ball", tokens, mask, i)
    r = c.features(images, tokens, mask, out)
    check(r.samples == n and r.dim == dim, "features mode answers samples and dim")
    arena_out = c.alloc("float32", [n, dim])
    c.features(images, tokens, mask, arena_out)
    check(np.array_equal(out.numpy(), arena_out.numpy()) and np.abs(out.numpy()).sum() > 0,
          "features nexusd wrote into a region (inputs there too) equal those it wrote into the arena")
    c.unregister_region(region)
    raises(nexus.UnknownRegion, lambda: c.features(images, tokens, mask, arena_out), "a region after unregister")


def device_region(c):
    """A CUDA region: refused with the reason where there is no driver; with one, the features
    nexusd writes there, seen as a torch.cuda tensor, are the arena's bit for bit."""
    try:
        region = c.register_device_region(1 << 20)
    except nexus.WrongMessageType as e:
        check("cannot make a CUDA region" in str(e), f"no CUDA driver here: a typed refusal with the reason ({e})")
        host = c.register_host_region(4096)
        check(host.device == -1 and host.device_address == 0, "a host region says it is host memory")
        c.unregister_region(host)
        return
    import torch
    bb = c.backbone()
    n, dim = 2, bb.feature_dim
    check(region.device == 0 and region.device_address != 0, "a CUDA region on cuda:0")
    out = region.tensor("float32", [n, dim], 0)
    raises(ValueError, lambda: out.numpy(), "no host view of a CUDA region")
    images, tokens, mask = (c.alloc("uint8", [n, 1, bb.image_size, bb.image_size, 3]), c.alloc("int32", [n, bb.max_tokens]),
                            c.alloc("uint8", [n, bb.max_tokens]))
    images.numpy().reshape(-1)[:] = np.arange(images.nbytes) % 251
    for i in range(n):
        nexus.tokenize("reach the red ball", tokens, mask, i)
    arena_out = c.alloc("float32", [n, dim])
    c.features(images, tokens, mask, arena_out)
    c.features(images, tokens, mask, out)
    view = out.torch()
    check(view.is_cuda and torch.equal(view.cpu(), arena_out.torch()),
          "features written into a CUDA region, as a torch.cuda tensor, equal the arena's bit for bit")
    c.unregister_region(region)


def model_calls(c, other):
    bb = c.backbone()
    n, h, t = 4, bb.image_size, bb.max_tokens
    images, tokens, mask = c.alloc("uint8", [n, 1, h, h, 3]), c.alloc("int32", [n, t]), c.alloc("uint8", [n, t])
    actions = c.alloc("float32", [n, 4, 2])
    scenes = nexus.synth.SceneGenerator(11, image_size=h)
    for i in range(n):
        s = scenes.next()
        images.numpy()[i, 0] = s.image
        nexus.tokenize(s.instruction, tokens, mask, i)
        actions.numpy()[i] = nexus.synth.reach_actions(s, 4)
    raises(nexus.NotRegistered, lambda: c.sft_step(images, tokens, mask, actions), "an SFT step before register")
    spec = nexus.TenantSpec(seed=5, head=nexus.HeadSpec(kind="mlp_chunk", chunk=4, action_dim=2))
    info = c.register(spec)
    check(info.image_size == h and info.max_tokens == t, f"register answers the backbone's geometry: {info}")
    r = c.sft_step(images, tokens, mask, actions)
    check(r.step == 1 and r.loss > 0 and r.grad_norm > 0, f"an SFT step: {r}")
    r2 = asyncio.run(_awaited(c, images, tokens, mask, actions))
    check(r2.step == 2, "a future is awaitable in asyncio")
    actions.numpy()[0, 0, 0] = np.nan
    e = raises(nexus.BadBatch, lambda: c.sft_step(images, tokens, mask, actions), "NaN actions")
    check(e is not None and isinstance(e, ValueError) and e.value == 19, "BadBatch carries its code's number")
    actions.numpy()[0, 0, 0] = 0.0
    tokens.numpy()[0, 0] = 1 << 20
    raises(nexus.BadBatch, lambda: c.sft_step(images, tokens, mask, actions), "a token id out of the vocabulary")
    nexus.tokenize("reach the red ball", tokens, mask, 0)
    stranger = other.alloc("float32", [n, 4, 2])
    raises(ValueError, lambda: c.sft_step(images, tokens, mask, stranger), "a tensor of another client's arena")
    p = c.predict(images, tokens, mask)
    check(p.shape == (n, 4, 2) and p.dtype == np.float32 and np.isfinite(p).all(), "predict returns [n, chunk, 2]")
    version = c.publish()
    check(np.array_equal(c.predict(images, tokens, mask, version=version), p), "a published version predicts as the head did")
    raises(nexus.UnknownVersion, lambda: c.predict(images, tokens, mask, version=version + 7), "an unpublished version")
    before = c.slot_digest()
    step = c.save("py-tag")
    c.sft_step(images, tokens, mask, actions)
    check(c.slot_digest() != before, "a step changes the slot digest")
    check(c.load("py-tag") == step and c.slot_digest() == before, "save and load restore the slot exactly")
    names = [x.name for x in nexus.query_status(c_socket).tenants]
    check("py-alice" in names, f"nexusd's status lists the Python tenant: {names}")
    # An adapter: out of range is a typed error; registered, it trains and the status shows it.
    bad = nexus.HeadSpec(kind="mlp_chunk", chunk=4, action_dim=2, adapter=nexus.AdapterSpec(rank=65))
    raises(nexus.BadMessage, lambda: c.register(nexus.TenantSpec(seed=5, head=bad)), "an adapter of rank 65")
    adapted = nexus.HeadSpec(kind="mlp_chunk", chunk=4, action_dim=2, adapter=nexus.AdapterSpec(rank=4, targets=1 | 4))
    c.register(nexus.TenantSpec(seed=5, head=adapted))
    check(c.sft_step(images, tokens, mask, actions).step == 1, "an SFT step with an adapter")
    usage = {u.name: u.adapter for u in nexus.query_status(c_socket).usage}
    check(usage.get("py-alice") == "rank 4, alpha 4, q v, blocks all", f"the status shows the adapter: {usage}")


def close_under_calls(socket):
    """close() on one thread while another is in calls: the calls finish or say the client is
    closed; nothing touches a detached attachment (the process would crash)."""
    c = nexus.Client.attach("py-closer", socket_path=socket)
    outcomes = []

    def caller():
        for _ in range(3000):
            try:
                c.ping(b"x" * 64)
                outcomes.append("ok")
            except ValueError:
                outcomes.append("closed")
                return

    t = threading.Thread(target=caller)
    t.start()
    while len(outcomes) < 50:
        time.sleep(0.001)
    c.close()
    t.join(60)
    check(not t.is_alive() and outcomes[-1] in ("ok", "closed") and "ok" in outcomes,
          f"close() during another thread's calls: {outcomes.count('ok')} answered, then {outcomes[-1]}")


async def _awaited(c, images, tokens, mask, actions):
    return await c.sft_step_async(images, tokens, mask, actions)


def run_json(argv):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        print(out.stderr[-3000:], flush=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def same_losses_as_cpp(socket):
    common = ["-s", socket, "--steps", "40", "--batch", "8", "--seed", "3", "--heldout", "32", "--report-every", "0",
              "--trajectory"]
    cpp = run_json([SFT_TENANT, "-t", "cpp-bob", *common])
    py = run_json([sys.executable, PY_SFT_TENANT, "-t", "py-bob", *common])
    check(len(py["losses"]) == 40 and py["losses"] == cpp["losses"],
          "the Python tenant's 40 losses equal the C++ tenant's on the same seeds, bit for bit")
    check(py["last_loss"] < py["first_loss"], f"its loss falls: {py['first_loss']:.4f} -> {py['last_loss']:.4f}")
    check(abs(py["heldout_l1"] - cpp["heldout_l1"]) <= 1e-6 * max(1.0, cpp["heldout_l1"]),
          f"and its held-out error is the C++ one: {py['heldout_l1']:.6f} vs {cpp['heldout_l1']:.6f}")
    piped = run_json([sys.executable, PY_SFT_TENANT, "-t", "py-carol", *common, "--pipeline", "3"])
    check(piped["losses"] == cpp["losses"], "with 3 requests in flight, the same losses")


def demos_like_cpp(socket, workdir):
    demos = os.path.join(workdir, "reach.hdf5")
    subprocess.run([NEXUSCTL, "dataset", "record", "--task", "reach", "--episodes", "6", "--out", demos],
                   check=True, capture_output=True, timeout=300)
    common = ["-s", socket, "--dataset", demos, "--steps", "30", "--batch", "16", "--seed", "4", "--report-every", "0"]
    cpp = run_json([SFT_DEMOS_TENANT, "-t", "cpp-dora", *common])
    py = run_json([sys.executable, os.path.join(PY_EXAMPLES, "sft_demos_tenant.py"), "-t", "py-dora", *common])
    check(py["samples"] == cpp["samples"] > 0 and py["state_dim"] == cpp["state_dim"] and py["views"] == cpp["views"],
          f"the Python demos tenant loads the file as the C++ one: {py['samples']} samples, state_dim {py['state_dim']}")
    check(abs(py["first_loss"] - cpp["first_loss"]) < 1e-6 and abs(py["last_loss"] - cpp["last_loss"]) < 1e-6,
          f"and its losses are the C++ tenant's: {py['first_loss']:.6f} -> {py['last_loss']:.6f}")
    bad = os.path.join(workdir, "not-hdf5.hdf5")
    with open(bad, "wb") as f:
        f.write(b"\x89HDF\r\n\x1a\n" + os.urandom(4096))
    refused = run_json([sys.executable, os.path.join(PY_EXAMPLES, "sft_demos_tenant.py"), "-t", "py-dora",
                        "-s", socket, "--dataset", bad, "--steps", "1"])
    check(refused.get("error") == "BadDataset", f"a file that is not a demonstration file: {refused}")


error_classes()
with Daemon("--allow-device-regions") as d:
    c_socket = d.socket
    with nexus.Client.attach("py-alice", socket_path=d.socket) as c, \
            nexus.Client.attach("py-mallory", socket_path=d.socket) as other:
        zero_copy(c)
        features_mode(c)
        device_region(c)
        model_calls(c, other)
    check(c.closed, "the with block closed the client")
    raises(ValueError, lambda: c.publish(), "a call on a closed client")
    close_under_calls(d.socket)
    same_losses_as_cpp(d.socket)
    demos_like_cpp(d.socket, d.dir)
finish()
