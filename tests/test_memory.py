"""trl_entropy/memory.py: the per-GPU memory estimate against hand numbers, and every shipped recipe within the hardware
its header names (the test that fails when one does not fit)."""

import glob
import os
import re

import pytest
import yaml

from trl_entropy import memory
from trl_entropy.memory import MODEL_SHAPES, estimate, estimate_recipe, training_state_gb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = sorted(glob.glob(os.path.join(ROOT, "recipes", "*.yaml")))


def load_recipe(path):
    with open(path) as f:
        text = f.read()
    launch = memory.recipe_launch_config(text)
    config = None
    if launch is not None:
        with open(os.path.join(ROOT, launch)) as f:
            config = yaml.safe_load(f)
    return yaml.safe_load(text), launch, config, memory.parse_hardware(text)


@pytest.mark.parametrize(("engine", "dtype", "moments", "expected"), [
    # a whole copy per GPU, float32 (TRL's default dtype): 28 GB weights, 28 gradients, 56 Adam moments
    ("single", "float32", None, (28, 28, 56)),
    # loaded in bfloat16, with float32 moments: 14 + 14 + 56 = 84 GB, the count for one copy
    ("single", "bfloat16", "float32", (14, 14, 56)),
    # DDP in bfloat16 with torch's AdamW (moments in bfloat16), plus DDP's bucket copy of the gradients: 70 GB
    ("ddp", "bfloat16", None, (14, 28, 28)),
    # ZeRO on 8 GPUs: 12 bytes of float32 optimizer state per parameter sharded, a float32 gradient partition
    ("zero1", "bfloat16", None, (14, 14 + 3.5, 10.5)),
    ("zero2", "bfloat16", None, (14, 5.25, 10.5)),
    ("zero3", "bfloat16", None, (1.75, 5.25, 10.5)),
    # FSDP under accelerate: float32 parameters, gradients and moments, all sharded: 16 bytes / 8
    ("fsdp", "bfloat16", None, (3.5, 3.5, 7)),
])
def test_training_state_of_a_7b_model_by_hand(engine, dtype, moments, expected):
    got = training_state_gb(7e9, engine, 8, dtype, moments)
    assert got == pytest.approx(expected)


def test_a_7b_model_does_not_fit_an_80gb_gpu_under_ddp_but_does_under_zero3():
    shape = MODEL_SHAPES["Qwen/Qwen2.5-7B"]
    kw = dict(gpus=8, capacity_gb=80, per_device_batch=8, sequence_tokens=5120, vllm_share=0.3, vllm_max_model_len=5120)
    ddp = estimate(shape, engine="ddp", **kw)
    assert ddp.training > 76 and not ddp.fits and "needs" in ddp.problems()[0]
    assert estimate(shape, engine="ddp", dtype="float32", **kw).training > 150
    zero3 = estimate(shape, engine="zero3", **kw)
    assert zero3.fits and zero3.problems() == [] and zero3.total < 80


def test_activation_allowance_by_hand():
    shape = memory.ModelShape(1e9, hidden_size=1000, num_layers=10, intermediate_size=2000, num_kv_heads=2,
                              head_dim=100, max_positions=4096)
    # checkpointed: 1000 tokens x 1000 hidden x 10 layers x 2 bytes = 0.02 GB, one layer 1000 x (10k + 12k) x 2 = 0.044
    assert memory.activation_gb(shape, 1000) == pytest.approx(0.02 + 0.044 + memory.ALLOWANCES["lm_head_and_loss"])
    assert memory.activation_gb(shape, 1000, gradient_checkpointing=False) == pytest.approx(
        0.44 + memory.ALLOWANCES["lm_head_and_loss"])


def test_vllm_share_must_hold_one_full_length_sequence():
    shape = MODEL_SHAPES["Qwen/Qwen2.5-7B"]
    # keys and values, 28 layers x 4 KV heads x 128 x 2 bytes: 57,344 bytes per token
    assert memory.kv_cache_gb(shape, 1) * memory.GB == pytest.approx(57344)
    # Qwen2.5-7B's own context (131,072 tokens) does not fit the KV left in 0.3 x 80 GB after 15.2 GB of weights
    unset = estimate(shape, engine="zero3", gpus=8, capacity_gb=80, vllm_share=0.3)
    assert unset.kv_tokens_needed == 131072 and unset.kv_tokens < 131072 and not unset.fits
    assert "vllm_max_model_length" in unset.problems()[-1]
    assert estimate(shape, engine="zero3", gpus=8, capacity_gb=80, vllm_share=0.3, vllm_max_model_len=9216).fits


