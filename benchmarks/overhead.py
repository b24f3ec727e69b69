"""Step-time overhead of each entropy control against plain TRL GRPOTrainer, in one process and run.

    python -m benchmarks.overhead [--testbed tiny|smollm2] [--steps N] [--repeats 3] [--ga 1] [--only NAME ...]
                                  [--memory]

Every configuration trains the testbed's starting model for the same steps with the same seed, off-policy
(steps_per_generation=4, so clip bounds and KL-Cov-like terms act), and the runs are interleaved across repeats so
drift of the machine hits all of them alike. Reported: median optimizer-step time (TRL's own `step_time`, which
includes generation on the steps that generate), its ratio to plain GRPOTrainer, the mean step time (the run's
total step time over its steps: on the SmolLM2 testbed a generating step costs ~3x a training step, and the median
hides that part), and the median wall time of a whole run. `--testbed smollm2` measures at a realistic vocabulary
(49,152) on a real pretrained LLM (default 16 steps per run, the first 4 skipped as warm-up). Target (issue tracker): <= 1.03x time on CPU. Our configurations run with `entropy_plots=False` (the
controls alone); the row "none + PNG pictures" shows what the default end-of-training pictures add.

Memory: the peak RSS of one process only grows across runs, so it cannot separate configurations run in one
process; with `--memory`, every configuration is also trained once in a fresh child process of its own (same steps)
and the peak resident set size of its training phase is reported next to plain GRPOTrainer's (Linux: the kernel's
peak-RSS counter is reset after imports and a 2-step warm-up run, then read after training). It still includes the
resident runtime (~500 MB here), so the ratio bounds what a control adds from above; "added MiB" is the peak minus
the resident size when training started.

`--ga N` runs every configuration with N micro-batches per optimizer step (`gradient_accumulation_steps=N`, micro-batch
64/N, `steps_per_generation=4N`: the same 64 completions per optimizer step and 4 optimizer steps per generation
batch), the setting where the global covariance scope needs its extra no-grad forward. `--only` restricts the table
to some configurations (plain GRPOTrainer is always included as the reference).
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
    "none + PNG pictures": {"entropy_control": "none", "entropy_plots": True},
    "adaptive_clip": {"entropy_control": "adaptive_clip", "entropy_schedule_start": 0.4},
    "entrocraft": {"entropy_control": "entrocraft", "entropy_schedule_start": 0.4},
    "positive_reweight": {"entropy_control": "positive_reweight", "entropy_schedule_start": 0.4},
    "w_reinforce": {"entropy_control": "w_reinforce"},
    "clip_cov": {"entropy_control": "clip_cov"},
    "clip_cov (local scope)": {"entropy_control": "clip_cov", "cov_scope": "local"},
    "kl_cov": {"entropy_control": "kl_cov"},
    "kl_cov (local scope)": {"entropy_control": "kl_cov", "cov_scope": "local"},
    "entropic": {"entropy_control": "entropic", "entropy_schedule_start": 0.4},
}


GA = 1  # set by --ga
TESTBED = "tiny"  # set by --testbed
DEFAULT_STEPS = {"tiny": 60, "smollm2": 16}
WARMUP_STEPS = {"tiny": 5, "smollm2": 4}  # skipped: kernels warm up (smollm2: the whole first generation batch)


def run_once(name, overrides, steps, seed):
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.testbeds import get_testbed

    tb = get_testbed(TESTBED)
    model, tok = tb.load(False)
    train_ds, _ = tb.datasets(0)
    kw = tb.grpo_config_kwargs()
    kw.update(output_dir="/tmp/trl_entropy_bench", max_steps=steps, seed=seed, steps_per_generation=4 * GA,
              gradient_accumulation_steps=GA, per_device_train_batch_size=kw["per_device_train_batch_size"] // GA,
              save_strategy="no", report_to="none", logging_steps=1, disable_tqdm=True)
    if overrides is None:
        trainer = GRPOTrainer(model=model, reward_funcs=tb.reward, args=GRPOConfig(**kw),
                              train_dataset=train_ds, processing_class=tok)
    else:
        trainer = GRPOEntropyTrainer(model=model, reward_funcs=tb.reward,
                                     args=GRPOEntropyConfig(**{"entropy_plots": False, **kw, **overrides}),
                                     train_dataset=train_ds,
                                     processing_class=tok)
    trainer.remove_callback(PrinterCallback)
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h][WARMUP_STEPS[TESTBED]:]
    return times, wall


def peak_rss_mb(name, steps) -> tuple[float, float]:
    """Train ``name`` once in a fresh child process: (peak RSS of the training phase, peak minus the RSS at its
    start), in MiB."""
    import json
    import subprocess

    cmd = [sys.executable, __file__, "--child", name, "--steps", str(steps), "--ga", str(GA), "--testbed", TESTBED]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    return row["peak_rss_mb"], row["added_mb"]


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter of this process (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(name, steps):
    """Peak RSS of the training phase alone: the counter is reset after imports and the testbed load, so the
    import-time peak of torch/transformers (the same for every configuration) does not hide what training adds."""
    import json
    import resource

    run_once("warm-up", None, 2, 0)  # imports, testbed load and kernel warm-up happen before the reset
    if _reset_peak_rss():
        start = _status_mb("VmRSS")
        run_once(name, CONFIGS[name], steps, seed=0)
        peak = _status_mb("VmHWM")
    else:  # not Linux: whole-process peak, dominated by the runtime
        start = 0.0
        run_once(name, CONFIGS[name], steps, seed=0)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_rss_mb": peak, "added_mb": peak - start}))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--testbed", default="tiny", choices=["tiny", "smollm2"])
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default: tiny 60, smollm2 16)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--memory", action="store_true", help="also measure peak RSS per configuration (child processes)")
    p.add_argument("--ga", type=int, default=1, help="micro-batches per optimizer step (1, 2, 4, 8, ...)")
    p.add_argument("--only", nargs="+", choices=list(CONFIGS), help="configurations to run (plus plain GRPOTrainer)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    global GA, TESTBED
    TESTBED = a.testbed
    a.steps = a.steps or DEFAULT_STEPS[TESTBED]
    batch = 64 if TESTBED == "tiny" else 12
    if a.ga < 1 or batch % a.ga:
        p.error(f"--ga must divide {batch} (the testbed's completions per optimizer step)")
    GA = a.ga
    if a.only:
        for name in list(CONFIGS):
            if name != "grpo (TRL GRPOTrainer)" and name not in a.only:
                del CONFIGS[name]
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
    base_mean = statistics.mean(samples["grpo (TRL GRPOTrainer)"])
    base_wall = statistics.median(walls["grpo (TRL GRPOTrainer)"])
    print(f"\n{TESTBED} testbed, {a.steps} steps x {a.repeats} repeats (first {WARMUP_STEPS[TESTBED]} steps of each "
          f"run skipped), gradient_accumulation_steps={GA}, steps_per_generation={4 * GA}, "
          f"torch threads={torch.get_num_threads()}")
    header = (f"{'configuration':<28} {'median step ms':>14} {'vs TRL':>7} {'mean step ms':>12} {'vs TRL':>7} "
              f"{'median run s':>12} {'vs TRL':>7}")
    if memory:
        header += f" {'peak RSS MiB':>12} {'vs TRL':>7} {'added MiB':>9}"
    print(header + "\n" + "-" * len(header))
    base_mem = memory.get("grpo (TRL GRPOTrainer)")
    for name in CONFIGS:
        med = statistics.median(samples[name])
        mean = statistics.mean(samples[name])
        wall = statistics.median(walls[name])
        line = (f"{name:<28} {1000 * med:>14.1f} {med / base:>6.3f}x {1000 * mean:>12.1f} {mean / base_mean:>6.3f}x "
                f"{wall:>12.2f} {wall / base_wall:>6.3f}x")
        if memory:
            peak, added = memory[name]
            line += f" {peak:>12.1f} {peak / base_mem[0]:>6.3f}x {added:>9.1f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
