"""Which way does `epsilon_high` move entropy on the testbed? (The sign of adaptive clip-higher's plant.)

    python -m benchmarks.clip_direction [--steps 150] [--eps 0.0 0.2 1.0]

Adaptive clip-higher (Wang et al.) assumes that a looser upper clip raises entropy: positive-advantage tokens of *low*
probability are the ones whose importance ratio reaches 1 + epsilon_high first, so loosening the bound lets them
grow. Whether that holds is a property of the task and the model, not of the controller. This script trains plain
GRPO on the testbed with fixed `epsilon_high` values, off-policy (several optimizer steps per generation batch, the
only setting where a clip bound acts), and prints the entropy reached, the reward and the fraction of tokens TRL
clipped at the upper bound. If entropy *falls* as `epsilon_high` rises, the controller's feedback has the wrong sign
for this task and it cannot hold a target (see docs/benchmarks.md, "Which way the clip bound moves entropy").
"""

from __future__ import annotations

import argparse
import os
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")


def _tail_mean(values, fraction=0.1):
    values = [v for v in values if v is not None]
    if not values:
        return float("nan")
    tail = values[-max(1, int(len(values) * fraction)):]
    return sum(tail) / len(tail)


def main(argv=None) -> None:
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_entropy.demo import testbed

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--eps", type=float, nargs="+", default=[0.0, 0.2, 1.0])
    parser.add_argument("--settings", nargs="+", default=["5e-4,4,1", "3e-4,4,4"],
                        help="learning_rate,steps_per_generation,num_iterations triples")
    args = parser.parse_args(argv)

    recipe = testbed.TestbedRecipe()
    model0, tokenizer = testbed.load_or_pretrain(recipe, progress=True)
    train_ds, _ = testbed.make_datasets(recipe, seed=0)
    rows = []
    for setting in args.settings:
        lr, spg, iters = setting.split(",")
        for eps in args.eps:
            model, _ = testbed.load_or_pretrain(recipe, progress=False)
            kwargs = dict(testbed.grpo_config_kwargs(recipe))
            kwargs.update(output_dir="/tmp/trl_entropy_clip_direction", max_steps=args.steps, seed=0,
                          learning_rate=float(lr), steps_per_generation=int(spg), num_iterations=int(iters),
                          epsilon_high=eps)
            trainer = GRPOTrainer(model=model, reward_funcs=testbed.accuracy_reward, args=GRPOConfig(**kwargs),
                                  train_dataset=train_ds, processing_class=tokenizer)
            trainer.remove_callback(PrinterCallback)
            trainer.train()
            hist = [h for h in trainer.state.log_history if "loss" in h]
            rows.append((setting, eps, _tail_mean([h.get("entropy") for h in hist]),
                         _tail_mean([h.get("reward") for h in hist]),
                         _tail_mean([h.get("clip_ratio/high_mean") for h in hist], fraction=1.0)))
    print(f"\nplain GRPOTrainer on the testbed, {args.steps} optimizer steps; entropy and reward = mean of the last 10%")
    print(f"{'lr,steps_per_generation,num_iterations':<40} {'epsilon_high':>12} {'entropy':>8} {'reward':>7} "
          f"{'clipped high':>12}")
    for setting, eps, h, r, c in rows:
        print(f"{setting:<40} {eps:>12.2f} {h:>8.3f} {r:>7.3f} {100 * c:>11.2f}%")


if __name__ == "__main__":
    main()
