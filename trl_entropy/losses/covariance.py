"""Token-level covariance between log-probability and advantage, and the token selections of Clip-Cov and KL-Cov.

Cui et al. 2025 ("The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models", arXiv 2505.22617)
show that, to first order, one policy-gradient step changes the policy entropy by about
``-eta * Cov(log pi(a|s), A(s, a))``. Their two methods act on the tokens whose centred product

    cov_{i,t} = (A_{i,t} - mean(A)) * (logp_{i,t} - mean(logp))

is largest (the tokens that drive entropy down the most):

* **Clip-Cov** detaches a small random subset of the tokens whose covariance lies in a band ``(lb, ub)``;
* **KL-Cov** adds a ``|logp - logp_old|`` penalty to the top-k tokens by covariance.

This module holds only the statistics and the selections (pure functions: tensors in, tensors out). How a selection
is applied to a loss belongs to the trainer.

Scope. The reference code (verl ``compute_policy_loss_clip_cov`` / ``compute_policy_loss_kl_cov``) computes the means
and the quota inside the loss, i.e. per micro-batch and per GPU. Called on one micro-batch, the functions below do
the same. For a "global" scope (the whole optimizer batch, all processes) a caller:

1. sums :func:`masked_sums` over micro-batches and processes (all-reduce) and turns the totals into means with
   :func:`means_from_sums`, then passes them as ``stats=`` to :func:`token_covariance`;
2. computes the quota from the global valid-token count and passes it as ``k=`` to the selections, or, for an
   exact global top-k, takes a threshold from :func:`kl_cov_threshold` over all covariance values, and, for an exact
   global uniform Clip-Cov draw, uses the ``candidate_offset`` / ``total_candidates`` arguments of
   :func:`clip_cov_selection`.

No function here builds a (B, T, V) tensor; every input is (B, T) or smaller.
"""

from __future__ import annotations

import math
import operator

import torch

__all__ = [
    "token_covariance",
    "masked_sums",
    "means_from_sums",
    "kl_cov_selection",
    "kl_cov_threshold",
    "clip_cov_selection",
    "selection_quota",
    "ppo_clipped_tokens",
]


# --------------------------------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------------------------------


def wide_float_dtype(device) -> torch.dtype:
    """float64 for sums and reductions where the backend has it; float32 on MPS, which has no float64."""
    device = torch.device(device)
    return torch.float32 if device.type == "mps" else torch.float64


def _check_tensor(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}.")


def _valid_mask(mask: torch.Tensor) -> torch.Tensor:
    """Boolean (B, T) view of ``mask`` (any dtype; a token is valid where mask > 0)."""
    _check_tensor("mask", mask)
    if mask.dim() != 2:
        raise ValueError(f"mask must have shape (B, T), got {tuple(mask.shape)}.")
    return mask > 0 if mask.dtype != torch.bool else mask


def _check_same_shape(name: str, x: torch.Tensor, mask: torch.Tensor) -> None:
    _check_tensor(name, x)
    if x.shape != mask.shape:
        raise ValueError(f"{name} must have the shape of mask {tuple(mask.shape)}, got {tuple(x.shape)}.")


