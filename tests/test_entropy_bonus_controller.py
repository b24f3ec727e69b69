"""EntropyBonusController alone: hand-computed steps, step response, bounds and anti-windup, a negative coefficient,
feed-forward, state round trip, and a closed loop on a simulated plant with delay-free integrating dynamics."""

import copy
import math
import random

import pytest

from trl_entropy.scheduling import EntropyBonusController


def make(**kw):
    base = dict(kp=0.05, ki=0.005, kff=2.0, c_min=-0.1, c_max=0.1, horizon=3.0, level_smoothing=0.3,
                trend_smoothing=0.2, bound_limit=None, momentum_compensation=0.0)
    # hand-computed cases: the law's output applied as it is, fixed bounds; closed loops: defaults
    base.update(kw)
    return EntropyBonusController(**base)


def test_first_steps_by_hand():
    c = make()
    # step 1: level = 0.5 (first measurement), trend 0, prediction 0.5; e = (1 - 0.5)/1 = 0.5; no slope yet; the
    # integral sums the level's error, also 0.5
    v1 = c.update(0.5, 1.0)
    assert c.predicted == pytest.approx(0.5)
    assert c.error == pytest.approx(0.5)
    assert v1 == pytest.approx(0.0 + 0.05 * 0.5)  # I (0) + kp e; ff 0
    assert c.integral == pytest.approx(0.005 * 0.5)
    # the level's error (0.5) is beyond twice the level's noise (0.25 * sqrt(0.3 / 1.7) = 0.105): its sign is noted,
    # the boost stays 1 (no earlier sign to persist)
    assert (c.boost, c.error_sign) == (1.0, 1)
    # step 2: measured 0.7 -> level = 0.3*0.7 + 0.7*(0.5 + 0) = 0.56; trend = 0.2*(0.06) = 0.012
    # prediction 0.56 + 3*0.012 = 0.596; e = 0.404; c = 0.0025 + 0.05*0.404 (the law: gains before this step's
    # boost); the level's error 1 - 0.56 = 0.44 keeps its sign, beyond twice the level's noise (the noise now
    # sqrt(0.9 * 0.0625 + 0.1 * (0.2 / 0.5)^2) = 0.269, the level's 0.113) with the prediction agreeing: the boost
    # grows to 1.15, and the integral sums 0.44 at the boosted gain (authority and noise cap both at 1 still)
    v2 = c.update(0.7, 1.0)
    assert c.level == pytest.approx(0.56)
    assert c.trend == pytest.approx(0.012)
    assert c.predicted == pytest.approx(0.596)
    assert c.noise == pytest.approx(math.sqrt(0.9 * 0.0625 + 0.1 * 0.16))
    assert v2 == pytest.approx(0.0025 + 0.05 * 0.404)
    assert c.boost == pytest.approx(1.15) and c.authority.gain_scale == 1.0 and c.noise_cap == 1.0
    assert c.integral == pytest.approx(0.0025 + 1.15 * 0.005 * 0.44)


def test_step_response_signs():
    low = make()
    assert all(low.update(0.2, 1.0) > 0 for _ in range(5))  # entropy below target: a bonus
    high = make()
    assert all(high.update(2.0, 1.0) < 0 for _ in range(5))  # above target: a penalty (negative coefficient)
    assert high.value < 0 and high.integral < 0


def test_relative_error_is_clipped():
    c = make(ki=0.0, horizon=0.0)
    c.update(5.0, 1.0)  # (1 - 5) / 1 = -4, clipped to -1
    assert c.error == -1.0 and c.value == pytest.approx(-0.05)


def test_bounds_and_anti_windup():
    c = make(kp=0.05, ki=0.02, c_max=0.1)
    for _ in range(200):  # a long collapse the knob cannot undo: the output sits at c_max
        c.update(0.0, 1.0)
    assert c.value == pytest.approx(0.1)
    assert c.integral <= 0.1 + 1e-12  # the integral does not wind up past the bound
    assert c.limit_push == 1
    # once entropy is above the target the coefficient falls at once (no wound-up integral to unwind first)
    for _ in range(3):
        c.update(2.0, 1.0)
    assert c.value < 0.1 - 0.04


def test_limit_push_at_lower_bound():
    c = make(c_min=-0.01)
    for _ in range(50):
        c.update(3.0, 1.0)
    assert c.value == pytest.approx(-0.01) and c.limit_push == -1


def test_feedforward_follows_the_target_slope():
    # on target and flat: nothing; then the target falls by 1% of itself per step: ff = kff * slope / target
    c = make(kp=0.0, ki=0.0)
    c.update(1.0, 1.0)
    assert c.value == pytest.approx(0.0)
    c.update(1.0, 0.99)
    assert c.feedforward == pytest.approx(2.0 * -0.01 / 0.99)
    assert c.value == pytest.approx(c.feedforward)


def test_prediction_brakes_a_fast_rise_before_the_target():
    with_horizon, without = make(horizon=3.0), make(horizon=0.0)
    for h in (0.2, 0.4, 0.6, 0.8):  # rising fast toward a target of 1.0, still below it
        with_horizon.update(h, 1.0)
        without.update(h, 1.0)
    assert with_horizon.predicted > without.predicted
    assert with_horizon.value < without.value