def test_bad_inputs_name_the_fix():
    shape = MODEL_SHAPES["smollm2"]
    with pytest.raises(ValueError, match="engine 'zero4'"):
        estimate(shape, engine="zero4", gpus=1, capacity_gb=8)
    with pytest.raises(ValueError, match="dtype 'fp8'"):
        estimate(shape, engine="single", gpus=1, capacity_gb=8, dtype="fp8")
    with pytest.raises(ValueError, match="MODEL_SHAPES"):
        estimate_recipe({"model_name_or_path": "org/unknown"}, None, memory.Hardware(1, 80))
    with pytest.raises(ValueError, match="vllm_gpu_memory_utilization"):
        estimate(shape, engine="single", gpus=1, capacity_gb=8, vllm_share=1.5)


def test_the_header_parsers():
    assert memory.parse_hardware("# x\n# hardware: 8 GPUs, 80 GB each (ZeRO-3)\nkey: 1") == memory.Hardware(8, 80)
    assert memory.parse_hardware("# hardware: CPU, 16 GB memory") == memory.Hardware(0, 16)
    assert memory.parse_hardware("# no hardware") is None
    assert memory.recipe_launch_config("#   accelerate launch --config_file recipes/accelerate/fsdp.yaml -m x") == (
        "recipes/accelerate/fsdp.yaml")
    assert memory.engine_from_accelerate_config({"distributed_type": "DEEPSPEED", "num_processes": 8,
                                                 "deepspeed_config": {"zero_stage": 2}}) == ("zero2", 8)


@pytest.mark.parametrize("path", RECIPES, ids=os.path.basename)
def test_every_recipe_fits_the_hardware_it_names(path):
    recipe, launch, config, hardware = load_recipe(path)
    assert hardware is not None, "the header needs a line '# hardware: 8 GPUs, 80 GB each' or '# hardware: CPU, ...'"
    if launch is not None:
        assert os.path.exists(os.path.join(ROOT, launch)), launch
    on_gpu = not recipe.get("use_cpu", False)
    assert (hardware.gpus > 0) == on_gpu
    if on_gpu:
        assert launch is not None, "a GPU recipe names its accelerate launch config in its header"
        assert recipe.get("dtype") == "bfloat16" and recipe.get("bf16"), "load the weights in bfloat16 for bf16"
        if recipe.get("use_vllm") and recipe.get("vllm_mode", "colocate") == "colocate":
            assert "vllm_gpu_memory_utilization" in recipe, "set vLLM's share: the estimate counts it"
    est = estimate_recipe(recipe, config, hardware)
    assert est.fits, f"{os.path.basename(path)} does not fit {hardware}: " + "; ".join(est.problems())


def test_the_old_ddp_float32_launch_of_the_7b_recipes_would_not_fit():
    """What the recipes shipped before (recipes/accelerate/ddp.yaml, no dtype): the estimate catches it."""
    recipe, _, _, hardware = load_recipe(os.path.join(ROOT, "recipes", "entropy_bonus_qwen2.5-7b_dapo17k_wsd.yaml"))
    with open(os.path.join(ROOT, "recipes", "accelerate", "ddp.yaml")) as f:
        ddp = yaml.safe_load(f)
    old = {k: v for k, v in recipe.items() if k not in ("dtype", "vllm_max_model_length")}
    assert not estimate_recipe(old, ddp, hardware).fits
    assert not estimate_recipe(recipe, ddp, hardware).fits  # bfloat16 alone is not enough under DDP


def test_the_testbeds_prompt_bounds_hold():
    from trl_entropy.demo import testbed as tiny
    from trl_entropy.testbeds import addition

    longest = {
        "testbed": max(len(r["prompt"]) for r in tiny.make_problems(512)),  # one token per character
        # byte-level BPE: at most one token per byte
        "smollm2_addition": max(len(r["prompt"].encode()) for r in addition.make_problems("train")),
        "smollm2_addition_hard": max(len(r["prompt"].encode()) for r in addition.make_problems(
            "train", addition.HARD_PREFIX, addition.HARD_A_RANGE, addition.HARD_B_RANGE)),
    }
    for name, n in longest.items():
        assert n <= memory.PROMPT_TOKENS_BY_DATASET[name], name


def test_the_docs_recipe_table_shows_each_recipes_estimate():
    """docs/cli.md, "Recipes": each recipe's row ends with its estimate per device, as the function gives it."""
    with open(os.path.join(ROOT, "docs", "cli.md")) as f:
        docs = f.read()
    section = docs.split("## Recipes", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([\w.\-]+\.yaml)` \|.*\| ([^|]+) \|$", section, re.M)}
    assert set(rows) == {os.path.basename(p) for p in RECIPES}
    for path in RECIPES:
        recipe, _, config, hardware = load_recipe(path)
        est = estimate_recipe(recipe, config, hardware)
        assert rows[os.path.basename(path)].startswith(f"{est.total:.1f} of {hardware.gb_each:g} GB"), path
