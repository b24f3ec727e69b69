"""Entrocraft rollout acceptance (Li et al. 2026, arXiv 2604.26326, Algorithm 1): pure functions on tensors.

When the measured policy entropy H leaves a band ``[h_low, h_high]`` around a target, Entrocraft rejects rollouts by
the sign of their advantage: entropy too high (m = +1) -> negative-advantage rollouts are mostly rejected, which
lowers entropy; entropy too low (m = -1) -> positive-advantage rollouts are mostly rejected, which raises it.

The paper keeps rollout i iff ``u_i <= exp(gamma * m * A_i)`` with ``u_i ~ U[0, 1)`` ("stochastic" mode here). The
authors' released code implements the ``gamma -> infinity`` limit as an advantage estimator ("hard" mode here).
What a caller does with rejected rollouts (drop them from the loss normaliser or only zero their advantage, as the
released code does) is the caller's choice; these functions only decide.
"""

from __future__ import annotations

import math

import torch

__all__ = ["entrocraft_acceptance", "entrocraft_sign", "band_from_target", "reject_rollouts"]

MODES = ("stochastic", "hard")


def _finite_float(name: str, x) -> float:
    if isinstance(x, torch.Tensor):
        if x.numel() != 1:
            raise ValueError(f"{name} must be a number or a 0-d tensor, got shape {tuple(x.shape)}.")
        x = x.item()
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {x!r}.") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}.")
    return v


def _check_band(h_low, h_high) -> tuple[float, float]:
    lo, hi = _finite_float("h_low", h_low), _finite_float("h_high", h_high)
    if lo > hi:
        raise ValueError(f"h_low ({lo}) must be <= h_high ({hi}).")
    return lo, hi


def entrocraft_sign(entropy, h_low: float, h_high: float) -> int:
    """The Entrocraft sign ``m = 1[H > h_high] - 1[H < h_low]``.

    Args:
        entropy: the measured entropy H (Python number or 0-d / one-element tensor); must be finite.
        h_low, h_high: band edges, ``h_low <= h_high``. The edges belong to the band (m = 0 at H == h_low or h_high).
            An empty band (``h_low == h_high``) gives m = 0 only at exactly that value.

    Returns:
        ``+1`` when the entropy is above the band, ``-1`` below it, ``0`` inside.
    """
    lo, hi = _check_band(h_low, h_high)
    h = _finite_float("entropy", entropy)
    return int(h > hi) - int(h < lo)


def band_from_target(target: float, band: float) -> tuple[float, float]:
    """``(h_low, h_high) = (target - band / 2, target + band / 2)``, with ``h_low`` clamped at 0.

    The released Entrocraft scripts schedule the two edges separately, always 0.1 apart (target = band centre);
    this helper derives both from one scheduled target and a fixed width. Entropy is never negative, so a lower edge
    below 0 is clamped to 0 (the band then is ``[0, target + band / 2]``, no longer centred).

    Args:
        target: the target entropy (finite).
        band: the band width, ``>= 0`` (0 = empty band: m is +1 or -1 unless H equals the target exactly).

    Returns:
        ``(h_low, h_high)`` as Python floats, ``0 <= h_low <= h_high`` when ``target + band / 2 >= 0``.
    """
    t = _finite_float("target", target)
    w = _finite_float("band", band)
    if w < 0:
        raise ValueError(f"band must be >= 0, got {w}.")
    return max(0.0, t - w / 2.0), t + w / 2.0


