import math

import pytest
import torch

from trl_entropy.losses import band_from_target, entrocraft_acceptance, entrocraft_sign


def test_sign():
    assert entrocraft_sign(0.8, 0.4, 0.6) == 1
    assert entrocraft_sign(0.2, 0.4, 0.6) == -1
    assert entrocraft_sign(0.5, 0.4, 0.6) == 0
    assert entrocraft_sign(0.6, 0.4, 0.6) == 0 and entrocraft_sign(0.4, 0.4, 0.6) == 0  # edges are inside
    assert entrocraft_sign(torch.tensor(0.55), 0.4, 0.6) == 0


def test_band_from_target():
    assert band_from_target(0.5, 0.1) == pytest.approx((0.45, 0.55))
    assert band_from_target(0.02, 0.1) == pytest.approx((0.0, 0.07))  # never below zero


@pytest.mark.parametrize("entropy, m", [(0.9, 1), (0.1, -1)])
def test_stochastic_acceptance_probability_matches_formula(entropy, m):
    """Empirical acceptance over 20000 draws per rollout equals min(1, exp(gamma*m*A)) within 4 standard errors."""
    gamma, draws = 2.0, 20000
    adv = torch.tensor([-1.5, -0.5, -0.1, 0.0, 0.1, 0.5, 1.5])
    g = torch.Generator().manual_seed(1234)
    kept = torch.stack([entrocraft_acceptance(adv, entropy, 0.4, 0.6, gamma, generator=g) for _ in range(draws)])
    empirical = kept.double().mean(0)
    expected = torch.clamp(torch.exp(gamma * m * adv.double()), max=1.0)
    se = torch.sqrt(expected * (1 - expected) / draws).clamp(min=1e-12)
    assert torch.all((empirical - expected).abs() <= 4 * se + 1e-12), (empirical, expected)


def test_m_zero_keeps_everything():
    adv = torch.randn(64)
    assert entrocraft_acceptance(adv, 0.5, 0.4, 0.6, 10.0).all()
    assert entrocraft_acceptance(adv, 0.5, 0.4, 0.6, 10.0, mode="hard").all()


def test_hard_mode_is_exact():
    adv = torch.tensor([[-1.0, 0.0, 2.0], [0.5, -0.2, 0.0]])
    above = entrocraft_acceptance(adv, 0.9, 0.4, 0.6, 10.0, mode="hard")
    below = entrocraft_acceptance(adv, 0.1, 0.4, 0.6, 10.0, mode="hard")
    assert above.tolist() == [[False, False, True], [True, False, False]]
    assert below.tolist() == [[True, False, False], [False, True, False]]
    assert above.shape == adv.shape


def test_same_sign_always_kept_and_zero_advantage_kept_in_stochastic_mode():
    adv = torch.tensor([0.0, 1.0, 3.0])
    g = torch.Generator().manual_seed(0)
    for _ in range(100):
        assert entrocraft_acceptance(adv, 0.9, 0.4, 0.6, 10.0, generator=g).all()  # m=+1: A>=0 always kept


def test_large_gamma_gives_no_nan():
    adv = torch.tensor([-1e4, 1e4, 0.0])
    keep = entrocraft_acceptance(adv, 0.9, 0.4, 0.6, 1e6, generator=torch.Generator().manual_seed(0))
    assert keep.tolist() == [False, True, True]


def test_deterministic_given_generator_and_global_slicing():
    """Skipping the draws of earlier rollouts reproduces the slice of a single global draw (multi-process rule)."""
    adv = torch.randn(16, generator=torch.Generator().manual_seed(3))
    full = entrocraft_acceptance(adv, 0.1, 0.4, 0.6, 1.0, generator=torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(7)
    torch.rand(8, dtype=torch.float64, generator=g)
    second_half = entrocraft_acceptance(adv[8:], 0.1, 0.4, 0.6, 1.0, generator=g)
    assert torch.equal(full[8:], second_half)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(h_low=0.7, h_high=0.6), "h_low"),
        (dict(gamma=-1.0), "gamma"),
        (dict(gamma=math.inf), "gamma"),
        (dict(mode="soft"), "mode"),
    ],
)
def test_invalid_arguments(kw, match):
    args = dict(h_low=0.4, h_high=0.6, gamma=1.0, mode="stochastic")
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        entrocraft_acceptance(torch.zeros(3), 0.5, **args)


def test_nonfinite_advantages_rejected_clearly():
    with pytest.raises(ValueError, match="advantages"):
        entrocraft_acceptance(torch.tensor([0.0, float("nan")]), 0.9, 0.4, 0.6, 1.0)
