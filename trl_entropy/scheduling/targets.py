"""The entropy target of a run, from its config: the schedule built from the `entropy_schedule*` fields, with a start
or end relative to the initial entropy resolved once that is measured, the checks on the targets (below the
largest entropy the model can have; a bare end that may have been meant as a fraction), and the record of what the
target depends on, kept in each checkpoint and compared at resume.

`GRPOEntropyTrainer` calls these when it is built and at its first generation batch; they need no trainer.
"""

from __future__ import annotations

import math
import warnings

from .schedules import CALLABLE_SCHEDULE_PREFIX, CallableSchedule, make_schedule, parse_entropy_value, schedule_label

__all__ = [
    "SCHEDULE_FIELDS",
    "InitialEntropySchedule",
    "build_schedule",
    "check_targets_below_max_entropy",
    "max_entropy",
    "resolve_entropy_value",
    "schedule_record",
    "warn_if_end_looks_like_a_fraction",
    "warn_if_schedule_changed",
]

#: Config fields the entropy target depends on (with max_steps): recorded with the control state, compared at resume.
SCHEDULE_FIELDS = ("entropy_schedule", "entropy_schedule_start", "entropy_schedule_end",
                   "entropy_schedule_warmup_steps", "entropy_schedule_anneal_ratio")


def resolve_entropy_value(value, initial: float | None) -> float | None:
    """A schedule start/end in nats: numbers as they are, "initial"-relative values times ``initial`` (``None`` while
    the initial entropy is unknown)."""
    parsed = parse_entropy_value(value)
    if parsed is None:
        return None
    kind, number = parsed
    if kind == "nats":
        return number
    return None if initial is None else number * initial


def max_entropy(model) -> float | None:
    """log(vocabulary size): the largest per-token entropy the model's output distribution can have."""
    try:
        weight = model.get_output_embeddings().weight
        # under DeepSpeed ZeRO-3 the local tensor is this rank's partition (often empty); ds_shape is the full shape
        size = tuple(getattr(weight, "ds_shape", None) or weight.shape)[0]
    except Exception:  # a model without output embeddings we can read: no check
        size = getattr(getattr(model, "config", None), "vocab_size", None)
    return math.log(size) if isinstance(size, int) and size > 1 else None


class InitialEntropySchedule(CallableSchedule):
    """Stands in for a schedule whose start or end is relative to the initial entropy until that is measured:
    returns ``None`` (no target) before :meth:`resolve`, then the resolved schedule's values."""

    def __init__(self):
        self.schedule = None
        self.fn = self
        self.phase_fn = None
        self.warmup_steps = 0

    @property
    def resolved(self) -> bool:
        return self.schedule is not None

    def resolve(self, schedule) -> None:
        self.schedule = schedule

    def __call__(self, step: int, total_steps: int) -> float | None:
        return None if self.schedule is None else self.schedule(step, total_steps)

    def phase(self, step: int, total_steps: int) -> str | None:
        return None if self.schedule is None else self.schedule.phase(step, total_steps)

    def __getattr__(self, name):
        schedule = self.__dict__.get("schedule")
        if schedule is None:
            raise AttributeError(f"{name!r}: the schedule is not resolved yet (it waits for the initial entropy)")
        return getattr(schedule, name)


def build_schedule(args, initial: float | None):
    """The schedule of the config ``args``, with start/end given relative to ``initial`` resolved to nats."""
    return make_schedule(
        args.entropy_schedule,
        start=resolve_entropy_value(args.entropy_schedule_start, initial),
        end=resolve_entropy_value(args.entropy_schedule_end, initial),
        warmup_steps=args.entropy_schedule_warmup_steps,
        anneal_ratio=args.entropy_schedule_anneal_ratio,
    )


INITIAL_PRECISION = 0.02  # the relative standard error a target written relative to "initial" is measured to


