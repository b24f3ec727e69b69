"""The tracking suite: does `entropy_bonus` hold the curve a user wrote on tasks and settings it was not tuned on?

    python -m benchmarks.tracking_suite [--cells NAME ...] [--testbed tiny|smollm2] [--cached_only] [--plot PNG]
                                        [--results FILE] [--law LABEL]

The cells are written down in `docs/tracking-suite.md` (the pre-registration) and in `CELLS` below; neither changes
after a result is seen. Every cell trains the recommended control at its package defaults (`entropy_control=
"entropy_bonus"`, nothing else of the law set) on a task built here, not on the demo's addition family:

* tiny testbed (the demo's character-level model, pretrained on 2-digit addition, prompts "ab+cd="): `mirror` (the
  first operand's digits reversed, partial credit per position), `absdiff` (|a - b|, exact: most groups fail),
  `units` (the last digit of a + b, one token, exact), `plus11` (a + b + 11, partial credit), `twice` (the sum
  written twice, up to 6 tokens, partial credit);
* SmolLM2-135M-Instruct: `sub` (two-shot subtraction a - b, 10 <= a < 100, b < 10, exact).

Plain GRPO (`entropy_control="none"`) runs on each task's base cell to show which way the task drives the entropy.

Per run it records the measured entropy, the target, the coefficient, `entropy_control/saturated` and each step's
measurement standard error (`entropy_control/measured_se`). Per cell (mean over seeds) it prints:
* err: the tracking error (`trl_entropy.metrics.tracking_error`: MA10 relative error after the first 20% of steps);
* floor: the noise floor, the error a policy whose entropy sat exactly on the target would still show given each
  step's measurement noise (`noise_floor`);
* out: the share of steps (after the first 20%) with the MA5 entropy beyond +-30% of the target;
* sat: the first step `saturated` was 1 ("-": never); drift: plain GRPO's final/initial entropy on the cell's task.
Each run is cached as one line of `--results` (gzip JSON lines), keyed by the cell, the seed and the law's source
hash (`law_id`), so a table is never served from another version of the law.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import hashlib
import json
import math
import os
import random
import statistics
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RESULTS = os.path.join(os.path.dirname(__file__), "results", "tracking_suite.jsonl.gz")
# the files whose code decides how the law acts: their hash keys every cached run
LAW_FILES = ("trl_entropy/scheduling/bonus.py", "trl_entropy/scheduling/controllers.py",
             "trl_entropy/controls/entropy_bonus.py", "trl_entropy/scheduling/measurement.py",
             "trl_entropy/trainers/grpo_entropy_trainer.py", "trl_entropy/scheduling/targets.py")
TINY_LR = 2e-4  # the tiny testbed's own learning rate (trl_entropy.demo.testbed.grpo_config_kwargs)
SMOLLM2_LR = 1e-5  # the SmolLM2 testbed's (trl_entropy.testbeds.addition.grpo_config_kwargs)
TARGETS = {  # name -> (schedule, start, end)
    "hold": ("constant", "initial", "initial"),
    "wsd": ("wsd", "initial", "0.5*initial"),
    "linear": ("linear", "initial", "0.5*initial"),
    "raised": ("constant", "1.3*initial", "1.3*initial"),
}


# ---------------------------------------------------------------------------------------------------------- tasks
def _digits_partial(got: str, want: str) -> float:
    """Partial credit: the share of positions where ``got`` and ``want`` agree, over the longer of the two."""
    if not got:
        return 0.0
    return sum(a == b for a, b in zip(got, want)) / max(len(got), len(want))


def _tiny_answer(task: str, a: int, b: int) -> str:
    if task == "mirror":
        return f"{a:02d}"[::-1]
    if task == "absdiff":
        return str(abs(a - b))
    if task == "units":
        return str((a + b) % 10)
    if task == "plus11":
        return str(a + b + 11)
    if task == "twice":
        return str(a + b) * 2
    raise ValueError(f"unknown tiny task {task!r}")


TINY_TASKS = {"mirror": "partial", "absdiff": "exact", "units": "exact", "plus11": "partial", "twice": "partial"}
TINY_COMPLETION_LENGTH = {"twice": 7}  # tokens: the answer plus eos (the others: the testbed's 4)


def tiny_reward(task: str):
    from trl_entropy.demo.testbed import _extract_answer

    partial = TINY_TASKS[task] == "partial"

    def reward(completions, answer, **kwargs):
        got = [_extract_answer(c) for c in completions]
        if partial:
            return [_digits_partial(g, str(a)) for g, a in zip(got, answer)]
        return [1.0 if g and g == str(a) else 0.0 for g, a in zip(got, answer)]

    reward.__name__ = f"{task}_reward"
    return reward


def tiny_dataset(task: str, seed: int, n: int = 4096):
    from datasets import Dataset

    rng = random.Random(1000 + seed)
    rows = []
    for _ in range(n):
        a, b = rng.randrange(100), rng.randrange(100)
        rows.append({"prompt": f"{a}+{b}=", "answer": _tiny_answer(task, a, b)})
    return Dataset.from_list(rows)


SUB_PREFIX = "47-5=42\n83-9=74\n"


def smollm2_dataset(seed: int, n: int = 4096):
    from datasets import Dataset

    rng = random.Random(2000 + seed)
    problems = [(a, b) for a in range(10, 100) for b in range(10)]
    rows = [{"prompt": f"{SUB_PREFIX}{a}-{b}=", "answer": str(a - b)} for a, b in (rng.choice(problems)
                                                                                  for _ in range(n))]
    return Dataset.from_list(rows)


# ---------------------------------------------------------------------------------------------------------- cells
@dataclasses.dataclass(frozen=True)
class Cell:
    testbed: str  # "tiny" or "smollm2"
    task: str
    target: str  # a key of TARGETS
    steps: int
    lr_factor: float = 1.0  # times the testbed's own learning rate
    steps_per_generation: int = 1  # updates per generation batch (tiny; SmolLM2 keeps its testbed's 4)
    prompts: int = 8  # prompts per optimizer step (tiny: 8 completions each)
    lora: bool = False
    method: str = "entropy_bonus"  # or "none": plain GRPO, the task's drift

    @property
    def name(self) -> str:
        parts = [self.testbed, self.task, self.target if self.method != "none" else "grpo", f"{self.steps}st"]
        if self.lr_factor != 1.0:
            parts.append(f"lr{self.lr_factor:g}x")
        if self.steps_per_generation != 1:
            parts.append(f"spg{self.steps_per_generation}")
        if self.prompts != 8:
            parts.append(f"b{self.prompts}")
        if self.lora:
            parts.append("lora")
        return "/".join(parts)


SEEDS = (0, 1, 2)


def _cells() -> list[Cell]:
    cells = []
    # 1. every task, hold and WSD, at the base loop (on-policy, 8 prompts x 8, the testbed's learning rate, 100 steps)
    for task in TINY_TASKS:
        cells.append(Cell("tiny", task, "hold", 100, method="none"))  # the task's own drift
        for target in ("hold", "wsd"):
            cells.append(Cell("tiny", task, target, 100))
    # 2. the other two targets on two tasks of opposite reward density
    for task in ("mirror", "absdiff"):
        for target in ("linear", "raised"):
            cells.append(Cell("tiny", task, target, 100))
    # 3. one factor at a time on the same two tasks, hold and WSD
    for task in ("mirror", "absdiff"):
        for target in ("hold", "wsd"):
            cells += [Cell("tiny", task, target, 25), Cell("tiny", task, target, 300),
                      Cell("tiny", task, target, 100, lr_factor=5.0), Cell("tiny", task, target, 100, lr_factor=25.0),
                      Cell("tiny", task, target, 100, steps_per_generation=4),
                      Cell("tiny", task, target, 100, prompts=32)]
    # 4. LoRA at a LoRA-typical rate (r 8, 5x the full fine-tuning rate)
    for target in ("hold", "wsd"):
        cells.append(Cell("tiny", "mirror", target, 100, lr_factor=5.0, lora=True))
    # 5. SmolLM2 on subtraction, its testbed's loop (4 updates per generation, 3 prompts x 4, lr 1e-5)
    cells += [Cell("smollm2", "sub", "hold", 40, steps_per_generation=4, method="none"),
              Cell("smollm2", "sub", "hold", 40, steps_per_generation=4),
              Cell("smollm2", "sub", "wsd", 40, steps_per_generation=4),
              Cell("smollm2", "sub", "hold", 100, steps_per_generation=4),
              Cell("smollm2", "sub", "wsd", 100, steps_per_generation=4)]
    return cells


CELLS = _cells()


def law_id() -> str:
    """A short hash of the source of the files that decide how the law acts (`LAW_FILES`)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for path in LAW_FILES:
        with open(os.path.join(root, path), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


# ---------------------------------------------------------------------------------------------------------- runs
def _config(cell: Cell, seed: int, output_dir: str) -> dict:
    if cell.testbed == "tiny":
        from trl_entropy.demo.testbed import grpo_config_kwargs

        kwargs = grpo_config_kwargs(learning_rate=TINY_LR * cell.lr_factor, per_device_train_batch_size=8 * cell.prompts,
                                    steps_per_generation=cell.steps_per_generation)
        if cell.task in TINY_COMPLETION_LENGTH:
            kwargs["max_completion_length"] = TINY_COMPLETION_LENGTH[cell.task]
    else:
        from trl_entropy.testbeds.addition import grpo_config_kwargs

        kwargs = grpo_config_kwargs(learning_rate=SMOLLM2_LR * cell.lr_factor)
    kwargs.update(output_dir=output_dir, max_steps=cell.steps, seed=seed, entropy_control=cell.method)
    if cell.method != "none":
        schedule, start, end = TARGETS[cell.target]
        kwargs.update(entropy_schedule=schedule, entropy_schedule_start=start, entropy_schedule_end=end)
    return kwargs


def train_cell(cell: Cell, seed: int, output_dir: str = "/tmp/trl_entropy_suite") -> dict:
    """Train one run of ``cell`` and return its per-step record."""
    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer

    warnings.filterwarnings("ignore")
    if cell.testbed == "tiny":
        from trl_entropy.demo.testbed import load_or_pretrain

        model, tokenizer = load_or_pretrain(progress=False)
        train, reward = tiny_dataset(cell.task, seed), tiny_reward(cell.task)
    else:
        from trl_entropy.testbeds.addition import accuracy_reward
        from trl_entropy.testbeds.gguf import smollm2

        model, tokenizer = smollm2(progress=False)
        train, reward = smollm2_dataset(seed), accuracy_reward
    peft_config = None
    if cell.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM")
    args = GRPOEntropyConfig(**_config(cell, seed, output_dir))
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=reward, args=args, train_dataset=train,
                                 processing_class=tokenizer, peft_config=peft_config)
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    t0 = time.perf_counter()
    trainer.train()
    rows = [h for h in trainer.state.log_history if "entropy_control/measured" in h]
    p = "entropy_control/"

    def col(key, digits=5):
        return [None if h.get(key) is None else round(float(h[key]), digits) for h in rows]

    return {"measured": col(p + "measured"), "target": col(p + "target"), "se": col(p + "measured_se"),
            "coef": col(p + "entropy_coef"), "saturated": col(p + "saturated", 1), "reward": col("reward", 4),
            "initial": getattr(trainer, "initial_entropy", None),
            "initial_se": getattr(trainer, "initial_entropy_se", None), "seconds": round(time.perf_counter() - t0, 1)}


