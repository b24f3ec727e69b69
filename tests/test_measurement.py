"""entropy_measurement="generation_batch": the ratio estimate of the policy's entropy on the whole generation batch,
alone (hand-computed cases, its variance against the plain reading) and through TRL's training loop."""

import math
import random
import statistics

import pytest
import torch
from conftest import (
    count_ones_reward,
    record_windows,
    tiny_args,
    tiny_dataset,
    tiny_kwargs,
    tiny_model,
    tiny_tokenizer,
)

from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
from trl_entropy.scheduling import entropy_sums, generation_batch_entropy, global_token_mean


def test_sums_by_hand():
    h = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    gen = torch.tensor([[2.0, 2.0], [2.0, 9.0]])
    assert entropy_sums(h, mask, gen).tolist() == [6.0, 3.0, 6.0, 3.0]  # the masked token's 9 never counts
    assert entropy_sums(h, mask).tolist() == [6.0, 3.0, 0.0, 0.0]
    assert entropy_sums(h, mask, gen[:, :1]).tolist() == [6.0, 3.0, 0.0, 0.0]  # another shape: not paired


def test_estimate_by_hand():
    # the batch had mean entropy 1.5 at generation; this step's tokens had 6 then, 3 now: the policy halved it
    assert generation_batch_entropy(1.5, [3.0, 3.0, 6.0, 3.0]) == pytest.approx(0.75)
    assert generation_batch_entropy(None, [3.0, 3.0, 6.0, 3.0]) is None  # no generation batch mean
    assert generation_batch_entropy(1.5, [3.0, 3.0, 0.0, 0.0]) is None  # unpaired step
    assert generation_batch_entropy(1.5, [5.0, 5.0, 4.0, 3.0]) is None  # one micro-batch of two unpaired
    assert generation_batch_entropy(1.5, [0.0, 0.0, 0.0, 0.0]) is None  # no tokens
    assert generation_batch_entropy(1.5, [3.0, 3.0, 0.0, 3.0]) is None  # H_gen 0: no ratio
    assert generation_batch_entropy(math.inf, [3.0, 3.0, 6.0, 3.0]) is None


def test_global_token_mean_sums_over_ranks_before_dividing():
    h = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    ranks = [entropy_sums(h, mask)[:2], torch.tensor([10.0, 1.0])]  # another rank: one token of entropy 10

    def reduce(tensor, op):  # what accelerator.reduce(..., "sum") returns on every rank
        assert op == "sum"
        return tensor + ranks[1]

    assert global_token_mean(h, mask, reduce) == pytest.approx(16.0 / 4)  # not the mean of the ranks' means
    assert global_token_mean(None, mask, lambda t, op: t) is None  # no rank had a token
    assert global_token_mean(None, mask, reduce) == pytest.approx(10.0)  # this rank adds zeros, the other its token
    assert global_token_mean(h * math.inf, mask, lambda t, op: t) is None


def test_the_ratio_removes_the_spread_between_the_steps_of_one_batch():
    """A generation batch of tokens whose entropies spread widely (a lognormal, as first and later answer tokens
    do), split into 4 steps; the policy lowers every token's entropy by 2% per step. The plain reading of a step
    carries the spread of its quarter; the ratio estimate follows the policy."""
    rng = random.Random(0)
    plain_err, ratio_err = [], []
    for _ in range(200):
        gen = torch.tensor([math.exp(rng.gauss(-0.5, 1.0)) for _ in range(192)])
        batch = float(gen.mean())
        for k, part in enumerate(gen.chunk(4)):
            now = part * 0.98**k  # the policy's true entropy on the whole batch is batch * 0.98**k
            truth = batch * 0.98**k
            mask = torch.ones_like(part)
            sums = entropy_sums(now, mask, part)
            plain_err.append(float(sums[0] / sums[1]) / truth - 1)
            ratio_err.append(generation_batch_entropy(batch, sums.tolist()) / truth - 1)
    assert statistics.pstdev(plain_err) > 0.1  # the quarter's own spread
    assert max(abs(e) for e in ratio_err) < 1e-5  # a uniform change is recovered exactly


OFF_POLICY = dict(per_device_train_batch_size=8, steps_per_generation=2)


def make(args):
    return GRPOEntropyTrainer(model=tiny_model(0), reward_funcs=count_ones_reward, args=args,
                              train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())