def _broadcast_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sequence advantages (B,) or (B, 1), or token advantages (B, T), as a (B, T) tensor."""
    _check_tensor("advantages", advantages)
    b, t = mask.shape
    if advantages.dim() == 1 and advantages.shape[0] == b:
        return advantages.unsqueeze(1).expand(b, t)
    if advantages.dim() == 2 and advantages.shape[0] == b and advantages.shape[1] in (1, t):
        return advantages.expand(b, t)
    raise ValueError(
        f"advantages must have shape (B,), (B, 1) or (B, T) with (B, T) = {(b, t)}, got {tuple(advantages.shape)}."
    )


def _check_ratio(ratio) -> float:
    r = float(ratio)
    if not (0.0 <= r <= 1.0):
        raise ValueError(f"ratio must be a fraction in [0, 1], got {ratio}.")
    return r


def _check_k(k) -> int:
    if isinstance(k, bool):
        raise ValueError(f"k must be a non-negative integer, got {k!r}.")
    try:
        k = operator.index(k)
    except TypeError:
        raise ValueError(f"k must be a non-negative integer, got {k!r}.") from None
    if k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k}.")
    return k


def selection_quota(ratio: float, n_valid: int) -> int:
    """The number of tokens the covariance methods select among ``n_valid`` valid tokens.

    ``max(1, int(ratio * n_valid))`` -- the verl convention, where ``ratio`` is a **fraction** (``kl_cov_ratio``,
    ``clip_cov_ratio``; verl default 0.0002). The original PRIME-RL KL-Cov code takes ``k_percent`` in **percent**
    (``int(n * k_percent / 100)``): ``k_percent=0.2`` there is ``ratio=0.002`` here. The quota is at least 1 even for
    ``n_valid == 0`` (as in the reference); callers cap it at the number of available tokens.

    Args:
        ratio: fraction of valid tokens in [0, 1].
        n_valid: number of valid tokens (>= 0). For the global scope, pass the global count.

    Returns:
        ``int``, >= 1.
    """
    r = _check_ratio(ratio)
    n = _check_k(n_valid)
    return max(1, int(r * n))


# --------------------------------------------------------------------------------------------------------------------
# covariance statistic
# --------------------------------------------------------------------------------------------------------------------


def masked_sums(
    logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The three sums a caller all-reduces to build global means: ``(sum A*m, sum logp*m, sum m)``.

    Args:
        logps: (B, T) log-probabilities of the sampled tokens. Read detached.
        advantages: (B,), (B, 1) or (B, T) advantages (broadcast over tokens).
        mask: (B, T) completion mask; a token is valid where ``mask > 0``. The mask is used as an indicator, so a
            fractional mask value counts as 1 (the same token set as :func:`token_covariance`).
        dtype: dtype of the result (float32 by default; float64 where the backend supports it and the batch is
            very large).

    Returns:
        (3,) tensor on the device of ``logps``: ``[sum of A over valid tokens, sum of logp over valid tokens,
        number of valid tokens]``. All zeros for an empty mask. Values on padding (even inf/NaN) are ignored.
    """
    valid = _valid_mask(mask)
    _check_same_shape("logps", logps, mask)
    lp = logps.detach()
    adv = _broadcast_advantages(advantages, mask).detach().to(lp.device)
    valid = valid.to(lp.device)
    zero_a = torch.zeros((), dtype=adv.dtype, device=adv.device)
    zero_l = torch.zeros((), dtype=lp.dtype, device=lp.device)
    sum_a = torch.where(valid, adv, zero_a).sum(dtype=dtype)
    sum_l = torch.where(valid, lp, zero_l).sum(dtype=dtype)
    count = valid.sum(dtype=dtype)
    return torch.stack([sum_a, sum_l, count])


def means_from_sums(sums: torch.Tensor) -> tuple[float, float]:
    """Turn (all-reduced) :func:`masked_sums` totals into ``(mean_adv, mean_logp)`` for ``token_covariance(stats=)``.

    Args:
        sums: (3,) tensor ``(sum A, sum logp, count)``.

    Returns:
        ``(mean_adv, mean_logp)`` as Python floats; ``(0.0, 0.0)`` when the count is 0 (nothing to centre).
    """
    _check_tensor("sums", sums)
    if sums.shape != (3,):
        raise ValueError(f"sums must have shape (3,), got {tuple(sums.shape)}.")
    sum_a, sum_l, count = (float(v) for v in sums.detach().cpu().double())
    if not all(math.isfinite(v) for v in (sum_a, sum_l, count)):
        raise ValueError(f"sums must be finite, got {(sum_a, sum_l, count)}.")
    if count < 0:
        raise ValueError(f"sums[2] (the token count) must be >= 0, got {count}.")
    if count == 0:
        return 0.0, 0.0
    return sum_a / count, sum_l / count


