"""Study 5's research variant (benchmarks/unsolved_bonus.py): the gate, the gated term, and a real run's wiring."""

import os
import sys
import warnings

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.unsolved_bonus import UnsolvedBonusTrainer, gated_entropy_term, unsolved_rollouts  # noqa: E402


def test_unsolved_rollouts_marks_whole_groups_without_a_correct_answer():
    rewards = torch.tensor([0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, float("nan"), 0.0])
    got = unsolved_rollouts(rewards[:8], group=2)
    assert got.tolist() == [True, True, False, False, True, True, False, False]
    assert unsolved_rollouts(torch.tensor([float("nan"), 0.5]), group=2).tolist() == [True, True]
    with pytest.raises(ValueError, match="groups of 4"):
        unsolved_rollouts(rewards, group=4)


def test_gated_term_is_trls_bonus_on_the_gate_normalised_by_all_loss_tokens():
    torch.manual_seed(0)
    h = torch.rand(3, 5, requires_grad=True)
    mask = torch.ones(3, 5)
    mask[2, 3:] = 0
    gate = mask.clone()
    gate[1] = 0
    term = gated_entropy_term(h, gate, mask, coef=0.2, accumulation=2)
    expected = -0.2 * (h.detach() * gate).sum() / mask.sum() / 2
    assert torch.allclose(term, expected)
    term.backward()
    assert torch.all(h.grad[1] == 0) and torch.all(h.grad[2, 3:] == 0)
    assert torch.allclose(h.grad[0], torch.full((5,), -0.2 / mask.sum().item() / 2))
    # the gate equal to the mask: exactly TRL's `- coef * masked mean entropy / accumulation`
    full = gated_entropy_term(h.detach(), mask, mask, coef=0.2, accumulation=2)
    assert torch.allclose(full, -0.2 * (h.detach() * mask).sum() / mask.sum() / 2)


