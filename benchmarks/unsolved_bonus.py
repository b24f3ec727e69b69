"""Study 5's variant (``docs/payoff.md``): the feedback entropy bonus where the group found no correct answer.

Research code, not a setting of the package: a variant enters the package only if it wins its pre-registered study.

The recommended recipe holds the mean token entropy of every completion. Studies 1 and 4 found that entropy sitting
as much where the model already knows the answer as where it does not, which costs pass@1. This variant keeps the
recipe's controller, settings and schedule and changes where it acts: the bonus ``-c * H`` applies only to the
completions of a group in which no completion got the full reward (the groups that give GRPO no signal), and the
entropy the controller holds is measured over those completions alone. A micro-batch's term is
``-c * sum(H * gate) / sum(mask) / gradient_accumulation_steps``: TRL's bonus on the gated tokens, zero elsewhere,
so it fades as fewer groups go unsolved.

Two amendments, made before any run after a review of the code (``docs/payoff.md``, study 5): the schedule's
``"initial"`` is the starting entropy of the first generation batch's unsolved groups (the quantity held), not of
all its completions; and a step with no unsolved completion repeats the last reading (logged as
``entropy_control/held_reading``), so the controller still advances one update per optimizer step.

Study 7 runs it with ``entropy_measurement="generation_batch"``: the controller then acts on the gated entropy of
the whole generation batch, ``mean H_gen(gated batch) * sum H_now / sum H_gen`` over the step's gated tokens, so the
batch's entropy at generation is taken over the unsolved groups' tokens too (:meth:`_gate_generation_entropy`). A
step without a gated token repeats the last value the controller acted on.
"""

from __future__ import annotations

import math

import torch

from trl_entropy import GRPOEntropyTrainer
from trl_entropy.losses.policy_loss import loss_mask
from trl_entropy.scheduling.measurement import global_token_mean
from trl_entropy._trl_private import log_metric
from trl_entropy.trainers.faults import METRIC_PREFIX

SOLVED_REWARD = 1.0  # a group is solved once one of its completions gets this reward (both testbeds score 1 or 0)


def unsolved_rollouts(rewards: torch.Tensor, group: int, solved: float = SOLVED_REWARD) -> torch.Tensor:
    """(N,) bool: True for each completion of a group (``group`` consecutive rewards) where none reached ``solved``."""
    if rewards.numel() % group:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group}.")
    best = torch.nan_to_num(rewards.float(), nan=float("-inf")).view(-1, group).max(dim=1).values
    return (best < solved).repeat_interleave(group)


def gated_entropy_term(entropies: torch.Tensor, gate: torch.Tensor, mask: torch.Tensor, coef: float,
                       accumulation: int = 1) -> torch.Tensor:
    """``-coef * sum(H * gate) / sum(mask) / accumulation``: TRL's entropy bonus restricted to the ``gate`` tokens,
    normalised by all the micro-batch's loss tokens (``mask``)."""
    gate = gate.to(entropies.dtype)
    return -float(coef) * (entropies * gate).sum() / mask.sum().clamp(min=1.0) / max(int(accumulation), 1)


