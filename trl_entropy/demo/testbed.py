"""Offline testbed: a tiny character-level Qwen2 model, pretrained in-process on multi-digit addition.

Everything is built from code (no network): a WordLevel tokenizer over digits and ``+ =``, a small ``Qwen2Config``
model, a short supervised warm start that leaves the model *partly* competent (so GRPO has something to learn and
entropy to lose), a train/held-out split of problems, and a verifiable exact-match reward. Deterministic given the
recipe's seed; the pretrained weights are cached on disk keyed by the recipe.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass

import torch

__all__ = [
    "TestbedRecipe",
    "build_tokenizer",
    "build_model",
    "load_or_pretrain",
    "make_problems",
    "make_datasets",
    "accuracy_reward",
    "evaluate_accuracy",
    "completion_entropy",
    "grpo_config_kwargs",
]

CHARS = "0123456789+="
PAD, EOS = "<pad>", "<eos>"


@dataclass(frozen=True)
class TestbedRecipe:
    """Everything that determines the pretrained weights (hashed into the cache key)."""

    __test__ = False  # not a pytest test class

    digits: int = 2
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    sft_steps: int = 1000
    sft_lr: float = 3e-3
    sft_batch_size: int = 64
    seed: int = 0

    def cache_key(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return "testbed-" + hashlib.sha256(blob).hexdigest()[:12]


def build_tokenizer():
    """Character-level tokenizer: each of ``0-9 + =`` is one token; pad and eos are special; left padding."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {PAD: 0, EOS: 1, **{c: i + 2 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=PAD))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, padding_side="left")


def build_model(recipe: TestbedRecipe, tokenizer):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(recipe.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_kv_heads,
        intermediate_size=recipe.intermediate_size,
        max_position_embeddings=4 * recipe.digits + 8,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)


def _is_test(a: int, b: int) -> bool:
    """Held-out split: a fixed fifth of all (a, b) pairs, chosen by a hash so it has no arithmetic pattern."""
    return hashlib.md5(f"{a}+{b}".encode()).digest()[0] % 5 == 0


def make_problems(n: int, seed: int = 0, recipe: TestbedRecipe = TestbedRecipe(), split: str = "train") -> list[dict]:
    """``n`` problems ``{"prompt": "12+39=", "answer": "15"}`` from the split, deterministic given ``seed``.

    The sum is written least-significant digit first (51 -> "15"), the usual trick that makes the carry local and
    addition learnable by a 2-layer model in seconds.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}.")
    g = torch.Generator().manual_seed(seed * 2 + (split == "test"))
    hi = 10**recipe.digits
    out = []
    while len(out) < n:
        a, b = torch.randint(0, hi, (2,), generator=g).tolist()
        if _is_test(a, b) == (split == "test"):
            out.append({"prompt": f"{a}+{b}=", "answer": str(a + b)[::-1]})
    return out


def make_datasets(recipe: TestbedRecipe = TestbedRecipe(), n_train: int = 4096, n_test: int = 256, seed: int = 0):
    from datasets import Dataset

    train = make_problems(n_train, seed, recipe, "train")
    test = make_problems(n_test, seed, recipe, "test")
    return Dataset.from_list(train), Dataset.from_list(test)


def accuracy_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 when the completion is exactly the answer (surrounding whitespace ignored), else 0.0."""
    return [1.0 if str(c).strip() == str(a) else 0.0 for c, a in zip(completions, answer)]


def _sft_batch(tokenizer, problems, device):
    texts = [p["prompt"] + p["answer"] for p in problems]
    ids = [tokenizer(t, add_special_tokens=False).input_ids + [tokenizer.eos_token_id] for t in texts]
    width = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), width), tokenizer.pad_token_id)
    labels = torch.full((len(ids), width), -100)
    attention = torch.zeros((len(ids), width), dtype=torch.long)
    for i, (x, p) in enumerate(zip(ids, problems)):
        input_ids[i, : len(x)] = torch.tensor(x)
        attention[i, : len(x)] = 1
        start = len(p["prompt"])
        labels[i, start : len(x)] = torch.tensor(x[start:])  # loss on the answer and eos only
    return input_ids.to(device), attention.to(device), labels.to(device)


