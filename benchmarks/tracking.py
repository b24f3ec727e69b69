"""Tracking precision: how closely each target-following control holds a scheduled entropy, vs TRL's own rule.

    python -m benchmarks.tracking [--testbed tiny|smollm2] [--steps N] [--targets ...] [--methods ...]
                                  [--seeds 0] [--results FILE]

Every target-following control and TRL's own adaptive entropy coefficient (`use_adaptive_entropy=True`, its
`entropy_target` driven by the same schedule through `EntropyScheduleCallback`) trains the testbed's starting model
from the same start, with plain GRPO alongside as "no control". All runs are off-policy, as the papers train
(`steps_per_generation=4`), with the testbed's GRPO settings otherwise.

Targets, with H0 the starting model's entropy (measured by sampling; `--h0` overrides):
* tiny: constant at 0.6·H0; linear H0 -> 0.5·H0; WSD holding H0, annealed to 0.5·H0 over the last 30%;
* smollm2: "hold", constant at H0; "wsd", holding H0, annealed to 0.5·H0 over the last 30%.

Reported per run:
* err: mean over the steps after the first 20% of |MA10(measured) − MA10(target)| / MA10(target) (MA10: trailing
  10-step moving average), the precision the issue tracker asks for;
* raw err: the same without smoothing; settle: the first step from which the 10-step rolling relative error stays at
  or below 10% until the end ("–" if never).
Runs are cached in `--results` (JSON lines; gzip-compressed where the name ends in `.gz`): an interrupted benchmark resumes, and rerunning reprints the tables.

`--final_eval` also evaluates each trained policy on every distinct problem (train and test splits): accuracy of 16
sampled completions per problem at temperature 1 (what the final reward estimates, from ~30x more completions) and
of one greedy completion (what the policy knows whatever its entropy), and prints them in a second table next to the
starting model's. These runs are cached under their own keys.
"""

from __future__ import annotations

import argparse
import os
import statistics
import warnings

from benchmarks._runs import (
    cached_run, coefficient_stats, load_results, mean_sd, moving_average, second_half_reward,
)

warnings.filterwarnings("ignore")

TARGETS = {  # testbed -> name -> (schedule, start as a fraction of H0, end as a fraction of start)
    "tiny": {"constant": ("constant", 0.6, 1.0), "linear": ("linear", 1.0, 0.5), "wsd": ("wsd", 1.0, 0.5)},
    "smollm2": {"hold": ("constant", 1.0, 1.0), "wsd": ("wsd", 1.0, 0.5)},
    "smollm2_hard": {"hold": ("constant", 1.0, 1.0), "wsd": ("wsd", 1.0, 0.5)},
    "smollm2_mixed": {"hold": ("constant", 1.0, 1.0), "wsd": ("wsd", 1.0, 0.5)},
}
# TRL's rule as the earlier benchmark runs ran it: a plain GRPOTrainer with use_adaptive_entropy and
# EntropyScheduleCallback (kept under its old label so that the cached runs serve); it trains exactly as
# entropy_control="trl_adaptive" (tests/test_entropy_bonus.py).
BASELINES = {
    "trl_adaptive_entropy": (False, {"use_adaptive_entropy": True, "entropy_coef": 0.0},
                             "TRL's adaptive entropy coefficient (Skywork-OR1), target driven by the same schedule"),
}
ASSIST = "+assist"  # "adaptive_clip+assist": the paper's control with entropy_bonus_assist=True


def assistable() -> list[str]:
    """The paper controls that take entropy_bonus_assist, as the config derives them from the registry."""
    from trl_entropy.trainers.grpo_entropy_config import COEFFICIENT_CONTROLS, TARGET_FOLLOWING_CONTROLS

    return [c for c in TARGET_FOLLOWING_CONTROLS if c not in COEFFICIENT_CONTROLS]
DEFAULT_METHODS = ["grpo", "trl_adaptive_entropy", "entropy_bonus", "adaptive_clip", "entrocraft", "positive_reweight", "entropic"]
DEFAULT_STEPS = {"tiny": 200, "smollm2": 150, "smollm2_hard": 100, "smollm2_mixed": 100}


def relative_errors(measured, target):
    return [abs(m - t) / t if (m is not None and t is not None and t > 0) else None for m, t in zip(measured, target)]


