#!/usr/bin/env python3
"""sft_tenant.py: the C++ examples/sft_tenant in Python. Registers a head on nexusd's resident
backbone, trains it on demonstrations of the synthetic reach task (move toward the object the
instruction names), evaluates on held-out scenes with a published version, and prints one JSON
line. Scenes are rendered straight into the shared arena through numpy views: the daemon reads
those bytes in place. Same seeds, same losses as the C++ tenant (tests/python/client_test.py).

    build/release/daemon/nexusd --socket /tmp/nexus.sock &
    python examples/python/sft_tenant.py -s /tmp/nexus.sock -t alice --steps 300
"""
import argparse
import json
import sys

import numpy as np

import nexus


def fill(scenes, images, tokens, mask, actions, chunk):
    """Renders len(images) scenes into the arena tensors: the only copy the inputs make."""
    img, act = images.numpy(), actions.numpy()
    for i in range(len(images)):
        s = scenes.next()
        img[i, 0] = s.image
        nexus.tokenize(s.instruction, tokens, mask, i)
        act[i] = nexus.synth.reach_actions(s, chunk)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-s", "--socket", default="/run/nexus/nexusd.sock")
    p.add_argument("-t", "--tenant", required=True)
    p.add_argument("--head", default="mlp_chunk", choices=["mlp_chunk", "flow", "gaussian"])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk", type=int, default=4)
    p.add_argument("--heldout", type=int, default=128)
    p.add_argument("--pipeline", type=int, default=1, help="SFT requests kept in flight")
    p.add_argument("--report-every", type=int, default=50)
    p.add_argument("--trajectory", action="store_true", help="include every step's loss in the JSON line")
    a = p.parse_args()

    spec = nexus.TenantSpec(seed=a.seed, head=nexus.HeadSpec(kind=a.head, chunk=a.chunk, action_dim=2, flow_noise=0.1),
                            optimizer=nexus.OptimizerSpec(lr=a.lr))
    try:
        with nexus.Client.attach(a.tenant, socket_path=a.socket, client_arena_bytes=16 << 20, timeout=60.0) as c:
            bb = c.register(spec)

            def batch_of(n):
                return (c.alloc("uint8", [n, 1, bb.image_size, bb.image_size, 3]), c.alloc("int32", [n, bb.max_tokens]),
                        c.alloc("uint8", [n, bb.max_tokens]), c.alloc("float32", [n, a.chunk, 2]))

            train = nexus.synth.SceneGenerator(a.seed, image_size=bb.image_size)
            buffers = [batch_of(a.batch) for _ in range(a.pipeline)]
            in_flight, losses = [], []
            action_sum, samples = np.zeros((a.chunk, 2)), 0
            for step in range(1, a.steps + 1):
                images, tokens, mask, actions = buffers[step % a.pipeline]
                if len(in_flight) >= a.pipeline:  # this buffer's last request must be answered first
                    losses.append(in_flight.pop(0).result().loss)
                fill(train, images, tokens, mask, actions, a.chunk)
                action_sum += actions.numpy().sum(axis=0, dtype=np.float64)
                samples += a.batch
                in_flight.append(c.sft_step_async(images, tokens, mask, actions))
                if a.report_every and step % a.report_every == 0:
                    print(f"[{a.tenant} {a.head}] step {step}", file=sys.stderr)
            losses += [f.result().loss for f in in_flight]
            mean_action = action_sum / samples

            held = nexus.synth.SceneGenerator(a.seed + 1_000_003, image_size=bb.image_size)
            images, tokens, mask, actions = batch_of(a.heldout)
            fill(held, images, tokens, mask, actions, a.chunk)
            version = c.publish()
            predicted = c.predict(images, tokens, mask, version=version)
            target = actions.numpy()
            err = float(np.abs(predicted - target).mean(dtype=np.float64))
            base = float(np.abs(mean_action - target).mean(dtype=np.float64))
            out = {"tenant": a.tenant, "head": a.head, "steps": a.steps, "first_loss": losses[0],
                   "last_loss": losses[-1], "heldout_l1": err, "baseline_l1": base, "improvement": base / err,
                   "version": version}
            if a.trajectory:
                out["losses"] = losses
            print(json.dumps(out))
    except nexus.Error as e:
        print(f"sft_tenant.py {a.tenant}: {e}", file=sys.stderr)
        print(json.dumps({"tenant": a.tenant, "error": e.code}))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
