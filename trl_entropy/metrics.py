"""Evaluation metrics: the unbiased pass@k estimator, the entropy-performance fit of Cui et al. 2025, and the tracking
error that the demo, the model card and the benchmarks report.

Pure Python (no torch/numpy needed): numbers in, numbers out.
"""

from __future__ import annotations

import math
import operator
import statistics
from dataclasses import dataclass

__all__ = ["pass_at_k", "fit_entropy_performance", "EntropyPerformanceFit", "moving_average", "tracking_error",
           "TRACKING_ERROR_DEFINITION", "out_of_band_share", "OUT_OF_BAND_DEFINITION", "logged_tracking",
           "final_reward", "FINAL_REWARD_DEFINITION"]

# How :func:`tracking_error` is defined, in the words printed under every table that shows it.
TRACKING_ERROR_DEFINITION = ("mean over the steps after the first 20% of |MA10(H) - MA10(target)| / MA10(target), "
                             "MA10 the trailing 10-step moving average")

# How :func:`out_of_band_share` is defined (at its defaults), in the words printed beside the tracking error.
OUT_OF_BAND_DEFINITION = ("the share of the steps after the first 20% whose MA5(H) lies beyond ±30% of MA5(target), "
                          "MA5 the trailing 5-step moving average")

# How :func:`final_reward` is defined, in the words printed under the demo's table and on the model card.
FINAL_REWARD_DEFINITION = "the mean training reward of the last 10% of the logged steps (at least one)"


