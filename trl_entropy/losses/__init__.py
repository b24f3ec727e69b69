"""Pure tensor functions of the entropy-control methods. Public, reusable with other trainers.

* :mod:`.covariance` -- Clip-Cov / KL-Cov (Cui et al. 2025): token covariance, global-scope sums, token selections.
* :mod:`.rejection` -- Entrocraft (Li et al. 2026): sign of the entropy band and rollout acceptance.
* :mod:`.reweighting` -- positive-advantage reweighting (Jin et al. 2025), W-REINFORCE (Zhu et al. 2025),
  EntroPIC token weights (Yang et al. 2025).
"""

from .covariance import (
    clip_cov_selection,
    kl_cov_selection,
    kl_cov_threshold,
    masked_sums,
    means_from_sums,
    ppo_clipped_tokens,
    selection_quota,
    token_covariance,
)
from .rejection import band_from_target, entrocraft_acceptance, entrocraft_sign
from .reweighting import (
    entropic_token_weights,
    positive_reweight_progression,
    sign_weights,
    w_reinforce_advantages,
)

__all__ = [
    "band_from_target",
    "clip_cov_selection",
    "entrocraft_acceptance",
    "entrocraft_sign",
    "entropic_token_weights",
    "kl_cov_selection",
    "kl_cov_threshold",
    "masked_sums",
    "means_from_sums",
    "positive_reweight_progression",
    "ppo_clipped_tokens",
    "selection_quota",
    "sign_weights",
    "token_covariance",
    "w_reinforce_advantages",
]