def settling_step(errors, window=10, tolerance=0.10):
    """First index from which the rolling ``window``-mean relative error stays <= ``tolerance``; None if never."""
    errs = [e for e in errors if e is not None]
    if len(errs) < window:
        return None
    rolling = [sum(errs[i - window + 1 : i + 1]) / window for i in range(window - 1, len(errs))]
    for i in range(len(rolling)):
        if all(r <= tolerance for r in rolling[i:]):
            return i + window - 1
    return None


def smoothed_error(measured, target, window=10, skip_fraction=0.2):
    """Mean over the steps after the first ``skip_fraction`` of |MA(measured) − MA(target)| / MA(target): the
    package's :func:`trl_entropy.metrics.tracking_error`, the one definition the demo and the model card report."""
    from trl_entropy.metrics import tracking_error

    return tracking_error(measured, target, window=window, skip_fraction=skip_fraction)


def overshoot(measured, target, window=10, skip_fraction=0.2):
    """Largest excursion of MA10(measured) above MA10(target), relative to the target, after the first
    ``skip_fraction`` of the steps (0 if it never goes above)."""
    m, t = moving_average(measured, window), moving_average(target, window)
    ups = [(a - b) / b for a, b in zip(m, t) if a is not None and b is not None and b > 0]
    tail = ups[int(len(ups) * skip_fraction):]
    return max([0.0, *tail])


def summarize(measured, target):
    errs = relative_errors(measured, target)
    settle = settling_step(errs)
    tail = [e for e in errs[int(len(errs) * 0.2):] if e is not None]
    raw = sum(tail) / len(tail) if tail else float("nan")
    return smoothed_error(measured, target), raw, settle


def target_curve(schedule: str, start: float, end_ratio: float, steps, total_steps: int, anneal_ratio: float = 0.3):
    """The target each logged step (1-based) saw, as the trainer evaluates it (at ``step - 1`` of ``total_steps``)."""
    from trl_entropy.scheduling.schedules import make_schedule

    sched = make_schedule(schedule, start=start, end=start * end_ratio if schedule != "constant" else None,
                          anneal_ratio=anneal_ratio)
    return [sched(s - 1, total_steps) for s in steps]