def token_covariance(
    logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    stats: tuple | None = None,
) -> torch.Tensor:
    """Per-token centred product ``(A - mean A) * (logp - mean logp)`` (Cui et al. 2025, Clip-Cov / KL-Cov).

    Follows verl: ``(A - masked_mean(A)) * (logp - masked_mean(logp.detach()))``. The means are masked means over the
    valid tokens (``mask > 0``) of the given tensors, computed on detached values; the gradient still flows through
    ``logps`` itself (the selections use the value, typically detached). Note this is the *per-token term* of the
    covariance, not the covariance itself (which is its masked mean).

    Args:
        logps: (B, T) log-probabilities of the sampled tokens under the current policy (the reference recomputes
            them every mini-batch; it does not use the rollout policy's).
        advantages: (B,), (B, 1) or (B, T); broadcast to (B, T).
        mask: (B, T) completion mask, valid where ``mask > 0``.
        stats: optional ``(mean_adv, mean_logp)`` (floats or 0-d tensors) used instead of the local masked means --
            the "global" scope, e.g. from :func:`means_from_sums` over all-reduced :func:`masked_sums`.

    Returns:
        (B, T) tensor (dtype promoted from ``logps`` and ``advantages``), exactly 0 on padding. An empty mask gives
        all zeros; a single valid token gives 0 (it equals both means). Padding values (even inf/NaN) never leak.
    """
    valid = _valid_mask(mask)
    _check_same_shape("logps", logps, mask)
    adv = _broadcast_advantages(advantages, mask)
    dtype = torch.promote_types(logps.dtype, adv.dtype)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    lp = logps.to(dtype)
    adv = adv.to(dtype=dtype, device=lp.device)
    if stats is None:
        sums = masked_sums(lp, adv, valid, dtype=wide_float_dtype(lp.device))
        mean_a, mean_l = means_from_sums(sums)
    else:
        if len(stats) != 2:
            raise ValueError(f"stats must be a pair (mean_adv, mean_logp), got {len(stats)} values.")
        mean_a, mean_l = (float(s) for s in stats)
        if not (math.isfinite(mean_a) and math.isfinite(mean_l)):
            raise ValueError(f"stats must be finite, got {(mean_a, mean_l)}.")
    zero = torch.zeros((), dtype=dtype, device=lp.device)
    centred_a = torch.where(valid, adv.detach() - mean_a, zero)
    centred_l = torch.where(valid, lp - mean_l, zero)
    return centred_a * centred_l


# --------------------------------------------------------------------------------------------------------------------
# selections
# --------------------------------------------------------------------------------------------------------------------


def _flat_valid_indices(valid: torch.Tensor) -> torch.Tensor:
    return valid.reshape(-1).nonzero().squeeze(1)


def _check_cov(cov: torch.Tensor, mask: torch.Tensor, valid: torch.Tensor) -> None:
    _check_same_shape("cov", cov, mask)
    if torch.isnan(cov[valid]).any():
        raise ValueError("cov is NaN on a valid token; compute it with token_covariance on finite inputs.")


def kl_cov_selection(cov: torch.Tensor, mask: torch.Tensor, ratio: float, *, k: int | None = None) -> torch.Tensor:
    """KL-Cov token selection: the top-k valid tokens by covariance (verl ``compute_policy_loss_kl_cov``).

    ``k = max(1, int(ratio * n_valid))`` (see :func:`selection_quota`; ``ratio`` is a fraction as in verl's
    ``kl_cov_ratio`` -- the original PRIME-RL code used ``k_percent`` in percent), capped at ``n_valid``.

    Deliberate differences from the reference: ties are broken deterministically -- among equal covariances the
    token with the smaller flat (row-major) index wins (``torch.topk`` gives no such guarantee); ``-inf`` covariances
    are allowed (ranked last) but NaN on a valid token raises.

    Args:
        cov: (B, T) covariance terms, e.g. from :func:`token_covariance`. Values on padding are ignored.
        mask: (B, T) completion mask, valid where ``mask > 0``.
        ratio: fraction of valid tokens in [0, 1].
        k: optional quota overriding the ratio rule (e.g. computed from the *global* valid-token count with
            :func:`selection_quota` for the global scope). ``k=0`` selects nothing. Still capped at ``n_valid``.
            For an exact global top-k across micro-batches use :func:`kl_cov_threshold` instead.

    Returns:
        (B, T) bool tensor, True on the selected tokens; all False when there are no valid tokens.
    """
    valid = _valid_mask(mask)
    _check_cov(cov, mask, valid)
    n_valid = int(valid.sum())
    quota = selection_quota(ratio, n_valid) if k is None else _check_k(k)
    if k is not None:
        _check_ratio(ratio)
    quota = min(quota, n_valid)
    selected = torch.zeros(cov.shape, dtype=torch.bool, device=cov.device)
    if quota == 0:
        return selected
    idx = _flat_valid_indices(valid).to(cov.device)
    values = cov.detach().reshape(-1)[idx]
    order = torch.sort(values, descending=True, stable=True).indices[:quota]
    selected.view(-1)[idx[order]] = True
    return selected


