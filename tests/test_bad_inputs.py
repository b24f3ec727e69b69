"""What a new user gets wrong (issue 12): each bad input gets an error or warning that names the field or function."""

import copy
import json
import os

import pytest
import torch
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyTrainer
from trl_entropy.trainers.grpo_entropy_trainer import CONTROL_STATE_FILE


def make(args, reward=count_ones_reward, dataset=None, model_seed=0, **kwargs):
    return GRPOEntropyTrainer(model=tiny_model(model_seed), reward_funcs=reward, args=args,
                              train_dataset=tiny_dataset() if dataset is None else dataset,
                              processing_class=tiny_tokenizer(), **kwargs)


def history(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


# ---------------------------------------------------------------------------------------------- callable schedules
def lambda_args(path, schedule, **kw):
    return tiny_args(path, entropy_control="adaptive_clip", entropy_schedule=schedule, steps_per_generation=2,
                     max_steps=4, save_strategy="steps", save_steps=2, **kw)


def test_a_lambda_schedule_survives_checkpoints_resume_and_save_model(tmp_path):
    schedule = lambda step, total: 2.0 - step / total  # noqa: E731 - a lambda is the point of this test
    straight = make(lambda_args(tmp_path, schedule))
    straight.train()  # used to fail with PicklingError in torch.save(args) at the first checkpoint

    ckpt = tmp_path / "checkpoint-2"
    for name in ("optimizer.pt", "scheduler.pt", "trainer_state.json", "training_args.bin", CONTROL_STATE_FILE):
        assert (ckpt / name).exists(), name  # a complete checkpoint, not a partial one
    saved = torch.load(ckpt / "training_args.bin", weights_only=False)
    assert saved.entropy_schedule.startswith("callable:lambda (test_bad_inputs.py:")
    assert straight.args.entropy_schedule is schedule  # the live config still holds the callable
    assert json.loads(straight.args.to_json_string())["entropy_schedule"] == saved.entropy_schedule

    # resume: the user passes the same callable again; the run continues exactly
    resumed = make(lambda_args(tmp_path, schedule), model_seed=1)
    resumed.train(resume_from_checkpoint=str(ckpt))
    for key in ("target", "measured", "epsilon_high"):
        assert history(resumed, f"entropy_control/{key}") == pytest.approx(
            history(straight, f"entropy_control/{key}"), rel=1e-6), key
    assert history(resumed, "entropy_control/target") == pytest.approx([2.0, 1.75, 1.5, 1.25])

    out = tmp_path / "final"
    resumed.save_model(str(out))  # used to fail the same way
    assert (out / "training_args.bin").exists()
    card = (out / "README.md").read_text()
    assert "`lambda (test_bad_inputs.py:" in card and "<function" not in card and "0x" not in card


def test_a_config_with_a_callable_schedule_copies_and_reloads_clearly(tmp_path):
    def local_schedule(step, total):
        return 1.0

    args = lambda_args(tmp_path, local_schedule)
    assert copy.deepcopy(args).entropy_schedule is local_schedule  # deepcopy keeps the callable
    assert copy.copy(args).entropy_schedule is local_schedule
    d = args.to_dict()
    assert d["entropy_schedule"] == "callable:test_a_config_with_a_callable_schedule_copies_and_reloads_clearly." \
                                    "local_schedule"
    # a config rebuilt from the stored placeholder says what to do instead of "must be one of ..."
    with pytest.raises(ValueError, match="pass the same callable again as entropy_schedule"):
        lambda_args(tmp_path, d["entropy_schedule"])
