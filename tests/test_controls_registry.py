"""The registry is the one list of controls (issue 51, part 1): every registered control is in the demo's methods, the
CLI's torch-free list, the test configurations and the docs' methods table; a control registered in a module of its
own is found in the demo, `trl-entropy grpo --help` and the table; a control's settings are checked only when it is
chosen; and a control outside the package has settings of its own from Python and from the command line."""

import dataclasses
import os
import re
import sys
import textwrap
import warnings

import pytest
from conftest import CONTROL_CONFIGS, tiny_args

from trl_entropy import GRPOEntropyConfig, cli
from trl_entropy.controls import BUILTIN_SETTINGS, CONTROL_REGISTRY, methods_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE_START, TABLE_END = "<!-- methods-table:", "<!-- /methods-table -->"


def _builtin() -> list[str]:
    return [n for n, cls in CONTROL_REGISTRY.items() if cls.__module__.startswith("trl_entropy.controls.")]


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


@pytest.fixture
def registry_restored():
    before = dict(CONTROL_REGISTRY)
    yield
    CONTROL_REGISTRY.clear()
    CONTROL_REGISTRY.update(before)


def test_every_builtin_control_is_in_the_cli_the_test_configurations_and_the_readme():
    """The hand-kept copies of the registry's list: the demo's torch-free choices, the tests' configurations, the
    README's methods table (in registration order, each linked to its docs page) and entropy_control's help."""
    names = _builtin()
    assert len(names) >= 9
    assert cli.DEMO_METHODS == ("grpo", *names), "trl_entropy/cli.py's DEMO_METHODS is not the registry's list"
    tested = {c["entropy_control"] for c in CONTROL_CONFIGS.values()}
    missing = [n for n in names if n not in tested]
    assert not missing, f"tests/conftest.py's CONTROL_CONFIGS has no configuration for {missing}"
    readme = _read("README.md").split("## Methods", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| \[?`(\w+)`\]?(?:\(([^)]*)\))? \|", readme, flags=re.M)
    assert [n for n, _ in rows] == ["entropy_control", "none", *names], "README.md's methods table"
    assert all(link == f"docs/methods/{CONTROL_REGISTRY[n].docs_page}" for n, link in rows if n in names)
    help_text = GRPOEntropyConfig.__dataclass_fields__["entropy_control"].metadata["help"]
    assert all(f"'{n}'" in help_text for n in names), "entropy_control's help names every built-in control"


def test_the_docs_methods_table_is_the_registrys():
    text = _read("docs", "methods", "index.md")
    assert TABLE_START in text and TABLE_END in text
    table = text.split(TABLE_START, 1)[1].split("\n", 1)[1].split(TABLE_END, 1)[0].strip()
    assert table == methods_table(), "docs/methods/index.md's table differs from trl_entropy.controls.methods_table()"
    for name in _builtin():
        page = CONTROL_REGISTRY[name].docs_page
        assert page and os.path.exists(os.path.join(ROOT, "docs", "methods", page)), (name, page)
        assert f"methods/{page}" in _read("mkdocs.yml"), f"{page} is not in mkdocs.yml's nav"


def test_each_builtin_control_has_its_settings_group_and_the_config_composes_them():
    config_fields = GRPOEntropyConfig.__dataclass_fields__
    for name in _builtin():
        cls = CONTROL_REGISTRY[name]
        if cls.settings_class is not None:
            assert cls.settings_class in BUILTIN_SETTINGS and issubclass(GRPOEntropyConfig, cls.settings_class)
            for f in dataclasses.fields(cls.settings_class):
                assert f.name in config_fields and f.metadata.get("help"), (name, f.name)
                assert config_fields[f.name].default == f.default
    folder = os.path.join(ROOT, "trl_entropy", "controls")
    modules = sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py") and not f.startswith("_"))
    assert modules == sorted(_builtin()), "one module per built-in control, named as the control"
    assert all(CONTROL_REGISTRY[m].__module__ == f"trl_entropy.controls.{m}" for m in modules)
    grouped = {f.name for group in BUILTIN_SETTINGS for f in dataclasses.fields(group)}
    assert {"entropy_bonus_kp", "adaptive_clip_delta", "cov_scope", "clip_cov_ratio", "entropic_kp"} <= grouped


