"""Step-time overhead of each entropy control against plain TRL GRPOTrainer, in one process and run.

    python benchmarks/overhead.py [--steps 60] [--repeats 3]

Every configuration trains the pretrained testbed model for the same steps with the same seed, off-policy
(steps_per_generation=4, so clip bounds and KL-Cov-like terms act), and the runs are interleaved across repeats so
drift of the machine hits all of them alike. Reported: median optimizer-step time (TRL's own `step_time`, which
includes generation on the steps that generate), its ratio to plain GRPOTrainer, and the median wall time of a
whole run. Target (issue tracker): <= 1.03x time on CPU. Memory is not measured yet (the process's peak RSS only
grows across runs, so it cannot separate configurations run in one process).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")

CONFIGS = {
    "grpo (TRL GRPOTrainer)": None,
    "none (GRPOEntropyTrainer)": {"entropy_control": "none"},
    "adaptive_clip": {"entropy_control": "adaptive_clip", "entropy_schedule_start": 0.4},
    "entrocraft": {"entropy_control": "entrocraft", "entropy_schedule_start": 0.4},
    "positive_reweight": {"entropy_control": "positive_reweight", "entropy_schedule_start": 0.4},
    "w_reinforce": {"entropy_control": "w_reinforce"},
}


def run_once(name, overrides, steps, seed):
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.demo import testbed

    model, tok = testbed.load_or_pretrain(progress=False)
    train_ds, _ = testbed.make_datasets()
    kw = testbed.grpo_config_kwargs()
    kw.update(output_dir="/tmp/trl_entropy_bench", max_steps=steps, seed=seed, steps_per_generation=4)
    if overrides is None:
        trainer = GRPOTrainer(model=model, reward_funcs=testbed.accuracy_reward, args=GRPOConfig(**kw),
                              train_dataset=train_ds, processing_class=tok)
    else:
        trainer = GRPOEntropyTrainer(model=model, reward_funcs=testbed.accuracy_reward,
                                     args=GRPOEntropyConfig(**kw, **overrides), train_dataset=train_ds,
                                     processing_class=tok)
    trainer.remove_callback(PrinterCallback)
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h][5:]  # skip warm-up steps
    return times, wall


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    run_once("warm-up", None, 4, 0)  # pretrain/cache and warm up kernels outside the measurement
    samples = {name: [] for name in CONFIGS}
    walls = {name: [] for name in CONFIGS}
    for r in range(a.repeats):
        for name, overrides in CONFIGS.items():
            times, wall = run_once(name, overrides, a.steps, seed=r)
            samples[name] += times
            walls[name].append(wall)
    base = statistics.median(samples["grpo (TRL GRPOTrainer)"])
    base_wall = statistics.median(walls["grpo (TRL GRPOTrainer)"])
    print(f"\n{a.steps} steps x {a.repeats} repeats, steps_per_generation=4, torch threads={torch.get_num_threads()}")
    header = f"{'configuration':<28} {'median step ms':>14} {'vs TRL':>7} {'median run s':>12} {'vs TRL':>7}"
    print(header + "\n" + "-" * len(header))
    for name in CONFIGS:
        med = statistics.median(samples[name])
        wall = statistics.median(walls[name])
        print(f"{name:<28} {1000 * med:>14.1f} {med / base:>6.3f}x {wall:>12.2f} {wall / base_wall:>6.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