def test_nonfinite_measurements_are_skipped():
    c = make()
    c.update(0.5, 1.0)
    state = c.state_dict()
    assert c.update(math.nan, 1.0) == c.value
    assert c.update(0.5, math.inf) == c.value
    assert c.skipped == 2
    assert {k: v for k, v in c.state_dict().items() if k != "skipped"} == \
        {k: v for k, v in state.items() if k != "skipped"}


def test_state_round_trip_continues_exactly():
    rng = random.Random(0)
    seq = [(rng.uniform(0.2, 2.0), 1.0 - 0.01 * i) for i in range(30)]
    a = make()
    for m, t in seq[:15]:
        a.update(m, t)
    b = make()
    b.load_state_dict(a.state_dict())
    assert [a.update(m, t) for m, t in seq[15:]] == [b.update(m, t) for m, t in seq[15:]]


def test_decay_and_track_hand_back():
    c = make()
    for _ in range(10):
        c.update(0.2, 1.0)
    before = c.value
    c.track(0.9, 1.0)
    assert c.value == before  # tracking moves no output
    c.decay(0.5)
    assert c.value == pytest.approx(before * 0.5)


@pytest.mark.parametrize("bad", [dict(kp=-1.0), dict(ki=math.nan), dict(c_min=0.1), dict(c_max=-0.1),
                                 dict(level_smoothing=0.0), dict(trend_smoothing=1.5), dict(horizon=-1.0)])
def test_bad_arguments_are_refused(bad):
    with pytest.raises(ValueError):
        make(**bad)


def simulate(controller_update, steps=150, seed=0, target=lambda t: 1.0, lag=0.5, authority=0.6):
    """A simplified plant with the shape measured on SmolLM2: entropy drifts down by itself, fast at first (the
    policy gradient sharpens the policy), a coefficient c moves it by ``authority * h * c`` per step through a lag
    (the optimizer's momentum), and each step's measurement carries 10% noise. Returns the mean relative error of
    the true entropy after the first 20% of steps. A guard against sign errors and instability of the law, not a
    performance claim: the benchmarks measure that on a real model."""
    rng = random.Random(seed)
    h, c, lagged, errors = 1.2, 0.0, 0.0, []
    for t in range(steps):
        drift = 0.02 + 0.08 * math.exp(-t / 10)
        lagged = (1 - lag) * lagged + lag * c
        h = min(4.0, max(0.02, h * (1 - drift + authority * lagged)))
        c = controller_update(max(0.0, h * (1 + rng.gauss(0.0, 0.1))), target(t))
        if t >= steps // 5:
            errors.append(abs(h - target(t)) / target(t))
    return sum(errors) / len(errors)


def wsd(t, steps=150):
    return 1.0 if t < 105 else 1.0 - 0.5 * (t - 105) / 44


def test_closed_loop_holds_a_constant_and_an_anneal_target():
    hold = [simulate(EntropyBonusController().update, seed=s) for s in range(3)]
    anneal = [simulate(EntropyBonusController().update, seed=s, target=wsd) for s in range(3)]
    open_loop = simulate(lambda measured, target: 0.0)
    assert open_loop > 0.5  # without control the plant collapses
    assert sum(hold) / 3 < 0.08 and sum(anneal) / 3 < 0.10


def test_closed_loop_with_the_signs_flipped_fails():
    """The test above would catch a sign error: the same law pushing the wrong way loses the target."""
    flipped = EntropyBonusController()
    assert simulate(lambda m, t: -flipped.update(m, t)) > 0.5


def test_a_bound_pushed_past_grows_up_to_its_limit():
    c = make(kp=0.5, ki=0.05, c_min=-0.2, c_max=0.2, bound_limit=1.0, bound_patience=3)
    maxima = []
    for _ in range(40):  # a collapse no coefficient undoes: the upper bound grows 0.2, 0.3, 0.45, 0.675, 1.0
        c.update(0.0, 1.0)
        maxima.append(c.c_max)
    assert sorted(set(maxima)) == pytest.approx([0.2, 0.3, 0.45, 0.675, 1.0])
    assert c.value == pytest.approx(1.0) and c.c_min == -0.2  # the other bound is untouched
    assert c.limit_push == 1  # saturated only once the bound can grow no more
    early = make(kp=0.5, ki=0.05, bound_limit=1.0, bound_patience=3)
    for _ in range(3):
        early.update(0.0, 1.0)
    assert early.limit_push == 0  # at 0.2, but that bound can still grow


def test_bounds_stay_when_the_push_is_shorter_than_the_patience():
    c = make(kp=0.5, bound_limit=1.0, bound_patience=10)
    for _ in range(9):
        c.update(0.0, 1.0)
    assert (c.c_min, c.c_max, c.pushed) == (-0.1, 0.1, 9)
    c.update(0.0, 1.0)
    assert c.c_max == pytest.approx(0.15) and c.pushed == 0


def test_grown_bounds_survive_a_state_round_trip():
    a = make(kp=0.5, ki=0.05, bound_limit=1.0, bound_patience=2)
    for _ in range(9):
        a.update(0.0, 1.0)
    b = make(kp=0.5, ki=0.05, bound_limit=1.0, bound_patience=2)
    b.load_state_dict(a.state_dict())
    assert (b.c_min, b.c_max, b.pushed) == (a.c_min, a.c_max, a.pushed)
    assert [a.update(0.1, 1.0) for _ in range(5)] == [b.update(0.1, 1.0) for _ in range(5)]


# --- the online authority estimate (adapt_gain) ---------------------------------------------------------------

