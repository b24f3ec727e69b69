"""The feedback bonus controller's pull estimate (`note_pull`, `pull_coefficient`, `varentropy`), and that the trainer
no longer computes the pull sums: the variant that acted on them (`entropy_bonus_pull_gain`) was removed, and summing
them every micro-batch for a logged estimate was cost without a use. The signal fraction still reaches the
controller."""

import math

import pytest
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyTrainer
from trl_entropy.scheduling import EntropyBonusController, pull_coefficient


def test_pull_coefficient_by_hand():
    assert pull_coefficient(-1.0, 1.25) == pytest.approx(-0.8)
    assert pull_coefficient(1.0, 0.0) is None and pull_coefficient(math.nan, 1.0) is None


def law(pulls, readings, target=1.0, **kw):
    c = EntropyBonusController(**kw)
    out = []
    for (cov, var), h in zip(pulls, readings):
        c.note_pull(cov, var)
        out.append(c.update(h, target))
    return c, out


def test_the_pull_is_logged_and_leaves_the_law_unchanged():
    readings = [1.0, 0.9, 0.8, 0.85, 0.95, 1.1, 1.05]
    pulls = [(0.3, 1.0), (0.2, 1.2), (-0.1, 0.9), (0.5, 1.1), (0.0, 1.0), (0.1, 1.0), (0.2, 0.8)]
    _, plain = law([(math.nan, 1.0)] * 7, readings)
    c, observed = law(pulls, readings)
    assert observed == plain
    assert c.pull_coefficient is not None


def test_the_pull_estimate_by_hand():
    """First pull taken as it is, then smoothed sums (weight ``PULL_SMOOTHING`` = 0.3 on the newest); the estimate
    is cov / var; sums that cannot be used leave it as it was."""
    c, _ = law([(0.1, 1.0), (0.3, 3.0)], [1.0, 1.0])
    assert EntropyBonusController.PULL_SMOOTHING == 0.3
    assert c.pull_cov == pytest.approx(0.7 * 0.1 + 0.3 * 0.3) and c.pull_var == pytest.approx(0.7 * 1.0 + 0.3 * 3.0)
    assert c.pull_coefficient == pytest.approx(0.16 / 1.6)
    c, _ = law([(0.1, 0.0), (math.inf, 1.0)], [1.0, 1.0])
    assert c.pull_coefficient is None  # no usable sums


def test_state_round_trip_keeps_the_pull():
    a, _ = law([(0.1, 1.0), (0.2, 1.5)], [1.0, 0.9])
    b = EntropyBonusController()
    b.load_state_dict(a.state_dict())
    assert (b.pull_cov, b.pull_var) == (a.pull_cov, a.pull_var)
    for cov, var, h in ((0.3, 1.0, 0.8), (0.0, 1.0, 0.85)):
        for c in (a, b):
            c.note_pull(cov, var)
        assert a.update(h, 1.0) == b.update(h, 1.0)
        assert a.pull_coefficient == b.pull_coefficient


def test_the_varentropy_by_hand():
    """The token mean of the smoothed ``(log p + H)^2`` sum over the smoothed token count (weight 0.3 on the
    newest); ``None`` until a pull with its count; kept in the state."""
    c = EntropyBonusController()
    c.note_pull(10.0, 200.0)
    assert c.varentropy is None  # no count
    c = EntropyBonusController()
    c.note_pull(10.0, 200.0, 100.0)
    c.note_pull(10.0, 400.0, 100.0)
    assert c.varentropy == pytest.approx((0.7 * 200.0 + 0.3 * 400.0) / 100.0)
    d = EntropyBonusController()
    d.load_state_dict(c.state_dict())
    assert d.varentropy == c.varentropy and d.gain_scale == c.gain_scale


def test_through_trl_no_pull_sums_are_taken_and_the_signal_fraction_still_reaches_the_controller(tmp_path):
    args = tiny_args(tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=2.6, max_steps=2,
                     per_device_train_batch_size=8, steps_per_generation=2)
    trainer = GRPOEntropyTrainer(model=tiny_model(0), reward_funcs=count_ones_reward, args=args,
                                 train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    controller = trainer.entropy_control.controller
    pulls, signals = [], []
    controller.note_pull = lambda *a, **k: pulls.append(a)
    note = controller.note_signal
    controller.note_signal = lambda fraction: (signals.append(fraction), note(fraction))
    trainer.train()
    assert pulls == [] and len(signals) == 2 and all(0.0 <= f <= 1.0 for f in signals)
    logged = [h for h in trainer.state.log_history if "entropy_control/measured" in h]
    assert len(logged) == 2 and not any("entropy_control/bonus_pull" in h for h in logged)
    assert all("entropy_control/bonus_signal_fraction" in h for h in logged)