def pretrain(recipe: TestbedRecipe, tokenizer, progress: bool = True):
    """Short supervised warm start (teacher forcing on answers), deliberately stopped early."""
    model = build_model(recipe, tokenizer)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.sft_lr, weight_decay=0.0)
    problems = make_problems(recipe.sft_steps * recipe.sft_batch_size, recipe.seed + 1000, recipe, "train")
    iterator = range(recipe.sft_steps)
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc="pretraining testbed model", dynamic_ncols=True)
    for step in iterator:
        batch = problems[step * recipe.sft_batch_size : (step + 1) * recipe.sft_batch_size]
        input_ids, attention, labels = _sft_batch(tokenizer, batch, "cpu")
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    return model


def default_cache_dir() -> str:
    return os.environ.get("TRL_ENTROPY_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "trl_entropy",
                                                               "testbed")


def load_or_pretrain(recipe: TestbedRecipe = TestbedRecipe(), cache_dir: str | None = None, progress: bool = True):
    """(model, tokenizer): loaded from the cache when present, else pretrained and saved there."""
    from transformers import Qwen2ForCausalLM

    tokenizer = build_tokenizer()
    path = os.path.join(cache_dir or default_cache_dir(), recipe.cache_key())
    if os.path.exists(os.path.join(path, "recipe.json")):
        model = Qwen2ForCausalLM.from_pretrained(path)
        return model, tokenizer
    with torch.random.fork_rng():
        model = pretrain(recipe, tokenizer, progress=progress)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    with open(os.path.join(path, "recipe.json"), "w") as f:  # written last: marks a complete cache entry
        json.dump(asdict(recipe), f)
    return model, tokenizer


@torch.no_grad()
def _sample(model, tokenizer, problems, n_samples, temperature, max_new_tokens, seed, batch_size):
    """Sampled completions (strings) and, per completion, the token entropies of the sampling distribution."""
    was_training = model.training
    model.eval()
    texts, entropies = [], []
    prompts = [p["prompt"] for p in problems for _ in range(n_samples)]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        for i in range(0, len(prompts), batch_size):
            enc = tokenizer(prompts[i : i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
            out = model.generate(**enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                 max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id, output_scores=True, return_dict_in_generate=True)
            gen = out.sequences[:, enc.input_ids.shape[1]:]
            texts += tokenizer.batch_decode(gen, skip_special_tokens=True)
            scores = torch.stack(out.scores, dim=1).float()  # (B, T, V): tiny vocabulary here
            logp = torch.log_softmax(scores, dim=-1)
            ent = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)
            # tokens up to and including the first eos
            is_eos = gen == tokenizer.eos_token_id
            after = (is_eos.cumsum(1) - is_eos.long()) > 0
            entropies += [(e[~a]).tolist() for e, a in zip(ent, after)]
    model.train(was_training)
    return texts, entropies


def evaluate_accuracy(model, tokenizer, problems, n_samples=4, temperature=1.0, max_new_tokens=None, seed=0,
                      batch_size=256) -> float:
    """Sampled exact-match accuracy, averaged over problems and samples."""
    max_new_tokens = max_new_tokens or max(len(p["answer"]) for p in problems) + 2
    texts, _ = _sample(model, tokenizer, problems, n_samples, temperature, max_new_tokens, seed, batch_size)
    answers = [p["answer"] for p in problems for _ in range(n_samples)]
    return sum(accuracy_reward(texts, answers)) / len(texts)


def completion_entropy(model, tokenizer, problems, n_samples=4, temperature=1.0, seed=0, batch_size=256) -> float:
    """Token-mean entropy (nats) of the model's sampled completions: the quantity the controls track."""
    max_new_tokens = max(len(p["answer"]) for p in problems) + 2
    _, ents = _sample(model, tokenizer, problems, n_samples, temperature, max_new_tokens, seed, batch_size)
    flat = [x for e in ents for x in e]
    return sum(flat) / max(1, len(flat)) if flat else math.nan


def grpo_config_kwargs(recipe: TestbedRecipe = TestbedRecipe()) -> dict:
    """GRPOConfig keyword arguments that run well on this testbed on CPU (no output_dir / max_steps)."""
    return dict(
        max_completion_length=recipe.digits + 2,
        num_generations=8,
        per_device_train_batch_size=64,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