def test_a_controls_settings_are_checked_only_when_it_is_chosen(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = tiny_args(tmp_path, clip_cov_ratio=5.0)
    assert args.clip_cov_ratio == 5.0
    assert any("clip_cov_ratio" in str(w.message) and "no effect" in str(w.message) for w in caught)
    with pytest.raises(ValueError, match=r"clip_cov_ratio must be a number in \[0.0, 1.0\]"):
        tiny_args(tmp_path, entropy_control="clip_cov", clip_cov_ratio=5.0)
    with pytest.raises(ValueError, match="entropy_bonus_kp"):  # the bonus's fields count with its assist too
        tiny_args(tmp_path, entropy_control="adaptive_clip", entropy_schedule_start=1.0, steps_per_generation=2,
                  entropy_bonus_assist=True, entropy_bonus_kp=-1.0)


MODULE = '''
from dataclasses import dataclass, field

from trl_entropy import EntropyControl, register_control


@dataclass
class TmpSettings:
    tmp_registry_gain: float = field(default=0.5, metadata={"help": "the temporary control's gain; >= 0"})

    def validate(self, args):
        if self.tmp_registry_gain < 0:
            raise ValueError(f"tmp_registry_gain must be >= 0, got {self.tmp_registry_gain}")


@register_control("tmp_registry_control")
class TmpControl(EntropyControl):
    """A temporary control (tests/test_controls_registry.py)."""

    knob_name = "tmp_gain"
    settings_class = TmpSettings
    demo_description = "a temporary control"

    @property
    def knob(self):
        return self.settings.tmp_registry_gain
'''


@pytest.fixture
def tmp_module(tmp_path, monkeypatch, registry_restored):
    (tmp_path / "tmp_registry_mod.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "tmp_registry_mod"
    sys.modules.pop("tmp_registry_mod", None)


def test_a_control_in_a_module_of_its_own_is_in_the_demo_the_cli_help_and_the_table(tmp_module, capsys):
    from trl_entropy import grpo_script
    from trl_entropy.demo import runner

    with pytest.raises(SystemExit) as exit_:
        grpo_script.parse_grpo_args(["--entropy_control_module", tmp_module, "--help"])
    assert exit_.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "tmp_registry_control" in help_text  # a choice of --entropy_control
    assert "--tmp_registry_gain" in help_text and "the temporary control's gain" in help_text
    assert "tmp_registry_control" in runner.METHODS
    assert runner.METHODS["tmp_registry_control"] == (True, {"entropy_control": "tmp_registry_control"},
                                                      "a temporary control")
    assert "| `tmp_registry_control` |" in methods_table()


def test_a_control_in_a_module_of_its_own_is_a_choice_of_the_demo(tmp_module, capsys, monkeypatch):
    """`trl-entropy demo --entropy_control_module M`: the control M registers is a choice of --methods (and in its
    help), is run by --methods all, and reaches the runner; without the module it is not a choice."""
    from trl_entropy.demo import runner

    with pytest.raises(SystemExit) as exit_:
        cli.main(["demo", "--entropy_control_module", tmp_module, "--help"])
    assert exit_.value.code == 0
    assert "tmp_registry_control" in " ".join(capsys.readouterr().out.split())
    seen = {}
    monkeypatch.setattr(cli, "_quiet_third_party", lambda **kw: None)
    monkeypatch.setattr(runner, "run_demo", lambda methods, settings: seen.update(methods=methods))
    assert cli.main(["demo", "--entropy_control_module", tmp_module, "--methods", "grpo", "tmp_registry_control",
                     "--no_progress"]) == 0
    assert seen["methods"] == ["grpo", "tmp_registry_control"]
    assert cli.main(["demo", f"--entropy-control-module={tmp_module}", "--methods", "all", "--no_progress"]) == 0
    assert seen["methods"] == [*cli.DEMO_METHODS, "tmp_registry_control"]
    with pytest.raises(SystemExit) as exit_:  # the module not named: not a choice (argparse's error, status 2)
        cli.main(["demo", "--methods", "tmp_registry_control"])
    assert exit_.value.code == 2
    with pytest.raises(SystemExit) as exit_:
        cli.main(["demo", "--entropy_control_module", "no_such_module_here", "--methods", "grpo"])
    assert exit_.value.code == 2 and "there is no module 'no_such_module_here'" in capsys.readouterr().err


def test_a_user_controls_settings_from_python_and_from_the_command_line(tmp_module, tmp_path):
    import importlib

    from trl_entropy import grpo_script
    from trl_entropy.controls import build_control

    importlib.import_module(tmp_module)
    kwargs = dict(entropy_control="tmp_registry_control")
    assert build_control(tiny_args(tmp_path, **kwargs)).knob == 0.5
    args = tiny_args(tmp_path, **kwargs, entropy_control_settings={"tmp_registry_gain": 2.0})
    assert build_control(args).knob == 2.0
    with pytest.raises(ValueError, match="tmp_registry_gain must be >= 0"):
        tiny_args(tmp_path, **kwargs, entropy_control_settings={"tmp_registry_gain": -1.0})
    with pytest.raises(ValueError, match="does not declare"):
        tiny_args(tmp_path, **kwargs, entropy_control_settings={"tmp_registry_gian": 1.0})
    with pytest.raises(ValueError, match="declares no settings of its own"):
        tiny_args(tmp_path, entropy_control="w_reinforce", entropy_control_settings={"w_reinforce_lambda": 0.2})

    argv = ["--testbed", "tiny", "--use_cpu", "true", "--output_dir", str(tmp_path / "out"), "--report_to", "none",
            "--entropy_control_module", tmp_module, "--entropy_control", "tmp_registry_control"]
    _, training_args, _, _ = grpo_script.parse_grpo_args(argv + ["--tmp_registry_gain", "3.0"])
    assert build_control(training_args).knob == 3.0
    _, training_args, _, _ = grpo_script.parse_grpo_args(argv + ["--tmp_registry_gain=1.5"])
    assert build_control(training_args).knob == 1.5
    with pytest.raises(grpo_script.UsageError, match="tmp_registry_gain must be >= 0"):
        grpo_script.parse_grpo_args(argv + ["--tmp_registry_gain", "-2"])
