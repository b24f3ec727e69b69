"""Offline testbed for GRPO entropy experiments: a tiny character-level Qwen2 model on synthetic addition.

Everything is built from code, nothing is downloaded:

* a character-level ``tokenizers`` WordLevel tokenizer (digits, ``+``, ``=``, ``<pad>``, ``<eos>``; left padding),
* a small randomly initialised ``Qwen2ForCausalLM``,
* a short supervised warm start (teacher forcing on ``prompt + answer + eos``, loss on the answer and eos only)
  whose digit targets are deliberately smoothed, so that the model knows the answers (greedy accuracy ~98%) but is
  only *partly* competent when sampled at temperature 1 (~40% exact answers, ~0.9 nats mean token entropy). GRPO
  then sharpens it: reward rises and the completion entropy collapses, which is what the entropy controls are
  meant to manage,
* a train / held-out split of problems (by a hash of the problem, so the two never overlap),
* an exact-match reward in TRL's reward-function signature, and sampled accuracy / entropy helpers.

The pretrained weights are deterministic given the recipe and are cached on disk, keyed by a hash of the recipe.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass

import torch
from transformers import PreTrainedTokenizerFast

from .._paths import save_model_folder

__all__ = [
    "TestbedRecipe",
    "build_tokenizer",
    "TestbedTokenizer",
    "check_alphabet",
    "build_model",
    "pretrain",
    "load_or_pretrain",
    "default_cache_dir",
    "make_problems",
    "make_datasets",
    "accuracy_reward",
    "extract_answer",
    "sample_completions",
    "evaluate_accuracy",
    "completion_entropy",
    "grpo_config_kwargs",
]

PAD_TOKEN = "<pad>"
EOS_TOKEN = "<eos>"
CHARS = "0123456789+="
ANSWER_CHARS = frozenset("0123456789")
TASKS = ("add", "add_reversed")
_MARKER = "testbed_recipe.json"  # written last into a cache entry: its presence means the entry is complete
_PRETRAIN_VERSION = 1  # bump when the pretraining procedure changes, so old cache entries are not reused


@dataclass(frozen=True)
class TestbedRecipe:
    """Everything that determines the pretrained weights; hashed into the cache key.

    ``task``: ``"add"`` (``"12+34=" -> "46"``) or ``"add_reversed"`` (the sum written least-significant digit
    first, ``"12+39=" -> "15"``); operands uniform in ``[0, 10**digits)``.
    ``label_smoothing``: soft targets for the answer digits during pretraining, ``1 - q`` on the right digit plus
    ``q`` spread uniformly over the ten digits, with ``q`` ramped linearly from 0 (so the task is learned at full
    speed first) to ``label_smoothing`` at the last step. It sets how much entropy the pretrained model keeps on its
    answers and how often it is wrong when sampled at temperature 1; eos is never smoothed, so lengths stay right.
    ``carry_drop``: in the pretraining answers, each carry between columns (not the one out of the leading column,
    so the answer's length stays right) is dropped with this probability, independently per column, so the pretrained model learns a systematic error: on a problem with carries the most likely answer is
    wrong, and the right one must be found by sampling. 0 (the default) teaches exact sums. Held-out problems and the
    reward always use the exact sum.
    """

    __test__ = False  # not a pytest test class

    task: str = "add"
    digits: int = 2
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    sft_steps: int = 1500
    sft_lr: float = 3e-3
    sft_batch_size: int = 64
    sft_warmup_steps: int = 50
    label_smoothing: float = 0.3
    seed: int = 0
    carry_drop: float = 0.0

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}.")
        if self.digits < 1:
            raise ValueError(f"digits must be >= 1, got {self.digits}.")
        if not 0.0 <= self.label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], got {self.label_smoothing}.")
        if not 0.0 <= self.carry_drop <= 1.0:
            raise ValueError(f"carry_drop must be in [0, 1], got {self.carry_drop}.")

    def cache_key(self) -> str:
        """Short stable hash of all fields (same recipe -> same key, across processes and sessions)."""
        fields = asdict(self)
        if fields["carry_drop"] == 0.0:  # added later: a recipe without it keeps the key it always had
            del fields["carry_drop"]
        blob = json.dumps({**fields, "_version": _PRETRAIN_VERSION}, sort_keys=True).encode()
        return f"{self.task}-d{self.digits}-{hashlib.sha256(blob).hexdigest()[:12]}"

    @property
    def max_answer_length(self) -> int:
        return self.digits + 1  # the sum of two numbers below 10**d has at most d + 1 digits


# ----------------------------------------------------------------------------------------------------------------
# Tokenizer and model


def unknown_characters(text) -> list[str]:
    """The characters of ``text`` (a string, or lists of them, nested) outside the testbed tokenizer's alphabet
    (:data:`CHARS`; the ``<pad>`` and ``<eos>`` markers are allowed), sorted; ``None`` has none."""
    if text is None:
        return []
    if not isinstance(text, str):
        return sorted({c for t in text for c in unknown_characters(t)})
    return sorted(set(text.replace(PAD_TOKEN, "").replace(EOS_TOKEN, "")) - set(CHARS))


def check_alphabet(text) -> None:
    """Raise a ``ValueError`` naming the characters of ``text`` that the testbed tokenizer has no token for (it would
    encode each of them as ``<pad>``), the alphabet, and what to do."""
    unknown = unknown_characters(text)
    if not unknown:
        return
    texts = [text] if isinstance(text, str) else list(text)
    first = next((t for t in texts if unknown_characters(t)), text)
    raise ValueError(
        f"The testbed tokenizer has no token for {', '.join(map(repr, unknown))} (in {first!r}): its alphabet is "
        f"the characters {CHARS!r} plus {PAD_TOKEN} and {EOS_TOKEN}, and any other character would be encoded as "
        f"{PAD_TOKEN}. Write the prompts with those characters (e.g. '12+34='), or train a model whose tokenizer "
        "has them (e.g. --testbed smollm2)."
    )


class TestbedTokenizer(PreTrainedTokenizerFast):
    """The testbed's character-level fast tokenizer (:func:`build_tokenizer`): every text it encodes is checked
    against its alphabet first (:func:`check_alphabet`), since its vocabulary maps any other character to ``<pad>``.

    Saved as a plain fast tokenizer (``tokenizer_class`` in ``tokenizer_config.json``), so ``AutoTokenizer`` and
    ``pipeline`` load a saved testbed model without this package (and without the check).
    """

    __test__ = False  # not a pytest test class

    def _encode_plus(self, text, text_pair=None, *args, **kwargs):
        check_alphabet(text)
        check_alphabet(text_pair)
        return super()._encode_plus(text, text_pair, *args, **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        files = super().save_pretrained(save_directory, *args, **kwargs)
        config = os.path.join(save_directory, "tokenizer_config.json")
        if os.path.exists(config):
            with open(config, encoding="utf-8") as f:
                values = json.load(f)
            values["tokenizer_class"] = PreTrainedTokenizerFast.__name__
            with open(config, "w", encoding="utf-8") as f:
                json.dump(values, f, indent=2, ensure_ascii=False)
        return files


def build_tokenizer():
    """Character-level fast tokenizer (a :class:`TestbedTokenizer`): every character of ``0-9 + =`` is one token, no
    special tokens added; a text with any other character is refused with a ``ValueError`` (:func:`check_alphabet`).

    ``<pad>`` (id 0) is the pad token, ``<eos>`` (id 1) the eos token; padding is on the left, as GRPOTrainer needs
    for prompts. ``decode`` joins characters without spaces.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {PAD_TOKEN: 0, EOS_TOKEN: 1}
    for c in CHARS:
        vocab[c] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD_TOKEN))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return TestbedTokenizer(
        tokenizer_object=backend, pad_token=PAD_TOKEN, eos_token=EOS_TOKEN, padding_side="left", model_max_length=512
    )


