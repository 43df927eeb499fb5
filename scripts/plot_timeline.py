#!/usr/bin/env python3
"""Draws nexus-bench workload's timeline.csv: busy intervals per service, coloured by tenant,
the shared run above and the isolated runs (one after another) below, on one time axis."""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SERVICES = ["training", "inference", "environment"]


def main(csv_path: str, png_path: str) -> None:
    rows = list(csv.DictReader(open(csv_path)))
    tenants = sorted({r["tenant"] for r in rows})
    colour = {t: plt.cm.tab10(i % 10) for i, t in enumerate(tenants)}
    modes = ["shared", "isolated"]
    fig, axes = plt.subplots(len(modes), 1, figsize=(12, 5), sharex=True)
    end = max((float(r["end_s"]) for r in rows), default=1.0)
    for ax, mode in zip(axes, modes):
        bars = defaultdict(lambda: defaultdict(list))
        for r in rows:
            if r["mode"] == mode:
                start, stop = float(r["start_s"]), float(r["end_s"])
                bars[r["service"]][r["tenant"]].append((start, max(stop - start, 1e-4)))
        for y, service in enumerate(SERVICES):
            for tenant, spans in bars[service].items():
                ax.broken_barh(spans, (y - 0.4, 0.8), color=colour[tenant])
        ax.set_yticks(range(len(SERVICES)), SERVICES)
        ax.set_title(f"{mode}: busy intervals per service, by tenant")
        ax.set_xlim(0, end)
    axes[-1].set_xlabel("seconds")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[t]) for t in tenants]
    fig.legend(handles, tenants, loc="upper right", ncol=len(tenants))
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
