"""Our GRPO loss path (trl_entropy.losses.policy_loss) against TRL's own `GRPOTrainer._compute_loss`.

The equality tests build one real TRL trainer and one real generated batch, make it off-policy (noisy old log-probs,
so ratios differ from 1 and PPO clipping is active), then compare TRL's `_compute_loss` with `trainer_compute_loss`
on the same inputs: loss value, gradient w.r.t. every parameter and w.r.t. the per-token log-probs, and the metrics
both log.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import contextlib
import math

import pytest
import torch
from conftest import count_ones_reward, tiny_dataset, tiny_kwargs, tiny_model, tiny_tokenizer
from trl import GRPOConfig, GRPOTrainer

from trl_entropy.losses.policy_loss import (
    GRPOLossConfig,
    TokenHooks,
    aggregate_loss,
    compute_grpo_loss,
    per_token_policy_loss,
    trainer_compute_loss,
)

ATOL = 1e-6
RTOL = 1e-5
LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"]
LEVELS = ["token", "sequence"]


# --------------------------------------------------------------------------------------------------------------------
# a real TRL trainer and batch
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread is faster and steadier on a shared CPU (restored afterwards)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A plain `trl.GRPOTrainer` and one generated batch made off-policy (module-scoped: built once)."""
    args = GRPOConfig(**tiny_kwargs(tmp_path_factory.mktemp("pl"), max_completion_length=6, epsilon_high=0.28))
    trainer = GRPOTrainer(
        model=tiny_model(0),
        reward_funcs=count_ones_reward,
        args=args,
        train_dataset=tiny_dataset(),
        processing_class=tiny_tokenizer(),
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # normally set by Trainer's training loop
    inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    assert (inputs["completion_mask"] == 0).any(), "the batch should contain padding"

    prompt_completion = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, prompt_completion, attention, inputs["completion_ids"].size(1)
        )
    g = torch.Generator().manual_seed(0)
    B, T = logps.shape
    noise = lambda scale: scale * torch.randn(B, T, generator=g)  # noqa: E731
    inputs["old_per_token_logps"] = logps + noise(0.5)
    inputs["ref_per_token_logps"] = logps + noise(0.3)
    inputs["sampling_per_token_logps"] = inputs["old_per_token_logps"] + noise(0.3)
    inputs["importance_sampling_ratio"] = torch.exp(noise(0.2))  # TRL's token modes: (B, T)
    inputs["advantages"] = torch.randn(B, generator=g)
    return trainer, inputs


@contextlib.contextmanager
def configured(trainer, **settings):
    """Temporarily set trainer attributes; `args__x` sets `trainer.args.x`."""
    saved = []
    for key, value in settings.items():
        obj, name = (trainer.args, key[len("args__") :]) if key.startswith("args__") else (trainer, key)
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)
    try:
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)


def run_loss(trainer, inputs, compute):
    """Run one loss + backward; return loss, parameter grads, d loss / d per_token_logps, and the logged metrics."""
    captured = {}
    original = trainer._get_per_token_logps_and_entropies

    def capturing(*args, **kwargs):
        logps, entropies, aux = original(*args, **kwargs)
        if logps.requires_grad:
            logps.retain_grad()
            captured["logps"] = logps
        return logps, entropies, aux

    for values in trainer._metrics.values():
        values.clear()
    trainer.model.zero_grad(set_to_none=True)
    trainer._get_per_token_logps_and_entropies = capturing
    try:
        loss = compute(trainer.model, inputs)
    finally:
        del trainer._get_per_token_logps_and_entropies  # back to the class method
    if loss.requires_grad:
        loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    mode = "train" if trainer.model.training else "eval"
    metrics = {k: list(v) for k, v in trainer._metrics[mode].items()}
    logps_grad = captured["logps"].grad if "logps" in captured else None
    return loss.detach(), grads, logps_grad, metrics