def _int_arg(name: str, x) -> int:
    if isinstance(x, bool):
        raise ValueError(f"{name} must be an integer, got {x!r}.")
    try:
        return operator.index(x)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {x!r}.") from None


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator of Chen et al. 2021: ``1 - C(n - c, k) / C(n, k)``.

    The probability that at least one of k samples drawn without replacement from n samples (c of them correct) is
    correct. Computed in the numerically stable product form ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)`` (no large
    binomials; accurate to ~1e-13 for n in the thousands). Returns 1.0 when ``n - c < k`` (every k-subset contains a
    correct sample) and 0.0 when ``c == 0``. Average it over problems for a benchmark score.

    Args:
        n: number of samples per problem, ``>= 1``.
        c: number of correct samples, ``0 <= c <= n``.
        k: ``1 <= k <= n``.

    Returns:
        ``float`` in [0, 1].
    """
    n, c, k = _int_arg("n", n), _int_arg("c", c), _int_arg("k", k)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}.")
    if not 0 <= c <= n:
        raise ValueError(f"c must satisfy 0 <= c <= n = {n}, got {c}.")
    if not 1 <= k <= n:
        raise ValueError(f"k must satisfy 1 <= k <= n = {n}, got {k}.")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


@dataclass(frozen=True)
class EntropyPerformanceFit:
    """Result of :func:`fit_entropy_performance`: ``R = -a * exp(H) + b``.

    Attributes:
        a: coefficient of ``exp(H)`` (positive when performance rises as entropy falls, the typical case).
        b: intercept.
        ceiling: ``b - a``, the predicted score at H = 0 (fully exhausted entropy), Cui et al.'s performance ceiling.
        rmse: root-mean-square residual of the fit on its points.
        n_points: number of points fitted.
    """

    a: float
    b: float
    ceiling: float
    rmse: float
    n_points: int

    def predict(self, entropy):
        """Predicted score ``b - a * exp(H)`` for a number (returns ``float``) or a torch tensor / numpy array
        (returns the same kind, element-wise)."""
        if isinstance(entropy, (int, float)):
            return self.b - self.a * math.exp(entropy)
        exp = getattr(entropy, "exp", None)
        if callable(exp):  # torch.Tensor
            return self.b - self.a * exp()
        try:
            import numpy as np
        except ImportError:  # pragma: no cover - numpy ships with torch installs
            np = None
        if np is not None and isinstance(entropy, np.ndarray):
            return self.b - self.a * np.exp(entropy)
        return self.b - self.a * math.exp(float(entropy))


def _as_float_list(name: str, values) -> list[float]:
    if hasattr(values, "detach"):  # torch tensor
        values = values.detach().cpu().reshape(-1).tolist()
    elif hasattr(values, "tolist"):  # numpy array
        values = list(values.reshape(-1).tolist()) if hasattr(values, "reshape") else values.tolist()
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a sequence of numbers.") from None
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"{name} must contain only finite values.")
    return out


def fit_entropy_performance(entropies, scores) -> EntropyPerformanceFit:
    """Least-squares fit of Cui et al.'s entropy-performance law ``R = -a * exp(H) + b`` (2025, Eq. 6).

    With ``x = exp(H)`` the law is linear, ``R = b - a * x``; this is the closed-form ordinary least-squares line in
    x (sums taken with ``math.fsum``). The paper fits a, b per model and data set on (training-rollout entropy,
    validation score) pairs over a run; its exact fitting window is not stated -- choose the points yourself.

    Args:
        entropies: sequence (list, tuple, numpy array, 1-D tensor) of policy entropies H.
        scores: sequence of the same length of scores R.

    Returns:
        :class:`EntropyPerformanceFit`.

    Raises:
        ValueError: fewer than 3 points, mismatched lengths, non-finite values (including ``exp(H)`` overflowing),
            or all entropies identical (the slope is undetermined).
    """
    hs = _as_float_list("entropies", entropies)
    rs = _as_float_list("scores", scores)
    if len(hs) != len(rs):
        raise ValueError(f"entropies and scores must have the same length, got {len(hs)} and {len(rs)}.")
    n = len(hs)
    if n < 3:
        raise ValueError(f"fit_entropy_performance needs at least 3 points, got {n}.")
    try:
        xs = [math.exp(h) for h in hs]
    except OverflowError:
        raise ValueError("entropies are too large: exp(H) overflows.") from None
    if min(hs) == max(hs):
        raise ValueError("all entropies are identical: the fit is degenerate (slope undetermined).")
    x_mean = math.fsum(xs) / n
    r_mean = math.fsum(rs) / n
    sxx = math.fsum((x - x_mean) ** 2 for x in xs)
    sxr = math.fsum((x - x_mean) * (r - r_mean) for x, r in zip(xs, rs))
    if not (sxx > 0.0 and math.isfinite(sxx) and math.isfinite(sxr)):
        raise ValueError("entropies are (numerically) identical or too large: the fit is degenerate.")
    slope = sxr / sxx
    a = -slope
    b = r_mean - slope * x_mean
    rmse = math.sqrt(math.fsum((r - (b - a * x)) ** 2 for x, r in zip(xs, rs)) / n)
    return EntropyPerformanceFit(a=a, b=b, ceiling=b - a, rmse=rmse, n_points=n)


def moving_average(values, window: int = 10) -> list:
    """Trailing moving average of ``values``: each point is the mean of the last ``window`` values up to it (the
    first ``window - 1`` points average what exists so far); ``None`` values are left out of the mean, and a point
    whose window holds none is ``None``."""
    out, acc = [], []
    for v in values:
        acc.append(v)
        tail = [x for x in acc[-window:] if x is not None]
        out.append(sum(tail) / len(tail) if tail else None)
    return out


def tracking_error(measured, target, window: int = 10, skip_fraction: float = 0.2) -> float:
    """How far the measured entropy stayed from its target: the mean, over the steps after the first
    ``skip_fraction``, of ``|MA(measured) - MA(target)| / MA(target)`` with ``MA`` the trailing ``window``-step
    :func:`moving_average` (:data:`TRACKING_ERROR_DEFINITION`).

    The one definition of "tracking error" in the demo's table, the model card and the benchmarks (README's table,
    ``docs/benchmarks.md``): the moving average takes out the per-step reading's sampling noise, which on SmolLM2
    about doubles a raw per-step error, and the first fifth of the steps (the climb to the target) is not scored.
    ``measured`` and ``target`` are per-step series of the same steps (``None`` where a step has no value; a step
    whose averaged target is not > 0 is left out). Returns NaN when no step is scored.
    """
    m, t = moving_average(measured, window), moving_average(target, window)
    errors = [abs(a - b) / b for a, b in zip(m, t) if a is not None and b is not None and b > 0]
    tail = errors[int(len(errors) * skip_fraction):]
    return sum(tail) / len(tail) if tail else float("nan")


def out_of_band_share(measured, target, band: float = 0.3, window: int = 5, skip_fraction: float = 0.2) -> float:
    """How often the measured entropy left a band around its target: the share of the steps after the first
    ``skip_fraction`` with ``|MA(measured) - MA(target)| > band * MA(target)``, ``MA`` the trailing ``window``-step
    :func:`moving_average` (:data:`OUT_OF_BAND_DEFINITION` at the defaults).

    The tracking suite's "beyond ±30%" column (issue 61), shown beside :func:`tracking_error` on the model card and in
    ``entropy_curves.png``: the mean error can be small while the entropy swings out of the band on some steps.
    ``measured`` and ``target`` are per-step series of the same steps; the first ``int(len * skip_fraction)`` steps
    are skipped, then a step counts where its averaged reading is not ``None`` and its averaged target is nonzero.
    Returns NaN when no step counts.
    """
    m, t = moving_average(measured, window), moving_average(target, window)
    start = int(len(m) * skip_fraction)
    pairs = [(a, b) for a, b in zip(m[start:], t[start:]) if a is not None and b]
    return sum(abs(a - b) > band * b for a, b in pairs) / len(pairs) if pairs else float("nan")


def logged_tracking(log_history) -> tuple[float, float, float]:
    """``(tracking error, share of steps beyond ±30%, steps between logs)`` of a trainer's ``log_history``, as the
    model card and ``entropy_curves.png`` state them: :func:`tracking_error` and :func:`out_of_band_share` on the rows
    where the control followed its target (``entropy_control/relative_tracking_error`` logged, finite
    ``entropy_control/measured`` and ``entropy_control/target``). NaNs where no such row.

    With ``logging_steps > 1`` each row is the mean over the steps since the previous one: the moving averages then
    span ``round(10 / gap)`` and ``round(5 / gap)`` rows (at least one), ``gap`` the median number of steps between
    rows, so the figures are the same metrics as far as the logged means allow."""
    keys = ("entropy_control/measured", "entropy_control/target")
    rows = [h for h in log_history if "entropy_control/relative_tracking_error" in h and "step" in h
            and all(isinstance(h.get(k), (int, float)) and math.isfinite(h[k]) for k in keys)]
    if not rows:
        return float("nan"), float("nan"), float("nan")
    gaps = [b["step"] - a["step"] for a, b in zip(rows, rows[1:]) if b["step"] > a["step"]]
    gap = statistics.median(gaps) if gaps else 1
    measured, target = [h[keys[0]] for h in rows], [h[keys[1]] for h in rows]
    return (tracking_error(measured, target, window=max(1, round(10 / gap))),
            out_of_band_share(measured, target, window=max(1, round(5 / gap))), gap)


def final_reward(rewards) -> float:
    """The run's final training reward: the mean of the last 10% of its logged rewards, at least one
    (:data:`FINAL_REWARD_DEFINITION`); ``None`` and non-finite values are left out first. NaN when none is left.

    The one definition of "final reward" in the demo's table and on the model card: one logged reward is the mean of
    one generation batch, too few completions to read alone.
    """
    values = [float(v) for v in rewards if v is not None and math.isfinite(v)]
    if not values:
        return float("nan")
    tail = values[-max(1, len(values) // 10):]
    return sum(tail) / len(tail)
