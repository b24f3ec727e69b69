"""Sign-dependent weights on advantages and tokens.

* Positive-advantage reweighting (Jin et al. 2025, arXiv 2511.05993): tokens with A > 0 weighted by lambda in
  [0, 1], tokens with A <= 0 by 1; lambda follows a fixed progression (:func:`positive_reweight_progression`) or an
  entropy-guided controller (elsewhere).
* W-REINFORCE (Zhu et al. 2025, arXiv 2506.01347): advantages +lambda for correct and -1 for incorrect rollouts,
  no group baseline (:func:`w_reinforce_advantages`), or, on group-centred advantages, :func:`sign_weights`.
* EntroPIC (Yang et al. 2025, arXiv 2511.15248): the entropy-control adjustment on high-probability tokens in its
  multiplicative form (:func:`entropic_token_weights`).

All functions are pure: tensors (or numbers) in, tensors (or numbers) out.
"""

from __future__ import annotations

import math

import torch

from ..metrics import _int_arg
from .covariance import _broadcast_advantages, _check_same_shape, _valid_mask

__all__ = ["sign_weights", "w_reinforce_advantages", "entropic_token_weights", "positive_reweight_progression"]


def _nonneg_weight(name: str, w) -> float:
    try:
        v = float(w)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number >= 0, got {w!r}.") from None
    if not (math.isfinite(v) and v >= 0.0):
        raise ValueError(f"{name} must be a finite number >= 0, got {w}.")
    return v


def _float_dtype(x: torch.Tensor) -> torch.dtype:
    return x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()


def sign_weights(advantages: torch.Tensor, positive_weight: float, negative_weight: float = 1.0) -> torch.Tensor:
    """Per-entry weights: ``positive_weight`` where ``A > 0``, ``negative_weight`` where ``A <= 0``.

    Used by positive-advantage reweighting (Jin et al.: lambda on A > 0, 1 on A <= 0) and by W-REINFORCE on
    group-centred advantages. Zero advantages take ``negative_weight`` (irrelevant for the gradient: 0 * w = 0).
    The clipped surrogate is linear in A for a fixed sign, so weighting a sequence advantage equals weighting every
    token of that sequence.

    Args:
        advantages: tensor of any shape, (N,) sequence or (B, T) token advantages.
        positive_weight: finite, ``>= 0``.
        negative_weight: finite, ``>= 0`` (default 1).

    Returns:
        tensor of the shape and device of ``advantages`` (floating dtype: that of ``advantages`` if floating, else
        the default dtype). NaN advantages get ``negative_weight`` (they are not > 0); no NaN is produced here.
    """
    if not isinstance(advantages, torch.Tensor):
        raise ValueError(f"advantages must be a torch.Tensor, got {type(advantages).__name__}.")
    pos = _nonneg_weight("positive_weight", positive_weight)
    neg = _nonneg_weight("negative_weight", negative_weight)
    dtype = _float_dtype(advantages)
    weights = torch.full(advantages.shape, neg, dtype=dtype, device=advantages.device)
    return weights.masked_fill(advantages > 0, pos)


def w_reinforce_advantages(
    rewards: torch.Tensor, positive_weight: float = 0.1, correct_threshold: float = 0.5
) -> torch.Tensor:
    """W-REINFORCE advantages (Zhu et al. 2025, "weighted" REINFORCE): ``+lambda`` if correct, ``-1`` if incorrect.

    Reference (RLVR-Decomposed, rewards in {0, 1}): ``A = returns; A[correct] *= lambda; A[incorrect] -= 1``, i.e.
    A in {+lambda, -1} on every token, no group baseline and no std normalisation (recommended lambda = 0.1).

    Reward scales. A rollout is *correct* iff ``reward >= correct_threshold`` (default 0.5), so both common binary
    scales give the same advantages: {0, 1} -> {-1, +lambda} and {-1, +1} (Entrocraft's scale) -> {-1, +lambda}.
    Applying the reference formula literally to +-1 rewards would give -2 for incorrect rollouts; we define the
    transform by correctness instead. Deliberate difference: non-binary rewards are binarised by the threshold (the
    reference leaves a reward that is neither exactly 0 nor 1 untouched, A = r). No group baseline means an
    all-correct or all-wrong group still gets a non-zero signal (+lambda / -1), unlike GRPO.

    Args:
        rewards: per-rollout rewards, any shape (typically (N,)); must be finite.
        positive_weight: lambda, finite ``>= 0``.
        correct_threshold: finite; rewards ``>= correct_threshold`` count as correct.

    Returns:
        float tensor of the shape and device of ``rewards`` with values in {+lambda, -1}. Broadcast it over tokens
        with ``A[:, None] * mask``.
    """
    if not isinstance(rewards, torch.Tensor):
        raise ValueError(f"rewards must be a torch.Tensor, got {type(rewards).__name__}.")
    lam = _nonneg_weight("positive_weight", positive_weight)
    thr = float(correct_threshold)
    if not math.isfinite(thr):
        raise ValueError(f"correct_threshold must be finite, got {correct_threshold}.")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain NaN or inf.")
    out = torch.full(rewards.shape, -1.0, dtype=_float_dtype(rewards), device=rewards.device)
    return out.masked_fill(rewards >= thr, lam)