class UnsolvedBonusTrainer(GRPOEntropyTrainer):
    """``GRPOEntropyTrainer`` with ``entropy_control="entropy_bonus"`` acting on, and measuring, only the completions
    of unsolved groups (the module docstring). TRL's own bonus is kept at 0; the controller's coefficient is applied
    here to the gated tokens, from the entropies of TRL's loss forward (no second forward)."""

    def __init__(self, *args, **kwargs):
        self._ub_coef = 0.0
        self._ub_in_loss = False
        self._ub_rewards = None
        self._ub_entropies = None
        self._ub_defer_initial = False
        self._ub_last_reading = None
        self.unsolved_fraction: list[float] = []  # per generation batch: share of its completions gated in
        self.held_readings = 0  # optimizer steps that repeated the last reading (no unsolved completion)
        super().__init__(*args, **kwargs)
        if self.entropy_control is None or self.entropy_control.name != "entropy_bonus":
            raise ValueError("UnsolvedBonusTrainer runs entropy_control='entropy_bonus' only.")

    # TRL's loss reads `entropy_coef`: 0 inside the loss (its own bonus off); the controller's value is kept here.
    @property
    def entropy_coef(self) -> float:
        return 0.0 if self.__dict__.get("_ub_in_loss") else self.__dict__.get("_ub_coef", 0.0)

    @entropy_coef.setter
    def entropy_coef(self, value: float) -> None:
        self.__dict__["_ub_coef"] = float(value)

    def _calculate_rewards(self, *args, **kwargs):
        rewards = super()._calculate_rewards(*args, **kwargs)  # (N_global, n_funcs), gathered by TRL
        self._ub_rewards = rewards.detach()
        return rewards

    def _resolve_initial_entropy(self, output, inputs=None) -> None:
        # inside TRL's generation the gate is not known yet: resolved after it, on the gated batch alone (no rounds
        # aside: they would measure every group, not the unsolved ones)
        if not self._ub_defer_initial:
            super()._resolve_initial_entropy(output)

    def _generate_and_score_completions(self, inputs):
        self._ub_rewards = None
        self._ub_defer_initial = True
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._ub_defer_initial = False
        per_func, self._ub_rewards = self._ub_rewards, None
        if not self.model.training or per_func is None:
            return output
        weights = self.reward_weights.to(per_func.device).unsqueeze(0)
        gate = unsolved_rollouts((per_func * weights).nansum(dim=1), self.num_generations)
        local = output["advantages"].shape[0]
        start = self.accelerator.process_index * local  # TRL's process slice of the gathered rewards
        gate = gate[start : start + local].to(output["completion_mask"].device)
        mask = loss_mask(output) * gate.unsqueeze(1).to(output["completion_mask"].dtype)
        output["ec_entropy_mask"] = mask  # what the controller measures: the unsolved groups' tokens
        output["ub_gate_mask"] = mask
        self.unsolved_fraction.append(float(gate.float().mean()))
        # "initial": the unsolved groups' entropy. The product reduces over loss_mask(output) = completion_mask *
        # tool_mask and attends with completion_mask, so the gate goes in as a tool mask on a shallow copy.
        gate_rows = gate.unsqueeze(1).to(output["completion_mask"].dtype).expand_as(output["completion_mask"])
        view = dict(output, tool_mask=gate_rows if "tool_mask" not in output else output["tool_mask"] * gate_rows)
        super()._resolve_initial_entropy(view)
        self._gate_generation_entropy(output, mask)
        return output

    def _gate_generation_entropy(self, output, mask) -> None:
        """With ``entropy_measurement="generation_batch"``: the batch's mean entropy at generation over the gated
        tokens (the product's `_attach_generation_entropies` took it over all of them). Every rank that pairs reaches
        the same one reduction, as in the product."""
        if not self._pairs_generation_entropy():
            return
        entropies = output.get("ec_generation_entropies")
        usable = entropies is not None and entropies.shape == mask.shape
        self._ec_generation_entropy = global_token_mean(entropies if usable else None, mask, self.accelerator.reduce)

    def _reduce_window(self):
        measured, count, batch_estimate = super()._reduce_window()
        held = not (count > 0 and math.isfinite(measured)) and self._ub_last_reading is not None
        if held:  # no unsolved completion this step: the last reading again, so the controller keeps its cadence
            measured, batch_estimate = self._ub_last_reading, None
            self.held_readings += 1
        elif count > 0 and math.isfinite(measured):  # what the controller acts on (study 7: the batch's estimate)
            self._ub_last_reading = batch_estimate if batch_estimate is not None else measured
        log_metric(self, METRIC_PREFIX + "held_reading", float(held))
        return measured, count, batch_estimate

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._ub_in_loss and entropies is not None:
            self._ub_entropies = entropies  # TRL's loss forward, with its gradient
        return logps, entropies, aux

    def _compute_loss(self, model, inputs):
        if not self.model.training:
            return super()._compute_loss(model, inputs)
        coef = self._ub_coef  # this micro-batch's coefficient; the step boundary inside may set the next one
        self._ub_in_loss, self._ub_entropies = True, None
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._ub_in_loss = False
        entropies, self._ub_entropies = self._ub_entropies, None
        if entropies is None:
            raise RuntimeError("TRL's loss forward returned no entropies.")
        accumulation = getattr(self, "current_gradient_accumulation_steps", 1) or 1
        return loss + gated_entropy_term(entropies, inputs["ub_gate_mask"], loss_mask(inputs), coef, accumulation)
