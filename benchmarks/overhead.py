"""Step-time overhead of each entropy control against plain TRL GRPOTrainer, in one process and run.

    python benchmarks/overhead.py [--steps 60] [--repeats 3]

Every configuration trains the pretrained testbed model for the same steps with the same seed, off-policy
(steps_per_generation=4, so clip bounds and KL-Cov-like terms act), and the runs are interleaved across repeats so
drift of the machine hits all of them alike. Reported: median optimizer-step time (TRL's own `step_time`, which
includes generation on the steps that generate), its ratio to plain GRPOTrainer, and the median wall time of a
whole run. Target (issue tracker): <= 1.03x time on CPU.

Memory: the peak RSS of one process only grows across runs, so it cannot separate configurations run in one
process; with `--memory`, every configuration is also trained once in a fresh child process of its own (same steps)
and its peak resident set size (`ru_maxrss`) is reported next to plain GRPOTrainer's. On CPU this includes the
Python/torch runtime (~hundreds of MB), so it bounds what a control adds rather than isolating it.
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
    "clip_cov": {"entropy_control": "clip_cov"},
    "kl_cov": {"entropy_control": "kl_cov"},
    "entropic": {"entropy_control": "entropic", "entropy_schedule_start": 0.4},
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


def peak_rss_mb(name, steps) -> float:
    """Train ``name`` once in a fresh child process; its peak resident set size in MiB."""
    import json
    import subprocess

    out = subprocess.run([sys.executable, __file__, "--child", name, "--steps", str(steps)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["peak_rss_mb"]


def child(name, steps):
    import json
    import resource

    run_once(name, CONFIGS[name], steps, seed=0)
    print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--memory", action="store_true", help="also measure peak RSS per configuration (child processes)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(a.child, a.steps)
        return 0
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
    memory = {name: peak_rss_mb(name, a.steps) for name in CONFIGS} if a.memory else {}
    base = statistics.median(samples["grpo (TRL GRPOTrainer)"])
    base_wall = statistics.median(walls["grpo (TRL GRPOTrainer)"])
    print(f"\n{a.steps} steps x {a.repeats} repeats, steps_per_generation=4, torch threads={torch.get_num_threads()}")
    header = f"{'configuration':<28} {'median step ms':>14} {'vs TRL':>7} {'median run s':>12} {'vs TRL':>7}"
    if memory:
        header += f" {'peak RSS MiB':>12} {'vs TRL':>7}"
    print(header + "\n" + "-" * len(header))
    base_mem = memory.get("grpo (TRL GRPOTrainer)")
    for name in CONFIGS:
        med = statistics.median(samples[name])
        wall = statistics.median(walls[name])
        line = f"{name:<28} {1000 * med:>14.1f} {med / base:>6.3f}x {wall:>12.2f} {wall / base_wall:>6.3f}x"
        if memory:
            line += f" {memory[name]:>12.1f} {memory[name] / base_mem:>6.3f}x"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
