"""The training loss of `GRPOEntropyTrainer`: one path, chosen when the trainer is built (:func:`build_loss_path`).

* :class:`TRLLoss` -- TRL's own ``_compute_loss``, untouched: no control, or a control without token hooks.
* :class:`AdditiveLoss` -- TRL's ``_compute_loss`` plus the control's additive term (``additive_loss_term``:
  EntroPIC), computed from the log-probs of TRL's own loss forward, captured with their gradient: no second forward,
  and the loss and gradient of :func:`~.policy_loss.trainer_compute_loss` with the same hooks.
* :class:`HookedLoss` -- :func:`~.policy_loss.trainer_compute_loss` (TRL's forward, our mirror of TRL's loss, equal
  to TRL's with the hooks off) with the control's per-token hooks (Clip-Cov, KL-Cov). With ``cov_scope="global"``
  the token selection is planned once per optimizer step, before its first micro-batch
  (:meth:`HookedLoss.before_micro_batch`).

The trainer calls ``before_micro_batch()`` from ``_prepare_inputs``, ``compute(model, inputs)`` from
``_compute_loss`` (training only; evaluation always takes TRL's loss), ``saw_forward(logps)`` from each
``_get_per_token_logps_and_entropies`` and ``end_step()`` at each optimizer-step boundary. It lends the path TRL's own
methods as ``trainer._trl_compute_loss`` and ``trainer._trl_logps_and_entropies`` (its ``super()`` calls).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from .._trl_private import buffered_inputs, micro_step
from .policy_loss import (
    _as_2d_advantages,
    additive_hooks_loss,
    check_trainer_supported,
    loss_mask,
    trainer_compute_loss,
)

__all__ = ["AdditiveLoss", "HookedLoss", "TRLLoss", "TokenBatch", "build_loss_path", "token_batch"]

_INLINE_PLAN = "inline"  # the step is one micro-batch per process: select from the loss forward's own log-probs


@dataclass
class TokenBatch:
    """What a token-hook control sees of one micro-batch (all detached).

    ``logps``/``old_logps`` (B, T) current and sampling-policy log-probs (``old_logps == logps`` on-policy);
    ``advantages`` (B, 1) or (B, T); ``mask`` (B, T) bool loss mask; ``epsilon_low``/``epsilon_high`` and
    ``importance_sampling_level`` as the trainer uses them for this micro-batch.
    """

    logps: torch.Tensor
    old_logps: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    importance_sampling_level: str = "token"


def token_batch(trainer, logps, old, advantages, mask) -> TokenBatch:
    """A :class:`TokenBatch` with the trainer's clip bounds and importance-sampling level."""
    return TokenBatch(
        logps=logps,
        old_logps=logps if old is None else old,
        advantages=_as_2d_advantages(advantages),
        mask=mask > 0,
        epsilon_low=trainer.epsilon_low,
        epsilon_high=trainer.epsilon_high,
        importance_sampling_level=trainer.importance_sampling_level,
    )


class TRLLoss:
    """TRL's own ``_compute_loss``."""

    def __init__(self, trainer):
        self.trainer = trainer

    def before_micro_batch(self) -> None:
        pass

    def saw_forward(self, logps) -> None:
        pass

    def compute(self, model, inputs):
        return self.trainer._trl_compute_loss(model, inputs)

    def end_step(self) -> None:
        pass


class AdditiveLoss(TRLLoss):
    """TRL's own ``_compute_loss`` plus the control's additive term, from the log-probs of TRL's loss forward."""

    def __init__(self, trainer):
        super().__init__(trainer)
        self._armed = False  # armed by compute for TRL's loss forward only
        self._logps = None  # that forward's log-probs, with their gradient

    def saw_forward(self, logps) -> None:
        if self._armed:
            self._armed = False
            self._logps = logps

    def compute(self, model, inputs):
        trainer = self.trainer
        self._armed = True
        try:
            loss = trainer._trl_compute_loss(model, inputs)
            logps = self._logps
        finally:
            self._armed = False
            self._logps = None
        if logps is None:
            raise RuntimeError("TRL's _compute_loss ran no forward through _get_per_token_logps_and_entropies.")
        mask = loss_mask(inputs)
        with torch.no_grad():
            hooks = trainer.entropy_control.token_hooks(
                token_batch(trainer, logps.detach(), inputs.get("old_per_token_logps"), inputs["advantages"], mask)
            )
        term = additive_hooks_loss(
            logps,
            inputs,
            hooks,
            importance_sampling_level=trainer.importance_sampling_level,
            gradient_accumulation_steps=getattr(trainer, "current_gradient_accumulation_steps", 1),
            training=True,
        )
        return loss if term is None else loss + term