def multiplicative_plant(controller_update, g, steps=120, seed=0, momentum=0.9, noise=0.1, pull=0.03):
    """log H moves by g * (momentum-averaged coefficient) - pull per step; measurements carry `noise`. Returns the
    controller's per-step outputs and the measured entropies."""
    rng = random.Random(seed)
    h, averaged, outputs, readings = 1.0, 0.0, [], []
    for t in range(steps):
        reading = h * (1 + noise * rng.gauss(0.0, 1.0))
        readings.append(reading)
        c = controller_update(reading, 1.0)
        outputs.append(c)
        averaged = momentum * averaged + (1 - momentum) * c
        h = min(5.0, max(0.02, h * math.exp(g * averaged - pull)))
    return outputs, readings


@pytest.mark.parametrize("g", [0.4, 1.0, 2.5])
def test_authority_estimate_recovers_the_plant_gain_open_loop(g):
    from trl_entropy.scheduling import AuthorityEstimator

    est = AuthorityEstimator(prior=1.0, momentum=0.9, prior_variance=10.0)  # the regression alone: a vague prior
    rng = random.Random(10)
    step = 0.1 / g  # moves entropy about as much on every plant, as a closed loop would
    excitation = [rng.choice([-step, 0.0, step]) for _ in range(30) for _ in range(5)]  # held 5 steps each
    it = iter(excitation)

    def open_loop(measured, target):
        est.observe(measured)
        c = next(it)
        est.applied(c)
        return c

    multiplicative_plant(open_loop, g, steps=150, pull=0.0)
    assert est.updates > 100
    assert est.estimate == pytest.approx(g, rel=0.2)  # over seeds: ~10% low, +-25% (10% measurement noise)


def test_the_prior_keeps_the_first_regressions_from_swinging_the_gains():
    """With the default prior variance (1) the estimate after warm-up stays near the prior while the evidence is
    thin; with a vague prior (10) the same data swing it: the 5x gain spike measured on SmolLM2."""
    from trl_entropy.scheduling import AuthorityEstimator

    def first_used_estimate(prior_variance):
        est = AuthorityEstimator(prior=1.0, prior_variance=prior_variance)
        rng = random.Random(4)
        h = 1.0
        for t in range(40):  # the coefficient rises while entropy, delayed, still falls: the effect not yet seen
            est.observe(h * (1 + 0.1 * rng.gauss(0.0, 1.0)))
            est.applied(0.01 * t)
            h *= math.exp(-0.02)
            if est.updates == est.warmup:
                return est.estimate
        raise AssertionError("warm-up never ended")

    assert abs(math.log(first_used_estimate(1.0))) < 0.5 * abs(math.log(first_used_estimate(10.0)))


class WithoutBoost(EntropyBonusController):
    """The law with the persistence boost held at 1: the authority estimate's part of ``adapt_gain`` alone."""
    BOOST_UP = BOOST_DOWN = 1.0


def test_adaptive_gain_lowers_the_gains_on_a_strong_knob_and_raises_them_on_a_weak_one():
    """The authority estimate, with the boost held at 1 (``WithoutBoost``): the boost's own tests are below. With
    the boost, the closed loop's gains end lower on both knobs (the boost sinks to its floor of 0.25 by noise-driven
    sign flips above 1 sigma), the coefficient moves less, the regression sees less excitation and leans further to
    its prior: on seed 0 the strong knob's authority scale is 0.76 with the boost and 0.66 without."""
    strong, weak = WithoutBoost(), WithoutBoost()
    multiplicative_plant(strong.update, 2.5)
    multiplicative_plant(weak.update, 0.4)
    assert strong.authority.gain_scale < 0.75 and weak.authority.gain_scale > 1.2  # closed loop: lean to the prior
    for c in (strong, weak):
        assert c.boost == 1.0 and c.gain_scale == pytest.approx(min(c.authority.gain_scale, c.noise_cap))
    boosted = EntropyBonusController()  # with the boost the estimate still lowers the gains, less far
    multiplicative_plant(boosted.update, 2.5)
    assert boosted.authority.gain_scale < 0.9
    assert boosted.gain_scale == pytest.approx(min(boosted.authority.gain_scale, boosted.noise_cap) * boosted.boost)
    fixed = EntropyBonusController(adapt_gain=False)
    multiplicative_plant(fixed.update, 2.5)
    assert fixed.gain_scale == 1.0 and fixed.authority.estimate != 1.0  # estimated, not used


def test_adaptive_gain_tracks_better_than_fixed_gains_across_a_range_of_authorities():
    """What the authority estimate is for (benchmarks/controller_sim.py has the full picture): over a 6x range of
    the knob's authority, the same defaults hold the target better when the gains follow the estimate. The
    persistence boost is held at 1 here (``WithoutBoost``), so that this compares the estimate alone with fixed
    gains."""
    def mean_error(adapt):
        errors = []
        for g in (0.4, 2.5):
            for seed in range(3):
                c = WithoutBoost() if adapt else EntropyBonusController(adapt_gain=False)
                _, readings = multiplicative_plant(c.update, g, seed=seed, noise=0.15)
                smooth = [sum(readings[max(0, i - 9):i + 1]) / len(readings[max(0, i - 9):i + 1])
                          for i in range(len(readings))]
                errors += [abs(x - 1.0) for x in smooth[24:]]
        return sum(errors) / len(errors)

    # with the bounds of -0.5 / 0.5 the fixed gains do better on the strong knob than they did at -0.1 / 0.5, so
    # the estimate's margin is smaller than it was (0.73 of the fixed gains' error then, 0.92 now; over ten triples
    # of seeds 0.88-0.97)
    assert mean_error(True) < 0.95 * mean_error(False)