def measure_h0(testbed_name: str, seed: int = 0) -> float:
    """The starting model's token-mean entropy on sampled completions of the training problems (the quantity
    `entropy_control/measured` reports), ~600 completions."""
    from trl_entropy.demo import testbed as tiny
    from trl_entropy.testbeds import get_testbed

    tb = get_testbed(testbed_name)
    model, tokenizer = tb.load(False)
    train, _ = tb.datasets(seed)
    rows = [dict(r) for r in train.select(range(min(len(train), 4096)))]
    unique = list({r["prompt"]: r for r in rows}.values())[:80]
    n = max(4, 640 // len(unique))
    return tiny.completion_entropy(model, tokenizer, unique, n_samples=n, seed=seed,
                                   max_new_tokens=tb.grpo_config_kwargs().get("max_completion_length"))


def main(argv=None) -> None:
    from trl_entropy.demo import runner

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--testbed", default="tiny", choices=sorted(TARGETS))
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default: tiny 200, smollm2 150)")
    p.add_argument("--targets", nargs="+", default=None, help="target names (default: all of the testbed's)")
    p.add_argument("--methods", nargs="+", default=DEFAULT_METHODS,
                   choices=[*runner.METHODS, *BASELINES, *(m + ASSIST for m in assistable())],
                   help=f"controls to run; NAME{ASSIST} runs a paper's control with entropy_bonus_assist=True")
    p.add_argument("--seeds", default="0", help="comma-separated training seeds")
    p.add_argument("--h0", type=float, default=None, help="starting entropy (default: measured by sampling)")
    p.add_argument("--extra", default="{}", help="JSON {method: {config overrides}}, e.g. tuned controller gains")
    p.add_argument("--label", default="", help="suffix for the cached run labels of this configuration")
    p.add_argument("--results", default=None, help="JSON-lines cache of finished runs (resume, reprint)")
    p.add_argument("--cached_only", action="store_true", help="print the table from the cache; train nothing")
    p.add_argument("--as_recorded", action="store_true",
                   help="with --cached_only: also serve cached runs whose package defaults have changed since they "
                        "ran (a reprint of what was measured then; each such run is named with what changed)")
    p.add_argument("--final_eval", action="store_true",
                   help="evaluate each trained policy (sampled and greedy accuracy, train and test problems)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="where the SmolLM2 testbeds train (float32 either way); GPU runs are cached under their own "
                        "keys (the tiny testbed always trains on CPU)")
    p.add_argument("--output_dir", default="/tmp/trl_entropy_bench",
                   help="where the runs write their trainer output (one folder per method under it)")
    p.add_argument("--prepare_only", action="store_true",
                   help="only evaluate the starting model into the cache (with --final_eval), then exit")
    a = p.parse_args(argv)
    if a.as_recorded and not a.cached_only:
        p.error("--as_recorded reprints runs made under earlier defaults; it needs --cached_only (a missing run "
                "would train with today's defaults under the same label)")
    import json
    import os

    from trl_entropy.testbeds.addition import DEVICE_ENV

    os.environ[DEVICE_ENV] = a.device

    extra = json.loads(a.extra)
    steps = a.steps or DEFAULT_STEPS[a.testbed]
    targets = a.targets or list(TARGETS[a.testbed])
    seeds = [int(s) for s in a.seeds.split(",")]
    h0 = a.h0 if a.h0 is not None else round(float(measure_h0(a.testbed)), 4)
    print(f"H0 = {h0:.4f} nats", flush=True)
    cache = load_results(a.results)
    if a.prepare_only:
        if a.final_eval:
            start_eval(cache, a.results, a.testbed, cached_only=False)
        return
    rows = []
    for seed in seeds:
        for target_name in targets:
            schedule, start_frac, end_ratio = TARGETS[a.testbed][target_name]
            for name in a.methods:
                method, assist = name.removesuffix(ASSIST), name.endswith(ASSIST)
                ours, overrides, desc = {**runner.METHODS, **BASELINES}[method]
                spec = (ours, {**overrides, **extra.get(name, {}), **({"entropy_bonus_assist": True} if assist else {})},
                        desc)
                suffix = (" assist" if assist else "") + a.label
                if not ours and not overrides:  # plain GRPO ignores the target: one run serves every target
                    r = cached_run(cache, a.results, testbed=a.testbed, label=f"any/{method}{suffix}", seed=seed,
                                   steps=steps, spec=spec, method=method, target_start=h0, cached_only=a.cached_only,
                                   as_recorded=a.as_recorded, final_eval=a.final_eval, output_dir=a.output_dir)
                    if r is not None:
                        r = dict(r, target=target_curve(schedule, h0 * start_frac, end_ratio, r["step"], steps))
                else:
                    r = cached_run(cache, a.results, testbed=a.testbed, label=f"{target_name}/{method}{suffix}",
                                   seed=seed, steps=steps, spec=spec, method=method, target_start=h0 * start_frac,
                                   schedule=schedule, end_ratio=end_ratio, anneal_ratio=0.3, cached_only=a.cached_only,
                                   as_recorded=a.as_recorded, final_eval=a.final_eval, output_dir=a.output_dir)
                if r is None:
                    continue
                err, raw, settle = summarize(r["measured"], r["target"])
                zero = [v for v in r.get("frac_reward_zero_std") or [] if v is not None]
                coef = coefficient_stats(r) or {}
                rows.append((target_name, name, seed, err, raw, settle, r["final_entropy"], r["final_reward"],
                             overshoot(r["measured"], r["target"]), sum(zero) / len(zero) if zero else None,
                             coef.get("|c|"), r.get("final_eval"), second_half_reward(r), coef.get("|dc|")))
                print(f"  seed {seed} {target_name:<8} {name:<22} err {100 * err:6.1f}%  raw {100 * raw:6.1f}%  "
                      f"settle {settle}", flush=True)

    print(f"\n{a.testbed} testbed, {steps} optimizer steps per run, steps_per_generation=4 (off-policy), "
          f"H0 = {h0:.3f} nats, seeds {seeds}. err = mean over steps after the first 20% of "
          "|MA10(H) - MA10(target)| / MA10(target); raw err without smoothing; final H over the last 10% of steps, "
          "final reward over the last 10% of the logged rewards (TRL logs one per generation batch); "
          "zero-std groups: TRL's frac_reward_zero_std over the run (groups with one advantage sign only, or none); "
          "mean |c|: the entropy coefficient's mean magnitude over the run (control effort; coefficient knobs only); "
          "|Δc|: its mean step-to-step change (chatter).")
    header = ("| target | method | err | raw err | overshoot | settle step | final H | final reward | "
              "zero-std groups | mean \\|c\\| | \\|Δc\\| | err vs TRL's rule | seeds |")
    print(header + "\n" + "|---" * 13 + "|")
    for target_name in targets:
        trl = [r[3] for r in rows if r[0] == target_name and r[1] == "trl_adaptive_entropy"]
        trl_mean = statistics.mean(trl) if trl else None
        for method in a.methods:
            rs = [r for r in rows if r[0] == target_name and r[1] == method]
            if not rs:
                continue
            errs = [r[3] for r in rs]
            ratio = f"{statistics.mean(errs) / trl_mean:.2f}x" if trl_mean else "–"
            settles = [r[5] for r in rs]
            settle_txt = ", ".join("–" if s is None else str(s) for s in settles)
            zero = [100 * r[9] for r in rs if r[9] is not None]
            zero_txt = f"{mean_sd(zero, 0)}%" if zero else "–"
            coef = [r[10] for r in rs if r[10] is not None]
            coef_txt = mean_sd(coef, 2) if coef else "–"
            chatter = [r[13] for r in rs if r[13] is not None]
            chatter_txt = mean_sd(chatter, 3) if chatter else "–"
            print(f"| {target_name} | {method} | {mean_sd([100 * e for e in errs], 1)}% | "
                  f"{mean_sd([100 * r[4] for r in rs], 1)}% | {mean_sd([100 * r[8] for r in rs], 1)}% | "
                  f"{settle_txt} | {mean_sd([r[6] for r in rs])} | "
                  f"{mean_sd([r[7] for r in rs])} | {zero_txt} | {coef_txt} | {chatter_txt} | {ratio} | {', '.join(str(r[2]) for r in rs)} |")
    if a.final_eval:
        print_final_eval(rows, targets, a.methods, start_eval(cache, a.results, a.testbed, a.cached_only), steps)