def assert_same_as_trl(trainer, inputs, hooks_fn=None):
    """Our loss path equals TRL's `_compute_loss` on `inputs`; returns TRL's metrics."""
    ref = run_loss(trainer, inputs, trainer._compute_loss)
    ours = run_loss(trainer, inputs, lambda m, x: trainer_compute_loss(trainer, m, x, hooks_fn=hooks_fn))
    (l_ref, g_ref, lg_ref, m_ref), (l_ours, g_ours, lg_ours, m_ours) = ref, ours
    assert torch.isfinite(l_ref)
    torch.testing.assert_close(l_ours, l_ref, atol=ATOL, rtol=RTOL)
    assert g_ours.keys() == g_ref.keys() and len(g_ref) > 0
    for name in g_ref:
        torch.testing.assert_close(g_ours[name], g_ref[name], atol=ATOL, rtol=RTOL, msg=name)
    if lg_ref is not None:
        torch.testing.assert_close(lg_ours, lg_ref, atol=ATOL, rtol=RTOL)
    assert m_ours.keys() == m_ref.keys()
    for key in m_ref:
        assert m_ours[key] == pytest.approx(m_ref[key], rel=1e-6, abs=1e-7, nan_ok=True), key
    return m_ref


# --------------------------------------------------------------------------------------------------------------------
# 1. equality with TRL
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_equals_trl_and_clipping_is_active(setup, loss_type, level):
    trainer, inputs = setup
    with configured(trainer, loss_type=loss_type, importance_sampling_level=level):
        metrics = assert_same_as_trl(trainer, inputs)
    assert metrics["clip_ratio/region_mean"][0] > 0, "the case must exercise the PPO clip"
    assert "kl" not in metrics


# each feature as TRL's trainer settings (plus input changes), tested for every loss type and IS level
FEATURES = {
    "beta": dict(beta=0.04),
    "beta_no_bias_correction": dict(beta=0.04, args__use_bias_correction_kl=False),
    "vllm_is_token": dict(use_vllm=True, vllm_importance_sampling_correction=True),
    "vllm_is_sequence": dict(use_vllm=True, vllm_importance_sampling_correction=True, _is_ratio="sequence"),
    "entropy_bonus": dict(entropy_coef=0.05, _entropy_bonus_enabled=True),
    "delta": dict(args__delta=1.1),
    "top_entropy_quantile": dict(top_entropy_quantile=0.5),
    "off_policy_mask": dict(off_policy_mask_threshold=0.05),
    "grad_accumulation": dict(current_gradient_accumulation_steps=2, args__steps_per_generation=2),
    "tool_mask_empty_row": dict(_tool_mask=True),
    "on_policy": dict(_on_policy=True),
    "token_advantages": dict(_token_advantages=True),
    "everything": dict(
        beta=0.04,
        use_vllm=True,
        vllm_importance_sampling_correction=True,
        entropy_coef=0.05,
        _entropy_bonus_enabled=True,
        args__delta=1.5,
        top_entropy_quantile=0.8,
        off_policy_mask_threshold=0.05,
        current_gradient_accumulation_steps=4,
        _tool_mask=True,
    ),
}


def feature_inputs(inputs, settings):
    """Split trainer settings from input changes (keys starting with `_` but not `_entropy_bonus_enabled`)."""
    inputs = dict(inputs)
    settings = dict(settings)
    if settings.pop("_is_ratio", None) == "sequence":  # TRL's sequence_* modes: (B, 1)
        inputs["importance_sampling_ratio"] = inputs["importance_sampling_ratio"][:, :1] * 1.3
    if settings.pop("_tool_mask", None):
        tool_mask = torch.ones_like(inputs["completion_mask"])
        tool_mask[0] = 0  # a sequence with no loss token at all
        tool_mask[1, 0] = 0
        inputs["tool_mask"] = tool_mask
    if settings.pop("_on_policy", None):
        inputs["old_per_token_logps"] = None
    if settings.pop("_token_advantages", None):
        adv = inputs["advantages"]
        inputs["advantages"] = adv[:, None] * torch.linspace(0.5, 1.5, inputs["completion_mask"].size(1))
    return inputs, settings


