"""benchmarks/gpu_engines.py on CPU, up to where CUDA is needed: the plan, the launch commands and one worker run.
(Through `accelerate launch` under ZeRO-3 on 2 CPU processes: tests/test_deepspeed.py, where deepspeed is installed.)"""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # `benchmarks` is a package at the repository root
    sys.path.insert(0, ROOT)

from benchmarks import gpu_engines  # noqa: E402


def test_the_plan_has_every_control_under_every_engine_and_the_recipes(capsys):
    assert gpu_engines.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    for engine in gpu_engines.ENGINES:
        for name in gpu_engines.controls():
            assert f'"engine": "{engine}", "control": "{name}"' in out
    assert '"recipe": "recipes/entropy_bonus_smollm2_wsd.yaml"' in out
    assert "-m accelerate.commands.launch --config_file" in out  # this interpreter's accelerate


@pytest.mark.slow
def test_the_worker_trains_on_cpu_and_writes_a_row(capsys):
    assert gpu_engines.main(["--cpu-smoke"]) == 0
    out = capsys.readouterr().out
    assert "| entropy_bonus | none (CPU smoke) | 1 | NO | ok |" in out


def test_without_a_gpu_the_full_run_is_refused(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert gpu_engines.main(["--engines", "zero3"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["zero3", "fsdp2", "ddp"])
def test_the_accelerate_configs_load(tmp_path, kind):
    from accelerate.commands.config.config_args import ClusterConfig

    config = ClusterConfig.from_yaml_file(gpu_engines.accelerate_config(kind, 2, str(tmp_path)))
    assert str(config.distributed_type).endswith({"zero3": "DEEPSPEED", "fsdp2": "FSDP", "ddp": "MULTI_GPU"}[kind])
