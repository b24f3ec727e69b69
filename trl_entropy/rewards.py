"""Reward functions selectable by name from the command line and recipes (``reward_funcs: [boxed_accuracy]``).

Each follows TRL's reward-function signature: ``f(prompts, completions, **dataset_columns) -> list[float | None]``.
``get_reward_function`` takes what ``trl grpo --reward_funcs`` takes (TRL's names such as ``think_format_reward``,
and dotted import paths ``my_lib.rewards.f``), plus this package's names and ``module:function``.
"""

from __future__ import annotations

from collections.abc import Callable

from ._imports import import_callable

__all__ = ["REWARD_FUNCTIONS", "TRL_REWARD_FUNCTIONS", "get_reward_function", "boxed_accuracy", "final_answer",
           "last_boxed"]


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` in ``text`` (nested braces handled), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def final_answer(text: str) -> str | None:
    """The last ``\\boxed{...}``, else the text after the last ``Answer:`` (the format DAPO-Math-17k's prompt asks
    for), else None."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    i = text.rfind("Answer:")
    if i < 0:
        return None
    line = text[i + len("Answer:") :].strip().splitlines()
    return line[0] if line else None


def _normalize(answer: str) -> str:
    s = str(answer).strip().strip("$").replace(" ", "").replace("\\!", "").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    return s[:-1] if s.endswith(".") else s


def _text(completion) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict))
    return str(completion)


def boxed_accuracy(completions, solution=None, answer=None, **kwargs) -> list[float | None]:
    """1.0 when the completion's final answer equals the reference after light normalisation, else 0.0.

    The final answer is the last ``\\boxed{}``, or else what follows the last ``Answer:``.

    The reference is the dataset column ``solution`` (DAPO-Math-17k-Processed) or ``answer``; a reference that
    itself contains ``\\boxed{}`` is reduced to its content. Rows without a reference return None (TRL: unscorable).
    This is a plain string match (spaces, ``$``, ``\\left``/``\\right`` and ``dfrac`` normalised), not a symbolic
    checker: use math-verify for that.
    """
    refs = solution if solution is not None else answer
    if refs is None:
        raise ValueError("boxed_accuracy needs a 'solution' or 'answer' column in the dataset.")
    out: list[float | None] = []
    for completion, ref in zip(completions, refs):
        if ref is None:
            out.append(None)
            continue
        ref = last_boxed(str(ref)) or str(ref)
        got = final_answer(_text(completion))
        out.append(1.0 if got is not None and _normalize(got) == _normalize(ref) else 0.0)
    return out


def _testbed_reward():
    from .demo.testbed import accuracy_reward

    return accuracy_reward


def _smollm2_addition_reward():
    from .testbeds.addition import accuracy_reward

    return accuracy_reward


# The names `trl grpo --reward_funcs` knows (trl/scripts/grpo.py), built with the same settings as there.
TRL_REWARD_FUNCTIONS = ("accuracy_reward", "reasoning_accuracy_reward", "think_format_reward",
                        "get_soft_overlong_punishment")
_NEEDS_MATH_VERIFY = ("accuracy_reward", "reasoning_accuracy_reward")


def _trl_reward(name: str) -> Callable:
    """TRL's reward function `name` from `trl.rewards`, as `trl grpo` builds it.

    `get_soft_overlong_punishment` is a factory: as in `trl grpo`, it is called with `max_completion_len=1280` and
    `soft_punish_cache=256` (for other values, pass your own function by import path). The math-verifying rewards
    are refused here, before training, when `math_verify` is missing (TRL would raise at the first reward).
    """
    import trl.rewards as trl_rewards

    if name in _NEEDS_MATH_VERIFY:
        from ._trl_private import is_math_verify_available

        if not is_math_verify_available():
            raise ImportError(f"reward function {name!r} (TRL's) needs the math_verify package: "
                              "pip install math-verify")
    if name == "get_soft_overlong_punishment":
        return trl_rewards.get_soft_overlong_punishment(max_completion_len=1280, soft_punish_cache=256)
    return getattr(trl_rewards, name)


REWARD_FUNCTIONS: dict[str, Callable[[], Callable]] = {
    "boxed_accuracy": lambda: boxed_accuracy,
    "testbed": _testbed_reward,
    "smollm2_addition": _smollm2_addition_reward,
    **{name: (lambda name=name: _trl_reward(name)) for name in TRL_REWARD_FUNCTIONS},
}


def get_reward_function(name: str) -> Callable:
    """A reward function by name: this package's (`REWARD_FUNCTIONS`), TRL's (`TRL_REWARD_FUNCTIONS`, as
    `trl grpo --reward_funcs` takes them), or an import path `package.module:function` or `package.module.function`.

    Raises `ValueError` naming what is wrong (an unknown name, a missing module or function), and `ImportError` for
    a TRL reward whose optional dependency is missing.
    """
    if name in REWARD_FUNCTIONS:
        return REWARD_FUNCTIONS[name]()
    if ":" in name or "." in name:
        return import_callable(name, "reward function")
    ours = [n for n in REWARD_FUNCTIONS if n not in TRL_REWARD_FUNCTIONS]
    raise ValueError(f"reward function {name!r} is unknown; use one of {sorted(ours)}, one of TRL's "
                     f"{list(TRL_REWARD_FUNCTIONS)}, or an import path 'package.module:function' or "
                     "'package.module.function'.")
