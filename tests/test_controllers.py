import math

import pytest

from trl_entropy.scheduling import AdaptiveClipController, LambdaStepController


def make(**kw):
    base = dict(initial=0.28, delta=0.02, window=3, c_min=0.2, c_max=0.4, warmup_steps=0)
    base.update(kw)
    return AdaptiveClipController(**base)


def test_raises_when_entropy_below_target_until_clamp():
    c = make()
    values = [c.update(measured=0.1, target=0.5) for _ in range(10)]
    assert values[:6] == pytest.approx([0.30, 0.32, 0.34, 0.36, 0.38, 0.40])
    assert values[6:] == pytest.approx([0.40] * 4)  # clamped at c_max


def test_lowers_when_entropy_above_target_until_clamp():
    c = make()
    values = [c.update(measured=0.9, target=0.5) for _ in range(6)]
    assert values == pytest.approx([0.26, 0.24, 0.22, 0.20, 0.20, 0.20])


def test_warmup_holds_initial_value():
    c = make(warmup_steps=3)
    values = [c.update(0.1, 0.5) for _ in range(5)]
    assert values == pytest.approx([0.28, 0.28, 0.28, 0.30, 0.32])


def test_window_means_decide_the_sign():
    # window 3: after two low steps and one high step the window mean is still below target -> raise
    c = make(window=3)
    c.update(0.3, 0.5)  # mean m=0.3 < 0.5 -> up
    c.update(0.3, 0.5)  # up
    v = c.update(0.8, 0.5)  # window mean of measured = 0.4667 < 0.5 -> still up
    assert v == pytest.approx(0.34)
    v = c.update(0.8, 0.5)  # window (0.3, 0.8, 0.8) mean 0.633 > 0.5 -> down
    assert v == pytest.approx(0.32)


def test_equal_means_do_not_move():
    c = make()
    assert c.update(0.5, 0.5) == pytest.approx(0.28)


def test_nonfinite_measurement_is_skipped():
    c = make()
    c.update(0.1, 0.5)
    before = c.state_dict()
    assert c.update(float("nan"), 0.5) == pytest.approx(0.30)
    assert c.update(math.inf, 0.5) == pytest.approx(0.30)
    assert c.skipped == 2
    after = c.state_dict()
    assert after["steps"] == before["steps"] and after["history"] == before["history"]


def test_state_roundtrip_continues_identically():
    a = make(window=4)
    seq = [(0.1, 0.5), (0.6, 0.5), (0.2, 0.3), (0.9, 0.4), (0.3, 0.3)]
    for m, t in seq:
        a.update(m, t)
    b = make(window=4)
    b.load_state_dict(a.state_dict())
    rest = [(0.1, 0.5), (0.7, 0.2), (0.25, 0.3)]
    assert [a.update(m, t) for m, t in rest] == [b.update(m, t) for m, t in rest]
    assert a.state_dict() == b.state_dict()


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(window=0), "adaptive_clip_window"),
        (dict(delta=0.0), "adaptive_clip_delta"),
        (dict(c_min=0.5, c_max=0.4), "adaptive_clip_min"),
    ],
)
def test_invalid_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        make(**kw)


# ---------------------------------------------------------------- LambdaStepController (positive reweighting)

def test_lambda_paper_rule_steps_by_the_sign_of_the_error():
    lam = LambdaStepController(initial=0.5, step=0.1)
    assert [round(lam.update(m, 1.0), 10) for m in (2.0, 2.0, 0.5, 0.99, 1.0)] == [0.6, 0.7, 0.6, 0.5, 0.6]


def test_lambda_proportional_term_hand_computed():
    # I steps as in the paper; lambda = clip(I + kp * (H - T) / T, 0, 1).
    lam = LambdaStepController(initial=0.2, step=0.01, kp=0.5)
    assert lam.update(1.5, 1.0) == pytest.approx(0.21 + 0.25)  # above target: I 0.21, P +0.25
    assert lam.integral == pytest.approx(0.21)
    assert lam.update(0.8, 1.0) == pytest.approx(0.20 - 0.10)  # below: I 0.20, P -0.10, in the same step
    assert lam.update(0.2, 1.0) == 0.0  # 0.19 - 0.4 clipped at 0 ...
    assert lam.integral == pytest.approx(0.19) and lam.limit_push == -1  # ... while I keeps its own value
    assert lam.update(1.0, 1.0) == pytest.approx(0.20)  # on target: P 0, I steps up (the paper's "otherwise")


def test_lambda_kp_zero_is_the_paper_rule_exactly():
    seq = [(1.3, 1.0), (0.7, 1.0), (0.2, 0.9), (2.0, 0.5), (0.5, 0.5)]
    a, b = LambdaStepController(0.3, 0.05), LambdaStepController(0.3, 0.05, kp=0.0)
    assert [a.update(m, t) for m, t in seq] == [b.update(m, t) for m, t in seq]
    assert all(x.value == x.integral for x in (a, b))


def test_lambda_proportional_only_and_zero_target():
    p = LambdaStepController(initial=0.0, step=0.0, kp=2.0)
    assert p.update(1.25, 1.0) == pytest.approx(0.5) and p.integral == 0.0
    assert p.update(0.5, 1.0) == 0.0
    assert p.update(0.1, 0.0) == 1.0  # a zero target: any entropy is too much, finite and clipped


def test_lambda_state_roundtrip_and_old_states():
    a = LambdaStepController(0.1, 0.02, kp=0.7)
    for m in (1.4, 1.2, 0.9):
        a.update(m, 1.0)
    b = LambdaStepController(0.1, 0.02, kp=0.7)
    b.load_state_dict(a.state_dict())
    assert [a.update(m, 1.0) for m in (0.5, 1.1)] == [b.update(m, 1.0) for m in (0.5, 1.1)]
    old = {"value": 0.3, "steps": 4, "skipped": 0, "direction": 1}  # saved before kp existed
    c = LambdaStepController(0.0, 0.1)
    c.load_state_dict(old)
    assert c.integral == 0.3 and c.update(2.0, 1.0) == pytest.approx(0.4)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(initial=1.5), "positive_reweight_lambda_init"),
        (dict(step=1.5), "positive_reweight_step"),
        (dict(kp=-1.0), "positive_reweight_kp"),
        (dict(kp=math.inf), "positive_reweight_kp"),
        (dict(step=0.0), "positive_reweight_kp > 0"),
    ],
)
def test_lambda_invalid_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        LambdaStepController(**kw)