def run_key(cell: Cell, seed: int, law: str) -> str:
    return json.dumps([dataclasses.asdict(cell), seed, law], sort_keys=True)


def load(path: str) -> dict:
    out = {}
    if os.path.exists(path):
        with gzip.open(path, "rt") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    out[row["key"]] = row
    return out


def append(path: str, row: dict) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with gzip.open(path, "at") as f:  # one gzip member per run: appending keeps the file valid
        f.write(json.dumps(row) + "\n")


# ---------------------------------------------------------------------------------------------------------- scores
def _ma(values, window):
    from trl_entropy.metrics import moving_average

    return moving_average(values, window)


def out_of_band(measured, target) -> float:
    """The share of the steps beyond +-30% of the target: the model card's number
    (:func:`trl_entropy.metrics.out_of_band_share`, one definition for both)."""
    from trl_entropy.metrics import out_of_band_share

    return out_of_band_share(measured, target)


def noise_floor(se, target, window: int = 10, skip_fraction: float = 0.2) -> float:
    """The tracking error a policy whose entropy sat exactly on the target would show from measurement noise alone:
    per step, ``E|N(0, s^2)| / MA10(target)`` with ``s^2`` the variance of the 10-step mean of the readings
    (``sum of se^2 / n^2`` over the window), averaged over the steps after the first ``skip_fraction``."""
    t = _ma(target, window)
    start = int(len(se) * skip_fraction)
    out = []
    for i in range(start, len(se)):
        part = [x for x in se[max(0, i - window + 1): i + 1] if x is not None]
        if part and t[i]:
            out.append(math.sqrt(2.0 / math.pi) * math.sqrt(sum(x * x for x in part)) / len(part) / t[i])
    return sum(out) / len(out) if out else math.nan


