#!/usr/bin/env python3
"""Plots nexus-bench group's CSV: grouped-over-serial speedup per tenant count, daemon vs in-process."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(csv_path: str, png_path: str) -> None:
    rows = list(csv.DictReader(open(csv_path)))
    batches = sorted({int(r["batch"]) for r in rows})
    fig, axes = plt.subplots(1, len(batches), figsize=(3.2 * len(batches), 3.4), sharey=True)
    if len(batches) == 1:
        axes = [axes]
    for ax, b in zip(axes, batches):
        sel = [r for r in rows if int(r["batch"]) == b]
        t = [int(r["tenants"]) for r in sel]
        ax.plot(t, [float(r["speedup_inprocess"]) for r in sel], marker="o", label="in-process (ceiling)")
        ax.plot(t, [float(r["speedup_daemon"]) for r in sel], marker="s", label="through nexusd")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
        ax.set(title=f"local batch {b}", xlabel="tenants", xticks=t, xticklabels=[str(x) for x in t])
    axes[0].set_ylabel("grouped / serial throughput")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
