"""The feedback entropy bonus's law (``entropy_control="entropy_bonus"``, and the second actuator of
``entropy_bonus_assist``): :class:`EntropyBonusController` and the online estimate of the knob's authority it scales
its gains by, :class:`AuthorityEstimator`.

Pure and deterministic, with explicit, serialisable state: fed the same global measurements on every process, it
gives the same coefficient. It never touches a trainer.
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["AuthorityEstimator", "EntropyBonusController"]


class AuthorityEstimator:
    """Online estimate of a knob's *authority* ``g`` on entropy: the relative change of entropy per optimizer step per
    unit of the coefficient, as the optimizer applies it.

    Why: the best gains of a feedback law on this knob are inversely proportional to ``g``, and ``g`` is not a
    constant of the method. On SmolLM2-135M at lr 1e-5 a coefficient of 0.1 balances the policy gradient's pull;
    the tiny testbed needs ~0.6; another SmolLM2 task went from 0.5 to 3.1 nats in 10 steps at 0.1. A fixed gain is
    too timid on one and oscillates on the other (``benchmarks/controller_sim.py``: mean tracking error 16% over a
    6x range of ``g`` with fixed gains, 8-9% with the gain tuned for each ``g``).

    Model: ``log H(t+1) - log H(t) = g * u(t) - d + noise``, where ``u`` is the coefficient averaged by the
    optimizer's first-moment momentum (Adam's ``beta1``: a coefficient acts through the gradient average, not at
    once) and ``d`` is the policy gradient's own pull, slowly varying. Each step it takes the change of the mean
    log-entropy between the last two windows of ``window`` measurements (averaging the per-step sampling noise) and
    regresses it, by recursive least squares with forgetting factor ``forgetting``, on the sum of ``u`` over the
    steps between the windows' centres, with an intercept for ``d``. The regression starts from ``g = prior`` with
    variance ``prior_variance`` (1: the first, poorly excited regressions cannot pull the estimate far from the
    prior). The estimate is used once ``warmup`` regressions have run, and is held within
    ``[prior / spread, prior * spread]``: a badly excited regression can move the gains by at most ``spread``x.

    Pure and deterministic: fed the same global measurements on every process, it gives the same estimate.
    """

    def __init__(self, prior: float = 1.0, window: int = 5, forgetting: float = 0.98, momentum: float = 0.9,
                 spread: float = 5.0, warmup: int = 10, prior_variance: float = 1.0):
        if not (isinstance(prior, (int, float)) and math.isfinite(prior) and prior > 0):
            raise ValueError(f"entropy_bonus_authority must be a finite number > 0, got {prior!r}.")
        if isinstance(window, bool) or not isinstance(window, int) or window < 2:
            raise ValueError(f"the authority window must be an integer >= 2, got {window!r}.")
        if not (0.0 < forgetting <= 1.0):
            raise ValueError(f"the forgetting factor must lie in (0, 1], got {forgetting!r}.")
        if not (0.0 <= momentum < 1.0):
            raise ValueError(f"the optimizer momentum (adam_beta1) must lie in [0, 1), got {momentum!r}.")
        if not spread >= 1.0:
            raise ValueError(f"the authority spread must be >= 1, got {spread!r}.")
        if not (math.isfinite(prior_variance) and prior_variance > 0):
            raise ValueError(f"the prior variance must be a finite number > 0, got {prior_variance!r}.")
        self.prior, self.window, self.forgetting = float(prior), int(window), float(forgetting)
        self.momentum, self.spread, self.warmup = float(momentum), float(spread), int(warmup)
        self.lag = (self.window) // 2  # steps from the newest measurement back to the last coefficient that counts
        self.logs: deque = deque(maxlen=2 * self.window)
        self.averaged: deque = deque(maxlen=self.window + self.lag)
        self.u = 0.0  # the momentum-averaged coefficient
        self.theta = [self.prior, 0.0]  # [g, -d]
        # the prior's weight: the first regressions, made before the coefficient's effect has fully arrived, move
        # the estimate only as far as their evidence outweighs the prior (with a vague prior, 10, the first estimates
        # on SmolLM2 fell to 0.2 and scaled the gains 5x for a few steps, then overshot)
        self.cov = [[float(prior_variance), 0.0], [0.0, 10.0]]
        self.updates = 0
        self.estimate = self.prior

    @property
    def gain_scale(self) -> float:
        """Factor for the law's gains: ``prior / estimate`` (1 until the estimate is used)."""
        return self.prior / self.estimate

    def observe(self, measured: float) -> None:
        """Record a step's (global) measured entropy and, once two windows are in, run one regression step."""
        if not (math.isfinite(measured) and measured > 1e-4):
            self.logs.clear()  # a collapsed or missing measurement breaks the windows: start them again
            return
        self.logs.append(math.log(measured))
        w = self.window
        if len(self.logs) < 2 * w or len(self.averaged) < w + self.lag:
            return
        logs = list(self.logs)
        change = max(-1.0, min(1.0, (sum(logs[w:]) - sum(logs[:w])) / w))
        acting = list(self.averaged)[:w]  # the w averaged coefficients between the two windows' centres
        self._regress([sum(acting), float(w)], change)

    def applied(self, coefficient: float) -> None:
        """Record the coefficient the optimizer will use for this step."""
        self.u = self.momentum * self.u + (1.0 - self.momentum) * float(coefficient)
        self.averaged.append(self.u)

    def _regress(self, x: list, y: float) -> None:
        lam, P, th = self.forgetting, self.cov, self.theta
        px = [P[0][0] * x[0] + P[0][1] * x[1], P[1][0] * x[0] + P[1][1] * x[1]]
        denominator = lam + x[0] * px[0] + x[1] * px[1]
        gain = [px[0] / denominator, px[1] / denominator]
        residual = y - (th[0] * x[0] + th[1] * x[1])
        self.theta = [th[0] + gain[0] * residual, th[1] + gain[1] * residual]
        self.cov = [[(P[i][j] - gain[i] * px[j]) / lam for j in range(2)] for i in range(2)]
        self.updates += 1
        if self.updates >= self.warmup:
            self.estimate = min(self.prior * self.spread, max(self.prior / self.spread, self.theta[0]))

    def state_dict(self) -> dict:
        return {"logs": list(self.logs), "averaged": list(self.averaged), "u": self.u, "theta": list(self.theta),
                "cov": [list(r) for r in self.cov], "updates": self.updates, "estimate": self.estimate}

    def load_state_dict(self, state: dict) -> None:
        self.logs = deque((float(v) for v in state["logs"]), maxlen=2 * self.window)
        self.averaged = deque((float(v) for v in state["averaged"]), maxlen=self.window + self.lag)
        self.u = float(state["u"])
        self.theta = [float(v) for v in state["theta"]]
        self.cov = [[float(v) for v in r] for r in state["cov"]]
        self.updates = int(state["updates"])
        self.estimate = float(state["estimate"])


