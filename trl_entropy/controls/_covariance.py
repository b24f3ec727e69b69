"""What Clip-Cov and KL-Cov (Cui et al. 2025) share: the covariance, the scope and the quota."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import torch

from ..losses.covariance import (
    masked_sums,
    means_from_sums,
    selection_quota,
    token_covariance,
    wide_float_dtype,
)
from ..losses.policy_loss import TokenHooks
from ._base import _USER_STACKLEVEL, check_choice, TokenBatch, TokenHookControl, _cat_batches, _mix_seed


COV_SCOPES = ("global", "local")


@dataclass
class CovarianceSettings:
    r"""
    The setting Clip-Cov and KL-Cov share (`entropy_control="clip_cov"` / `"kl_cov"`, Cui et al. 2025).

    Parameters:
        cov_scope (`str`, *optional*, defaults to `"global"`):
            Token set of the covariance statistic and the selection. `"global"`: once per optimizer step over all
            completion tokens of the step's micro-batches on all processes (means from all-reduced sums, quota from
            the global token count, exact global top-k / uniform draw); costs one extra no-grad forward per step.
            `"local"`: per micro-batch and per process, from the loss forward itself, as verl and the authors' code
            (the selected-token count then depends on the micro-batch size and the number of processes).
    """

    cov_scope: str = field(
        default="global",
        metadata={"help": "Clip-Cov/KL-Cov statistic scope: 'global' (whole optimizer step, all processes) or "
                  "'local' (per micro-batch and process, as verl)."},
    )


class CovarianceControl(TokenHookControl):
    """Shared machinery of Clip-Cov and KL-Cov (Cui et al. 2025): covariance, scope, quota.

    Scope (``args.cov_scope``):

    * ``"local"`` -- as verl: means, quota and selection per micro-batch and per process, from the log-probs of the
      loss forward itself.
    * ``"global"`` -- once per optimizer step, over all completion tokens of the step's micro-batches on all
      processes: the trainer runs one extra no-grad forward of the current policy over the step's micro-batches (the
      parameters do not change within a step, so these are the log-probs the loss sees), and calls
      :meth:`plan_window`, which all-reduces the (sum, count) for the means, takes the quota from the global valid
      count, and selects globally (KL-Cov: exact global top-k through a threshold from the gathered per-process top-k
      values; Clip-Cov: one uniform draw over the global candidate list from a generator seeded identically on every
      process). The result is the same on every process and does not depend on the micro-batch size.

    ``ratio == 0`` selects nothing (deliberate: the reference's ``max(1, int(ratio * n))`` would still select one
    token per micro-batch; 0 is our "switched off").
    """

    needs_step_plan = False
    ratio_name = ""
    on_policy_reduces_to = "almost nothing"  # what the control amounts to with the importance ratio at 1

    @classmethod
    def validate_settings(cls, args):
        check_choice(args, "cov_scope", COV_SCOPES)

    @classmethod
    def validate(cls, args):
        if not args.is_off_policy:
            warnings.warn(
                f"entropy_control={cls.name!r} with fully on-policy updates (one optimizer step per "
                f"generation batch, num_iterations=1): the importance ratio is 1, so it reduces to "
                f"{cls.on_policy_reduces_to}. Train as the authors do, with several optimizer steps per generation "
                "batch (gradient_accumulation_steps not a multiple of steps_per_generation * num_iterations, e.g. "
                "steps_per_generation=4 with gradient_accumulation_steps=1).",
                UserWarning,
                stacklevel=_USER_STACKLEVEL,
            )

    def __init__(self, args):
        super().__init__(args)
        self.scope = getattr(args, "cov_scope", "global")
        self.needs_step_plan = self.scope == "global"
        self.draws = 0  # generator counter, identical on every process (global) / per process (local)
        self.rank = 0
        self._cov_stats: torch.Tensor | None = None  # (sum, count, max) over the step's valid tokens, on the device

    def _observe_covariance(self, cov: torch.Tensor, mask: torch.Tensor) -> None:
        """Accumulate the step's covariance diagnostics on the device (read, with one sync, at the step's end)."""
        if mask.numel() == 0:
            return
        cov = cov.detach().to(wide_float_dtype(cov.device))
        stats = torch.stack([torch.where(mask, cov, 0.0).sum(), mask.sum().to(cov.dtype),
                             torch.where(mask, cov, -math.inf).max()])
        if self._cov_stats is not None:
            stats = torch.cat([self._cov_stats[:2] + stats[:2], torch.maximum(self._cov_stats[2:], stats[2:])])
        self._cov_stats = stats

    def step_counts(self):
        counts = super().step_counts()
        cov_sum, cov_count, cov_max = (0.0, 0.0, -math.inf) if self._cov_stats is None else self._cov_stats.tolist()
        self._cov_stats = None
        counts.update({"cov_sum": cov_sum, "cov_count": cov_count, "max:cov_max": cov_max})
        return counts

    def step_metrics(self, totals):
        out = super().step_metrics(totals)
        if totals.get("cov_count", 0.0) > 0:  # no valid token this step: nothing to report (never NaN)
            out["covariance_mean"] = totals["cov_sum"] / totals["cov_count"]
            out["covariance_max"] = totals["max:cov_max"]
        return out

    @property
    def ratio(self) -> float:
        return float(getattr(self.args, self.ratio_name))

    def quota(self, n_valid: int) -> int:
        return 0 if self.ratio == 0.0 else selection_quota(self.ratio, n_valid)

    def _generator(self, rank: int = 0) -> torch.Generator:
        seed = _mix_seed(int(self.args.seed) + 104_729 * rank, self.draws)
        self.draws += 1
        return torch.Generator(device="cpu").manual_seed(seed)

    # one subclass method: the selection, given covariance and (local or global) quota
    def select(self, cov, batch: TokenBatch, k: int, *, offset=None, total=None, generator=None, gather=None):
        raise NotImplementedError

    def candidate_mask(self, batch: TokenBatch) -> torch.Tensor:
        return batch.mask

    def token_hooks(self, batch, planned=None):
        if planned is None:  # local scope: per micro-batch, from this forward's log-probs
            cov = token_covariance(batch.logps, batch.advantages, batch.mask)
            self._observe_covariance(cov, batch.mask)
            k = min(self.quota(int(batch.mask.sum())), int(batch.mask.sum()))
            selected = self.select(cov, batch, k, generator=self._generator(self.rank))
        else:
            selected = planned.to(batch.mask.device) & batch.mask
        self._count(selected, batch.mask)
        return self.hooks_from(selected)

    def hooks_from(self, selected: torch.Tensor) -> TokenHooks:
        raise NotImplementedError

    def plan_window(self, batches: list[TokenBatch], reduce_sum, gather) -> list[torch.Tensor]:
        """Global selection over the micro-batches of one optimizer step (all processes call this together).

        Args:
            batches: this process's micro-batches of the step (same T), log-probs of the current policy.
            reduce_sum: ``tensor -> tensor`` summed over processes. gather: ``tensor -> tensor`` concatenated over
                processes along dim 0 (same shape on every process).

        Returns:
            one (B, T) bool selection per micro-batch.
        """
        batch = _cat_batches(batches)
        mask = batch.mask
        sums_dtype = wide_float_dtype(batch.logps.device)
        sums = reduce_sum(masked_sums(batch.logps, batch.advantages, mask, dtype=sums_dtype))
        stats = means_from_sums(sums)
        cov = token_covariance(batch.logps, batch.advantages, mask, stats=stats)
        self._observe_covariance(cov, mask)
        k = self.quota(int(round(float(sums[2]))))
        selected = self.select(cov, batch, k, gather=gather, generator=self._generator(0))
        return list(torch.split(selected, [b.mask.shape[0] for b in batches]))