def logged(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


def test_with_a_frozen_policy_every_step_of_a_batch_reads_the_whole_batch(tmp_path):
    """learning_rate 0: the policy never changes, so each token's entropy now is its entropy at generation, and the
    estimate of both steps of a generation batch is the batch's mean: the token-weighted mean of the two steps'
    plain readings. The control acts on it."""
    trainer = make(tiny_args(tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=2.6, max_steps=4,
                             learning_rate=0.0, entropy_measurement="generation_batch", **OFF_POLICY))
    observed, observe = [], trainer.entropy_control.observe
    trainer.entropy_control.observe = lambda measured, target: (observed.append(measured), observe(measured, target))
    windows = record_windows(trainer)
    trainer.train()
    estimates = logged(trainer, "entropy_control/measured_generation_batch")
    plain = logged(trainer, "entropy_control/measured")
    assert len(estimates) == len(plain) == len(windows) == 4
    for first in (0, 2):  # steps_per_generation=2: steps 1-2 share one batch, 3-4 the next
        w1, w2 = windows[first], windows[first + 1]
        assert w1[3] == w1[1] and w2[3] == w2[1]  # every token paired
        batch = (w1[0] + w2[0]) / (w1[1] + w2[1])
        assert estimates[first] == pytest.approx(batch, rel=1e-5)
        assert estimates[first + 1] == pytest.approx(batch, rel=1e-5)
    assert plain[0] != plain[1]  # the steps' own readings differ (their halves differ); the estimates do not
    assert observed == estimates


def test_the_step_reading_reaches_the_bonus_noise_cap(tmp_path):
    """The control acts on the estimate, and the bonus's noise estimate is read on each step's own reading (what
    the trainer logs as entropy_control/measured), alone and as the assist of a paper's control."""
    for extra in ({}, dict(entropy_control="adaptive_clip", adaptive_clip_window=1, adaptive_clip_max=0.2,
                           entropy_bonus_assist=True, entropy_bonus_assist_window=1)):
        trainer = make(tiny_args(tmp_path, **{**dict(entropy_control="entropy_bonus", entropy_schedule_start=2.6,
                                                     max_steps=4, learning_rate=1e-2,
                                                     entropy_measurement="generation_batch", **OFF_POLICY),
                                              **extra}))
        control = trainer.entropy_control
        bonus = control.bonus if extra else control.controller
        noted, note = [], bonus.note_step_reading
        bonus.note_step_reading = lambda r: (noted.append(r), note(r))
        trainer.train()
        assert noted == logged(trainer, "entropy_control/measured")


def test_with_training_the_estimate_moves_with_the_policy(tmp_path):
    trainer = make(tiny_args(tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=2.6, max_steps=4,
                             learning_rate=1e-2, entropy_measurement="generation_batch", **OFF_POLICY))
    trainer.train()
    estimates = logged(trainer, "entropy_control/measured_generation_batch")
    assert len(estimates) == 4 and all(math.isfinite(v) and v > 0 for v in estimates)
    assert estimates[1] != pytest.approx(estimates[0], rel=1e-6)  # the second step sees the first update
    trainer.create_model_card()  # the card says what the control acted on
    assert "| `entropy_measurement` | generation_batch |" in (tmp_path / "README.md").read_text()


def test_where_a_step_covers_its_generation_batch_it_equals_the_step_reading(tmp_path):
    """On-policy (steps_per_generation=1): TRL runs no old-log-prob forward, the step sees its whole batch, and
    "generation_batch" trains exactly as "step" (nothing extra is logged)."""
    runs = {}
    for how in ("step", "generation_batch"):
        args = tiny_args(tmp_path / how, entropy_control="entropy_bonus", entropy_schedule_start=2.6,
                         max_steps=3, learning_rate=1e-2, entropy_measurement=how)
        if how == "step":
            trainer = make(args)
        else:
            with pytest.warns(UserWarning, match="acts as \"step\": each optimizer step covers whole generation"):
                trainer = make(args)
        trainer.train()
        assert not logged(trainer, "entropy_control/measured_generation_batch")
        runs[how] = [{k: v for k, v in h.items() if k.startswith("entropy_control/")}
                     for h in trainer.state.log_history]
    assert runs["step"] == runs["generation_batch"]


def test_an_unknown_measurement_is_refused(tmp_path):
    with pytest.raises(ValueError, match="entropy_measurement"):
        GRPOEntropyConfig(**tiny_kwargs(tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=1.0,
                                        entropy_measurement="batch"))


def test_without_a_control_it_says_it_does_nothing(tmp_path):
    with pytest.warns(UserWarning, match="no entropy_control is set"):
        make(tiny_args(tmp_path, entropy_measurement="generation_batch", **OFF_POLICY))
