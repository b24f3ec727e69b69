"""Every control: exact resume, LoRA (PEFT), and faults (non-finite advantages, a reward function that raises)."""

import json
import math
from pathlib import Path

import pytest
import torch
from conftest import (
    CONTROL_CONFIGS,
    count_ones_reward,
    tiny_args,
    tiny_dataset,
    tiny_model,
    tiny_model_or_path,
    tiny_tokenizer,
)

from trl_entropy import GRPOEntropyTrainer
from trl_entropy.trainers.grpo_entropy_trainer import CONTROL_STATE_FILE

OFF_POLICY = dict(per_device_train_batch_size=8, steps_per_generation=2, learning_rate=1e-2)


def make(args, model_seed=0, reward=count_ones_reward, **kwargs):
    if not args.beta or kwargs.get("peft_config") is not None:
        return GRPOEntropyTrainer(model=tiny_model(model_seed), reward_funcs=reward, args=args,
                                  train_dataset=tiny_dataset(), processing_class=tiny_tokenizer(), **kwargs)
    # A KL reference without PEFT: TRL loads it from the model's folder, that of the seed-0 model in every run (a
    # resumed run is given the model it started from); the policy then starts from `model_seed`.
    folder = tiny_model_or_path({"beta": args.beta}, Path(args.output_dir).parent / "tiny-model-0")
    trainer = GRPOEntropyTrainer(model=folder, reward_funcs=reward, args=args, train_dataset=tiny_dataset(),
                                 processing_class=tiny_tokenizer(), **kwargs)
    if model_seed != 0:
        trainer.model.load_state_dict(tiny_model(model_seed).state_dict())
    return trainer


def control_metrics(trainer):
    """Per logged step, every entropy_control/* value (NaN made comparable)."""
    rows = []
    for h in trainer.state.log_history:
        row = {k: ("nan" if isinstance(v, float) and math.isnan(v) else v)
               for k, v in h.items() if k.startswith("entropy_control/")}
        if row:
            rows.append((h.get("step"), row))
    return rows


@pytest.mark.parametrize("name", sorted(CONTROL_CONFIGS))
def test_resume_continues_every_control_exactly(tmp_path, name):
    """8 steps straight vs 4 steps, checkpoint, resume (from a differently initialised model), 4 more."""
    kw = dict(OFF_POLICY, max_steps=8, save_strategy="steps", save_steps=4, **CONTROL_CONFIGS[name])
    straight = make(tiny_args(tmp_path / "a", **kw))
    straight.train()
    ckpt = tmp_path / "a" / "checkpoint-4"
    with open(ckpt / CONTROL_STATE_FILE) as f:
        saved = json.load(f)  # a readable file in the checkpoint
    assert saved["entropy_control"] == CONTROL_CONFIGS[name]["entropy_control"] and saved["global_step"] == 4

    resumed = make(tiny_args(tmp_path / "a", **kw), model_seed=1)
    resumed.train(resume_from_checkpoint=str(ckpt))
    a, b = control_metrics(straight), control_metrics(resumed)
    assert len(a) == len(b) and len(a) >= 8
    for (step_a, row_a), (step_b, row_b) in zip(a, b):
        assert step_a == step_b and row_a.keys() == row_b.keys(), (name, step_a)
        for key in row_a:
            if row_a[key] == "nan":
                assert row_b[key] == "nan", (name, step_a, key)
            else:
                assert row_b[key] == pytest.approx(row_a[key], rel=1e-5, abs=1e-7), (name, step_a, key)
    assert resumed.entropy_control.state_dict() == straight.entropy_control.state_dict()
    assert resumed.entropy_target == straight.entropy_target  # schedule position
    assert resumed.epsilon_high == straight.epsilon_high


@pytest.mark.parametrize("name", sorted(CONTROL_CONFIGS))
def test_every_control_trains_a_lora_adapter(tmp_path, name):
    from peft import LoraConfig

    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                             task_type="CAUSAL_LM")
    trainer = make(tiny_args(tmp_path, max_steps=4, **OFF_POLICY, **CONTROL_CONFIGS[name]), peft_config=peft_config)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    assert before, "no LoRA parameters were created"
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
    assert any("entropy_control/measured" in h for h in trainer.state.log_history)
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[n], after[n]) for n in before), "the adapter did not train"
    frozen = [p for n, p in trainer.model.named_parameters() if "lora_" not in n]
    assert all(not p.requires_grad for p in frozen)


def inf_reward(completions, **kwargs):
    """A broken reward: +inf for the first completion of every batch (its group's mean and std, hence advantages,
    become non-finite)."""
    return [math.inf if i == 0 else float(c.count("1")) for i, c in enumerate(completions)]


