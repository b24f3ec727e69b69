"""Which of TRL's forward passes runs the policy being trained.

Inside `_generate_and_score_completions`, TRL runs the policy's old-log-prob pass and, with a KL term (beta > 0),
a reference pass, both through `_get_per_token_logps_and_entropies`. The trainer captures entropies from the
policy's pass only (rollout controls, the `generation_batch` measurement); these two functions tell the passes apart.
"""

from __future__ import annotations

__all__ = ["is_policy_forward", "peft_active_adapter"]


def peft_active_adapter(trainer):
    """The PEFT model's active adapter (``None`` without PEFT), read before TRL's passes: the policy's."""
    from accelerate.utils import is_peft_model

    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    return unwrapped.active_adapter if is_peft_model(unwrapped) else None


def is_policy_forward(trainer, model, policy_adapter) -> bool:
    """Whether a forward of ``model`` runs the policy being trained rather than TRL's KL reference.

    Without PEFT the reference is a separate `trainer.ref_model`; with PEFT it is `trainer.model` itself inside TRL's
    `use_adapter(...)`, which either disables the adapters (`disable_adapter()`) or activates an adapter named "ref"
    (re-training an existing adapter). ``policy_adapter``: :func:`peft_active_adapter`, read before TRL's passes."""
    from accelerate.utils import is_peft_model

    if model is None or model is not trainer.model or (trainer.ref_model is not None and model is trainer.ref_model):
        return False
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    if not is_peft_model(unwrapped):
        return True
    if not getattr(unwrapped, "has_active_enabled_adapter", True):  # inside `disable_adapter()`
        return False
    return unwrapped.active_adapter == policy_adapter  # not the "ref" adapter
