"""How much a trained policy's accuracy moves over the last optimizer steps of a run.

    python -m benchmarks.archive.late_policy --seeds 0 --targets hold --methods entropy_bonus [--label " NLI" --extra JSON]
        [--eval_at 80,84,88,92,96,100] [--results benchmarks/results/late_policy_smollm2.jsonl.gz]

The tracking benchmark evaluates each trained policy once, at the last step (`--final_eval`). A control that moves
its coefficient hard near the end can leave that policy in a passing state, and the evaluation then reads the moment,
not the run. This script retrains a tracking run (same testbed, target, seed and configuration, so the same
trajectory: the evaluation restores the RNG state) and evaluates the policy at the end of each step of `--eval_at`
the same way (`runner.policy_evaluation`: 16 samples per train problem at temperature 1, and greedy). It prints each
run's accuracy by step beside the coefficient of the steps before, and checks that the entropy readings equal the
cached tracking run's where that run is in `--tracking_results`. Runs are cached in `--results` (JSON lines).
"""

from __future__ import annotations

import argparse
import json
import os
import warnings

from benchmarks._runs import cached_run, load_results
from benchmarks.tracking import BASELINES, TARGETS

warnings.filterwarnings("ignore")


def main(argv=None) -> None:
    from trl_entropy.demo import runner

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--testbed", default="smollm2", choices=sorted(TARGETS))
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--targets", nargs="+", default=["hold"])
    p.add_argument("--methods", nargs="+", default=["entropy_bonus"])
    p.add_argument("--seeds", default="0")
    p.add_argument("--h0", type=float, default=0.954)
    p.add_argument("--extra", default="{}", help="JSON {method: {config overrides}}, as tracking.py takes it")
    p.add_argument("--label", default="", help="suffix of the tracking run's label (to find it in its cache)")
    p.add_argument("--eval_at", default="80,84,88,92,96,100", help="comma-separated optimizer steps")
    p.add_argument("--results", default="benchmarks/results/late_policy_smollm2.jsonl.gz")
    p.add_argument("--tracking_results", default="benchmarks/results/tracking_smollm2.jsonl.gz")
    p.add_argument("--output_dir", default="/tmp/trl_entropy_late")
    a = p.parse_args(argv)
    extra = json.loads(a.extra)
    eval_at = tuple(int(s) for s in a.eval_at.split(","))
    cache = load_results(a.results)
    tracking = load_results(a.tracking_results) if os.path.exists(a.tracking_results) else {}
    for seed in (int(s) for s in a.seeds.split(",")):
        for target_name in a.targets:
            schedule, start_frac, end_ratio = TARGETS[a.testbed][target_name]
            for method in a.methods:
                ours, overrides, desc = {**runner.METHODS, **BASELINES}[method]
                spec = (ours, {**overrides, **extra.get(method, {})}, desc)
                label = f"{target_name}/{method}{a.label}"
                run = dict(testbed=a.testbed, label=label, seed=seed, steps=a.steps, spec=spec, method=method,
                           target_start=a.h0 * start_frac, schedule=schedule, end_ratio=end_ratio, anneal_ratio=0.3,
                           output_dir=a.output_dir)
                r = cached_run(cache, a.results, eval_at=eval_at, **run)
                same = cached_run(tracking, None, final_eval=True, cached_only=True, as_recorded=True, **run)
                check = ""
                if same is not None:
                    diff = max(abs(x - y) for x, y in zip(r["measured"], same["measured"]))
                    check = f" (entropy readings vs the cached tracking run: largest difference {diff:.1e})"
                print(f"{label} seed {seed}{check}")
                knob = r.get("knob") or []
                for step in eval_at:
                    ev = r["step_evals"].get(str(step), r["step_evals"].get(step))
                    c = [v for v in knob[max(0, step - 4):step] if v is not None]
                    print(f"  step {step:3d}: train sampled {ev['train_sampled']:.3f}  greedy {ev['train_greedy']:.3f}"
                          f"  test sampled {ev['test_sampled']:.3f}  coefficient, last 4 steps "
                          + " ".join(f"{v:+.2f}" for v in c), flush=True)


if __name__ == "__main__":
    main()
