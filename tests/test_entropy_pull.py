"""The policy gradient's pull on entropy (`entropy_pull_sums`, `pull_coefficient`): by hand, against the entropy
dynamics of a tabular softmax policy under natural policy gradient (the reference the estimate is derived from), in
the bonus's law, and through TRL's training loop."""

import math

import pytest
import torch
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer

from trl_entropy import GRPOEntropyTrainer
from trl_entropy.scheduling import EntropyBonusController, entropy_pull_sums, policy_token_weights, pull_coefficient


def test_sums_by_hand():
    logps = torch.tensor([[-1.0, -2.0, -9.0]])
    entropies = torch.tensor([[1.5, 1.0, 9.0]])
    mask = torch.tensor([[1, 1, 0]])  # the third token never counts
    # centred log-probs 0.5 and -1.0; advantage 2 on the sequence
    assert entropy_pull_sums(logps, entropies, torch.tensor([2.0]), mask).tolist() == [-1.0, 1.25]
    # token advantages (B, T) and (B, 1) alike
    assert entropy_pull_sums(logps, entropies, torch.tensor([[2.0, 0.0, 5.0]]), mask).tolist() == [1.0, 1.25]
    assert entropy_pull_sums(logps, entropies, torch.tensor([[2.0]]), mask).tolist() == [-1.0, 1.25]
    assert pull_coefficient(-1.0, 1.25) == pytest.approx(-0.8)
    assert pull_coefficient(1.0, 0.0) is None and pull_coefficient(math.nan, 1.0) is None


def entropy(z):
    p = torch.softmax(z, -1)
    return float(-(p * torch.log_softmax(z, -1)).sum())


