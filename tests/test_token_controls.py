"""Clip-Cov, KL-Cov and EntroPIC: controls on our own loss path (trl_entropy.controls + GRPOEntropyTrainer)."""

import math
import warnings

import pytest
import torch
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer
from trl import GRPOTrainer

import trl_entropy.losses.loss_path as loss_path_module
from trl_entropy import GRPOEntropyTrainer
from trl_entropy.controls import ClipCovControl, EntropicControl, KLCovControl, TokenBatch
from trl_entropy.losses import clip_cov_selection, kl_cov_selection, ppo_clipped_tokens, token_covariance
from trl_entropy.losses.policy_loss import GRPOLossConfig, TokenHooks, compute_grpo_loss
from trl_entropy.scheduling import PIController

OFF_POLICY = dict(steps_per_generation=2)  # two optimizer steps per generation batch: the second is off-policy


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_trainer(args):
    return GRPOEntropyTrainer(
        model=tiny_model(0),
        reward_funcs=count_ones_reward,
        args=args,
        train_dataset=tiny_dataset(),
        processing_class=tiny_tokenizer(),
    )


def cfg(**kw):
    """A config for the pure control tests (never trained; output_dir unused)."""
    return tiny_args("unused-output-dir", **kw)


def history(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


# --------------------------------------------------------------------------------------------------------------------
# (a) switched off == TRL's _compute_loss on the same inputs (also with the vLLM importance-sampling correction)
# --------------------------------------------------------------------------------------------------------------------

OFF = {
    "clip_cov": dict(entropy_control="clip_cov", clip_cov_ratio=0.0),
    "clip_cov_local": dict(entropy_control="clip_cov", clip_cov_ratio=0.0, cov_scope="local"),
    "kl_cov": dict(entropy_control="kl_cov", kl_cov_ratio=0.0),
    "kl_cov_local": dict(entropy_control="kl_cov", kl_cov_ratio=0.0, cov_scope="local"),
    "entropic": dict(entropy_control="entropic", entropy_schedule_start=1.0),  # alpha starts at 0
}


def loss_and_grads(trainer, inputs, compute):
    trainer.model.zero_grad(set_to_none=True)
    loss = compute(trainer.model, inputs)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("vllm_is", [False, True])
@pytest.mark.parametrize(
    "name, loss_type, level",
    [
        ("clip_cov", "dapo", "token"),
        ("clip_cov_local", "grpo", "sequence"),
        ("kl_cov", "bnpo", "token"),
        ("kl_cov_local", "dr_grpo", "token"),
        ("entropic", "dapo", "sequence"),
        ("entropic", "grpo", "token"),
    ],
)
def test_switched_off_equals_trl_compute_loss(tmp_path, name, loss_type, level, vllm_is):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = tiny_args(tmp_path, loss_type=loss_type, importance_sampling_level=level, epsilon_high=0.28,
                         max_completion_length=6, **OFF_POLICY, **OFF[name])
    trainer = make_trainer(args)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    inputs = dict(trainer._prepare_inputs(next(iter(trainer.get_train_dataloader()))))
    g = torch.Generator().manual_seed(0)
    shape = inputs["completion_mask"].shape
    # make the micro-batch off-policy so PPO clipping is active, and the advantages non-trivial
    inputs["old_per_token_logps"] = inputs["old_per_token_logps"] + 0.5 * torch.randn(shape, generator=g)
    inputs["advantages"] = torch.randn(shape[0], generator=g)
    if vllm_is:  # issue 6 item 4: our loss path keeps TRL's vLLM importance-sampling correction
        trainer.use_vllm = True
        trainer.vllm_importance_sampling_correction = True
        inputs["importance_sampling_ratio"] = torch.exp(0.2 * torch.randn(shape, generator=g))

    calls = []
    original = loss_path_module.trainer_compute_loss
    loss_path_module.trainer_compute_loss = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        ours = loss_and_grads(trainer, inputs, trainer._compute_loss)
    finally:
        loss_path_module.trainer_compute_loss = original
    if name == "entropic":  # an additive term only: TRL's own _compute_loss (plus the term, 0 here)
        assert not calls, "EntroPIC keeps TRL's _compute_loss"
    else:
        assert calls, "the control must run our hooked loss path"
    ref = loss_and_grads(trainer, inputs, lambda m, x: GRPOTrainer._compute_loss(trainer, m, x))
    torch.testing.assert_close(ours[0], ref[0], atol=1e-6, rtol=1e-5)
    assert ours[1].keys() == ref[1].keys() and ref[1]
    for key in ref[1]:
        torch.testing.assert_close(ours[1][key], ref[1][key], atol=1e-6, rtol=1e-5, msg=key)
    # ... and the correction really was in play: without it the loss differs
    if vllm_is:
        trainer.vllm_importance_sampling_correction = False
        plain = GRPOTrainer._compute_loss(trainer, trainer.model, inputs).detach()
        assert not torch.allclose(plain, ref[0], atol=1e-6)


@pytest.mark.parametrize(
    "loss_type, level, accumulation",
    [("dapo", "token", 1), ("grpo", "sequence", 1), ("bnpo", "token", 2), ("dr_grpo", "token", 1),
     ("luspo", "sequence", 2)],
)
def test_entropic_on_trl_loss_equals_our_loss_path(tmp_path, loss_type, level, accumulation, monkeypatch):
    """EntroPIC's term is additive (loss = TRL's loss + alpha * mean_HP(-r |A|), r from the same forward's log-probs),
    so it runs on TRL's own _compute_loss, the term added from the log-probs of TRL's loss forward: one forward, and
    the loss, the gradient and the selected tokens of our loss path (trainer_compute_loss) with the same hooks."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = tiny_args(tmp_path, loss_type=loss_type, importance_sampling_level=level, max_completion_length=6,
                         entropy_control="entropic", entropy_schedule_start=1.0, entropic_high_prob_threshold=0.1,
                         **OFF_POLICY)
    trainer = make_trainer(args)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = accumulation
    inputs = dict(trainer._prepare_inputs(next(iter(trainer.get_train_dataloader()))))
    g = torch.Generator().manual_seed(0)
    shape = inputs["completion_mask"].shape
    inputs["old_per_token_logps"] = inputs["old_per_token_logps"] + 0.5 * torch.randn(shape, generator=g)
    inputs["advantages"] = torch.randn(shape[0], generator=g)
    control = trainer.entropy_control
    control.controller.value = 0.7  # alpha: the term is on

    forwards = []
    original = GRPOTrainer._get_per_token_logps_and_entropies

    def counting(self, *a, **k):
        forwards.append(1)
        return original(self, *a, **k)

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", counting)
    # (_compute_loss dispatches to the additive path, checked below; called directly here because _compute_loss also
    # ends the optimizer step, which updates alpha and reads the step counts)
    assert isinstance(trainer._ec_loss, loss_path_module.AdditiveLoss)
    trl_path = loss_and_grads(trainer, inputs, trainer._ec_loss.compute)
    assert len(forwards) == 1, "TRL's loss forward only: no second forward for the term"
    counts_trl = control.step_counts()
    fork = loss_and_grads(trainer, inputs, loss_path_module.HookedLoss(trainer).compute)
    counts_fork = control.step_counts()
    plain = loss_and_grads(trainer, inputs, lambda m, x: GRPOTrainer._compute_loss(trainer, m, x))

    assert counts_trl == counts_fork and 0 < counts_trl["selected"] < counts_trl["valid"]
    assert not torch.allclose(trl_path[0], plain[0], atol=1e-4), "the term must be in play"
    torch.testing.assert_close(trl_path[0], fork[0], atol=1e-6, rtol=1e-5)
    assert trl_path[1].keys() == fork[1].keys() and fork[1]
    for key in fork[1]:
        torch.testing.assert_close(trl_path[1][key], fork[1][key], atol=1e-6, rtol=1e-5, msg=key)

    dispatched = []
    additive = loss_path_module.AdditiveLoss.compute
    monkeypatch.setattr(loss_path_module.AdditiveLoss, "compute",
                        lambda self, m, x: dispatched.append(1) or additive(self, m, x))
    monkeypatch.setattr(loss_path_module, "trainer_compute_loss", lambda *a, **k: pytest.fail("not our loss path"))
    torch.testing.assert_close(trainer._compute_loss(trainer.model, inputs).detach(), trl_path[0])
    assert dispatched == [1]


def test_controls_without_token_hooks_keep_trl_compute_loss(tmp_path):
    args = tiny_args(tmp_path, max_steps=2, entropy_control="w_reinforce")
    trainer = make_trainer(args)
    calls = []
    original = loss_path_module.trainer_compute_loss
    loss_path_module.trainer_compute_loss = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        trainer.train()
    finally:
        loss_path_module.trainer_compute_loss = original
    assert not calls


# --------------------------------------------------------------------------------------------------------------------
# (b) each method acts where it should, in a real off-policy training run
# --------------------------------------------------------------------------------------------------------------------


class Recorder:
    """Wraps trainer_compute_loss to keep each micro-batch's details (log-probs keep their gradient)."""

    def __init__(self):
        self.records = []

    def __enter__(self):
        self.original = loss_path_module.trainer_compute_loss

        def wrapped(trainer, model, inputs, hooks_fn=None):
            loss, details = self.original(trainer, model, inputs, hooks_fn, return_details=True)
            details["per_token_logps"].retain_grad()
            self.records.append(details)
            return loss

        loss_path_module.trainer_compute_loss = wrapped
        return self

    def __exit__(self, *exc):
        loss_path_module.trainer_compute_loss = self.original


@pytest.mark.parametrize("scope", ["global", "local"])
def test_clip_cov_selected_tokens_get_zero_gradient(tmp_path, scope):
    args = tiny_args(tmp_path, max_steps=4, entropy_control="clip_cov", clip_cov_ratio=0.2, clip_cov_lb=-100.0,
                     clip_cov_ub=100.0, cov_scope=scope, **OFF_POLICY)
    trainer = make_trainer(args)
    with Recorder() as rec:
        trainer.train()
    assert all(s > 0 for s in history(trainer, "entropy_control/selected_tokens"))
    n_checked = 0
    for d in rec.records:
        selected = d["hooks"].detach_mask
        grad = d["per_token_logps"].grad
        assert selected.any() and (selected <= (d["mask"] > 0)).all()
        assert torch.all(grad[selected] == 0)
        assert torch.all(d["per_token_loss"][selected] == 0)
        # the other tokens of non-zero advantage still train
        others = (d["mask"] > 0) & ~selected & (d["advantages"].expand_as(selected) != 0)
        if others.any():
            assert grad[others].abs().sum() > 0
            n_checked += 1
    assert n_checked > 0


def test_clip_cov_excludes_tokens_ppo_already_clipped():
    g = torch.Generator().manual_seed(1)
    logps = -torch.rand(4, 6, generator=g) * 3
    old = logps + torch.randn(4, 6, generator=g)  # large off-policy drift: many tokens clipped
    adv = torch.randn(4, 1, generator=g)
    mask = torch.ones(4, 6, dtype=torch.bool)
    batch = TokenBatch(logps, old, adv, mask, 0.2, 0.2, "token")
    clipped = ppo_clipped_tokens(logps, old, adv, mask, 0.2, 0.2)
    assert clipped.any() and not clipped.all()
    args = cfg(clip_cov_ratio=1.0, clip_cov_lb=-1e9, clip_cov_ub=1e9,
                             entropy_control="none")
    control = ClipCovControl(args)
    cov = token_covariance(logps, adv, mask)
    selected = control.select(cov, batch, k=24, generator=torch.Generator().manual_seed(0))
    assert torch.equal(selected, mask & ~clipped)  # every candidate taken, none of the clipped ones


def test_kl_cov_loss_includes_the_kl_term_on_selected_tokens(tmp_path):
    args = tiny_args(tmp_path, max_steps=4, entropy_control="kl_cov", kl_cov_ratio=0.2, kl_cov_coef=0.7,
                     **OFF_POLICY)
    trainer = make_trainer(args)
    with Recorder() as rec:
        trainer.train()
    assert all(s > 0 for s in history(trainer, "entropy_control/selected_tokens"))
    kl_seen = 0.0
    for d in rec.records:
        selected = d["hooks"].kl_cov_mask
        assert selected.any()
        logps = d["per_token_logps"].detach()
        log_ratio = logps - d["old_per_token_logps"]
        expected = -d["advantages"] * torch.exp(log_ratio) + 0.7 * log_ratio.abs()
        torch.testing.assert_close(d["per_token_loss"][selected], expected.expand_as(selected)[selected])
        kl_seen += float(log_ratio.abs()[selected].sum())
    assert kl_seen > 0, "off-policy micro-batches must carry a non-zero |logp - old| on selected tokens"


def test_entropic_adjusts_high_probability_tokens_like_the_reference():
    g = torch.Generator().manual_seed(0)
    logps = torch.log(torch.rand(3, 5, generator=g) * 0.1 + torch.tensor([0.0, 0.9, 0.0, 0.9, 0.9]))
    old = logps.detach() + 0.1 * torch.randn(3, 5, generator=g)
    mask = torch.ones(3, 5)
    mask[2, 3:] = 0
    inputs = {"completion_mask": mask, "advantages": torch.tensor([1.5, -0.5, 2.0]), "old_per_token_logps": old}
    config = GRPOLossConfig(loss_type="bnpo")
    hp = (logps > math.log(0.95)) & (mask > 0)
    assert hp.any()
    lp = logps.clone().requires_grad_(True)
    base = compute_grpo_loss(lp, inputs, config)["loss"]
    alpha = 0.3
    adjusted = compute_grpo_loss(lp, inputs, config, hooks=TokenHooks(adjust_mask=hp, adjust_alpha=alpha))["loss"]
    r = torch.exp(logps - old)
    term = (-r * inputs["advantages"].abs()[:, None])[hp].mean()
    torch.testing.assert_close(adjusted - base, alpha * term)


# --------------------------------------------------------------------------------------------------------------------
# global scope: exact, and independent of how the step is split into micro-batches
# --------------------------------------------------------------------------------------------------------------------


def _batches(n_rows=16, t=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    logps = -torch.rand(n_rows, t, generator=g) * 4
    old = logps + 0.3 * torch.randn(n_rows, t, generator=g)
    adv = torch.randn(n_rows, 1, generator=g)
    mask = torch.rand(n_rows, t, generator=g) > 0.2
    return TokenBatch(logps, old, adv, mask, 0.2, 0.28, "token")


def _split(batch, size):
    return [
        TokenBatch(batch.logps[i : i + size], batch.old_logps[i : i + size], batch.advantages[i : i + size],
                   batch.mask[i : i + size], batch.epsilon_low, batch.epsilon_high, batch.importance_sampling_level)
        for i in range(0, batch.mask.shape[0], size)
    ]


IDENTITY = dict(reduce_sum=lambda t: t, gather=lambda t: t)  # one process


@pytest.mark.parametrize("name", ["kl_cov", "clip_cov"])
def test_global_plan_does_not_depend_on_micro_batch_size(name):
    args = cfg(kl_cov_ratio=0.05, clip_cov_ratio=0.05,
                             clip_cov_lb=-0.5, clip_cov_ub=0.5)
    cls = KLCovControl if name == "kl_cov" else ClipCovControl
    batch = _batches()
    selections = {}
    for size in (16, 8, 4, 2):
        control = cls(args)
        selections[size] = torch.cat(control.plan_window(_split(batch, size), **IDENTITY))
    for size in (8, 4, 2):
        assert torch.equal(selections[size], selections[16]), size
    n_valid = int(batch.mask.sum())
    k = max(1, int(0.05 * n_valid))
    if name == "kl_cov":  # the exact global top-k of the whole step
        cov = token_covariance(batch.logps, batch.advantages, batch.mask)
        assert torch.equal(selections[16], kl_cov_selection(cov, batch.mask, 0.05))
        assert int(selections[16].sum()) == k
    else:
        assert 0 < int(selections[16].sum()) <= k


def test_local_scope_selects_per_micro_batch_as_verl():
    args = cfg(kl_cov_ratio=0.05, cov_scope="local")
    batch = _batches()
    control = KLCovControl(args)
    total = 0
    for part in _split(batch, 4):
        hooks = control.token_hooks(part)
        cov = token_covariance(part.logps, part.advantages, part.mask)
        assert torch.equal(hooks.kl_cov_mask, kl_cov_selection(cov, part.mask, 0.05))
        total += int(hooks.kl_cov_mask.sum())
    assert total == 4  # max(1, int(0.05 * n)) per micro-batch: one each, vs 5 for the whole step
    assert control.step_counts()["selected"] == 4


def test_clip_cov_global_draw_matches_the_pure_function():
    args = cfg(clip_cov_ratio=0.05, clip_cov_lb=-0.5,
                             clip_cov_ub=0.5, seed=3)
    batch = _batches()
    control = ClipCovControl(args)
    seed_gen = control._generator(0)  # the generator the plan will use (same counter)
    control.draws = 0
    selected = torch.cat(control.plan_window(_split(batch, 4), **IDENTITY))
    clipped = ppo_clipped_tokens(batch.logps, batch.old_logps, batch.advantages, batch.mask, 0.2, 0.28)
    cov = token_covariance(batch.logps, batch.advantages, batch.mask)
    expected = clip_cov_selection(cov, batch.mask & ~clipped, 0.05, -0.5, 0.5, seed_gen,
                                  k=max(1, int(0.05 * int(batch.mask.sum()))))
    assert torch.equal(selected, expected)


# --------------------------------------------------------------------------------------------------------------------
# (c) on-policy warning
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["clip_cov", "kl_cov"])
def test_on_policy_warning(tmp_path, name):
    with pytest.warns(UserWarning, match="on-policy"):
        tiny_args(tmp_path, entropy_control=name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny_args(tmp_path, entropy_control=name, **OFF_POLICY)
        tiny_args(tmp_path, entropy_control=name, num_iterations=2)
    assert not [w for w in caught if "on-policy" in str(w.message)]


# --------------------------------------------------------------------------------------------------------------------
# (d) EntroPIC controller
# --------------------------------------------------------------------------------------------------------------------


def test_pi_controller_law_and_clamp():
    c = PIController(kp=1.0, ki=0.5)
    assert c.update(1.2, 1.0) == pytest.approx(0.2)  # I was 0
    assert c.integral == pytest.approx(0.2)
    assert c.update(1.1, 1.0) == pytest.approx(0.5 * 0.2 + 0.1)
    assert c.update(5.0, 1.0) == 1.0  # clamped
    assert c.update(-9.0, 1.0) == -1.0
    assert c.update(float("nan"), 1.0) == -1.0 and c.skipped == 1
    with pytest.raises(ValueError, match="kp"):
        PIController(kp=-1.0)
    with pytest.raises(ValueError, match="ki"):
        PIController(ki=float("inf"))


def test_pi_controller_state_dict_round_trip():
    a = PIController(kp=0.7, ki=0.1)
    for h in (1.3, 1.1, 0.8):
        a.update(h, 1.0)
    b = PIController(kp=0.7, ki=0.1)
    b.load_state_dict(a.state_dict())
    for h in (0.9, 1.4, 0.95):
        assert a.update(h, 1.0) == b.update(h, 1.0)
    assert a.state_dict() == b.state_dict()


def test_entropic_control_state_dict_round_trip_and_sign(tmp_path):
    args = tiny_args(tmp_path, entropy_control="entropic", entropy_schedule_start=1.0)
    a, b = EntropicControl(args), EntropicControl(args)
    a.observe(1.5, 1.0)
    assert a.knob > 0  # entropy above target: positive alpha (sharpen confident tokens)
    b.load_state_dict(a.state_dict())
    a.observe(0.2, 1.0)
    b.observe(0.2, 1.0)
    assert a.knob == b.knob < 0


# --------------------------------------------------------------------------------------------------------------------
# (e) short real runs: finite losses and the metrics, composed with schedules, loss types and IS levels
# --------------------------------------------------------------------------------------------------------------------

RUNS = [
    ("clip_cov", dict(clip_cov_ratio=0.1, clip_cov_lb=-10.0, clip_cov_ub=10.0, loss_type="dapo")),
    ("clip_cov", dict(clip_cov_ratio=0.1, clip_cov_lb=-10.0, clip_cov_ub=10.0, cov_scope="local", loss_type="dr_grpo",
                      importance_sampling_level="sequence")),
    ("kl_cov", dict(kl_cov_ratio=0.1, loss_type="grpo", importance_sampling_level="sequence", num_iterations=2,
                    steps_per_generation=1)),
    ("kl_cov", dict(kl_cov_ratio=0.1, cov_scope="local", loss_type="bnpo", gradient_accumulation_steps=2,
                    steps_per_generation=4, per_device_train_batch_size=4)),
    ("entropic", dict(entropy_schedule="linear", entropy_schedule_start=2.639, entropy_schedule_end=2.0,
                      entropic_high_prob_threshold=0.05, loss_type="dapo")),
    ("entropic", dict(entropy_schedule_start=2.0, entropic_high_prob_threshold=0.05, loss_type="grpo",
                      importance_sampling_level="sequence")),
]


@pytest.mark.parametrize("name, extra", RUNS)
def test_short_training_run(tmp_path, name, extra):
    kw = dict(max_steps=4, entropy_control=name, **OFF_POLICY)
    kw.update(extra)
    trainer = make_trainer(tiny_args(tmp_path, **kw))
    trainer.train()
    losses = history(trainer, "loss")
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
    selected = history(trainer, "entropy_control/selected_tokens")
    fraction = history(trainer, "entropy_control/selected_fraction")
    assert len(selected) == len(fraction) == 4
    assert all(0 <= f <= 1 for f in fraction)
    if name == "entropic":
        alpha = history(trainer, "entropy_control/alpha")
        assert len(alpha) == 4 and alpha[0] == 0.0 and alpha[-1] != 0.0  # acts from the second step on
        assert all(-1 <= a <= 1 for a in alpha)
        assert history(trainer, "entropy_control/target")
        assert sum(selected) > 0
    else:
        assert sum(selected) > 0
        cov_mean = history(trainer, "entropy_control/covariance_mean")
        cov_max = history(trainer, "entropy_control/covariance_max")
        assert len(cov_mean) == len(cov_max) == 4
        assert all(math.isfinite(m) and math.isfinite(x) and x >= m for m, x in zip(cov_mean, cov_max))


def test_global_scope_over_several_micro_batches_in_the_training_loop(tmp_path):
    """gradient_accumulation_steps=2: the extra-forward plan covers both micro-batches of each optimizer step, so
    KL-Cov selects exactly the quota of the step's total valid tokens."""
    args = tiny_args(tmp_path, max_steps=4, entropy_control="kl_cov", kl_cov_ratio=0.1, gradient_accumulation_steps=2,
                     steps_per_generation=4, per_device_train_batch_size=4)
    trainer = make_trainer(args)
    trainer.train()
    selected = history(trainer, "entropy_control/selected_tokens")
    fraction = history(trainer, "entropy_control/selected_fraction")
    assert len(selected) == 4 and all(math.isfinite(x) for x in history(trainer, "loss"))
    for sel, frac in zip(selected, fraction):
        valid = round(sel / frac)
        assert sel == max(1, int(0.1 * valid))


@pytest.mark.parametrize("name", ["kl_cov", "clip_cov"])
def test_single_micro_batch_global_plan_runs_no_extra_forward_and_selects_the_same(tmp_path, name, monkeypatch):
    """gradient_accumulation_steps=1: the global selection comes from the loss forward itself (no extra no-grad
    forward) and equals the one planned from the extra forward, step for step."""
    kw = dict(max_steps=4, entropy_control=name, kl_cov_ratio=0.1, clip_cov_ratio=0.1, clip_cov_lb=-10.0,
              clip_cov_ub=10.0, **OFF_POLICY)
    runs = {}
    for inline in (True, False):
        monkeypatch.setattr(GRPOEntropyTrainer, "_inline_single_micro_batch_plan", inline)
        trainer = make_trainer(tiny_args(tmp_path / str(inline), **kw))
        forwards = []
        original = GRPOTrainer._get_per_token_logps_and_entropies

        def counting(self, *args, **kwargs):
            forwards.append(torch.is_grad_enabled())
            return original(self, *args, **kwargs)

        monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", counting)
        trainer.train()
        monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", original)
        runs[inline] = (history(trainer, "entropy_control/selected_tokens"), history(trainer, "loss"),
                        forwards.count(False))
    (sel_inline, loss_inline, nograd_inline), (sel_extra, loss_extra, nograd_extra) = runs[True], runs[False]
    assert sel_inline == sel_extra and sum(sel_inline) > 0
    assert loss_inline == pytest.approx(loss_extra, rel=1e-5, abs=1e-7)
    assert nograd_extra - nograd_inline == 4  # one extra no-grad forward per optimizer step saved


@pytest.mark.parametrize("scope", ["global", "local"])
def test_covariance_diagnostics_match_a_hand_computation(scope):
    """covariance_mean is the token-level Cov(logp, A) of the step (Cui et al.'s quantity), covariance_max its
    largest centred product; local scope: over each micro-batch's own centring, as verl computes it."""
    control = KLCovControl(cfg(kl_cov_ratio=0.05, cov_scope=scope))
    batch = _batches()
    parts = _split(batch, 4)
    if scope == "global":
        control.plan_window(parts, **IDENTITY)
        covs = [token_covariance(batch.logps, batch.advantages, batch.mask)[batch.mask]]
    else:
        covs = []
        for part in parts:
            control.token_hooks(part)
            covs.append(token_covariance(part.logps, part.advantages, part.mask)[part.mask])
    values = torch.cat(covs).double()
    metrics = control.step_metrics(control.step_counts())
    assert metrics["covariance_mean"] == pytest.approx(float(values.mean()), rel=1e-9)
    assert metrics["covariance_max"] == pytest.approx(float(values.max()), rel=1e-6)
    if scope == "global":  # = mean(l*A) - mean(l)*mean(A) over the valid tokens
        adv = batch.advantages.expand_as(batch.logps)[batch.mask].double()
        logp = batch.logps[batch.mask].double()
        expected = float((logp * adv).mean() - logp.mean() * adv.mean())
        assert metrics["covariance_mean"] == pytest.approx(expected, rel=1e-6)
    # read resets: an empty next step reports no covariance (never NaN or -inf)
    assert "covariance_mean" not in control.step_metrics(control.step_counts())


# --------------------------------------------------------------------------------------------------------------------
# (f) config validation
# --------------------------------------------------------------------------------------------------------------------


def tiny_moe_model(seed=0):
    """A Mixture-of-Experts model of the tiny model's size: TRL enables its router auxiliary loss
    (`router_aux_loss_coef` = 0.001 from the model config), which trl_entropy's own loss path does not implement."""
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    torch.manual_seed(seed)
    config = Qwen2MoeConfig(vocab_size=14, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            num_key_value_heads=1, intermediate_size=64, moe_intermediate_size=16,
                            shared_expert_intermediate_size=16, num_experts=2, num_experts_per_tok=1,
                            max_position_embeddings=64, pad_token_id=0, eos_token_id=1, bos_token_id=1,
                            tie_word_embeddings=True)
    return Qwen2MoeForCausalLM(config)


@pytest.mark.parametrize("case", ["moe_router_aux_loss", "loss_type_changed_after_the_config_was_built"])
def test_unsupported_loss_settings_fail_when_the_trainer_is_built(tmp_path, case, monkeypatch):
    """A setting our loss path lacks that the config cannot see (the model's MoE router loss) or no longer sees (a
    field changed after validation) raises in GRPOEntropyTrainer.__init__, before anything is generated."""
    generated = []
    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", lambda *a, **k: generated.append(1))
    model, match = tiny_model(0), "loss_type='cispo'"
    args = tiny_args(tmp_path, max_steps=1, entropy_control="clip_cov", clip_cov_ratio=0.1, **OFF_POLICY)
    if case == "moe_router_aux_loss":
        model, match = tiny_moe_model(0), "auxiliary loss"
    else:
        args.loss_type = "cispo"  # validated as "dapo" when the config was built; TRL's trainer reads it later
    with pytest.raises(NotImplementedError, match=match):
        GRPOEntropyTrainer(model=model, reward_funcs=count_ones_reward, args=args, train_dataset=tiny_dataset(),
                           processing_class=tiny_tokenizer())
    assert not generated  # refused at construction, not at the first loss step
    # without the control, the same model and settings build (the check is the token-hook controls' only)
    args.entropy_control = "none"
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=count_ones_reward, args=args,
                                 train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    assert trainer.entropy_control is None


@pytest.mark.parametrize(
    "kw, field",
    [
        # a control's own settings are checked when that control is chosen (tests/test_controls_registry.py)
        (dict(entropy_control="clip_cov", clip_cov_ratio=-0.1), "clip_cov_ratio"),
        (dict(entropy_control="clip_cov", clip_cov_ratio=1.5), "clip_cov_ratio"),
        (dict(entropy_control="kl_cov", kl_cov_ratio=2.0), "kl_cov_ratio"),
        (dict(entropy_control="kl_cov", kl_cov_ratio=float("nan")), "kl_cov_ratio"),
        (dict(entropy_control="clip_cov", clip_cov_lb=5.0, clip_cov_ub=5.0), "clip_cov_lb"),
        (dict(entropy_control="clip_cov", clip_cov_lb=6.0), "clip_cov_lb"),
        (dict(entropy_control="clip_cov", clip_cov_ub=float("inf")), "clip_cov_ub"),
        (dict(entropy_control="kl_cov", kl_cov_coef=-1.0), "kl_cov_coef"),
        (dict(entropy_control="entropic", entropy_schedule_start=1.0, entropic_high_prob_threshold=1.0),
         "entropic_high_prob_threshold"),
        (dict(entropy_control="entropic", entropy_schedule_start=1.0, entropic_high_prob_threshold=0.0),
         "entropic_high_prob_threshold"),
        (dict(entropy_control="entropic", entropy_schedule_start=1.0, entropic_kp=-0.1), "entropic_kp"),
        (dict(entropy_control="entropic", entropy_schedule_start=1.0, entropic_ki=-0.1), "entropic_ki"),
        (dict(entropy_control="kl_cov", cov_scope="step"), "cov_scope"),
        (dict(entropy_control="kl_cov", loss_type="cispo"), "loss_type"),
        (dict(entropy_control="entropic", entropy_schedule_start=1.0, loss_type="sapo"), "loss_type"),
        (dict(entropy_control="entropic"), "entropy_schedule_start"),
        (dict(entropy_control="clip_cov", use_adaptive_entropy=True, allow_trl_adaptive_entropy=True),
         "use_adaptive_entropy"),
    ],
)
def test_invalid_configs_name_the_field(tmp_path, kw, field):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError) as err:
            tiny_args(tmp_path, **kw)
    assert field in str(err.value)


def test_defaults_match_the_references(tmp_path):
    args = tiny_args(tmp_path)
    assert (args.clip_cov_ratio, args.clip_cov_lb, args.clip_cov_ub) == (2e-4, 1.0, 5.0)
    assert (args.kl_cov_ratio, args.kl_cov_coef) == (2e-3, 1.0)
    assert (args.entropic_kp, args.entropic_ki, args.entropic_high_prob_threshold) == (1.0, 0.01, 0.95)
    assert args.cov_scope == "global"
