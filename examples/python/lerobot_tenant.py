#!/usr/bin/env python3
"""lerobot_tenant.py: SFT on a LeRobot dataset (Parquet plus MP4) through nexusd. The dataset is
read here with lerobot's own reader and fed batch by batch (nexus.lerobot); nexusd runs each
step on its resident backbone. Publishes a version, measures held-out action error against the
mean action, and prints one JSON line.

Needs `lerobot` beside `nexus` (scripts/lerobot-venv.sh makes such a venv):

    python examples/python/lerobot_tenant.py -s /tmp/nexus.sock -t fred \\
        --repo-id me/pusht --root ~/datasets/pusht --chunk 4 --steps 2000
"""
import argparse
import json
import sys

import nexus


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-s", "--socket", default="/run/nexus/nexusd.sock")
    p.add_argument("-t", "--tenant", required=True)
    p.add_argument("--repo-id", required=True, help="the dataset's repo id (as lerobot names it)")
    p.add_argument("--root", required=True,
                   help="the dataset's local folder (lerobot fetches from the Hub what is missing there)")
    p.add_argument("--head", default="mlp_chunk", choices=["mlp_chunk", "flow", "gaussian"])
    p.add_argument("--chunk", type=int, default=1, help="actions per prediction (lerobot's delta_timestamps)")
    p.add_argument("--cameras", default="", help="camera keys, comma-separated (default: all, in meta order)")
    p.add_argument("--state-key", default="observation.state", help="proprio feature ('' for none)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--valid-fraction", type=float, default=0.1, help="episodes held out for the error")
    p.add_argument("--cache", action="store_true", help="keep every decoded sample in memory (small datasets)")
    p.add_argument("--report-every", type=int, default=500)
    a = p.parse_args()
    if a.steps < 1 or a.batch < 1 or a.chunk < 1:
        p.error("--steps, --batch and --chunk must be at least 1")
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
        import nexus.lerobot as nl
    except ImportError as e:
        print(f"lerobot_tenant.py: {e} (scripts/lerobot-venv.sh makes a venv with lerobot)", file=sys.stderr)
        return 2
    try:
        probe = LeRobotDataset(a.repo_id, root=a.root, video_backend="pyav")
        delta = nl.chunk_timestamps(probe.fps, a.chunk) if a.chunk > 1 else None
        ds = LeRobotDataset(a.repo_id, root=a.root, delta_timestamps=delta, video_backend="pyav") if delta else probe
        cameras = [k for k in a.cameras.split(",") if k] or None
        with nexus.Client.attach(a.tenant, socket_path=a.socket, timeout=60.0) as c:
            feeder = nl.LeRobotFeeder(c, ds, cameras=cameras, state_key=a.state_key or None,
                                      valid_fraction=a.valid_fraction,
                                      split_seed=a.seed, cache=a.cache)
            extra = {"flow_noise": 0.3} if a.head == "flow" else {}  # actions are normalised: about unit scale
            feeder.register(kind=a.head, seed=a.seed, lr=a.lr, **extra)
            losses = feeder.train(a.steps, batch_size=a.batch, seed=a.seed, report_every=a.report_every)
            version = c.publish()
            held = feeder.action_error(feeder.valid_indices, version=version) if len(feeder.valid_indices) else None
            print(json.dumps({"tenant": a.tenant, "head": a.head, "dataset": a.repo_id, "views": len(feeder.cameras),
                              "state_dim": feeder.state_dim, "action_dim": feeder.action_dim, "chunk": feeder.chunk,
                              "episodes": ds.num_episodes, "samples": len(ds), "steps": a.steps,
                              "first_loss": losses[0], "last_loss": losses[-1], "version": version,
                              "heldout": held}))
    except nexus.BadDataset as e:
        print(f"lerobot_tenant.py {a.tenant}: {e}", file=sys.stderr)
        print(json.dumps({"tenant": a.tenant, "error": e.code}))
        return 2
    except nexus.Error as e:
        print(f"lerobot_tenant.py {a.tenant}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