EVAL_COLUMNS = ("train_sampled", "test_sampled", "train_greedy", "test_greedy")


def start_eval(cache: dict, path: str | None, testbed_name: str, cached_only: bool) -> dict | None:
    """``runner.policy_evaluation`` of the testbed's starting model, cached next to the runs."""
    from benchmarks._cache import append_row
    from benchmarks._runs import on_gpu, require_cuda, run_key

    from trl_entropy.testbeds import get_testbed

    tb = get_testbed(testbed_name)
    gpu = on_gpu(tb)
    # GPU evaluations get their own key (the CPU key is unchanged from before the switch existed)
    key = run_key(testbed_name, "start/eval", 0, 0, ["final_eval:v1"] + (["cuda"] if gpu else []))
    if key in cache:
        return cache[key]["final_eval"]
    if cached_only:
        return None
    if gpu:
        require_cuda("the starting model's evaluation")
    from trl_entropy.demo.runner import policy_evaluation

    model, tokenizer = tb.load(False)
    if gpu:
        model = model.to("cuda")
    ev = policy_evaluation(model, tokenizer, tb, tb.grpo_config_kwargs().get("max_completion_length"), 0)
    row = {"key": key, "label": "start/eval", "final_eval": ev}
    if path:
        append_row(path, row)
    cache[key] = row
    return ev


def print_final_eval(rows, targets, methods, start, steps) -> None:
    """Second table: the trained policies' accuracy (``--final_eval``), mean ± sd over seeds."""
    print(f"\nTrained policies after {steps} steps: accuracy on every distinct problem, 16 samples per problem at "
          "temperature 1 (sampled) and one greedy completion (greedy), train and test splits; second-half reward: "
          "the mean logged reward over the second half of the steps.")
    header = "| target | method | " + " | ".join(c.replace("_", " ") for c in EVAL_COLUMNS) + \
        " | final reward | second-half reward | final H | seeds |"
    print(header + "\n" + "|---" * (len(EVAL_COLUMNS) + 6) + "|")
    if start:
        print("| – | starting model | " + " | ".join(f"{start[c]:.3f}" for c in EVAL_COLUMNS) + " | – | – | – | – |")
    for target_name in targets:
        for method in methods:
            rs = [r for r in rows if r[0] == target_name and r[1] == method and r[11] is not None]
            if not rs:
                continue
            cells = [mean_sd([r[11][c] for r in rs]) for c in EVAL_COLUMNS]
            print(f"| {target_name} | {method} | " + " | ".join(cells) + f" | {mean_sd([r[7] for r in rs])} | "
                  f"{mean_sd([r[12] for r in rs])} | {mean_sd([r[6] for r in rs])} | "
                  f"{', '.join(str(r[2]) for r in rs)} |")


if __name__ == "__main__":
    main()
