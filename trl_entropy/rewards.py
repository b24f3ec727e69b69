"""Reward functions selectable by name from the command line and recipes (``reward_funcs: [boxed_accuracy]``).

Each follows TRL's reward-function signature: ``f(prompts, completions, **dataset_columns) -> list[float | None]``.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["REWARD_FUNCTIONS", "get_reward_function", "boxed_accuracy", "final_answer", "last_boxed"]


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


REWARD_FUNCTIONS: dict[str, Callable[[], Callable]] = {
    "boxed_accuracy": lambda: boxed_accuracy,
    "testbed": _testbed_reward,
    "smollm2_addition": _smollm2_addition_reward,
}


def get_reward_function(name: str) -> Callable:
    """A reward function by registry name, or by import path ``package.module:function``."""
    if name in REWARD_FUNCTIONS:
        return REWARD_FUNCTIONS[name]()
    if ":" in name:
        import importlib

        module, attr = name.split(":", 1)
        return getattr(importlib.import_module(module), attr)
    raise ValueError(f"reward function {name!r} is unknown; use one of {sorted(REWARD_FUNCTIONS)} or 'module:function'.")