# every feature at token level; all of them together also at sequence level (keeps the suite fast)
FEATURE_CASES = [(f, "token") for f in FEATURES] + [("everything", "sequence")]


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("feature, level", FEATURE_CASES)
def test_feature_equals_trl(setup, feature, loss_type, level):
    trainer, inputs = setup
    inputs, settings = feature_inputs(inputs, FEATURES[feature])
    with configured(trainer, loss_type=loss_type, importance_sampling_level=level, **settings):
        metrics = assert_same_as_trl(trainer, inputs)
    if "beta" in settings:
        assert metrics["kl"][0] > 0
    if "entropy_coef" in settings:
        assert "policy_loss" in metrics and "entropy_coef" in metrics


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_enabled_entropy_bonus_at_zero_coefficient_logs_as_trl(setup, loss_type):
    """TRL logs `policy_loss` and `entropy_coef` whenever its entropy bonus is enabled (`_entropy_bonus_enabled`, e.g.
    switched on by a control that then moved the coefficient to 0), also at coefficient 0; the mirror logs the same
    keys and values (and the same loss and gradients). Disabled, neither logs them."""
    trainer, inputs = setup
    with configured(trainer, loss_type=loss_type, entropy_coef=0.0, _entropy_bonus_enabled=True):
        metrics = assert_same_as_trl(trainer, inputs)  # equal loss, gradients, metric keys and values
    assert "policy_loss" in metrics and metrics["entropy_coef"] == [0.0]
    with configured(trainer, loss_type=loss_type, entropy_coef=0.0, _entropy_bonus_enabled=False):
        metrics = assert_same_as_trl(trainer, inputs)
    assert "policy_loss" not in metrics and "entropy_coef" not in metrics


def test_every_feature_changes_the_loss(setup):
    """Guards the equality tests above: each feature case really exercises its code path on this batch."""
    trainer, base_inputs = setup

    def our_loss(inputs):
        with torch.no_grad():
            return trainer_compute_loss(trainer, trainer.model, inputs)

    with configured(trainer, loss_type="grpo"):
        base = our_loss(base_inputs)
        for feature, settings in FEATURES.items():
            inputs, settings = feature_inputs(base_inputs, settings)
            with configured(trainer, **settings):
                assert not torch.allclose(our_loss(inputs), base, atol=1e-5, rtol=0), feature


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_eval_mode_equals_trl(setup, loss_type):
    trainer, inputs = setup
    trainer.model.eval()
    try:
        with configured(trainer, loss_type=loss_type, current_gradient_accumulation_steps=3, beta=0.04):
            assert_same_as_trl(trainer, inputs)
    finally:
        trainer.model.train()


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_hooks_that_select_nothing_equal_trl(setup, loss_type):
    trainer, inputs = setup

    def off(logps, old, adv, mask, entropies):
        return TokenHooks(
            token_weights=torch.ones_like(logps),
            detach_mask=torch.zeros_like(mask, dtype=torch.bool),
            kl_cov_mask=torch.zeros_like(mask, dtype=torch.bool),
            kl_cov_coef=1.0,
        )

    with configured(trainer, loss_type=loss_type, beta=0.04):
        assert_same_as_trl(trainer, inputs, hooks_fn=off)
        assert_same_as_trl(trainer, inputs, hooks_fn=lambda *a: None)


def test_hooks_fn_gets_detached_tensors_and_detach_hook_zeroes_token_gradients(setup):
    trainer, inputs = setup
    seen = {}
    mask = inputs["completion_mask"]
    with configured(trainer, loss_type="bnpo"):
        _, _, lg_ref, _ = run_loss(trainer, inputs, trainer._compute_loss)
    # two loss tokens that TRL trains (not PPO-clipped)
    candidates = torch.nonzero((mask > 0) & (lg_ref != 0))[:2]
    chosen = torch.zeros_like(mask, dtype=torch.bool)
    chosen[candidates[:, 0], candidates[:, 1]] = True
    assert chosen.sum() == 2

    def clip_cov(logps, old, adv, m, entropies):
        seen.update(logps=logps, old=old, adv=adv, mask=m, entropies=entropies)
        return TokenHooks(detach_mask=chosen)

    with configured(trainer, loss_type="bnpo"):
        loss, _, lg, metrics = run_loss(
            trainer, inputs, lambda m, x: trainer_compute_loss(trainer, m, x, hooks_fn=clip_cov)
        )
    B, T = mask.shape
    assert seen["logps"].shape == seen["entropies"].shape == (B, T) and seen["adv"].shape == (B, 1)
    assert not seen["logps"].requires_grad and not seen["entropies"].requires_grad
    torch.testing.assert_close(seen["old"], inputs["old_per_token_logps"])
    assert (lg[chosen] == 0).all()
    torch.testing.assert_close(lg[~chosen], lg_ref[~chosen], atol=ATOL, rtol=RTOL)  # bnpo: normaliser unchanged
    assert "entropy" in metrics and "clip_ratio/region_mean" in metrics


