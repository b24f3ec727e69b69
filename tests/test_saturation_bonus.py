"""Saturation that tells the truth on a short run: the feedback bonus asked for a target it cannot reach says so, and
names what to change, well before a 25-step run ends (issue 61)."""

import warnings

from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
from trl_entropy.demo import testbed


def test_an_unreachable_target_saturates_the_bonus_within_a_25_step_run(tmp_path):
    model, tokenizer = testbed.load_or_pretrain(progress=False)
    train, _ = testbed.make_datasets()
    args = GRPOEntropyConfig(output_dir=str(tmp_path), max_steps=25, seed=0, entropy_control="entropy_bonus",
                             entropy_schedule="constant", entropy_schedule_start="2.5*initial",
                             **testbed.grpo_config_kwargs())
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=testbed.accuracy_reward, args=args, train_dataset=train,
                                 processing_class=tokenizer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    rows = [h for h in trainer.state.log_history if "entropy_control/saturated" in h]
    # the precondition: the target stayed out of reach on every step (2.5x the start, the bonus at most 1)
    assert len(rows) == 25
    assert all(h["entropy_control/measured"] < h["entropy_control/target"] for h in rows)
    saturated = [h["entropy_control/saturated"] for h in rows]
    first = saturated.index(1.0) + 1
    assert first <= 20, saturated
    assert all(s == 1.0 for s in saturated[first - 1:])  # it stays saturated while the knob stays at its limit
    messages = [str(w.message) for w in caught if "is saturated" in str(w.message)]
    assert len(messages) == 1
    assert "below its target" in messages[0] and "entropy_bonus_bound_limit" in messages[0]
    assert "cannot raise the entropy" in messages[0]
