"""A short real run of every control on a GPU, at a realistic vocabulary, vs plain TRL GRPOTrainer.

    python -m benchmarks.gpu_check                      # GPU: Qwen2.5-0.5B-sized model, vocabulary 151,936
    python -m benchmarks.gpu_check --device cpu --tiny  # the same code path in seconds on CPU (a smoke test)

Nothing is downloaded: the model is a randomly initialised `Qwen2ForCausalLM` with Qwen2.5-0.5B's shape (24 layers,
hidden 896, 14 heads / 2 KV heads, MLP 4864, vocabulary 151,936), the tokenizer a WordLevel tokenizer over
151,936 placeholder tokens, the prompts random token strings, and the reward the share of even token ids in the
completion (so groups have non-zero spread). Generation is TRL's HF `generate` path (no vLLM), sampled at
temperature 1, so completion entropies are those of a near-uniform untrained model: this checks cost and that every
control runs, not learning.

Every configuration trains the same steps, off-policy (`--steps-per-generation`, default 4: each generation batch
feeds four optimizer steps), in one process, after one discarded warm-up run; runs are interleaved over `--repeats`,
the order rotated each repeat. Each step is timed from `on_step_begin` to `on_step_end` with the GPU synchronised at both ends (TRL's own
`step_time` has no sync: on a GPU it times kernel launches). A step that generates includes the generation (HF `generate`,
seconds, and sampled at temperature 1 so its length varies), which drowns the loss path's cost; so the steps are
split: **train-only steps** (no generation: forward, loss, backward, optimizer; the part a control can slow) and
generation steps, each reported as a median with its ratio to GRPOTrainer's, and the train-only median of each
repeat to show the spread. Peak GPU memory (`torch.cuda.max_memory_allocated`, reset before each run) as well.
`--json FILE` writes every step time.
Target (issue tracker): <= 1.02x time on GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

CONFIGS = {
    "grpo (TRL GRPOTrainer)": None,
    "none (GRPOEntropyTrainer)": {"entropy_control": "none"},
    "adaptive_clip": {"entropy_control": "adaptive_clip", "entropy_schedule_start": 5.0},
    "entrocraft": {"entropy_control": "entrocraft", "entropy_schedule_start": 5.0},
    "positive_reweight": {"entropy_control": "positive_reweight", "entropy_schedule_start": 5.0},
    "w_reinforce": {"entropy_control": "w_reinforce"},
    "clip_cov": {"entropy_control": "clip_cov"},
    "kl_cov": {"entropy_control": "kl_cov"},
    "entropic": {"entropy_control": "entropic", "entropy_schedule_start": 5.0},
    "entropy_bonus": {"entropy_control": "entropy_bonus", "entropy_schedule_start": 5.0},
}

QWEN05B = dict(vocab_size=151936, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
               num_key_value_heads=2, intermediate_size=4864, max_position_embeddings=4096)
TINY = dict(vocab_size=151936, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
            intermediate_size=64, max_position_embeddings=256)


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


class StepClock:
    """Wall time of each optimizer step, from ``on_step_begin`` to ``on_step_end``, with the GPU synchronised at both
    ends (TRL's own ``step_time`` is taken without a sync, so on a GPU it times kernel launches, not the work)."""

    def __new__(cls, device):
        from transformers import TrainerCallback

        class _Clock(TrainerCallback):
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

        return _Clock()


def run_once(name, overrides, model_state, shape, a, dataset, tokenizer, device, dtype, steps=None):
    import torch
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer

    model = build_model(shape, device, dtype)
    model.load_state_dict(model_state)
    kw = dict(output_dir=tempfile.mkdtemp(prefix="gpu_check-"), max_steps=steps or a.steps, seed=0, report_to="none",
              save_strategy="no", logging_steps=1, disable_tqdm=True, per_device_train_batch_size=a.batch,
              num_generations=a.generations, max_completion_length=a.completion_length, steps_per_generation=a.steps_per_generation,
              learning_rate=1e-6, temperature=1.0, top_k=0, top_p=1.0, beta=0.0, bf16=dtype == torch.bfloat16,
              use_cpu=device == "cpu", gradient_checkpointing=a.gradient_checkpointing, dataloader_num_workers=0)
    if overrides is None:
        trainer = GRPOTrainer(model=model, reward_funcs=even_token_reward, args=GRPOConfig(**kw),
                              train_dataset=dataset, processing_class=tokenizer)
    else:
        trainer = GRPOEntropyTrainer(model=model, reward_funcs=even_token_reward,
                                     args=GRPOEntropyConfig(**kw, **overrides), train_dataset=dataset,
                                     processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)
    clock = StepClock(device)
    trainer.add_callback(clock)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan")
    times = clock.times
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    del trainer, model
    if device == "cuda":
        torch.cuda.empty_cache()
    return times, peak, wall, losses


def main(argv=None) -> int:
    import torch
    from datasets import Dataset

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="a 1-layer model and short completions (smoke test)")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--skip", type=int, default=4, help="first steps of each run left out of the medians")
    p.add_argument("--steps-per-generation", type=int, default=4)
    p.add_argument("--json", default=None, help="write every run's step times here")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--batch", type=int, default=8, help="per_device_train_batch_size (completions per step)")
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--completion-length", type=int, default=512)
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    a = p.parse_args(argv)
    if a.tiny:
        a.completion_length = min(a.completion_length, 8)
        a.steps, a.repeats, a.skip, a.steps_per_generation = min(a.steps, 6), 1, 2, 2
    shape = TINY if a.tiny else QWEN05B
    dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    tokenizer = build_tokenizer(shape["vocab_size"])
    g = torch.Generator().manual_seed(0)
    prompts = [" ".join(f"t{int(t)}" for t in torch.randint(2, shape["vocab_size"], (32,), generator=g))
               for _ in range(256)]
    dataset = Dataset.from_dict({"prompt": prompts})
    model_state = {k: v.clone() for k, v in build_model(shape, a.device, dtype).state_dict().items()}

    def split(times):
        """(train-only, generation) step times after the first ``skip`` steps; step i generates iff i % spg == 0."""
        kept = list(enumerate(times))[a.skip:]
        return ([t for i, t in kept if i % a.steps_per_generation], [t for i, t in kept if not i % a.steps_per_generation])

    import json

    run_once("warm-up", None, model_state, shape, a, dataset, tokenizer, a.device, dtype,
             steps=a.steps_per_generation + 1)
    train_only = {n: [] for n in a.configs}
    generation = {n: [] for n in a.configs}
    per_repeat = {n: [] for n in a.configs}
    peaks = {n: [] for n in a.configs}
    record = []
    for r in range(a.repeats):
        order = a.configs[r % len(a.configs):] + a.configs[:r % len(a.configs)]
        for name in order:
            times, peak, wall, losses = run_once(name, CONFIGS[name], model_state, shape, a, dataset, tokenizer,
                                                 a.device, dtype)
            tr, gen = split(times)
            train_only[name] += tr
            generation[name] += gen
            per_repeat[name].append(statistics.median(tr) if tr else float("nan"))
            peaks[name].append(peak)
            record.append({"config": name, "repeat": r, "step_times": times, "peak_mib": peak, "wall_s": wall})
            ok = all(x == x and abs(x) != float("inf") for x in losses)
            print(f"  repeat {r} {name:<28} train-only step {1000 * per_repeat[name][-1]:8.1f} ms  generation step "
                  f"{1000 * statistics.median(gen) if gen else float('nan'):8.1f} ms  peak {peak:9.1f} MiB  "
                  f"run {wall:6.1f} s  finite losses: {ok}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": record}, f)

    gpu = torch.cuda.get_device_name() if a.device == "cuda" else "CPU"
    print(f"\n{gpu}; model {'tiny' if a.tiny else 'Qwen2.5-0.5B-sized'} (vocabulary {shape['vocab_size']}), "
          f"{a.batch} completions x {a.completion_length} tokens per step, {a.steps} steps x {a.repeats} repeats "
          f"(first {a.skip} of each run skipped), steps_per_generation={a.steps_per_generation}, dtype {dtype}")
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    base = a.configs[0]
    bt, bg, bm = med(train_only[base]), med(generation[base]), med(peaks[base])
    header = (f"{'configuration':<28} {'train-only ms':>13} {'vs TRL':>7} {'per repeat (ms)':>24} "
              f"{'generation ms':>13} {'vs TRL':>7} {'peak MiB':>10} {'vs TRL':>7}")
    print(header + "\n" + "-" * len(header))
    for name in a.configs:
        t, g, m = med(train_only[name]), med(generation[name]), med(peaks[name])
        reps = ", ".join(f"{1000 * x:.0f}" for x in per_repeat[name])
        print(f"{name:<28} {1000 * t:>13.1f} {t / bt:>6.3f}x {reps:>24} {1000 * g:>13.1f} {g / bg:>6.3f}x "
              f"{m:>10.1f} {m / bm:>6.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
