"""Entrocraft rollout acceptance (Li et al. 2026, Algorithm 1): pure functions on tensors."""

from __future__ import annotations

import math

import torch

__all__ = ["entrocraft_acceptance", "entrocraft_sign", "band_from_target"]

MODES = ("stochastic", "hard")


def _as_float(x) -> float:
    return float(x.item()) if isinstance(x, torch.Tensor) else float(x)


def entrocraft_sign(entropy, h_low: float, h_high: float) -> int:
    """m = 1[H > h_high] - 1[H < h_low]: +1 when entropy is above the band, -1 below it, 0 inside."""
    h = _as_float(entropy)
    if not math.isfinite(h):
        raise ValueError(f"entropy must be finite, got {h}.")
    return int(h > h_high) - int(h < h_low)


def band_from_target(target: float, band: float) -> tuple[float, float]:
    """(h_low, h_high) = target -/+ band/2, with h_low clamped at 0 (entropy is never negative)."""
    if band < 0:
        raise ValueError(f"band must be >= 0, got {band}.")
    return max(0.0, float(target) - band / 2.0), float(target) + band / 2.0


def entrocraft_acceptance(
    advantages: torch.Tensor,
    entropy,
    h_low: float,
    h_high: float,
    gamma: float,
    mode: str = "stochastic",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Boolean keep-mask over rollouts, same shape as ``advantages``.

    * ``"stochastic"`` (the paper): keep rollout i iff u_i <= min(1, exp(gamma * m * A_i)), u_i ~ U[0, 1) drawn from
      ``generator`` (one draw per rollout, in flat order, on the CPU). m * A_i >= 0 is always kept, so m = 0 keeps all
      and A_i = 0 is always kept.
    * ``"hard"`` (the authors' released code, the gamma -> infinity limit): m = +1 keeps only A_i > 0, m = -1 keeps
      only A_i < 0, m = 0 keeps all. Zero-advantage rollouts are rejected when m != 0 (they carry no policy gradient
      either way; rejecting them takes them out of the normaliser like the other filtered rollouts).

    The exponent is clamped before ``exp`` so large gamma * |A| never gives inf or NaN.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}.")
    if h_low > h_high:
        raise ValueError(f"h_low ({h_low}) must be <= h_high ({h_high}).")
    if not (gamma >= 0 and math.isfinite(gamma)):
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma}.")
    if not torch.isfinite(advantages).all():
        raise ValueError("advantages contain NaN or inf; fix the reward function before filtering rollouts.")
    m = entrocraft_sign(entropy, h_low, h_high)
    if m == 0:
        return torch.ones_like(advantages, dtype=torch.bool)
    if mode == "hard":
        return advantages > 0 if m > 0 else advantages < 0
    exponent = (gamma * m * advantages.double()).clamp(max=0.0)  # min(1, exp(x)) = exp(min(0, x))
    probability = torch.exp(exponent)
    u = torch.rand(advantages.shape, generator=generator, dtype=torch.float64, device="cpu")
    return (u <= probability.cpu()).to(advantages.device)
