import os

import torch

from trl_entropy.demo import testbed as tb

SMALL = tb.TestbedRecipe(sft_steps=3, sft_batch_size=8, hidden_size=16, intermediate_size=32, num_heads=2,
                         num_kv_heads=1, num_layers=1)


def test_tokenizer_roundtrip_and_padding():
    tok = tb.build_tokenizer()
    ids = tok("12+39=", add_special_tokens=False).input_ids
    assert len(ids) == 6 and tok.decode(ids) == "12+39="
    assert tok.pad_token == "<pad>" and tok.eos_token == "<eos>" and tok.padding_side == "left"
    batch = tok(["1+2=", "12+34="], padding=True, return_tensors="pt", add_special_tokens=False)
    assert batch.input_ids[0, 0].item() == tok.pad_token_id  # left padding


def test_problems_deterministic_disjoint_and_correct():
    a = tb.make_problems(200, seed=3)
    assert a == tb.make_problems(200, seed=3)
    test = tb.make_problems(200, seed=3, split="test")
    assert not {p["prompt"] for p in a} & {p["prompt"] for p in test}
    for p in a[:50]:
        x, y = p["prompt"][:-1].split("+")
        assert p["answer"] == str(int(x) + int(y))[::-1]


def test_accuracy_reward_cases():
    got = tb.accuracy_reward(["15", " 15 ", "15+", "", "51"], ["15"] * 5)
    assert got == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_cache_roundtrip_and_determinism(tmp_path, monkeypatch):
    m1, _ = tb.load_or_pretrain(SMALL, cache_dir=str(tmp_path / "a"), progress=False)
    assert os.path.exists(tmp_path / "a" / SMALL.cache_key() / "recipe.json")
    monkeypatch.setattr(tb, "pretrain", lambda *a, **k: (_ for _ in ()).throw(AssertionError("retrained")))
    m2, _ = tb.load_or_pretrain(SMALL, cache_dir=str(tmp_path / "a"), progress=False)  # from cache, no training
    for (n, p1), p2 in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(p1, p2), n
    monkeypatch.undo()
    m3, _ = tb.load_or_pretrain(SMALL, cache_dir=str(tmp_path / "b"), progress=False)  # fresh: same weights
    for p1, p3 in zip(m1.parameters(), m3.parameters()):
        assert torch.equal(p1, p3)


def test_cache_key_changes_with_recipe():
    assert SMALL.cache_key() != tb.TestbedRecipe().cache_key()


def test_evaluation_helpers_are_finite_and_deterministic(tmp_path):
    model, tok = tb.load_or_pretrain(SMALL, cache_dir=str(tmp_path), progress=False)
    probs = tb.make_problems(8, seed=0, recipe=SMALL, split="test")
    acc = tb.evaluate_accuracy(model, tok, probs, n_samples=2, seed=1)
    assert 0.0 <= acc <= 1.0 and acc == tb.evaluate_accuracy(model, tok, probs, n_samples=2, seed=1)
    h = tb.completion_entropy(model, tok, probs, n_samples=2)
    assert 0.0 < h < 3.0
