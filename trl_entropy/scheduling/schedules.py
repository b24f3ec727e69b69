"""Target-entropy schedules: small objects mapping ``(step, total_steps)`` to a target entropy in nats.

``step`` is the number of optimizer steps already taken (``TrainerState.global_step`` at the start of a step), so
the first optimizer step sees ``step=0`` and the last one ``step=total_steps - 1``. Progress is measured against that
last step, so the last optimizer step trains with ``end`` exactly. Every shape holds ``start`` for the first
``warmup_steps`` steps, then:

* ``constant``: ``start`` throughout.
* ``linear``:   ``start + (end - start) * p``, with ``p = (step - warmup) / (total - 1 - warmup)`` clipped to [0, 1].
* ``cosine``:   ``end + (start - end) * (1 + cos(pi * p)) / 2``.
* ``wsd``:      warmup-stable-anneal (Wang et al., "stable then anneal"): hold ``start`` until the last
  ``anneal_ratio`` of training (at least one step), then decay linearly to ``end``:
  ``p = (step - anneal_start) / (total - 1 - anneal_start)``,
  ``anneal_start = max(warmup, total - max(1, round(anneal_ratio * total)))``.

The first step of a shape (``step == warmup`` or ``anneal_start``) still sees ``start``; when the shape spans a single
step (``total - 1 == warmup`` or ``anneal_start``) that step sees ``end``.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from dataclasses import dataclass
from typing import Callable

__all__ = [
    "EntropySchedule",
    "ConstantSchedule",
    "LinearSchedule",
    "CosineSchedule",
    "WSDSchedule",
    "CallableSchedule",
    "make_schedule",
    "schedule_label",
    "SCHEDULES",
    "CALLABLE_SCHEDULE_PREFIX",
    "INITIAL",
    "parse_entropy_value",
]

INITIAL = "initial"  # a schedule start/end relative to the starting model's measured entropy


def parse_entropy_value(value) -> tuple[str, float] | None:
    """A schedule start/end as ``("nats", x)`` or ``("initial", fraction)``; ``None`` for ``None``.

    Accepted: a number of nats (or its text, as the command line gives it), ``"initial"`` (the starting model's
    measured entropy) and ``"<fraction>*initial"`` / ``"initial*<fraction>"`` (e.g. ``"0.5*initial"``). Raises a
    ``ValueError`` for anything else.
    """
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return ("nats", float(value))
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if text == INITIAL:
            return (INITIAL, 1.0)
        parts = text.split("*")
        if len(parts) == 2 and INITIAL in parts:
            other = parts[1] if parts[0] == INITIAL else parts[0]
            try:
                fraction = float(other)
            except ValueError:
                fraction = None
            if fraction is not None and math.isfinite(fraction) and fraction >= 0:
                return (INITIAL, fraction)
        else:
            try:
                number = float(text)
            except ValueError:
                number = None
            if number is not None and math.isfinite(number):
                return ("nats", number)
    raise ValueError(
        f"must be a number of nats >= 0, 'initial' (the starting model's entropy, measured on the first generation "
        f"batch) or a fraction of it such as '0.5*initial'; got {value!r}."
    )


# How a callable `entropy_schedule` appears where the callable itself cannot be stored (`training_args.bin` in
# checkpoints, `to_dict()`/`to_json_string()` for loggers): this prefix and `schedule_label(fn)`.
CALLABLE_SCHEDULE_PREFIX = "callable:"


def _progress(step: int, begin: int, total: int) -> float:
    """Fraction of the way from step ``begin`` to the last optimizer step, ``total - 1``, clipped to [0, 1]."""
    span = (total - 1) - begin
    if span <= 0:
        return 1.0 if step >= begin else 0.0
    return min(1.0, max(0.0, (step - begin) / span))


@dataclass(frozen=True)
class EntropySchedule:
    """Base class: ``schedule(step, total_steps) -> target entropy (nats)``."""

    start: float
    end: float | None = None
    warmup_steps: int = 0

    def __post_init__(self):
        if not math.isfinite(self.start) or self.start < 0:
            raise ValueError(f"entropy_schedule_start must be a finite number >= 0, got {self.start}.")
        if self.end is not None and (not math.isfinite(self.end) or self.end < 0):
            raise ValueError(f"entropy_schedule_end must be a finite number >= 0 or None, got {self.end}.")
        if self.warmup_steps < 0:
            raise ValueError(f"entropy_schedule_warmup_steps must be >= 0, got {self.warmup_steps}.")

    @property
    def final(self) -> float:
        return self.start if self.end is None else self.end

    def shape(self, step: int, total_steps: int) -> float:  # pragma: no cover - overridden
        raise NotImplementedError

    def phase(self, step: int, total_steps: int) -> str:
        """``"warmup"``, ``"stable"`` or ``"anneal"`` (the annealing phase is where the target decreases)."""
        if step < self.warmup_steps:
            return "warmup"
        return "anneal" if self.final != self.start else "stable"

    def __call__(self, step: int, total_steps: int) -> float:
        if total_steps is None or total_steps <= 0:
            raise ValueError(f"total_steps must be a positive integer, got {total_steps}.")
        if step < self.warmup_steps:
            return float(self.start)
        return float(self.shape(step, total_steps))


class ConstantSchedule(EntropySchedule):
    def shape(self, step, total_steps):
        return self.start

    def phase(self, step, total_steps):
        return "warmup" if step < self.warmup_steps else "stable"


class LinearSchedule(EntropySchedule):
    def shape(self, step, total_steps):
        p = _progress(step, self.warmup_steps, total_steps)
        return self.start + (self.final - self.start) * p


class CosineSchedule(EntropySchedule):
    def shape(self, step, total_steps):
        p = _progress(step, self.warmup_steps, total_steps)
        return self.final + (self.start - self.final) * 0.5 * (1.0 + math.cos(math.pi * p))


@dataclass(frozen=True)
class WSDSchedule(EntropySchedule):
    anneal_ratio: float = 0.1

    def __post_init__(self):
        super().__post_init__()
        if not (0.0 < self.anneal_ratio <= 1.0):
            raise ValueError(f"entropy_schedule_anneal_ratio must be in (0, 1], got {self.anneal_ratio}.")

    def anneal_start(self, total_steps: int) -> int:
        anneal_steps = max(1, int(round(self.anneal_ratio * total_steps)))  # at least the last step anneals
        return max(self.warmup_steps, total_steps - anneal_steps)

    def shape(self, step, total_steps):
        p = _progress(step, self.anneal_start(total_steps), total_steps)
        return self.start + (self.final - self.start) * p

    def phase(self, step, total_steps):
        if step < self.warmup_steps:
            return "warmup"
        return "anneal" if step >= self.anneal_start(total_steps) else "stable"


class CallableSchedule:
    """Wraps a user function ``fn(step, total_steps) -> float`` as a schedule (its values are checked)."""

    def __init__(self, fn: Callable[[int, int], float], phase_fn: Callable[[int, int], str] | None = None):
        if not callable(fn):
            raise ValueError(f"entropy_schedule must be a schedule name or a callable, got {type(fn).__name__}.")
        self.fn = fn
        self.phase_fn = phase_fn
        self.warmup_steps = 0

    def __call__(self, step: int, total_steps: int) -> float:
        value = float(self.fn(step, total_steps))
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"The entropy schedule returned {value} at step {step}; targets must be finite and >= 0.")
        return value

    def phase(self, step: int, total_steps: int) -> str:
        return self.phase_fn(step, total_steps) if self.phase_fn is not None else "stable"


SCHEDULES = {"constant": ConstantSchedule, "linear": LinearSchedule, "cosine": CosineSchedule, "wsd": WSDSchedule}


def _short_repr(value, limit: int = 40) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not break a model card
        text = f"<{type(value).__qualname__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def schedule_label(fn) -> str:
    """A short, readable name for a schedule callable, for model cards and serialised configs.

    A function gives its qualified name (``decay``, ``Sched.value``), a lambda ``lambda (file.py:LINE)``, a
    ``functools.partial`` its function and bound arguments, an object with its own ``__repr__`` (e.g. a
    :class:`LinearSchedule`) that repr, any other callable object ``<Class> instance``. Never raises.
    """
    if isinstance(fn, CallableSchedule):
        return schedule_label(fn.fn)
    if isinstance(fn, functools.partial):
        parts = [schedule_label(fn.func)] + [_short_repr(a) for a in fn.args]
        parts += [f"{k}={_short_repr(v)}" for k, v in fn.keywords.items()]
        return f"functools.partial({', '.join(parts)})"
    if inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isbuiltin(fn):
        if getattr(fn, "__name__", None) == "<lambda>":
            code = getattr(fn, "__code__", None)
            where = f" ({os.path.basename(code.co_filename)}:{code.co_firstlineno})" if code is not None else ""
            return f"lambda{where}"
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
        return name.replace("<locals>.", "")
    if type(fn).__repr__ is not object.__repr__:
        return _short_repr(fn, limit=80)
    return f"{type(fn).__qualname__} instance"


def make_schedule(name, start=None, end=None, warmup_steps=0, anneal_ratio=0.1):
    """Build a schedule from its config name, or wrap a callable / pass an existing schedule through."""
    if isinstance(name, EntropySchedule) or isinstance(name, CallableSchedule):
        return name
    if callable(name):
        return CallableSchedule(name)
    if isinstance(name, str) and name.startswith(CALLABLE_SCHEDULE_PREFIX):
        raise ValueError(
            f"entropy_schedule={name!r} is the placeholder a saved config keeps for a callable schedule (callables "
            "are not stored in checkpoints or logged configs). Pass the same callable again as entropy_schedule."
        )
    if name not in SCHEDULES:
        raise ValueError(f"entropy_schedule must be one of {sorted(SCHEDULES)} or a callable, got {name!r}.")
    if start is None:
        raise ValueError("entropy_schedule_start must be set (a target entropy in nats, >= 0) to use a schedule.")
    kwargs = dict(start=float(start), end=None if end is None else float(end), warmup_steps=int(warmup_steps))
    if name == "wsd":
        kwargs["anneal_ratio"] = float(anneal_ratio)
    return SCHEDULES[name](**kwargs)