def test_authority_estimate_is_held_within_its_spread_and_survives_a_round_trip():
    from trl_entropy.scheduling import AuthorityEstimator

    est = AuthorityEstimator(prior=1.0, spread=2.0, momentum=0.0, warmup=3)
    for i in range(40):  # entropy leaps tenfold per unit of coefficient: far above prior * spread
        est.observe(math.exp(0.5 * (i % 2)))
        est.applied(0.05 * (i % 2))
    assert 0.5 <= est.estimate <= 2.0
    copy = AuthorityEstimator(prior=1.0, spread=2.0, momentum=0.0, warmup=3)
    copy.load_state_dict(est.state_dict())
    for i in range(10):
        for e in (est, copy):
            e.observe(1.0 + 0.1 * i)
            e.applied(0.01 * i)
    assert copy.state_dict() == est.state_dict()


def test_a_collapsed_or_missing_measurement_restarts_the_windows():
    from trl_entropy.scheduling import AuthorityEstimator

    est = AuthorityEstimator()
    for _ in range(12):
        est.observe(1.0)
        est.applied(0.1)
    before = est.updates
    est.observe(0.0)  # a collapsed policy: log-entropy undefined
    est.observe(1.0)
    assert est.updates == before and len(est.logs) == 1


def test_long_state_round_trip_with_the_estimate_in_use():
    rng = random.Random(3)
    seq = [(rng.uniform(0.5, 1.5), 1.0) for _ in range(80)]
    a = EntropyBonusController()
    for m, t in seq[:50]:
        a.update(m, t)
    assert a.authority.updates >= a.authority.warmup  # the estimate is in use at the checkpoint
    b = EntropyBonusController()
    b.load_state_dict(a.state_dict())
    assert [a.update(m, t) for m, t in seq[50:]] == [b.update(m, t) for m, t in seq[50:]]


@pytest.mark.parametrize("bad", [dict(prior=0.0), dict(prior=math.inf), dict(window=1), dict(forgetting=0.0),
                                 dict(momentum=1.0), dict(spread=0.5), dict(prior_variance=0.0)])
def test_bad_estimator_arguments_are_refused(bad):
    from trl_entropy.scheduling import AuthorityEstimator

    with pytest.raises(ValueError):
        AuthorityEstimator(**bad)


# --- momentum compensation --------------------------------------------------------------------------------------

def _adam_first_moments(controller, readings, target=1.0, beta1=0.9):
    """Apply the controller's coefficients as the gradient of a scalar under torch's Adam (step 1 uses the initial
    coefficient, as in training) and return, per update, (law output, Adam's bias-corrected first moment)."""
    import torch

    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adam([p], lr=1e-3, betas=(beta1, 0.999))
    p.grad = torch.tensor([controller.value])
    opt.step()
    out = []
    for reading in readings:
        c = controller.update(reading, target)
        p.grad = torch.tensor([c], dtype=torch.float32)
        opt.step()
        state = opt.state[p]
        step = float(state["step"])
        out.append((controller.law, float(state["exp_avg"]) / (1 - beta1**step)))
    return out


def test_full_compensation_makes_adams_average_follow_the_law_at_once():
    rng = random.Random(0)
    readings = [1.0 + 0.3 * math.sin(t / 4) + 0.05 * rng.gauss(0, 1) for t in range(60)]
    c = EntropyBonusController(momentum=0.9, momentum_compensation=1.0, c_min=-1.0, c_max=1.0, bound_limit=None)
    applied = []
    update = c.update
    c.update = lambda m, t: applied.append(update(m, t)) or applied[-1]
    pairs = _adam_first_moments(c, readings)
    # a step held at twice the bounds, or raised to 0 by the no-penalty floor (a reading below the target), breaks
    # the identity; the next free step restores it. These readings do not answer the coefficient, so the error
    # persists, the boost grows and about a third of the steps are held at twice the bounds: 28 of 60 are free
    floored = [r < 1.0 and (law == 0.0 or v == 0.0) for r, (law, _), v in zip(readings, pairs, applied)]
    free = [pair for pair, v, f in zip(pairs, applied, floored) if abs(v) < 2.0 and not f]
    assert any(floored) and len(free) > 20
    assert max(abs(law - avg) for law, avg in free) < 1e-5
    assert c.averaged == pytest.approx(pairs[-1][1], abs=1e-5)
    # without compensation Adam's average lags the law by several steps
    plain = _adam_first_moments(EntropyBonusController(c_min=-1.0, c_max=1.0, bound_limit=None), readings)
    assert max(abs(law - avg) for law, avg in plain) > 0.05


def test_half_compensation_lies_between():
    rng = random.Random(1)
    readings = [1.0 + 0.3 * math.sin(t / 4) + 0.05 * rng.gauss(0, 1) for t in range(60)]
    lags = {}
    for comp in (0.0, 0.5, 1.0):
        c = EntropyBonusController(momentum_compensation=comp, c_min=-1.0, c_max=1.0, bound_limit=None)
        lags[comp] = sum(abs(law - avg) for law, avg in _adam_first_moments(c, readings))
    assert lags[1.0] < lags[0.5] < lags[0.0]