@pytest.mark.parametrize("seed", range(5))
def test_the_ratio_balances_a_natural_policy_gradient_step(seed):
    """One state, a softmax over 12 actions, the natural policy gradient's logit update ``z += eta * A`` (Cui et
    al.). The sums taken with each action weighted by its probability (the expectation of the sampled estimate)
    give the coefficient with which the bonus's advantage ``-c * (log pi + H)`` cancels the step's first-order
    entropy change: a step then moves entropy by O(eta^2), where without the bonus it moves it by O(eta)."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(12, generator=g, dtype=torch.float64) * 2
    adv = torch.randn(12, generator=g, dtype=torch.float64) + 0.8 * z  # rewarding the likely actions: H falls
    logp = torch.log_softmax(z, -1)
    h = entropy(z)
    weights = torch.softmax(z, -1)[None]
    cov, var = entropy_pull_sums(logp[None], torch.full_like(logp, h)[None], adv[None], weights).double().tolist()
    c = pull_coefficient(cov, var)
    eta = 1e-3
    plain = entropy(z + eta * adv) - h
    balanced = entropy(z + eta * (adv - c * (logp + h))) - h
    assert plain == pytest.approx(-eta * cov, rel=0.02)  # the covariance is the pull (first order)
    assert abs(balanced) < 0.02 * abs(plain)
    # the bonus's own term moves entropy by eta * c * var
    assert entropy(z - eta * c * (logp + h)) - h == pytest.approx(eta * c * var, rel=0.02)


def law(pulls, readings, target=1.0, **kw):
    c = EntropyBonusController(**kw)
    out = []
    for (cov, var), h in zip(pulls, readings):
        c.note_pull(cov, var)
        out.append(c.update(h, target))
    return c, out


def test_the_pull_is_logged_and_leaves_the_law_unchanged():
    readings = [1.0, 0.9, 0.8, 0.85, 0.95, 1.1, 1.05]
    pulls = [(0.3, 1.0), (0.2, 1.2), (-0.1, 0.9), (0.5, 1.1), (0.0, 1.0), (0.1, 1.0), (0.2, 0.8)]
    _, plain = law([(math.nan, 1.0)] * 7, readings)
    c, observed = law(pulls, readings)
    assert observed == plain
    assert c.pull_coefficient is not None


def test_the_pull_estimate_by_hand():
    """First pull taken as it is, then smoothed sums (weight ``PULL_SMOOTHING`` = 0.3 on the newest); the estimate
    is cov / var; sums that cannot be used leave it as it was."""
    c, _ = law([(0.1, 1.0), (0.3, 3.0)], [1.0, 1.0])
    assert EntropyBonusController.PULL_SMOOTHING == 0.3
    assert c.pull_cov == pytest.approx(0.7 * 0.1 + 0.3 * 0.3) and c.pull_var == pytest.approx(0.7 * 1.0 + 0.3 * 3.0)
    assert c.pull_coefficient == pytest.approx(0.16 / 1.6)
    c, _ = law([(0.1, 0.0), (math.inf, 1.0)], [1.0, 1.0])
    assert c.pull_coefficient is None  # no usable sums


def test_state_round_trip_keeps_the_pull():
    a, _ = law([(0.1, 1.0), (0.2, 1.5)], [1.0, 0.9])
    b = EntropyBonusController()
    b.load_state_dict(a.state_dict())
    assert (b.pull_cov, b.pull_var) == (a.pull_cov, a.pull_var)
    for cov, var, h in ((0.3, 1.0, 0.8), (0.0, 1.0, 0.85)):
        for c in (a, b):
            c.note_pull(cov, var)
        assert a.update(h, 1.0) == b.update(h, 1.0)
        assert a.pull_coefficient == b.pull_coefficient


def record_loss_forwards(trainer) -> list:
    """Wrap the trainer's log-prob/entropy forward: the returned list gets ``(logps, entropies)`` of each forward
    the loss path captures (the training loss forwards, not the generation-side ones)."""
    seen, inner = [], trainer._get_per_token_logps_and_entropies

    def recording(*a, **k):
        logps, ents, aux = inner(*a, **k)
        if trainer._ec_capture and ents is not None:
            seen.append((logps.detach(), ents.detach()))
        return logps, ents, aux

    trainer._get_per_token_logps_and_entropies = recording
    return seen


def test_through_trl_the_controller_gets_the_sums_of_the_loss_forwards(tmp_path):
    """Off-policy steps of two micro-batches: each step's two sums are those of its loss forwards' tokens (the same
    log-probs, entropies, advantages and mask TRL's loss used), summed, and reach the controller before its
    update; the estimate is logged."""
    args = tiny_args(tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=2.6, max_steps=3,
                     learning_rate=1e-2, per_device_train_batch_size=8, steps_per_generation=2,
                     gradient_accumulation_steps=2)
    trainer = GRPOEntropyTrainer(model=tiny_model(0), reward_funcs=count_ones_reward, args=args,
                                 train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    sums, expected = [], []
    step = record_loss_forwards(trainer)
    compute = trainer._compute_loss

    def recording_loss(model, inputs):
        n = len(step)
        loss = compute(model, inputs)
        if len(step) > n:
            logps, ents = step[-1]
            mask = inputs["completion_mask"]
            expected.append(torch.cat([entropy_pull_sums(logps, ents, inputs["advantages"], mask),
                                       mask.sum().float()[None]]))
        return loss

    trainer._compute_loss = recording_loss
    controller = trainer.entropy_control.controller
    note = controller.note_pull
    controller.note_pull = lambda cov, var, count: (sums.append((cov, var, count)), note(cov, var, count))
    trainer.train()
    assert len(sums) == 3 and len(expected) == 6
    for i, (cov, var, count) in enumerate(sums):
        want = expected[2 * i] + expected[2 * i + 1]
        assert cov == pytest.approx(float(want[0]), rel=1e-5, abs=1e-6)
        assert var == pytest.approx(float(want[1]), rel=1e-5)
        assert count == float(want[2])
    logged = [h["entropy_control/bonus_pull"] for h in trainer.state.log_history if "entropy_control/bonus_pull" in h]
    assert len(logged) == 3 and all(math.isfinite(v) for v in logged)


def test_the_varentropy_by_hand():
    """The token mean of the smoothed ``(log p + H)^2`` sum over the smoothed token count (weight 0.3 on the
    newest); ``None`` until a pull with its count; kept in the state."""
    c = EntropyBonusController()
    c.note_pull(10.0, 200.0)
    assert c.varentropy is None  # no count
    c = EntropyBonusController()
    c.note_pull(10.0, 200.0, 100.0)
    c.note_pull(10.0, 400.0, 100.0)
    assert c.varentropy == pytest.approx((0.7 * 200.0 + 0.3 * 400.0) / 100.0)
    d = EntropyBonusController()
    d.load_state_dict(c.state_dict())
    assert d.varentropy == c.varentropy and d.gain_scale == c.gain_scale


def test_the_assist_s_bonus_gets_the_pull_too(tmp_path):
    """A paper's control with the assist: its bonus controller receives the same sums (logged as the control's
    ``bonus_pull``), whether or not the bonus acts."""
    args = tiny_args(tmp_path, entropy_control="adaptive_clip", entropy_schedule_start=2.6, max_steps=2,
                     adaptive_clip_window=1, adaptive_clip_max=0.2, entropy_bonus_assist=True,
                     entropy_bonus_assist_window=1, per_device_train_batch_size=8, steps_per_generation=2)
    trainer = GRPOEntropyTrainer(model=tiny_model(0), reward_funcs=count_ones_reward, args=args,
                                 train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    trainer.train()
    bonus = trainer.entropy_control.bonus
    assert bonus.pull_cov is not None and bonus.varentropy > 0
    logged = [h["entropy_control/bonus_pull"] for h in trainer.state.log_history if "entropy_control/bonus_pull" in h]
    assert len(logged) == 2 and logged[-1] == pytest.approx(bonus.pull_coefficient)


def test_policy_token_weights_by_hand():
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0]])  # 4 tokens, 2 sequences of lengths 1 and 3
    assert policy_token_weights(mask, "dapo") is None and policy_token_weights(mask, "bnpo") is None
    # "grpo": a sequence's tokens weigh 1 / (B * len) in the policy term, 1 / N in the bonus
    assert policy_token_weights(mask, "grpo")[:, 0].tolist() == [2.0, pytest.approx(2.0 / 3.0)]
    assert policy_token_weights(mask, "sapo").tolist() == policy_token_weights(mask, "grpo").tolist()
    assert policy_token_weights(mask, "dr_grpo", 8).unique().tolist() == [0.25]  # 4 / (2 * 8)
    assert policy_token_weights(mask, "luspo").unique().tolist() == [2.0]  # 4 / 2
    # weighted covariance, plain variance
    logps, ents = torch.tensor([[-1.0, 0, 0, 0], [-1.0, -1.0, -1.0, 0]]), torch.tensor([[2.0, 0, 0, 0], [0.5] * 4])
    cov, var = entropy_pull_sums(logps, ents, torch.tensor([1.0, -1.0]), mask,
                                 policy_token_weights(mask, "grpo")).tolist()
    assert cov == pytest.approx(2.0 * 1.0 + (2.0 / 3.0) * 3 * 0.5) and var == pytest.approx(1.0 + 3 * 0.25)


@pytest.mark.parametrize("seed", range(3))
def test_the_weighted_ratio_balances_a_per_sequence_loss(seed):
    """Several states (tokens) in two sequences of lengths 1 and 3, each a softmax over 8 actions, with the natural
    policy gradient's logit update per state and the loss's own token weights: ``"grpo"`` weighs a token by
    ``1 / (B * len)``, the bonus by ``1 / N``. The coefficient from the sums weighted by
    :func:`policy_token_weights` cancels the first-order change of the token-mean entropy; the unweighted one does
    not."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    states = [(0, 0), (1, 0), (1, 1), (1, 2)]
    z = {s: torch.randn(8, generator=g, dtype=torch.float64) * 2 for s in states}
    sign = {0: 1.0, 1: -1.0}  # the short sequence was rewarded, the long one not
    adv = {s: sign[s[0]] * (torch.randn(8, generator=g, dtype=torch.float64) + 0.8 * z[s]) for s in states}
    n, rows = 4, 2
    w_policy = {s: 1.0 / (rows * float(mask[s[0]].sum())) for s in states}

    def probs_weighted_sums(weights):
        cov = var = 0.0
        for s in states:
            p, logp = torch.softmax(z[s], -1), torch.log_softmax(z[s], -1)
            h = float(-(p * logp).sum())
            centred = logp + h
            cov += weights[s] * float((p * centred * adv[s]).sum())
            var += float((p * centred * centred).sum())
        return cov, var

    rel = policy_token_weights(mask.to(torch.float64), "grpo")
    weighted = pull_coefficient(*probs_weighted_sums({s: float(rel[s]) for s in states}))
    unweighted = pull_coefficient(*probs_weighted_sums({s: 1.0 for s in states}))
    eta = 1e-3

    def entropy_change(c):
        total = 0.0
        for s in states:
            logp = torch.log_softmax(z[s], -1)
            h = entropy(z[s])
            step = w_policy[s] * adv[s] - c * (logp + h) / n  # the policy term's weight, the bonus's token mean
            total += entropy(z[s] + eta * step) - h
        return total

    plain = entropy_change(0.0)
    assert abs(entropy_change(weighted)) < 0.02 * abs(plain)
    assert abs(entropy_change(unweighted)) > 0.1 * abs(plain)


