"""Do Clip-Cov and KL-Cov keep entropy above plain GRPO on the testbed, and at which selection ratio?

    python -m benchmarks.cov_ratio [--steps 300] [--kl-ratios 0.002,0.02,0.05,0.1] [--clip-ratios 0.0002,0.02,0.05,0.1]

Same settings as `trl-entropy demo` (pretrained testbed model, 64 rollouts per optimizer step, lr 2e-4,
`steps_per_generation=4` so 3 of every 4 optimizer steps are off-policy, seed 0); every run is a
`GRPOEntropyTrainer`, plain GRPO being `entropy_control="none"` (proved identical to TRL's `GRPOTrainer`). The papers'
ratios (KL-Cov 2e-3, Clip-Cov 2e-4) are fractions of the tokens of a step; with the ~250 completion tokens of a
testbed step they select the floor of one token, so the script also runs larger ratios. Clip-Cov keeps its paper band
(1 < cov < 5) unless `--clip-band` is given.

With `--seeds 0,1,2` every run is repeated per seed and the table gives mean ± sd over seeds.
Printed per run: mean token entropy at steps 50 and 150 and over the last 10% of steps, the final reward (last 10%),
the mean number of tokens selected per step and the mean covariance Cov(logp, A) over the first 50 steps.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def run_once(overrides: dict, steps: int, train_ds, seed: int = 0) -> dict:
    from transformers.trainer_callback import PrinterCallback

    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.demo import testbed

    model, tok = testbed.load_or_pretrain(progress=False)  # a fresh copy: training changes the model in place
    kw = testbed.grpo_config_kwargs()
    kw.update(output_dir="/tmp/trl_entropy_cov_ratio", max_steps=steps, seed=seed, steps_per_generation=4,
              entropy_plots=False, **overrides)
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=testbed.accuracy_reward, args=GRPOEntropyConfig(**kw),
                                 train_dataset=train_ds, processing_class=tok)
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    rows = [h for h in trainer.state.log_history if "loss" in h]
    entropy = [h["entropy_control/measured"] for h in rows]
    reward = [h["reward"] for h in rows if "reward" in h]  # logged on the steps that generate
    tail = max(1, len(rows) // 10)

    def at(step):
        window = entropy[max(0, step - 5) : step + 5]
        return statistics.mean(window) if window else float("nan")

    selected = [h["entropy_control/selected_tokens"] for h in rows if "entropy_control/selected_tokens" in h]
    cov = [h["entropy_control/covariance_mean"] for h in rows[:50] if "entropy_control/covariance_mean" in h]
    return {
        "H@50": at(50),
        "H@150": at(150),
        "H final": statistics.mean(entropy[-tail:]),
        "reward final": statistics.mean(reward[-tail:]),
        "selected/step": statistics.mean(selected) if selected else 0.0,
        "cov (first 50)": statistics.mean(cov) if cov else float("nan"),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--kl-ratios", default="0.002,0.02,0.05,0.1")
    p.add_argument("--clip-ratios", default="0.0002,0.02,0.05,0.1")
    p.add_argument("--clip-band", default=None, help="lb,ub for Clip-Cov (default: the paper's 1,5)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds; with several, mean ± sd over seeds")
    a = p.parse_args(argv)
    from trl_entropy.demo import testbed

    t0 = time.perf_counter()
    testbed.load_or_pretrain(progress=False)  # pretrain (or load the cache) before the runs
    train_ds, _ = testbed.make_datasets()
    runs = [("grpo (none)", {"entropy_control": "none"})]
    runs += [(f"kl_cov ratio={r:g}", {"entropy_control": "kl_cov", "kl_cov_ratio": r}) for r in _floats(a.kl_ratios)]
    band = {}
    if a.clip_band:
        lb, ub = _floats(a.clip_band)
        band = {"clip_cov_lb": lb, "clip_cov_ub": ub}
    runs += [(f"clip_cov ratio={r:g}", {"entropy_control": "clip_cov", "clip_cov_ratio": r, **band})
             for r in _floats(a.clip_ratios)]
    seeds = [int(x) for x in a.seeds.split(",")]
    results = []
    for name, overrides in runs:
        per_seed = []
        for seed in seeds:
            print(f"running {name} seed {seed} ...", file=sys.stderr, flush=True)
            per_seed.append(run_once(overrides, a.steps, train_ds, seed))
        results.append((name, per_seed))
    cols = list(results[0][1][0])
    print(f"\n{a.steps} steps, steps_per_generation=4, seeds {seeds} ({time.perf_counter() - t0:.0f} s)")
    print("| run | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))

    def cell(values, col):
        digits = 1 if col == "selected/step" else 3
        if any(math.isnan(v) for v in values):
            return "–"
        mean = statistics.mean(values)
        if len(values) == 1:
            return f"{mean:.{digits}f}"
        return f"{mean:.{digits}f} ± {statistics.stdev(values):.{digits}f}"

    for name, per_seed in results:
        print(f"| {name} | " + " | ".join(cell([r[c] for r in per_seed], c) for c in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