@pytest.mark.parametrize("name", ["none", "adaptive_clip", "entrocraft"])
def test_non_finite_rewards_are_reported_and_never_reach_the_loss(tmp_path, name):
    overrides = CONTROL_CONFIGS.get(name, {})
    trainer = make(tiny_args(tmp_path, max_steps=4, **OFF_POLICY, **overrides), reward=inf_reward)
    state_before = trainer.entropy_control.state_dict() if trainer.entropy_control else None
    with pytest.warns(RuntimeWarning, match=r"'inf_reward' returned inf for 1 completion\(s\) \(first at index 0\)"):
        trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and all(math.isfinite(x) for x in losses)
    counts = [h["entropy_control/nonfinite_rewards"] for h in trainer.state.log_history
              if "entropy_control/nonfinite_rewards" in h]
    assert counts and counts[-1] == 2  # one per generation batch (4 steps, 2 per generation)
    # the rest of each group still learns: the bad completion is dropped from the baseline, not the whole group
    assert any(h.get("grad_norm", 0) > 0 for h in trainer.state.log_history)
    assert all(math.isfinite(p.detach().sum().item()) for p in trainer.model.parameters())
    measured = [h["entropy_control/measured"] for h in trainer.state.log_history if "entropy_control/measured" in h]
    assert all(math.isfinite(m) for m in measured)
    if state_before is not None:
        assert json.dumps(trainer.entropy_control.state_dict())  # still a finite, serialisable state


def test_non_finite_advantages_are_zeroed_with_a_warning(tmp_path):
    trainer = make(tiny_args(tmp_path, max_steps=1))
    trainer.model.train()
    out = {"advantages": torch.tensor([1.0, float("nan"), float("inf"), -1.0])}
    with pytest.warns(RuntimeWarning, match="2 rollout"):
        out = trainer._check_finite_advantages(out)
    assert out["advantages"].tolist() == [1.0, 0.0, 0.0, -1.0]
    assert trainer._metrics["train"]["entropy_control/nonfinite_advantages"] == [2.0]


def test_a_reward_function_that_raises_is_reported_with_the_completion_index(tmp_path):
    def picky_reward(prompts, completions, **kwargs):
        out = []
        for p in prompts:
            if p.startswith("3+"):
                raise KeyError("no answer for " + p)
            out.append(0.0)
        return out

    trainer = make(tiny_args(tmp_path, max_steps=2, reward_error_search=True), reward=picky_reward)
    with pytest.raises(RuntimeError, match=r"Reward function 'picky_reward' raised KeyError on completion \d+ of the "
                                           r"batch of 8 \(prompt '3\+"):
        trainer.train()


def test_a_reward_function_that_raises_is_not_rerun_by_default(tmp_path):
    """Without reward_error_search the function is called once per batch (no per-completion re-runs, which cost as
    much as the batch for sandboxed or paid rewards); the error names the function, the exception and the batch."""
    calls = []

    def costly_reward(prompts, completions, **kwargs):
        calls.append(len(completions))
        raise ValueError("sandbox timed out")

    trainer = make(tiny_args(tmp_path, max_steps=2), reward=costly_reward)
    with pytest.raises(RuntimeError, match=r"Reward function 'costly_reward' raised ValueError on a batch of 8 "
                                           r"completion\(s\): sandbox timed out\. .*reward_error_search=True") as info:
        trainer.train()
    assert calls == [8]
    assert isinstance(info.value.__cause__, ValueError)


class AsyncCountOnes:
    """An async reward given as a callable class instance (its `__call__` is async)."""

    def __init__(self):
        self.calls = 0

    async def __call__(self, prompts, completions, **kwargs):
        self.calls += 1
        return [float(c.count("1")) for c in completions]


def test_an_async_callable_class_instance_is_awaited_not_wrapped(tmp_path):
    reward = AsyncCountOnes()
    trainer = make(tiny_args(tmp_path, max_steps=2), reward=reward)
    assert trainer.reward_funcs[0] is reward  # TRL awaits it; a synchronous wrapper would get a coroutine
    trainer.train()
    assert reward.calls == 2
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    assert len(rewards) == 2 and all(math.isfinite(r) for r in rewards)


def test_reward_wrapper_is_transparent(tmp_path):
    """With a well-behaved reward, the wrapper returns exactly what the function returns (and keeps its name)."""
    trainer = make(tiny_args(tmp_path, max_steps=1))
    wrapped = trainer.reward_funcs[0]
    assert wrapped.__name__ == "count_ones_reward" and trainer.reward_func_names == ["count_ones_reward"]
    assert wrapped(prompts=["a", "b"], completions=["11", "0"]) == [2.0, 0.0]
