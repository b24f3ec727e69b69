"""Pictures of cached tracking runs: measured entropy (10-step moving average) against the target, and the knob.

    python benchmarks/plot_tracking.py --results benchmarks/results/tracking_smollm2.jsonl --testbed smollm2 \
        --seed 0 --methods grpo trl_adaptive_entropy entropy_bonus --out docs/img/tracking_smollm2_seed0.png

One column per target (hold, wsd), three rows: entropy, knob and reward (10-step moving average of the logged
rewards; TRL logs one per generation batch, so each point averages the two or three batches of those 10 steps). Reads the cache only; trains nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _runs import moving_average  # noqa: E402

LABELS = {"grpo": "plain GRPO", "trl_adaptive_entropy": "TRL's rule (trl_adaptive)",
          "entropy_bonus": "feedback bonus (entropy_bonus)"}


def label(method: str) -> str:
    base, _, variant = method.partition(" ")
    return LABELS.get(base, base) + (f" {variant}" if variant else "")


def load(path: str, testbed: str, seed: int, label_suffix: str = "") -> dict:
    runs = {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            key = json.loads(row["key"])
            if key[0] == testbed and key[2] == seed:
                runs[key[1]] = row
    return runs


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", required=True)
    p.add_argument("--testbed", default="smollm2")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--targets", nargs="+", default=["hold", "wsd"])
    p.add_argument("--methods", nargs="+", default=["grpo", "trl_adaptive_entropy", "entropy_bonus"])
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from trl_entropy._plotting import new_figure
    from tracking import TARGETS, target_curve

    runs = load(a.results, a.testbed, a.seed)
    fig, axes = new_figure(3, len(a.targets), figsize=(5.2 * len(a.targets), 8.6))
    for col, target_name in enumerate(a.targets):
        schedule, start_frac, end_ratio = TARGETS[a.testbed][target_name]
        ax_h, ax_k, ax_r = axes[0, col], axes[1, col], axes[2, col]
        drawn_target = False
        for index, method in enumerate(a.methods):
            color = f"C{index}"
            row = runs.get(f"{target_name}/{method}") or (runs.get(f"any/{method}") if method == "grpo" else None)
            if row is None:
                continue
            steps = row["step"]
            ax_h.plot(steps, moving_average(row["measured"]), label=label(method), linewidth=1.4,
                      color=color)
            if not drawn_target:
                start = json.loads(row["key"])[4][2]
                target = target_curve(schedule, start * start_frac if method == "grpo" else start, end_ratio, steps,
                                      len(steps))
                ax_h.plot(steps, target, "k--", linewidth=1.0, label="target")
                drawn_target = True
            knob = row.get("knob") or []
            if any(k is not None for k in knob):
                ax_k.plot(steps, knob, label=label(method), linewidth=1.0, color=color)
            ax_r.plot(steps, moving_average(row["reward"]),
                      label=label(method), linewidth=1.2, color=color)
        ax_h.set_title(f"{target_name}, seed {a.seed}", fontsize=10)
        ax_h.set_ylabel("entropy (nats, MA10)")
        ax_k.set_ylabel("entropy_coef")
        ax_r.set_ylabel("reward (MA10)")
        ax_r.set_xlabel("optimizer step")
        ax_k.axhline(0.0, color="grey", linewidth=0.6)
    handles, labels = axes[0, 0].get_legend_handles_labels()  # one legend above the panels, over no data
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    fig.savefig(a.out, dpi=110)  # not save_figure: its tight_layout would undo the room left for the legend
    print(a.out)


if __name__ == "__main__":
    main()
