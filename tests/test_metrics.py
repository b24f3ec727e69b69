import dataclasses
import math
import random
from fractions import Fraction

import pytest
import torch

from trl_entropy.metrics import EntropyPerformanceFit, fit_entropy_performance, pass_at_k

# ---------------------------------------------------------------- pass@k


def _exact(n, c, k):
    if n - c < k:
        return 1.0
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (2, 1, 1, 0.5),
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (10, 0, 5, 0.0),  # no correct sample
        (10, 10, 1, 1.0),  # all correct
        (10, 8, 3, 1.0),  # n - c = 2 < k = 3
        (8, 3, 1, 3 / 8),  # pass@1 = c / n
        (1, 0, 1, 0.0),
        (1, 1, 1, 1.0),
    ],
)
def test_pass_at_k_hand_cases(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-15)


def test_pass_at_k_matches_exact_binomials_up_to_n_1024():
    rng = random.Random(0)
    cases = [(n, c, k) for n in (3, 16, 100) for c in range(n + 1) for k in (1, 2, n // 2, n)]
    for n in (256, 1000, 1024):
        cases += [(n, c, k) for c in (0, 1, 2, 5, 50, n // 2, n - 3, n) for k in (1, 2, 4, 32, 256, n)]
        cases += [(n, rng.randint(0, n), rng.randint(1, n)) for _ in range(40)]
    for n, c, k in cases:
        assert abs(pass_at_k(n, c, k) - _exact(n, c, k)) <= 1e-12, (n, c, k)


def test_pass_at_k_is_monotone_in_k_and_c():
    n = 64
    for c in (1, 7, 30):
        vals = [pass_at_k(n, c, k) for k in range(1, n + 1)]
        assert all(a <= b + 1e-15 for a, b in zip(vals, vals[1:]))
    vals = [pass_at_k(n, c, 4) for c in range(n + 1)]
    assert all(a <= b + 1e-15 for a, b in zip(vals, vals[1:]))


@pytest.mark.parametrize(
    "n, c, k, match",
    [(5, 6, 1, "c must"), (5, -1, 1, "c must"), (5, 2, 0, "k must"), (5, 2, 6, "k must"), (0, 0, 1, "n must"),
     (5.0, 2, 1, "n must"), (5, 2, True, "k must")],
)
def test_pass_at_k_validation(n, c, k, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)


def test_pass_at_k_accepts_integer_like_types():
    assert pass_at_k(torch.tensor(4).item(), 1, 2) == pytest.approx(0.5)
    np = pytest.importorskip("numpy")
    assert pass_at_k(np.int64(4), np.int64(1), np.int64(2)) == pytest.approx(0.5)


# ---------------------------------------------------------------- entropy-performance fit


def test_fit_recovers_noiseless_parameters():
    a, b = 0.5, 1.2
    hs = [0.05 * i for i in range(1, 21)]
    rs = [-a * math.exp(h) + b for h in hs]
    fit = fit_entropy_performance(hs, rs)
    assert isinstance(fit, EntropyPerformanceFit)
    assert fit.a == pytest.approx(a, abs=1e-6) and fit.b == pytest.approx(b, abs=1e-6)
    assert fit.ceiling == pytest.approx(0.7, abs=1e-6)
    assert fit.rmse < 1e-9 and fit.n_points == 20
    assert fit.predict(0.0) == pytest.approx(0.7, abs=1e-6)
    assert fit.predict(1.0) == pytest.approx(1.2 - 0.5 * math.e, abs=1e-6)
    pred = fit.predict(torch.tensor([0.0, 1.0], dtype=torch.float64))
    assert torch.allclose(pred, torch.tensor([0.7, 1.2 - 0.5 * math.e], dtype=torch.float64), atol=1e-6)


def test_fit_three_points_hand_case():
    # x = exp(H) = 1, e, e^2 ; R = 2 - 1 * x exactly  ->  a = 1, b = 2, ceiling = 1
    fit = fit_entropy_performance([0.0, 1.0, 2.0], [1.0, 2 - math.e, 2 - math.e**2])
    assert (fit.a, fit.b, fit.ceiling) == pytest.approx((1.0, 2.0, 1.0), abs=1e-9)


def test_fit_noisy_points_and_input_types():
    rng = random.Random(0)
    a, b, sigma = 0.3, 0.9, 0.01
    hs = [rng.uniform(0.1, 1.0) for _ in range(50)]
    rs = [-a * math.exp(h) + b + rng.gauss(0, sigma) for h in hs]
    fit = fit_entropy_performance(torch.tensor(hs, dtype=torch.float64), rs)
    assert fit.a == pytest.approx(a, abs=0.02) and fit.b == pytest.approx(b, abs=0.03)
    assert 0.5 * sigma < fit.rmse < 2 * sigma
    fit_tuple = fit_entropy_performance(tuple(hs), tuple(rs))
    assert fit_tuple.a == pytest.approx(fit.a, abs=1e-12)
    np = pytest.importorskip("numpy")
    assert fit_entropy_performance(np.array(hs), np.array(rs)).b == pytest.approx(fit.b, abs=1e-12)


def test_fit_is_frozen():
    fit = fit_entropy_performance([0.1, 0.2, 0.3], [0.5, 0.4, 0.3])
    with pytest.raises(dataclasses.FrozenInstanceError):
        fit.a = 1.0


@pytest.mark.parametrize(
    "hs, rs, match",
    [
        ([0.1, 0.2], [0.5, 0.4], "at least 3"),
        ([0.1, 0.2, 0.3], [0.5, 0.4], "same length"),
        ([0.1, math.nan, 0.3], [0.5, 0.4, 0.3], "finite"),
        ([0.1, 0.2, 0.3], [0.5, math.inf, 0.3], "finite"),
        ([0.4, 0.4, 0.4], [0.5, 0.4, 0.3], "identical"),
        ([0.1, 0.2, 1000.0], [0.5, 0.4, 0.3], "overflow"),
        (["a", 0.2, 0.3], [0.5, 0.4, 0.3], "entropies"),
    ],
)
def test_fit_validation(hs, rs, match):
    with pytest.raises(ValueError, match=match):
        fit_entropy_performance(hs, rs)


# ---------------------------------------------------------------- tracking error (issue 53: one definition)


def test_tracking_error_is_the_ma10_error_after_the_first_fifth():
    from trl_entropy.metrics import TRACKING_ERROR_DEFINITION, moving_average, tracking_error

    target = [1.0] * 20
    measured = [2.0, 0.0] * 10  # oscillates around the target: 100% raw error per step, small once averaged
    assert tracking_error(measured, target) < 0.12
    assert tracking_error([1.0] * 20, target) == 0.0
    ramp = [0.5 + 0.05 * s for s in range(20)]  # the first fifth (4 steps) is not scored
    expected = [abs(m - 1.0) for m in moving_average(ramp)][4:]
    assert tracking_error(ramp, target) == pytest.approx(sum(expected) / len(expected), rel=1e-12)
    assert moving_average([1.0, None, 3.0], window=2) == [1.0, 1.0, 3.0]
    assert math.isnan(tracking_error([], []))
    assert "first 20%" in TRACKING_ERROR_DEFINITION and "MA10" in TRACKING_ERROR_DEFINITION


def test_tracking_error_is_the_benchmarks_metric():
    """The demo and the model card report the number the benchmarks (README's table, docs/benchmarks.md) report."""
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks import tracking

    from trl_entropy.metrics import tracking_error

    rng = random.Random(0)
    for n in (5, 37, 100):
        target = [1.0 - 0.4 * s / n for s in range(n)]
        measured = [t * (1 + 0.3 * rng.gauss(0, 1)) for t in target]
        measured[n // 2] = None  # a step without a reading
        assert tracking_error(measured, target) == tracking.smoothed_error(measured, target)


def test_out_of_band_share_by_hand():
    """Issue 61: the share of the steps after the first 20% whose MA5 entropy is beyond +-30% of the MA5 target."""
    from trl_entropy.metrics import OUT_OF_BAND_DEFINITION, out_of_band_share

    target = [1.0] * 10
    measured = [1.0] * 5 + [2.0] * 5  # MA5: 1, 1, 1, 1, 1, 1.2, 1.4, 1.6, 1.8, 2.0; steps 0-1 skipped
    assert out_of_band_share(measured, target) == 4 / 8  # 1.4, 1.6, 1.8 and 2.0 are beyond 1.3
    assert out_of_band_share(measured, target, band=0.5) == 3 / 8
    assert out_of_band_share(measured, target, skip_fraction=0.0) == 4 / 10
    assert out_of_band_share(measured, target, window=1) == 5 / 8  # the raw readings
    assert out_of_band_share([1.25] * 10, target, band=0.25) == 0.0  # on the edge is inside
    assert out_of_band_share([2.0, 0.0] * 10, [1.0] * 20) == 0.0  # swings the average takes out
    # steps without a reading or with a zero target are left out of the share
    assert out_of_band_share([None] * 3 + [2.0] * 3 + [1.0] * 4, target, window=1) == 3 / 7  # step 2 has none
    assert out_of_band_share([2.0] * 10, [0.0] * 6 + [1.0] * 4, window=1) == 1.0
    assert math.isnan(out_of_band_share([], [])) and math.isnan(out_of_band_share([None] * 4, [1.0] * 4))
    assert "first 20%" in OUT_OF_BAND_DEFINITION and "±30%" in OUT_OF_BAND_DEFINITION
    assert "MA5" in OUT_OF_BAND_DEFINITION


def test_logged_tracking_reads_the_steps_that_followed_a_target():
    """The card's and entropy_curves.png's figures from a log history: only rows where the control followed a target,
    the moving averages in rows spanning about 10 and 5 steps when the log is every 2 steps."""
    from trl_entropy.metrics import logged_tracking, out_of_band_share, tracking_error

    measured = [1.0, 1.5, 0.6, 1.4, 1.1, 0.5, 1.6, 0.9, 1.2, 0.7]
    rows = [{"step": 2 * i, "entropy_control/measured": m, "entropy_control/target": 1.0,
             "entropy_control/relative_tracking_error": abs(m - 1.0)} for i, m in enumerate(measured)]
    history = [{"step": 0, "entropy_control/measured": 9.0}] + rows + [{"step": 20, "reward": 0.5}]
    err, out, gap = logged_tracking(history)
    assert gap == 2
    assert err == tracking_error(measured, [1.0] * 10, window=5)
    assert out == out_of_band_share(measured, [1.0] * 10, window=2)  # round(5 / 2) = 2 rows
    every_step = [dict(r, step=i) for i, r in enumerate(rows)]
    target = [1.0] * 10
    assert logged_tracking(every_step) == (tracking_error(measured, target), out_of_band_share(measured, target), 1)
    assert all(math.isnan(x) for x in logged_tracking([{"step": 1, "entropy_control/measured": 1.0}]))
