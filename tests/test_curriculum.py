"""Annealing-phase curriculum (Wang et al. section 5) through TRL's real training loop on a tiny model."""

import pytest
import torch
from conftest import tiny_args, tiny_dataset, tiny_kwargs, tiny_model, tiny_tokenizer
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler

from trl_entropy import AnnealingCurriculumCallback, GRPOEntropyTrainer
from trl_entropy.scheduling.curriculum import PHASE_METRIC, CurriculumSampler


def second_dataset(n=32):
    # three operands: never equal to a phase-1 prompt ("a+b=")
    return Dataset.from_dict({"prompt": [f"{i}+{i % 7}+1=" for i in range(n)]})


class Recorder:
    """A reward function that records, per call (one call per generation batch), the prompts and completions."""

    __name__ = "recorder"

    def __init__(self):
        self.calls = []

    def __call__(self, prompts, completions, completion_ids, **kwargs):
        self.calls.append({"prompts": list(prompts), "lengths": [len(c) for c in completion_ids]})
        return [float(c.count("1")) + 0.1 * len(c) for c in completions]


class CapturingTrainer(GRPOTrainer):
    """Plain TRL trainer that keeps each generation batch's rewards-in and advantages-out."""

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        self.captured = getattr(self, "captured", [])
        self.captured.append((self.num_generations, output["advantages"].clone()))
        return output


def groups(prompts, size):
    assert len(prompts) % size == 0
    chunks = [prompts[i : i + size] for i in range(0, len(prompts), size)]
    assert all(len(set(c)) == 1 for c in chunks), f"prompts not in groups of {size}: {prompts}"
    return [c[0] for c in chunks]


def make_trainer(args, recorder, cls=GRPOTrainer, data=None, model_seed=0):
    return cls(
        model=tiny_model(model_seed),
        reward_funcs=recorder,
        args=args,
        train_dataset=data if data is not None else tiny_dataset(),
        processing_class=tiny_tokenizer(),
    )


# ---------------------------------------------------------------------------------------------- sampler (pure)
def test_sampler_without_switch_is_trls_repeat_sampler():
    ours = CurriculumSampler((20, 8), (4, 8), generation_batch_size=8, repeat_count=3, switch_round=None,
                             length=8 * 3 * 12, seed=7)
    trl = RepeatSampler(list(range(20)), mini_repeat_count=4, batch_size=2, repeat_count=3, seed=7)
    trl_stream = list(trl) + list(trl)  # TRL's sampler continues its generator into the next epoch
    assert list(ours) == trl_stream[: len(ours)]


def test_sampler_phases_groups_and_passes():
    n0, n1, gbs, rep = 10, 6, 8, 2
    sampler = CurriculumSampler((n0, n1), (2, 4), gbs, repeat_count=rep, switch_round=3, length=gbs * rep * 9, seed=1)
    stream = list(sampler)
    assert len(stream) == len(sampler) == gbs * rep * 9
    rounds = [stream[i : i + gbs * rep] for i in range(0, len(stream), gbs * rep)]
    seen = {0: [], 1: []}
    for k, r in enumerate(rounds):
        first = r[:gbs]
        assert all(r[j * gbs : (j + 1) * gbs] == first for j in range(rep)), "a round repeats one chunk"
        phase, g = (0, 2) if k < 3 else (1, 4)
        unique = groups(first, g)
        assert len(set(unique)) == gbs // g
        if phase == 0:
            assert all(0 <= i < n0 for i in unique)
        else:
            assert all(n0 <= i < n0 + n1 for i in unique)
        seen[phase] += unique
    # phase 0: 3 rounds x 4 prompts = 12 > 10 rows -> pass 1 gives 2 full chunks (8 prompts, tail of 2 dropped)
    assert len(set(seen[0][:8])) == 8 and len(set(seen[0][8:])) == 4
    # phase 1: chunks of 2 of 6 rows -> every pass of 3 chunks covers all 6 rows once
    for p in range(0, len(seen[1]), 6):
        assert sorted(seen[1][p : p + 6]) == list(range(n0, n0 + n1))


