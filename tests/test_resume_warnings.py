"""Resuming where the run would not continue as it started: a checkpoint inside a generation round (TRL generates a
fresh batch on resume), and a changed schedule or max_steps (the target moves)."""

import json
import shutil
import warnings

import pytest
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyTrainer
from trl_entropy.scheduling.targets import schedule_record, warn_if_schedule_changed
from trl_entropy.trainers.grpo_entropy_trainer import CONTROL_STATE_FILE

# two optimizer steps per generation round (steps_per_generation=2, gradient_accumulation_steps=1)
BASE = dict(entropy_control="adaptive_clip", entropy_schedule="linear", entropy_schedule_start=2.6,
            entropy_schedule_end=2.0, adaptive_clip_window=1, steps_per_generation=2, max_steps=3,
            entropy_plots=False)


def make(args, model_seed=0):
    return GRPOEntropyTrainer(model=tiny_model(model_seed), reward_funcs=count_ones_reward, args=args,
                              train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())


def resume(path, checkpoint, **overrides):
    trainer = make(tiny_args(path, **{**BASE, **overrides}), model_seed=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train(resume_from_checkpoint=str(checkpoint))
    return trainer, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def round_warnings(messages):
    return [m for m in messages if "not a generation-round boundary" in m]


def schedule_warnings(messages):
    return [m for m in messages if "(checkpoint → this run)" in m]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One 3-step run with a checkpoint at every step."""
    path = tmp_path_factory.mktemp("straight")
    trainer = make(tiny_args(path, save_strategy="steps", save_steps=1, **BASE))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return path


def test_the_control_state_file_records_the_schedule_and_max_steps(run):
    with open(run / "checkpoint-2" / CONTROL_STATE_FILE) as f:
        saved = json.load(f)["schedule"]
    assert saved == {"entropy_schedule": "linear", "entropy_schedule_start": 2.6, "entropy_schedule_end": 2.0,
                     "entropy_schedule_warmup_steps": 0, "entropy_schedule_anneal_ratio": 0.1, "max_steps": 3}


def test_resuming_inside_a_generation_round_warns_with_the_exact_save_steps(run, tmp_path):
    trainer, messages = resume(tmp_path, run / "checkpoint-1")
    assert trainer.state.global_step == 3
    [message] = round_warnings(messages)
    assert "at step 1, which is not a generation-round boundary" in message
    assert "every 2 optimizer steps" in message and "save_steps that is a multiple of 2" in message
    assert not schedule_warnings(messages)


def test_resuming_on_a_round_boundary_with_the_same_config_does_not_warn(run, tmp_path):
    trainer, messages = resume(tmp_path, run / "checkpoint-2")
    assert trainer.state.global_step == 3
    assert not round_warnings(messages) and not schedule_warnings(messages)


def test_a_changed_schedule_or_max_steps_at_resume_is_named_old_to_new(run, tmp_path):
    trainer, messages = resume(tmp_path, run / "checkpoint-2", entropy_schedule_end=1.5, max_steps=4)
    assert trainer.state.global_step == 4
    [message] = schedule_warnings(messages)
    assert "entropy_schedule_end: 2.0 → 1.5" in message and "max_steps: 3 → 4" in message
    assert "entropy_schedule_start" not in message and "entropy_schedule:" not in message
    assert not round_warnings(messages)


def test_a_checkpoint_written_before_the_schedule_was_recorded_is_not_compared(run, tmp_path):
    old = tmp_path / "checkpoint-2"
    shutil.copytree(run / "checkpoint-2", old)
    with open(old / CONTROL_STATE_FILE) as f:
        payload = json.load(f)
    del payload["schedule"]
    with open(old / CONTROL_STATE_FILE, "w") as f:
        json.dump(payload, f)
    _, messages = resume(tmp_path / "out", old, entropy_schedule_end=1.5)
    assert not schedule_warnings(messages)


@pytest.mark.parametrize("spg, iterations, ga, step, round_steps", [
    (2, 1, 1, 3, 2),  # the fixture's setting
    (4, 1, 1, 6, 4),
    (4, 1, 2, 3, 2),  # two optimizer steps of 2 micro-batches per round of 4
    (2, 2, 1, 2, 4),  # num_iterations reuses the batch: a round is 4 micro-batches
    (3, 1, 2, 2, 3),  # a round of 3 micro-batches ends on an optimizer step every 3 steps (lcm 6 / 2)
])
def test_the_round_length_in_optimizer_steps(tmp_path, spg, iterations, ga, step, round_steps):
    trainer = make(tiny_args(tmp_path, steps_per_generation=spg, num_iterations=iterations,
                             gradient_accumulation_steps=ga, per_device_train_batch_size=4 * ga))
    trainer.state.global_step = step
    with pytest.warns(UserWarning, match=f"every {round_steps} optimizer steps"):
        trainer._check_resume_round_boundary("ckpt")
    trainer.state.global_step = 2 * round_steps
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer._check_resume_round_boundary("ckpt")  # a boundary: silent


@pytest.mark.parametrize("spg, ga", [(1, 1), (2, 2), (2, 4)])
def test_no_warning_when_every_optimizer_step_ends_a_round(tmp_path, spg, ga):
    trainer = make(tiny_args(tmp_path, steps_per_generation=spg, gradient_accumulation_steps=ga,
                             per_device_train_batch_size=4 * ga))
    trainer.state.global_step = 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer._check_resume_round_boundary("ckpt")


def test_a_callable_schedule_is_compared_by_its_name(tmp_path):
    def decay(step, total_steps):
        return 2.0 - step / total_steps

    trainer = make(tiny_args(tmp_path, entropy_control="adaptive_clip", entropy_schedule=decay))
    trainer.state.max_steps = 10
    record = schedule_record(trainer.args, trainer.state.max_steps)
    assert record["entropy_schedule"] == "callable:test_a_callable_schedule_is_compared_by_its_name.decay"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_schedule_changed("ckpt", dict(record), schedule_record(trainer.args, 10))  # the same callable: silent
    with pytest.warns(UserWarning, match=r"entropy_schedule: 'callable:lambda .*' → 'callable:test_a_callable"):
        warn_if_schedule_changed("ckpt", {**record, "entropy_schedule": "callable:lambda (train.py:3)"}, record)
