#!/usr/bin/env python3
"""Writes a demonstration file that is a decompression bomb: one demo whose camera images are
declared [T, 256, 256, 3] uint8 (T = 18000: 3.5 GB once inflated), stored gzip-compressed in
chunks of one frame, every frame zeros, so the file itself is a few megabytes. Every other key is
well formed (this project's layout), so only its inflated size can stop a reader: nexusd must
refuse it against the tenant's quota before it allocates or inflates anything.

The chunks are written already compressed (h5py's write_direct_chunk): 3.5 GB of zeros is never
made here either.

usage: make_bomb.py OUT.hdf5 [--steps T]
"""
import argparse
import json
import zlib

import h5py
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=18000)
args = parser.parse_args()
t, side = args.steps, 256
with h5py.File(args.out, "w") as f:
    data = f.create_group("data")
    data.attrs["total"] = t
    data.attrs["env_args"] = json.dumps({"task": "bomb", "views": ["agentview_image"], "state_keys": ["robot0_proprio"]})
    demo = data.create_group("demo_0")
    demo.attrs["num_samples"] = t
    demo.attrs["language_instruction"] = "inflate"
    obs = demo.create_group("obs")
    images = obs.create_dataset("agentview_image", shape=(t, side, side, 3), dtype=np.uint8,
                                chunks=(1, side, side, 3), compression="gzip", compression_opts=9)
    frame = zlib.compress(bytes(side * side * 3), 9)
    for i in range(t):
        images.id.write_direct_chunk((i, 0, 0, 0), frame)
    obs.create_dataset("robot0_proprio", data=np.zeros((t, 4), np.float32))
    demo.create_dataset("actions", data=np.zeros((t, 2), np.float32))
