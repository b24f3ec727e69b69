"""Every recipe parses into (ScriptArguments, GRPOEntropyConfig, ModelArguments, DatasetMixtureConfig); the offline
one trains through the CLI."""

import glob
import math
import os

import pytest
import yaml

from trl_entropy.cli import main, parse_grpo_args
from trl_entropy.rewards import boxed_accuracy, get_reward_function, last_boxed

ROOT = os.path.dirname(os.path.dirname(__file__))
RECIPES = sorted(glob.glob(os.path.join(ROOT, "recipes", "*.yaml")))


def test_a_recipe_per_paper_setup_is_shipped():
    names = {os.path.basename(p) for p in RECIPES}
    assert {"testbed.yaml", "entropy_scheduling_qwen2.5-7b_dapo17k_wsd.yaml", "clip_cov_qwen2.5-7b.yaml",
            "kl_cov_qwen2.5-7b.yaml", "entrocraft_qwen3-4b-base_linear.yaml", "positive_reweight.yaml",
            "entropy_bonus_smollm2_wsd.yaml", "entropy_bonus_qwen2.5-7b_dapo17k_wsd.yaml"} <= names


@pytest.mark.parametrize("path", RECIPES, ids=os.path.basename)
def test_recipe_parses(path):
    # GPU recipes ask for bf16, which TrainingArguments refuses on a CPU-only machine: override only that here.
    script_args, args, model_args, _ = parse_grpo_args(["--config", path, "--bf16", "false"])
    assert model_args.model_name_or_path and script_args.reward_funcs
    with open(path) as f:
        trains_in_bf16 = bool(yaml.safe_load(f).get("bf16"))
    # bf16 training loads the weights in bfloat16 (TRL's ModelConfig.dtype defaults to float32); the memory estimate
    # and the hardware each recipe names: tests/test_memory.py
    assert model_args.dtype == ("bfloat16" if trains_in_bf16 else "float32"), model_args.dtype
    for name in script_args.reward_funcs:
        assert callable(get_reward_function(name))
    assert args.entropy_control != "none"
    if args.entropy_control in ("adaptive_clip", "clip_cov", "kl_cov"):
        assert args.is_off_policy, "clip-based controls only act off-policy"


def test_command_line_overrides_the_recipe():
    _, args, _, _ = parse_grpo_args(["--config", os.path.join(ROOT, "recipes", "testbed.yaml"), "--max_steps", "7",
                                     "--entropy_schedule", "cosine"])
    assert args.max_steps == 7 and args.entropy_schedule == "cosine"


def test_unknown_field_in_the_command_line_is_an_error():
    with pytest.raises(ValueError, match="entropy_controll"):
        parse_grpo_args(["--config", os.path.join(ROOT, "recipes", "testbed.yaml"), "--entropy_controll", "x"])


def test_testbed_recipe_trains_through_the_cli(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_ENTROPY_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    # a smaller testbed model keeps the in-process pretraining short
    import trl_entropy.demo.testbed as tb

    small = tb.TestbedRecipe(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32,
                             sft_steps=30)
    monkeypatch.setattr(tb, "TestbedRecipe", lambda *a, **k: small)
    rc = main(["grpo", "--config", os.path.join(ROOT, "recipes", "testbed.yaml"), "--max_steps", "3",
               "--output_dir", str(out), "--per_device_train_batch_size", "16", "--report_to", "none"])
    assert rc == 0
    assert (out / "model.safetensors").exists() and (out / "entropy_curves.png").exists()


def test_the_headroom_recipe_trains_the_headroom_model_through_the_cli(tmp_path, monkeypatch):
    """recipes/entropy_bonus_tiny_headroom_wsd.yaml (the payoff study's recommended recipe) names the warmed-up model
    with the taught error, and `--testbed tiny_headroom` fills in the same."""
    import dataclasses

    monkeypatch.setenv("TRL_ENTROPY_CACHE", str(tmp_path / "cache"))
    import trl_entropy.demo.testbed as tb

    small = tb.TestbedRecipe(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32,
                             sft_steps=30)
    monkeypatch.setattr(tb, "TestbedRecipe", lambda *a, **k: small)
    out = tmp_path / "run"
    rc = main(["grpo", "--config", os.path.join(ROOT, "recipes", "entropy_bonus_tiny_headroom_wsd.yaml"),
               "--max_steps", "3", "--output_dir", str(out), "--per_device_train_batch_size", "16"])
    assert rc == 0 and (out / "model.safetensors").exists()
    assert os.listdir(tmp_path / "cache") == [dataclasses.replace(small, carry_drop=0.9).cache_key()]
    script_args, _, model_args, _ = parse_grpo_args(["--testbed", "tiny_headroom", "--use_cpu", "true",
                                                     "--output_dir", str(tmp_path / "o")])
    assert model_args.model_name_or_path == "testbed_headroom" and script_args.dataset_name == "testbed"


def test_boxed_accuracy():
    assert last_boxed(r"so \boxed{\frac{1}{2}} and finally \boxed{42}") == "42"
    assert last_boxed(r"\boxed{\frac{a}{b}}") == r"\frac{a}{b}"
    assert last_boxed("no box") is None
    got = boxed_accuracy([r"... \boxed{ 42 }", r"\boxed{41}", "none", [{"role": "assistant", "content": r"\boxed{7}"}]],
                         solution=["42", r"answer \boxed{42}", "3", "7"])
    assert got == [1.0, 0.0, 0.0, 1.0]
    assert boxed_accuracy([r"\boxed{\dfrac{1}{2}}"], answer=[r"\frac{1}{2}"]) == [1.0]
    assert boxed_accuracy(["so the total is\nAnswer: 12"], solution=["12"]) == [1.0]  # DAPO-Math-17k's format
    assert boxed_accuracy(["x"], solution=[None]) == [None]
    with pytest.raises(ValueError, match="solution"):
        boxed_accuracy(["x"])
    with pytest.raises(ValueError, match="unknown"):
        get_reward_function("nope")
    assert math.isfinite(get_reward_function("testbed")(["46"], answer=["46"])[0])


def test_the_tracking_first_recipe_differs_from_the_recommended_one_only_in_its_law():
    """The penalty bound -0.5, the level's integral at ki 0.03 and the compensation within twice each bound: " NLI" as
    measured (docs/choosing.md, the tracking-first setting)."""
    import yaml

    def load(name):
        return yaml.safe_load(open(os.path.join(ROOT, "recipes", name)))

    base, tight = load("entropy_bonus_smollm2_wsd.yaml"), load("entropy_bonus_smollm2_wsd_tight.yaml")
    law = {"entropy_bonus_min": -0.5, "entropy_bonus_ki": 0.03, "entropy_bonus_compensation_clip": "bounds"}
    assert {k: tight.pop(k) for k in law} == law and not set(law) & set(base)
    assert {k for k in base if base[k] != tight.get(k)} == {"output_dir"} and set(tight) == set(base)
