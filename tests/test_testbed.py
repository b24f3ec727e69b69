"""The offline testbed: tokenizer, problems, reward, pretraining cache and determinism (small recipes, tmp caches)."""

import os
import subprocess
import sys

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
import torch

from trl_entropy.demo import testbed as tb

# Small enough that pretraining takes well under a second.
SMALL = tb.TestbedRecipe(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32,
                         sft_steps=4, sft_batch_size=8, sft_warmup_steps=2)


def _same_weights(m1, m2):
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert s1.keys() == s2.keys()
    return all(torch.equal(s1[k], s2[k]) for k in s1)


def test_tokenizer_round_trip_special_tokens_and_left_padding():
    tok = tb.build_tokenizer()
    ids = tok("12+34=")["input_ids"]  # what GRPOTrainer calls: no special tokens are added
    assert len(ids) == 6 and tok.decode(ids) == "12+34="
    assert tok.pad_token == "<pad>" and tok.eos_token == "<eos>" and tok.pad_token_id != tok.eos_token_id
    assert tok.padding_side == "left"
    batch = tok(["1+2=", "12+34="], padding=True, return_tensors="pt")
    assert batch["input_ids"][0, :2].tolist() == [tok.pad_token_id] * 2
    assert batch["attention_mask"][0].tolist() == [0, 0, 1, 1, 1, 1]
    assert tok.decode(ids + [tok.eos_token_id, tok.pad_token_id], skip_special_tokens=True) == "12+34="


def test_tokenizer_refuses_characters_outside_its_alphabet_instead_of_encoding_them_as_pad(tmp_path):
    """Issue 62: a prompt "reverse 47=" trained as `<pad><pad>... 47=` without a word."""
    tok = tb.build_tokenizer()
    for call in (lambda: tok("reverse 47="), lambda: tok(["1+1=", "reverse 47="], padding=True),
                 lambda: tok.encode("reverse 47=")):
        with pytest.raises(ValueError, match=r"has no token for ' ', 'e', 'r', 's', 'v' \(in 'reverse 47='\): its "
                                             r"alphabet is the characters '0123456789\+=' plus <pad> and <eos>"):
            call()
    assert tok("12+34=46<eos>")["input_ids"][-1] == tok.eos_token_id  # the markers are part of the alphabet
    # saved as a plain fast tokenizer: AutoTokenizer (a run folder's pipeline line) loads it without this package
    from transformers import AutoTokenizer

    tok.save_pretrained(tmp_path)
    plain = AutoTokenizer.from_pretrained(tmp_path)
    assert plain("12+3=")["input_ids"] == tok("12+3=")["input_ids"]
    assert isinstance(tb.TestbedTokenizer.from_pretrained(tmp_path), tb.TestbedTokenizer)


def test_make_problems_deterministic_correct_and_splits_disjoint():
    train = tb.make_problems(300, seed=3)
    assert train == tb.make_problems(300, seed=3)
    assert train[:100] == tb.make_problems(100, seed=3)  # prefix-stable
    assert train != tb.make_problems(300, seed=4)
    test = tb.make_problems(300, seed=3, split="test")
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in test}
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in tb.make_problems(300, seed=9, split="test")}
    for p in train + test:
        a, b = p["prompt"].rstrip("=").split("+")
        assert p["answer"] == str(int(a) + int(b)) and int(a) < 100 and int(b) < 100
    rev = tb.make_problems(20, seed=3, recipe=tb.TestbedRecipe(task="add_reversed"))
    assert [p["answer"] for p in rev] == [p["answer"][::-1] for p in train[:20]]
    with pytest.raises(ValueError):
        tb.make_problems(1, split="valid")


def test_make_datasets_columns():
    train, test = tb.make_datasets(n_train=32, n_test=8)
    assert train.column_names == ["prompt", "answer"] and len(train) == 32 and len(test) == 8


