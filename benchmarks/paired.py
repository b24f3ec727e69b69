"""Paired differences between two laws on the same seeds, per group of cached runs and pooled over the groups.

    python -m benchmarks.paired --a "hold/entropy_bonus YLI" --b "hold/entropy_bonus" "hold/entropy_bonus OLD" \\
        --group "CPU" benchmarks/results/tracking_smollm2.jsonl.gz 0-17 \\
        --group "GPU" benchmarks/results/tracking_smollm2_gpu.jsonl.gz 0-14

Reads the caches of ``tracking.py --final_eval`` only (with ``--without_eval``, runs cached without it too: their
tracking and reward are paired, their accuracy left empty); trains nothing. Each group is a cache and its seeds; a seed
counts where both laws have a run with a final evaluation on it (the last such run of a label and seed, as the
cache keeps it). ``--b`` (and ``--a``) may name several labels: per seed the first one that has a run is used,
so a law cached under a new label for new seeds (its values set explicitly, after the package's defaults moved
on) pairs with its older rows under the bare label (name the older label first to keep the recorded runs).
A label may end in ``@SEEDS`` (``"hold/entropy_bonus YKS@1,7"``) to be used on those seeds only: for a law whose
run on a seed is, step for step, a cached run of another law (shown so in the docs, not assumed here).

Printed per group and pooled over the groups (markdown): the mean ± standard error over seeds of ``a - b`` for the
tracking error (points of the tracking table's metric), the accuracy of the trained policies (train and test
problems, 16 samples per problem and greedy), the final reward and the second half's reward; the number of seeds
and on how many ``a`` tracked closer. Then each law's own values on the same seeds (mean ± standard deviation).
Why paired: a seed's run varies by ±3 points of error and ±0.05 of accuracy between seeds, far more than the laws
differ; the same seed's two runs share the data order and the first steps.
"""

from __future__ import annotations

import argparse
import math
import statistics

from benchmarks._runs import load_results, second_half_reward
from benchmarks.tracking import smoothed_error

COLUMNS = {  # name -> (header, how to read it off a run)
    "err": ("err (points)", lambda r: 100 * smoothed_error(r["measured"], r["target"])),
    "train_sampled": ("train sampled", lambda r: (r.get("final_eval") or {}).get("train_sampled")),
    "train_greedy": ("train greedy", lambda r: (r.get("final_eval") or {}).get("train_greedy")),
    "test_sampled": ("test sampled", lambda r: (r.get("final_eval") or {}).get("test_sampled")),
    "test_greedy": ("test greedy", lambda r: (r.get("final_eval") or {}).get("test_greedy")),
    "final_reward": ("final reward", lambda r: r.get("final_reward", math.nan)),
    "second_half_reward": ("second-half reward", lambda r: second_half_reward(r)),
}


