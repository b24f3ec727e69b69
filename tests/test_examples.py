"""The offline scripts in examples/ run (two optimizer steps each, in this process, on the cached testbed model)."""

import os
import runpy
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def run_example(name, tmp_path, *extra):
    module = runpy.run_path(os.path.join(EXAMPLES, name))  # not as __main__: call main() with our arguments
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        module["main"](["--max_steps", "2", "--output_dir", str(out), *extra])
    return out


def test_every_example_is_tested():
    scripts = {f for f in os.listdir(EXAMPLES) if f.endswith(".py")}
    # custom_control.py runs on the tiny test model in tests/test_custom_control.py
    assert scripts == {"quickstart_testbed.py", "lora_testbed.py", "accelerate_launch.py", "logging_backends.py",
                       "custom_control.py"}


def test_quickstart_example(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = run_example("quickstart_testbed.py", tmp_path)
    assert (out / "README.md").exists() and (out / "model.safetensors").exists()
    assert "measured entropy" in capsys.readouterr().out


def test_lora_example_trains_an_adapter(tmp_path, monkeypatch):
    pytest.importorskip("peft")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = run_example("lora_testbed.py", tmp_path)
    assert (out / "adapter_config.json").exists()
    assert not (out / "model.safetensors").exists()  # the adapter only, not the full model


def test_accelerate_example_runs_as_one_process(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = run_example("accelerate_launch.py", tmp_path)
    assert (out / "README.md").exists()
    assert "1 process(es)" in capsys.readouterr().out


def test_logging_example_writes_tensorboard_events(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tensorboard")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    out = run_example("logging_backends.py", tmp_path, "--report_to", "tensorboard")
    events = [f for d, _, fs in os.walk(out / "runs") for f in fs if f.startswith("events.out.tfevents")]
    assert events, "no TensorBoard event file written"
    assert "entropy_control/measured" in capsys.readouterr().out
