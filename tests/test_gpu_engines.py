"""benchmarks/gpu_engines.py on CPU, up to where CUDA is needed: the plan, the launch commands and one worker run.
(Through `accelerate launch` under ZeRO-3 on 2 CPU processes: tests/test_deepspeed.py, where deepspeed is installed.)"""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # `benchmarks` is a package at the repository root
    sys.path.insert(0, ROOT)

from benchmarks import gpu_engines  # noqa: E402


def test_the_plan_has_every_control_under_every_engine_and_the_recipes(capsys, monkeypatch):
    import torch

    from trl_entropy.controls import CONTROL_REGISTRY

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert gpu_engines.controls() == sorted(CONTROL_REGISTRY) and "trl_adaptive" in gpu_engines.controls()
    assert gpu_engines.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    for engine in gpu_engines.ENGINES:
        for name in gpu_engines.controls():
            line = next(ln for ln in out.splitlines() if f'"engine": "{engine}", "control": "{name}"' in ln)
            # one GPU: server mode needs a second one, said per row, and printed as commands for a user
            assert line.endswith("(skipped here: needs a second GPU)") == (engine == "vllm_server")
    assert '"recipe": "recipes/entropy_bonus_smollm2_wsd.yaml"' in out
    assert "-m accelerate.commands.launch --config_file" in out  # this interpreter's accelerate
    assert "python -m benchmarks.gpu_engines --engines vllm_server --controls " + ",".join(gpu_engines.controls()) in out
    assert "VLLM_SERVER_DEV_MODE=1 CUDA_VISIBLE_DEVICES=1 vllm serve" in out


def test_flags_choose_one_engine_and_one_control(capsys):
    assert gpu_engines.main(["--dry-run", "--engines", "fsdp2", "--controls", "trl_adaptive"]) == 0
    runs = [ln for ln in capsys.readouterr().out.splitlines() if '"kind"' in ln]
    assert len(runs) == 1 and '"engine": "fsdp2", "control": "trl_adaptive"' in runs[0]
    assert gpu_engines.main(["--dry-run", "--controls", "entropy_bonus,nope"]) == 2
    assert "unknown" in capsys.readouterr().err


def test_every_registered_control_has_the_gpu_checks_settings():
    from benchmarks.gpu_check import control_configs

    for name in gpu_engines.controls():
        assert dict(gpu_engines.control_settings(name), entropy_control=name) == control_configs()[name]


def test_the_server_is_started_as_trl_recommends():
    cmd = gpu_engines.vllm_serve_command("/m", 8123, 0.8)
    assert cmd[1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", "/m"]
    assert cmd[cmd.index("--port") + 1] == "8123" and cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.8"
    for flag, value in (("--weight-transfer-config", '{"backend": "nccl"}'), ("--logprobs-mode", "processed_logprobs"),
                        ("--max-logprobs", "-1")):
        assert cmd[cmd.index(flag) + 1] == value


def test_on_one_gpu_server_mode_is_skipped_not_started(tmp_path, monkeypatch):
    """The full run on a 1-GPU machine (launches faked): server rows say skipped, no server starts, the commands for a
    2-GPU machine follow the table; a failed launch still fails the run."""
    import subprocess
    import types

    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "one fake GPU")
    monkeypatch.setattr(gpu_engines, "write_model", lambda folder, tiny=False: folder)
    monkeypatch.setattr(gpu_engines, "start_vllm_server", lambda *a: pytest.fail("a server was started on one GPU"))
    launched = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: launched.append(cmd) or types.SimpleNamespace(
        returncode=1, stderr="RuntimeError: fake launch"))
    out = tmp_path / "gpu_engines.md"
    assert gpu_engines.main(["--engines", "vllm_server,zero3", "--controls", "entropy_bonus", "--out", str(out)]) == 1
    text = out.read_text()
    assert "| entropy_bonus | vllm_server | 0 |  | skipped |" in text and len(launched) == 1
    assert "| entropy_bonus | zero3 | 1 |  | error: RuntimeError: fake launch |" in text
    assert "Not run here (needs a second GPU)" in text and "vllm serve" in text


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