class EntropyBonusController:
    """Feedback on a signed entropy coefficient ``c`` (the loss is ``L_policy - c * H``): a bonus when ``c > 0``, a
    penalty when ``c < 0``, so it can push entropy down through an anneal as well as up.

    Each :meth:`update` (one per optimizer step, global values) does, in this order:

    1. **Filter and predict** (Holt's double exponential smoothing): level ``L <- a*H + (1-a)*(L + b)``, trend
       ``b <- g*(L - L_prev) + (1-g)*b``, prediction ``H_hat = L + horizon * b``. The per-step entropy is noisy; the
       level averages the noise. The look-ahead is a brake: the coefficient's effect grows with the entropy itself,
       so a law fed the current entropy keeps pushing while entropy already rises fast, and overshoots.
    2. **Error**, relative and clipped to [-1, 1]: ``e = clip((T_ahead - H_hat) / T_ahead)``, with ``T_ahead`` the
       target of the step the prediction is for, ``T + max(horizon, 1) * (T - T_prev)``, held within a factor 2 of
       ``T`` (a jump of the target is not extrapolated as a slope). Relative, so that one set of gains serves any
       target level; clipped, so that a far overshoot asks for no more than a collapse does.
    3. **Feed-forward** from the target's slope: ``ff = kff * (T - T_prev) / T`` (in coefficient units per unit of
       relative target change per step), held within the bounds: an anneal is followed without waiting for the
       error to build up.
    4. **Law output** ``law = clip(I + s*kp*e + s*ff, c_min, c_max)``, with ``s`` the :attr:`gain_scale` (the
       knob's authority estimated online by :class:`AuthorityEstimator`, with ``adapt_gain``, raised above 1 only
       as far as the measurement's noise is below ``noise_reference``: :attr:`noise_cap`; times :attr:`boost`, the
       loop's calibration by the persistence of its error, which grows only on errors larger than the filtered
       level's own noise: :meth:`_adapt_boost`). The bounds start at +-0.5, a penalty as large as a bonus, so that a
       task that drives the entropy up is held as well as one that drives it down; but no penalty acts while the
       latest reading is below the target (a collapsed policy has no entropy gradient left to recover with, so the
       penalty side must never push through the target). A bound the error has pushed past
       for ``bound_patience`` updates in a row grows by ``BOUND_GROWTH``, up to ``bound_limit``: the knob's scale is
       learned online.
    5. **Integral with conditional anti-windup**: ``I <- clip(I + s*ki*e_I, c_min, c_max)``, where ``e_I`` is the
       filtered level's own error ``clip((T_next - L) / T_next)`` (the offset itself, without the prediction's
       look-ahead), skipped while the output sits at a bound with ``e_I`` asking to go further. ``I`` converges to
       the coefficient that balances the policy gradient's own pull on entropy.
    6. **Momentum compensation** (``momentum_compensation``, 0 to 1): the coefficient reaches the weights through
       the optimizer's gradient average (Adam's ``beta1``), so a law applied as it is keeps pushing for ~1/(1-beta1)
       steps after it has turned. The law's output is taken as what the optimizer's average should hold, and the
       applied coefficient moves that average a ``momentum_compensation`` fraction of the way to the law with no
       lag (0: the law's output as it is). The applied value lies between the law and the full compensation, held
       within ``+-2 * max(c_max, -c_min)`` (``compensation_clip="symmetric"``, the default) or within twice each
       bound (``"bounds"``).

    The trainer also feeds :meth:`note_signal` (the share of tokens with a non-zero advantage, logged); it does not
    act on the law. What each part's choice was measured against is in ``docs/benchmarks.md``.

    Before the first update the coefficient is ``initial`` (0: no bonus until a measurement). Non-finite
    measurements or targets are skipped (counted in ``skipped``) and leave every state unchanged.
    """

    COMPENSATION_CLIPS = ("symmetric", "bounds")  # how far the applied coefficient may go (step 6)
    SIGNAL_SMOOTHING = 0.1  # weight of the newest step in the running signal fraction
    BOUND_GROWTH = 1.5  # factor by which a bound grows after `bound_patience` steps of being pushed past
    NOISE_SMOOTHING = 0.1  # weight of the newest squared innovation in the running noise estimate

    def __init__(self, kp: float = 0.25, ki: float = 0.03, kff: float = 2.0, c_min: float = -0.5,
                 c_max: float = 0.5, horizon: float = 6.0, level_smoothing: float = 0.4,
                 trend_smoothing: float = 0.2, initial: float = 0.0, bound_limit: float | None = 1.0,
                 bound_patience: int = 2, adapt_gain: bool = True, authority: float = 1.0,
                 momentum: float = 0.9, momentum_compensation: float = 0.5, noise_reference: float = 0.25,
                 compensation_clip: str = "symmetric"):
        if compensation_clip not in self.COMPENSATION_CLIPS:
            raise ValueError(f"entropy_bonus_compensation_clip must be one of {self.COMPENSATION_CLIPS}, got "
                             f"{compensation_clip!r}.")
        self.compensation_clip = compensation_clip
        for name, v in (("kp", kp), ("ki", ki), ("kff", kff), ("horizon", horizon)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"entropy_bonus_{name} must be a finite number >= 0, got {v!r}.")
        for name, v in (("level_smoothing", level_smoothing), ("trend_smoothing", trend_smoothing)):
            if not (isinstance(v, (int, float)) and 0.0 < v <= 1.0):
                raise ValueError(f"entropy_bonus_{name} must be a number in (0, 1], got {v!r}.")
        if not (math.isfinite(c_min) and math.isfinite(c_max) and c_min <= 0.0 <= c_max):
            raise ValueError(f"need finite entropy_bonus_min <= 0 <= entropy_bonus_max, got {c_min}, {c_max}.")
        if not (math.isfinite(initial) and c_min <= initial <= c_max):
            raise ValueError(f"the initial coefficient must lie in [{c_min}, {c_max}], got {initial}.")
        limit = None if bound_limit is None else float(bound_limit)  # None: the bounds never grow
        if limit is not None and not (math.isfinite(limit) and limit >= max(-c_min, c_max)):
            raise ValueError(f"entropy_bonus_bound_limit must be >= the bounds' size ({max(-c_min, c_max)}), got "
                             f"{bound_limit!r}.")
        if not (isinstance(momentum_compensation, (int, float)) and 0.0 <= momentum_compensation <= 1.0):
            raise ValueError(f"entropy_bonus_momentum_compensation must be a number in [0, 1], got "
                             f"{momentum_compensation!r}.")
        if isinstance(bound_patience, bool) or not isinstance(bound_patience, int) or bound_patience < 1:
            raise ValueError(f"entropy_bonus_bound_patience must be an integer >= 1, got {bound_patience!r}.")
        self.kp, self.ki, self.kff = float(kp), float(ki), float(kff)
        self.c_min, self.c_max = float(c_min), float(c_max)
        self.bound_limit, self.bound_patience = limit, int(bound_patience)
        self.pushed = 0  # consecutive updates whose output was clipped at a bound with the error pushing further
        self.horizon = float(horizon)
        self.level_smoothing, self.trend_smoothing = float(level_smoothing), float(trend_smoothing)
        self.signal: float | None = None  # the smoothed signal fraction (note_signal), None before any
        self.value = float(initial)
        self.integral = float(initial)
        self.level: float | None = None
        self.trend = 0.0
        self.last_target: float | None = None
        self.error = 0.0
        self.predicted: float | None = None
        self.feedforward = 0.0
        self.raw = self.value  # the unclipped output of the last update
        self.steps = 0
        self.skipped = 0
        self.adapt_gain = bool(adapt_gain)
        self.authority = AuthorityEstimator(prior=authority, momentum=momentum)
        if not (isinstance(noise_reference, (int, float)) and math.isfinite(noise_reference) and noise_reference > 0):
            raise ValueError(f"the noise reference must be a finite number > 0, got {noise_reference!r}.")
        self.noise_reference = float(noise_reference)
        self.noise_var = self.noise_reference**2
        self.momentum = float(momentum)
        self.compensation = float(momentum_compensation)
        # the optimizer's first moment of the coefficient, as Adam keeps it, is the estimator's uncorrected average
        # `authority.u` (one record for both); the initial coefficient acts on the first step, before any update
        self.authority.u = (1.0 - self.momentum) * self.value
        self.moment_steps = 1  # steps in that average (Adam's bias correction)
        self.law = self.value  # the law's output: the coefficient the optimizer should see after its averaging
        self.step_reading: float | None = None  # see note_step_reading (used by the next update, then cleared)
        self.boost = 1.0  # the gain's persistence factor (_adapt_boost): the loop's own calibration
        self.error_sign = 0  # the sign of the level's last significant error, 0 before any

    @property
    def gain_scale(self) -> float:
        """Factor applied to ``kp``, ``ki`` and ``kff``: ``authority / estimated authority`` with ``adapt_gain``
        (at most :attr:`noise_cap`), else 1."""
        if not self.adapt_gain:
            return 1.0
        return min(self.authority.gain_scale, self.noise_cap) * self.boost

    @property
    def noise(self) -> float:
        """The filter's relative innovation noise: root of the running mean of ``((H - H_pred) / H_pred)^2``, with
        ``H_pred`` the filter's one-step prediction and ``H`` the step's own reading (:meth:`note_step_reading`,
        else the measurement the law acts on); starts at ``noise_reference``."""
        return math.sqrt(self.noise_var)

    def note_step_reading(self, reading: float) -> None:
        """The step's own entropy reading, where the law acts on a steadier estimate of the same quantity
        (``entropy_measurement="generation_batch"``): the next :meth:`update` measures the noise cap's noise on it,
        so that the gains rise only where the policy's per-step entropy itself is measured cleanly (a steadier
        input is not a steadier plant)."""
        self.step_reading = float(reading) if math.isfinite(reading) else None

    @property
    def noise_cap(self) -> float:
        """Upper limit on the gain scale: ``max(1, noise_reference / noise)``. The gains are raised above the
        reference only as far as the measurement is cleaner than the reference noise; lowering them is never
        limited."""
        return max(1.0, self.noise_reference / max(self.noise, 1e-6))

    def update(self, measured: float, target: float) -> float:
        if not (math.isfinite(measured) and math.isfinite(target)):
            self.skipped += 1
            return self.value
        self.steps += 1
        target = float(target)
        self.authority.observe(float(measured))
        self._filter(float(measured))
        self.predicted = self.level + self.horizon * self.trend
        slope = 0.0 if self.last_target is None else target - self.last_target
        self.last_target = target
        next_target = max(target + slope, 1e-6)  # the target of the step the coefficient acts on
        self.error = _clipped_relative_error(self.target_ahead(target, slope), self.predicted)
        scale = self.gain_scale
        low = self.c_min
        # a jump of the target (a one-step anneal) is not a slope: the term is held within the bounds
        self.feedforward = min(self.c_max, max(self.c_min, scale * self.kff * slope / max(target, 1e-6)))
        self.raw = self.integral + scale * self.kp * self.error + self.feedforward
        self.law = min(self.c_max, max(low, self.raw))
        pushing_past = self._pushes_past_a_bound(self.error, low)
        summed = _clipped_relative_error(next_target, self.level)  # what the integral sums (step 5)
        if self.adapt_gain:
            self._adapt_boost(summed)
            scale = self.gain_scale
        if not self._pushes_past_a_bound(summed, low):
            self.integral = min(self.c_max, max(low, self.integral + scale * self.ki * summed))
        else:
            self.integral = max(low, self.integral)
        self._grow_bounds(pushing_past)
        self.value = self._compensate(self.law, low)
        if measured < target:  # no penalty while the latest reading is below the target (step 4)
            self.law, self.value = max(self.law, 0.0), max(self.value, 0.0)
        self._applied(self.value)
        return self.value

    BOOST_UP, BOOST_DOWN, BOOST_RANGE = 1.15, 0.5, (0.25, 8.0)

    def _adapt_boost(self, level_error: float) -> None:
        """The loop's own calibration of its gains, by the persistence of its error: while the filtered level's
        error keeps its sign, is larger than the level's own noise, and the prediction ahead does not close it, the
        gains grow by ``BOOST_UP`` a step (too little authority: the knob is not moving the entropy); when the error
        changes sign, they shrink by ``BOOST_DOWN`` (the loop overshot: too much gain for its delay). Within
        ``BOOST_RANGE``; scale-free, so it fits a knob of any authority, model, task or learning rate."""
        a = self.level_smoothing
        level_noise = self.noise * math.sqrt(a / (2.0 - a))  # sd of an exponential average of the noise
        if abs(level_error) <= level_noise:
            return
        sign = 1 if level_error > 0 else -1
        if sign == self.error_sign and self.error * sign > 0 and abs(level_error) > 2.0 * level_noise:
            self.boost = min(self.BOOST_RANGE[1], self.boost * self.BOOST_UP)
        elif self.error_sign and sign != self.error_sign:
            self.boost = max(self.BOOST_RANGE[0], self.boost * self.BOOST_DOWN)
        self.error_sign = sign

    def target_ahead(self, target: float, slope: float) -> float:
        """The target the predicted entropy is compared with (step 2 of the class docstring): ``horizon`` steps
        ahead along the target's slope, within a factor 2 of ``target``."""
        ahead = target + max(self.horizon, 1.0) * slope
        return max(min(2.0 * target, max(0.5 * target, ahead)), 1e-6)

    def note_signal(self, fraction: float) -> None:
        """The step's signal fraction (global): the share of its tokens with a non-zero advantage
        (:func:`~trl_entropy.scheduling.measurement.signal_token_count`), smoothed (weight ``SIGNAL_SMOOTHING`` on
        the newest step) and logged as ``entropy_control/bonus_signal_fraction``. A value that is not finite or lies
        outside [0, 1] is ignored."""
        if not (isinstance(fraction, (int, float)) and math.isfinite(fraction) and 0.0 <= fraction <= 1.0):
            return
        w = self.SIGNAL_SMOOTHING
        self.signal = float(fraction) if self.signal is None else (1.0 - w) * self.signal + w * float(fraction)

    def _pushes_past_a_bound(self, error: float, low: float) -> bool:
        """Whether the law's unclipped output sits at a bound (``c_max``, or ``low``) with ``error`` asking to go
        further (conditional integration, and the bounds' growth)."""
        return (self.raw >= self.c_max and error > 0) or (self.raw <= low and error < 0)

    def _compensate(self, law: float, low: float) -> float:
        """The coefficient to apply so that the optimizer's momentum average of it moves toward ``law`` without its
        lag (step 6 of the class docstring).

        Adam's first moment after this step is ``(beta * m + (1 - beta) * c) / (1 - beta^t)``; setting that to
        ``law`` gives ``c_full = ((1 - beta^t) * law - beta * m) / (1 - beta)``. The applied coefficient is
        ``law + compensation * (c_full - law)``, held within ``+-2 * max(c_max, -low)`` (``"symmetric"``) or
        within twice the bounds (``"bounds"``; ``low``: the lower one). Either way it lies between ``law`` and
        ``c_full``, so the average lands between its previous value and ``law``."""
        if self.compensation <= 0.0 or self.momentum <= 0.0:
            return law
        beta, t = self.momentum, self.moment_steps + 1
        # c_full - law = beta * ((1 - beta^(t-1)) * law - m) / (1 - beta): 0 when the average already holds `law`
        gap = (1.0 - beta ** (t - 1)) * law - self.authority.u
        if abs(gap) <= 1e-12:  # a held coefficient stays exactly itself (no rounding drift)
            return law
        c = law + self.compensation * beta * gap / (1.0 - beta)
        if self.compensation_clip == "symmetric":
            reach = 2.0 * max(self.c_max, -low)
            return min(reach, max(-reach, c))
        return min(2.0 * self.c_max, max(2.0 * low, c))

    def _applied(self, coefficient: float) -> None:
        """Record the coefficient the optimizer uses for the coming step (in the estimator's momentum average)."""
        self.moment_steps += 1
        self.authority.applied(coefficient)

    @property
    def averaged(self) -> float:
        """The coefficient as the optimizer's first moment averages it (bias-corrected as Adam does)."""
        if self.momentum <= 0.0:
            return self.value
        return self.authority.u / (1.0 - self.momentum**self.moment_steps)

    def _grow_bounds(self, pushing_past: bool) -> None:
        """The knob's scale, learned online: a bound the error has pushed past for `bound_patience` updates in a row
        grows by `BOUND_GROWTH`, up to `bound_limit`. The initial upper bound (0.5) is five times the coefficient
        that balances the policy gradient on SmolLM2-135M at lr 1e-5; a model or learning rate that needs a larger
        coefficient (the tiny testbed needs ~0.6) gets it instead of a saturated control."""
        self.pushed = self.pushed + 1 if pushing_past else 0
        if self.bound_limit is None or self.pushed < self.bound_patience:
            return
        self.pushed = 0
        if self.error > 0:
            self.c_max = min(self.bound_limit, self.c_max * self.BOUND_GROWTH)
        elif self.c_min < 0:
            self.c_min = max(-self.bound_limit, self.c_min * self.BOUND_GROWTH)

    def decay(self, factor: float) -> float:
        """Shrink the coefficient and the integral toward 0 by ``factor`` (a hand-back to another knob), keeping
        the filter running on the entropy it is given through :meth:`track` (call this first, then :meth:`track`,
        which records the decayed coefficient as the one in effect)."""
        self.integral *= factor
        self.value = min(self.c_max, max(self.c_min, self.value * factor))
        self.raw = self.law = self.value
        return self.value

    def track(self, measured: float, target: float) -> None:
        """Update the filter and the target memory only (no output change): keeps the controller's view current
        while another knob acts, so that a hand-over starts from the present entropy and trend."""
        if not (math.isfinite(measured) and math.isfinite(target)):
            return
        self.authority.observe(float(measured))
        self._filter(float(measured))
        self.last_target = float(target)
        self._applied(self.value)

    def _filter(self, measured: float) -> None:
        """Holt's double exponential smoothing of the measured entropy: level and trend per step (and the noise
        estimate, on the step's reading where one was noted)."""
        if self.level is None:
            self.level = measured
            self.step_reading = None
            return
        previous = self.level
        predicted = max(self.level + self.trend, 1e-6)
        w = self.NOISE_SMOOTHING
        reading = measured if self.step_reading is None else self.step_reading
        self.noise_var = (1.0 - w) * self.noise_var + w * min(1.0, ((reading - predicted) / predicted) ** 2)
        a, g = self.level_smoothing, self.trend_smoothing
        self.level = a * measured + (1.0 - a) * (self.level + self.trend)
        self.trend = g * (self.level - previous) + (1.0 - g) * self.trend
        self.step_reading = None

    @property
    def limit_push(self) -> int:
        """+1 when the law's unclipped output asks for at least the largest coefficient the bounds can reach
        (``bound_limit``, else ``c_max``) with entropy below its target, -1 likewise at the bottom, else 0: the knob is
        at the limit of its reach, whether or not its bounds have grown there yet."""
        top = self.c_max if self.bound_limit is None else self.bound_limit
        bottom = self.c_min if self.bound_limit is None else -self.bound_limit
        if self.raw >= top and self.error > 0:
            return 1
        if self.raw <= bottom and self.error < 0:
            return -1
        return 0

    def state_dict(self) -> dict:
        return {
            "value": self.value,
            "integral": self.integral,
            "level": self.level,
            "trend": self.trend,
            "last_target": self.last_target,
            "error": self.error,
            "predicted": self.predicted,
            "feedforward": self.feedforward,
            "raw": self.raw,
            "steps": self.steps,
            "skipped": self.skipped,
            "c_min": self.c_min,
            "c_max": self.c_max,
            "pushed": self.pushed,
            "noise_var": self.noise_var,
            "moment_steps": self.moment_steps,
            "law": self.law,
            "signal": self.signal,
            "boost": self.boost,
            "error_sign": self.error_sign,
            "authority": self.authority.state_dict(),
            "config": {"kp": self.kp, "ki": self.ki, "kff": self.kff, "c_min": self.c_min, "c_max": self.c_max,
                       "horizon": self.horizon, "level_smoothing": self.level_smoothing,
                       "trend_smoothing": self.trend_smoothing, "adapt_gain": self.adapt_gain,
                       "authority": self.authority.prior, "momentum": self.authority.momentum,
                       "momentum_compensation": self.compensation, "noise_reference": self.noise_reference,
                       "compensation_clip": self.compensation_clip},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output. Keys this version does not know (the state of variants removed
        after the ``pre-law-cut`` tag, such as ``pull_term``, and the logged pull estimate's ``pull_cov``,
        ``pull_var`` and ``pull_count``) are ignored; missing ones take their fresh value."""
        self.value = float(state["value"])
        self.integral = float(state["integral"])
        self.level = None if state.get("level") is None else float(state["level"])
        self.trend = float(state.get("trend", 0.0))
        self.last_target = None if state.get("last_target") is None else float(state["last_target"])
        self.error = float(state.get("error", 0.0))
        self.predicted = None if state.get("predicted") is None else float(state["predicted"])
        self.feedforward = float(state.get("feedforward", 0.0))
        self.raw = float(state.get("raw", self.value))
        self.steps = int(state.get("steps", 0))
        self.skipped = int(state.get("skipped", 0))
        self.c_min = float(state.get("c_min", self.c_min))
        self.c_max = float(state.get("c_max", self.c_max))
        self.pushed = int(state.get("pushed", 0))
        self.noise_var = float(state.get("noise_var", self.noise_reference**2))
        self.moment_steps = int(state.get("moment_steps", max(1, self.steps + 1)))
        self.law = float(state.get("law", self.value))
        self.signal = None if state.get("signal") is None else float(state["signal"])
        self.boost = float(state.get("boost", 1.0))
        self.error_sign = int(state.get("error_sign", 0))
        if "authority" in state:
            self.authority.load_state_dict(state["authority"])


def _clipped_relative_error(target: float, value: float) -> float:
    """``(target - value) / target``, clipped to [-1, 1] (step 2 of the bonus's law)."""
    return min(1.0, max(-1.0, (target - value) / target))
