"""How far can each knob move entropy? Every knob held at its extremes for a whole run, against plain GRPO.

    python -m benchmarks.knob_authority [--testbed tiny|smollm2] [--steps N] [--seeds 0,1,2] [--results FILE]

A controller can hold entropy only inside the range its knob reaches when held at one extreme for the whole run: if
entropy still falls with the knob at its entropy-raising extreme, no schedule of that knob can hold a constant target.
This script measures that range ("authority") for each knob in the off-policy setting of the testbed
(`steps_per_generation=4`):

* advantage sign (Entrocraft, positive reweighting): negative-advantage rollouts only (Entrocraft below its band,
  forced by a constant target of 10 nats in hard mode), positive-advantage rollouts only (a target of 0 nats), and
  lambda = 0 (`w_reinforce` with lambda 0: negatives only, every token in the normaliser; lambda = 1 is plain GRPO);
* clip (adaptive clip-higher): a static `epsilon_high` of 0.2 (plain GRPO), 0.28 (DAPO) and 1.0 (smollm2 testbed);
* covariance (Clip-Cov, KL-Cov) at the papers' ratios and larger (smollm2 testbed);
* TRL's entropy bonus at fixed coefficients (smollm2 testbed).

Runs are cached in `--results` (JSON lines): an interrupted benchmark resumes, and rerunning prints the table.
"""

from __future__ import annotations

import argparse
import warnings

from benchmarks._runs import cached_run, load_results, mean_sd, moving_average, window_mean

warnings.filterwarnings("ignore")

_NEG = {"entropy_control": "entrocraft", "entrocraft_mode": "hard", "entropy_schedule": "constant",
        "entropy_schedule_start": 10.0}
