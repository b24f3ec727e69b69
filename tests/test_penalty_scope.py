"""entropy_bonus_penalty_scope="positive_advantage": a negative entropy coefficient acts only on the tokens of
rollouts with a positive advantage. The pure mask, the control's split between TRL's coefficient and the trainer's
scoped term, and the term itself against an independent entropy computation, through TRL's real training loop."""

from types import SimpleNamespace

import pytest
import torch
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_kwargs, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
from trl_entropy.controls import _set_coefficient, build_control
from trl_entropy.losses.policy_loss import penalty_token_mask

OFF_POLICY = dict(per_device_train_batch_size=8, steps_per_generation=2, learning_rate=1e-2)
SCOPED = dict(entropy_control="entropy_bonus", entropy_bonus_penalty_scope="positive_advantage")


def make(args):
    return GRPOEntropyTrainer(model=tiny_model(0), reward_funcs=count_ones_reward, args=args,
                              train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())


def logged(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


def test_penalty_token_mask_by_hand():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    advantages = torch.tensor([0.5, -0.5, 0.0, 1e-3])
    assert torch.equal(penalty_token_mask(advantages, mask, "all"), mask)
    expected = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert torch.equal(penalty_token_mask(advantages, mask, "positive_advantage"), expected)
    assert torch.equal(penalty_token_mask(advantages[:, None], mask, "positive_advantage"), expected)
    token_advantages = torch.tensor([[1.0, -1.0, 1.0]]).expand(4, 3)  # token-shaped advantages select tokens
    assert torch.equal(penalty_token_mask(token_advantages, mask, "positive_advantage"), mask * torch.tensor([1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="penalty scope must be one of"):
        penalty_token_mask(advantages, mask, "positive")


@pytest.mark.parametrize("value, scope, trl_coef, penalty", [
    (-0.2, "positive_advantage", 0.0, (-0.2, "positive_advantage")),  # a penalty: the trainer's scoped term
    (0.2, "positive_advantage", 0.2, None),  # a bonus acts on every token: TRL's term
    (0.0, "positive_advantage", 0.0, None),
    (-0.2, "all", -0.2, None),  # the default: TRL's term, whatever the sign
])
def test_the_coefficient_splits_between_trl_and_the_scoped_term(value, scope, trl_coef, penalty):
    trainer = SimpleNamespace(entropy_coef=None, _entropy_bonus_enabled=False, entropy_penalty="stale")
    _set_coefficient(trainer, value, scope)
    assert trainer.entropy_coef == trl_coef and trainer._entropy_bonus_enabled
    assert trainer.entropy_penalty == penalty


def test_the_assist_passes_the_scope_to_its_bonus(tmp_path):
    args = tiny_args(tmp_path, entropy_control="adaptive_clip", entropy_schedule_start=1.0, entropy_bonus_assist=True,
                     entropy_bonus_penalty_scope="positive_advantage")
    control = build_control(args)
    control.bonus.value = -0.3
    trainer = SimpleNamespace(entropy_coef=None, _entropy_bonus_enabled=False, entropy_penalty=None, epsilon_high=0.2,
                              epsilon_low=0.2, args=args)
    control.apply(trainer)
    assert trainer.entropy_coef == 0.0 and trainer.entropy_penalty == (-0.3, "positive_advantage")


def _independent_entropies(trainer, inputs):
    """Per-token entropy of the completion positions from the model's logits (log-softmax), not TRL's fused head."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    t = inputs["completion_ids"].size(1)
    logits = trainer.model(input_ids=ids, attention_mask=attention).logits[:, -t - 1:-1] / trainer.temperature
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def test_the_scoped_penalty_is_the_mean_entropy_of_positive_advantage_tokens(tmp_path):
    """The loss with the scoped penalty (c, 'positive_advantage') minus the loss without it is -c times the mean
    entropy over the loss tokens of positive-advantage rows (divided by gradient accumulation), value and gradient,
    with the entropy computed here from the logits."""
    trainer = make(tiny_args(tmp_path, max_steps=1, entropy_schedule_start=1.0, **SCOPED, **OFF_POLICY))
    seen = []
    original = trainer._compute_loss

    def spy(model, inputs):
        seen.append(inputs)
        return original(model, inputs)

    trainer._compute_loss = spy
    trainer.train()
    inputs = seen[0]
    positive = inputs["advantages"] > 0
    assert positive.any() and (~positive).any(), "the batch needs rows of both signs"
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 2
    trainer.entropy_coef = 0.0

    def loss_and_grad(penalty):
        trainer.entropy_penalty = penalty
        model.zero_grad()
        loss = original(model, inputs)
        loss.backward()
        return loss.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    base, g_base = loss_and_grad(None)
    scoped, g_scoped = loss_and_grad((-0.3, "positive_advantage"))
    assert trainer.entropy_coef == 0.0

    model.zero_grad()
    mask = inputs["completion_mask"] * positive[:, None]
    term = 0.3 * (_independent_entropies(trainer, inputs) * mask).sum() / mask.sum() / 2
    term.backward()
    g_term = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert float(scoped - base) == pytest.approx(float(term.detach()), rel=1e-3)
    difference = g_scoped - g_base
    assert torch.nn.functional.cosine_similarity(difference, g_term, dim=0) > 0.999
    assert float(difference.norm()) == pytest.approx(float(g_term.norm()), rel=0.02)


def test_a_scoped_penalty_trains_through_trl_with_trl_coefficient_zero(tmp_path):
    """A target far below the model's entropy: the control's coefficient turns negative; TRL's own coefficient stays
    0 (the penalty is the scoped term), the loss stays finite, and entropy falls below a run without the penalty."""
    runs = {}
    for name, scope in (("scoped", "positive_advantage"), ("off", None)):
        kw = dict(max_steps=8, entropy_schedule_start=0.3, entropy_bonus_kp=2.0, entropy_bonus_ki=0.5,
                  entropy_bonus_min=-1.0, entropy_bonus_max=0.0, **OFF_POLICY)
        if scope:
            kw.update(SCOPED)
        else:
            kw.update(entropy_control="entropy_bonus", entropy_bonus_min=0.0, entropy_bonus_kp=0.0,
                      entropy_bonus_ki=0.0, entropy_bonus_kff=0.0)
        runs[name] = make(tiny_args(tmp_path / name, **kw))
        runs[name].train()
    coefs = logged(runs["scoped"], "entropy_control/entropy_coef")
    assert all(c < 0 for c in coefs[1:])
    assert logged(runs["scoped"], "entropy_coef") == [0.0] * 8  # TRL's term is off; ours carries the penalty
    assert all(torch.isfinite(torch.tensor(v)) for v in logged(runs["scoped"], "loss"))
    measured = {n: logged(r, "entropy_control/measured")[-1] for n, r in runs.items()}
    assert measured["scoped"] < measured["off"]


def test_config_refuses_an_unknown_scope(tmp_path):
    with pytest.raises(ValueError, match="entropy_bonus_penalty_scope must be one of"):
        GRPOEntropyConfig(**tiny_kwargs(tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=1.0,
                                        entropy_bonus_penalty_scope="positive"))
