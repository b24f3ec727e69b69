"""Adaptive clip-higher (Wang et al. 2026, Entropy Scheduling): `entropy_control="adaptive_clip"`."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from ..losses.policy_loss import SUPPORTED_LOSS_TYPES
from ..scheduling.controllers import AdaptiveClipController
from ._base import _USER_STACKLEVEL, ControllerControl, is_number, register_control


@dataclass
class AdaptiveClipSettings:
    r"""
    Settings of adaptive clip-higher (`entropy_control="adaptive_clip"`).

    Parameters:
        adaptive_clip_delta (`float`, *optional*, defaults to `0.02`):
            Step δ by which `epsilon_high` moves each optimizer step (after the warm-up), up when the window-mean
            measured entropy is below the window-mean target, down when above.
        adaptive_clip_window (`int`, *optional*, defaults to `4`):
            Number of optimizer steps in the sliding window whose means are compared.
        adaptive_clip_min (`float`, *optional*, defaults to `0.0`):
            Lower bound of `epsilon_high`.
        adaptive_clip_max (`float`, *optional*, defaults to `1.0`):
            Upper bound of `epsilon_high`.
        adaptive_clip_warmup_steps (`int`, *optional*, defaults to `0`):
            Optimizer steps during which `epsilon_high` is held at its initial value (TRL's `epsilon_high`, or
            `epsilon` when that is unset) while the window fills.
    """

    adaptive_clip_delta: float = field(
        default=0.02,
        metadata={"help": "Adaptive clip: step by which epsilon_high moves each optimizer step; > 0."},
    )
    adaptive_clip_window: int = field(
        default=4,
        metadata={"help": "Adaptive clip: sliding window (optimizer steps) of the entropy and target means; >= 1."},
    )
    adaptive_clip_min: float = field(
        default=0.0,
        metadata={"help": "Adaptive clip: lower bound of epsilon_high; >= 0 and <= adaptive_clip_max."},
    )
    adaptive_clip_max: float = field(
        default=1.0,
        metadata={"help": "Adaptive clip: upper bound of epsilon_high; >= adaptive_clip_min."},
    )
    adaptive_clip_warmup_steps: int = field(
        default=0,
        metadata={"help": "Adaptive clip: optimizer steps with epsilon_high held at its initial value; >= 0."},
    )


@register_control("adaptive_clip")
class AdaptiveClipControl(ControllerControl):
    """Adaptive clip-higher (Wang et al.): moves ``epsilon_high`` by ±δ so entropy tracks the schedule."""

    follows_target = True
    knob_name = "epsilon_high"
    card_text = ("adaptive clip-higher (Entropy Scheduling, Wang et al. 2026, Algorithm 1): `epsilon_high` moves by "
                 "±δ each optimizer step so the windowed measured entropy tracks the target.")
    config_prefixes = ("adaptive_clip_", "epsilon")
    citations = ("wang2026",)
    settings_class = AdaptiveClipSettings
    demo_description = "adaptive clip-higher (Wang et al.)"
    docs_page = "adaptive-clip.md"
    docs_row = ('Entropy Scheduling, adaptive clip-higher ([Wang et al., Findings ACL 2026](https://aclanthology.org/2026.findings-acl.206/))',
                '`epsilon_high` ± δ',
                'off-policy updates only',
                'yes')

    @classmethod
    def validate_settings(cls, args):
        if not is_number(args.adaptive_clip_delta) or args.adaptive_clip_delta <= 0:
            raise ValueError(f"adaptive_clip_delta must be a finite number > 0, got {args.adaptive_clip_delta!r}.")
        if not isinstance(args.adaptive_clip_window, int) or args.adaptive_clip_window < 1:
            raise ValueError(f"adaptive_clip_window must be an integer >= 1, got {args.adaptive_clip_window!r}.")
        if not is_number(args.adaptive_clip_min) or args.adaptive_clip_min < 0:
            raise ValueError(f"adaptive_clip_min must be a finite number >= 0, got {args.adaptive_clip_min!r}.")
        if not is_number(args.adaptive_clip_max) or args.adaptive_clip_max < args.adaptive_clip_min:
            raise ValueError(
                f"adaptive_clip_max must be a finite number >= adaptive_clip_min ({args.adaptive_clip_min}), got "
                f"{args.adaptive_clip_max!r}."
            )
        if not isinstance(args.adaptive_clip_warmup_steps, int) or args.adaptive_clip_warmup_steps < 0:
            raise ValueError(
                f"adaptive_clip_warmup_steps must be an integer >= 0, got {args.adaptive_clip_warmup_steps!r}."
            )

    @classmethod
    def validate(cls, args):
        if args.loss_type not in SUPPORTED_LOSS_TYPES:
            raise ValueError(
                f"entropy_control='adaptive_clip' moves the clip-higher bound, which loss_type={args.loss_type!r} "
                f"does not use in the same way; loss_type must be one of {list(SUPPORTED_LOSS_TYPES)}."
            )
        initial = args.epsilon_high if args.epsilon_high is not None else args.epsilon
        if not (args.adaptive_clip_min <= initial <= args.adaptive_clip_max):
            raise ValueError(
                f"epsilon_high (the initial value of adaptive clip, {initial}) must lie in "
                f"[adaptive_clip_min, adaptive_clip_max] = [{args.adaptive_clip_min}, {args.adaptive_clip_max}]."
            )
        if not args.is_off_policy:
            warnings.warn(
                "entropy_control='adaptive_clip' moves epsilon_high, but gradient_accumulation_steps is a multiple "
                "of steps_per_generation * num_iterations, so every update is on-policy (importance "
                "ratio exactly 1) and the clip bound changes nothing: the controller will not act. Train as the "
                "paper does, with several optimizer steps per generation batch (steps_per_generation > "
                "gradient_accumulation_steps, or num_iterations > 1).",
                UserWarning,
                stacklevel=_USER_STACKLEVEL,
            )

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