def first_saturated(saturated) -> int | None:
    return next((i + 1 for i, s in enumerate(saturated) if s), None)


def score(row: dict) -> dict:
    from trl_entropy.metrics import tracking_error

    m, t = row["measured"], row["target"]
    if all(x is None for x in t):  # plain GRPO: its drift, final MA10 over initial
        return {"drift": _ma(m, 10)[-1] / m[0] if m and m[0] else math.nan}
    return {"err": tracking_error(m, t), "floor": noise_floor(row["se"], t), "out": out_of_band(m, t),
            "sat": first_saturated(row["saturated"]), "initial_se": row.get("initial_se"),
            "initial": row.get("initial")}


GOALS = {"hold": 0.10, "wsd": 0.15, "linear": 0.15, "raised": 0.15}


def cell_summary(cell: Cell, rows: list[dict]) -> dict:
    scores = [score(r) for r in rows]
    if cell.method == "none":
        return {"drift": statistics.mean(s["drift"] for s in scores)}
    mean = {k: statistics.mean(s[k] for s in scores) for k in ("err", "floor", "out")}
    sats = [s["sat"] for s in scores if s["sat"] is not None]
    goal = max(GOALS[cell.target], 1.5 * mean["floor"])
    return {**mean, "sd": statistics.stdev([s["err"] for s in scores]) if len(scores) > 1 else 0.0,
            "sat": min(sats) if sats else None, "goal": goal,
            "met": mean["err"] <= goal and mean["out"] <= 0.10}