def entropic_token_weights(
    advantages: torch.Tensor,
    logps: torch.Tensor,
    mask: torch.Tensor,
    alpha: float,
    high_prob_threshold: float = 0.95,
) -> torch.Tensor:
    """Per-token multiplicative weights of the EntroPIC entropy adjustment (Yang et al. 2025).

    On high-probability valid tokens (``mask > 0`` and ``logp > log(high_prob_threshold)``): ``1 + alpha`` where
    ``A > 0``, ``1 - alpha`` where ``A < 0``, ``1`` where ``A == 0``; ``1`` on every other token (padding included --
    the caller's mask removes padding from the loss).

    Equivalence. The reference (yk7333/EntroPIC ``entropic`` loss) adds a separate term,
    ``L = L_ppo + alpha * mean_hp(-r * |A|)``, with r the unclipped ratio and the mean over high-probability tokens.
    Since ``-|A| = -A`` for A > 0 and ``+A`` for A < 0, and the policy-gradient term is ``-A * r``, the adjustment is
    the policy-gradient term of those tokens scaled by ``(1 + alpha)`` / ``(1 - alpha)``. Deliberate differences when
    the weights multiply the per-token PPO loss: (i) the adjustment inherits the loss's normaliser (all valid
    tokens) instead of its own #high-prob-tokens normaliser, so the effective strength of alpha differs by
    ``n_valid / n_high_prob``; (ii) the adjustment is clipped with the PPO loss instead of acting on the unclipped
    ratio. alpha > 0 (entropy above target) sharpens confident tokens and lowers entropy; alpha < 0 raises it.

    Args:
        advantages: (B,), (B, 1) or (B, T); broadcast to (B, T).
        logps: (B, T) log-probabilities of the sampled tokens (read detached).
        mask: (B, T) completion mask, valid where ``mask > 0``.
        alpha: controller output; must be finite, clamped to [-1, 1] (as the reference clips it).
        high_prob_threshold: probability threshold in (0, 1] (reference: 0.95, hard-coded). 1 selects no token.

    Returns:
        (B, T) tensor of weights in [0, 2] (floating dtype of ``logps``), on the device of ``logps``.
    """
    valid = _valid_mask(mask)
    _check_same_shape("logps", logps, mask)
    adv = _broadcast_advantages(advantages, mask).to(logps.device)
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise ValueError(f"alpha must be a finite number, got {alpha!r}.") from None
    if not math.isfinite(a):
        raise ValueError(f"alpha must be a finite number, got {alpha}.")
    a = min(1.0, max(-1.0, a))
    thr = float(high_prob_threshold)
    if not (0.0 < thr <= 1.0):
        raise ValueError(f"high_prob_threshold must be in (0, 1], got {high_prob_threshold}.")
    high_prob = valid.to(logps.device) & (logps.detach() > math.log(thr))
    weights = torch.ones(logps.shape, dtype=_float_dtype(logps), device=logps.device)
    weights = weights.masked_fill(high_prob & (adv > 0), 1.0 + a)
    return weights.masked_fill(high_prob & (adv < 0), 1.0 - a)


def positive_reweight_progression(kind: str, step: int, total_steps: int, num_epochs: int = 5) -> float:
    """The fixed lambda progressions of positive-advantage reweighting (Jin et al. 2025, section 7).

    * ``"stage"``: with progress ``p = clamp(step / (total_steps - 1), 0, 1)`` (the last step, ``total_steps - 1``,
      is ``p = 1``, as for the entropy schedules), lambda = 0 for the first half of training (p < 0.5), then linear
      0 -> 1 over the second half (lambda = 2p - 1).
    * ``"epoch"``: training is split into ``num_epochs`` = E equal stages of ``total_steps / E`` steps; in stage
      e = 1..E (``e = min(E, floor(step * E / total_steps) + 1)``) lambda = (e - 1) / (E - 1). The paper's stages
      are data epochs; deriving them from step/total assumes equal-length epochs.

    Args:
        kind: ``"stage"`` or ``"epoch"``.
        step: current step, integer ``>= 0`` (values past ``total_steps`` give the final lambda).
        total_steps: total number of steps, ``> 0``.
        num_epochs: E, ``>= 2`` (only used by ``"epoch"``).

    Returns:
        lambda in [0, 1], a Python float.
    """
    if kind not in ("stage", "epoch"):
        raise ValueError(f"kind must be 'stage' or 'epoch', got {kind!r}.")
    step = _int_arg("step", step)
    total_steps = _int_arg("total_steps", total_steps)
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}.")
    if total_steps <= 0:
        raise ValueError(f"total_steps must be > 0, got {total_steps}.")
    p = min(1.0, step / (total_steps - 1)) if total_steps > 1 else 1.0
    if kind == "stage":
        return 0.0 if p < 0.5 else 2.0 * p - 1.0
    num_epochs = _int_arg("num_epochs", num_epochs)
    if num_epochs < 2:
        raise ValueError(f"num_epochs must be >= 2, got {num_epochs}.")
    e = min(num_epochs, min(step, total_steps) * num_epochs // total_steps + 1)  # exact integer arithmetic
    return (e - 1) / (num_epochs - 1)
