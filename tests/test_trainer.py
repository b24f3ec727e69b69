"""GRPOEntropyTrainer through TRL's real training loop on a tiny model."""

import json
import os

import pytest
import torch
from conftest import count_ones_reward, tiny_args, tiny_kwargs, tiny_dataset, tiny_model, tiny_tokenizer
from trl import GRPOConfig, GRPOTrainer

from trl_entropy import EntropyScheduleCallback, GRPOEntropyTrainer
from trl_entropy.trainers.grpo_entropy_trainer import CONTROL_STATE_FILE


def train(args, model_seed=0, cls=GRPOEntropyTrainer, callbacks=None, resume=None):
    trainer = cls(
        model=tiny_model(model_seed),
        reward_funcs=count_ones_reward,
        args=args,
        train_dataset=tiny_dataset(),
        processing_class=tiny_tokenizer(),
        callbacks=callbacks,
    )
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def history(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


def test_control_none_is_indistinguishable_from_grpo(tmp_path):
    common = dict(max_steps=4, steps_per_generation=2)
    ours = train(tiny_args(tmp_path / "a", **common))
    plain = train(GRPOConfig(**tiny_kwargs(tmp_path / "b", **common)), cls=GRPOTrainer)
    for key in ("loss", "entropy", "reward", "grad_norm"):
        assert history(ours, key) == history(plain, key), key
    for (n1, p1), (n2, p2) in zip(ours.model.named_parameters(), plain.model.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2), n1
    # the only addition: the measured entropy, equal to TRL's entropy when one micro-batch makes a step
    assert history(ours, "entropy_control/measured") == pytest.approx(history(ours, "entropy"), rel=1e-6)
    assert not any(k.startswith("entropy_control/target") for h in ours.state.log_history for k in h)


def adaptive_args(path, start, **kw):
    base = dict(
        max_steps=8,
        steps_per_generation=2,  # off-policy: two optimizer steps per generation batch
        entropy_control="adaptive_clip",
        entropy_schedule="constant",
        entropy_schedule_start=start,
        epsilon_high=0.28,
        adaptive_clip_delta=0.05,
        adaptive_clip_window=2,
        adaptive_clip_min=0.1,
        adaptive_clip_max=0.5,
    )
    base.update(kw)
    return tiny_args(path, **base)


def test_adaptive_clip_raises_epsilon_high_when_entropy_far_below_target(tmp_path):
    trainer = train(adaptive_args(tmp_path, start=2.639))  # far above any entropy of a 14-token vocabulary
    eps = history(trainer, "entropy_control/epsilon_high")  # value used during each step
    assert eps == pytest.approx([0.28, 0.33, 0.38, 0.43, 0.48, 0.5, 0.5, 0.5])
    assert trainer.epsilon_high == pytest.approx(0.5)  # the knob TRL's loss reads
    assert history(trainer, "entropy_control/target") == [2.639] * 8
    assert all(e < 0 for e in history(trainer, "entropy_control/tracking_error"))


def test_adaptive_clip_lowers_epsilon_high_when_entropy_far_above_target(tmp_path):
    trainer = train(adaptive_args(tmp_path, start=0.0))
    eps = history(trainer, "entropy_control/epsilon_high")
    assert eps == pytest.approx([0.28, 0.23, 0.18, 0.13, 0.1, 0.1, 0.1, 0.1])
    assert trainer.epsilon_high == pytest.approx(0.1)


def test_adaptive_clip_warmup_holds_initial(tmp_path):
    trainer = train(adaptive_args(tmp_path, start=2.639, adaptive_clip_warmup_steps=3, max_steps=5))
    assert history(trainer, "entropy_control/epsilon_high") == pytest.approx([0.28, 0.28, 0.28, 0.28, 0.33])


def test_adaptive_clip_changes_the_update_off_policy(tmp_path):
    """The knob matters where the paper says it does: two runs with different bounds diverge off-policy."""
    a = train(adaptive_args(tmp_path / "a", start=2.639, max_steps=6, learning_rate=3e-2))
    b = train(adaptive_args(tmp_path / "b", start=0.0, max_steps=6, learning_rate=3e-2))
    pa = torch.cat([p.flatten() for p in a.model.parameters()])
    pb = torch.cat([p.flatten() for p in b.model.parameters()])
    assert not torch.equal(pa, pb)


def test_schedule_target_follows_linear_schedule(tmp_path):
    trainer = train(adaptive_args(tmp_path, start=1.0, entropy_schedule="linear", entropy_schedule_end=0.5,
                                  max_steps=5))
    # the last of the 5 optimizer steps (global_step 4 at its start) trains with the end value
    assert history(trainer, "entropy_control/target") == pytest.approx([1.0, 0.875, 0.75, 0.625, 0.5])


def test_metrics_are_logged_each_step(tmp_path):
    trainer = train(adaptive_args(tmp_path, start=1.0, max_steps=3))
    for key in ("target", "measured", "epsilon_high", "tracking_error", "relative_tracking_error"):
        assert len(history(trainer, f"entropy_control/{key}")) == 3, key


def test_measured_entropy_is_token_weighted_over_micro_batches(tmp_path):
    """With gradient accumulation, the measured entropy is Σ H·mask / Σ mask over the whole optimizer step."""
    trainer = train(adaptive_args(tmp_path, start=1.0, max_steps=2, per_device_train_batch_size=4,
                                  gradient_accumulation_steps=2, steps_per_generation=4))
    measured = history(trainer, "entropy_control/measured")
    assert len(measured) == 2 and all(0 < m < 3 for m in measured)


def test_checkpoint_resume_continues_the_controller_exactly(tmp_path):
    kw = dict(start=1.6, max_steps=8, save_strategy="steps", save_steps=4, adaptive_clip_delta=0.02)
    straight = train(adaptive_args(tmp_path / "straight", **kw))
    ckpt = tmp_path / "straight" / "checkpoint-4"
    with open(ckpt / CONTROL_STATE_FILE) as f:
        saved = json.load(f)
    assert saved["entropy_control"] == "adaptive_clip" and saved["global_step"] == 4
    assert saved["state"]["steps"] == 4 and len(saved["state"]["history"]) == 2

    # resume a fresh trainer (different init, so anything not restored would show) from the step-4 checkpoint
    resumed = train(adaptive_args(tmp_path / "straight", **kw), model_seed=1, resume=str(ckpt))
    # the resumed log history holds steps 1-4 from the checkpoint and 5-8 from the resumed run
    for key in ("epsilon_high", "target", "measured"):
        a = history(straight, f"entropy_control/{key}")
        b = history(resumed, f"entropy_control/{key}")
        assert len(a) == len(b) == 8 and b == pytest.approx(a, rel=1e-6), key
    # same data, same seed, RNG restored by the Trainer: the controller state is bit-identical
    assert resumed.entropy_control.state_dict() == straight.entropy_control.state_dict()
    assert resumed.epsilon_high == pytest.approx(straight.epsilon_high)


def test_resume_with_a_different_control_raises(tmp_path):
    kw = dict(start=1.0, max_steps=2, save_strategy="steps", save_steps=2)
    train(adaptive_args(tmp_path, **kw))
    ckpt = os.path.join(tmp_path, "checkpoint-2")
    other = tiny_args(tmp_path, max_steps=4, steps_per_generation=2)
    with pytest.raises(ValueError, match="entropy_control='adaptive_clip'"):
        train(other, resume=ckpt)


def test_schedule_callback_drives_plain_trl_adaptive_entropy(tmp_path):
    args = GRPOConfig(output_dir=str(tmp_path), max_steps=4, per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=4, report_to="none", use_cpu=True, save_strategy="no", logging_steps=1,
                      disable_tqdm=True, use_adaptive_entropy=True, entropy_target=0.0)
    trainer = GRPOTrainer(model=tiny_model(), reward_funcs=count_ones_reward, args=args,
                          train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    trainer.add_callback(EntropyScheduleCallback("linear", trainer=trainer, start=2.0, end=1.0))
    trainer.train()
    assert trainer.args.entropy_target == pytest.approx(1.0)  # set at the start of the last step (step index 3)
    assert history(trainer, "entropy_control/target")[-1] == pytest.approx(1.0)


def test_step_with_no_tokens_is_skipped_with_a_warning(tmp_path):
    trainer = GRPOEntropyTrainer(model=tiny_model(), reward_funcs=count_ones_reward,
                                 args=adaptive_args(tmp_path, start=1.0), train_dataset=tiny_dataset(),
                                 processing_class=tiny_tokenizer())
    trainer.set_entropy_target(1.0)
    before = trainer.entropy_control.state_dict()
    with pytest.warns(RuntimeWarning, match="no completion tokens"):
        trainer._on_optimizer_step_boundary()
    assert trainer.entropy_control.state_dict() == before
    assert trainer._metrics["train"]["entropy_control/skipped_steps"] == [1.0]


def test_plain_grpo_config_is_rejected_with_a_hint(tmp_path):
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    with pytest.raises(TypeError, match="GRPOEntropyConfig"):
        GRPOEntropyTrainer(model=tiny_model(), reward_funcs=count_ones_reward, args=args,
                           train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
