"""W-REINFORCE (Zhu et al. 2025): `entropy_control="w_reinforce"`."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..losses import sign_weights
from ._base import EntropyControl, check_range, register_control


@dataclass
class WReinforceSettings:
    r"""
    Settings of W-REINFORCE (`entropy_control="w_reinforce"`, Zhu et al. 2025).

    Parameters:
        w_reinforce_lambda (`float`, *optional*, defaults to `0.1`):
            W-REINFORCE: weight of positive-advantage rollouts (negatives get 1), in [0, 1].
    """

    w_reinforce_lambda: float = field(
        default=0.1, metadata={"help": "W-REINFORCE: weight of positive-advantage rollouts, in [0, 1]."}
    )


@register_control("w_reinforce")
class WReinforceControl(EntropyControl):
    """W-REINFORCE (Zhu et al.): positive-advantage rollouts weighted by a fixed lambda, negatives by 1.

    Acts on TRL's group-normalised advantages (the paper uses raw {0, 1} rewards without a baseline; on binary
    rewards the sign of the group-centred advantage is the sign of correctness, except in zero-std groups, which
    carry no gradient in either form).
    """

    uses_advantage_weights = True
    knob_name = "lambda"
    card_text = "W-REINFORCE (Zhu et al. 2025): positive-advantage samples weighted by a fixed λ."
    config_prefixes = ("w_reinforce_",)
    citations = ("zhu2025",)
    settings_class = WReinforceSettings
    demo_description = "W-REINFORCE, lambda = 0.1 (Zhu et al.)"
    docs_page = "w-reinforce.md"
    docs_row = ('W-REINFORCE baseline ([Zhu et al., arXiv 2506.01347](https://arxiv.org/abs/2506.01347))',
                'fixed λ on A > 0',
                'every update',
                'no')

    @classmethod
    def validate_settings(cls, args):
        check_range(args, "w_reinforce_lambda", 0.0, 1.0)

    def advantage_weights(self, advantages, step, total_steps):
        return sign_weights(advantages, self.args.w_reinforce_lambda, 1.0)

    @property
    def knob(self):
        return self.args.w_reinforce_lambda
