"""A short real run of every control on a GPU, at a realistic vocabulary, vs plain TRL GRPOTrainer.

    python benchmarks/gpu_check.py                      # GPU: Qwen2.5-0.5B-sized model, vocabulary 151,936
    python benchmarks/gpu_check.py --device cpu --tiny  # the same code path in seconds on CPU (a smoke test)

Nothing is downloaded: the model is a randomly initialised `Qwen2ForCausalLM` with Qwen2.5-0.5B's shape (24 layers,
hidden 896, 14 heads / 2 KV heads, MLP 4864, vocabulary 151,936), the tokenizer a WordLevel tokenizer over
151,936 placeholder tokens, the prompts random token strings, and the reward the share of even token ids in the
completion (so groups have non-zero spread). Generation is TRL's HF `generate` path (no vLLM), sampled at
temperature 1, so completion entropies are those of a near-uniform untrained model: this checks cost and that every
control runs, not learning.

Every configuration trains the same steps, off-policy (`steps_per_generation=2`), in one process; runs are
interleaved over `--repeats`. Reported: median optimizer-step time (TRL's `step_time`, first steps skipped), peak
GPU memory (`torch.cuda.max_memory_allocated`, reset before each run), and both as ratios to GRPOTrainer.
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


def run_once(name, overrides, model_state, shape, a, dataset, tokenizer, device, dtype):
    import torch
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer

    model = build_model(shape, device, dtype)
    model.load_state_dict(model_state)
    kw = dict(output_dir=tempfile.mkdtemp(prefix="gpu_check-"), max_steps=a.steps, seed=0, report_to="none",
              save_strategy="no", logging_steps=1, disable_tqdm=True, per_device_train_batch_size=a.batch,
              num_generations=a.generations, max_completion_length=a.completion_length, steps_per_generation=2,
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
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan")
    times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h][a.skip:]
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
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--skip", type=int, default=2, help="warm-up steps left out of the median")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--batch", type=int, default=8, help="per_device_train_batch_size (completions per step)")
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--completion-length", type=int, default=512)
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    a = p.parse_args(argv)
    if a.tiny:
        a.completion_length = min(a.completion_length, 8)
        a.steps, a.repeats, a.skip = min(a.steps, 4), 1, 1
    shape = TINY if a.tiny else QWEN05B
    dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
    tokenizer = build_tokenizer(shape["vocab_size"])
    g = torch.Generator().manual_seed(0)
    prompts = [" ".join(f"t{int(t)}" for t in torch.randint(2, shape["vocab_size"], (32,), generator=g))
               for _ in range(256)]
    dataset = Dataset.from_dict({"prompt": prompts})
    model_state = {k: v.clone() for k, v in build_model(shape, a.device, dtype).state_dict().items()}

    samples = {n: [] for n in a.configs}
    peaks = {n: [] for n in a.configs}
    for r in range(a.repeats):
        for name in a.configs:
            times, peak, wall, losses = run_once(name, CONFIGS[name], model_state, shape, a, dataset, tokenizer,
                                                 a.device, dtype)
            samples[name] += times
            peaks[name].append(peak)
            ok = all(x == x and abs(x) != float("inf") for x in losses)
            print(f"  repeat {r} {name:<28} median step {1000 * statistics.median(times):8.1f} ms  "
                  f"peak {peak:9.1f} MiB  run {wall:6.1f} s  finite losses: {ok}", flush=True)

    gpu = torch.cuda.get_device_name() if a.device == "cuda" else "CPU"
    print(f"\n{gpu}; model {'tiny' if a.tiny else 'Qwen2.5-0.5B-sized'} (vocabulary {shape['vocab_size']}), "
          f"{a.batch} completions x {a.completion_length} tokens per step, {a.steps} steps x {a.repeats} repeats, "
          f"steps_per_generation=2, dtype {dtype}")
    base_t = statistics.median(samples[a.configs[0]])
    base_m = statistics.median(peaks[a.configs[0]])
    header = f"{'configuration':<28} {'median step ms':>14} {'vs TRL':>7} {'peak MiB':>10} {'vs TRL':>7}"
    print(header + "\n" + "-" * len(header))
    for name in a.configs:
        t, m = statistics.median(samples[name]), statistics.median(peaks[name])
        print(f"{name:<28} {1000 * t:>14.1f} {t / base_t:>6.3f}x {m:>10.1f} {m / base_m:>6.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