def build_model(recipe: TestbedRecipe, tokenizer):
    """A small randomly initialised ``Qwen2ForCausalLM``, seeded by ``recipe.seed`` (global RNG left untouched)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_kv_heads,
        intermediate_size=recipe.intermediate_size,
        max_position_embeddings=max(64, 4 * recipe.digits + 16),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = None
    return model


# ----------------------------------------------------------------------------------------------------------------
# Problems and reward


def _answer(a: int, b: int, task: str) -> str:
    s = str(a + b)
    return s[::-1] if task == "add_reversed" else s


def _sum_dropping_carries(a: int, b: int, drop: list[bool]) -> int:
    """Column addition of ``a + b`` where the carry out of column ``i`` (units first) is lost where ``drop[i]``."""
    total, carry, place = 0, 0, 1
    for i in range(len(drop) + 1):
        column = a // place % 10 + b // place % 10 + carry
        total += column % 10 * place
        carry = 0 if (column >= 10 and i < len(drop) and drop[i]) else column // 10
        place *= 10
        if a < place and b < place and carry == 0:
            break
    return total + carry * place


def _pretraining_answer(prompt: str, recipe: TestbedRecipe, g: torch.Generator) -> str:
    """The answer the warm start teaches for ``prompt``: the exact sum with each carry dropped with probability
    ``recipe.carry_drop`` (one draw from ``g`` per inner column, whether or not it carries, so the stream is fixed);
    the carry out of the leading column is kept."""
    a, b = (int(x) for x in prompt.rstrip("=").split("+"))
    drop = (torch.rand(recipe.digits - 1, generator=g) < recipe.carry_drop).tolist()
    s = str(_sum_dropping_carries(a, b, drop))
    return s[::-1] if recipe.task == "add_reversed" else s


def _in_test_split(prompt: str) -> bool:
    """A fixed ~20% of all problems is held out, chosen by a hash so the split has no arithmetic pattern."""
    return hashlib.sha256(prompt.encode()).digest()[0] < 52  # 52/256 ~ 20%


def _draw(g: torch.Generator, n: int, recipe: TestbedRecipe, want_test: bool) -> list[dict]:
    """``n`` problems of one split, operands drawn from ``g`` in fixed-size chunks (so prefix-stable in ``n``)."""
    hi = 10**recipe.digits
    out: list[dict] = []
    while len(out) < n:
        for a, b in torch.randint(0, hi, (256, 2), generator=g).tolist():
            prompt = f"{a}+{b}="
            if _in_test_split(prompt) == want_test:
                out.append({"prompt": prompt, "answer": _answer(a, b, recipe.task)})
                if len(out) == n:
                    break
    return out


def make_problems(n: int, seed: int = 0, recipe: TestbedRecipe = TestbedRecipe(), split: str = "train") -> list[dict]:
    """``n`` problems ``{"prompt": "12+34=", "answer": "46"}`` from ``split`` ("train" or "test").

    Operands are drawn uniformly (with replacement) from ``[0, 10**digits)``, deterministic given ``seed``; a shorter
    list is a prefix of a longer one. The two splits are disjoint for every seed.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}.")
    want_test = split == "test"
    g = torch.Generator().manual_seed(2 * int(seed) + int(want_test))
    return _draw(g, n, recipe, want_test)


