"""Issue 64's check: do the trainer's logged answer metrics reproduce the payoff page's distinct answers?

Study 1 of ``docs/payoff.md`` counted the distinct answers in a group of 8 with a reward wrapper around the training
rollouts (``benchmarks/payoff.py``): plain GRPO ends with about 1.5, the recipe (``bonus_wsd03``) keeps about 5
through its hold. This trains both again with the study's settings (``payoff.train_method``: the ``tiny_headroom``
testbed, 1,000 steps, the study's seeds), plain GRPO through ``GRPOEntropyTrainer`` without a control so that it
logs too, reads ``entropy_control/distinct_answers`` from ``trainer.state.log_history`` alone, and compares its means
over the same windows of steps with the study's cache (read, never written):

    python -m benchmarks.diversity_check run --seeds 0-4    # one run at a time, (grpo, recipe) seed by seed
    python -m benchmarks.diversity_check report

Each run's logged series (one value per generation batch of 4 steps) is cached in ``RESULTS``; a cached run is
skipped. The wrapper's own count is kept beside it in the run, and the largest difference between the two recorded.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

from benchmarks import payoff
from benchmarks._cache import MADE_WITH, RESULTS_DIR, append_row, made_with_line, provenance, read_rows

RESULTS = os.path.join(RESULTS_DIR, "diversity_check_tiny.jsonl.gz")
METHODS = ("grpo", payoff.RECOMMENDED)
# The payoff page's two readings: the recipe's distinct answers through its hold (its WSD anneal starts at step
# 700; the first 100 steps, where the entropy settles, left out) and plain GRPO's at the end (the last 100 steps,
# the study report's column).
WINDOWS = {"hold, steps 101-700": (101, 700), "end, steps 901-1000": (901, 1000)}
# The logged answer metrics a run keeps (the report's): the count, its solved and unsolved split, the answer entropy.
KEPT = ("distinct_answers", "distinct_answers_solved", "distinct_answers_unsolved", "answer_entropy", "solved_groups")


def run_one(method: str, seed: int, steps: int = payoff.STEPS, workdir: str = "/tmp/diversity_check") -> dict:
    """Train ``method`` with ``seed`` as the payoff study did and return the compact record: the logged answer
    metrics per generation batch (4 decimals) and how far the log is from the study's wrapper count in that run."""
    from trl_entropy.testbeds import get_testbed

    tb = get_testbed(payoff.TESTBED)
    heldout = tb.heldout(payoff.N_FINAL_PROBLEMS, payoff.HELDOUT_SEED)
    t0 = time.perf_counter()
    _, fields = payoff.train_method(tb, method, seed, steps, payoff.EVAL_EVERY, heldout[: payoff.N_CURVE_PROBLEMS],
                                    payoff.N_CURVE_SAMPLES, workdir, log_answers=True)
    logged = fields["logged"]
    wrapper = fields["distinct_answers"]
    if len(wrapper) != len(logged["distinct_answers"]):
        raise RuntimeError(f"{len(logged['distinct_answers'])} logged generation batches, {len(wrapper)} counted")
    diff = max(abs(a - b) for a, b in zip(logged["distinct_answers"], wrapper))
    rounded = {k: [None if x is None else round(x, 4) for x in logged[k]] for k in KEPT}
    return {"method": method, "seed": seed, "steps": steps, "testbed": payoff.TESTBED,
            "logged": {"step": logged["step"], **rounded}, "wrapper_max_abs_diff": diff,
            "wall_s": round(time.perf_counter() - t0, 1)}


def window_mean(values: list, steps: list[int], window: tuple[int, int]) -> float:
    """The mean of ``values`` (None: not logged that batch) logged at a step inside ``window`` (inclusive)."""
    lo, hi = window
    xs = [v for v, s in zip(values, steps) if lo <= s <= hi and v is not None]
    return statistics.fmean(xs) if xs else math.nan


