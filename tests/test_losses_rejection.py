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
    assert entrocraft_sign(torch.tensor(0.7), 0.4, 0.6) == 1
    # empty band: only the exact value is inside
    assert [entrocraft_sign(h, 0.5, 0.5) for h in (0.49, 0.5, 0.51)] == [-1, 0, 1]


def test_sign_validation():
    with pytest.raises(ValueError, match="h_low"):
        entrocraft_sign(0.5, 0.7, 0.6)
    with pytest.raises(ValueError, match="entropy"):
        entrocraft_sign(math.nan, 0.4, 0.6)
    with pytest.raises(ValueError, match="entropy"):
        entrocraft_sign(torch.tensor([0.1, 0.2]), 0.4, 0.6)


def test_band_from_target():
    assert band_from_target(0.5, 0.1) == pytest.approx((0.45, 0.55))
    assert band_from_target(0.02, 0.1) == pytest.approx((0.0, 0.07))  # never below zero
    assert band_from_target(0.3, 0.0) == (0.3, 0.3)
    with pytest.raises(ValueError, match="band"):
        band_from_target(0.5, -0.1)
    with pytest.raises(ValueError, match="target"):
        band_from_target(math.inf, 0.1)


@pytest.mark.parametrize("entropy, m", [(0.9, 1), (0.1, -1)])
def test_stochastic_acceptance_probability_matches_formula(entropy, m):
    """Empirical acceptance over 20000 draws per rollout equals min(1, exp(gamma*m*A)) within 4 standard errors."""
    gamma, draws = 2.0, 20000
    adv = torch.tensor([-1.5, -0.5, -0.1, 0.0, 0.1, 0.5, 1.5])
    g = torch.Generator().manual_seed(1234)
    kept = entrocraft_acceptance(adv.expand(draws, -1), entropy, 0.4, 0.6, gamma, generator=g)
    empirical = kept.double().mean(0)
    expected = torch.clamp(torch.exp(gamma * m * adv.double()), max=1.0)
    # hand values for m = +1: exp(2 * -1.5) = 0.0498, exp(-1) = 0.3679, exp(-0.2) = 0.8187, then 1, 1, 1, 1
    if m == 1:
        assert expected.tolist()[:3] == pytest.approx([math.exp(-3.0), math.exp(-1.0), math.exp(-0.2)])
    se = torch.sqrt(expected * (1 - expected) / draws).clamp(min=1e-12)
    assert torch.all((empirical - expected).abs() <= 4 * se + 1e-12), (empirical, expected)
    same_sign = m * adv >= 0
    assert kept[:, same_sign].all()  # m*A >= 0 (A == 0 included) is kept on every draw


def test_m_zero_keeps_everything_and_draws_nothing():
    adv = torch.randn(64)
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    assert entrocraft_acceptance(adv, 0.5, 0.4, 0.6, 10.0, generator=g).all()
    assert torch.equal(g.get_state(), state)
    assert entrocraft_acceptance(adv, 0.5, 0.4, 0.6, 10.0, mode="hard").all()


def test_gamma_zero_keeps_everything():
    adv = torch.tensor([-3.0, -1.0, 2.0])
    assert entrocraft_acceptance(adv, 0.9, 0.4, 0.6, 0.0, generator=torch.Generator().manual_seed(0)).all()


def test_hard_mode_is_exact_and_rejects_zero_advantage_when_m_nonzero():
    adv = torch.tensor([[-1.0, 0.0, 2.0], [0.5, -0.2, 0.0]])
    above = entrocraft_acceptance(adv, 0.9, 0.4, 0.6, 10.0, mode="hard")
    below = entrocraft_acceptance(adv, 0.1, 0.4, 0.6, 10.0, mode="hard")
    assert above.tolist() == [[False, False, True], [True, False, False]]
    assert below.tolist() == [[True, False, False], [False, True, False]]
    assert above.shape == adv.shape and above.dtype == torch.bool
    # zero-advantage group: all rejected when m != 0 in hard mode, all kept in stochastic mode
    zeros = torch.zeros(8)
    assert not entrocraft_acceptance(zeros, 0.9, 0.4, 0.6, 10.0, mode="hard").any()
    assert entrocraft_acceptance(zeros, 0.9, 0.4, 0.6, 10.0, generator=torch.Generator().manual_seed(0)).all()