def test_compensation_off_applies_the_law_and_no_momentum_means_nothing_to_cancel():
    rng = random.Random(2)
    seq = [(rng.uniform(0.5, 1.5), 1.0) for _ in range(40)]
    a = EntropyBonusController(momentum_compensation=0.0)
    b = EntropyBonusController(momentum=0.0, momentum_compensation=1.0)
    for m, t in seq:
        assert a.update(m, t) == a.law
        assert b.update(m, t) == b.law


def test_compensated_coefficient_is_held_within_twice_the_bounds():
    c = EntropyBonusController(momentum_compensation=1.0, c_min=-0.1, c_max=0.1, bound_limit=None, kp=5.0)
    values = [c.update(m, 1.0) for m in (0.1,) * 5 + (3.0,) * 5]
    assert all(-0.2 <= v <= 0.2 for v in values) and min(values) == pytest.approx(-0.2)
    assert max(values) > 0.1  # beyond the law's own bound: the momentum still holds the early zeros
    assert all(-0.1 <= v <= 0.1 for v in (c.law, c.integral))


def _swing(clip):
    """The law driven up to its bonus bound, then down to its penalty bound, with bounds -0.1 / 0.5 (the defaults'
    asymmetry); the applied coefficients."""
    c = EntropyBonusController(momentum_compensation=1.0, c_min=-0.1, c_max=0.5, bound_limit=None, kp=5.0,
                               compensation_clip=clip)
    return c, [c.update(m, 1.0) for m in (0.1,) * 12 + (3.0,) * 12]


def test_symmetric_compensation_reaches_as_far_down_as_up():
    """With asymmetric bounds the kick that cancels the momentum's lag may go as far down as up with "symmetric":
    +-2 * max(0.5, 0.1) = +-1 (the default). Within twice each bound ("bounds", the tight recipe's) it stops
    at -0.2 on the way down while it reached above 0.5 on the way up: the average lags on every turn downward only."""
    sym, up_down = _swing("symmetric")
    old, held = _swing("bounds")
    assert max(up_down) > 0.5 and max(held) > 0.5  # the turn up kicks past the bonus bound in both
    assert min(held) == pytest.approx(-0.2) and min(up_down) < -0.5  # the turn down: held at 2 * c_min, or not
    assert all(-1.0 <= v <= 1.0 for v in up_down)
    assert sym.averaged < old.averaged  # the symmetric kick has brought the optimizer's average down further


@pytest.mark.parametrize("clip", ["symmetric", "bounds"])
def test_the_optimizers_average_stays_within_the_bounds_whatever_the_kick(clip):
    """Every applied coefficient lies between the law and the full compensation, so Adam's bias-corrected average
    lands between its previous value and the law's: within [c_min, c_max] (as torch's Adam keeps it), however far
    the applied coefficient itself went."""
    rng = random.Random(7)
    readings = [rng.choice((0.2, 0.6, 1.0, 1.8, 3.0)) for _ in range(80)]
    c = EntropyBonusController(momentum_compensation=1.0, c_min=-0.1, c_max=0.5, bound_limit=None, kp=2.0,
                               compensation_clip=clip)
    applied = []
    update = c.update
    c.update = lambda m, t: applied.append(update(m, t)) or applied[-1]
    pairs = _adam_first_moments(c, readings)
    assert min(applied) < -0.2 or clip != "symmetric"  # the symmetric kick does go past twice the penalty bound
    assert all(-0.1 - 1e-6 <= avg <= 0.5 + 1e-6 for _, avg in pairs)


def test_bad_compensation_clip_is_refused_and_kept_in_the_state():
    with pytest.raises(ValueError, match="entropy_bonus_compensation_clip"):
        EntropyBonusController(compensation_clip="hold_symmetric")
    assert EntropyBonusController().state_dict()["config"]["compensation_clip"] == "symmetric"


def test_compensation_state_round_trip_continues_exactly():
    rng = random.Random(5)
    seq = [(rng.uniform(0.5, 1.5), 1.0) for _ in range(60)]
    a = EntropyBonusController(momentum_compensation=0.5)
    for m, t in seq[:30]:
        a.update(m, t)
    b = EntropyBonusController(momentum_compensation=0.5)
    b.load_state_dict(a.state_dict())
    assert (b.authority.u, b.moment_steps, b.law) == (a.authority.u, a.moment_steps, a.law)
    assert [a.update(m, t) for m, t in seq[30:]] == [b.update(m, t) for m, t in seq[30:]]


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, "1"])
def test_bad_momentum_compensation_is_refused(bad):
    with pytest.raises(ValueError, match="momentum_compensation"):
        EntropyBonusController(momentum_compensation=bad)


# --- the noise cap on the gain scale ----------------------------------------------------------------------------

def _noisy_readings(noise, n=80, seed=0):
    rng = random.Random(seed)
    return [1.0 * (1 + noise * rng.gauss(0, 1)) for _ in range(n)]


def test_noise_estimate_follows_the_measurement_noise():
    clean, noisy = EntropyBonusController(), EntropyBonusController()
    for a, b in zip(_noisy_readings(0.03), _noisy_readings(0.4, seed=1)):
        clean.update(a, 1.0)
        noisy.update(b, 1.0)
    assert clean.noise < 0.08 < 0.3 < noisy.noise
    assert clean.noise_cap > 3.0 and noisy.noise_cap == 1.0


