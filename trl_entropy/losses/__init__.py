"""Pure tensor functions of the entropy-control methods. Public, reusable with other trainers."""

from .rejection import band_from_target, entrocraft_acceptance, entrocraft_sign
from .reweighting import positive_reweight_progression, sign_weights

__all__ = [
    "band_from_target",
    "entrocraft_acceptance",
    "entrocraft_sign",
    "positive_reweight_progression",
    "sign_weights",
]
