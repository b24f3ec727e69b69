"""Where a law's tracking error comes from: the tracking table's metric split by phase of the run, each phase's signed
offset, and the floor that the measurement's own noise puts under the metric.

    python -m benchmarks.error_budget --results benchmarks/results/tracking_smollm2.jsonl.gz \\
        --label "hold/entropy_bonus YLI" --seeds 0-17 [--phases 20,40,70,100]

Reads the cache of ``tracking.py`` only; trains nothing. The metric (``tracking.smoothed_error``) is the mean, over
the steps after the first 20%, of ``|MA10(measured) - MA10(target)| / MA10(target)``; that mean is the weighted sum
of its means over consecutive phases, so each phase's *share* (its mean times its fraction of the scored steps) adds
up to the metric. The signed offset is the same mean without the absolute value: a phase whose error is mostly one
sign (the early dip, a standing excess) has an offset close to its error; one that only swings has an offset near 0.

**The noise floor.** A perfect control would leave the per-step reading's own sampling noise: white noise of the
run's relative size ``sigma``, averaged over 10 steps, still scores ``~0.8 * sigma / sqrt(10)``. ``sigma`` is read
off each run by second differences (``var(x[t+1] - 2 x[t] + x[t-1]) = 6 sigma^2`` for white noise; the entropy's
own slow moves hardly enter), over the steps scored, and the floor is the metric of ``target * (1 + sigma * N(0, 1))``
averaged over 200 draws. Printed per run and as the mean; no law can score below it on that run's measurement.

**The integral at the lower bound** (the feedback bonus's runs, which log its law and integral): over the steps
after ``--from_step``, the share on which the law sat at its lower bound (``--low``, the default bound -0.1), the
reading's mean relative offset on those steps and on the others, and how far the integral moved on each. With
conditional integration the integral stands still on those steps, so
an overshoot that drives the law to the bound never reaches it.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics

from benchmarks._runs import moving_average
from benchmarks.paired import evaluated_runs, parse_seeds
from benchmarks.tracking import smoothed_error

WINDOW, SKIP = 10, 0.2  # the tracking table's metric


def phase_budget(measured, target, edges) -> list[tuple[float, float, float]]:
    """Per phase ``[edges[i], edges[i+1])`` of step indices (clipped to the scored steps): ``(share, error,
    offset)``, with ``share`` the phase's part of :func:`tracking.smoothed_error` (the shares sum to it), ``error``
    and ``offset`` the phase's mean absolute and signed relative error of the two moving averages."""
    m, t = moving_average(measured, WINDOW), moving_average(target, WINDOW)
    signed = [(a - b) / b if a is not None and b is not None and b > 0 else None for a, b in zip(m, t)]
    first = int(len(signed) * SKIP)
    scored = [i for i in range(first, len(signed)) if signed[i] is not None]
    out = []
    for lo, hi in zip(edges, edges[1:]):
        idx = [i for i in scored if max(lo, first) <= i < hi]
        if not idx:
            out.append((0.0, math.nan, math.nan))
            continue
        err = statistics.mean(abs(signed[i]) for i in idx)
        out.append((err * len(idx) / len(scored), err, statistics.mean(signed[i] for i in idx)))
    return out


def white_noise_sigma(measured, target) -> float:
    """The per-step reading's relative noise, by second differences over the scored steps."""
    first = max(1, int(len(measured) * SKIP))
    d2 = [(measured[i + 1] - 2 * measured[i] + measured[i - 1]) / target[i]
          for i in range(first, len(measured) - 1)
          if None not in (measured[i - 1], measured[i], measured[i + 1]) and target[i]]
    return math.sqrt(statistics.mean(x * x for x in d2) / 6) if d2 else math.nan


def noise_floor(sigma: float, target, draws: int = 200, seed: int = 0) -> float:
    """The metric of a perfect control whose reading carries white relative noise ``sigma``."""
    rng = random.Random(seed)
    return statistics.mean(smoothed_error([t * (1 + sigma * rng.gauss(0, 1)) for t in target], target)
                           for _ in range(draws))


LAW, INTEGRAL = "entropy_control/bonus_law", "entropy_control/bonus_integral"


