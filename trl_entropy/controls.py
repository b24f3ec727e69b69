"""Registry of entropy controls. One control = one small object that says which trainer hooks it uses.

Hooks (see docs in README, "Architecture"):

* ``apply(trainer)``            (A, knob): set the knobs TRL reads (e.g. ``trainer.epsilon_high``) for the next step.
* ``observe(measured, target)`` (E, control): called once per optimizer step with the global measured entropy and
  the scheduled target, identical on every process; updates internal state.
* ``transform_rollouts(advantages, ctx)`` (B, rollouts): once per generation batch, after TRL computed the
  advantages; returns a :class:`RolloutDecision` (keep-mask and local counts). ``ctx`` carries the global
  pre-update rollout entropy, the target and the rollouts' global offset.
* ``advantage_weights(advantages, ctx)`` (B, per step): per micro-batch, multiplicative weights on the sequence
  advantages (equal to per-token weights, since the surrogate is linear in the advantage).
* ``metrics()``                 extra scalars to log under ``entropy_control/``.
* ``state_dict()`` / ``load_state_dict()``: everything needed to resume exactly.

Controls never compute statistics across processes themselves: the trainer reduces them first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .losses import band_from_target, entrocraft_acceptance, entrocraft_sign, sign_weights
from .losses.reweighting import positive_reweight_progression
from .scheduling.controllers import AdaptiveClipController, LambdaStepController

__all__ = [
    "EntropyControl",
    "AdaptiveClipControl",
    "EntrocraftControl",
    "PositiveReweightControl",
    "WReinforceControl",
    "RolloutContext",
    "RolloutDecision",
    "CONTROL_REGISTRY",
    "register_control",
    "build_control",
]


@dataclass
class RolloutContext:
    """What a control may know about a generation batch. Every field is identical on every process."""

    entropy: float | None  # global token-mean entropy of the rollouts before the update (None if not measured)
    target: float | None  # scheduled target of the current optimizer step
    step: int  # optimizer steps done
    total_steps: int
    global_offset: int  # index of this process's first rollout in the global generation batch
    global_size: int  # rollouts in the global generation batch
    seed: int


@dataclass
class RolloutDecision:
    keep: torch.Tensor | None = None  # (B_local,) bool, None = keep all
    counts: dict[str, float] = field(default_factory=dict)  # local counts, summed across processes by the trainer
    scalars: dict[str, float] = field(default_factory=dict)  # already-global values, logged as they are


class EntropyControl:
    """Base class. ``name`` is the config value of ``entropy_control``."""

    name: str = "base"
    follows_target: bool = False
    knob_name: str | None = None
    uses_rollouts: bool = False  # implements transform_rollouts
    uses_advantage_weights: bool = False  # implements advantage_weights

    def __init__(self, args):
        self.args = args

    def apply(self, trainer) -> None:
        """Push the current knob values into the trainer (called before each optimizer step's micro-batches)."""

    def observe(self, measured: float, target: float | None) -> None:
        """Update from one optimizer step's global measured entropy and its scheduled target."""

    @property
    def knob(self) -> float | None:
        return None

    def transform_rollouts(self, advantages: torch.Tensor, ctx: RolloutContext) -> RolloutDecision:
        return RolloutDecision()

    def rollout_metrics(self, counts: dict[str, float]) -> dict[str, float]:
        """Turn globally summed counts into logged ratios."""
        return {}

    def advantage_weights(self, advantages: torch.Tensor, step: int, total_steps: int) -> torch.Tensor | None:
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


class ControllerControl(EntropyControl):
    """A control whose state is one feedback controller (``self.controller``) and whose knob is its value."""

    controller: AdaptiveClipController | LambdaStepController

    @property
    def knob(self):
        return self.controller.value

    def state_dict(self):
        return self.controller.state_dict()

    def load_state_dict(self, state):
        self.controller.load_state_dict(state)


@register_control("adaptive_clip")
class AdaptiveClipControl(ControllerControl):
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


def _mix_seed(seed: int, counter: int) -> int:
    """A per-generation seed, identical on every process, different for every generation batch."""
    return (int(seed) * 1_000_003 + int(counter) * 7_919 + 12_345) % (2**63 - 1)


@register_control("entrocraft")
class EntrocraftControl(EntropyControl):
    """Entrocraft (Li et al. 2026): reject rollouts by advantage sign when entropy leaves a band around the target.

    Draws come from a generator seeded from (seed, generation counter), identical on every process; each process
    skips to its rollouts' global offset, so every rank decides as a single-process run over the same global batch.
    """

    follows_target = True
    uses_rollouts = True
    knob_name = "sign"

    def __init__(self, args):
        super().__init__(args)
        self.generations = 0
        self.last_sign = 0

    def transform_rollouts(self, advantages, ctx):
        if ctx.entropy is None or ctx.target is None:
            return RolloutDecision()
        h_low, h_high = band_from_target(ctx.target, self.args.entrocraft_band)
        generator = torch.Generator(device="cpu").manual_seed(_mix_seed(ctx.seed, self.generations))
        self.generations += 1
        # Decide over the global batch (zeros outside this process's slice) and keep our slice: rollout i always
        # gets draw i, so every process decides exactly as a single-process run over the same global batch.
        local = advantages.detach().float().cpu().reshape(-1)
        global_adv = torch.zeros(ctx.global_size, dtype=local.dtype)
        global_adv[ctx.global_offset : ctx.global_offset + local.numel()] = local
        keep_global = entrocraft_acceptance(
            global_adv,
            ctx.entropy,
            h_low,
            h_high,
            self.args.entrocraft_gamma,
            mode=self.args.entrocraft_mode,
            generator=generator,
        )
        keep = keep_global[ctx.global_offset : ctx.global_offset + local.numel()]
        keep = keep.reshape(advantages.shape).to(advantages.device)
        m = entrocraft_sign(ctx.entropy, h_low, h_high)
        self.last_sign = m
        pos, neg = advantages > 0, advantages < 0
        counts = {
            "total": float(advantages.numel()),
            "kept": float(keep.sum()),
            "pos_total": float(pos.sum()),
            "pos_kept": float((keep & pos).sum()),
            "neg_total": float(neg.sum()),
            "neg_kept": float((keep & neg).sum()),
        }
        scalars = {"h_low": h_low, "h_high": h_high, "rollout_entropy": ctx.entropy}
        return RolloutDecision(keep=keep, counts=counts, scalars=scalars)

    def rollout_metrics(self, counts):
        def ratio(a, b):
            return counts[a] / counts[b] if counts[b] > 0 else float("nan")

        out = {
            "acceptance_rate": ratio("kept", "total"),
            "positive_kept_fraction": ratio("pos_kept", "pos_total"),
            "negative_kept_fraction": ratio("neg_kept", "neg_total"),
        }
        return out

    @property
    def knob(self):
        return float(self.last_sign)

    def state_dict(self):
        return {"generations": self.generations, "last_sign": self.last_sign}

    def load_state_dict(self, state):
        self.generations = int(state["generations"])
        self.last_sign = int(state.get("last_sign", 0))


@register_control("positive_reweight")
class PositiveReweightControl(ControllerControl):
    """Positive-advantage reweighting (Jin et al.): tokens with A > 0 weighted by lambda, A <= 0 by 1."""

    uses_advantage_weights = True
    knob_name = "lambda"

    def __init__(self, args):
        super().__init__(args)
        self.kind = args.positive_reweight_schedule
        self.follows_target = self.kind == "entropy"
        self.controller = LambdaStepController(args.positive_reweight_lambda_init, args.positive_reweight_step)

    def advantage_weights(self, advantages, step, total_steps):
        if self.kind != "entropy":
            self.controller.value = positive_reweight_progression(
                self.kind, step, total_steps, num_epochs=self.args.positive_reweight_epochs
            )
        return sign_weights(advantages, self.controller.value, 1.0)

    def observe(self, measured, target):
        if self.kind == "entropy" and target is not None:
            self.controller.update(measured, target)


@register_control("w_reinforce")
class WReinforceControl(EntropyControl):
    """W-REINFORCE (Zhu et al.): positive-advantage rollouts weighted by a fixed lambda, negatives by 1.

    Acts on TRL's group-normalised advantages (the paper uses raw {0, 1} rewards without a baseline; on binary
    rewards the sign of the group-centred advantage is the sign of correctness, except in zero-std groups, which
    carry no gradient in either form).
    """

    uses_advantage_weights = True
    knob_name = "lambda"

    def advantage_weights(self, advantages, step, total_steps):
        return sign_weights(advantages, self.args.w_reinforce_lambda, 1.0)

    @property
    def knob(self):
        return self.args.w_reinforce_lambda


def build_control(args) -> EntropyControl | None:
    """The control object for ``args.entropy_control``, or ``None`` for ``"none"``."""
    name = getattr(args, "entropy_control", "none")
    if name == "none":
        return None
    if name not in CONTROL_REGISTRY:
        raise ValueError(f"entropy_control={name!r} has no registered implementation; known: {sorted(CONTROL_REGISTRY)}.")
    return CONTROL_REGISTRY[name](args)