# ---------------------------------------------------------------------------------------------- validation
def test_invalid_values_raise_naming_the_field(tmp_path):
    trainer = make_trainer(GRPOConfig(**tiny_kwargs(tmp_path)), Recorder())
    with pytest.raises(ValueError, match="num_generations=3 does not divide generation_batch_size=8"):
        AnnealingCurriculumCallback(train_dataset=second_dataset(), num_generations=3, at_step=2).attach(trainer)
    with pytest.raises(ValueError, match="num_generations must be an integer >= 2"):
        AnnealingCurriculumCallback(num_generations=1, at_step=2)
    with pytest.raises(ValueError, match="max_completion_length must be an integer >= 1"):
        AnnealingCurriculumCallback(max_completion_length=0, at_step=2)
    with pytest.raises(ValueError, match="at_step must be an integer >= 0"):
        AnnealingCurriculumCallback(at_step=-1)
    with pytest.raises(ValueError, match="train_dataset has 1 rows"):
        AnnealingCurriculumCallback(train_dataset=second_dataset(1), num_generations=4, at_step=2).attach(trainer)
    with pytest.raises(ValueError, match="at_step is None"):  # plain GRPOTrainer: no schedule to follow
        AnnealingCurriculumCallback(train_dataset=second_dataset(), num_generations=4).attach(trainer)
    assert trainer.train_dataset.__class__.__name__ == "Dataset"  # failed attaches changed nothing


def test_not_attached_raises_at_train_begin(tmp_path):
    trainer = make_trainer(GRPOConfig(**tiny_kwargs(tmp_path, max_steps=1)), Recorder())
    trainer.add_callback(AnnealingCurriculumCallback(second_dataset(), num_generations=4, at_step=1))
    with pytest.raises(RuntimeError, match="attach"):
        trainer.train()


# ---------------------------------------------------------------------------------------------- real training
def test_switch_at_step_on_plain_grpo_trainer(tmp_path):
    rec = Recorder()
    # a user budget in generation_kwargs (3 < max_completion_length) is kept in phase 1
    args = GRPOConfig(**tiny_kwargs(tmp_path, max_steps=6, num_generations=2, max_completion_length=4,
                                    generation_kwargs={"max_new_tokens": 3}))
    trainer = make_trainer(args, rec, cls=CapturingTrainer)
    first = [row["prompt"] for row in trainer.train_dataset]
    second = second_dataset()
    cb = AnnealingCurriculumCallback(train_dataset=second, num_generations=4, max_completion_length=10, at_step=3)
    cb.attach(trainer)
    trainer.train()

    assert cb.switch_step == 3 and len(rec.calls) == 6  # one generation batch per step (GA = spg = 1)
    phase1 = [groups(c["prompts"], 2) for c in rec.calls[:3]]
    phase2 = [groups(c["prompts"], 4) for c in rec.calls[3:]]
    assert all(len(u) == 4 for u in phase1) and all(len(u) == 2 for u in phase2)
    flat1, flat2 = sum(phase1, []), sum(phase2, [])
    assert set(flat1) <= set(first) and len(set(flat1)) == len(flat1) == 12  # right data, no duplicates
    assert set(flat2) <= set(second["prompt"]) and len(set(flat2)) == len(flat2) == 6
    # completion budget: <= 3 tokens before, up to 10 after (and the tiny random model does use it)
    assert max(max(c["lengths"]) for c in rec.calls[:3]) == 3
    lengths2 = [n for c in rec.calls[3:] for n in c["lengths"]]
    assert max(lengths2) <= 10 and max(lengths2) > 4
    assert trainer.generation_config.max_new_tokens == 10 and trainer.max_completion_length == 10
    assert trainer.num_generations == 4
    # advantages were normalized within groups of the phase's size
    for g, adv in trainer.captured:
        assert adv.numel() == 8
        grouped = adv.view(-1, g)
        assert torch.allclose(grouped.sum(dim=1), torch.zeros(grouped.shape[0]), atol=1e-4)
    assert [g for g, _ in trainer.captured] == [2, 2, 2, 4, 4, 4]
    # ...and not within pairs: phase-2 advantages do not sum to zero over halves of a group
    assert any(adv.view(-1, 2).sum(dim=1).abs().max() > 1e-2 for _, adv in trainer.captured[3:])
    phases = [h[PHASE_METRIC] for h in trainer.state.log_history if PHASE_METRIC in h]
    assert phases == [0, 0, 0, 1, 1, 1]


