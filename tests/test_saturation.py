"""Saturation: a control whose knob sits at a limit while the error keeps its sign says so (metric + one warning)."""

import warnings

import pytest
import torch
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyTrainer
from trl_entropy.scheduling.controllers import (
    AdaptiveClipController,
    LambdaStepController,
    PIController,
    SaturationMonitor,
)


def test_monitor_counts_consecutive_pushes_of_one_sign():
    m = SaturationMonitor(window=3)
    assert [m.update(p) for p in (1, 1, 1, 1)] == [False, False, True, True]
    assert m.events == 1
    assert m.update(0) is False  # the knob left its limit: the count restarts
    assert [m.update(p) for p in (-1, -1, 1, 1, 1)] == [False, False, False, False, True]  # a sign change restarts
    assert m.events == 2


def test_monitor_state_round_trip():
    m = SaturationMonitor(window=2)
    m.update(1)
    clone = SaturationMonitor(window=2)
    clone.load_state_dict(m.state_dict())
    assert clone.update(1) is True and clone.events == 1


def test_the_default_window_saturates_after_three_steps_and_the_message_names_the_fix_for_its_knob():
    import dataclasses

    from trl_entropy import GRPOEntropyConfig

    m = SaturationMonitor()
    assert [m.update(1) for _ in range(4)] == [False, False, True, True] and m.window == 3
    default = {f.name: f.default for f in dataclasses.fields(GRPOEntropyConfig)}["saturation_window"]
    assert default == m.window  # the config's default is the monitor's
    bonus = m.message(7, "entropy_bonus", "entropy_coef", 1.0, 0.4, 1.0)
    assert "for 3 steps" in bonus and "entropy_bonus_bound_limit" in bonus and "entropy_bonus_assist" not in bonus
    assert "below its target" in bonus and "choose a target lower" in bonus
    clip = m.message(7, "adaptive_clip", "epsilon_high", 0.5, 0.4, 1.0)
    assert "entropy_bonus_assist=True" in clip and "entropy_bonus_bound_limit" not in clip
    low = SaturationMonitor()
    for _ in range(3):
        low.update(-1)
    penalty = low.message(7, "entropy_bonus", "entropy_coef", -1.0, 2.0, 1.0)
    assert "above its target" in penalty and "entropy_bonus_bound_limit" in penalty and "entropy_bonus_min" in penalty


def test_monitor_rejects_bad_window():
    with pytest.raises(ValueError, match="saturation_window"):
        SaturationMonitor(window=0)


def test_adaptive_clip_pushes_into_its_bounds_only_when_the_error_asks():
    c = AdaptiveClipController(initial=0.2, delta=0.1, window=1, c_min=0.0, c_max=0.3)
    c.update(measured=0.1, target=1.0)  # 0.3: at the top, and the error asks for more
    assert c.value == pytest.approx(0.3) and c.limit_push == 1
    c.update(measured=2.0, target=1.0)  # moves down: off the limit
    assert c.limit_push == 0
    for _ in range(5):
        c.update(measured=2.0, target=1.0)
    assert c.value == 0.0 and c.limit_push == -1


def test_lambda_and_pi_limits():
    lam = LambdaStepController(initial=0.05, step=0.1)
    lam.update(measured=0.1, target=1.0)  # entropy too low: lambda down to 0, and it would go further
    assert lam.value == 0.0 and lam.limit_push == -1
    lam.update(measured=2.0, target=1.0)
    assert lam.limit_push == 0
    pi = PIController(kp=10.0, ki=0.0)
    pi.update(measured=2.0, target=1.0)
    assert pi.value == 1.0 and pi.limit_push == 1
    pi.update(measured=1.01, target=1.0)
    assert pi.limit_push == 0


def _train(tmp_path, **overrides):
    torch.manual_seed(0)
    args = tiny_args(tmp_path, max_steps=6, steps_per_generation=2, **overrides)
    trainer = GRPOEntropyTrainer(model=tiny_model(0), reward_funcs=count_ones_reward, args=args,
                                 train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    saturated = [h["entropy_control/saturated"] for h in trainer.state.log_history
                 if "entropy_control/saturated" in h]
    messages = [str(w.message) for w in caught if "is saturated" in str(w.message)]
    return trainer, saturated, messages


def test_unreachable_target_saturates_adaptive_clip_and_warns_once(tmp_path):
    # A 50-nat target is far above anything a 14-token vocabulary can reach: epsilon_high runs to its bound at once
    # (delta = bound) and stays pushed there.
    trainer, saturated, messages = _train(
        tmp_path, entropy_control="adaptive_clip", entropy_schedule_start=2.639, adaptive_clip_window=1,
        adaptive_clip_delta=0.5, adaptive_clip_max=0.5, saturation_window=3)
    assert saturated == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert len(messages) == 1
    assert "adaptive_clip" in messages[0] and "epsilon_high = 0.5" in messages[0] and "below its target" in messages[0]


def test_reachable_knob_range_is_not_saturated(tmp_path):
    # epsilon_high has room to move in both directions around a target at the starting entropy: no saturation.
    _, saturated, messages = _train(
        tmp_path, entropy_control="adaptive_clip", entropy_schedule_start=2.6, adaptive_clip_window=1,
        adaptive_clip_delta=0.01, saturation_window=3)
    assert saturated and max(saturated) == 0.0
    assert messages == []


def test_entrocraft_outside_its_band_saturates(tmp_path):
    _, saturated, messages = _train(
        tmp_path, entropy_control="entrocraft", entropy_schedule_start=2.639, entrocraft_mode="hard", entrocraft_band=0.0,
        saturation_window=2)
    assert saturated[-1] == 1.0 and len(messages) == 1


def test_saturation_state_survives_resume(tmp_path):
    args = dict(entropy_control="adaptive_clip", entropy_schedule_start=2.639, adaptive_clip_window=1,
                adaptive_clip_delta=0.5, adaptive_clip_max=0.5, saturation_window=3)
    straight, saturated, _ = _train(tmp_path / "a", **args)
    torch.manual_seed(0)
    first = GRPOEntropyTrainer(model=tiny_model(0), reward_funcs=count_ones_reward,
                               args=tiny_args(tmp_path / "b", max_steps=6, steps_per_generation=2, save_strategy="steps",
                                              save_steps=4, **args),
                               train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first.train()
    resumed = GRPOEntropyTrainer(model=tiny_model(0), reward_funcs=count_ones_reward,
                                 args=tiny_args(tmp_path / "b", max_steps=6, steps_per_generation=2, **args),
                                 train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "checkpoint-4"))
    after = [h["entropy_control/saturated"] for h in resumed.state.log_history if "entropy_control/saturated" in h]
    assert after[-2:] == saturated[-2:]
    assert not [w for w in caught if "is saturated" in str(w.message)]  # warned before the checkpoint, not again
