"""Positive-advantage reweighting (Jin et al. 2025): `entropy_control="positive_reweight"`."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

from ..losses import sign_weights
from ..losses.reweighting import positive_reweight_progression
from ..scheduling.controllers import LambdaStepController
from ._base import _USER_STACKLEVEL, ControllerControl, check_choice, check_range, register_control


POSITIVE_REWEIGHT_SCHEDULES = ("entropy", "stage", "epoch")


@dataclass
class PositiveReweightSettings:
    r"""
    Settings of positive-advantage reweighting (`entropy_control="positive_reweight"`, Jin et al. 2025).

    Parameters:
        positive_reweight_schedule (`str`, *optional*, defaults to `"entropy"`):
            How lambda, the weight of positive-advantage tokens, moves: `"entropy"` (lambda -= step when the measured
            entropy is below the target, += step otherwise, clipped to [0, 1]), `"stage"` (0 for the first half of
            training, then linear 0 -> 1) or `"epoch"` (lambda = (e - 1) / (E - 1) over `positive_reweight_epochs`).
        positive_reweight_lambda_init (`float`, *optional*, defaults to `0.0`):
            Initial lambda, in [0, 1].
        positive_reweight_step (`float`, *optional*, defaults to `0.05`):
            Step of lambda per optimizer step for the `"entropy"` schedule, in [0, 1] (0 only with
            `positive_reweight_kp > 0`).
        positive_reweight_kp (`float`, *optional*, defaults to `0.0`):
            Proportional gain for the `"entropy"` schedule, >= 0. 0 is the paper's stepped rule. With kp > 0 the
            stepped value I becomes the integral part and lambda = clip(I + kp * (H - target) / target, 0, 1), so
            lambda drops in the same step in which entropy falls below the target. On SmolLM2 it did not track
            better than the paper's rule (docs/benchmarks.md).
        positive_reweight_epochs (`int`, *optional*, defaults to `5`):
            Number of equal stages E for the `"epoch"` schedule; >= 2.
    """

    positive_reweight_schedule: str = field(
        default="entropy",
        metadata={"help": "Positive reweighting: how lambda moves: 'entropy' (feedback), 'stage' or 'epoch'."},
    )
    positive_reweight_lambda_init: float = field(
        default=0.0, metadata={"help": "Positive reweighting: initial lambda, in [0, 1]."}
    )
    positive_reweight_step: float = field(
        default=0.05,
        metadata={"help": "Positive reweighting: lambda step per optimizer step, in [0, 1] (0 only with "
                  "positive_reweight_kp > 0)."},
    )
    positive_reweight_kp: float = field(
        default=0.0,
        metadata={"help": "Positive reweighting: proportional gain on the relative entropy error, >= 0; 0 is the "
                  "paper's stepped rule, > 0 adds lambda += kp * (H - target) / target."},
    )
    positive_reweight_epochs: int = field(
        default=5, metadata={"help": "Positive reweighting, 'epoch' schedule: number of stages E; >= 2."}
    )


@register_control("positive_reweight")
class PositiveReweightControl(ControllerControl):
    """Positive-advantage reweighting (Jin et al.): tokens with A > 0 weighted by lambda, A <= 0 by 1."""

    uses_advantage_weights = True
    follows_target = True  # with the default "entropy" schedule; a fixed progression does not (follows_target_for)
    knob_name = "lambda"
    raises_entropy = -1  # more weight on positive-advantage tokens sharpens the policy
    card_text = ("positive-advantage reweighting (Jin et al. 2025): tokens with positive advantage are weighted by "
                 "λ ∈ [0, 1].")
    config_prefixes = ("positive_reweight_",)
    citations = ("jin2025",)
    settings_class = PositiveReweightSettings
    demo_description = "positive-advantage reweighting, entropy-guided lambda (Jin et al.)"
    docs_page = "positive-reweight.md"
    docs_row = ('positive-advantage reweighting ([Jin et al., arXiv 2511.05993](https://arxiv.org/abs/2511.05993))',
                'λ on A > 0 tokens',
                'every update',
                'with the `entropy` progression')

    @classmethod
    def validate_settings(cls, args):
        check_choice(args, "positive_reweight_schedule", POSITIVE_REWEIGHT_SCHEDULES)
        check_range(args, "positive_reweight_lambda_init", 0.0, 1.0)
        check_range(args, "positive_reweight_kp", 0.0, math.inf)
        if args.positive_reweight_step == 0 and args.positive_reweight_kp == 0:
            raise ValueError(
                "positive_reweight_step = 0 with positive_reweight_kp = 0 would never move lambda: set "
                "positive_reweight_step in (0, 1], or positive_reweight_kp > 0 for a proportional-only rule."
            )
        check_range(args, "positive_reweight_step", 0.0, 1.0)
        if not isinstance(args.positive_reweight_epochs, int) or args.positive_reweight_epochs < 2:
            raise ValueError(f"positive_reweight_epochs must be an integer >= 2, got {args.positive_reweight_epochs!r}.")

    @classmethod
    def follows_target_for(cls, args) -> bool:
        return args.positive_reweight_schedule == "entropy"

    @classmethod
    def ignores_target_because(cls, args) -> str:
        return f"positive_reweight_schedule={args.positive_reweight_schedule!r} is a fixed progression"

    @classmethod
    def validate(cls, args):
        if args.positive_reweight_schedule == "entropy":
            return
        feedback_only = args._fields_set("positive_reweight_lambda_init", "positive_reweight_step",
                                         "positive_reweight_kp")
        if feedback_only:
            warnings.warn(
                f"{', '.join(feedback_only)} {'is' if len(feedback_only) == 1 else 'are'} ignored: "
                f"positive_reweight_schedule={args.positive_reweight_schedule!r} is a fixed progression; "
                "they belong to the 'entropy' (feedback) schedule.",
                UserWarning,
                stacklevel=_USER_STACKLEVEL,
            )

    def __init__(self, args):
        super().__init__(args)
        self.kind = args.positive_reweight_schedule
        self.follows_target = self.kind == "entropy"
        self.controller = LambdaStepController(args.positive_reweight_lambda_init, args.positive_reweight_step,
                                               args.positive_reweight_kp)

    def advantage_weights(self, advantages, step, total_steps):
        if self.kind != "entropy":
            self.controller.value = positive_reweight_progression(
                self.kind, step, total_steps, num_epochs=self.args.positive_reweight_epochs
            )
        return sign_weights(advantages, self.controller.value, 1.0)

    def observe(self, measured, target):
        if self.kind == "entropy" and target is not None:
            self.controller.update(measured, target)
