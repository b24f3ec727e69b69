"""entropy_control="entropy_bonus", "trl_adaptive", entropy_bonus_assist and targets relative to the initial entropy,
through TRL's real training loop on the tiny random model."""

import copy
import math
import warnings

import pytest
import torch
from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_kwargs, tiny_model, tiny_tokenizer

from trl_entropy import EntropyScheduleCallback, GRPOEntropyConfig, GRPOEntropyTrainer
from trl_entropy.scheduling.targets import warn_if_end_looks_like_a_fraction

OFF_POLICY = dict(per_device_train_batch_size=8, steps_per_generation=2, learning_rate=1e-2)


def make(args, model_seed=0, cls=GRPOEntropyTrainer):
    return cls(model=tiny_model(model_seed), reward_funcs=count_ones_reward, args=args, train_dataset=tiny_dataset(),
               processing_class=tiny_tokenizer())


def logged(trainer, key):
    return [h[key] for h in trainer.state.log_history if key in h]


def test_negative_coefficient_gradient_flows_through_trl_entropies(tmp_path):
    """TRL's fused head returns per-token entropies whose gradient is that of the softmax entropy, so
    `loss - c * H` with c < 0 is an entropy penalty with the right gradient."""
    trainer = make(tiny_args(tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=1.0))
    model = trainer.model
    torch.manual_seed(0)
    ids = torch.randint(2, 14, (3, 9))
    mask = torch.ones_like(ids)
    coef = -0.3
    _, entropies, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, 4, compute_entropy=True)
    model.zero_grad()
    (-coef * entropies.mean()).backward()
    fused = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    assert fused, "no gradient reached the model through TRL's entropies"

    model.zero_grad()
    logits = model(input_ids=ids, attention_mask=mask).logits[:, -5:-1] / trainer.temperature
    logp = torch.log_softmax(logits.float(), dim=-1)
    reference = -(logp.exp() * logp).sum(-1)
    assert torch.allclose(entropies, reference, atol=1e-3)
    (-coef * reference.mean()).backward()
    # TRL's fused kernel computes in its own chunked order: equal up to float rounding (~1e-4 relative here)
    ours = torch.cat([fused[n].flatten() for n, p in model.named_parameters() if n in fused])
    ref = torch.cat([p.grad.flatten() for n, p in model.named_parameters() if n in fused])
    assert torch.nn.functional.cosine_similarity(ours, ref, dim=0) > 0.999
    assert ours.norm() == pytest.approx(float(ref.norm()), rel=0.02)


def test_fixed_negative_coefficient_equals_trl_static_penalty(tmp_path):
    """With its gains at 0 the control holds entropy_coef = -0.05: the same training as TRL's own static
    entropy_coef = -0.05 (TRL's loss applies it: no fork)."""
    common = dict(OFF_POLICY, max_steps=3, entropy_coef=-0.05)
    ours = make(tiny_args(tmp_path / "a", entropy_control="entropy_bonus", entropy_schedule_start=1.0,
                          entropy_bonus_kp=0.0, entropy_bonus_ki=0.0, entropy_bonus_kff=0.0,
                          entropy_bonus_min=-0.05, **common))
    ours.train()
    from trl import GRPOConfig, GRPOTrainer

    theirs = make(GRPOConfig(**tiny_kwargs(tmp_path / "b", **common)), cls=GRPOTrainer)
    theirs.train()
    for (n, a), (_, b) in zip(ours.model.named_parameters(), theirs.model.named_parameters()):
        assert torch.allclose(a, b, atol=1e-6), n
    assert logged(ours, "entropy_control/entropy_coef") == [-0.05] * 3
    assert logged(ours, "entropy_coef") == logged(theirs, "entropy_coef")


def test_penalty_and_bonus_move_entropy_apart(tmp_path):
    """The sign matters: a target far below pushes the coefficient negative, far above positive; entropy ends lower
    under the penalty."""
    runs = {}
    for name, target in (("low", 0.3), ("high", 2.63)):
        trainer = make(tiny_args(tmp_path / name, max_steps=8, entropy_control="entropy_bonus",
                                 entropy_schedule_start=target, entropy_bonus_kp=2.0, entropy_bonus_ki=0.5,
                                 entropy_bonus_min=-1.0, entropy_bonus_max=1.0, **OFF_POLICY))
        trainer.train()
        runs[name] = trainer
    low, high = (logged(runs[n], "entropy_control/entropy_coef") for n in ("low", "high"))
    assert low[0] == 0.0 and high[0] == 0.0  # no coefficient before the first measurement
    assert all(c < 0 for c in low[1:]) and high[-1] > 0
    assert logged(runs["low"], "entropy_control/measured")[-1] < logged(runs["high"], "entropy_control/measured")[-1]
    for key in ("target", "measured", "tracking_error", "bonus_integral", "bonus_feedforward"):
        assert len(logged(runs["low"], f"entropy_control/{key}")) == 8, key