def test_large_gamma_gives_no_nan():
    adv = torch.tensor([-1e4, 1e4, 0.0])
    for seed in range(20):
        keep = entrocraft_acceptance(adv, 0.9, 0.4, 0.6, 1e6, generator=torch.Generator().manual_seed(seed))
        assert keep.tolist() == [False, True, True]
        keep = entrocraft_acceptance(adv, 0.1, 0.4, 0.6, 1e300, generator=torch.Generator().manual_seed(seed))
        assert keep.tolist() == [True, False, True]


def test_empty_and_0d_inputs():
    assert entrocraft_acceptance(torch.zeros(0), 0.9, 0.4, 0.6, 1.0).shape == (0,)
    assert entrocraft_acceptance(torch.tensor(1.0), torch.tensor(0.9), 0.4, 0.6, 1.0).item() is True


def test_deterministic_given_generator_and_global_slicing():
    """Skipping the draws of earlier rollouts with torch.rand(offset, generator=g) reproduces the slice of a single
    global draw (the multi-process rule used by the trainer)."""
    adv = torch.randn(16, generator=torch.Generator().manual_seed(3))
    full = entrocraft_acceptance(adv, 0.1, 0.4, 0.6, 1.0, generator=torch.Generator().manual_seed(7))
    again = entrocraft_acceptance(adv, 0.1, 0.4, 0.6, 1.0, generator=torch.Generator().manual_seed(7))
    assert torch.equal(full, again)
    g = torch.Generator().manual_seed(7)
    torch.rand(8, generator=g)
    second_half = entrocraft_acceptance(adv[8:], 0.1, 0.4, 0.6, 1.0, generator=g)
    assert torch.equal(full[8:], second_half)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(h_low=0.7, h_high=0.6), "h_low"),
        (dict(gamma=-1.0), "gamma"),
        (dict(gamma=math.inf), "gamma"),
        (dict(gamma=math.nan), "gamma"),
        (dict(mode="soft"), "mode"),
        (dict(generator=3), "generator"),
    ],
)
def test_invalid_arguments(kw, match):
    args = dict(h_low=0.4, h_high=0.6, gamma=1.0, mode="stochastic")
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        entrocraft_acceptance(torch.zeros(3), 0.5, **args)


def test_nonfinite_inputs_rejected_clearly():
    with pytest.raises(ValueError, match="advantages"):
        entrocraft_acceptance(torch.tensor([0.0, float("nan")]), 0.9, 0.4, 0.6, 1.0)
    with pytest.raises(ValueError, match="advantages"):
        entrocraft_acceptance([0.0, 1.0], 0.9, 0.4, 0.6, 1.0)
    with pytest.raises(ValueError, match="entropy"):
        entrocraft_acceptance(torch.zeros(2), float("nan"), 0.4, 0.6, 1.0)


def test_reject_rollouts_zeroes_advantages_and_leaves_the_loss_mask_only_with_the_kept_normaliser():
    from trl_entropy.losses.rejection import reject_rollouts

    def batch(tool_mask=None):
        out = {"advantages": torch.tensor([1.0, -2.0, 3.0]), "completion_mask": torch.tensor([[1, 1, 0], [1, 1, 1],
                                                                                            [1, 0, 0]])}
        if tool_mask is not None:
            out["tool_mask"] = tool_mask
        return out

    keep = torch.tensor([True, False, True])
    mask = batch()["completion_mask"].float()
    out = batch()
    assert reject_rollouts(out, keep, mask, normalizer="all") is None
    assert out["advantages"].tolist() == [1.0, 0.0, 3.0] and "tool_mask" not in out and "ec_keep" not in out
    out = batch()
    kept = reject_rollouts(out, keep, mask, normalizer="kept")
    assert float(kept) == 3.0  # rows 0 and 2: 2 + 1 loss tokens
    assert out["tool_mask"].tolist() == [[1, 1, 1], [0, 0, 0], [1, 1, 1]]
    assert out["ec_keep"].tolist() == [1.0, 0.0, 1.0]
    out = batch(tool_mask=torch.tensor([[1, 0, 1], [1, 1, 1], [1, 1, 1]]))  # a tool mask TRL already set is kept
    reject_rollouts(out, keep, mask, normalizer="kept")
    assert out["tool_mask"].tolist() == [[1, 0, 1], [0, 0, 0], [1, 1, 1]]
    per_token = {"advantages": torch.ones(3, 2), "completion_mask": torch.ones(3, 2)}  # (B, T) advantages
    reject_rollouts(per_token, keep, torch.ones(3, 2), normalizer="all")
    assert per_token["advantages"].tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]
