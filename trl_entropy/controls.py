"""Registry of entropy controls. One control = one small object that says which trainer hooks it uses.

Hooks (see docs in README, "Architecture"):

* ``apply(trainer)``            (A, knob): set the knobs TRL reads (e.g. ``trainer.epsilon_high``) for the next step.
* ``observe(measured, target)`` (E, control): called once per optimizer step with the global measured entropy and
  the scheduled target, identical on every process; updates internal state.
* ``metrics()``                 extra scalars to log under ``entropy_control/``.
* ``state_dict()`` / ``load_state_dict()``: everything needed to resume exactly.

Controls never compute statistics across processes themselves: the trainer reduces them first.
"""

from __future__ import annotations

from typing import Callable

from .scheduling.controllers import AdaptiveClipController

__all__ = ["EntropyControl", "AdaptiveClipControl", "CONTROL_REGISTRY", "register_control", "build_control"]


class EntropyControl:
    """Base class. ``name`` is the config value of ``entropy_control``."""

    name: str = "base"
    follows_target: bool = False
    knob_name: str | None = None

    def __init__(self, args):
        self.args = args

    def apply(self, trainer) -> None:
        """Push the current knob values into the trainer (called before each optimizer step's micro-batches)."""

    def observe(self, measured: float, target: float | None) -> None:
        """Update from one optimizer step's global measured entropy and its scheduled target."""

    @property
    def knob(self) -> float | None:
        return None

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


CONTROL_REGISTRY: dict[str, type[EntropyControl]] = {}


def register_control(name: str) -> Callable[[type[EntropyControl]], type[EntropyControl]]:
    def deco(cls):
        cls.name = name
        CONTROL_REGISTRY[name] = cls
        return cls

    return deco


@register_control("adaptive_clip")
class AdaptiveClipControl(EntropyControl):
    """Adaptive clip-higher (Wang et al.): moves ``epsilon_high`` by ±δ so entropy tracks the schedule."""

    follows_target = True
    knob_name = "epsilon_high"

    def __init__(self, args):
        super().__init__(args)
        initial = args.epsilon_high if args.epsilon_high is not None else args.epsilon
        self.controller = AdaptiveClipController(
            initial=initial,
            delta=args.adaptive_clip_delta,
            window=args.adaptive_clip_window,
            c_min=args.adaptive_clip_min,
            c_max=args.adaptive_clip_max,
            warmup_steps=args.adaptive_clip_warmup_steps,
        )

    def apply(self, trainer) -> None:
        trainer.epsilon_high = self.controller.value

    def observe(self, measured, target):
        if target is not None:
            self.controller.update(measured, target)

    @property
    def knob(self):
        return self.controller.value

    def state_dict(self):
        return self.controller.state_dict()

    def load_state_dict(self, state):
        self.controller.load_state_dict(state)


def build_control(args) -> EntropyControl | None:
    """The control object for ``args.entropy_control``, or ``None`` for ``"none"``."""
    name = getattr(args, "entropy_control", "none")
    if name == "none":
        return None
    if name not in CONTROL_REGISTRY:
        raise ValueError(f"entropy_control={name!r} has no registered implementation; known: {sorted(CONTROL_REGISTRY)}.")
    return CONTROL_REGISTRY[name](args)
