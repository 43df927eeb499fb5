#!/usr/bin/env python3
"""sft_demos_tenant.py: examples/sft_demos_tenant in Python. Hands a demonstration file
(robomimic/LIBERO HDF5, e.g. from `nexusctl dataset record`) to nexusd, opened here with this
user's permissions; nexusd samples batches from its training demos for each step on the resident
backbone. Publishes a version and prints one JSON line.

    python examples/python/sft_demos_tenant.py -s /tmp/nexus.sock -t fred --dataset reach.hdf5 --steps 500
"""
import argparse
import json
import sys
import time

import nexus


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-s", "--socket", default="/run/nexus/nexusd.sock")
    p.add_argument("-t", "--tenant", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--head", default="mlp_chunk", choices=["mlp_chunk", "flow", "gaussian"])
    p.add_argument("--chunk", type=int, default=4)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--views", default="", help="camera keys under obs/, comma-separated (default: the layout's)")
    p.add_argument("--state-keys", default="", help="proprio keys under obs/ (default: the layout's)")
    p.add_argument("--normalize", action="store_true", help="train on the file's normalised actions and state")
    p.add_argument("--instruction", default="", help="for files whose demos name none")
    p.add_argument("--report-every", type=int, default=500)
    a = p.parse_args()
    split = lambda s: [k for k in s.split(",") if k]  # noqa: E731
    try:
        with nexus.Client.attach(a.tenant, socket_path=a.socket, timeout=60.0) as c:
            data = c.dataset_load("demos", a.dataset, seed=a.seed, views=split(a.views),
                                  state_keys=split(a.state_keys), normalize=a.normalize, instruction=a.instruction)
            head = nexus.HeadSpec(kind=a.head, chunk=a.chunk, state_dim=data.state_dim, action_dim=data.action_dim,
                                  flow_noise=0.3)  # recorded (or normalised) actions span about [-1, 1]
            c.register(nexus.TenantSpec(views=len(data.views), head=head, seed=a.seed,
                                        optimizer=nexus.OptimizerSpec(lr=a.lr)))
            started, first, last = time.monotonic(), None, None
            pending = c.dataset_sft_step_async("demos", a.batch, a.chunk)
            for step in range(1, a.steps + 1):
                r = pending.result()
                if step < a.steps:  # the next step is queued while this one's reply is read
                    pending = c.dataset_sft_step_async("demos", a.batch, a.chunk)
                first = r.loss if first is None else first
                last = r.loss
                if a.report_every and (step % a.report_every == 0 or step == a.steps):
                    rate = step / (time.monotonic() - started)
                    print(f"[{a.tenant}] sft {a.head} step {step}/{a.steps}  {rate:.1f} steps/s  loss {r.loss:.4f}",
                          file=sys.stderr)
            version = c.publish()
            print(json.dumps({"tenant": a.tenant, "head": a.head, "dataset": a.dataset, "layout": data.layout,
                              "views": len(data.views), "state_dim": data.state_dim, "demos": data.episodes,
                              "valid_demos": data.valid_episodes, "samples": data.samples, "steps": a.steps,
                              "first_loss": first, "last_loss": last, "version": version}))
    except (nexus.BadDataset, nexus.PermissionDenied) as e:
        print(f"sft_demos_tenant.py {a.tenant}: {e}", file=sys.stderr)
        print(json.dumps({"tenant": a.tenant, "error": e.code}))
        return 2
    except nexus.Error as e:
        print(f"sft_demos_tenant.py {a.tenant}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
