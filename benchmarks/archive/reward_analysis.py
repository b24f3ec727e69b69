"""Where the feedback bonus's reward gap comes from: a regression over the cached SmolLM2 tracking runs.

    python -m benchmarks.archive.reward_analysis [--results benchmarks/results/tracking_smollm2.jsonl.gz] [--target hold]

Reads the cache only; trains nothing. Every cached run whose knob is the entropy coefficient (TRL's rule and every
variant of the feedback bonus's law, see docs/benchmarks.md) on the given target is one observation:

* features: mean entropy over the first 40 steps ("early H", where TRL's rule lags below the target while its
  coefficient ramps up), mean entropy over the rest ("late H"), and the coefficient's mean magnitude ("|c|", the
  control effort);
* outcomes: the final reward as the tracking table reports it (the last 10% of the logged rewards: TRL logs the
  reward once per generation batch, so on the SmolLM2 testbed that is the last two batches, 96 completions), the
  mean reward logged over the last 20 steps (five batches), and over the second half of the run.

The fit is least squares with one intercept per seed (the seeds train on different data orders and differ more than
the laws do). Printed: the coefficients (reward per nat, per unit of |c|), R², and for each seed the spread of the
final reward across the bonus's law variants, which measures how much of a final-reward difference is chance.

A run cached twice (once plain, once with `tracking.py --final_eval`: the same configuration, trained again and
evaluated; its curves agree to ~1e-3) counts once, with the plain run's curves. The runs with
a final evaluation get a second table, per seed: the trained policy's accuracy (16 samples per problem at temperature
1, and greedy, over the 163 train problems) next to the coefficient's mean, its mean magnitude, its mean step-to-step
change |Δc| (chatter: effort that averages out of the entropy but not out of the optimizer) and the share of steps
with a penalty (c < 0).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from benchmarks._cache import read_rows
from benchmarks._runs import coefficient_stats, second_half_reward

FEATURES = ("early H", "late H", "|c|")
OUTCOMES = ("final reward", "reward, last 20 steps", "reward, second half")
EARLY = 40  # steps


def mean_reward(values) -> float:
    """Mean of the logged rewards among ``values`` (steps without a scored generation batch log none)."""
    return statistics.mean(v for v in values if v is not None)


def observations(path: str, target: str) -> list[dict]:
    """One dict per distinct run: the features, outcomes, coefficient statistics and ``final_eval`` (or None)."""
    out, seen = [], set()
    for row in read_rows(path):
        if row.get("knob_name") != "entropy_coef" or not row["label"].startswith(f"{target}/"):
            continue
        # the evaluated copy's cache key is the plain run's plus a marker (benchmarks/_runs.py)
        same_training = row.get("key", "").replace(', "final_eval:v1"', "") or (row["label"], row["seed"])
        if same_training in seen:
            if row.get("final_eval"):  # the evaluated copy of a run already read: keep its evaluation
                next(o for o in out if o["key"] == same_training)["final_eval"] = row["final_eval"]
            continue
        seen.add(same_training)
        measured = row["measured"]
        reward = row["reward"]  # per step; None where no generation batch was scored
        coef = coefficient_stats(row)
        out.append({
            "key": same_training, "final_eval": row.get("final_eval"), "mean c": coef["mean c"],
            "|dc|": coef["|dc|"], "penalty share": coef["penalty share"], "|c|": coef["|c|"],
            "label": row["label"], "seed": row["seed"],
            "early H": statistics.mean(measured[:EARLY]), "late H": statistics.mean(measured[EARLY:]),
            "final reward": row["final_reward"], "reward, last 20 steps": mean_reward(reward[-20:]),
            "reward, second half": second_half_reward(row),
        })
    return out


def fit(obs: list[dict], outcome: str) -> tuple[list[float], float]:
    """Least squares of ``outcome`` on FEATURES with one intercept per seed: (coefficients, R²)."""
    seeds = sorted({o["seed"] for o in obs})
    x = np.array([[o[f] for f in FEATURES] + [float(o["seed"] == s) for s in seeds] for o in obs])
    y = np.array([o[outcome] for o in obs])
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ beta
    r2 = 1.0 - float(residual @ residual) / float(((y - y.mean()) ** 2).sum())
    return [float(b) for b in beta[: len(FEATURES)]], r2


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", default="benchmarks/results/tracking_smollm2.jsonl.gz")
    p.add_argument("--target", default="hold")
    a = p.parse_args(argv)
    obs = observations(a.results, a.target)
    bonus = [o for o in obs if o["label"].split("/", 1)[1].startswith("entropy_bonus")]
    print(f"{len(obs)} runs on '{a.target}' with the entropy coefficient as knob ({len(bonus)} of the feedback bonus)\n")
    print("| outcome | " + " | ".join(f"per unit of {f}" for f in FEATURES) + " | R² |")
    print("|---" * (len(FEATURES) + 2) + "|")
    for outcome in OUTCOMES:
        beta, r2 = fit(obs, outcome)
        print(f"| {outcome} | " + " | ".join(f"{b:+.3f}" for b in beta) + f" | {r2:.2f} |")
    print("\n| seed | TRL's rule: final reward | bonus variants: final reward (n, mean ± sd, range) | "
          "TRL's rule: early H, \\|c\\| | bonus variants: early H, \\|c\\| |")
    print("|---|---|---|---|---|")
    for seed in sorted({o["seed"] for o in obs}):
        trl = [o for o in obs if o["seed"] == seed and o["label"] == f"{a.target}/trl_adaptive_entropy"]
        ours = [o for o in bonus if o["seed"] == seed]
        if not trl or len(ours) < 2:
            continue
        finals = [o["final reward"] for o in ours]
        print(f"| {seed} | {trl[0]['final reward']:.3f} | {len(ours)}, {statistics.mean(finals):.3f} ± "
              f"{statistics.stdev(finals):.3f}, {min(finals):.3f}–{max(finals):.3f} | "
              f"{trl[0]['early H']:.2f}, {trl[0]['|c|']:.2f} | "
              f"{statistics.mean(o['early H'] for o in ours):.2f}, {statistics.mean(o['|c|'] for o in ours):.2f} |")
    evaluated = [o for o in obs if o["final_eval"] and o["label"] in
                 (f"{a.target}/trl_adaptive_entropy", f"{a.target}/entropy_bonus")]
    if evaluated:
        print("\nTrained policies (tracking.py --final_eval): accuracy over the 163 train problems, 16 samples each at "
              "temperature 1 (sampled) and greedy; the coefficient over the run.")
        print("| seed | method | sampled | greedy | mean c | mean \\|c\\| | mean \\|Δc\\| per step | penalty share |")
        print("|---|---|---|---|---|---|---|---|")
        for o in sorted(evaluated, key=lambda o: (o["seed"], o["label"])):
            e = o["final_eval"]
            print(f"| {o['seed']} | {o['label'].split('/', 1)[1]} | {e['train_sampled']:.3f} | {e['train_greedy']:.3f} | "
                  f"{o['mean c']:+.3f} | {o['|c|']:.3f} | {o['|dc|']:.3f} | {100 * o['penalty share']:.0f}% |")
        pairs = [(t, b) for t in evaluated for b in evaluated if t["seed"] == b["seed"]
                 and t["label"].endswith("/trl_adaptive_entropy") and b["label"].endswith("/entropy_bonus")]
        if len(pairs) >= 2:
            for key, name in (("train_sampled", "sampled"), ("train_greedy", "greedy")):
                d = [b["final_eval"][key] - t["final_eval"][key] for t, b in pairs]
                print(f"bonus - TRL's rule, {name} accuracy, paired over {len(d)} seeds: "
                      f"{statistics.mean(d):+.3f} ± {statistics.stdev(d):.3f} (" + ", ".join(f"{x:+.3f}" for x in d) + ")")


if __name__ == "__main__":
    main()
