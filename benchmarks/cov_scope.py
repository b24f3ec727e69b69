"""How the number of tokens Clip-Cov / KL-Cov select per optimizer step depends on the micro-batch size, per scope.

    python -m benchmarks.cov_scope [--steps 2] [--ratio 0.02]

Trains the pretrained testbed model (trl_entropy.demo.testbed) for a few optimizer steps of 64 rollouts each
(8 prompts x 8 completions), off-policy (two optimizer steps per generation batch), and splits every optimizer step
into micro-batches of 64, 16 or 4 rollouts (per_device_train_batch_size x gradient_accumulation_steps = 64). For
each method and `cov_scope` it prints the selected tokens per optimizer step (mean, min, max over the steps, from
`entropy_control/selected_tokens`) and the selected fraction of the valid completion tokens.

With `cov_scope="local"` (verl: quota `max(1, int(ratio * n))` per micro-batch and process) the count grows with the
number of micro-batches: the floor of one token per micro-batch and the rounding of each small quota add up. With
`cov_scope="global"` the quota is taken once from the whole step's token count, so it does not depend on the split.
Clip-Cov selects at most the quota among candidates in its covariance band, so it can select fewer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

SPLITS = [(64, 1), (16, 4), (4, 16)]  # (per_device_train_batch_size, gradient_accumulation_steps)


def run_once(method, scope, per_device, accumulation, steps, ratio, model_and_tok, datasets):
    from transformers.trainer_callback import PrinterCallback

    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.demo import testbed

    model, tok = model_and_tok
    kw = testbed.grpo_config_kwargs()
    kw.update(
        output_dir="/tmp/trl_entropy_cov_scope",
        max_steps=steps,
        seed=0,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=2 * accumulation,  # two optimizer steps per generation batch: off-policy
        entropy_control=method,
        cov_scope=scope,
    )
    kw[f"{method}_ratio"] = ratio
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=testbed.accuracy_reward, args=GRPOEntropyConfig(**kw),
                                 train_dataset=datasets[0], processing_class=tok)
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    hist = trainer.state.log_history
    selected = [h["entropy_control/selected_tokens"] for h in hist if "entropy_control/selected_tokens" in h]
    fraction = [h["entropy_control/selected_fraction"] for h in hist if "entropy_control/selected_fraction" in h]
    valid = [s / f for s, f in zip(selected, fraction) if f > 0]
    return selected, fraction, valid


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=2, help="optimizer steps per run")
    p.add_argument("--ratio", type=float, default=0.02, help="clip_cov_ratio and kl_cov_ratio")
    a = p.parse_args(argv)
    import copy

    import torch

    from trl_entropy.demo import testbed

    t0 = time.perf_counter()
    model, tok = testbed.load_or_pretrain(progress=False)
    datasets = testbed.make_datasets()
    rows = []
    for method in ("kl_cov", "clip_cov"):
        for scope in ("global", "local"):
            for per_device, accumulation in SPLITS:
                selected, fraction, valid = run_once(
                    method, scope, per_device, accumulation, a.steps, a.ratio, (copy.deepcopy(model), tok), datasets
                )
                rows.append((method, scope, per_device, accumulation, selected, fraction, valid))
    print(f"\n{a.steps} optimizer steps of 64 rollouts per run, ratio={a.ratio}, clip_cov band (1, 5), "
          f"steps_per_generation = 2 x gradient_accumulation_steps, torch threads={torch.get_num_threads()}")
    header = (f"{'method':<9} {'scope':<7} {'micro-batch':>11} {'GA':>3} {'valid tok/step':>14} "
              f"{'selected/step mean':>18} {'min':>4} {'max':>4} {'fraction':>9}")
    print(header + "\n" + "-" * len(header))
    for method, scope, per_device, accumulation, selected, fraction, valid in rows:
        print(f"{method:<9} {scope:<7} {per_device:>11} {accumulation:>3} {statistics.mean(valid):>14.1f} "
              f"{statistics.mean(selected):>18.2f} {min(selected):>4.0f} {max(selected):>4.0f} "
              f"{statistics.mean(fraction):>9.4f}")
    print(f"\ntotal time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