def test_return_details(setup):
    trainer, inputs = setup
    hooks = TokenHooks(token_weights=torch.full(inputs["completion_mask"].shape, 2.0))
    loss, details = trainer_compute_loss(trainer, trainer.model, inputs, lambda *a: hooks, return_details=True)
    assert details["hooks"] is hooks and details["loss"] is loss
    assert details["per_token_loss"].shape == inputs["completion_mask"].shape
    assert details["entropies"].requires_grad


class HookedGRPOTrainer(GRPOTrainer):
    """A subclass using our loss path in TRL's real training loop (no hooks)."""

    def _compute_loss(self, model, inputs):
        return trainer_compute_loss(self, model, inputs)


def test_training_loop_with_our_loss_matches_trl(tmp_path):
    """Two optimizer steps, gradient accumulation 2, two micro-batches per generation: same logs and weights."""

    def train(cls, path):
        args = GRPOConfig(
            **tiny_kwargs(path, max_steps=2, gradient_accumulation_steps=2, per_device_train_batch_size=4, beta=0.0)
        )
        trainer = cls(
            model=tiny_model(0),
            reward_funcs=count_ones_reward,
            args=args,
            train_dataset=tiny_dataset(),
            processing_class=tiny_tokenizer(),
        )
        trainer.train()
        return trainer

    ref, ours = train(GRPOTrainer, tmp_path / "a"), train(HookedGRPOTrainer, tmp_path / "b")
    timing = ("time", "runtime", "per_second")

    def logs(trainer):
        return [{k: v for k, v in h.items() if not any(t in k for t in timing)} for h in trainer.state.log_history]

    assert len(logs(ref)) == 3  # two steps and the train summary
    for h_ref, h_ours in zip(logs(ref), logs(ours), strict=True):
        assert h_ours.keys() == h_ref.keys()
        for key in h_ref:
            assert h_ours[key] == pytest.approx(h_ref[key], rel=1e-5, abs=1e-7, nan_ok=True), key
    for (n, p_ref), (_, p_ours) in zip(ref.model.named_parameters(), ours.model.named_parameters()):
        torch.testing.assert_close(p_ours, p_ref, atol=ATOL, rtol=RTOL, msg=n)


# --------------------------------------------------------------------------------------------------------------------
# 2. hooks, hand-checked on a tiny case
# --------------------------------------------------------------------------------------------------------------------

# B=2, T=3; padding at (0, 2). Token (0, 0) has ratio e^0.5 > 1.28 with A > 0: PPO clips it (zero gradient).
LOGPS = torch.tensor([[-1.0, -2.0, -5.0], [-0.5, -1.5, -2.5]])
OLD = torch.tensor([[-1.5, -2.1, -5.0], [-0.4, -1.5, -2.0]])
ADV = torch.tensor([1.0, -2.0])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])
EPS = dict(epsilon_low=0.2, epsilon_high=0.28)


def hand_loss(hooks=None, loss_type="bnpo", level="token"):
    lp = LOGPS.clone().requires_grad_(True)
    per_token, coef_1 = per_token_policy_loss(lp, OLD, ADV, MASK, importance_sampling_level=level, hooks=hooks, **EPS)
    loss, _ = aggregate_loss(
        per_token, MASK, loss_type=loss_type, num_items_in_batch=MASK.sum(), max_completion_length=3
    )
    loss.backward()
    return per_token.detach(), loss.detach(), lp.grad