def test_gains_rise_above_the_reference_only_on_a_clean_measurement():
    """A weak knob (the authority estimate at its floor) raises the gains 5x when the measurement is clean, not at
    all when it is as noisy as the SmolLM2 testbed's; lowering them is never limited. (The capped authority scale:
    the persistence boost multiplies it, and is tested on its own.)"""
    def final_scale(g, noise):
        c = EntropyBonusController()
        multiplicative_plant(c.update, g, noise=noise, steps=150)
        return c, c.gain_scale / c.boost  # the capped authority scale, without the persistence boost on top

    clean, s_clean = final_scale(0.1, 0.02)
    noisy, s_noisy = final_scale(0.1, 0.3)
    assert clean.authority.gain_scale > 2.0 and noisy.authority.gain_scale > 2.0  # both see a weak knob
    assert s_clean > 2.0 and s_noisy == pytest.approx(noisy.noise_cap) and s_noisy < 1.5
    strong, s_strong = final_scale(2.5, 0.3)
    # a strong knob lowers the gains whatever the noise: the noise cap never limits a lowering
    assert s_strong == pytest.approx(strong.authority.gain_scale) and s_strong < 0.7


def test_the_noise_cap_reads_the_step_reading_when_one_is_noted():
    """entropy_measurement="generation_batch": the law acts on a steady estimate, but the noise cap is read on the
    step's own, noisy reading, so the gains do not rise because only the input got steadier."""
    steady, noted = EntropyBonusController(), EntropyBonusController()
    for reading in _noisy_readings(0.4, seed=1):
        steady.update(1.0, 1.0)  # the estimate alone: no noise at all
        noted.note_step_reading(reading)
        noted.update(1.0, 1.0)
    assert steady.noise < 0.05 and steady.noise_cap > 4.0
    assert noted.noise > 0.3 and noted.noise_cap == 1.0
    assert noted.level == steady.level and noted.value == steady.value  # the law itself acts on the estimate
    assert noted.step_reading is None  # used by one update only
    noted.note_step_reading(float("nan"))  # a non-finite reading is ignored: the estimate's own innovation counts
    before = noted.noise_var
    noted.update(1.0, 1.0)
    assert noted.noise_var < before


def test_noise_state_round_trip_and_bad_reference():
    a = EntropyBonusController()
    for m in _noisy_readings(0.2, n=30):
        a.update(m, 1.0)
    b = EntropyBonusController()
    b.load_state_dict(a.state_dict())
    assert b.noise == a.noise
    with pytest.raises(ValueError, match="noise reference"):
        EntropyBonusController(noise_reference=0.0)


def _falling(t):
    return 1.0 - 0.01 * t  # a target that falls every step


def test_level_integral_sums_the_filtered_levels_error_by_hand():
    c = make(adapt_gain=False)  # fixed gains: the persistence boost (test_first_steps_by_hand) off
    c.update(0.5, 1.0)  # first step: level 0.5, no trend, so both errors are 0.5
    assert c.integral == pytest.approx(0.005 * 0.5)
    c.update(0.7, 1.0)  # level 0.56, prediction 0.596 (test_first_steps_by_hand): the integral sums 1 - 0.56
    assert c.predicted == pytest.approx(0.596)
    assert c.integral == pytest.approx(0.0025 + 0.005 * 0.44)
    assert c.value == pytest.approx(0.0025 + 0.05 * 0.404)  # the law's proportional term keeps the prediction


def test_level_integral_does_not_wind_up_against_a_bound():
    c = make(ki=0.02, c_max=0.1)
    for _ in range(200):
        c.update(0.0, 1.0)
    assert c.value == pytest.approx(0.1) and c.integral <= 0.1 + 1e-12


def test_level_integral_state_round_trip_continues_exactly():
    rng = random.Random(1)
    seq = [(rng.uniform(0.3, 1.8), 1.0) for _ in range(40)]
    a = EntropyBonusController(ki=0.03)
    for m, t in seq[:20]:
        a.update(m, t)
    b = EntropyBonusController(ki=0.03)
    b.load_state_dict(a.state_dict())
    assert [a.update(m, t) for m, t in seq[20:]] == [b.update(m, t) for m, t in seq[20:]]


def test_level_integral_holds_both_targets_on_the_simulated_plant():
    for target in (None, wsd):
        kw = {} if target is None else {"target": target}
        errs = [simulate(EntropyBonusController(ki=0.03).update, seed=s, **kw)
                for s in range(3)]
        assert sum(errs) / 3 < 0.10


def test_the_prediction_is_compared_with_the_target_of_its_own_step_by_hand():
    """horizon 3: after a flat step the target falls 0.02 a step; the target compared is 3 slopes ahead."""
    c = make(kp=0.05, ki=0.0, kff=0.0)
    c.update(1.0, 1.0)
    c.update(0.98, 0.98)  # level 0.3*0.98 + 0.7*1.0 = 0.994, trend 0.2*(-0.006) = -0.0012
    assert c.predicted == pytest.approx(0.994 + 3 * -0.0012)
    ahead = 0.98 + 3 * -0.02
    assert c.error == pytest.approx((ahead - c.predicted) / ahead)


def test_entropy_that_follows_an_anneal_reads_no_error():
    """Noise-free entropy falling exactly along its target: the target ``horizon`` steps ahead matches the
    prediction, so the law reads (almost) no error once the filter has the trend."""
    ahead = make(horizon=6.0, ki=0.0)
    for t in range(60):
        target = 1.0 if t < 20 else 1.0 - 0.01 * (t - 20)
        ahead.update(target, target)
    assert abs(ahead.error) < 0.01