def test_phase_one_prompts_match_plain_trl(tmp_path):
    """Before the switch, the curriculum does not change TRL's data order."""
    rec_plain, rec_cur = Recorder(), Recorder()
    kw = dict(max_steps=3, num_generations=2)
    make_trainer(GRPOConfig(**tiny_kwargs(tmp_path / "a", **kw)), rec_plain).train()
    trainer = make_trainer(GRPOConfig(**tiny_kwargs(tmp_path / "b", **kw)), rec_cur)
    AnnealingCurriculumCallback(second_dataset(), num_generations=4, at_step=2).attach(trainer)
    trainer.train()
    assert [c["prompts"] for c in rec_cur.calls[:2]] == [c["prompts"] for c in rec_plain.calls[:2]]
    assert rec_cur.calls[2]["prompts"] != rec_plain.calls[2]["prompts"]


def test_switch_is_rounded_up_to_a_generation_round(tmp_path):
    rec = Recorder()
    # steps_per_generation=2: a generation round spans two optimizer steps (rounds start at steps 0, 2, 4)
    args = GRPOConfig(**tiny_kwargs(tmp_path, max_steps=6, num_generations=2, steps_per_generation=2))
    trainer = make_trainer(args, rec)
    cb = AnnealingCurriculumCallback(second_dataset(), num_generations=4, at_step=3).attach(trainer)
    with pytest.warns(UserWarning, match="it happens at step 4"):
        trainer.train()
    assert cb.switch_step == 4 and len(rec.calls) == 3  # generation at steps 0, 2, 4
    assert len(groups(rec.calls[1]["prompts"], 2)) == 8
    assert set(rec.calls[1]["prompts"]) <= set(tiny_dataset()["prompt"])
    assert len(groups(rec.calls[2]["prompts"], 4)) == 4
    assert set(rec.calls[2]["prompts"]) <= set(second_dataset()["prompt"])


class PhaseLog(TrainerCallback):
    def __init__(self, trainer, out):
        self.trainer, self.out = trainer, out

    def on_step_end(self, args, state, control, **kwargs):
        self.out.append(self.trainer.entropy_phase)


def wsd_args(path, **kw):
    base = dict(
        max_steps=6, num_generations=2, entropy_control="adaptive_clip", entropy_schedule="wsd",
        entropy_schedule_start=1.0, entropy_schedule_end=0.5, entropy_schedule_anneal_ratio=0.5, epsilon_high=0.28,
        save_strategy="steps", save_steps=4,
    )
    base.update(kw)
    return tiny_args(path, **base)


def test_schedule_driven_switch_and_resume_in_phase_two(tmp_path):
    # wsd over 6 steps with anneal_ratio 0.5: annealing (and phase 2) starts at step 3; checkpoint-4 is in phase 2
    rec = Recorder()
    straight = make_trainer(wsd_args(tmp_path), rec, cls=GRPOEntropyTrainer)
    cb = AnnealingCurriculumCallback(second_dataset(), num_generations=4, max_completion_length=8).attach(straight)
    phases = []
    straight.add_callback(PhaseLog(straight, phases))
    straight.train()
    assert cb.switch_step == 3
    assert phases == ["stable"] * 3 + ["anneal"] * 3  # the switch follows the trainer's own schedule phase
    assert [len(c["prompts"]) // len(set(c["prompts"])) for c in rec.calls] == [2, 2, 2, 4, 4, 4]

    rec2 = Recorder()
    resumed = make_trainer(wsd_args(tmp_path), rec2, cls=GRPOEntropyTrainer, model_seed=1)
    cb2 = AnnealingCurriculumCallback(second_dataset(), num_generations=4, max_completion_length=8).attach(resumed)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    assert cb2.phase == 1 and resumed.num_generations == 4 and resumed.generation_config.max_new_tokens == 8
    # the resumed run generated for steps 5 and 6 only, with the same phase-2 prompts as the straight run
    assert [c["prompts"] for c in rec2.calls] == [c["prompts"] for c in rec.calls[4:]]
    logged = [h[PHASE_METRIC] for h in resumed.state.log_history if PHASE_METRIC in h]
    assert logged == [0, 0, 0, 1, 1, 1]
