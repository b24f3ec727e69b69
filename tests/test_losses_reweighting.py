import pytest
import torch

from trl_entropy.losses import positive_reweight_progression, sign_weights


def test_sign_weights_hand_case():
    adv = torch.tensor([[1.2], [-0.3], [0.0], [0.01]])
    w = sign_weights(adv, 0.25)
    assert w.tolist() == [[0.25], [1.0], [1.0], [0.25]]
    assert sign_weights(adv, 0.1, 0.5).flatten().tolist() == pytest.approx([0.1, 0.5, 0.5, 0.1])


def test_zero_advantage_group_unchanged():
    adv = torch.zeros(8)
    assert torch.equal(adv * sign_weights(adv, 0.0), adv)


def test_negative_weight_rejected():
    with pytest.raises(ValueError, match="positive_weight"):
        sign_weights(torch.zeros(2), -0.1)


def test_stage_progression():
    vals = [positive_reweight_progression("stage", s, 100) for s in (0, 49, 50, 75, 100)]
    assert vals == pytest.approx([0.0, 0.0, 0.0, 0.5, 1.0])


def test_epoch_progression():
    vals = [positive_reweight_progression("epoch", s, 100, num_epochs=5) for s in (0, 19, 20, 45, 99, 100)]
    assert vals == pytest.approx([0.0, 0.0, 0.25, 0.5, 1.0, 1.0])


def test_progression_errors():
    with pytest.raises(ValueError, match="kind"):
        positive_reweight_progression("cosine", 1, 10)
    with pytest.raises(ValueError, match="num_epochs"):
        positive_reweight_progression("epoch", 1, 10, num_epochs=1)
