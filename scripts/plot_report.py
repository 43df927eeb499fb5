#!/usr/bin/env python3
"""Draws nexus-pretrain's report (JSON) as a PNG: training loss and held-out grounding error."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(report_path: str, png_path: str) -> None:
    r = json.load(open(report_path))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot([p["step"] for p in r["train_loss"]], [p["loss"] for p in r["train_loss"]])
    ax1.set(title=f"{r['backbone']} backbone: grounding loss (smoothed)", xlabel="step", ylabel="loss")
    steps = [p["step"] for p in r["heldout"]]
    ax2.plot(steps, [p["xy_l1"] for p in r["heldout"]], marker="o", label="named object position, L1")
    ax2.plot(steps, [p["baseline_xy_l1"] for p in r["heldout"]], linestyle="--", label="predict-the-mean baseline")
    ax2.plot(steps, [1 - p["color_accuracy"] for p in r["heldout"]], marker=".", label="colour error rate")
    ax2.plot(steps, [1 - p["shape_accuracy"] for p in r["heldout"]], marker=".", label="shape error rate")
    ax2.set(title="held-out grounding", xlabel="step", ylim=(0, None))
    ax2.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