def test_through_trl_a_per_sequence_loss_weighs_the_covariance_as_the_loss_does(tmp_path):
    """``loss_type="grpo"``: the step's covariance sum is that of :func:`policy_token_weights`, the variance sum
    the plain one."""
    args = tiny_args(tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=2.6, max_steps=2,
                     per_device_train_batch_size=8, steps_per_generation=2, loss_type="grpo")
    trainer = GRPOEntropyTrainer(model=tiny_model(0), reward_funcs=count_ones_reward, args=args,
                                 train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    seen = record_loss_forwards(trainer)
    compute, expected = trainer._compute_loss, []

    def recording_loss(model, inputs):
        loss = compute(model, inputs)
        logps, ents = seen[-1]
        mask = inputs["completion_mask"]
        w = policy_token_weights(mask, "grpo")
        expected.append((entropy_pull_sums(logps, ents, inputs["advantages"], mask, w),
                         entropy_pull_sums(logps, ents, inputs["advantages"], mask)))
        return loss

    trainer._compute_loss = recording_loss
    sums = []
    note = trainer.entropy_control.controller.note_pull
    trainer.entropy_control.controller.note_pull = lambda cov, var, count: (sums.append((cov, var)),
                                                                            note(cov, var, count))
    trainer.train()
    assert len(sums) == 2 and len(expected) == 2
    for (cov, var), (weighted, plain) in zip(sums, expected):
        assert cov == pytest.approx(float(weighted[0]), rel=1e-5, abs=1e-6)
        assert var == pytest.approx(float(plain[1]), rel=1e-5)
    assert any(abs(float(w[0]) - float(p[0])) > 1e-6 for w, p in expected)  # the weights mattered here
