"""The SmolLM2 testbed's task: two-shot addition of a number below 20 and a digit, answered on one line.

SmolLM2-135M-Instruct (:func:`trl_entropy.testbeds.smollm2`) answers ``"2+5=7\n6+3=9\n14+8="`` correctly about 45% of
the time when sampled at temperature 1, with ~0.9-1.0 nats of entropy per completion token, and generation stops at
the newline after the answer, so a completion is 2-3 tokens. Short prompts and completions keep an optimizer step
within a few seconds on 2 CPU cores; see ``docs/testbeds.md`` for the measured dynamics.
"""

from __future__ import annotations

import hashlib
import os

__all__ = [
    "FEW_SHOT_PREFIX",
    "HARD_PREFIX",
    "make_problems",
    "make_datasets",
    "make_hard_datasets",
    "make_mixed_problems",
    "make_mixed_datasets",
    "first_line",
    "accuracy_reward",
    "grpo_config_kwargs",
    "DEVICE_ENV",
]

DEVICE_ENV = "TRL_ENTROPY_TESTBED_DEVICE"  # "cpu" (default) or "cuda": where the SmolLM2 testbeds train

FEW_SHOT_PREFIX = "2+5=7\n6+3=9\n"
_TEST_FRACTION_BYTE = 52  # sha256(query)[0] < 52: ~20% of the problems are held out


def _in_test_split(query: str) -> bool:
    return hashlib.sha256(query.encode()).digest()[0] < _TEST_FRACTION_BYTE


A_RANGE, B_RANGE = range(20), range(10)  # 200 problems

# The harder variant: a two-digit number plus a digit (900 problems), two-shot. SmolLM2 starts at ~18% sampled accuracy
# here (against ~45% on the default task) and about a third of the groups of 4 hold both advantage signs (48 prompts,
# seed 0); two-digit plus two-digit was too hard (1.6%). How the reward moves under GRPO is not measured yet.
HARD_PREFIX = "23+5=28\n61+7=68\n"
HARD_A_RANGE, HARD_B_RANGE = range(10, 100), range(10)


def make_problems(split: str = "train", prefix: str = FEW_SHOT_PREFIX, a_range=A_RANGE, b_range=B_RANGE) -> list[dict]:
    """Every problem ``a+b=`` (a in 0..19, b in 0..9) of one split, as ``{"prompt", "answer"}`` rows.

    The prompt is ``prefix`` (two worked examples, one per line) followed by the query, e.g.
    ``"2+5=7\\n6+3=9\\n14+8="``; the answer is the sum as text (``"22"``). The 200 problems are split by a hash of
    the query into ``"train"`` (~80%) and ``"test"`` (~20%), the same split in every process and session.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}.")
    rows = []
    for a in a_range:
        for b in b_range:
            query = f"{a}+{b}="
            if _in_test_split(query) == (split == "test"):
                rows.append({"prompt": prefix + query, "answer": str(a + b)})
    return rows


def make_datasets(n_train: int = 4096, seed: int = 0, prefix: str = FEW_SHOT_PREFIX, a_range=A_RANGE,
                  b_range=B_RANGE):
    """``(train, test)`` ``datasets.Dataset`` objects: the train problems repeated (shuffled with ``seed``) to
    ``n_train`` rows, so a run of any length draws them uniformly; the held-out problems once each."""
    import random

    from datasets import Dataset

    train = make_problems("train", prefix, a_range, b_range)
    rng = random.Random(seed)
    rows = []
    while len(rows) < n_train:
        block = list(train)
        rng.shuffle(block)
        rows.extend(block)
    return Dataset.from_list(rows[:n_train]), Dataset.from_list(make_problems("test", prefix, a_range, b_range))


def make_hard_datasets(n_train: int = 4096, seed: int = 0):
    """The harder task's ``(train, test)``: a two-digit number plus a digit, two-shot (:data:`HARD_PREFIX`)."""
    return make_datasets(n_train, seed, HARD_PREFIX, HARD_A_RANGE, HARD_B_RANGE)


# The mixed variant: the default task's problems and two-digit-plus-two-digit ones, half and half, under the default
# prompt. SmolLM2 starts at ~47% sampled accuracy on the first half and ~7% on the second (64 prompts each, seed 0),
# so the reward starts near 0.27; GRPO learns the easy half within tens of steps while the hard half stays low,
# which is meant to keep the mean reward inside 0.3-0.7 (measured in docs/testbeds.md).
MIXED_HARD_A_RANGE, MIXED_HARD_B_RANGE = range(10, 100), range(10, 100)


