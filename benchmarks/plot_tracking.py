"""Pictures of cached tracking runs: measured entropy (10-step moving average) against the target, and the knob.

    python -m benchmarks.plot_tracking --results benchmarks/results/tracking_smollm2.jsonl.gz --testbed smollm2 \
        --seed 0 --methods grpo trl_adaptive_entropy entropy_bonus --out docs/img/tracking_smollm2_seed0.png

One column per target (hold, wsd), three rows: entropy, knob and reward (10-step moving average of the logged
rewards; TRL logs one per generation batch, so each point averages the two or three batches of those 10 steps). Reads the cache only; trains nothing.

With ``--seeds 0,1,...`` each curve is the mean over those seeds, with a band of ± one standard deviation (entropy
and reward) around it: how a method tracks in general rather than on one draw, e.g.::

    python -m benchmarks.plot_tracking --results benchmarks/results/tracking_smollm2_gpu.jsonl.gz \
        --seeds 0,1,2,3,4,5,6,7,8,9 --methods trl_adaptive_entropy entropy_bonus \
        --out docs/img/tracking_smollm2_gpu_10seeds.png
"""

from __future__ import annotations

import argparse
import json
import os

from benchmarks._cache import read_rows
from benchmarks._runs import moving_average

LABELS = {"grpo": "plain GRPO", "trl_adaptive_entropy": "TRL's rule (trl_adaptive)",
          "entropy_bonus": "feedback bonus (entropy_bonus)"}


def label(method: str) -> str:
    base, _, variant = method.partition(" ")
    return LABELS.get(base, base) + (f" {variant}" if variant else "")


def load(path: str, testbed: str, seed: int, label_suffix: str = "") -> dict:
    runs = {}
    for row in read_rows(path):
        key = json.loads(row["key"])
        if key[0] == testbed and key[2] == seed:
            runs[key[1]] = row
    return runs


def _curve(ax, steps, series, name, color, width, band=True):
    """One line: the series itself, or with several the mean over them and (``band``) a ± sd band."""
    import numpy as np

    values = np.array([[np.nan if v is None else v for v in s] for s in series], dtype=float)
    mean = np.nanmean(values, axis=0)
    ax.plot(steps, mean, label=name, linewidth=width, color=color)
    if band and len(series) > 1:
        sd = np.nanstd(values, axis=0, ddof=1)
        ax.fill_between(steps, mean - sd, mean + sd, color=color, alpha=0.15, linewidth=0)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", required=True)
    p.add_argument("--testbed", default="smollm2")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", default=None, help="comma-separated seeds: mean and ± sd band over them")
    p.add_argument("--targets", nargs="+", default=["hold", "wsd"])
    p.add_argument("--methods", nargs="+", default=["grpo", "trl_adaptive_entropy", "entropy_bonus"])
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)

    from benchmarks.tracking import TARGETS, target_curve
    from trl_entropy._plotting import new_figure

    seeds = [int(s) for s in a.seeds.split(",")] if a.seeds else [a.seed]
    per_seed = [load(a.results, a.testbed, s) for s in seeds]
    fig, axes = new_figure(3, len(a.targets), figsize=(5.2 * len(a.targets), 8.6))
    for col, target_name in enumerate(a.targets):
        schedule, start_frac, end_ratio = TARGETS[a.testbed][target_name]
        ax_h, ax_k, ax_r = axes[0, col], axes[1, col], axes[2, col]
        drawn_target = False
        for index, method in enumerate(a.methods):
            color = f"C{index}"
            rows = [runs.get(f"{target_name}/{method}") or (runs.get(f"any/{method}") if method == "grpo" else None)
                    for runs in per_seed]
            rows = [r for r in rows if r is not None]
            if not rows:
                continue
            row, steps = rows[0], rows[0]["step"]
            n = f" ({len(rows)} seeds)" if len(seeds) > 1 else ""
            _curve(ax_h, steps, [moving_average(r["measured"]) for r in rows], label(method) + n, color, 1.4)
            if not drawn_target:
                start = json.loads(row["key"])[4][2]
                target = target_curve(schedule, start * start_frac if method == "grpo" else start, end_ratio, steps,
                                      len(steps))
                ax_h.plot(steps, target, "k--", linewidth=1.0, label="target")
                drawn_target = True
            knobs = [r.get("knob") or [] for r in rows]
            if all(k and all(v is not None for v in k) for k in knobs):
                _curve(ax_k, steps, knobs, label(method), color, 1.0, band=False)
            _curve(ax_r, steps, [moving_average(r["reward"]) for r in rows], label(method), color, 1.2)
        contiguous = seeds == list(range(seeds[0], seeds[0] + len(seeds)))
        shown = f"{seeds[0]}–{seeds[-1]}" if contiguous and len(seeds) > 2 else a.seeds
        where = f"mean ± sd over seeds {shown}" if len(seeds) > 1 else f"seed {a.seed}"
        ax_h.set_title(f"{target_name}, {where}", fontsize=10)
        ax_h.set_ylabel("entropy (nats, MA10)")
        ax_k.set_ylabel("entropy_coef")
        ax_r.set_ylabel("reward (MA10)")
        ax_r.set_xlabel("optimizer step")
        ax_k.axhline(0.0, color="grey", linewidth=0.6)
    handles, labels = axes[0, 0].get_legend_handles_labels()  # one legend above the panels, over no data
    narrow = len(a.targets) == 1  # one column: one legend entry a line
    fig.legend(handles, labels, loc="upper center", ncol=1 if narrow else len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.92 if narrow else 0.95))
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    fig.savefig(a.out, dpi=110)  # not save_figure: its tight_layout would undo the room left for the legend
    print(a.out)


if __name__ == "__main__":
    main()