def make_datasets(recipe: TestbedRecipe = TestbedRecipe(), n_train: int = 4096, n_test: int = 256, seed: int = 0):
    """``(train, test)`` ``datasets.Dataset`` objects with columns ``prompt`` and ``answer``."""
    from datasets import Dataset

    train = make_problems(n_train, seed=seed, recipe=recipe, split="train")
    test = make_problems(n_test, seed=seed, recipe=recipe, split="test")
    return Dataset.from_list(train), Dataset.from_list(test)


def extract_answer(completion) -> str:
    """The answer part of a completion: stripped, cut at an eos marker and at the first non-answer character. The
    reward's reading, and the testbed's answer extractor (``answer_extractor``) for the answer-diversity metrics."""
    text = str(completion).split(EOS_TOKEN, 1)[0].strip()
    for i, ch in enumerate(text):
        if ch not in ANSWER_CHARS:
            return text[:i]
    return text


_extract_answer = extract_answer  # the name benchmarks/ scripts import


def accuracy_reward(completions, answer, **kwargs) -> list[float]:
    """TRL reward function: 1.0 where the completion's answer equals ``answer`` exactly, else 0.0.

    ``completions`` are plain strings (non-conversational prompts); ``answer`` is the dataset column, passed through
    by GRPOTrainer. Surrounding whitespace is ignored and the completion is cut at the first character that cannot be
    part of an answer (``"46+"`` counts as ``"46"``, ``"466"`` does not); an empty answer is never correct.
    """
    out = []
    for c, a in zip(completions, answer):
        got = extract_answer(c)
        out.append(1.0 if got and got == str(a).strip() else 0.0)
    return out