def lower_bound_steps(row, low: float = -0.1, start: int = 40):
    """``(share, offset_at, offset_else, integral_step_at, integral_step_else)`` over steps ``start``.. of a run that
    logs the bonus's law and integral: the share of steps whose law sat at ``low`` (within 1e-6), the reading's mean
    relative offset from the target on those steps and on the others, and the integral's mean change from the step
    before on each. ``None`` for a run without those logs; NaN where a group of steps is empty."""
    if LAW not in row or INTEGRAL not in row:
        return None
    law, integral, measured, target = row[LAW], row[INTEGRAL], row["measured"], row["target"]
    at, other = [], []
    for i in range(max(start, 1), len(law)):
        if None in (law[i], integral[i], integral[i - 1], measured[i]) or not target[i]:
            continue
        (at if law[i] <= low + 1e-6 else other).append((measured[i] / target[i] - 1, integral[i] - integral[i - 1]))

    def avg(xs, k):
        return statistics.mean(x[k] for x in xs) if xs else math.nan

    total = len(at) + len(other)
    return (len(at) / total if total else math.nan, avg(at, 0), avg(other, 0), avg(at, 1), avg(other, 1))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", required=True)
    p.add_argument("--label", required=True, help="e.g. 'hold/entropy_bonus YLI'")
    p.add_argument("--seeds", required=True, help="'0-9,12'")
    p.add_argument("--phases", default="20,40,70,100", help="phase edges, step indices")
    p.add_argument("--low", type=float, default=-0.1, help="the bonus's lower bound, for the lower-bound table")
    p.add_argument("--from_step", type=int, default=40, help="first step index of the lower-bound table")
    a = p.parse_args(argv)
    runs = evaluated_runs(a.results, without_eval=True)  # the curves only: an evaluation is not needed
    edges = [int(x) for x in a.phases.split(",")]
    seeds = [s for s in parse_seeds(a.seeds) if (a.label, s) in runs]
    if not seeds:
        raise SystemExit(f"no cached run of {a.label!r} on those seeds")
    names = [f"steps {lo + 1}-{hi}" for lo, hi in zip(edges, edges[1:])]
    print(f"{a.label}, {len(seeds)} seeds: the metric split by phase (mean over seeds; in %)\n")
    print("| seed | metric | " + " | ".join(f"{n}: share / error / offset" for n in names) + " | noise sigma | floor |")
    print("|---|---|" + "---|" * len(names) + "---|---|")
    rows = []
    for s in seeds:
        r = runs[(a.label, s)]
        metric = smoothed_error(r["measured"], r["target"])
        budget = phase_budget(r["measured"], r["target"], edges)
        sigma = white_noise_sigma(r["measured"], r["target"])
        floor = noise_floor(sigma, r["target"], seed=s)
        rows.append((metric, budget, sigma, floor))
        cells = " | ".join(f"{100 * sh:.1f} / {100 * e:.1f} / {100 * o:+.1f}" for sh, e, o in budget)
        print(f"| {s} | {100 * metric:.1f} | {cells} | {100 * sigma:.1f} | {100 * floor:.1f} |")
    mean = statistics.mean
    cells = " | ".join(
        f"{100 * mean(r[1][k][0] for r in rows):.1f} / {100 * mean(r[1][k][1] for r in rows):.1f} / "
        f"{100 * mean(r[1][k][2] for r in rows):+.1f}" for k in range(len(names)))
    print(f"| mean | {100 * mean(r[0] for r in rows):.1f} | {cells} | {100 * mean(r[2] for r in rows):.1f} | "
          f"{100 * mean(r[3] for r in rows):.1f} |")
    bound = [(s, lower_bound_steps(runs[(a.label, s)], a.low, a.from_step)) for s in seeds]
    bound = [(s, b) for s, b in bound if b is not None]
    if not bound:
        return
    print(f"\nThe integral at the lower bound ({a.low:g}), steps {a.from_step + 1}-: share of steps with the law "
          "there; the reading's offset there and elsewhere (%); the integral's mean change per step there and "
          "elsewhere\n")
    print("| seed | share at the bound | offset there | offset elsewhere | integral step there | elsewhere |")
    print("|---|---|---|---|---|---|")
    for s, b in bound:
        print(f"| {s} | {100 * b[0]:.1f}% | {100 * b[1]:+.1f} | {100 * b[2]:+.1f} | {b[3]:+.5f} | {b[4]:+.5f} |")

    def avg(k):  # over the seeds where the value exists
        xs = [b[k] for _, b in bound if not math.isnan(b[k])]
        return statistics.mean(xs) if xs else math.nan

    print(f"| mean | {100 * avg(0):.1f}% | {100 * avg(1):+.1f} | {100 * avg(2):+.1f} | {avg(3):+.5f} | "
          f"{avg(4):+.5f} |")


if __name__ == "__main__":
    main()
