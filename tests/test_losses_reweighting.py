import math

import pytest
import torch

from trl_entropy.losses import (
    entropic_token_weights,
    positive_reweight_progression,
    sign_weights,
    w_reinforce_advantages,
)


def _close(t, expected):
    return torch.allclose(t, torch.tensor(expected, dtype=t.dtype), atol=1e-6)


# ---------------------------------------------------------------- sign_weights


def test_sign_weights_hand_case():
    adv = torch.tensor([[1.2], [-0.3], [0.0], [0.01]])
    w = sign_weights(adv, 0.25)
    assert w.tolist() == [[0.25], [1.0], [1.0], [0.25]]
    assert sign_weights(adv, 0.1, 0.5).flatten().tolist() == pytest.approx([0.1, 0.5, 0.5, 0.1])
    assert sign_weights(torch.tensor([2, -1, 0]), 0.5).tolist() == [0.5, 1.0, 1.0]  # integer input -> float
    assert sign_weights(torch.tensor([1.0, -1.0], dtype=torch.float64), 0.5).dtype == torch.float64


def test_sign_weights_zero_advantage_group_unchanged():
    adv = torch.zeros(8)
    assert torch.equal(adv * sign_weights(adv, 0.0), adv)


@pytest.mark.parametrize("kw, match", [(dict(positive_weight=-0.1), "positive_weight"),
                                       (dict(positive_weight=math.inf), "positive_weight"),
                                       (dict(positive_weight=0.5, negative_weight=-1.0), "negative_weight"),
                                       (dict(positive_weight=0.5, negative_weight=math.nan), "negative_weight")])
def test_sign_weights_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        sign_weights(torch.zeros(2), **kw)


# ---------------------------------------------------------------- W-REINFORCE


def test_w_reinforce_both_binary_scales_give_lambda_and_minus_one():
    assert w_reinforce_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0])).tolist() == pytest.approx([0.1, -1, 0.1, -1])
    assert w_reinforce_advantages(torch.tensor([1.0, -1.0, -1.0]), 0.3).tolist() == pytest.approx([0.3, -1, -1])
    # all-correct / all-wrong groups are not zeroed (no baseline): +lambda / -1 everywhere
    assert w_reinforce_advantages(torch.ones(4), 0.5).tolist() == [0.5] * 4
    assert w_reinforce_advantages(torch.zeros(4), 0.5).tolist() == [-1.0] * 4
    # lambda = 0: only negatives are learned from (NSR)
    assert w_reinforce_advantages(torch.tensor([1.0, 0.0]), 0.0).tolist() == [0.0, -1.0]


def test_w_reinforce_threshold_and_shapes():
    r = torch.tensor([[0.7, 0.2], [1.0, 0.5]])
    assert _close(w_reinforce_advantages(r, 0.1), [[0.1, -1.0], [0.1, 0.1]])  # >= 0.5 is correct
    assert _close(w_reinforce_advantages(r, 0.1, correct_threshold=1.0), [[-1.0, -1.0], [0.1, -1.0]])
    assert w_reinforce_advantages(torch.tensor([1, 0]), 0.1).dtype == torch.get_default_dtype()
    with pytest.raises(ValueError, match="rewards"):
        w_reinforce_advantages(torch.tensor([1.0, math.nan]))
    with pytest.raises(ValueError, match="positive_weight"):
        w_reinforce_advantages(torch.ones(2), -0.1)
    with pytest.raises(ValueError, match="correct_threshold"):
        w_reinforce_advantages(torch.ones(2), 0.1, correct_threshold=math.nan)


# ---------------------------------------------------------------- EntroPIC

LP = torch.log(torch.tensor([[0.99, 0.5, 0.99], [0.97, 0.96, 0.99]]))
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])


def test_entropic_weights_hand_case():
    w = entropic_token_weights(torch.tensor([1.0, -2.0]), LP, MASK, 0.3)
    # row 0 (A > 0): high-prob -> 1.3, p = 0.5 -> 1, padding -> 1 ; row 1 (A < 0): all high-prob -> 0.7
    assert _close(w, [[1.3, 1.0, 1.0], [0.7, 0.7, 0.7]])
    w = entropic_token_weights(torch.tensor([1.0, -2.0]), LP, MASK, -0.3)
    assert _close(w, [[0.7, 1.0, 1.0], [1.3, 1.3, 1.3]])


