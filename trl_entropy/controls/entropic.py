"""EntroPIC (Yang et al. 2025): `entropy_control="entropic"`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..losses.policy_loss import TokenHooks
from ..scheduling.controllers import PIController
from ._base import ControllerControl, TokenHookControl, check_range, is_number, register_control


@dataclass
class EntropicSettings:
    r"""
    Settings of EntroPIC (`entropy_control="entropic"`, Yang et al. 2025).

    Parameters:
        entropic_kp (`float`, *optional*, defaults to `1.0`):
            Proportional gain of the PI controller, alpha = clamp(ki * I + kp * (H - H*), -1, 1); >= 0.
        entropic_ki (`float`, *optional*, defaults to `0.01`):
            Integral gain (I accumulates H - H* once per optimizer step); >= 0.
        entropic_high_prob_threshold (`float`, *optional*, defaults to `0.95`):
            The adjustment `alpha * mean(-r |A|)` covers the tokens with probability above this value; in (0, 1).
    """

    entropic_kp: float = field(default=1.0, metadata={"help": "EntroPIC: proportional gain; >= 0."})
    entropic_ki: float = field(default=0.01, metadata={"help": "EntroPIC: integral gain; >= 0."})
    entropic_high_prob_threshold: float = field(
        default=0.95, metadata={"help": "EntroPIC: probability above which tokens get the adjustment, in (0, 1)."}
    )


@register_control("entropic")
class EntropicControl(TokenHookControl, ControllerControl):
    """EntroPIC (Yang et al. 2025): a PI controller sets alpha from the global measured entropy each optimizer
    step; the loss gets ``alpha * mean_hp(-r |A|)`` over the tokens with probability above
    ``entropic_high_prob_threshold`` (the reference's additive term, its own normaliser, unclipped ratio)."""

    follows_target = True
    knob_name = "alpha"
    additive_loss_term = True  # TRL's _compute_loss + alpha * term, from TRL's loss forward (not our loss path)
    raises_entropy = -1  # alpha > 0 sharpens confident tokens
    card_text = "EntroPIC (Yang et al. 2025): a PI controller on entropy reweights high-probability tokens."
    config_prefixes = ("entropic_",)
    citations = ("yang2025",)
    settings_class = EntropicSettings
    demo_description = "EntroPIC, PI-controlled high-probability token weights"
    docs_page = "entropic.md"
    docs_row = ('EntroPIC baseline ([Yang et al., arXiv 2511.15248](https://arxiv.org/abs/2511.15248))',
                'α = clamp(kᵢ·I + kₚ·(H − H*), −1, 1) on tokens with p > 0.95',
                'every update',
                'yes')

    @classmethod
    def validate_settings(cls, args):
        check_range(args, "entropic_kp", 0.0, math.inf)
        check_range(args, "entropic_ki", 0.0, math.inf)
        thr = args.entropic_high_prob_threshold
        if not is_number(thr) or not (0.0 < thr < 1.0):
            raise ValueError(f"entropic_high_prob_threshold must be a number in (0, 1), got {thr!r}.")

    def __init__(self, args):
        super().__init__(args)
        self.controller = PIController(kp=args.entropic_kp, ki=args.entropic_ki)
        self.log_threshold = math.log(float(args.entropic_high_prob_threshold))

    def observe(self, measured, target):
        if target is not None:
            self.controller.update(measured, target)

    def token_hooks(self, batch, planned=None):
        high_prob = batch.mask & (batch.logps > self.log_threshold)
        self._count(high_prob, batch.mask)
        return TokenHooks(adjust_mask=high_prob, adjust_alpha=self.controller.value)

    def metrics(self):
        return {"pi_integral": self.controller.integral}