_POS = dict(_NEG, entropy_schedule_start=0.0)
ADVANTAGE_SIGN = {
    "plain GRPO": (False, {}, "plain TRL GRPOTrainer"),
    "negatives only (Entrocraft below its band)": (True, _NEG, "Entrocraft, hard, target 10 nats"),
    "negatives only, all tokens in the normaliser (λ = 0)": (
        True, {"entropy_control": "w_reinforce", "w_reinforce_lambda": 0.0}, "w_reinforce, lambda 0"),
    "positives only (Entrocraft above its band)": (True, _POS, "Entrocraft, hard, target 0 nats"),
}
RUNS = {
    "tiny": ADVANTAGE_SIGN,
    "smollm2": {  # the most telling runs first: a partial benchmark already has them
        **ADVANTAGE_SIGN,
        "epsilon_high 1.0": (False, {"epsilon_high": 1.0}, "static clip-higher"),
        "entropy bonus, coef 0.1": (False, {"entropy_coef": 0.1}, "TRL entropy_coef"),
        "epsilon_high 0.28 (DAPO)": (False, {"epsilon_high": 0.28}, "static clip-higher"),
        "KL-Cov, ratio 0.2 (100x)": (True, {"entropy_control": "kl_cov", "kl_cov_ratio": 0.2}, "KL-Cov"),
        "Clip-Cov, ratio 2e-4 (paper)": (True, {"entropy_control": "clip_cov", "clip_cov_ratio": 2e-4}, "Clip-Cov"),
        "KL-Cov, ratio 2e-3 (paper)": (True, {"entropy_control": "kl_cov", "kl_cov_ratio": 2e-3}, "KL-Cov"),
        "entropy bonus, coef 0.01": (False, {"entropy_coef": 0.01}, "TRL entropy_coef"),
        # 10x and 100x the papers' ratios select the same single token as 1x at ~36-48 tokens per step, so the
        # next size that selects more is 1000x for Clip-Cov (KL-Cov's 100x already does)
        "Clip-Cov, ratio 0.2 (1000x)": (True, {"entropy_control": "clip_cov", "clip_cov_ratio": 0.2}, "Clip-Cov"),
    },
    # the harder task, where groups keep both advantage signs longer: the advantage-sign knobs and the clip bound
    "smollm2_hard": {
        **ADVANTAGE_SIGN,
        "epsilon_high 1.0": (False, {"epsilon_high": 1.0}, "static clip-higher"),
    },
    # half easy, half two-digit problems: plain GRPO's reward stays near 0.2-0.6 for 100 steps
    "smollm2_mixed": {
        **ADVANTAGE_SIGN,
        "epsilon_high 1.0": (False, {"epsilon_high": 1.0}, "static clip-higher"),
    },
}
DEFAULT_STEPS = {"tiny": 300, "smollm2": 100, "smollm2_hard": 100, "smollm2_mixed": 100}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--testbed", default="tiny", choices=sorted(RUNS))
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default: tiny 300, smollm2 100)")
    p.add_argument("--seeds", default="0", help="comma-separated training seeds")
    p.add_argument("--runs", nargs="+", default=None, help="run names to include (default: all of the testbed's)")
    p.add_argument("--results", default=None, help="JSON-lines cache of finished runs (resume, reprint)")
    a = p.parse_args(argv)
    steps = a.steps or DEFAULT_STEPS[a.testbed]
    seeds = [int(s) for s in a.seeds.split(",")]
    runs = {k: v for k, v in RUNS[a.testbed].items() if a.runs is None or k in a.runs}
    marks = [10, steps // 2, steps - 5] if steps < 300 else [10, 50, 150, steps - 5]
    cache = load_results(a.results)

    rows: dict[str, list] = {name: [] for name in runs}
    runs_of: dict[str, list] = {name: [] for name in runs}
    for seed in seeds:  # seed-major: one seed of every run first, so a partial benchmark already compares them all
        for name, spec in runs.items():
            r = cached_run(cache, a.results, testbed=a.testbed, label=name, seed=seed, steps=steps, spec=spec)
            runs_of[name].append(r)
            h = r["measured"]
            ma = moving_average(h)
            h0 = window_mean(h, 5)
            half = next((i + 1 for i, v in enumerate(ma) if i >= 9 and v is not None and v <= h0 / 2), None)
            rows[name].append(([window_mean(h, m) for m in marks], window_mean(r["reward"], 0, half=10),
                               window_mean(r["reward"], steps - 5, half=max(5, steps // 10)), half,
                               _run_mean(r.get("clip_ratio/high_mean")), _run_mean(r.get("frac_reward_zero_std"))))
            print(f"{name} seed {seed}: entropy " + " ".join(f"{v:.3f}" for v in rows[name][-1][0]), flush=True)

    print(f"\n{a.testbed} testbed, {steps} optimizer steps, steps_per_generation=4, seeds {seeds}. Entropy in nats "
          "(token mean), averaged over the 10 steps around each step; reward over the first 10 and the last 10% of "
          "steps; 'H halves': first step whose 10-step mean is at most half of the first 10 steps' mean; clip high: "
          "TRL's clip_ratio/high_mean (share of tokens whose ratio hit the upper clip bound), zero-std: TRL's "
          "frac_reward_zero_std (groups with one outcome only: no advantage sign to select), both over the run.")
    print("| run | " + " | ".join(f"H@{m}" for m in marks[:-1]) + " | H final | reward start | reward final | "
          "H halves at step | clip high | zero-std |")
    print("|---" * (len(marks) + 6) + "|")
    for name, rs in rows.items():
        cells = [mean_sd([r[0][i] for r in rs]) for i in range(len(marks))]
        halves = [r[3] for r in rs]
        never = sum(h is None for h in halves)
        half_txt = mean_sd([h for h in halves if h is not None], digits=0) + (f" ({never} never)" if never else "")
        clip = [100 * r[4] for r in rs if r[4] is not None]
        zero = [100 * r[5] for r in rs if r[5] is not None]
        print(f"| {name} | " + " | ".join(cells) + f" | {mean_sd([r[1] for r in rs])} | {mean_sd([r[2] for r in rs])}"
              f" | {half_txt} | {mean_sd(clip, 2) + '%' if clip else '–'} | {mean_sd(zero, 0) + '%' if zero else '–'} |")
    fits = {name: two_sided_authority(runs_of[name]) for name in runs}
    fits = {name: fit for name, fit in fits.items() if fit is not None}
    if fits:
        print("\nPer generation batch: change of mean log-entropy from the batch before to the batch after, per "
              "unit of the batch's share of groups with both advantage signs (1 - frac_reward_zero_std; the level "
              "before as a second regressor), all seeds pooled:")
        for name, (slope, se, n) in fits.items():
            print(f"  {name}: {slope:+.2f} ± {se:.2f} ({n} batches)")


def two_sided_authority(runs: list[dict], batch_steps: int = 4) -> tuple[float, float, int] | None:
    """How a run's entropy change depends on the share of its groups that hold both advantage signs (the only
    groups an advantage-sign knob can act on): per generation batch ``k``, the change of the mean log-entropy from
    batch ``k-1`` to batch ``k+1`` regressed on batch ``k``'s two-sided share ``1 - frac_reward_zero_std`` and on
    batch ``k-1``'s level (mean reversion), pooled over ``runs``. Neither reading is taken on batch ``k``'s own
    completions, whose sampled answers also set its share. Returns (slope, its standard error, batches), or None
    without enough logged batches."""
    import numpy as np

    data = []
    for r in runs:
        shares = r.get("frac_reward_zero_std") or []
        h = np.log(np.maximum(np.asarray(r["measured"], dtype=float), 1e-3))
        levels = [h[i:i + batch_steps].mean() for i in range(0, len(h) - batch_steps + 1, batch_steps)]
        for k in range(1, len(levels) - 1):
            share = shares[k * batch_steps] if k * batch_steps < len(shares) else None
            if share is not None and all(np.isfinite([levels[k - 1], levels[k + 1]])):
                data.append((levels[k + 1] - levels[k - 1], 1.0 - share, levels[k - 1]))
    if len(data) < 5:
        return None
    d = np.asarray(data)
    x = np.c_[np.ones(len(d)), d[:, 1], d[:, 2]]
    coef, *_ = np.linalg.lstsq(x, d[:, 0], rcond=None)
    resid = d[:, 0] - x @ coef
    cov = resid @ resid / (len(d) - 3) * np.linalg.pinv(x.T @ x)
    return float(coef[1]), float(np.sqrt(cov[1, 1])), len(d)


def _run_mean(values):
    values = [v for v in values or [] if v is not None]
    return sum(values) / len(values) if values else None


if __name__ == "__main__":
    main()
