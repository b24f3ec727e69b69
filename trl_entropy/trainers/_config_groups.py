"""The parts of `GRPOEntropyConfig` (``grpo_entropy_config.py``) that are not its validation: the field groups every
run shares (which control, the target schedule, the measurement; the run's pictures, card and fault limits), the
small helpers its checks call, and the registry views it offers (``ENTROPY_CONTROLS`` & co.).

The lists the fields name come from where they are defined: the controls from the registry
(``trl_entropy.controls.CONTROL_REGISTRY``), the schedules from ``trl_entropy.scheduling.schedules.SCHEDULES``.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field, fields

from ..controls._base import CONTROL_REGISTRY, RegisteredControls
from ..scheduling.schedules import SCHEDULES, schedule_label

# Every control name: "none" and the registered controls (the registry is the one list); live views, so that a
# control registered later (outside the package) is a valid choice everywhere.
ENTROPY_CONTROLS = RegisteredControls(with_none=True)
# Controls that follow a target entropy and therefore need a schedule.
TARGET_FOLLOWING_CONTROLS = RegisteredControls(lambda cls: cls.follows_target)
# Controls whose knob is TRL's entropy coefficient (no assist on top of them).
COEFFICIENT_CONTROLS = RegisteredControls(lambda cls: cls.knob_name == "entropy_coef")
ENTROPY_MEASUREMENTS = ("step", "generation_batch")
SCHEDULE_NAMES = tuple(SCHEDULES)  # the named schedules (scheduling/schedules.py)


def _either(names) -> str:
    """``'a', 'b' or 'c'``: the names as a field's help lists them (the built-in ones, when it is written)."""
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def _is_bool_annotation(annotation) -> bool:
    """Whether a dataclass field is annotated `bool` or `bool | None` (annotations may be strings)."""
    if annotation is bool:
        return True
    text = annotation if isinstance(annotation, str) else str(annotation)
    return text.replace("typing.", "") in ("bool", "bool | None", "None | bool", "Optional[bool]")


@functools.lru_cache(maxsize=None)
def _bool_field_names(cls) -> tuple[str, ...]:
    """The fields of dataclass `cls` annotated `bool` or `bool | None`, from the class annotations (HfArgumentParser
    rewrites `Field.type` in place, e.g. `str | bool` to `bool`, so the fields themselves cannot be trusted)."""
    names: dict[str, bool] = {}
    for klass in reversed(cls.__mro__):
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            names[name] = _is_bool_annotation(annotation)
    init_fields = {f.name for f in fields(cls) if f.init}
    return tuple(n for n, is_bool in names.items() if is_bool and n in init_fields)