def test_entropic_weights_token_advantages_zero_alpha_clamp_and_threshold():
    adv = torch.tensor([[2.0, 1.0, 1.0], [0.0, -1.0, 3.0]])
    w = entropic_token_weights(adv, LP, MASK, 0.5)
    assert _close(w, [[1.5, 1.0, 1.0], [1.0, 0.5, 1.5]])  # A == 0 -> 1
    assert entropic_token_weights(torch.zeros(2), LP, MASK, 0.5).tolist() == [[1.0] * 3] * 2
    assert entropic_token_weights(adv, LP, MASK, 0.0).tolist() == [[1.0] * 3] * 2
    assert _close(entropic_token_weights(adv, LP, MASK, 7.0), [[2.0, 1, 1], [1, 0.0, 2.0]])
    assert entropic_token_weights(adv, LP, MASK, 0.5, high_prob_threshold=1.0).tolist() == [[1.0] * 3] * 2
    w = entropic_token_weights(adv, LP, MASK, 0.5, high_prob_threshold=0.975)  # only p = 0.99 is high-probability
    assert _close(w, [[1.5, 1.0, 1.0], [1.0, 1.0, 1.5]])
    assert entropic_token_weights(adv, LP, torch.zeros(2, 3), 0.5).tolist() == [[1.0] * 3] * 2  # empty mask
    lp_nan = LP.clone()
    lp_nan[0, 2] = math.nan  # NaN on padding does not leak
    assert torch.isfinite(entropic_token_weights(adv, lp_nan, MASK, 0.5)).all()


def test_entropic_weights_equal_reference_adjustment_gradient_with_sum_normalisation():
    """On-policy (r = exp(lp - lp.detach()) = 1), sum_t w_t * (-A_t r_t) has the gradient of
    sum_t (-A_t r_t) + alpha * sum_{hp} (-|A_t| r_t), the reference adjustment up to its normaliser."""
    adv = torch.tensor([[2.0, -1.0, 1.0], [-0.5, -1.0, 3.0]])
    alpha = 0.4
    lp1 = LP.clone().requires_grad_(True)
    w = entropic_token_weights(adv, lp1, MASK, alpha)
    r1 = torch.exp(lp1 - lp1.detach())
    (w * -adv * r1 * MASK).sum().backward()
    lp2 = LP.clone().requires_grad_(True)
    r2 = torch.exp(lp2 - lp2.detach())
    hp = MASK.bool() & (lp2.detach() > math.log(0.95))
    ((-adv * r2 * MASK).sum() + alpha * (-adv.abs() * r2 * hp).sum()).backward()
    assert torch.allclose(lp1.grad, lp2.grad)


def test_entropic_weights_validation():
    adv = torch.ones(2)
    with pytest.raises(ValueError, match="alpha"):
        entropic_token_weights(adv, LP, MASK, math.nan)
    with pytest.raises(ValueError, match="high_prob_threshold"):
        entropic_token_weights(adv, LP, MASK, 0.1, high_prob_threshold=0.0)
    with pytest.raises(ValueError, match="high_prob_threshold"):
        entropic_token_weights(adv, LP, MASK, 0.1, high_prob_threshold=1.5)
    with pytest.raises(ValueError, match="advantages"):
        entropic_token_weights(torch.ones(3), LP, MASK, 0.1)
    with pytest.raises(ValueError, match="logps"):
        entropic_token_weights(adv, LP[:, :2], MASK, 0.1)


# ---------------------------------------------------------------- progressions


def test_stage_progression():
    # 101 steps: the last, step 100, is p = 1 (lambda 1); step 50 is p = 0.5
    vals = [positive_reweight_progression("stage", s, 101) for s in (0, 49, 50, 75, 100, 150)]
    assert vals == pytest.approx([0.0, 0.0, 0.0, 0.5, 1.0, 1.0])


def test_epoch_progression():
    vals = [positive_reweight_progression("epoch", s, 100, num_epochs=5) for s in (0, 19, 20, 45, 60, 79, 99, 100)]
    assert vals == pytest.approx([0.0, 0.0, 0.25, 0.5, 0.75, 0.75, 1.0, 1.0])
    assert [positive_reweight_progression("epoch", s, 3, num_epochs=2) for s in range(4)] == [0.0, 0.0, 1.0, 1.0]


def test_progression_errors():
    with pytest.raises(ValueError, match="kind"):
        positive_reweight_progression("cosine", 1, 10)
    with pytest.raises(ValueError, match="num_epochs"):
        positive_reweight_progression("epoch", 1, 10, num_epochs=1)
    with pytest.raises(ValueError, match="total_steps"):
        positive_reweight_progression("stage", 1, 0)
    with pytest.raises(ValueError, match="step"):
        positive_reweight_progression("stage", -1, 10)
    with pytest.raises(ValueError, match="step"):
        positive_reweight_progression("stage", 1.5, 10)