def kl_cov_threshold(cov_values: torch.Tensor, k: int) -> float:
    """The k-th largest value of a 1-D set of covariances: the cut for a *global* KL-Cov top-k.

    A caller gathers the covariance terms of all valid tokens of the optimizer batch (all micro-batches, all
    processes), calls this once, and selects ``(cov >= threshold) & (mask > 0)`` in every micro-batch. Exactly k tokens
    are selected unless values tie at the threshold (then all tied tokens are selected -- a measure-zero event for
    continuous log-probabilities).

    Args:
        cov_values: 1-D tensor of covariance terms of the valid tokens only (no padding). NaN raises.
        k: number of tokens to select, >= 0 (e.g. ``selection_quota(ratio, cov_values.numel())``).

    Returns:
        ``float``: the k-th largest value; ``+inf`` when ``k == 0`` or ``cov_values`` is empty (selects nothing);
        the smallest value when ``k >= len(cov_values)`` (selects everything).
    """
    _check_tensor("cov_values", cov_values)
    if cov_values.dim() != 1:
        raise ValueError(f"cov_values must be 1-D (valid tokens only), got shape {tuple(cov_values.shape)}.")
    k = _check_k(k)
    if torch.isnan(cov_values).any():
        raise ValueError("cov_values contains NaN.")
    n = cov_values.numel()
    if k == 0 or n == 0:
        return math.inf
    k = min(k, n)
    return float(torch.topk(cov_values.detach(), k, largest=True, sorted=True).values[-1])