def test_accuracy_reward_cases():
    completions = ["46", " 46\n", "46+", "46<eos>", "466", "4", "", "  ", "64", "+46"]
    assert tb.accuracy_reward(completions, ["46"] * len(completions)) == [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    assert tb.accuracy_reward(["0"], answer=["0"], prompts=["0+0="]) == [1.0]  # extra TRL kwargs are accepted


def test_recipe_cache_key_is_the_same_in_another_process():
    """What a cache on disk relies on: another interpreter, with another string-hash seed, computes the same keys."""
    code = "from trl_entropy.demo import testbed as tb; print(tb.TestbedRecipe().cache_key(), tb.TestbedRecipe(" \
        "task='add_reversed', seed=1).cache_key())"
    hash_seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": hash_seed},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [tb.TestbedRecipe().cache_key(), tb.TestbedRecipe(task="add_reversed", seed=1).cache_key()]


def test_recipe_cache_key_stable_and_sensitive():
    assert tb.TestbedRecipe().cache_key() == tb.TestbedRecipe().cache_key()
    assert SMALL.cache_key() != tb.TestbedRecipe().cache_key()
    assert tb.TestbedRecipe(seed=1).cache_key() != tb.TestbedRecipe().cache_key()
    with pytest.raises(ValueError):
        tb.TestbedRecipe(task="mul")


def test_load_or_pretrain_writes_cache_and_reloads_without_training(tmp_path, monkeypatch):
    calls = []
    real = tb.pretrain
    monkeypatch.setattr(tb, "pretrain", lambda *a, **k: calls.append(1) or real(*a, **k))
    m1, tok1 = tb.load_or_pretrain(SMALL, cache_dir=str(tmp_path), progress=False)
    entry = tmp_path / SMALL.cache_key()
    assert calls == [1] and (entry / "config.json").exists() and (entry / "tokenizer.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == [SMALL.cache_key()]  # no leftover temporary folder

    m2, tok2 = tb.load_or_pretrain(SMALL, cache_dir=str(tmp_path), progress=False)
    assert calls == [1]  # served from the cache
    assert _same_weights(m1, m2)
    assert tok2.padding_side == "left" and tok2.get_vocab() == tok1.get_vocab()
    assert tok2.eos_token_id == m2.config.eos_token_id and tok2.pad_token_id == m2.config.pad_token_id

    monkeypatch.setenv("TRL_ENTROPY_CACHE", str(tmp_path))  # the default cache dir follows the variable
    tb.load_or_pretrain(SMALL, progress=False)
    assert calls == [1]


def test_pretraining_is_deterministic_and_leaves_global_rng_alone(tmp_path):
    torch.manual_seed(123)
    state = torch.get_rng_state()
    m1, _ = tb.load_or_pretrain(SMALL, cache_dir=str(tmp_path / "a"), progress=False)
    assert torch.equal(torch.get_rng_state(), state)
    m2, _ = tb.load_or_pretrain(SMALL, cache_dir=str(tmp_path / "b"), progress=False)
    assert _same_weights(m1, m2)
    m3, _ = tb.load_or_pretrain(tb.TestbedRecipe(**{**SMALL.__dict__, "seed": 1}), cache_dir=str(tmp_path / "c"),
                                progress=False)
    assert not _same_weights(m1, m3)


def test_sampling_helpers_deterministic_and_restore_mode(tmp_path):
    model, tok = tb.load_or_pretrain(SMALL, cache_dir=str(tmp_path), progress=False)
    problems = tb.make_problems(6, seed=0, recipe=SMALL, split="test")
    model.train()
    acc = tb.evaluate_accuracy(model, tok, problems, n_samples=2, seed=1)
    assert model.training and 0.0 <= acc <= 1.0
    assert acc == tb.evaluate_accuracy(model, tok, problems, n_samples=2, seed=1)
    texts, ents = tb.sample_completions(model, tok, problems, n_samples=2, seed=1)
    assert len(texts) == len(ents) == 12 and all(1 <= len(e) <= 4 for e in ents)
    h = tb.completion_entropy(model, tok, problems, n_samples=2, seed=1)
    assert 0.0 < h <= torch.log(torch.tensor(float(len(tok)))).item() + 1e-4  # at most uniform over the vocabulary


def test_greedy_decoding_at_temperature_zero_takes_the_argmax(tmp_path):
    model, tok = tb.load_or_pretrain(SMALL, cache_dir=str(tmp_path), progress=False)
    problems = tb.make_problems(6, seed=0, recipe=SMALL, split="test")
    a, _ = tb.sample_completions(model, tok, problems, n_samples=1, temperature=0.0, seed=1)
    b, _ = tb.sample_completions(model, tok, problems, n_samples=1, temperature=0.0, seed=2)
    assert a == b  # no sampling: the seed does not matter
    enc = tok([problems[0]["prompt"]], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        first = model(**enc).logits[0, -1].argmax().item()
    assert a[0].startswith(tok.decode([first], skip_special_tokens=True))
    acc = tb.evaluate_accuracy(model, tok, problems, n_samples=1, temperature=0.0)
    assert acc in {i / 6 for i in range(7)}
    with pytest.raises(ValueError, match="temperature"):
        tb.sample_completions(model, tok, problems, temperature=-1.0)


def test_grpo_config_kwargs_build_a_config(tmp_path):
    from trl import GRPOConfig

    kw = tb.grpo_config_kwargs()
    assert "output_dir" not in kw and "max_steps" not in kw
    args = GRPOConfig(output_dir=str(tmp_path), max_steps=1, **kw)
    assert args.generation_batch_size % args.num_generations == 0
    assert args.max_completion_length == tb.TestbedRecipe().digits + 2


def test_grpo_config_kwargs_take_overrides():
    """A user's own settings replace the testbed's (``save_strategy="no"`` would silently drop checkpoints) and add
    to them, for both testbeds, without changing the defaults."""
    from trl_entropy.testbeds import get_testbed

    for name in ("tiny", "smollm2"):
        kwargs = get_testbed(name).grpo_config_kwargs
        base = kwargs()
        kw = kwargs(save_strategy="steps", save_steps=5, report_to="tensorboard")
        assert (kw["save_strategy"], kw["save_steps"], kw["report_to"]) == ("steps", 5, "tensorboard")
        assert {k: v for k, v in kw.items() if k not in ("save_strategy", "save_steps", "report_to")} == {
            k: v for k, v in base.items() if k not in ("save_strategy", "report_to")}
        assert kwargs() == base


def test_grpo_trainer_runs_on_the_testbed(tmp_path):
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tok = tb.load_or_pretrain(SMALL, cache_dir=str(tmp_path / "cache"), progress=False)
    train_ds, _ = tb.make_datasets(SMALL, n_train=64, n_test=8)
    kw = {**tb.grpo_config_kwargs(SMALL), "per_device_train_batch_size": 16, "steps_per_generation": 2}
    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, **kw)
    trainer = GRPOTrainer(model=model, reward_funcs=tb.accuracy_reward, args=args, train_dataset=train_ds,
                          processing_class=tok)
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    rows = [h for h in trainer.state.log_history if "entropy" in h]
    assert len(rows) == 2 and all(h["entropy"] > 0 for h in rows)
    rewards = [h["reward"] for h in rows if "reward" in h]  # logged on generation steps only
    assert rewards and all(0.0 <= r <= 1.0 for r in rewards)


def test_carry_drop_teaches_the_sum_without_some_carries_and_keeps_old_cache_keys():
    import random

    for _ in range(2000):
        a, b = random.randrange(1000), random.randrange(1000)
        assert tb._sum_dropping_carries(a, b, [False, False]) == a + b
    assert tb._sum_dropping_carries(58, 67, [True]) == 115  # the units' carry lost: 5 + 6 = 11 tens
    assert tb._sum_dropping_carries(58, 67, [False]) == 125
    assert tb._sum_dropping_carries(99, 1, [True]) == 90
    # the carry out of the leading column is kept, so an answer has the exact sum's length
    g = torch.Generator().manual_seed(0)
    recipe = tb.TestbedRecipe(carry_drop=1.0)
    assert tb._pretraining_answer("58+67=", recipe, g) == "115"
    assert tb._pretraining_answer("95+17=", recipe, g) == "102"
    assert tb._pretraining_answer("12+34=", recipe, g) == "46"
    assert tb._pretraining_answer("58+67=", tb.TestbedRecipe(), g) == "125"
    # recipes without a taught error keep the cache keys they had before the field existed
    assert tb.TestbedRecipe().cache_key() == "add-d2-34a2c15e188e"
    assert tb.TestbedRecipe(task="add_reversed", seed=3).cache_key() == "add_reversed-d2-ff82cc372c9c"
    assert tb.TestbedRecipe(carry_drop=0.9).cache_key() != tb.TestbedRecipe().cache_key()
    with pytest.raises(ValueError, match="carry_drop"):
        tb.TestbedRecipe(carry_drop=1.5)


def test_the_headroom_testbed_warms_up_with_the_taught_error(tmp_path, monkeypatch):
    import dataclasses

    from trl_entropy.testbeds import HEADROOM_CARRY_DROP, get_testbed

    monkeypatch.setenv("TRL_ENTROPY_CACHE", str(tmp_path))
    headroom = get_testbed("tiny_headroom", SMALL)
    assert headroom.name == "tiny_headroom" and headroom.curve_every and headroom.demo_steps >= 1000
    headroom.load(False)
    # the demo passes a recipe without a taught error (its default); the testbed puts its own into it
    assert HEADROOM_CARRY_DROP == 0.9
    assert os.listdir(tmp_path) == [dataclasses.replace(SMALL, carry_drop=0.9).cache_key()]
    train, test = headroom.datasets(0)
    assert not set(train["prompt"]) & set(test["prompt"])  # held-out problems are never trained on
    assert headroom.reward(["125"], ["125"]) == [1.0]
