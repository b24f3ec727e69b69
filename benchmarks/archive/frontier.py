"""Tracking against accuracy: every law measured with ``tracking.py --final_eval`` on the same seeds, one row each.

    python -m benchmarks.archive.frontier [--results benchmarks/results/tracking_smollm2.jsonl.gz] [--seeds 0,1,2]
                                  [--png docs/img/frontier_smollm2.png [--goal hold=10 wsd=15]]

Reads the cache only; trains nothing. A label (target/method and its variant suffix, see docs/benchmarks.md) is a
row when every asked seed has a run with a final evaluation. Columns: the tracking error (the tracking table's
metric, ``tracking.smoothed_error``), the trained policy's accuracy on the train problems (16 samples per problem,
and greedy), the final reward as the tracking table reports it, and the paired difference in sampled accuracy
against TRL's rule on the same target (mean ± standard error over the seeds). Each run is scored as cached: a
label whose law is no longer the package's default is still a row (it is a measurement of that law), so the
table mixes dates; docs/benchmarks.md says which law each label ran.

With ``--png``, the same rows as a scatter (error against sampled accuracy, one panel per target), TRL's rule and
today's defaults (cached as ``" YLI"``) marked, the bare label as the law before: where people would rather look
than read.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict

from benchmarks._cache import read_rows
from benchmarks.tracking import smoothed_error

TRL = "trl_adaptive_entropy"
# the label under which today's defaults of the bonus are cached (they were measured as " YLI" before becoming the
# defaults on 2026-11-27); the bare label ran the law before
DEFAULTS = "entropy_bonus YLI"
BEFORE = "entropy_bonus"


def rows_by_label(path: str, seeds: list[int]) -> dict[str, dict[int, dict]]:
    """``{label: {seed: run}}`` for the runs with a final evaluation and a logged curve on ``seeds`` (the last
    cached run of a label and seed wins, as the cache serves it)."""
    out: dict[str, dict[int, dict]] = defaultdict(dict)
    for run in read_rows(path):
        if run.get("final_eval") and run.get("seed") in seeds and run.get("measured"):
            out[run["label"]][run["seed"]] = run
    return {label: runs for label, runs in out.items() if all(s in runs for s in seeds)}


def score(run: dict) -> dict[str, float]:
    ev = run["final_eval"]
    return {"err": smoothed_error(run["measured"], run["target"]), "sampled": ev["train_sampled"],
            "greedy": ev["train_greedy"], "reward": run.get("final_reward", math.nan)}


def table(path: str, seeds: list[int]) -> list[dict]:
    """One dict per label: target, label, the mean of each score over ``seeds``, and ``vs_trl`` (mean, standard
    error) of the paired sampled-accuracy difference against TRL's rule on the same target (``None`` without it)."""
    labels = rows_by_label(path, seeds)
    scores = {label: {s: score(run) for s, run in runs.items()} for label, runs in labels.items()}
    out = []
    for label in scores:
        target = label.split("/")[0]
        row = {"target": target, "label": label, "seeds": seeds}
        for key in ("err", "sampled", "greedy", "reward"):
            row[key] = statistics.mean(scores[label][s][key] for s in seeds)
        trl = scores.get(f"{target}/{TRL}")
        row["vs_trl"] = None
        if trl is not None and not label.endswith(f"/{TRL}"):
            diffs = [scores[label][s]["sampled"] - trl[s]["sampled"] for s in seeds]
            se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan
            row["vs_trl"] = (statistics.mean(diffs), se)
        out.append(row)
    return sorted(out, key=lambda r: (r["target"], r["err"]))


def markdown(rows: list[dict]) -> str:
    lines = ["| target | label | err | train sampled | − TRL's rule, paired | train greedy | final reward |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        vs = "–" if r["vs_trl"] is None else f"{r['vs_trl'][0]:+.3f} ± {r['vs_trl'][1]:.3f}"
        lines.append(f"| {r['target']} | `{r['label'].split('/', 1)[1]}` | {100 * r['err']:.1f}% | "
                     f"{r['sampled']:.3f} | {vs} | {r['greedy']:.3f} | {r['reward']:.3f} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: str, goals: dict[str, float] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = sorted({r["target"] for r in rows})
    fig, axes = plt.subplots(1, len(targets), figsize=(5.5 * len(targets), 4.5), squeeze=False)
    for ax, target in zip(axes[0], targets):
        for r in (r for r in rows if r["target"] == target):
            name = r["label"].split("/", 1)[1]
            trl, default = name == TRL, name == DEFAULTS
            ax.scatter(100 * r["err"], r["sampled"], s=60 if trl or default else 25,
                       color="tab:blue" if trl else "tab:orange" if default else "tab:gray", zorder=3)
            text = ("TRL's rule" if trl else "defaults (YLI)" if default else "law before" if name == BEFORE
                    else name.replace("entropy_bonus", "").strip() or name)
            ax.annotate(text, (100 * r["err"], r["sampled"]), fontsize=8, xytext=(4, 3), textcoords="offset points")
        if goals and target in goals:
            ax.axvline(goals[target], color="black", linestyle="--", linewidth=1)
            ax.annotate(f"goal {goals[target]:g}%", (goals[target], 0.02), xycoords=("data", "axes fraction"),
                        fontsize=8, xytext=(3, 0), textcoords="offset points")
        ax.set_title(f"{target}, seeds {','.join(map(str, rows[0]['seeds']))}")
        ax.set_xlabel("tracking error (%, MA10 after the first 20% of steps)")
        ax.set_ylabel("train accuracy, 16 samples per problem")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default="benchmarks/results/tracking_smollm2.jsonl.gz")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--png", default=None, help="also draw the rows as a scatter into this PNG")
    p.add_argument("--goal", nargs="*", default=[], metavar="TARGET=PERCENT",
                   help="a tracking goal to mark in the picture, e.g. hold=10 wsd=15")
    a = p.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    rows = table(a.results, seeds)
    if not rows:
        print(f"no label has a run with a final evaluation on every seed of {seeds} in {a.results}")
        return
    print(markdown(rows))
    if a.png:
        plot(rows, a.png, {k: float(v) for k, v in (g.split("=", 1) for g in a.goal)})
        print(f"\nwrote {a.png}")


if __name__ == "__main__":
    main()