def test_the_horizons_target_holds_a_jump_within_a_factor_2():
    c = make(horizon=6.0)
    assert c.target_ahead(0.5, -0.5) == pytest.approx(0.25)  # a jump from 1.0 to 0.5: not 0.5 - 6 * 0.5
    assert c.target_ahead(1.0, 0.5) == pytest.approx(2.0)
    assert make(horizon=0.0).target_ahead(1.0, -0.01) == pytest.approx(0.99)  # at least one step ahead


def test_the_horizons_target_holds_an_anneal_on_the_simulated_plant():
    errs = [simulate(EntropyBonusController().update, seed=s, target=wsd) for s in range(3)]
    assert sum(errs) / 3 < 0.10



def test_signal_fraction_is_smoothed_and_bad_values_ignored():
    c = EntropyBonusController()
    assert c.signal is None
    c.note_signal(0.5)  # the first value is taken as it is
    assert c.signal == 0.5
    c.note_signal(0.0)
    assert c.signal == pytest.approx(0.9 * 0.5)  # weight SIGNAL_SMOOTHING (0.1) on the newest step
    for bad in (math.nan, math.inf, -0.1, 1.5, None, "0.5"):
        c.note_signal(bad)
    assert c.signal == pytest.approx(0.45)


def _at_the_lower_bound(**kw):
    """A controller whose integral holds a standing bonus of 0.1 and whose reading jumps far above the target, so
    that the proportional term drives the law to its lower bound (-0.1) with the error negative."""
    c = EntropyBonusController(adapt_gain=False, momentum_compensation=0.0, kp=2.0, c_min=-0.1, **kw)
    for _ in range(20):
        c.update(1.0, 1.0)
    c.integral = 0.1
    c.update(1.6, 1.0)
    return c


def test_conditional_antiwindup_stops_the_integral_at_the_lower_bound():
    c = _at_the_lower_bound()
    assert c.law == pytest.approx(-0.1) and c.error < 0
    assert c.integral == pytest.approx(0.1)  # frozen: the overshoot does not reach the integral


def test_the_integral_stops_at_the_upper_bound():
    c = EntropyBonusController(adapt_gain=False, momentum_compensation=0.0, kp=5.0, bound_limit=None)
    c.update(1.0, 1.0)
    c.integral = 0.3
    c.update(0.2, 1.0)  # far below the target: the law at +0.5 with the error positive
    assert c.law == pytest.approx(c.c_max) and c.error > 0
    assert c.integral == pytest.approx(0.3)


def test_a_state_saved_with_the_removed_variants_loads():
    """A checkpoint written before the law cut (tag ``pre-law-cut``) holds keys of variants removed since (the pull
    term, the removed switches in its config): it loads, those keys ignored, and training continues exactly."""
    rng = random.Random(2)
    seq = [(rng.uniform(0.3, 1.8), 1.0) for _ in range(40)]
    a = EntropyBonusController()
    for m, t in seq[:20]:
        a.update(m, t)
    old = a.state_dict()
    old["pull_term"] = 0.0
    old["config"].update(anneal_min=None, integral_error="level", pull_gain=0.0, pull_smoothing=0.3,
                         target_lookahead="horizon", integral_scale="none", antiwindup="conditional",
                         integral_clip=1.0, integral_beyond="clip", lower_ki_fraction=0.0)
    b = EntropyBonusController()
    b.load_state_dict(old)
    assert [a.update(m, t) for m, t in seq[20:]] == [b.update(m, t) for m, t in seq[20:]]


# --- the persistence boost (adapt_gain) and the no-penalty floor ----------------------------------------------

def test_the_boost_grows_while_a_significant_error_persists_and_halves_when_it_flips():
    c = make()  # level smoothing 0.3: the level's noise is 0.42 times the measurement's
    boosts = []
    for _ in range(6):  # far below the target: the level's error (0.5) persists, well beyond its noise
        c.update(0.5, 1.0)
        boosts.append(c.boost)
    # the first step notes the sign; each later one multiplies by BOOST_UP (the prediction agrees: no trend)
    assert boosts == pytest.approx([1.15**k for k in range(6)])
    assert c.error_sign == 1 and c.authority.gain_scale == 1.0
    assert c.gain_scale == pytest.approx(c.boost)  # the gains carry it (authority and noise cap at 1 so far)
    for _ in range(4):  # far above: the level's error crosses 0 (step 1 within the noise: held), then flips
        c.update(2.0, 1.0)
        boosts.append(c.boost)
    b = 1.15**5
    # step 2's error is -1.7 sigma: above the noise, of the other sign, so it halves the boost (a flip within 2
    # sigma held it before a183290); steps 3-4 are beyond 2 sigma with the sign kept: they grow it
    assert boosts[6:] == pytest.approx([b, b * 0.5, b * 0.5 * 1.15, b * 0.5 * 1.15**2]) and c.error_sign == -1
    for _ in range(30):  # a persistent error: the boost stops at the top of its range
        c.update(2.0, 1.0)
    assert c.boost == 8.0
    c.boost = 0.3
    for _ in range(10):  # and a flip halves it down to the bottom of its range only
        c.update(0.2, 1.0)
        if c.error_sign == 1:
            break
    assert c.error_sign == 1 and c.boost == 0.25
    # one step of the rule at a known noise, the level's error in units of the level's noise: any flip above 1
    # sigma halves the boost, growth needs more than 2 sigma with the sign kept
    assert _boost_step(1.05, sign_before=-1) == (1.0, 1)
    assert _boost_step(-1.95, sign_before=1) == (1.0, -1)
    assert _boost_step(2.05, sign_before=1) == (pytest.approx(2.3), 1)
    assert _boost_step(-5.0, sign_before=-1) == (pytest.approx(2.3), -1)


