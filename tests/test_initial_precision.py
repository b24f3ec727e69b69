"""The initial entropy, for a target written relative to it, is measured to a stated precision (issue 61): when the
first generation batch leaves a standard error above INITIAL_PRECISION, the same prompts are sampled again aside
from training and pooled."""

import math
import warnings

import pytest

from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
from trl_entropy.demo import testbed
from trl_entropy.scheduling.measurement import pool_estimates
from trl_entropy.scheduling.targets import INITIAL_PRECISION, initial_entropy_metrics
from trl_entropy.trainers import grpo_entropy_trainer, initial_entropy


def test_pool_estimates_weighs_by_tokens_and_shrinks_the_error():
    mean, se = pool_estimates([(1.0, 0.1, 100), (2.0, 0.2, 300)])
    assert mean == pytest.approx((100 * 1.0 + 300 * 2.0) / 400)
    assert se == pytest.approx(math.sqrt(0.25**2 * 0.01 + 0.75**2 * 0.04))
    assert pool_estimates([(0.9, 0.05, 10)] * 4)[1] == pytest.approx(0.025)  # four like rounds halve the error
    with pytest.raises(ValueError):
        pool_estimates([(1.0, 0.1, 0)])


def test_the_metrics_warn_only_above_the_precision():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = initial_entropy_metrics(1.0, INITIAL_PRECISION * 0.99, 2)
    assert out == {"initial_entropy": 1.0, "initial_entropy_rounds": 2.0, "initial_entropy_se": INITIAL_PRECISION * 0.99}
    with pytest.warns(RuntimeWarning, match="more rounds aside"):
        initial_entropy_metrics(1.0, INITIAL_PRECISION * 2, 8)


def test_a_small_first_batch_is_pooled_with_rounds_aside_to_the_stated_precision(tmp_path, monkeypatch):
    calls = []
    original = initial_entropy.precise_initial_entropy

    def recording(trainer, inputs, entropy, error, tokens):
        out = original(trainer, inputs, entropy, error, tokens)
        calls.append(((entropy, error, tokens), out))
        return out

    def train():
        model, tokenizer = testbed.load_or_pretrain(progress=False)
        data, _ = testbed.make_datasets()
        kwargs = testbed.grpo_config_kwargs(per_device_train_batch_size=16)  # 2 prompts x 8: ~50 answer tokens
        args = GRPOEntropyConfig(output_dir=str(tmp_path), max_steps=2, seed=0, entropy_control="entropy_bonus",
                                 entropy_schedule="constant", entropy_schedule_start="initial", **kwargs)
        trainer = GRPOEntropyTrainer(model=model, reward_funcs=testbed.accuracy_reward, args=args, train_dataset=data,
                                     processing_class=tokenizer)
        trainer.train()
        return trainer

    monkeypatch.setattr(grpo_entropy_trainer, "precise_initial_entropy", lambda trainer, inputs, e, s, t: (e, s, 0))
    without = train().state.log_history[0]  # the same first batch, measured on it alone
    monkeypatch.setattr(grpo_entropy_trainer, "precise_initial_entropy", recording)
    trainer = train()
    assert len(calls) == 1
    (first, first_error, tokens), (entropy, error, rounds) = calls[0]
    assert first_error > INITIAL_PRECISION * first and tokens > 0  # the precondition: one batch is not enough
    assert 1 <= rounds <= initial_entropy.MAX_ROUNDS
    assert error <= INITIAL_PRECISION * entropy or rounds == initial_entropy.MAX_ROUNDS
    assert error < first_error
    assert trainer.initial_entropy == pytest.approx(entropy) and trainer.initial_entropy_se == pytest.approx(error)
    logged = next(h for h in trainer.state.log_history if "entropy_control/initial_entropy" in h)
    assert logged["entropy_control/initial_entropy_rounds"] == rounds
    assert logged["entropy_control/initial_entropy_se"] == pytest.approx(error)
    assert logged["entropy_control/target"] == pytest.approx(entropy)
    # the rounds aside are not training batches: TRL's token count and completion lengths are the first batch's only
    assert logged["entropy_control/initial_entropy"] != without["entropy_control/initial_entropy"]
    for key in ("num_tokens", "completions/mean_length", "completions/max_length"):
        assert logged[key] == without[key]
