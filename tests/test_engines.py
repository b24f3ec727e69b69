"""trl_entropy.engines: the warning when a launch asked for DeepSpeed or FSDP and the run is plain data parallel, and
the engine names. The engines themselves run in tests/test_deepspeed.py (2 processes under `accelerate launch`)."""

import warnings

import pytest
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyTrainer
from trl_entropy.engines import requested_engine, running_engine


def _build(tmp_path):
    args = tiny_args(tmp_path, max_steps=1)
    return GRPOEntropyTrainer(model=tiny_model(), reward_funcs=count_ones_reward, args=args,
                              train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())


def test_an_fsdp_launch_that_runs_without_fsdp_warns_at_start(tmp_path, monkeypatch):
    # what `accelerate launch` writes for distributed_type: FSDP; with use_cpu accelerate 1.15 drops it
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.warns(UserWarning, match=r"asked for FSDP, but this run is plain data parallel") as caught:
        trainer = _build(tmp_path)
    assert running_engine(trainer.accelerator) == "NO"
    assert sum("asked for FSDP" in str(w.message) for w in caught) == 1


def test_no_engine_asked_no_warning(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _build(tmp_path)
    assert not [w for w in caught if "plain data parallel" in str(w.message)]


def test_requested_engine_reads_the_launch_environment(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    assert requested_engine() is None
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    assert requested_engine() == "DeepSpeed"
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "false")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert requested_engine() == "FSDP"