def test_trl_adaptive_equals_grpo_trainer_with_schedule_callback(tmp_path):
    """entropy_control='trl_adaptive' is TRL's use_adaptive_entropy with the schedule driving entropy_target: the
    same run as a plain GRPOTrainer with EntropyScheduleCallback."""
    sched = dict(entropy_schedule="linear", entropy_schedule_start=2.63, entropy_schedule_end=2.3)
    common = dict(OFF_POLICY, max_steps=6, entropy_coef_delta=0.05)
    ours = make(tiny_args(tmp_path / "a", entropy_control="trl_adaptive", **sched, **common))
    assert ours.args.use_adaptive_entropy
    ours.train()
    from trl import GRPOConfig, GRPOTrainer

    theirs = make(GRPOConfig(**tiny_kwargs(tmp_path / "b", use_adaptive_entropy=True, **common)), cls=GRPOTrainer)
    theirs.add_callback(EntropyScheduleCallback("linear", trainer=theirs, start=2.63, end=2.3))
    theirs.train()
    assert logged(ours, "entropy_coef") == pytest.approx(logged(theirs, "entropy_coef"))
    assert logged(ours, "loss") == pytest.approx(logged(theirs, "loss"))
    assert logged(ours, "entropy_control/entropy_coef") == pytest.approx(logged(theirs, "entropy_coef"))
    assert logged(ours, "entropy_control/target") == pytest.approx(logged(theirs, "entropy_control/target"))
    assert max(logged(ours, "entropy_coef")) > 0  # the rule acted


def test_initial_entropy_resolves_the_schedule(tmp_path):
    args = tiny_args(tmp_path, max_steps=4, entropy_control="entropy_bonus", entropy_schedule="linear",
                     entropy_schedule_start="initial", entropy_schedule_end="0.5*initial", **OFF_POLICY)
    trainer = make(args)
    assert trainer.entropy_target is None
    trainer.train()
    h0 = trainer.initial_entropy
    assert h0 is not None and 0 < h0 <= math.log(14)
    assert logged(trainer, "entropy_control/initial_entropy") == [pytest.approx(h0)]
    targets = logged(trainer, "entropy_control/target")
    assert targets == pytest.approx([h0 * (1 - 0.5 * s / 3) for s in range(4)])
    # the first generation batch, measured before any update: the first step's measured entropy covers half of it
    assert logged(trainer, "entropy_control/measured")[0] == pytest.approx(h0, rel=0.05)


def test_a_bare_end_beside_a_relative_start_says_it_is_read_in_nats(tmp_path):
    """start="initial" with end=0.5: the end is 0.5 nats, not half the initial entropy. The run goes on (0.5 nats may
    be meant), and a warning names the resolved start and how to write a fraction."""
    args = tiny_args(tmp_path, max_steps=2, entropy_control="entropy_bonus", entropy_schedule="linear",
                     entropy_schedule_start="initial", entropy_schedule_end=0.5)
    trainer = make(args)
    message = r"ends at entropy_schedule_end = 0.5 nats.*write entropy_schedule_end='0.5\*initial'"
    with pytest.warns(UserWarning, match=message):
        trainer.train()
    assert logged(trainer, "entropy_control/target")[-1] == pytest.approx(0.5)
    for end in ("0.5*initial", 1.5):  # a fraction, written as one; an end above 1, plainly in nats
        trainer = make(tiny_args(tmp_path, max_steps=1, entropy_control="entropy_bonus", entropy_schedule="linear",
                                 entropy_schedule_start="initial", entropy_schedule_end=end))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warn_if_end_looks_like_a_fraction(trainer.args, 2.0)
        assert not caught


def test_a_target_above_log_vocabulary_is_refused_at_construction(tmp_path):
    with pytest.raises(ValueError, match=r"entropy_schedule_start = 3 nats .*log\(vocabulary size\) = 2.639"):
        make(tiny_args(tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=3.0))