def make_mixed_problems(split: str = "train") -> tuple[list[dict], list[dict]]:
    """``(easy, hard)`` problem rows of one split of the mixed task: the default task's, and two-digit plus
    two-digit ones (8100 problems, the same hash split), both under :data:`FEW_SHOT_PREFIX`."""
    return (make_problems(split), make_problems(split, FEW_SHOT_PREFIX, MIXED_HARD_A_RANGE, MIXED_HARD_B_RANGE))


def make_mixed_datasets(n_train: int = 4096, seed: int = 0):
    """The mixed task's ``(train, test)``: each train row is an easy or a hard problem with equal odds (drawn with
    ``seed``, easy ones cycling through their shuffled split); the test set alternates the two test splits, as many
    hard problems as there are easy ones (37)."""
    import random

    from datasets import Dataset

    easy, hard = make_mixed_problems("train")
    rng = random.Random(seed)
    rows, pool = [], []
    while len(rows) < n_train:
        if rng.random() < 0.5:
            if not pool:
                pool = list(easy)
                rng.shuffle(pool)
            rows.append(pool.pop())
        else:
            rows.append(rng.choice(hard))
    easy_test, hard_test = make_mixed_problems("test")
    test = [row for pair in zip(easy_test, hard_test) for row in pair]
    return Dataset.from_list(rows), Dataset.from_list(test)


def first_line(completion) -> str:
    """The answer part of a completion: its first line, stripped (chat-style completions: the last message's
    content)."""
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        completion = completion[-1]["content"] if completion else ""
    return str(completion).split("\n", 1)[0].strip()


def accuracy_reward(completions, answer, **kwargs) -> list[float]:
    """TRL reward function: 1.0 where the completion's first line equals ``answer`` exactly, else 0.0."""
    return [1.0 if first_line(c) == str(a).strip() else 0.0 for c, a in zip(completions, answer)]


# The GRPO settings every built-in testbed trains with (here and `trl_entropy.demo.testbed.grpo_config_kwargs`): a
# constant learning rate without warm-up or weight decay, sampling at temperature 1 without top-k or top-p, no KL
# term, float32, a log line every step, no checkpoints and no progress bar.
TESTBED_GRPO_SETTINGS = dict(lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
                             temperature=1.0, top_k=0, top_p=1.0, beta=0.0, bf16=False, fp16=False, logging_steps=1,
                             report_to="none", save_strategy="no", disable_tqdm=True, dataloader_num_workers=0)


def grpo_config_kwargs(**overrides) -> dict:
    """``GRPOConfig`` keyword arguments that run this testbed on 2 CPU cores (no ``output_dir``/``max_steps``), with
    ``overrides`` put in place of (or next to) them, as the tiny testbed's
    :func:`trl_entropy.demo.testbed.grpo_config_kwargs` does.

    12 completions per optimizer step (3 prompts x 4 completions), 4 optimizer steps per generation batch (48
    completions: the updates are off-policy, so clip bounds act), completions of at most 4 tokens, float32, no
    gradient checkpointing (it trades ~30% more compute for memory we do not need), learning rate 1e-5 held
    constant, no KL term (no reference model). See ``docs/testbeds.md`` for what these were chosen on.

    The environment variable ``TRL_ENTROPY_TESTBED_DEVICE=cuda`` trains on the GPU instead (still float32, so the
    same process, drawn from other random streams); ``use_cpu`` is part of a cached benchmark run's key, so GPU runs
    never serve as CPU runs or the other way round.
    """
    device = os.environ.get(DEVICE_ENV, "cpu").strip().lower() or "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"{DEVICE_ENV} must be 'cpu' or 'cuda', got {os.environ.get(DEVICE_ENV)!r}.")
    kwargs = dict(
        TESTBED_GRPO_SETTINGS,
        per_device_train_batch_size=12,
        num_generations=4,
        steps_per_generation=4,
        max_completion_length=4,
        learning_rate=1e-5,
        gradient_checkpointing=False,
        use_cpu=device == "cpu",
    )
    kwargs.update(overrides)
    return kwargs
