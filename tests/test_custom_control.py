"""A control written outside the package works without editing it: examples/custom_control.py (the code of
docs/write-your-own-control.md, checked equal below) registers one, and the config, the trainer, the logs and the
model card take it as they take a built-in control."""

import os
import re
import runpy
import sys
import warnings

import pytest
from conftest import count_ones_reward, tiny_dataset, tiny_kwargs, tiny_model, tiny_tokenizer

from trl_entropy import EntropyControl, GRPOEntropyConfig, register_control
from trl_entropy.controls import CONTROL_REGISTRY

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "custom_control.py")
DOC = os.path.join(ROOT, "docs", "write-your-own-control.md")
DOC_MARKER = "<!-- tests/test_custom_control.py checks that this block is examples/custom_control.py -->"


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def example():
    before = dict(CONTROL_REGISTRY)
    yield runpy.run_path(EXAMPLE)  # not as __main__: registers "negative_feedback" and defines train()
    CONTROL_REGISTRY.clear()  # later test modules see the built-in controls only
    CONTROL_REGISTRY.update(before)


def test_the_docs_page_shows_the_example_as_it_is():
    text = _read(DOC)
    assert DOC_MARKER in text, "the docs page's example block lost its marker"
    blocks = re.findall(r"^```python\n(.*?)^```", text.split(DOC_MARKER, 1)[1], flags=re.S | re.M)
    assert blocks, "no python block after the marker"
    assert blocks[0] == _read(EXAMPLE), "docs/write-your-own-control.md and examples/custom_control.py differ"


def test_the_example_control_trains_logs_and_is_on_the_card(example, tmp_path):
    cls = CONTROL_REGISTRY["negative_feedback"]
    assert cls is example["NegativeFeedbackControl"] and cls.name == "negative_feedback"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        trainer = example["train"](tiny_model(), tiny_tokenizer(), tiny_dataset(), count_ones_reward,
                                   **tiny_kwargs(tmp_path, max_steps=4))
    args = trainer.args
    assert args.entropy_control == "negative_feedback" and args.entropy_schedule == "linear"  # config accepted
    assert trainer.entropy_control.name == "negative_feedback" and trainer.state.global_step == 4
    rows = [h for h in trainer.state.log_history if "entropy_control/measured" in h]
    assert len(rows) == 4
    knobs = [h["entropy_control/negative_weight"] for h in rows if "entropy_control/negative_weight" in h]
    targets = [h["entropy_control/target"] for h in rows if "entropy_control/target" in h]
    assert len(knobs) == 4 and targets, (knobs, targets)
    assert knobs[0] == 1.0 and any(k != 1.0 for k in knobs)  # starts at 1, then follows the error
    assert any("entropy_control/relative_tracking_error" in h for h in rows)  # follows_target: tracked
    trainer.save_model()
    card = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "negative_feedback" in card and cls.card_text in card
    assert "negative_weight" in card  # the knob's range over the run
    assert "zhu2025negative" in card  # its citation
    assert "negative_feedback_kp" in card and "negative_feedback_w_max" in card  # its own settings, as it ran


def test_a_user_control_is_accepted_with_its_target_decision(example, tmp_path):
    base = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", per_device_train_batch_size=8,
                num_generations=4)
    with pytest.raises(ValueError, match="entropy_schedule_start must be set"):
        GRPOEntropyConfig(**base, entropy_control="negative_feedback")  # follows_target: a target is required
    with pytest.raises(ValueError, match="divides by the target"):
        GRPOEntropyConfig(**base, entropy_control="negative_feedback", entropy_schedule_start=0.0)  # its validate
    c = GRPOEntropyConfig(**base, entropy_control="negative_feedback", entropy_schedule_start=0.5)
    assert c.entropy_schedule == "constant"


def test_registering_a_taken_name_needs_replace():
    with pytest.raises(ValueError, match="already registered.*replace=True"):
        @register_control("adaptive_clip")
        class Mine(EntropyControl):
            pass

    assert CONTROL_REGISTRY["adaptive_clip"].__name__ == "AdaptiveClipControl"

    @register_control("_test_replaceable")
    class First(EntropyControl):
        pass

    try:
        @register_control("_test_replaceable", replace=True)
        class Second(EntropyControl):
            """A replacement."""

        assert CONTROL_REGISTRY["_test_replaceable"] is Second
    finally:
        del CONTROL_REGISTRY["_test_replaceable"]


@pytest.mark.parametrize("attrs, match", [
    (dict(citations=("nobody2099",)), "nobody2099"),
    (dict(config_prefixes="my_"), "config_prefixes must be a tuple"),
    (dict(follows_target="yes"), "follows_target must be True or False"),
])
def test_a_bad_declaration_is_refused_at_registration(attrs, match):
    cls = type("Bad", (EntropyControl,), attrs)
    with pytest.raises((TypeError, ValueError), match=match):
        register_control("_test_bad")(cls)
    assert "_test_bad" not in CONTROL_REGISTRY


def test_own_bibtex_and_docstring_reach_the_card_info():
    from trl_entropy.model_card import METHOD_INFO, method_info

    @register_control("_test_own_bibtex")
    class Own(EntropyControl):
        """Does something useful.

        More detail that stays off the card."""

        citations = ("me2026",)
        bibtex = {"me2026": "@misc{me2026, title = {Mine}}"}

    try:
        assert method_info("_test_own_bibtex") == ("Does something useful.", (), ("me2026",))
        assert "_test_own_bibtex" in METHOD_INFO
    finally:
        del CONTROL_REGISTRY["_test_own_bibtex"]


def test_the_command_line_imports_the_module_that_registers_the_control(example, monkeypatch):
    from trl_entropy import grpo_script

    monkeypatch.chdir(os.path.dirname(EXAMPLE))  # the example is the module `custom_control` there
    monkeypatch.setattr(sys, "path", list(sys.path))  # the current folder is added to it: restore it afterwards
    monkeypatch.delitem(sys.modules, "custom_control", raising=False)
    argv = ["--testbed", "tiny", "--use_cpu", "true", "--bf16", "false", "--entropy_control_module", "custom_control",
            "--entropy_control", "negative_feedback", "--entropy_schedule_start", "0.8"]
    script_args, training_args, _, _ = grpo_script.parse_grpo_args(argv)
    assert script_args.entropy_control_module == ["custom_control"]
    assert training_args.entropy_control == "negative_feedback" and training_args.entropy_schedule == "constant"
    with pytest.raises(grpo_script.UsageError, match="no module 'no_such_controls'"):
        grpo_script.parse_grpo_args(argv[:7] + ["no_such_controls"] + argv[8:])
