#!/usr/bin/env python3
"""Summarises figures.jsonl (tests/support/figures.hpp) into each learning check's seed distribution.

For each figure: its values over the seed variants, min / median / max, the bound its test checks,
the worst seed's margin to the bound, and one run's standard error: the spread across seeds (sample
standard deviation) or, for a rate over n episodes, the binomial standard error at the worst seed,
whichever is larger. A bound is "clear" when the worst seed's margin exceeds that standard error.
Writes margins.md, margins.json and margins.png into OUT; exits 1 if a bound is not clear.
"""
import json
import math
import statistics
import sys
from collections import defaultdict


def summarise(rows):
    by_name = defaultdict(list)
    for r in rows:
        by_name[r["figure"]].append(r)
    out = []
    for name in sorted(by_name):
        rs = sorted(by_name[name], key=lambda r: r["seed"])
        values = [r["value"] for r in rs]
        op, bound, trials = rs[0]["op"], rs[0]["bound"], rs[0]["trials"]
        upper = op in ("<", "<=")  # the bound is a ceiling: the worst seed is the largest
        worst = max(values) if upper else min(values)
        margin = (bound - worst) if upper else (worst - bound)
        sd = statistics.stdev(values) if len(values) > 1 else float("nan")
        binom = math.sqrt(max(worst * (1 - worst), 0) / trials) if trials else 0.0
        se = max(sd if not math.isnan(sd) else 0.0, binom)
        out.append({
            "figure": name, "op": op, "bound": bound, "seeds": [r["seed"] for r in rs], "values": values,
            "min": min(values), "median": statistics.median(values), "max": max(values), "sd": sd,
            "trials": trials, "binomial_se_at_worst": binom, "one_run_se": se, "worst": worst,
            "margin": margin, "margin_in_se": margin / se if se > 0 else float("inf"),
            "clear": margin > se, "failed_seeds": sum(1 for v in values if not holds(v, op, bound)),
        })
    return out


def holds(v, op, bound):
    return {">=": v >= bound, ">": v > bound, "<=": v <= bound, "<": v < bound}[op]


def markdown(summary):
    lines = ["| figure | check | seeds | min | median | max | sd | one run's SE | worst's margin | margin / SE |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(
            f"| {s['figure']} | {s['op']} {s['bound']:g} | {len(s['values'])} | {s['min']:.3g} | {s['median']:.3g} | "
            f"{s['max']:.3g} | {s['sd']:.3g} | {s['one_run_se']:.3g}{' (binomial, n=%d)' % s['trials'] if s['trials'] and s['binomial_se_at_worst'] >= s['sd'] else ''} | "
            f"{s['margin']:.3g} | {s['margin_in_se']:.1f}{'' if s['clear'] else ' **not clear**'} |")
    return "\n".join(lines) + "\n"


def plot(summary, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(summary)
    cols = 4
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.6 * rows), squeeze=False)
    for ax, s in zip(axes.flat, summary):
        ax.scatter(s["values"], [0] * len(s["values"]), color="tab:blue", zorder=3, label="seeds")
        ax.axvline(s["bound"], color="tab:red", linestyle="--", label=f"CI bound ({s['op']} {s['bound']:g})")
        ax.set_title(s["figure"], fontsize=8)
        ax.set_yticks([])
        ax.legend(fontsize=6, loc="upper left")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(figures_path, out_dir):
    rows = [json.loads(line) for line in open(figures_path) if line.strip()]
    summary = summarise(rows)
    md = markdown(summary)
    open(f"{out_dir}/margins.md", "w").write(md)
    json.dump(summary, open(f"{out_dir}/margins.json", "w"), indent=1)
    try:
        plot(summary, f"{out_dir}/margins.png")
    except Exception as e:  # a missing matplotlib must not hide the table
        print(f"no plot: {e}", file=sys.stderr)
    sys.stdout.write(md)
    return 0 if all(s["clear"] for s in summary) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