def _boost_step(sigmas, sign_before, prediction=None, boost=2.0):
    """(boost, error_sign) after one step of the boost's rule from ``boost`` and ``sign_before``, with a level's
    error of ``sigmas`` times the level's noise (the measurement's noise fixed at 0.2) and the prediction's error of
    sign ``prediction`` (by default that of the level's error)."""
    c = make()
    c.noise_var = 0.2**2
    level_noise = 0.2 * math.sqrt(0.3 / (2.0 - 0.3))  # an exponential average (weight 0.3) of that noise
    c.boost, c.error_sign = boost, sign_before
    c.error = 0.5 * (prediction if prediction is not None else math.copysign(1.0, sigmas))
    c._adapt_boost(sigmas * level_noise)
    return c.boost, c.error_sign


def test_the_boost_holds_within_the_noise_or_while_the_prediction_closes_the_error():
    small = make()
    small.update(0.9, 1.0)  # an error of 0.1: within the level's noise (0.105) on the first step
    assert (small.boost, small.error_sign) == (1.0, 0)
    for _ in range(9):  # above it from the next step on (the noise estimate shrinks), but never twice it
        small.update(0.9, 1.0)
    assert (small.boost, small.error_sign) == (1.0, 1)  # the sign noted, the boost held
    # at a known noise: within 1 sigma nothing changes, the sign included; between 1 and 2 sigma with the sign
    # kept the sign is noted and the boost held
    for sign_before in (-1, 0, 1):
        for sigmas in (0.95, -0.95, 0.0):
            assert _boost_step(sigmas, sign_before) == (2.0, sign_before)
    assert _boost_step(1.95, sign_before=1) == (2.0, 1)
    assert _boost_step(-1.5, sign_before=-1) == (2.0, -1)
    assert _boost_step(1.5, sign_before=0) == (2.0, 1)  # the first significant error notes its sign only
    assert _boost_step(5.0, sign_before=0) == (2.0, 1)
    assert _boost_step(5.0, sign_before=1, prediction=-1) == (2.0, 1)  # the prediction closes it: held
    fast = make(horizon=10.0)
    for _ in range(4):
        fast.update(0.5, 1.0)
    before = fast.boost
    assert before > 1.0
    fast.trend = 0.1  # the filter sees the entropy rising fast: the prediction ahead is past the target
    fast.update(0.5, 1.0)
    assert fast.level < 1.0 < fast.predicted and fast.error < 0  # the level's error persists, the prediction not
    assert (fast.boost, fast.error_sign) == (before, 1)
    fixed = make(adapt_gain=False)
    for _ in range(10):
        fixed.update(0.5, 1.0)
    assert (fixed.boost, fixed.gain_scale) == (1.0, 1.0)  # adapt_gain=False: no boost either


def test_no_penalty_while_the_reading_is_below_the_target_even_with_a_negative_integral():
    """Entropy rising past its target winds the integral down and the law to a penalty; one reading below the
    target (the filtered level still above it) sets the law and the applied coefficient to 0, not to a penalty.
    The same state with a reading at the target does apply one."""
    c = EntropyBonusController()  # the defaults: momentum compensation 0.5
    for i in range(8):
        c.update(1.0 + 0.1 * i, 1.0)
    assert c.integral < 0 and c.law < 0
    at, u = copy.deepcopy(c), c.authority.u
    c.update(0.95, 1.0)
    at.update(1.0, 1.0)
    assert c.integral < 0 and c.level > 1.0  # the integral and the filter still ask for a penalty
    assert c.law == 0.0 and c.value == 0.0
    assert c.authority.u == pytest.approx(0.9 * u)  # the optimizer's average records the 0 applied
    assert at.law < -0.1 and at.value < -0.1  # at the target, the penalty


def test_a_state_round_trip_keeps_the_boost_and_its_sign():
    seq = [0.5] * 5 + [2.0] * 12  # a persistent error, then one of the other sign: the boost grows, halves, grows
    a = EntropyBonusController()
    for m in seq[:5]:
        a.update(m, 1.0)
    state = a.state_dict()
    assert state["boost"] > 1.0 and state["error_sign"] == 1
    b = EntropyBonusController()
    b.load_state_dict(state)
    assert (b.boost, b.error_sign) == (a.boost, a.error_sign)
    rest_a = [(a.update(m, 1.0), a.boost) for m in seq[5:]]
    assert [(b.update(m, 1.0), b.boost) for m in seq[5:]] == rest_a
    # restored without them (a state saved before the boost), the run goes differently: the keys carry it
    older = EntropyBonusController()
    older.load_state_dict({k: v for k, v in state.items() if k not in ("boost", "error_sign")})
    assert (older.boost, older.error_sign) == (1.0, 0)
    assert [(older.update(m, 1.0), older.boost) for m in seq[5:]] != rest_a