def test_a_relative_target_above_log_vocabulary_is_refused_at_the_first_batch(tmp_path):
    trainer = make(tiny_args(tmp_path, max_steps=2, entropy_control="entropy_bonus",
                             entropy_schedule_start="2*initial"))
    with pytest.raises(ValueError, match=r"2\*initial with an initial entropy of"):
        trainer.train()


def test_assist_takes_over_when_the_paper_knob_saturates(tmp_path):
    """Adaptive clip on fully on-policy updates cannot act; with a one-value range it is at its limit from the first
    step, so after the assist window the bonus acts (and is logged as acting)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = tiny_args(tmp_path, max_steps=8, entropy_control="adaptive_clip", entropy_schedule_start=2.63,
                         adaptive_clip_window=1, adaptive_clip_max=0.2, entropy_bonus_assist=True,
                         entropy_bonus_assist_window=2, entropy_bonus_kp=1.0)
    trainer = make(args)
    trainer.train()
    active = logged(trainer, "entropy_control/assist_active")
    coef = logged(trainer, "entropy_control/entropy_coef")
    assert len(active) == 8 and active[0] == 0.0 and 1.0 in active
    first = active.index(1.0)
    assert all(c == 0.0 for c in coef[:first]) and coef[first] != 0.0
    assert logged(trainer, "entropy_control/epsilon_high")  # the paper's knob is still logged
    assert trainer.entropy_coef == coef[-1]  # the coefficient TRL applies


@pytest.mark.parametrize("kwargs, match", [
    (dict(entropy_control="entropy_bonus", entropy_bonus_assist=True), "needs a target-following paper control"),
    (dict(entropy_control="clip_cov", entropy_bonus_assist=True), "needs a target-following paper control"),
    (dict(entropy_control="entropy_bonus", use_adaptive_entropy=True), "use_adaptive_entropy"),
    (dict(entropy_control="entropy_bonus", entropy_bonus_max=-0.1), "entropy_bonus_max must be a number in"),
    (dict(entropy_control="entropy_bonus", entropy_bonus_kp=-1.0), "entropy_bonus_kp"),
    (dict(entropy_control="entropy_bonus", entropy_coef=0.7), "entropy_coef .* must lie in"),
    (dict(entropy_control="entropy_bonus", entropy_bonus_compensation_clip="Symmetric"),
     "entropy_bonus_compensation_clip must be one of"),
    (dict(entropy_control="entropy_bonus", entropy_bonus_compensation_clip="hold_symmetric"),
     "entropy_bonus_compensation_clip must be one of"),
    (dict(entropy_control="entropy_bonus", entropy_schedule_start="initialx"), "entropy_schedule_start must be"),
    (dict(entropy_control="entropy_bonus", entropy_schedule_start="-0.5*initial"), "entropy_schedule_start"),
    (dict(entropy_control="entropy_bonus", entropy_schedule="wsd", entropy_schedule_start="0.5*initial",
          entropy_schedule_end="0.8*initial"), "anneals the target down"),
])
def test_config_errors(tmp_path, kwargs, match):
    kwargs.setdefault("entropy_schedule_start", 1.0)
    with pytest.raises(ValueError, match=match):
        GRPOEntropyConfig(**tiny_kwargs(tmp_path, **kwargs))


def test_config_accepts_command_line_strings(tmp_path):
    args = GRPOEntropyConfig(**tiny_kwargs(tmp_path, entropy_control="entropy_bonus", entropy_schedule="wsd",
                                           entropy_schedule_start="0.8", entropy_schedule_end="initial * 0.5"))
    assert args.entropy_schedule_start == 0.8 and args.entropy_schedule_end == "0.5*initial"
    assert args.schedule_needs_initial_entropy


class _StubKnob:
    """A paper control reduced to what the assist reads: its saturation push, set by the test."""

    knob_name = "epsilon_high"

    def __init__(self):
        self.limit_push = 0

    def observe(self, measured, target):
        pass

    def metrics(self):
        return {}

    def state_dict(self):
        return {"push": self.limit_push}

    def load_state_dict(self, state):
        self.limit_push = state["push"]


def _assisted(tmp_path, window=2, **kwargs):
    from trl_entropy.controls import AssistedControl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = tiny_args(tmp_path, entropy_control="adaptive_clip", entropy_schedule_start=1.0,
                         entropy_bonus_assist=True, entropy_bonus_assist_window=window, **kwargs)
    return AssistedControl(_StubKnob(), args)


def test_assist_keeps_acting_while_its_integral_still_holds_the_direction_it_was_called_for(tmp_path):
    """The paper's knob leaves its limit because the bonus closed the error, or because entropy overshoots: neither
    hands back (measured failure: adaptive clip on SmolLM2, entropy collapsing again after each hand-back). The
    bonus hands back once it is idle: the integral bled away and the law quiet, with the entropy on target. (A
    penalty bound of -0.5, so that the overshoot below unwinds the integral instead of sitting at the bound.)"""
    ctl = _assisted(tmp_path, entropy_bonus_min=-0.5)
    ctl.inner.limit_push = 1  # clip bound at its upper limit, entropy below target
    for _ in range(3):
        ctl.observe(0.6, 1.0)
    assert ctl.active and ctl.called_for == 1 and ctl.bonus.law > 0
    ctl.inner.limit_push = 0  # the knob leaves its limit while entropy is still below target: the law stays positive
    for _ in range(6):
        ctl.observe(0.6, 1.0)
    assert ctl.active and ctl.bonus.integral > 0
    for _ in range(15):  # an overshoot unwinds the integral, but the law is far from quiet: no hand-back
        ctl.observe(1.6, 1.0)
    assert ctl.active and ctl.bonus.integral < 0 < ctl.idle + 1
    for step in range(300):  # back on target: the law goes quiet, the integral settles near 0, then the hand-back
        ctl.observe(1.0, 1.0)
        if not ctl.active:
            break
    assert not ctl.active and ctl.handovers == 1 and step >= ctl.window
    coef = ctl.bonus.value
    ctl.observe(1.0, 1.0)
    assert abs(ctl.bonus.value) <= abs(coef) * ctl.HANDBACK_DECAY + 1e-12  # handed back: the coefficient decays


def test_assist_direction_survives_resume(tmp_path):
    ctl = _assisted(tmp_path)
    ctl.inner.limit_push = 1
    for _ in range(4):
        ctl.observe(0.6, 1.0)
    state = ctl.state_dict()
    other = _assisted(tmp_path)
    other.load_state_dict(state)
    assert other.called_for == ctl.called_for == 1 and other.active
    legacy = dict(state)
    legacy.pop("called_for")  # a state saved before the rule: the direction the bonus pushes when loaded
    old = _assisted(tmp_path)
    old.load_state_dict(legacy)
    assert old.called_for == 1 and old.active


def test_assist_bleeds_its_load_back_to_a_knob_that_has_recovered(tmp_path):
    """With the error closed and the paper's knob off its limits, the bonus's integral shrinks step by step and the
    bonus hands back; while the knob sits at its limit again, nothing bleeds."""
    ctl = _assisted(tmp_path)
    ctl.inner.limit_push = 1
    for _ in range(30):
        ctl.observe(0.6, 1.0)
    held = ctl.bonus.integral
    assert ctl.active and held > 0.05
    alone = copy.deepcopy(ctl.bonus)  # the same law with no assist around it
    for _ in range(5):  # still saturated, on target: nothing bleeds (the integral moves only by the law's own sums)
        ctl.observe(1.0, 1.0)
        alone.update(1.0, 1.0)
    assert ctl.bonus.integral == alone.integral >= held
    ctl.inner.limit_push = 0
    steps = 0
    while ctl.active and steps < 200:
        ctl.observe(1.0, 1.0)
        steps += 1
    assert not ctl.active and 10 < steps < 100


def test_the_compensation_clip_field_reaches_the_controller(tmp_path):
    from trl_entropy.controls import _bonus_controller

    args = GRPOEntropyConfig(**tiny_kwargs(tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=1.0,
                                           entropy_bonus_compensation_clip="bounds"))
    assert _bonus_controller(args).compensation_clip == "bounds"
    default = _bonus_controller(GRPOEntropyConfig(**tiny_kwargs(
        tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=1.0)))
    assert (default.ki, default.compensation_clip) == (0.03, "symmetric")


def test_a_field_removed_after_pre_law_cut_is_refused(tmp_path):
    """The variants removed after the ``pre-law-cut`` tag are no fields any more: setting one is a TypeError that
    names it (the dataclass's own), not a silent no-op."""
    with pytest.raises(TypeError, match="entropy_bonus_antiwindup"):
        GRPOEntropyConfig(**tiny_kwargs(tmp_path, entropy_control="entropy_bonus", entropy_schedule_start=1.0,
                                        entropy_bonus_antiwindup="upper"))