def clip_cov_selection(
    cov: torch.Tensor,
    mask: torch.Tensor,
    ratio: float,
    lb: float,
    ub: float,
    generator: torch.Generator | None = None,
    *,
    k: int | None = None,
    candidate_offset: int = 0,
    total_candidates: int | None = None,
) -> torch.Tensor:
    """Clip-Cov token selection: a uniform random subset of the valid tokens with ``lb < cov < ub``.

    Follows verl ``compute_policy_loss_clip_cov`` (identical to the PRIME-RL original): candidates are the valid tokens
    with covariance strictly inside ``(lb, ub)``; ``quota = max(1, int(ratio * n_valid))`` (:func:`selection_quota`);
    a uniform random ``min(quota, n_candidates)`` of them is chosen via ``torch.randperm(n_candidates)`` drawn on the
    CPU. The caller detaches the selected tokens' loss. Tokens the caller wants excluded up front (the reference also
    excludes tokens already clipped by PPO) are excluded by setting their ``cov`` to ``-inf`` or leaving them out of
    ``mask``.

    Deliberate differences: randomness only from ``generator`` (the reference uses the global torch RNG; passing
    ``None`` does the same here); candidate order is the flat (row-major) index order, so a seeded generator gives a
    reproducible selection. A permutation is drawn whenever there is at least one candidate, even if all are taken.

    Args:
        cov: (B, T) covariance terms, e.g. from :func:`token_covariance`. Values on padding are ignored.
        mask: (B, T) completion mask, valid where ``mask > 0``.
        ratio: fraction of valid tokens in [0, 1] (verl ``clip_cov_ratio``, default 0.0002).
        lb, ub: strict bounds, ``lb < ub`` (verl defaults 1.0 and 5.0).
        generator: a CPU ``torch.Generator`` (or ``None`` for the global RNG).
        k: optional quota overriding the ratio rule (e.g. from the global valid-token count). ``k=0`` selects nothing.
        candidate_offset, total_candidates: exact *global* uniform draw across micro-batches / processes. When
            ``total_candidates`` is given, this call's candidates are positions ``candidate_offset ...
            candidate_offset + n_candidates - 1`` of a global candidate list of length ``total_candidates`` (in any
            fixed order agreed by all callers); one ``randperm(total_candidates)`` is drawn from ``generator``, its
            first ``k`` entries form the global subset, and this call returns the part that falls in its range. Every
            call must use a generator in the same state (same seed) and the same ``k`` (required in this mode).

    Returns:
        (B, T) bool tensor, True on the selected tokens (never on padding); all False when there are no candidates.
    """
    valid = _valid_mask(mask)
    _check_cov(cov, mask, valid)
    _check_ratio(ratio)
    lb, ub = float(lb), float(ub)
    if math.isnan(lb) or math.isnan(ub) or not lb < ub:
        raise ValueError(f"lb must be < ub, got lb={lb}, ub={ub}.")
    if generator is not None and not (isinstance(generator, torch.Generator) and generator.device.type == "cpu"):
        raise ValueError(f"generator must be a CPU torch.Generator or None, got {generator!r}.")
    n_valid = int(valid.sum())
    quota = selection_quota(ratio, n_valid) if k is None else _check_k(k)

    c = cov.detach()
    candidates = valid & (c > lb) & (c < ub)
    idx = _flat_valid_indices(candidates).to(cov.device)
    n_cand = idx.numel()
    selected = torch.zeros(cov.shape, dtype=torch.bool, device=cov.device)

    if total_candidates is None:
        if n_cand == 0 or quota == 0:
            return selected
        perm = torch.randperm(n_cand, generator=generator, device="cpu")[: min(quota, n_cand)]
        selected.view(-1)[idx[perm.to(cov.device)]] = True
        return selected

    # global mode: one shared permutation of the global candidate list
    if k is None:
        raise ValueError("k is required with total_candidates (the global quota, e.g. selection_quota(ratio, N)).")
    total = _check_k(total_candidates)
    offset = _check_k(candidate_offset)
    if offset + n_cand > total:
        raise ValueError(
            f"candidate_offset ({offset}) + local candidates ({n_cand}) exceeds total_candidates ({total})."
        )
    if total == 0 or quota == 0:
        return selected
    chosen = torch.randperm(total, generator=generator, device="cpu")[: min(quota, total)]
    local = chosen[(chosen >= offset) & (chosen < offset + n_cand)] - offset
    if local.numel() > 0:
        selected.view(-1)[idx[local.to(cov.device)]] = True
    return selected


def ppo_clipped_tokens(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
    importance_sampling_level: str = "token",
) -> torch.Tensor:
    """Tokens whose PPO surrogate is on the clipped branch (verl Clip-Cov's ``clip_by_origin``), (B, T) bool.

    ``-A * clip(r, 1 - eps_low, 1 + eps_high) > -A * r`` on valid tokens, with ``r = exp(logp - old_logp)`` at token
    level, or the sequence ratio ``exp(mean_t(logp - old_logp))`` broadcast over the tokens at ``"sequence"`` level
    (GSPO; the reference only has token level). Clip-Cov removes these tokens from its candidates. On-policy
    (``old_logps == logps``) nothing is clipped.
    """
    valid = _valid_mask(mask)
    _check_same_shape("logps", logps, mask)
    _check_same_shape("old_logps", old_logps, mask)
    adv = _broadcast_advantages(advantages, mask).detach().to(logps.device)
    log_ratio = (logps.detach() - old_logps.detach()).masked_fill(~valid, 0.0)
    if importance_sampling_level == "sequence":
        n = valid.sum(-1, keepdim=True).clamp(min=1)
        log_ratio = (log_ratio.sum(-1, keepdim=True) / n).expand_as(log_ratio)
    elif importance_sampling_level != "token":
        raise ValueError(f"importance_sampling_level must be 'token' or 'sequence', got {importance_sampling_level!r}.")
    ratio = torch.exp(log_ratio)
    pg1 = -adv * ratio
    pg2 = -adv * torch.clamp(ratio, 1 - float(epsilon_low), 1 + float(epsilon_high))
    return (pg2 > pg1) & valid