def test_variant_gates_the_unsolved_groups_of_a_real_run(tmp_path, monkeypatch):
    """On the tiny testbed's model through TRL's loop: the gated share of each generation batch is the share of its
    completions in groups with no correct answer (scored independently here), and after TRL's shuffle the gate sits
    on rows whose advantage is 0; TRL's own bonus stays 0 in its loss; the loss is TRL's plus the gated term, with
    the coefficient logged for that step; the controller measures the gated tokens; "initial" is theirs."""
    import benchmarks.unsolved_bonus as ub
    from trl import GRPOTrainer

    from trl_entropy import GRPOEntropyConfig
    from trl_entropy.testbeds import get_testbed

    tb = get_testbed("tiny")
    model, tokenizer = tb.load(False)
    train_ds, _ = tb.datasets(0)
    seen = []
    kwargs = tb.grpo_config_kwargs(output_dir=str(tmp_path), max_steps=4, seed=0, steps_per_generation=2,
                                   disable_tqdm=True, report_to=[], logging_steps=1)
    group = kwargs["num_generations"]

    def reward(completions, answer, **kwargs):
        # Unsolved and solved groups by construction, whatever the model samples: the groups at even positions of
        # each generation batch score 0 throughout; those at odd positions score the testbed's reward with their
        # first completion counted correct.
        out = tb.reward(completions, answer, **kwargs)
        out = [0.0 if (i // group) % 2 == 0 else (1.0 if i % group == 0 else r) for i, r in enumerate(out)]
        seen.append(out)
        return out

    kwargs.update(entropy_control="entropy_bonus", entropy_schedule="constant", entropy_schedule_start="initial")
    args = GRPOEntropyConfig(**kwargs)
    trainer = UnsolvedBonusTrainer(model=model, reward_funcs=reward, args=args, train_dataset=train_ds,
                                   processing_class=tokenizer)
    calls = []  # per micro-batch: {trl, term, coef, gate, advantages, measured_mask, loss}

    def trl_spy(self, model, inputs):
        out = GRPOTrainer._compute_loss(self, model, inputs)
        calls.append({"coef_in_trl": self.entropy_coef, "trl": out.detach()})
        return out

    def term_spy(entropies, gate, mask, coef, accumulation=1):
        term = gated_entropy_term(entropies, gate, mask, coef, accumulation)
        calls[-1].update(term=term.detach(), coef=coef, grad=entropies.requires_grad, gate=gate.detach().clone())
        return term

    def accumulate_spy(entropies, mask, generation=None, pull=None, solved=None):
        calls[-1]["measured_mask"] = mask.detach().clone()
        return type(trainer)._accumulate_entropy(trainer, entropies, mask, generation, pull, solved)

    def loss_spy(model, inputs):
        out = type(trainer)._compute_loss(trainer, model, inputs)
        calls[-1].update(loss=out.detach(), advantages=inputs["advantages"].detach().clone())
        return out

    initial_masks = []

    def rollout_spy(output, mask, source):
        rows = output["tool_mask"].amax(dim=1) if "tool_mask" in output else torch.ones(len(mask))
        initial_masks.append((mask.detach().clone(), output["completion_mask"].clone(), rows.clone()))
        return type(trainer)._rollout_entropy(trainer, output, mask, source)

    trainer._rollout_entropy = rollout_spy
    trainer._trl_compute_loss = trl_spy.__get__(trainer)
    trainer._accumulate_entropy = accumulate_spy
    trainer._compute_loss = loss_spy
    monkeypatch.setattr(ub, "gated_entropy_term", term_spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()

    expected = []
    for batch in seen:
        groups = [batch[i : i + group] for i in range(0, len(batch), group)]
        expected.append(sum(len(g) for g in groups if max(g) < 1.0) / len(batch))
    # the precondition the reward constructs: two generation batches, each half unsolved (gated and ungated rows)
    assert len(seen) == 2 and all(len(b) % (2 * group) == 0 for b in seen) and expected == [0.5, 0.5]
    assert trainer.unsolved_fraction == pytest.approx(expected)
    logged = [h["entropy_control/entropy_coef"] for h in trainer.state.log_history
              if "entropy_control/entropy_coef" in h]
    assert len(calls) == 4 and len(logged) == 4  # one micro-batch per optimizer step
    for call, knob in zip(calls, logged):
        assert call["coef_in_trl"] == 0.0  # TRL's own bonus off
        assert call["grad"]
        assert torch.allclose(call["loss"], call["trl"] + call["term"])  # the term is added, once
        assert call["coef"] == pytest.approx(knob)  # the coefficient in force during this step
        assert torch.equal(call["measured_mask"], call["gate"])  # the controller measures the gated tokens
        rows = call["gate"].sum(dim=1) > 0
        assert torch.all(call["advantages"].reshape(-1)[rows] == 0)  # unsolved groups: every reward 0
    assert any(c["coef"] != 0.0 for c in calls)
    assert trainer.entropy_coef != 0.0  # the controller's coefficient, kept outside TRL's loss

    # "initial" is the unsolved groups' starting entropy, not all completions'
    initial = [h["entropy_control/initial_entropy"] for h in trainer.state.log_history
               if "entropy_control/initial_entropy" in h]
    assert initial and initial[0] == pytest.approx(trainer.initial_entropy)
    assert len(initial_masks) == 1  # resolved once, after the gate, over the gated rows only
    mask, completion_mask, rows = initial_masks[0]
    assert torch.equal(mask, completion_mask * rows.unsqueeze(1))
    assert rows.float().mean().item() == pytest.approx(expected[0]) and 0 < expected[0] < 1

    # a step with no unsolved completion repeats the last reading
    held = [h["entropy_control/held_reading"] for h in trainer.state.log_history if "entropy_control/held_reading" in h]
    assert sum(held) == trainer.held_readings
    for call, was_held in zip(calls, held):
        assert bool(was_held) == (call["gate"].sum() == 0)
    last, before = trainer._ub_last_reading, trainer.held_readings
    trainer._ec_window = None
    measured, count, _ = trainer._reduce_window()
    assert count == 0 and measured == last and trainer.held_readings == before + 1


def test_variant_requires_the_entropy_bonus(tmp_path):
    from trl_entropy import GRPOEntropyConfig
    from trl_entropy.testbeds import get_testbed

    tb = get_testbed("tiny")
    model, tokenizer = tb.load(False)
    train_ds, _ = tb.datasets(0)
    args = GRPOEntropyConfig(**tb.grpo_config_kwargs(output_dir=str(tmp_path), max_steps=1, report_to=[]))
    with pytest.raises(ValueError, match="entropy_bonus"):
        UnsolvedBonusTrainer(model=model, reward_funcs=tb.reward, args=args, train_dataset=train_ds,
                             processing_class=tokenizer)


def test_generation_batch_reading_is_the_unsolved_groups_over_the_whole_batch(tmp_path):
    """Study 7: with entropy_measurement="generation_batch" the batch's entropy at generation is the gated tokens'
    mean over the whole generation batch, and each step's estimate (what the controller acts on) is that mean times
    the step's gated H_now / H_gen; a step without a gated token repeats the last estimate."""
    from trl_entropy import GRPOEntropyConfig
    from trl_entropy.testbeds import get_testbed

    tb = get_testbed("tiny_headroom")  # its carry problems leave groups unsolved
    model, tokenizer = tb.load(False)
    train_ds, _ = tb.datasets(0)
    kwargs = tb.grpo_config_kwargs(output_dir=str(tmp_path), max_steps=4, seed=0, steps_per_generation=2,
                                   disable_tqdm=True, report_to=[], logging_steps=1)
    kwargs.update(entropy_control="entropy_bonus", entropy_schedule="constant", entropy_schedule_start="initial",
                  entropy_bonus_min=0.0, entropy_measurement="generation_batch")
    trainer = UnsolvedBonusTrainer(model=model, reward_funcs=tb.reward, args=GRPOEntropyConfig(**kwargs),
                                   train_dataset=train_ds, processing_class=tokenizer)
    batches, steps, acted = [], [], []

    def gate_spy(output, mask):
        type(trainer)._gate_generation_entropy(trainer, output, mask)
        gen = output["ec_generation_entropies"]
        batches.append(((gen * mask).sum() / mask.sum()).item() if mask.sum() > 0 else None)
        assert trainer._ec_generation_entropy == (pytest.approx(batches[-1]) if batches[-1] is not None else None)

    def accumulate_spy(entropies, mask, generation=None, pull=None, solved=None):
        assert generation is not None and generation.shape == mask.shape  # every step is paired
        steps.append(((entropies.detach() * mask).sum().item(), (generation * mask).sum().item(), mask.sum().item(),
                      batches[-1]))
        return type(trainer)._accumulate_entropy(trainer, entropies, mask, generation, pull, solved)

    observe = trainer.entropy_control.observe

    def observe_spy(measured, target):
        acted.append(measured)
        return observe(measured, target)

    trainer._gate_generation_entropy = gate_spy
    trainer._accumulate_entropy = accumulate_spy
    trainer.entropy_control.observe = observe_spy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()

    assert len(batches) == 2 and batches[0] is not None
    assert len(steps) == 4 and len(acted) == 4
    held = [h["entropy_control/held_reading"] for h in trainer.state.log_history if "entropy_control/held_reading" in h]
    last = None
    for (now, gen, count, batch_mean), value, was_held in zip(steps, acted, held):
        if count == 0:
            assert was_held and value == last
            continue
        assert not was_held
        assert value == pytest.approx(batch_mean * now / gen, rel=1e-5)
        last = value
    assert last is not None