def check_schedule_arity(fn) -> None:
    """Raise a ``ValueError`` when a callable ``entropy_schedule`` cannot be called as ``fn(step, total_steps)``.

    The trainer calls it with two positional arguments; a callable that takes another number (e.g.
    ``lambda step: ...``) would otherwise fail only inside ``train()``, with a bare ``TypeError``. Accepted: any
    callable that binds two positional arguments (defaults and ``*args`` included). A callable whose signature cannot
    be read (some builtins and C extensions) is accepted unchecked.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(0, 1)
    except TypeError as err:
        raise ValueError(
            f"entropy_schedule {schedule_label(fn)!r} has the signature {signature}, but a schedule is called as "
            f"fn(step, total_steps) (the optimizer step, from 0, and the total number of steps): {err}. Make it take "
            "those two positional arguments (any other parameter needs a default), e.g. "
            "`lambda step, total_steps: 2.0 - step / total_steps`; one that ignores total_steps still takes it."
        ) from None


@dataclass
class _ScheduleSettings:
    """The fields every control shares: which control, the target schedule, the measurement (documented on
    :class:`GRPOEntropyConfig`)."""

    entropy_control: str = field(
        default="none",
        metadata={
            "help": f"Entropy control: 'none' (plain GRPO), {_either(CONTROL_REGISTRY)}, or a control registered with "
            "trl_entropy.register_control (on the command line: import its module with --entropy_control_module).",
            "choices": ENTROPY_CONTROLS,  # live: a control registered before parsing is a valid choice
        },
    )
    # Annotated `str` so command-line/YAML parsing works; in Python a callable fn(step, total_steps) is accepted too.
    entropy_schedule: str | None = field(
        default=None,
        metadata={
            "help": f"Target entropy curve: {_either(SCHEDULE_NAMES)} ('wsd': warmup-stable-anneal); in Python also a "
            "callable fn(step, total_steps) -> nats. Defaults to 'constant' for target-following controls; must be "
            "unset with entropy_control='none'.",
            "choices": list(SCHEDULE_NAMES),
        },
    )
    # Annotated `float | str` so that the command line and YAML accept "initial" and "0.5*initial" next to numbers.
    entropy_schedule_start: float | str | None = field(
        default=None,
        metadata={"help": "Target entropy (nats per completion token) at the start of training, >= 0; or 'initial' "
                  "(the starting model's entropy, measured on the first generation batch) or a fraction of it, "
                  "e.g. '0.9*initial'."},
    )
    entropy_schedule_end: float | str | None = field(
        default=None,
        metadata={"help": "Target entropy on the last optimizer step, >= 0, or a fraction of the initial entropy "
                  "('0.5*initial'). Required by 'linear', 'cosine' and 'wsd' (for 'wsd' <= entropy_schedule_start); "
                  "'constant' ignores it."},
    )
    entropy_schedule_warmup_steps: int = field(
        default=0,
        metadata={"help": "Optimizer steps during which the target is held at its start value; >= 0."},
    )
    entropy_schedule_anneal_ratio: float = field(
        default=0.1,
        metadata={"help": "For 'wsd': fraction of training, in (0, 1], spent annealing at the end."},
    )
    saturation_window: int = field(
        default=3,
        metadata={"help": "Steps in a row a control's knob must sit at a limit, pushed by an error of one sign, "
                  "before entropy_control/saturated is 1 (and a warning says the target is out of reach); >= 1."},
    )
    entropy_measurement: str = field(
        default="step",
        metadata={"help": "The entropy a control acts on: 'step' (the optimizer step's own completions) or "
                  "'generation_batch' (the current policy's entropy on the whole generation batch, estimated from "
                  "the step's tokens against their entropy at generation; no extra forward)."},
    )


@dataclass
class _RunSettings:
    """The fields that hold for any control: TRL's rule beside a control, pictures, the card, faults (documented on
    :class:`GRPOEntropyConfig`)."""

    allow_trl_adaptive_entropy: bool = field(
        default=False,
        metadata={"help": "Opt in to combining an entropy control with TRL's use_adaptive_entropy."},
    )
    entropy_plots: bool = field(
        default=True,
        metadata={
            "help": "Write entropy_curves.png (entropy vs target), entropy_knob.png, reward.png and pass_at_k.png "
            "into output_dir at every save and at the end of training (needs matplotlib; skipped without it)."
        },
    )
    model_card_base_model: str | None = field(
        default=None,
        metadata={
            "help": "Hub model id written as base_model on the model card (e.g. 'HuggingFaceTB/SmolLM2-135M-Instruct') "
            "when the model was loaded from a local folder; by default taken from the model's name or cache folder."
        },
    )

    max_unscorable_batches: int | None = field(
        default=3,
        metadata={
            "help": "Stop with an error after this many generation batches in a row in which no completion got a "
            "reward (all None/NaN: zero advantages, no policy gradient); each one warns. >= 1, or None to only warn."
        },
    )

    reward_error_search: bool = field(
        default=False,
        metadata={
            "help": "When a reward function raises, re-run it on one completion at a time to name the first failing "
            "completion (index and prompt). Off by default: up to one extra call per completion, costly for "
            "sandboxed or paid rewards."
        },
    )


class _InitSignature:
    """The signature of the owner class's `__init__`, without `self` (a descriptor: per class, subclasses included)."""

    def __get__(self, instance, owner):
        signature = inspect.signature(owner.__init__)
        return signature.replace(parameters=list(signature.parameters.values())[1:])


@functools.lru_cache(maxsize=1)
def _cpu_has_bf16_instructions() -> bool | None:
    """Whether the CPU's flags (``/proc/cpuinfo``) list bfloat16 instructions; ``None`` where they cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        return None
    return None