def study_value(record: dict, window: tuple[int, int]) -> float:
    """A payoff study run's distinct answers over ``window``: its wrapper series, batch i taken at step 4i + 1 (the
    step a generation batch is logged at, as the trainer's log has it)."""
    d = payoff.training_distinct(record)
    return window_mean(d, [4 * i + 1 for i in range(len(d))], window)


def logged_value(record: dict, window: tuple[int, int], key: str = "distinct_answers") -> float:
    return window_mean(record["logged"][key], record["logged"]["step"], window)


def _mean_se(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else math.nan)


def report(runs: list[dict], study: list[dict]) -> str:
    """The comparison in markdown: per method and window, the study's mean ± SE over its seeds, the logs' over
    theirs, the difference paired by seed, and whether the two means lie within their combined standard error."""
    lines = ["| method | window | payoff study ± SE (seeds) | from the logs ± SE (seeds) | logs minus study, paired |"
             " within SEs? |", "|---|---|---|---|---|---|"]
    for m in METHODS:
        mine = {r["seed"]: r for r in runs if r["method"] == m}
        theirs = {r["seed"]: r for r in study if r["method"] == m and r.get("steps") == payoff.STEPS
                  and r.get("distinct_answers")}
        if not mine or not theirs:
            continue
        for name, window in WINDOWS.items():
            a, sa = _mean_se([study_value(r, window) for r in theirs.values()])
            b, sb = _mean_se([logged_value(r, window) for r in mine.values()])
            both = sorted(set(mine) & set(theirs))
            d, sd = _mean_se([logged_value(mine[s], window) - study_value(theirs[s], window) for s in both])
            ok = abs(b - a) <= math.hypot(sa, sb)
            lines.append(f"| {payoff.LABELS.get(m, m)} | {name} | {a:.2f} ± {sa:.2f} ({len(theirs)}) | "
                         f"{b:.2f} ± {sb:.2f} ({len(mine)}) | {d:+.2f} ± {sd:.2f} ({len(both)}) | "
                         + ("yes" if ok else "no") + " |")
    lines += ["", "From the logs, the same windows (mean over seeds): solved and unsolved groups",
              "", "| method | window | distinct, solved | distinct, unsolved | answer entropy | solved groups |",
              "|---|---|---|---|---|---|"]
    for m in METHODS:
        mine = [r for r in runs if r["method"] == m]
        for name, window in WINDOWS.items():
            if mine:
                cells = [statistics.fmean(logged_value(r, window, k) for r in mine) for k in
                         ("distinct_answers_solved", "distinct_answers_unsolved", "answer_entropy", "solved_groups")]
                lines.append(f"| {payoff.LABELS.get(m, m)} | {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    if runs:
        lines += ["", "Largest difference between a run's logged distinct answers and the study's wrapper count in "
                  f"the same run: {max(r['wrapper_max_abs_diff'] for r in runs):.2g}"]
    return "\n".join(lines)


def cmd_run(args):
    done = {(r["method"], r["seed"]) for r in read_rows(args.results)}
    for seed in payoff._seeds(args.seeds):
        for method in METHODS:
            if (method, seed) in done:
                continue
            record = run_one(method, seed, args.steps)
            record[MADE_WITH] = provenance(payoff._settings(method))
            append_row(args.results, record)
            print(f"{method} seed {seed}: distinct answers "
                  + ", ".join(f"{n} {logged_value(record, w):.2f}" for n, w in WINDOWS.items())
                  + f" ({record['wall_s']:.0f} s)", flush=True)
    cmd_report(args)


def cmd_report(args):
    runs = [r for r in read_rows(args.results) if r["steps"] == payoff.STEPS]
    print(made_with_line(runs))
    print(report(runs, read_rows(payoff.RESULTS)))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seeds", default="0-4")
    r.add_argument("--steps", type=int, default=payoff.STEPS)
    r.add_argument("--results", default=RESULTS)
    r.set_defaults(func=cmd_run)
    rp = sub.add_parser("report")
    rp.add_argument("--results", default=RESULTS)
    rp.set_defaults(func=cmd_report)
    args = p.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