class HookedLoss(TRLLoss):
    """Our mirror of TRL's loss with the control's per-token hooks; with a global scope, the step's plan."""

    def __init__(self, trainer):
        super().__init__(trainer)
        # The settings this path lacks (e.g. the MoE router auxiliary loss, which depends on the model, or a
        # loss_type set on the config after it was validated) fail here, not at the first loss step after the model
        # has generated. Multimodal inputs are only known per batch: trainer_compute_loss checks again.
        check_trainer_supported(trainer)
        self.plan: dict[int, object] = {}  # micro-batch index (TRL's micro_step) -> planned selection
        self.micro_in_step = 0  # micro-batches of the current optimizer step already computed
        self._warned_split_window = False

    def before_micro_batch(self) -> None:
        if self.trainer.entropy_control.needs_step_plan and micro_step(self.trainer) not in self.plan:
            self._plan_token_selection()

    def end_step(self) -> None:
        self.micro_in_step = 0
        self.plan = {}

    def compute(self, model, inputs):
        trainer = self.trainer
        control = trainer.entropy_control
        planned = self.plan.get(micro_step(trainer)) if control.needs_step_plan else None
        if control.needs_step_plan and planned is None:
            raise RuntimeError(f"no planned token selection for micro-batch {micro_step(trainer)} "
                               "(cov_scope='global').")

        def hooks_fn(logps, old, advantages, mask, entropies):
            batch = token_batch(trainer, logps, old, advantages, mask)  # detached values of this loss forward
            selection = planned
            if planned is _INLINE_PLAN:  # every process is here once this step, in lockstep
                selection = self._plan_window([batch])[0]
            return control.token_hooks(batch, planned=selection)

        loss = trainer_compute_loss(trainer, model, inputs, hooks_fn)
        self.micro_in_step += 1
        return loss

    def _plan_window(self, batches: list[TokenBatch]) -> list[torch.Tensor]:
        """The control's global selection over `batches`, with the trainer's cross-process sum and gather."""
        acc = self.trainer.accelerator
        return self.trainer.entropy_control.plan_window(batches, lambda t: acc.reduce(t, reduction="sum"), acc.gather)

    @torch.no_grad()
    def _plan_token_selection(self) -> None:
        """Global scope: decide the selection of the current optimizer step's micro-batches at its first one.

        The window is the micro-batches from this one to the end of the optimizer step, cut at the end of the current
        generation batch (later ones are not generated yet). With TRL's defaults and whenever
        `steps_per_generation * num_iterations` is a multiple of `gradient_accumulation_steps` the window is the
        whole optimizer step. The current policy's log-probs come from one no-grad forward per micro-batch (the
        parameters do not change within a step), so the selection is what the loss forward would see, and equal on
        every process. A window of one micro-batch (e.g. `gradient_accumulation_steps=1`) runs no extra forward: it is
        marked inline and selected inside the loss forward from that forward's own log-probs (same values).
        """
        trainer = self.trainer
        self.plan = {}
        ga = getattr(trainer, "current_gradient_accumulation_steps", None) or trainer.args.gradient_accumulation_steps
        spg = trainer.args.steps_per_generation
        generate_every = spg * trainer.num_iterations
        start = micro_step(trainer)
        end = min(start + max(1, ga - self.micro_in_step), (start // generate_every + 1) * generate_every)
        if end - start < ga and not self._warned_split_window:
            self._warned_split_window = True
            warnings.warn(
                f"cov_scope='global': an optimizer step ({ga} micro-batches) spans more than one generation batch "
                f"(steps_per_generation * num_iterations = {generate_every}); the selection is global over each "
                "generation batch's part of the step instead of the whole step.",
                UserWarning,
                stacklevel=3,
            )
        indices = list(range(start, end))
        if len(indices) == 1 and trainer._inline_single_micro_batch_plan:
            self.plan = {start: _INLINE_PLAN}
            return
        batches = []
        for j in indices:
            mb = buffered_inputs(trainer)[j % spg]
            completion_ids = mb["completion_ids"]
            input_ids = torch.cat([mb["prompt_ids"], completion_ids], dim=1)
            attention_mask = torch.cat([mb["prompt_mask"], mb["completion_mask"]], dim=1)
            logps, _, _ = trainer._trl_logps_and_entropies(
                trainer.model, input_ids, attention_mask, completion_ids.size(1),
                batch_size=trainer.args.per_device_train_batch_size,
            )
            batches.append(token_batch(trainer, logps, mb.get("old_per_token_logps"), mb["advantages"], loss_mask(mb)))
        self.plan = dict(zip(indices, self._plan_window(batches)))


def build_loss_path(trainer) -> TRLLoss:
    """The trainer's training loss path, from its control: TRL's loss, TRL's loss plus an additive term, or ours
    with token hooks."""
    control = trainer.entropy_control
    if control is None or not control.uses_token_hooks:
        return TRLLoss(trainer)
    if getattr(control, "additive_loss_term", False):
        return AdditiveLoss(trainer)
    return HookedLoss(trainer)
