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
    completions in groups with no correct answer (scored independently here), TRL's own bonus stays 0 in its loss,
    and the controller measures the gated tokens."""
    from trl_entropy import GRPOEntropyConfig
    from trl_entropy.testbeds import get_testbed

    tb = get_testbed("tiny")
    model, tokenizer = tb.load(False)
    train_ds, _ = tb.datasets(0)
    seen = []

    def reward(completions, answer, **kwargs):
        out = tb.reward(completions, answer, **kwargs)
        seen.append(out)
        return out

    kwargs = tb.grpo_config_kwargs(output_dir=str(tmp_path), max_steps=4, seed=0, steps_per_generation=2,
                                   disable_tqdm=True, report_to=[])
    kwargs.update(entropy_control="entropy_bonus", entropy_schedule="constant", entropy_schedule_start="initial")
    args = GRPOEntropyConfig(**kwargs)
    trainer = UnsolvedBonusTrainer(model=model, reward_funcs=reward, args=args, train_dataset=train_ds,
                                   processing_class=tokenizer)
    coefs_in_loss = []
    from trl import GRPOTrainer

    trl_loss = GRPOTrainer._compute_loss

    def spy(self, model, inputs):
        coefs_in_loss.append(self.entropy_coef)
        return trl_loss(self, model, inputs)

    trainer._trl_compute_loss = spy.__get__(trainer)
    import benchmarks.unsolved_bonus as ub

    terms = []

    def term_spy(entropies, gate, mask, coef, accumulation=1):
        term = gated_entropy_term(entropies, gate, mask, coef, accumulation)
        terms.append((entropies.requires_grad, float(gate.sum()), float(mask.sum()), coef))
        return term

    monkeypatch.setattr(ub, "gated_entropy_term", term_spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    group = kwargs["num_generations"]
    expected = []
    for batch in seen:
        groups = [batch[i : i + group] for i in range(0, len(batch), group)]
        expected.append(sum(len(g) for g in groups if max(g) < 1.0) / len(batch))
    assert trainer.unsolved_fraction == pytest.approx(expected)
    assert coefs_in_loss and set(coefs_in_loss) == {0.0}
    assert len(terms) == len(coefs_in_loss)  # one gated term per loss forward, with the entropies' gradient
    assert all(grad and gate <= mask for grad, gate, mask, _ in terms)
    assert any(coef != 0.0 for *_, coef in terms)
    assert trainer.entropy_coef != 0.0  # the controller moved its coefficient, kept outside TRL's loss
    measured = [h["entropy_control/measured"] for h in trainer.state.log_history if "entropy_control/measured" in h]
    assert measured and all(m == m for m in measured)


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
