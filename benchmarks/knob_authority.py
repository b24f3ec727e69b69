"""How far can the advantage-sign knobs move entropy on the testbed? (The range of Entrocraft's and λ's plant.)

    python benchmarks/knob_authority.py [--steps 300] [--seeds 0]

Entrocraft and positive-advantage reweighting steer entropy by choosing which sign of advantage reaches the policy
gradient. Their strongest possible action is a fixed extreme: *every* step negative-advantage rollouts only (what
Entrocraft does while entropy is below its band, and what λ = 0 does), or positive-advantage rollouts only (Entrocraft
above its band). A controller that switches between the two can hold entropy only inside the range those two
extremes reach: if entropy falls even with negatives only, no rejection schedule can hold a constant target, and a
decaying target can be followed only while it decays more slowly than that.

This script trains the testbed in the demo's setting (lr 2e-4, `steps_per_generation=4`) with plain GRPO and with
each extreme held for the whole run, and prints the entropy reached. Entrocraft is forced to one side by a constant
target far outside the measurable range (hard mode: 10 nats keeps negatives only, 0 nats keeps positives only).
"""

from __future__ import annotations

import argparse
import os
import statistics
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

RUNS = {
    "plain GRPO": (False, {}),
    "negatives only (Entrocraft below its band)": (
        True, {"entropy_control": "entrocraft", "entrocraft_mode": "hard", "entropy_schedule": "constant",
               "entropy_schedule_start": 10.0}),
    "negatives only, all tokens in the normaliser (λ = 0)": (
        True, {"entropy_control": "w_reinforce", "w_reinforce_lambda": 0.0}),
    "positives only (Entrocraft above its band)": (
        True, {"entropy_control": "entrocraft", "entrocraft_mode": "hard", "entropy_schedule": "constant",
               "entropy_schedule_start": 0.0}),
}


def _window_mean(values, center, half=5):
    window = [v for v in values[max(0, center - half): center + half] if v is not None]
    return sum(window) / len(window) if window else float("nan")


def main(argv=None) -> None:
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.demo import testbed

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", default="0", help="comma-separated training seeds")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    marks = [10, 50, 150, args.steps - 5]

    recipe = testbed.TestbedRecipe()
    testbed.load_or_pretrain(recipe, progress=True)
    train_ds, _ = testbed.make_datasets(recipe, seed=0)
    results: dict[str, list] = {name: [] for name in RUNS}
    for name, (ours, overrides) in RUNS.items():
        for seed in seeds:
            model, tokenizer = testbed.load_or_pretrain(recipe, progress=False)
            kwargs = dict(testbed.grpo_config_kwargs(recipe))
            kwargs.update(output_dir="/tmp/trl_entropy_knob_authority", max_steps=args.steps, seed=seed,
                          steps_per_generation=4, **overrides)
            if ours:
                kwargs["entropy_plots"] = False
            config = (GRPOEntropyConfig if ours else GRPOConfig)(**kwargs)
            trainer = (GRPOEntropyTrainer if ours else GRPOTrainer)(
                model=model, reward_funcs=testbed.accuracy_reward, args=config, train_dataset=train_ds,
                processing_class=tokenizer)
            trainer.remove_callback(PrinterCallback)
            trainer.train()
            hist = [h for h in trainer.state.log_history if "entropy" in h and "step" in h]
            entropy = [h["entropy"] for h in hist]
            reward = [h.get("reward") for h in hist]
            half = next((h["step"] for h in hist if h["entropy"] <= entropy[0] / 2), None)
            results[name].append(([_window_mean(entropy, m) for m in marks],
                                  _window_mean(reward, args.steps - 5, half=args.steps // 10), half))
            print(f"{name} seed {seed}: entropy " + " ".join(f"{v:.3f}" for v in results[name][-1][0]), flush=True)

    def fmt(values, digits=3):
        values = [v for v in values if v is not None]
        if not values:
            return "never"
        if len(values) == 1:
            return f"{values[0]:.{digits}f}"
        return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"

    print(f"\ntestbed, demo setting, {args.steps} optimizer steps, seeds {seeds}; entropy (nats, token-mean) as the "
          "mean over 10 steps around each step; reward = mean of the last 10%")
    header = "| run | " + " | ".join(f"H@{m}" for m in marks[:-1]) + " | H final | reward final | step H halves |"
    print(header)
    print("|---" * (len(marks) + 4) + "|")
    for name, runs in results.items():
        cells = [fmt([r[0][i] for r in runs]) for i in range(len(marks))]
        print(f"| {name} | " + " | ".join(cells) + f" | {fmt([r[1] for r in runs])} | "
              f"{fmt([r[2] for r in runs], digits=0)} |")


if __name__ == "__main__":
    main()