# ----------------------------------------------------------------------------------------------------------------
# Pretraining and cache


def _sft_batch(tokenizer, problems: list[dict]):
    """Right-padded teacher-forcing batch; labels only on the answer tokens and eos."""
    vocab = tokenizer.get_vocab()
    seqs, starts = [], []
    for p in problems:
        seqs.append([vocab[c] for c in p["prompt"] + p["answer"]] + [tokenizer.eos_token_id])
        starts.append(len(p["prompt"]))
    width = max(len(s) for s in seqs)
    input_ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(seqs), width), dtype=torch.long)
    labels = torch.full((len(seqs), width), -100, dtype=torch.long)
    for i, (s, start) in enumerate(zip(seqs, starts)):
        t = torch.tensor(s, dtype=torch.long)
        input_ids[i, : len(s)] = t
        attention_mask[i, : len(s)] = 1
        labels[i, start : len(s)] = t[start:]
    return input_ids, attention_mask, labels


def _sft_loss(model, tokenizer, problems: list[dict], smoothing: float) -> torch.Tensor:
    """Mean cross-entropy over answer tokens and eos. Answer digits get soft targets: ``1 - smoothing`` on the right
    digit plus ``smoothing`` spread uniformly over the ten digits; eos keeps a one-hot target."""
    input_ids, attention_mask, labels = _sft_batch(tokenizer, problems)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    labels = labels[:, 1:]
    sel = labels != -100
    logp = torch.log_softmax(logits[sel], dim=-1)  # (N, V)
    tgt = labels[sel]
    nll = -logp.gather(1, tgt[:, None]).squeeze(1)
    if smoothing > 0:
        digit_ids = torch.tensor(tokenizer.convert_tokens_to_ids(list("0123456789")))
        is_digit = torch.isin(tgt, digit_ids)
        uniform = -logp[:, digit_ids].mean(1)
        nll = torch.where(is_digit, (1 - smoothing) * nll + smoothing * uniform, nll)
    return nll.mean()


