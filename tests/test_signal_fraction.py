"""The signal fraction (the share of a step's tokens with a non-zero advantage): its sum by hand, what the trainer
hands the bonus's controller through TRL's real loop (logged; it does not act on the law)."""

import math

import pytest
import torch
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyTrainer
from trl_entropy.scheduling import EntropyBonusController, signal_token_count


def test_signal_token_count_by_hand():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    adv = torch.tensor([0.5, 0.0, -1.0])  # per sequence: rows 0 and 2 carry a signal, 2 + 3 tokens
    assert float(signal_token_count(adv, mask)) == 5.0
    assert float(signal_token_count(adv[:, None], mask)) == 5.0
    per_token = torch.tensor([[0.5, 0.0, 0.5], [1.0, 1.0, 1.0], [0.0, 0.0, -1.0]])  # (B, T): token by token
    assert float(signal_token_count(per_token, mask)) == 1.0 + 1.0 + 1.0
    weights = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.25, 0.25, 0.25]])  # a weighted mask
    assert float(signal_token_count(adv, weights)) == pytest.approx(1.0 + 0.75)
    assert float(signal_token_count(torch.zeros(3), mask)) == 0.0


def test_the_signal_survives_a_state_round_trip_and_old_pull_keys_are_ignored():
    """The smoothed signal is in the controller's state; a checkpoint from before the logged pull estimate was
    removed (its ``pull_cov``, ``pull_var``, ``pull_count``) loads with those keys ignored and continues exactly."""
    a = EntropyBonusController()
    for fraction, h in ((0.4, 1.0), (0.6, 0.9)):
        a.note_signal(fraction)
        a.update(h, 1.0)
    old = a.state_dict()
    assert "pull_cov" not in old
    old.update(pull_cov=0.1, pull_var=1.0, pull_count=10.0)
    b = EntropyBonusController()
    b.load_state_dict(old)
    assert b.signal == a.signal == pytest.approx(0.9 * 0.4 + 0.1 * 0.6) and not hasattr(b, "pull_cov")
    for fraction, h in ((0.2, 0.8), (0.5, 0.85)):
        for c in (a, b):
            c.note_signal(fraction)
        assert a.update(h, 1.0) == b.update(h, 1.0) and a.signal == b.signal


def steps_signal(trainer) -> list[float]:
    """Record each optimizer step's signal fraction as the trainer computed it, and, independently, the share of
    tokens with a non-zero advantage in the micro-batches TRL's loss saw during that step."""
    seen, expected, micro = [], [], []
    compute, reduce_window = trainer._compute_loss, trainer._reduce_window

    def recording_loss(model, inputs):
        if trainer.model.training:
            mask = inputs["completion_mask"].float()
            adv = inputs["advantages"].reshape(len(mask), -1)
            micro.append((float((mask * (adv != 0)).sum()), float(mask.sum())))
        return compute(model, inputs)

    def recording_reduce():
        out = reduce_window()
        seen.append(trainer._ec_signal)
        expected.append(sum(a for a, _ in micro) / sum(n for _, n in micro))
        micro.clear()
        return out

    trainer._compute_loss, trainer._reduce_window = recording_loss, recording_reduce
    return seen, expected


def test_through_trl_the_controller_gets_each_steps_signal_fraction(tmp_path):
    """Two micro-batches a step, off-policy: the fraction the controller is given is the step's share of tokens with
    a non-zero advantage, summed over both loss forwards; it is smoothed and logged as
    ``entropy_control/bonus_signal_fraction``."""
    args = tiny_args(tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=2.6, max_steps=4,
                     learning_rate=1e-2, per_device_train_batch_size=8, steps_per_generation=2,
                     gradient_accumulation_steps=2)
    trainer = GRPOEntropyTrainer(model=tiny_model(0), reward_funcs=count_ones_reward, args=args,
                                 train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    controller = trainer.entropy_control.controller
    noted, note = [], controller.note_signal
    controller.note_signal = lambda f: (noted.append(f), note(f))
    seen, expected = steps_signal(trainer)
    trainer.train()
    assert len(seen) == len(noted) == 4
    assert seen == pytest.approx(expected, rel=1e-6) and noted == seen
    assert 0.0 < sum(seen) / 4 < 1.0  # count_ones gives some groups a signal and some none
    smoothed = seen[0]
    logged = [h["entropy_control/bonus_signal_fraction"] for h in trainer.state.log_history
              if "entropy_control/bonus_signal_fraction" in h]
    want = [smoothed]
    for f in seen[1:]:
        smoothed = 0.9 * smoothed + 0.1 * f
        want.append(smoothed)
    assert logged == pytest.approx(want, rel=1e-6)


def test_a_constant_reward_gives_a_zero_signal(tmp_path):
    args = tiny_args(tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=2.6, max_steps=2)
    trainer = GRPOEntropyTrainer(model=tiny_model(0), reward_funcs=lambda completions, **kw: [1.0] * len(completions),
                                 args=args, train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    trainer.train()
    logged = [h["entropy_control/bonus_signal_fraction"] for h in trainer.state.log_history
              if "entropy_control/bonus_signal_fraction" in h]
    assert logged == [0.0, 0.0]
    assert all(math.isfinite(h.get("loss", 0.0)) for h in trainer.state.log_history)


def test_the_assist_s_bonus_gets_the_signal_too(tmp_path):
    args = tiny_args(tmp_path, entropy_control="adaptive_clip", entropy_schedule_start=2.6, max_steps=2,
                     adaptive_clip_window=1, adaptive_clip_max=0.2, entropy_bonus_assist=True,
                     entropy_bonus_assist_window=1, per_device_train_batch_size=8, steps_per_generation=2)
    trainer = GRPOEntropyTrainer(model=tiny_model(0), reward_funcs=count_ones_reward, args=args,
                                 train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    trainer.train()
    bonus = trainer.entropy_control.bonus
    assert bonus.signal is not None
    logged = [h["entropy_control/bonus_signal_fraction"] for h in trainer.state.log_history
              if "entropy_control/bonus_signal_fraction" in h]
    assert len(logged) == 2 and logged[-1] == pytest.approx(bonus.signal)