def initial_entropy_metrics(entropy: float, standard_error: float | None, rounds: int = 0) -> dict:
    """The metrics of the initial entropy (``initial_entropy``, its standard error ``initial_entropy_se`` from the
    spread of the completions, and ``initial_entropy_rounds``, the generation rounds aside that measured it beyond the
    first batch), with a warning when that error is still above ``INITIAL_PRECISION`` of the value: a target written
    relative to ``"initial"`` inherits it."""
    out = {"initial_entropy": entropy, "initial_entropy_rounds": float(rounds)}
    if standard_error is None:
        return out
    out["initial_entropy_se"] = standard_error
    if entropy > 0 and standard_error > INITIAL_PRECISION * entropy:
        where = "the first generation batch" + (f" and {rounds} more rounds aside" if rounds else "")
        warnings.warn(
            f"The initial entropy, {entropy:.4f} nats, was measured on {where} to a standard error "
            f"of {standard_error:.4f} ({100 * standard_error / entropy:.1f}%, above {100 * INITIAL_PRECISION:g}%): a "
            "target written relative to \"initial\" carries that error. For a steadier start, generate more "
            "completions per batch (per_device_train_batch_size x steps_per_generation), or write the target in nats "
            "(measure it once with trl_entropy.demo.testbed.completion_entropy or a short run).",
            RuntimeWarning, stacklevel=3)
    return out


def warn_if_end_looks_like_a_fraction(args, initial: float, stacklevel: int = 1) -> None:
    """A start relative to the initial entropy with a bare end of at most 1 is ambiguous: the end is read in nats,
    but may have been meant as a fraction. Say what was resolved, and how to write a fraction (``stacklevel`` as
    for `warnings.warn`, counted from the caller)."""
    start, end = args.entropy_schedule_start, args.entropy_schedule_end
    # the config has already turned a number of nats, given as text or not, into a float
    if not (isinstance(start, str) and isinstance(end, (int, float)) and 0.0 < end <= 1.0):
        return
    if args.entropy_schedule == "constant":
        return
    resolved = resolve_entropy_value(start, initial)
    warnings.warn(
        f"The entropy schedule starts at {resolved:.4f} nats ({start}, measured on the first generation batch) "
        f"and ends at entropy_schedule_end = {end:g} nats: a bare number is an entropy in nats. If you meant a "
        f"fraction of the initial entropy, write entropy_schedule_end='{end:g}*initial' ({end * initial:.4f} "
        "nats here).",
        UserWarning,
        stacklevel=stacklevel + 1,
    )


def check_targets_below_max_entropy(args, largest: float | None, initial: float | None = None) -> None:
    """Refuse a target above ``largest`` = log(vocabulary size), the largest entropy a token distribution can have
    (``None``: no check)."""
    if largest is None:
        return
    for name in ("entropy_schedule_start", "entropy_schedule_end"):
        raw = getattr(args, name)
        value = resolve_entropy_value(raw, initial)
        if value is not None and value > largest:
            measured = "" if not isinstance(raw, str) else f" ({raw} with an initial entropy of {initial:.4f})"
            raise ValueError(
                f"{name} = {value:g} nats{measured} is above the largest entropy this model can have, "
                f"log(vocabulary size) = {largest:.3f} nats: no control can reach it. Choose a target "
                f"below {largest:.3f} (entropy is in nats per completion token)."
            )


def schedule_record(args, max_steps: int) -> dict:
    """What the entropy target depends on besides the step: the schedule fields of ``args`` and the run's total steps
    (a callable schedule by its readable name, as the saved config keeps it)."""
    schedule = args.entropy_schedule
    if callable(schedule):
        schedule = CALLABLE_SCHEDULE_PREFIX + schedule_label(schedule)
    record = {name: getattr(args, name) for name in SCHEDULE_FIELDS}
    record["entropy_schedule"] = schedule
    record["max_steps"] = max_steps
    return record


def warn_if_schedule_changed(checkpoint, saved: dict | None, current: dict, stacklevel: int = 1) -> None:
    """Warn, naming each one, when a schedule field or max_steps of ``current`` (:func:`schedule_record`) differs from
    ``saved``, the record of the run that wrote the checkpoint (checkpoints written before these were recorded are not
    checked). ``stacklevel`` as for `warnings.warn`, counted from the caller."""
    if not isinstance(saved, dict):
        return
    changed = [f"{name}: {saved[name]!r} → {current[name]!r}"
               for name in current if name in saved and saved[name] != current[name]]
    if not changed:
        return
    warnings.warn(
        f"Resuming from {checkpoint} with {'; '.join(changed)} (checkpoint → this run). The target is computed "
        "from the step, the schedule fields and max_steps, so from here on it follows the new values and the run "
        "does not continue the schedule it started with. Resume with the checkpoint's values to continue it.",
        UserWarning,
        stacklevel=stacklevel + 1,
    )