def test_plain_surrogate_hand_values():
    per_token, loss, grad = hand_loss()
    r = torch.exp(LOGPS - OLD)
    A = ADV[:, None]
    expected = torch.maximum(-A * r, -A * r.clamp(0.8, 1.28))
    torch.testing.assert_close(per_token, expected)
    torch.testing.assert_close(loss, (expected * MASK).sum() / 5)
    assert grad[0, 0] == 0  # clipped token
    torch.testing.assert_close(grad[0, 1], -1.0 * r[0, 1] / 5)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_detach_mask_zeroes_value_and_gradient_but_keeps_the_normaliser(loss_type):
    sel = torch.tensor([[False, True, False], [False, False, True]])
    base_tok, base_loss, base_grad = hand_loss(loss_type=loss_type)
    tok, loss, grad = hand_loss(TokenHooks(detach_mask=sel), loss_type=loss_type)
    assert (tok[sel] == 0).all() and (grad[sel] == 0).all()
    torch.testing.assert_close(tok[~sel], base_tok[~sel])
    # token-level surrogate: the other tokens' gradients are untouched, so every normaliser is unchanged
    torch.testing.assert_close(grad[~sel], base_grad[~sel])
    normaliser = {"bnpo": 5.0, "dapo": 5.0, "dr_grpo": 2 * 3}  # token-sum losses: 5 loss tokens; B * max length
    if loss_type in normaliser:
        torch.testing.assert_close(loss, base_loss - (base_tok[sel] * MASK[sel]).sum() / normaliser[loss_type])


def test_kl_cov_mask_gives_unclipped_pg_plus_abs_logratio():
    coef = 0.7
    sel = torch.tensor([[True, False, False], [False, False, True]])  # (0,0) is PPO-clipped without the hook
    base_tok, _, base_grad = hand_loss()
    tok, _, grad = hand_loss(TokenHooks(kl_cov_mask=sel, kl_cov_coef=coef))
    lr = LOGPS - OLD
    r = torch.exp(lr)
    A = ADV[:, None].expand(2, 3)
    torch.testing.assert_close(tok[sel], (-A * r + coef * lr.abs())[sel])
    torch.testing.assert_close(tok[~sel], base_tok[~sel])
    # gradient of the unclipped term: (-A r + coef * sign(lr)) / n_valid, non-zero on the formerly clipped token
    torch.testing.assert_close(grad[sel], ((-A * r + coef * lr.sign()) / 5)[sel])
    assert base_grad[0, 0] == 0 and grad[0, 0] != 0
    torch.testing.assert_close(grad[~sel], base_grad[~sel])


def test_kl_cov_ignores_delta_cap():
    sel = torch.ones(2, 3, dtype=torch.bool)
    lp = LOGPS.clone().requires_grad_(True)
    tok, coef_1 = per_token_policy_loss(
        lp, OLD, ADV, MASK, delta=1.0, hooks=TokenHooks(kl_cov_mask=sel, kl_cov_coef=0.0), **EPS
    )
    torch.testing.assert_close(tok, -ADV[:, None] * torch.exp(LOGPS - OLD))
    assert coef_1.max() <= 1.0  # the cap still applies to the ratio TRL's clip metrics read


def test_kl_cov_at_sequence_level_uses_sequence_ratio_and_token_penalty():
    sel = torch.tensor([[True, False, False], [False, True, False]])
    tok, _, _ = hand_loss(TokenHooks(kl_cov_mask=sel, kl_cov_coef=0.5), level="sequence")
    lr = LOGPS - OLD
    seq_r = torch.exp((lr * MASK).sum(-1, keepdim=True) / MASK.sum(-1, keepdim=True))
    expected = -ADV[:, None] * seq_r + 0.5 * lr.abs()
    assert tok.shape == (2, 3)
    torch.testing.assert_close(tok[sel], expected[sel])


def test_token_weights_scale_the_per_token_loss_and_are_not_differentiated():
    weights = torch.tensor([[2.0, 0.5, 3.0], [1.0, 0.0, 1.5]], requires_grad=True)
    base_tok, _, base_grad = hand_loss()
    tok, _, grad = hand_loss(TokenHooks(token_weights=weights))
    torch.testing.assert_close(tok, base_tok * weights.detach())
    torch.testing.assert_close(grad, base_grad * weights.detach())
    assert weights.grad is None


def test_hook_order_detach_wins():
    both = torch.tensor([[False, True, False], [False, False, False]])
    tok, _, grad = hand_loss(
        TokenHooks(kl_cov_mask=both, detach_mask=both, token_weights=torch.full((2, 3), 2.0), kl_cov_coef=1.0)
    )
    assert tok[0, 1] == 0 and grad[0, 1] == 0


