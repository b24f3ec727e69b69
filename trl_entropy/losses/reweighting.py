"""Sign-dependent advantage weights: positive-advantage reweighting (Jin et al.) and W-REINFORCE (Zhu et al.)."""

from __future__ import annotations

import torch

__all__ = ["sign_weights", "positive_reweight_progression"]


def sign_weights(advantages: torch.Tensor, positive_weight: float, negative_weight: float = 1.0) -> torch.Tensor:
    """Weights of the same shape as ``advantages``: ``positive_weight`` where A > 0, ``negative_weight`` where A <= 0.

    The clipped surrogate is linear in A for a fixed sign, so weighting a sequence advantage is the same as weighting
    every token of that sequence (Jin et al. weight tokens with A > 0 by lambda; W-REINFORCE weights correct samples).
    """
    for name, w in (("positive_weight", positive_weight), ("negative_weight", negative_weight)):
        if not (0.0 <= float(w) <= 1e6):
            raise ValueError(f"{name} must be a finite number >= 0, got {w}.")
    pos = torch.full_like(advantages, float(positive_weight))
    neg = torch.full_like(advantages, float(negative_weight))
    return torch.where(advantages > 0, pos, neg)


def positive_reweight_progression(kind: str, step: int, total_steps: int, num_epochs: int = 5) -> float:
    """The fixed lambda progressions of Jin et al.: ``"stage"`` (0 for the first half of training, then linear
    0 -> 1 over the second half) and ``"epoch"`` (lambda = (e - 1) / (E - 1) for stage e = 1..E of equal length)."""
    if total_steps <= 0:
        raise ValueError(f"total_steps must be > 0, got {total_steps}.")
    p = min(1.0, max(0.0, step / total_steps))
    if kind == "stage":
        return 0.0 if p < 0.5 else min(1.0, (p - 0.5) / 0.5)
    if kind == "epoch":
        if num_epochs < 2:
            raise ValueError(f"num_epochs must be >= 2, got {num_epochs}.")
        e = min(num_epochs - 1, int(p * num_epochs))  # 0-based stage index
        return e / (num_epochs - 1)
    raise ValueError(f"kind must be 'stage' or 'epoch', got {kind!r}.")