def entrocraft_acceptance(
    advantages: torch.Tensor,
    entropy,
    h_low: float,
    h_high: float,
    gamma: float,
    mode: str = "stochastic",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Boolean keep-mask over rollouts, same shape and device as ``advantages``.

    With ``m = entrocraft_sign(entropy, h_low, h_high)``:

    * ``"stochastic"`` (the paper, Algorithm 1): keep rollout i iff ``u_i < min(1, exp(gamma * m * A_i))``. Rollouts
      with ``m * A_i >= 0`` are always kept, so m = 0 keeps all and ``A_i == 0`` is always kept (exp(0) = 1). The
      acceptance probability is computed as ``exp(min(0, gamma * m * A_i))`` in float64, so a large ``gamma * |A|``
      gives 0 (never inf or NaN). The uniforms are drawn as ``torch.rand(advantages.shape, generator=generator)``
      (default float32 dtype, on the CPU), one per rollout in flat row-major order, **only when m != 0**: a caller
      holding a slice of a global batch can skip the draws of the rollouts before it with
      ``torch.rand(offset, generator=generator)`` and gets the slice of the single global decision. The comparison
      is strict (``u < p``; ``u`` lives on a 2^-24 grid in [0, 1)) so that p = 1 always keeps and p = 0 never does.
    * ``"hard"`` (the authors' released code, the ``gamma -> inf`` limit): m = +1 keeps only ``A_i > 0``, m = -1 keeps
      only ``A_i < 0``, m = 0 keeps all. No randomness, ``gamma`` is ignored (but still validated). **Zero-advantage
      rollouts are rejected when m != 0** -- deliberately: the released code replaces the advantage by ``max(r, 0)``
      / ``min(r, 0)``, so such rollouts contribute no gradient there either; rejecting them here also takes them out
      of a kept-set normaliser, like every other filtered rollout. (In stochastic mode they are kept -- the formula's
      exp(0) = 1 -- but carry no gradient.)

    Args:
        advantages: advantages of the rollouts, any shape (typically (N,) sequence advantages); must be finite.
        entropy: measured entropy H, a Python number or 0-d tensor.
        h_low, h_high: band edges, ``h_low <= h_high``.
        gamma: temperature coefficient, finite and ``>= 0`` (paper: 10). ``gamma == 0`` keeps everything.
        mode: ``"stochastic"`` or ``"hard"``.
        generator: CPU ``torch.Generator`` for the uniforms (``None``: the global RNG).

    Returns:
        bool tensor of the shape of ``advantages``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}.")
    g = _finite_float("gamma", gamma)
    if g < 0:
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma}.")
    if not isinstance(advantages, torch.Tensor):
        raise ValueError(f"advantages must be a torch.Tensor, got {type(advantages).__name__}.")
    if generator is not None and not (isinstance(generator, torch.Generator) and generator.device.type == "cpu"):
        raise ValueError(f"generator must be a CPU torch.Generator or None, got {generator!r}.")
    if not torch.isfinite(advantages).all():
        raise ValueError("advantages contain NaN or inf; fix the reward function before filtering rollouts.")
    m = entrocraft_sign(entropy, h_low, h_high)
    if m == 0:
        return torch.ones(advantages.shape, dtype=torch.bool, device=advantages.device)
    if mode == "hard":
        return advantages > 0 if m > 0 else advantages < 0
    exponent = (g * m * advantages.detach().to(device="cpu", dtype=torch.float64)).clamp(max=0.0)
    probability = torch.exp(exponent)  # min(1, exp(x)) == exp(min(0, x)); underflows to 0, never overflows
    u = torch.rand(advantages.shape, generator=generator, device="cpu")
    return (u.double() < probability).to(advantages.device)


def reject_rollouts(output: dict, keep: torch.Tensor, loss_mask: torch.Tensor, normalizer: str = "kept"):
    """Apply a keep-mask (B,) to a TRL generation batch ``output``, in place: rejected rollouts get a zero advantage.

    With ``normalizer="kept"`` they also leave TRL's loss mask through its ``tool_mask`` key (which TRL multiplies
    into the mask; attention is untouched), ``output["ec_keep"]`` holds the mask (for loss types that normalise per
    row), and the local count of kept loss tokens is returned (the caller sums it over processes into
    ``num_items_in_batch``); otherwise ``None``.
    """
    keep_f = keep.to(output["advantages"].dtype)
    output["advantages"] = output["advantages"] * (keep_f if output["advantages"].dim() == 1 else keep_f[:, None])
    if normalizer != "kept":
        return None
    row_keep = keep.to(output["completion_mask"].dtype)[:, None]
    tool_mask = output.get("tool_mask")
    output["tool_mask"] = row_keep.expand_as(output["completion_mask"]) if tool_mask is None else tool_mask * row_keep
    output["ec_keep"] = keep_f
    return (loss_mask * row_keep).sum()