def pretrain(recipe: TestbedRecipe, tokenizer, progress: bool = True):
    """Short supervised warm start in plain PyTorch, deterministic given ``recipe.seed``; returns the model.

    Each step draws a fresh batch of train-split problems from a seeded ``torch.Generator`` and takes one AdamW step
    on the cross-entropy of the answer tokens and eos, digit targets smoothed by a linear ramp up to
    ``recipe.label_smoothing`` (see ``TestbedRecipe``); linear warmup, then cosine decay to 10% of ``sft_lr``;
    gradient norm clipped at 1. The global RNG state is restored afterwards.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        model = build_model(recipe, tokenizer)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=recipe.sft_lr, betas=(0.9, 0.98), weight_decay=0.0)
        warm = max(1, min(recipe.sft_warmup_steps, recipe.sft_steps))

        def lr_factor(step):
            if step < warm:
                return (step + 1) / warm
            frac = (step - warm) / max(1, recipe.sft_steps - warm)
            return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
        g = torch.Generator().manual_seed(0x5EED_0000 + recipe.seed)  # a data stream of its own
        g_drop = torch.Generator().manual_seed(0xCA22_0000 + recipe.seed)  # which carries are dropped
        steps = range(recipe.sft_steps)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(steps, desc="pretraining testbed model", dynamic_ncols=True, leave=False)
            steps = bar
        for step in steps:
            batch = _draw(g, recipe.sft_batch_size, recipe, want_test=False)
            if recipe.carry_drop > 0:
                batch = [dict(p, answer=_pretraining_answer(p["prompt"], recipe, g_drop)) for p in batch]
            smoothing = recipe.label_smoothing * step / max(1, recipe.sft_steps - 1)  # ramp 0 -> label_smoothing
            loss = _sft_loss(model, tokenizer, batch, smoothing)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            if bar is not None:
                bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
        if bar is not None:
            bar.close()
    model.eval()
    return model


def default_cache_dir() -> str:
    """``$TRL_ENTROPY_CACHE`` if set, else ``~/.cache/trl_entropy/testbed``."""
    env = os.environ.get("TRL_ENTROPY_CACHE")
    return env if env else os.path.join(os.path.expanduser("~"), ".cache", "trl_entropy", "testbed")


def load_or_pretrain(recipe: TestbedRecipe = TestbedRecipe(), cache_dir: str | None = None, progress: bool = True):
    """``(model, tokenizer)`` from ``cache_dir/<recipe.cache_key()>`` if present, else pretrained and saved there.

    Both are saved with ``save_pretrained`` and always returned as loaded from disk, so a fresh and a cached call
    give the same objects. The entry is written to a temporary folder and renamed into place, so concurrent callers
    (e.g. several ranks) never read a half-written entry.
    """
    from transformers import Qwen2ForCausalLM

    root = cache_dir or default_cache_dir()
    path = os.path.join(root, recipe.cache_key())
    if not os.path.exists(os.path.join(path, _MARKER)):
        tokenizer = build_tokenizer()
        model = pretrain(recipe, tokenizer, progress=progress)
        save_model_folder(model, tokenizer, root, recipe.cache_key(), _MARKER, asdict(recipe))
    model = Qwen2ForCausalLM.from_pretrained(path)
    tokenizer = TestbedTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    return model, tokenizer


# ----------------------------------------------------------------------------------------------------------------
# Evaluation helpers


@torch.no_grad()
def sample_completions(model, tokenizer, problems, n_samples=4, temperature=1.0, max_new_tokens=None, seed=0,
                       batch_size=64):
    """Sample ``n_samples`` completions per problem (problem-major order).

    Returns ``(texts, entropies)``: the decoded completions (special tokens skipped) and, per completion, the token
    entropies (nats) of the sampling distribution ``softmax(logits / temperature)`` at each generated token up to and
    including the first eos: the tokens GRPOTrainer's ``entropy`` metric averages over. Every eos id of the model's
    generation config ends a completion, as in GRPOTrainer (the SmolLM2 testbed also stops at a newline).
    Deterministic given ``seed`` (the global RNG state is restored afterwards); the model's train/eval mode is
    restored. ``temperature=0`` decodes greedily (the entropies are then those of ``softmax(logits)``).
    """
    from transformers import GenerationConfig

    if max_new_tokens is None:
        max_new_tokens = max(len(str(p["answer"])) for p in problems) + 1
    eos_ids = model.generation_config.eos_token_id
    eos_ids = [tokenizer.eos_token_id] if eos_ids is None else ([eos_ids] if isinstance(eos_ids, int) else eos_ids)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 decodes greedily), got {temperature}.")
    greedy = temperature == 0
    sampling = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    gen_config = GenerationConfig(
        **sampling, max_new_tokens=max_new_tokens,
        pad_token_id=pad_id, eos_token_id=list(eos_ids), bos_token_id=None,
        output_logits=True, return_dict_in_generate=True,
    )
    prompts = [p["prompt"] for p in problems for _ in range(n_samples)]
    was_training = model.training
    model.eval()
    texts: list[str] = []
    entropies: list[list[float]] = []
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for i in range(0, len(prompts), batch_size):
                enc = tokenizer(prompts[i : i + batch_size], return_tensors="pt", padding=True,
                                add_special_tokens=False, padding_side="left")
                enc = {k: v.to(model.device) for k, v in enc.items()}
                out = model.generate(**enc, generation_config=gen_config)
                gen = out.sequences[:, enc["input_ids"].shape[1]:]
                logits = torch.stack(out.logits, dim=1).float() / (1.0 if greedy else temperature)
                logp = torch.log_softmax(logits, dim=-1)
                ent = -(logp.exp() * logp).nan_to_num(0.0).sum(-1)  # (B, T)
                is_eos = torch.isin(gen, torch.tensor(eos_ids, device=gen.device)).long()
                keep = (is_eos.cumsum(1) - is_eos) == 0  # up to and including the first eos
                texts += tokenizer.batch_decode(gen, skip_special_tokens=True)
                entropies += [e[k].tolist() for e, k in zip(ent.cpu(), keep.cpu())]
    finally:
        model.train(was_training)
    return texts, entropies


def evaluate_accuracy(model, tokenizer, problems, n_samples=4, temperature=1.0, max_new_tokens=None, seed=0,
                      batch_size=64, reward=None) -> float:
    """Sampled accuracy (mean over problems and samples of ``reward``, default :func:`accuracy_reward`),
    deterministic given ``seed``; ``temperature=0``: greedy accuracy (use ``n_samples=1``)."""
    texts, _ = sample_completions(model, tokenizer, problems, n_samples, temperature, max_new_tokens, seed,
                                  batch_size)
    answers = [p["answer"] for p in problems for _ in range(n_samples)]
    return sum((reward or accuracy_reward)(texts, answers)) / max(1, len(texts))


def completion_entropy(model, tokenizer, problems, n_samples=4, temperature=1.0, max_new_tokens=None, seed=0,
                       batch_size=64) -> float:
    """Mean token entropy (nats) over all tokens of sampled completions, eos included: the quantity GRPOTrainer
    logs as ``entropy`` (there, on its training batch)."""
    _, ents = sample_completions(model, tokenizer, problems, n_samples, temperature, max_new_tokens, seed,
                                 batch_size)
    flat = [x for e in ents for x in e]
    return sum(flat) / len(flat) if flat else math.nan


def grpo_config_kwargs(recipe: TestbedRecipe = TestbedRecipe(), **overrides) -> dict:
    """``trl.GRPOConfig`` keyword arguments that run well on this testbed on CPU (no ``output_dir``/``max_steps``),
    with ``overrides`` put in place of (or next to) them: ``grpo_config_kwargs(save_strategy="steps", save_steps=5)``
    where ``GRPOEntropyConfig(..., save_steps=5, **grpo_config_kwargs())`` would fail with "multiple values"
    (the defaults include ``logging_steps=1``, ``report_to="none"`` and ``save_strategy="no"``).

    8 prompts x 8 completions per optimizer step, on-policy (add ``steps_per_generation`` or ``num_iterations`` for
    off-policy updates); completions long enough for the longest answer plus eos. With the default recipe and
    ``learning_rate=2e-4``, plain GRPOTrainer halves the mean token entropy (~0.88 -> ~0.45 nats) in ~50-60 steps
    while the reward rises from ~0.42 to ~0.7; ~80 ms per on-policy step on 2 CPU cores.
    """
    from ..testbeds.addition import TESTBED_GRPO_SETTINGS

    kwargs = dict(
        TESTBED_GRPO_SETTINGS,
        max_completion_length=recipe.max_answer_length + 1,
        num_generations=8,
        per_device_train_batch_size=64,
        learning_rate=2e-4,
        use_cpu=True,
    )
    kwargs.update(overrides)
    return kwargs