def table(results: dict, law: str, cells=CELLS, baseline: str | None = None) -> str:
    """The suite's table for the runs of ``law``; with ``baseline`` (another law id), its mean error beside."""
    extra = " baseline err | " if baseline else ""
    lines = [f"| cell | seeds |{extra} err (mean ± sd) | noise floor | goal | beyond ±30% | saturated at | met |",
             "|---|---|---|---|---|---|---|---|" + ("---|" if baseline else "")]
    drift = {}
    for cell in cells:
        rows = [results[k] for k in (run_key(cell, s, law) for s in SEEDS) if k in results]
        if not rows:
            lines.append(f"| {cell.name} | 0 |{' | ' if baseline else ''} not run | | | | | |")
            continue
        summary = cell_summary(cell, rows)
        if cell.method == "none":
            drift[(cell.testbed, cell.task)] = summary["drift"]
            lines.append(f"| {cell.name} | {len(rows)} |{' | ' if baseline else ''} plain GRPO: final/initial "
                         f"entropy {summary['drift']:.2f} | | | | | |")
            continue
        sat = "–" if summary["sat"] is None else str(summary["sat"])
        before = ""
        if baseline:
            old = [results[k] for k in (run_key(cell, s, baseline) for s in SEEDS) if k in results]
            before = f" {cell_summary(cell, old)['err']:.3f} |" if len(old) == len(SEEDS) else " not run |"
        lines.append(f"| {cell.name} | {len(rows)} |{before} {summary['err']:.3f} ± {summary['sd']:.3f} | "
                     f"{summary['floor']:.3f} | {summary['goal']:.2f} | {summary['out']:.2f} | {sat} | "
                     f"{'yes' if summary['met'] else '**no**'} |")
    return "\n".join(lines)