def test_pure_compute_grpo_loss_matches_hand_bnpo_with_kl_and_bonus():
    lp = LOGPS.clone().requires_grad_(True)
    ref = LOGPS - 0.1
    ent = torch.tensor([[1.0, 2.0, 9.0], [0.5, 0.5, 0.5]], requires_grad=True)
    inputs = dict(completion_mask=MASK, advantages=ADV, old_per_token_logps=OLD, ref_per_token_logps=ref)
    cfg = GRPOLossConfig(loss_type="bnpo", beta=0.1, use_bias_correction_kl=False, entropy_coef=0.01, **EPS)
    out = compute_grpo_loss(lp, inputs, cfg, entropies=ent)
    r = torch.exp(LOGPS - OLD)
    A = ADV[:, None]
    pg = torch.maximum(-A * r, -A * r.clamp(0.8, 1.28))
    kl = math.exp(-0.1) + 0.1 - 1
    expected = ((pg + 0.1 * kl) * MASK).sum() / 5 - 0.01 * (4.5 / 5)
    torch.testing.assert_close(out["loss"], expected)
    out["loss"].backward()
    torch.testing.assert_close(ent.grad, -0.01 * MASK / 5)


# --------------------------------------------------------------------------------------------------------------------
# 3. unsupported settings and bad arguments
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss_type", ["cispo", "sapo", "vespo"])
def test_trl_loss_types_we_do_not_implement_raise_not_implemented(loss_type):
    with pytest.raises(NotImplementedError, match=f"loss_type='{loss_type}'"):
        aggregate_loss(torch.zeros(2, 3), MASK, loss_type=loss_type)
    with pytest.raises(NotImplementedError, match=loss_type):
        GRPOLossConfig(loss_type=loss_type)


def test_unknown_names_raise_value_error():
    with pytest.raises(ValueError, match="loss_type='ppo'"):
        aggregate_loss(torch.zeros(2, 3), MASK, loss_type="ppo")
    with pytest.raises(ValueError, match="importance_sampling_level='seq'"):
        GRPOLossConfig(importance_sampling_level="seq")
    with pytest.raises(ValueError, match="importance_sampling_level"):
        per_token_policy_loss(LOGPS, OLD, ADV, MASK, importance_sampling_level="seq")
    with pytest.raises(ValueError, match="num_items_in_batch"):
        aggregate_loss(torch.zeros(2, 3), MASK, loss_type="dapo")
    with pytest.raises(ValueError, match="max_completion_length"):
        aggregate_loss(torch.zeros(2, 3), MASK, loss_type="dr_grpo")


def test_bad_hooks_raise_value_error():
    with pytest.raises(ValueError, match="detach_mask must have shape"):
        hand_loss(TokenHooks(detach_mask=torch.zeros(2, 2, dtype=torch.bool)))
    with pytest.raises(ValueError, match="kl_cov_coef"):
        hand_loss(TokenHooks(kl_cov_mask=torch.zeros(2, 3, dtype=torch.bool), kl_cov_coef=-1.0))
    with pytest.raises(ValueError, match="token_weights must be a torch.Tensor"):
        hand_loss(TokenHooks(token_weights=[[1.0] * 3] * 2))


@pytest.mark.parametrize(
    "settings, extra, match",
    [
        (dict(loss_type="sapo"), {}, "loss_type='sapo'"),
        (dict(loss_type="cispo"), {}, "loss_type='cispo'"),
        (dict(use_adaptive_entropy=True), {}, "use_adaptive_entropy"),
        (dict(aux_loss_enabled=True), {}, "auxiliary loss"),
        ({}, {"pixel_values": torch.zeros(1)}, "multimodal inputs \\(pixel_values\\)"),
    ],
)
def test_unsupported_trainer_settings_raise_not_implemented(setup, settings, extra, match):
    trainer, inputs = setup
    with configured(trainer, **settings), pytest.raises(NotImplementedError, match=match):
        trainer_compute_loss(trainer, trainer.model, {**inputs, **extra})


def test_unknown_trainer_loss_type_raises_value_error(setup):
    trainer, inputs = setup
    with configured(trainer, loss_type="nope"), pytest.raises(ValueError, match="loss_type='nope'"):
        trainer_compute_loss(trainer, trainer.model, inputs)
