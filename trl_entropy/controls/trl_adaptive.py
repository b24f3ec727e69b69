"""TRL's adaptive entropy coefficient driven by the schedule: `entropy_control="trl_adaptive"`."""

from __future__ import annotations

from ..scheduling.controllers import _limit_push
from ._base import EntropyControl, register_control


@register_control("trl_adaptive")
class TrlAdaptiveControl(EntropyControl):
    """TRL's own adaptive entropy coefficient (``use_adaptive_entropy``, Skywork-OR1's rule) with its target driven
    by the schedule: the trainer writes each step's target into ``args.entropy_target``, which TRL reads; TRL moves
    ``entropy_coef`` by ``entropy_coef_delta`` within ``[entropy_coef_min, entropy_coef_max]`` and applies it only
    while entropy is at or below the target. Nothing of TRL's rule is reimplemented here."""

    follows_target = True
    knob_name = "entropy_coef"
    uses_trl_adaptive_entropy = True
    card_text = ("TRL's adaptive entropy coefficient (`use_adaptive_entropy`, Skywork-OR1) as a control: "
                 "`entropy_coef` moves by `entropy_coef_delta` each optimizer step, its `entropy_target` driven by "
                 "the schedule.")
    config_prefixes = ("entropy_coef",)
    citations = ("he2025",)
    demo_description = "TRL's adaptive entropy coefficient as a control, target driven by the schedule"
    docs_page = "entropy-bonus.md"
    docs_row = ("TRL's `use_adaptive_entropy` (Skywork-OR1's rule) with the schedule driving its target",
                '`entropy_coef` ± `entropy_coef_delta`, ≥ 0',
                'every update',
                'yes')

    def __init__(self, args):
        super().__init__(args)
        self._trainer = None
        self._last_direction = 0

    def apply(self, trainer) -> None:
        self._trainer = trainer

    def observe(self, measured, target):
        if target is not None:
            self._last_direction = 1 if measured <= target else -1  # TRL's comparison

    @property
    def knob(self):
        return None if self._trainer is None else float(self._trainer.entropy_coef)

    @property
    def limit_push(self) -> int:
        if self._trainer is None:
            return 0
        return _limit_push(self._last_direction, float(self._trainer.entropy_coef),
                           float(self.args.entropy_coef_min), float(self.args.entropy_coef_max))

    def state_dict(self):
        return {"last_direction": self._last_direction}  # TRL saves its coefficient itself

    def load_state_dict(self, state):
        self._last_direction = int(state.get("last_direction", 0))
