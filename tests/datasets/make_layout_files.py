#!/usr/bin/env python3
"""Rewrites demonstrations recorded by `nexusctl dataset record` into the HDF5 layouts of
robomimic and LIBERO, written with h5py under those projects' own key names, so that the tests
load files as a user of either would bring them.

robomimic (robomimic.readthedocs.io, "Datasets"): /data attrs total and env_args (JSON with
env_name, type, env_kwargs); per demo num_samples and ep_meta (JSON; "lang" is the instruction, as
robomimic's language-conditioned datasets store it); obs/agentview_image and
obs/robot0_eye_in_hand_image (84 px), obs/robot0_eef_pos (3), obs/robot0_eef_quat (4),
obs/robot0_gripper_qpos (2), obs/object; actions (7: delta pose and gripper); states, rewards,
dones; /mask/train and /mask/valid as numpy byte strings of demo names.

LIBERO (its released *_demo.hdf5 files): one task per file, so its instruction lives once in
/data's problem_info JSON ("language_instruction"), and only the demos of the most common
instruction are kept; obs/agentview_rgb and obs/eye_in_hand_rgb (128 px), obs/ee_states (6),
obs/gripper_states (2), obs/joint_states (7); actions (7), states, robot_states, rewards, dones;
no masks.

The reach arm's four proprio numbers are spread over each layout's state keys, the rest of
which are constant (as a gripper that never moves is); its two actions are the first two of
seven, the rest constant (a closed gripper is -1). Frames are enlarged from the recording's 64
pixels by nearest neighbour; the second camera is the first mirrored left-right.

usage: make_layout_files.py --source REACH.hdf5 --heldout REACH2.hdf5 --out DIR
"""
import argparse
import collections
import json
import os

import h5py
import numpy as np


def read_nexus(path):
    demos = []
    with h5py.File(path, "r") as f:
        names = sorted((k for k in f["data"] if k.startswith("demo_")), key=lambda k: int(k[5:]))
        for name in names:
            g = f["data"][name]
            demos.append(dict(
                instruction=g.attrs["language_instruction"],
                success=int(g.attrs["success"]),
                images=g["obs/agentview_image"][()],
                proprio=g["obs/robot0_proprio"][()],
                actions=g["actions"][()],
                states=g["states"][()],
                rewards=g["rewards"][()],
                dones=g["dones"][()],
            ))
    return demos


def enlarge(images, side):
    index = (np.arange(side) * images.shape[1]) // side
    return np.ascontiguousarray(images[:, index][:, :, index])


def actions7(a):
    out = np.zeros((a.shape[0], 7), dtype=np.float32)
    out[:, :2] = a
    out[:, 6] = -1.0
    return out


def write_robomimic(path, demos, valid_fraction=0.2):
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["total"] = int(sum(len(d["actions"]) for d in demos))
        data.attrs["env_args"] = json.dumps({"env_name": "NexusReach", "type": 1,
                                             "env_kwargs": {"camera_heights": 84, "camera_widths": 84}})
        for i, d in enumerate(demos):
            g = data.create_group(f"demo_{i}")
            t = len(d["actions"])
            g.attrs["num_samples"] = t
            g.attrs["ep_meta"] = json.dumps({"lang": d["instruction"]})
            p = d["proprio"].astype(np.float64)
            image = enlarge(d["images"], 84)
            g["obs/agentview_image"] = image
            g["obs/robot0_eye_in_hand_image"] = np.ascontiguousarray(image[:, :, ::-1])
            g["obs/robot0_eef_pos"] = p[:, :3]
            g["obs/robot0_eef_quat"] = np.column_stack([p[:, 3], np.zeros(t), np.zeros(t), np.ones(t)])
            g["obs/robot0_gripper_qpos"] = np.tile([0.04, -0.04], (t, 1))
            g["obs/object"] = np.zeros((t, 10))
            g["actions"] = actions7(d["actions"]).astype(np.float64)
            g["states"] = d["states"].astype(np.float64)
            g["rewards"] = d["rewards"].astype(np.float64)
            g["dones"] = d["dones"].astype(np.int64)
        names = [f"demo_{i}" for i in range(len(demos))]
        n_valid = max(1, int(round(valid_fraction * len(names))))
        f["mask/train"] = np.array(names[:-n_valid], dtype="S")
        f["mask/valid"] = np.array(names[-n_valid:], dtype="S")


def write_libero(path, demos, instruction):
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["problem_info"] = json.dumps({"problem_name": "nexus_reach", "domain_name": "nexus",
                                                 "language_instruction": instruction})
        data.attrs["env_args"] = json.dumps({"type": 1, "env_name": "Libero_Nexus_Reach", "env_kwargs": {}})
        data.attrs["bddl_file_name"] = "nexus_reach.bddl"
        data.attrs["num_demos"] = len(demos)
        data.attrs["total"] = int(sum(len(d["actions"]) for d in demos))
        for i, d in enumerate(demos):
            g = data.create_group(f"demo_{i}")
            t = len(d["actions"])
            g.attrs["num_samples"] = t
            p = d["proprio"]
            image = enlarge(d["images"], 128)
            g["obs/agentview_rgb"] = image
            g["obs/eye_in_hand_rgb"] = np.ascontiguousarray(image[:, :, ::-1])
            g["obs/ee_states"] = np.column_stack([p, np.zeros((t, 2), dtype=np.float32)])
            g["obs/gripper_states"] = np.tile(np.float32([0.04, -0.04]), (t, 1))
            g["obs/joint_states"] = np.zeros((t, 7), dtype=np.float32)
            g["actions"] = actions7(d["actions"])
            g["states"] = d["states"]
            g["robot_states"] = np.column_stack([np.tile(np.float32([0.04, -0.04]), (t, 1)), p])
            g["rewards"] = d["rewards"].astype(np.uint8)
            g["dones"] = d["dones"].astype(np.uint8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, help="a reach recording: the training demos")
    ap.add_argument("--heldout", required=True, help="another recording: LIBERO's held-out file")
    ap.add_argument("--out", required=True, help="directory for robomimic.hdf5, libero.hdf5, libero-heldout.hdf5")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    train, heldout = read_nexus(args.source), read_nexus(args.heldout)
    write_robomimic(os.path.join(args.out, "robomimic.hdf5"), train)
    instruction = collections.Counter(d["instruction"] for d in train).most_common(1)[0][0]
    one_task = [d for d in train if d["instruction"] == instruction]
    write_libero(os.path.join(args.out, "libero.hdf5"), one_task, instruction)
    write_libero(os.path.join(args.out, "libero-heldout.hdf5"),
                 [d for d in heldout if d["instruction"] == instruction], instruction)
    print(json.dumps({"robomimic_demos": len(train), "libero_demos": len(one_task), "instruction": instruction}))


if __name__ == "__main__":
    main()
