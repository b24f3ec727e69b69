"""benchmarks/gpu_check.py, the one-GPU check, kept from rotting between GPU runs: its --smoke mode runs the same code
on CPU (every registered control, equality when off, resume, model card, one table, the exit status), and its parts
that need no GPU (what --prepare downloads, the install's message, the comparisons) are checked here."""

import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # `benchmarks` is a package at the repository root
    sys.path.insert(0, ROOT)

from benchmarks import gpu_check  # noqa: E402


def test_the_configurations_come_from_the_registry():
    from trl_entropy.controls import CONTROL_REGISTRY

    configs = gpu_check.control_configs()
    assert list(configs)[:2] == [gpu_check.BASELINE, gpu_check.OFF]
    assert set(configs) - {gpu_check.BASELINE, gpu_check.OFF} == set(CONTROL_REGISTRY)
    assert "trl_adaptive" in configs
    for name, settings in configs.items():
        if name in CONTROL_REGISTRY:
            assert settings["entropy_control"] == name
            assert ("entropy_schedule_start" in settings) == CONTROL_REGISTRY[name].follows_target


def test_the_smoke_mode_runs_every_check_on_cpu(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert gpu_check.main(["--smoke", "--json", str(out), "--out", str(tmp_path / "table.md")]) == 0
    rows = {r["row"]: r for r in json.loads(out.read_text())["rows"]}
    for name in gpu_check.control_configs():
        assert rows[name]["ok"] and "finite losses" in rows[name]["note"], name
    assert rows["equality: none = GRPOTrainer"]["ok"]
    assert "identical" in rows["equality: none = GRPOTrainer"]["note"]
    assert rows["resume (entropy_bonus)"]["ok"] and rows["model card"]["ok"] and rows["time"]["ok"]
    table = (tmp_path / "table.md").read_text()
    assert "| trl_adaptive | ok |" in table and "fused LM head: yes" in table
    assert "every row passed" in capsys.readouterr().out


def test_prepare_downloads_the_installed_releases_for_the_gpu_machines_python(tmp_path):
    import importlib.metadata

    wheel, download = gpu_check.prepare_commands(str(tmp_path), "3.12", ("extra==1.0",))
    assert wheel[2:5] == ["pip", "wheel", "--no-deps"] and wheel[-1] == gpu_check.ROOT
    assert "--no-deps" in download and download[download.index("--python-version") + 1] == "3.12"
    for name in ("trl", "datasets", "dill", "multiprocess"):
        assert f"{name}=={importlib.metadata.version(name)}" in download
    assert download[-1] == "extra==1.0"


def test_without_trl_or_wheels_the_check_says_to_prepare(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "_missing", lambda: ["trl (No module named 'trl')"])
    message = gpu_check.ensure_installed(str(tmp_path / "none"))
    assert "--prepare" in message and "trl" in message


def test_without_a_gpu_the_full_check_is_refused(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_the_comparisons_see_a_difference():
    a = [{"loss": 1.0, "step": 1, "step_time": 0.1}, {"loss": 2.0, "step": 2, "step_time": 0.2}]
    b = [{"loss": 1.0, "step": 1, "step_time": 0.3}, {"loss": 2.5, "step": 2, "step_time": 0.2}]
    assert gpu_check.compare_histories(a, a) == []
    assert gpu_check.compare_histories(a, b) == ["row 1 loss: 2.0 against 2.5"]  # times are not compared
    assert gpu_check.compare_histories(a, a[:1]) == ["2 logged rows against 1"]
    assert gpu_check._state_diff({"x": [1.0, 2.0]}, {"x": [1.0, 2.0]}) == 0.0
    assert gpu_check._state_diff({"x": [1.0, 2.0]}, {"x": [1.0, 2.2]}) == pytest.approx(0.2 / 2.2)
    assert gpu_check._state_diff({"x": 1}, {"y": 1}) == float("inf")
    assert gpu_check.split_times([9, 1, 2, 3, 8, 4], 4, 1) == ([1, 2, 3, 4], [8])