def plot(results: dict, law: str, path: str, cells=CELLS) -> None:
    """A grid of the suite's controlled cells, each coloured by its mean tracking error over its goal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    named = []
    for cell in cells:
        rows = [results[k] for k in (run_key(cell, s, law) for s in SEEDS) if k in results]
        if cell.method != "none" and rows:
            named.append((cell, cell_summary(cell, rows)))
    if not named:
        return
    cols = 4
    nrows = math.ceil(len(named) / cols)
    fig, ax = plt.subplots(figsize=(cols * 3.4, nrows * 0.62 + 0.8))
    cmap = plt.get_cmap("RdYlGn_r")
    for i, (cell, s) in enumerate(named):
        r, c = divmod(i, cols)
        ratio = s["err"] / s["goal"]
        ax.add_patch(plt.Rectangle((c, nrows - 1 - r), 0.96, 0.9, color=cmap(min(1.0, ratio / 2.0))))
        ax.text(c + 0.48, nrows - 1 - r + 0.58, cell.name.replace("tiny/", "").replace("smollm2/", "S:"),
                ha="center", va="center", fontsize=6.5)
        ax.text(c + 0.48, nrows - 1 - r + 0.25, f"err {s['err']:.3f} (goal {s['goal']:.2f}), out {s['out']:.2f}",
                ha="center", va="center", fontsize=6.5)
    ax.set_xlim(0, cols)
    ax.set_ylim(0, nrows)
    ax.axis("off")
    ax.set_title(f"Tracking suite, law {law}: colour = tracking error / goal (green <= 1, red >= 2)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", nargs="*", default=None, help="cell names (default: all), or a testbed prefix")
    parser.add_argument("--testbed", choices=["tiny", "smollm2"], default=None)
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--law", default=None, help="the law id to report (default: this checkout's)")
    parser.add_argument("--baseline", default=None, help="another law id whose mean error is shown beside")
    parser.add_argument("--cached_only", action="store_true")
    parser.add_argument("--plot", default=None, help="write the grid picture here")
    args = parser.parse_args(argv)
    law = args.law or law_id()
    cells = [c for c in CELLS if (args.testbed is None or c.testbed == args.testbed)
             and (not args.cells or any(c.name == n or c.name.startswith(n) for n in args.cells))]
    results = load(args.results)
    if not args.cached_only:
        for cell in cells:
            for seed in SEEDS:
                key = run_key(cell, seed, law)
                if key in results:
                    continue
                row = {"key": key, "cell": cell.name, "seed": seed, "law": law, **train_cell(cell, seed)}
                append(args.results, row)
                results[key] = row
                s = score(row)
                print(f"{cell.name} seed {seed}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                                              for k, v in s.items()) + f" ({row['seconds']} s)",
                      flush=True)
    print(f"law {law}")
    print(table(results, law, cells, args.baseline))
    summaries = [cell_summary(c, rows) for c in cells if c.method != "none"
                 for rows in [[results[k] for k in (run_key(c, s, law) for s in SEEDS) if k in results]] if rows]
    print(f"goal met on {sum(s['met'] for s in summaries)} of {len(summaries)} controlled cells run")
    if args.plot:
        plot(results, law, args.plot, cells)


if __name__ == "__main__":
    main()