def parse_seeds(text: str) -> list[int]:
    """``"0-9,12"`` -> ``[0, ..., 9, 12]``."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    return seeds


def evaluated_runs(path: str, without_eval: bool = False) -> dict[tuple[str, int], dict]:
    """``{(label, seed): run}`` for the cached runs with a final evaluation and a logged curve (the last one wins).
    With ``without_eval``, runs with no final evaluation count too (one with an evaluation still wins), and their
    accuracy columns are empty."""
    runs = [run for run in load_results(path).values() if run.get("measured") and "seed" in run]
    out = {(run["label"], run["seed"]): run for run in runs if without_eval and not run.get("final_eval")}
    out.update({(run["label"], run["seed"]): run for run in runs if run.get("final_eval")})
    return out


def label_seeds(label: str) -> tuple[str, list[int] | None]:
    """``"hold/x YKS@1,7"`` -> ``("hold/x YKS", [1, 7])``: a label used for those seeds only; ``None``: all."""
    name, at, seeds = label.rpartition("@")
    return (name, parse_seeds(seeds)) if at and seeds[:1].isdigit() else (label, None)


def first_run(runs: dict, labels: list[str], seed: int) -> dict | None:
    for label in labels:
        name, only = label_seeds(label)
        if (only is None or seed in only) and (name, seed) in runs:
            return runs[(name, seed)]
    return None


def differences(runs: dict, a: list[str], b: list[str], seeds: list[int]) -> dict[str, list[float]]:
    """Per column, ``a - b`` on each seed where both laws have a run (the seeds themselves under ``"seed"``, each
    law's own values under ``"a:column"`` and ``"b:column"``)."""
    out: dict[str, list[float]] = {"seed": []}
    for seed in seeds:
        ra, rb = first_run(runs, a, seed), first_run(runs, b, seed)
        if ra is None or rb is None:
            continue
        out["seed"].append(seed)
        for name, (_, read) in COLUMNS.items():
            x, y = read(ra), read(rb)
            x, y = math.nan if x is None else x, math.nan if y is None else y
            out.setdefault(name, []).append(x - y)
            out.setdefault(f"a:{name}", []).append(x)
            out.setdefault(f"b:{name}", []).append(y)
    return out


def mean_se(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:+.3f}"
    return f"{statistics.mean(values):+.3f} ± {statistics.stdev(values) / math.sqrt(len(values)):.3f}"


def mean_sd(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    if len(values) < 2:
        return f"{values[0]:.3f}" if values else "–"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def levels(groups: list[tuple[str, dict[str, list[float]]]], a: str, b: str) -> str:
    """Each law's own mean ± standard deviation over the paired seeds, per group."""
    names = list(COLUMNS)
    lines = ["| group | law | " + " | ".join(COLUMNS[n][0] for n in names) + " |", "|---" * (2 + len(names)) + "|"]
    for label, diffs in groups:
        for side, law in (("a", a), ("b", b)):
            lines.append(f"| {label} | {law} | " + " | ".join(mean_sd(diffs.get(f"{side}:{n}", [])) for n in names)
                         + " |")
    return "\n".join(lines)


def table(groups: list[tuple[str, dict[str, list[float]]]]) -> str:
    names = list(COLUMNS)
    lines = ["| group | seeds | closer | " + " | ".join(COLUMNS[n][0] for n in names) + " |",
             "|---" * (3 + len(names)) + "|"]
    for label, diffs in groups:
        n = len(diffs["seed"])
        closer = sum(d < 0 for d in diffs.get("err", []))
        lines.append(f"| {label} | {n} | {closer} of {n} | " + " | ".join(mean_se(diffs.get(c, [])) for c in names)
                     + " |")
    return "\n".join(lines)


def main(argv=None) -> list[tuple[str, dict[str, list[float]]]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--a", nargs="+", required=True, help="the law's label(s), e.g. 'hold/entropy_bonus YLI'")
    p.add_argument("--b", nargs="+", required=True, help="the law it is compared with (the first label per seed)")
    p.add_argument("--group", nargs=3, action="append", required=True, metavar=("NAME", "RESULTS", "SEEDS"),
                   help="a cache and its seeds ('0-9,12'); repeat for several")
    p.add_argument("--without_eval", action="store_true",
                   help="also pair runs cached without --final_eval (tracking and reward only; accuracy left empty)")
    a = p.parse_args(argv)
    groups = []
    for name, path, seeds in a.group:
        try:
            wanted = parse_seeds(seeds)
        except ValueError:
            p.error(f"group {name!r}: seeds must read like '0-9,12', got {seeds!r}")
        runs = evaluated_runs(path, a.without_eval)
        diffs = differences(runs, a.a, a.b, wanted)
        if not diffs["seed"]:  # a misspelt label or seed range would otherwise print an empty row
            labels = sorted({label for label, _ in runs})
            what = "a run" if a.without_eval else "a run with a final evaluation"
            p.error(f"group {name!r}: no seed in {seeds} has {what} of both laws in {path}; "
                    f"its labels{'' if a.without_eval else ' with one'}: {', '.join(labels) or 'none'}")
        groups.append((name, diffs))
    if len(groups) > 1:
        pooled: dict[str, list[float]] = {}
        for _, diffs in groups:
            for key, values in diffs.items():
                pooled.setdefault(key, []).extend(values)
        groups.append(("pooled", pooled))
    print(f"{' or '.join(a.a)} − {' or '.join(a.b)}, paired by seed (mean ± standard error over seeds; "
          "err in points, negative: a tracks closer)")
    print(table(groups))
    print("\nEach law on the same seeds (mean ± standard deviation; err in %):")
    print(levels(groups, " or ".join(a.a), " or ".join(a.b)))
    return groups


if __name__ == "__main__":
    main()
