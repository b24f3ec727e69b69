"""Feedback controllers with explicit, serialisable state.

A controller sees one (measured, target) pair per optimizer step — both already global statistics, identical on
every process — and returns the knob value for the next step. It never touches a trainer.
"""

from __future__ import annotations

import math
from collections import deque

from .measurement import pull_coefficient

__all__ = [
    "AdaptiveClipController",
    "LambdaStepController",
    "PIController",
    "AuthorityEstimator",
    "EntropyBonusController",
    "SaturationMonitor",
]


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


class AdaptiveClipController:
    """Adaptive clip-higher (Wang et al., "Entropy Scheduling", Algorithm 1).

    For step t (counted from 1 by calls to :meth:`update`): during warm-up (t <= ``warmup_steps``) the knob stays at
    ``initial``. After it, with W the last ``window`` steps,
    ``c <- clamp(c + delta * sign(mean_W(target) - mean_W(measured)), c_min, c_max)``:
    entropy below its target raises ``epsilon_high`` (more room for low-probability tokens to grow), above it lowers.

    Non-finite measurements are not fed in: :meth:`update` skips them and returns the current value.
    """

    def __init__(self, initial: float, delta: float, window: int, c_min: float, c_max: float, warmup_steps: int = 0):
        if window < 1:
            raise ValueError(f"adaptive_clip_window must be >= 1, got {window}.")
        if delta <= 0:
            raise ValueError(f"adaptive_clip_delta must be > 0, got {delta}.")
        if c_min > c_max:
            raise ValueError(f"adaptive_clip_min ({c_min}) must be <= adaptive_clip_max ({c_max}).")
        self.initial = float(initial)
        self.delta = float(delta)
        self.window = int(window)
        self.c_min = float(c_min)
        self.c_max = float(c_max)
        self.warmup_steps = int(warmup_steps)
        self.value = float(initial)
        self.steps = 0
        self.history: deque[tuple[float, float]] = deque(maxlen=self.window)
        self.skipped = 0
        self.direction = 0  # the last move asked for: +1 raise, -1 lower, 0 none (warm-up, or on target)

    def update(self, measured: float, target: float) -> float:
        if not (math.isfinite(measured) and math.isfinite(target)):
            self.skipped += 1
            return self.value
        self.steps += 1
        self.history.append((float(target), float(measured)))
        if self.steps <= self.warmup_steps:
            self.value = self.initial
            self.direction = 0
            return self.value
        mean_target = sum(t for t, _ in self.history) / len(self.history)
        mean_measured = sum(m for _, m in self.history) / len(self.history)
        self.direction = _sign(mean_target - mean_measured)
        self.value = min(self.c_max, max(self.c_min, self.value + self.delta * self.direction))
        return self.value

    @property
    def limit_push(self) -> int:
        """The direction the last update pushed the knob into one of its bounds (+1 at ``c_max``, -1 at ``c_min``),
        else 0: the error asks for more than the knob's range gives."""
        return _limit_push(self.direction, self.value, self.c_min, self.c_max)

    def state_dict(self) -> dict:
        return {
            "value": self.value,
            "steps": self.steps,
            "skipped": self.skipped,
            "history": [list(p) for p in self.history],
            "direction": self.direction,
            "config": {
                "initial": self.initial,
                "delta": self.delta,
                "window": self.window,
                "c_min": self.c_min,
                "c_max": self.c_max,
                "warmup_steps": self.warmup_steps,
            },
        }

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])
        self.steps = int(state["steps"])
        self.skipped = int(state.get("skipped", 0))
        self.history = deque((tuple(p) for p in state["history"]), maxlen=self.window)
        self.direction = int(state.get("direction", 0))


class LambdaStepController:
    """Entropy-guided weight of positive-advantage tokens (Jin et al., "Revisiting Entropy", §7).

    The paper's rule (``kp = 0``, the default): ``lambda <- clip(lambda - step, 0, 1)`` when the measured entropy is
    below the target (positive-advantage updates sharpen the policy, so give them less weight),
    ``lambda <- clip(lambda + step, 0, 1)`` otherwise.

    With ``kp > 0`` the paper's stepped value becomes the integral part ``I`` of a proportional-integral form:
    ``lambda = clip(I + kp * e, 0, 1)`` with the relative error ``e = (measured - target) / target``. The
    proportional part answers a fall of entropy in the same step, where the stepped value alone keeps weighting
    positives until it has walked back down (on SmolLM2 the collapse it lets through takes 10-15 steps and
    negatives-only updates do not undo it). ``step = 0`` with ``kp > 0`` is a proportional-only control. Measured
    on SmolLM2 (docs/benchmarks.md) it did not track better: kp 1 and 3 let positives in at full weight while the first
    batches sat above the target, which started the collapse sooner.
    """

    def __init__(self, initial: float = 0.0, step: float = 0.05, kp: float = 0.0):
        if not (0.0 <= initial <= 1.0):
            raise ValueError(f"positive_reweight_lambda_init must be in [0, 1], got {initial}.")
        if not (0.0 <= step <= 1.0):
            raise ValueError(f"positive_reweight_step must be in [0, 1], got {step}.")
        if not (math.isfinite(kp) and kp >= 0.0):
            raise ValueError(f"positive_reweight_kp must be a finite number >= 0, got {kp}.")
        if step == 0.0 and kp == 0.0:
            raise ValueError("positive_reweight_step = 0 needs positive_reweight_kp > 0, else lambda never moves.")
        self.value = float(initial)
        self.integral = float(initial)
        self.step = float(step)
        self.kp = float(kp)
        self.steps = 0
        self.skipped = 0
        self.direction = 0

    def update(self, measured: float, target: float) -> float:
        if not (math.isfinite(measured) and math.isfinite(target)):
            self.skipped += 1
            return self.value
        self.steps += 1
        self.direction = -1 if measured < target else 1
        self.integral = min(1.0, max(0.0, self.integral + self.direction * self.step))
        error = (float(measured) - float(target)) / max(float(target), 1e-6)
        self.value = min(1.0, max(0.0, self.integral + self.kp * error))
        return self.value

    @property
    def limit_push(self) -> int:
        """+1 when the last update pushed lambda into 1, -1 into 0, else 0."""
        return _limit_push(self.direction, self.value, 0.0, 1.0)

    def state_dict(self) -> dict:
        return {"value": self.value, "integral": self.integral, "steps": self.steps, "skipped": self.skipped,
                "direction": self.direction, "config": {"step": self.step, "kp": self.kp}}

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])
        self.integral = float(state.get("integral", state["value"]))  # states saved before kp existed: I = lambda
        self.steps = int(state["steps"])
        self.skipped = int(state.get("skipped", 0))
        self.direction = int(state.get("direction", 0))


class PIController:
    """EntroPIC's proportional-integral entropy controller (Yang et al. 2025, yk7333/EntroPIC).

    Per call of :meth:`update` with the error ``e = measured - target``:
    ``alpha = clamp(ki * I + kp * e, alpha_min, alpha_max)``, then ``I <- I + e`` (the integral is updated *after*
    it is used, as in the reference). ``alpha > 0`` (entropy above target) sharpens confident tokens and lowers the
    entropy; ``alpha < 0`` raises it. The clamp bounds alpha only; the integral is not clamped (the reference has no
    anti-windup).

    Differences from the reference: the reference updates per micro-batch and per rank, from the micro-batch's own
    entropy, and uses alpha on that same micro-batch; here the controller sees one global measured entropy per
    optimizer step (identical on every process) and its alpha acts on the next optimizer step. Over one optimizer
    step the reference's integral also grows by one (batch-size-weighted) error, so ``ki`` has the same scale.
    Non-finite measurements are skipped (counted in ``skipped``).
    """

    def __init__(self, kp: float = 1.0, ki: float = 0.01, alpha_min: float = -1.0, alpha_max: float = 1.0):
        for name, v in (("kp", kp), ("ki", ki)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}.")
        if not (math.isfinite(alpha_min) and math.isfinite(alpha_max) and alpha_min <= 0.0 <= alpha_max):
            raise ValueError(f"need finite alpha_min <= 0 <= alpha_max, got {alpha_min}, {alpha_max}.")
        self.kp = float(kp)
        self.ki = float(ki)
        self.alpha_min = float(alpha_min)
        self.alpha_max = float(alpha_max)
        self.value = 0.0  # alpha
        self.integral = 0.0
        self.steps = 0
        self.skipped = 0
        self.raw = 0.0  # the unclamped output of the last update

    def update(self, measured: float, target: float) -> float:
        if not (math.isfinite(measured) and math.isfinite(target)):
            self.skipped += 1
            return self.value
        self.steps += 1
        error = float(measured) - float(target)
        self.raw = self.ki * self.integral + self.kp * error
        self.value = min(self.alpha_max, max(self.alpha_min, self.raw))
        self.integral += error
        return self.value

    @property
    def limit_push(self) -> int:
        """+1 when the last output was clamped at ``alpha_max``, -1 at ``alpha_min``, else 0."""
        return 1 if self.raw > self.alpha_max else (-1 if self.raw < self.alpha_min else 0)

    def state_dict(self) -> dict:
        return {
            "value": self.value,
            "integral": self.integral,
            "raw": self.raw,
            "steps": self.steps,
            "skipped": self.skipped,
            "config": {"kp": self.kp, "ki": self.ki, "alpha_min": self.alpha_min, "alpha_max": self.alpha_max},
        }

    def load_state_dict(self, state: dict) -> None:
        self.value = float(state["value"])
        self.integral = float(state["integral"])
        self.raw = float(state.get("raw", self.value))
        self.steps = int(state["steps"])
        self.skipped = int(state.get("skipped", 0))


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
       ``b <- g*(L - L_prev) + (1-g)*b``, prediction ``H_hat = L + horizon * b``. The per-step entropy is measured
       on a few dozen to a few thousand tokens and is noisy; the level averages that noise, and the trend term looks
       ``horizon`` steps ahead. Why look ahead: the coefficient's effect on entropy grows with the entropy itself
       (a sharp policy barely answers a bonus, a broad one answers strongly), so a law fed the current entropy keeps
       pushing while entropy is already rising fast and overshoots (measured on SmolLM2: a plain PI swung between
       ~0.5 and ~3 nats around a 1-nat target). Fed the predicted entropy, it brakes while the entropy is still
       below its target and rising.
    2. **Error**, relative to the target and clipped to [-1, 1]: ``e = clip((T_ahead - H_hat) / T_ahead)``, where
       ``T_ahead`` is the target of the step the prediction is for (``target_lookahead="horizon"``, the default):
       the target extrapolated along its slope, ``T + max(horizon, 1) * (T - T_prev)``, held within a factor 2 of
       ``T`` (so that a jump of the target, a one-step schedule, is not extrapolated as a slope). Relative, so that
       one set of gains serves any target level; clipped, so that a far overshoot (H = 3T) does not ask for more
       than a collapse (H = 0) does. Why the target ``horizon`` steps ahead: the prediction is the entropy
       ``horizon`` steps ahead, and on a moving target it must be compared with the target of that same step.
       ``target_lookahead="step"`` (the law until 2026-11-27) compares it with the next step's target, ``T + (T -
       T_prev)``: through an anneal, entropy falling exactly along the target is then predicted ``horizon - 1``
       slopes below it, read as a deficit, and the law pushes against the anneal (on SmolLM2's WSD target: the
       coefficient stayed near +0.05 through the anneal, its integral at +0.12, while entropy ended 0.11 nats above
       a target of 0.48; docs: benchmarks, the anneal's look-ahead). On a constant target the two are identical.
    3. **Feed-forward** from the target's slope: ``ff = kff * (T - T_prev) / T``. An anneal asks entropy to fall at
       a known rate; the feedback alone would only react once the error has built up (a lag of several steps on a
       linear ramp). ``kff`` is in coefficient units per unit of relative target change per step.
    4. **Law output** ``law = clip(I + s*kp*e + s*ff + P, c_min, c_max)``, where ``P`` is the pull feed-forward
       (below; 0 unless ``pull_gain > 0``): bounded on both sides; ``s`` is
       :attr:`gain_scale` (the knob's authority estimated online, with ``adapt_gain``; the gains rise above 1 only as
       far as the measurement's noise, :attr:`noise`, is below ``noise_reference``: :attr:`noise_cap`). A bound the
       error has pushed past for ``bound_patience`` updates in a row grows by 1.5x, up to ``bound_limit`` (the scale
       learned online).
       The initial bounds are the knob's documented scale: on SmolLM2-135M (lr 1e-5) a fixed ``c = 0.1`` drives entropy above its start in every seed
       and ``c = 0.01`` slows the collapse 3.5x, so the balancing coefficient lies inside +-0.1 (docs:
       benchmarks, knob authority). The gains are per unit of relative error in those coefficient units.
       The bounds are asymmetric on purpose: a bonus up to 0.5, a penalty only to -0.1 (both grow when pushed
       past). A penalty's gradient is "sharpen whatever the policy samples now", blind to the reward, and on
       SmolLM2 |grad H| is ~2x |grad L_pg|: with a -0.5 bound the law held its targets a little closer (9.7% against
       11.7% on hold) but its trained policies were 0.04-0.09 less accurate than TRL's rule's; with -0.1 they are
       as accurate or more (docs: benchmarks, the penalty bound). Entropy is then lowered mostly by releasing the
       bonus and letting the policy gradient's own pull act.
       **Pull feed-forward** ``P = clip(pull_gain * Cov / Var, low, c_max)``: the coefficient that balances the
       policy gradient's own pull on entropy in the batch being trained on, given by the trainer through
       :meth:`note_pull` (two sums over the loss forward's tokens:
       :func:`~trl_entropy.scheduling.measurement.entropy_pull_sums`; each smoothed with weight
       ``pull_smoothing``). Why: the feedback sees the pull only once it has moved the entropy, a few steps and the
       optimizer's momentum later, which is where the held target's early dip comes from (most of the pull acts
       while the reward rises); the covariance of the sampled tokens' centred log-probs with their advantages is
       the pull itself (Cui et al.: under natural policy gradient a step changes entropy by ``-eta * Cov``), read in
       the same step. Its ratio to the variance of the centred log-probs is in coefficient units, with nothing to
       calibrate (the bonus moves entropy by ``eta * c * Var``). The integral then holds only what the estimate
       misses (a policy that is not a tabular softmax, Adam instead of the natural gradient). On SmolLM2 (three
       seeds) the estimate's level matched the balancing coefficient a regression of the runs gives (0.095
       against 0.088) but its step-to-step changes predicted little, and at gain 1 it shrank the early dip,
       tracked within noise of the default and trained less accurate policies, so it is off by default (docs:
       benchmarks, the pull).
    5. **Integral with anti-windup**: ``I <- clip(I + ki * e_I, c_min, c_max)``, skipped when the output sits at a
       bound and ``e_I`` asks to go further (conditional integration), so the integral never winds up against a
       bound. ``I`` converges to the coefficient that balances the policy gradient's own pull on entropy. What it
       integrates (``integral_error``): ``"level"`` (the default since 2026-11-27), the filtered level's own error
       ``clip((T_next - L) / T_next)``; ``"prediction"`` (the law until then), the law's error ``e`` above. The
       prediction's look-ahead is a brake for the proportional term; summed into the integral it also adds
       ``horizon * ki`` times every change of the level (a hidden proportional term of gain ``horizon * ki`` on the
       level, and the trend's noise), which is what makes a faster integral swing where the knob is strong.
       ``"level"`` integrates only the offset itself, and so takes a larger ``ki`` (0.03, twice the prediction's
       0.015): on the simulated plant (``benchmarks/controller_sim.py --plant smollm2``) it tracks closer than the
       prediction's integral at SmolLM2's authority and far closer where the knob is 2-2.5x stronger, where
       ``ki=0.03`` with ``"prediction"`` swings. Measured with the symmetric kick (step 6) on SmolLM2 against the
       law before (prediction, ``ki=0.015``, ``"bounds"``), paired over fifteen seeds on a GPU: 1.7 +- 0.6 points
       closer on a held target (10.0% against 11.6%), as close on WSD (12.5%, 0.48x TRL's rule's error), the
       trained policies as accurate (sampled accuracy +0.002 +- 0.014); it shrinks the early dip. Over eighteen
       CPU seeds of the held target: 10.3% against 11.2%; the first ten showed policies 0.045 +- 0.034 less
       accurate, eight more +0.028 +- 0.022, and over the 33 seeds of both devices -0.006 +- 0.014 (docs:
       benchmarks, the level's integral with the symmetric kick).
       **Where the integral stops** (``antiwindup``): ``"conditional"`` (the default) at either bound, as above;
       ``"upper"`` (opt-in) at the upper bound only: at the lower bound, a limit on the penalty (small on purpose)
       rather than the knob's scale, the integral keeps integrating, held within it. Why: the lower bound is
       reached by the proportional term in an overshoot, not by the integral; on SmolLM2's held target the law
       sat at -0.1 on ~4% of the steps after step 40, with the reading ~45% above the target on them, so
       conditional integration hid the largest overshoots from the integral, and entropy stood ~3% above the
       target over steps 46-100 (docs: benchmarks, the integral at the lower bound). Measured with ``ki=0.045``
       on six CPU seeds: the offset over steps 46-100 fell from +4.4% to +1.9%, but on one seed a single
       overshoot to twice the target drained the integral from +0.12 to -0.09 in five steps (the error clipped
       only at -1) and the dip that followed cost more than the offset gained (error -0.3 +- 1.5 points), so it
       is opt-in. A "clamp" that integrated at both bounds was measured on three seeds with the law of 2026-11-26
       and not kept (hold 12.0% against 11.7%). Between the two, ``lower_ki_fraction`` (opt-in, default 0: purely
       conditional) lets the integral take that fraction of its update while the law sits at the lower bound and
       the error pushes further down; 1 integrates there as ``"upper"`` does. Why: ``"upper"`` let one long
       overshoot drain the integral; a fraction of the update reaches the offset over many steps and drains
       only that fraction as fast. Measured at 0.25 on eight CPU seeds of SmolLM2's held target: the integral
       fell at the bound as built (to ~0 late in the run where the defaults' stood at +0.08), yet the late excess
       grew (+7.4% against +5.7%) and the error with it (+0.5 +- 0.3 points), so it is opt-in: the overshoots the
       lower bound meets come with the proportional term's and the kick's swings, not a standing integral (docs:
       benchmarks, the integral at the lower bound).
       **The integrated error's bound** (``integral_clip``, default 1: no bound past the error's own): each step's
       summed error is held within ``+-integral_clip``, so that with ``"upper"`` one overshoot far past the target
       drains the integral more slowly. Measured with ``"upper"`` and ``ki=0.045`` at 0.5 on twelve CPU seeds of
       the held target: eight tracked closer than the defaults and the offset over steps 46-100 fell from +3.5% to
       +1.6%, but on two seeds an overshoot of 1.3-2.4x the target lasting 8-10 steps still drained the integral
       (0.14 to -0.07) and the dip that followed cost 6-7 points (error +0.3 +- 1.0 points overall; docs:
       benchmarks, the integral at the lower bound). What drains is the overshoot's length, not its height.
       With ``integral_beyond="skip"`` an error past the bound is summed as 0 instead: such a long overshoot is a
       transient of the policy, not a change of the balancing coefficient. On those two seeds it kept the integral
       above +0.07 and brought their errors from 19.6% and 19.2% to 13.6% and 15.5% (opt-in: two seeds, chosen
       for the drain). It acts on both sides: on one of four other seeds it also held the integral back through
       the early collapse (the level more than 50% below the target) and cost 2.5 points. ``"skip_overshoot"``
       skips on the overshoot's side only (an error below ``-integral_clip``) and clips the collapse's side;
       measured on twelve CPU seeds (four new runs, eight repeating cached ones step for step) it tracked as the
       defaults do (+0.1 +- 0.8 points): at ``ki=0.045`` the kept integral winds up in the next dip and a second
       overshoot follows, so it stays opt-in.
       **Signal scaling** (``integral_scale="signal"``, opt-in): before each update the integral is multiplied by
       the change of the *signal fraction*, the smoothed share of the step's tokens with a non-zero advantage
       (:meth:`note_signal`; floored at ``SIGNAL_FLOOR``), within the bounds. Why: a group whose rewards are all
       equal has advantage 0 and pulls on entropy neither way while the bonus acts on every token, so the
       coefficient the integral converges to shrinks as the policy solves more groups. The integral alone follows
       that decline a ramp's lag behind: on SmolLM2's held target it fell from 0.12 to 0.07 over steps 40-100 while
       the share of groups with a signal fell from 0.54 to 0.29 (their ratio stayed within 0.20-0.24), and
       entropy stood ~4% above the target meanwhile, just the error at which ``ki`` moves the integral that fast.
       Scaled, the integral holds the balancing coefficient per unit of signal; where the pull does not scale
       with the fraction it costs little (the simulated plant: 0.1-0.2 points). Measured on SmolLM2 (CPU, against
       the defaults; hold seeds 0-5, WSD 0-1): the integral over the last 30 steps fell from 0.073 to 0.048 as
       built, but the applied coefficient barely moved (0.072 to 0.066; the proportional term made up the
       difference) and the excess stayed; error -0.2 +- 1.2 points pooled, so it is not the default (docs:
       benchmarks, the integral scaled by the signal fraction).
    6. **Momentum compensation** (``momentum_compensation``, 0 to 1): the coefficient reaches the weights through
       the optimizer's gradient average (Adam's ``beta1``: at 0.9 a change arrives over ~10 steps), so a law whose
       output is applied as it is keeps pushing for ~10 steps after it has turned, and the loop swings (measured on
       SmolLM2: a period of ~25 steps). The law's output (``law``) is taken as the coefficient the optimizer's
       average should hold; the applied coefficient ``c`` is chosen, from the average's own state (bias-corrected
       as Adam keeps it), so that the average moves a ``momentum_compensation`` fraction of the way to what it
       would be with no lag. 0 applies the law's output as it is. The applied coefficient lies between the law and
       the full compensation, so the average lands between its previous value and the law's: within the bounds,
       whatever the applied value. How far the applied value may go (``compensation_clip``):
       ``+-2 * max(c_max, -low)`` (``"symmetric"``, the default since 2026-11-27: as far down as up), within twice
       each bound in effect (``"bounds"``, the law until then), or the first while the target holds or rises and the
       second while it falls (``"hold_symmetric"``, opt-in). Why the last: through the GPU's WSD anneals the
       defaults kicked to -1.0 and stood further above the target than the law before while the optimizer's
       average of their coefficient was lower; measured on eight CPU seeds of WSD it tracked 0.4 +- 0.4 points
       closer than the defaults (the anneal's steps 1.0 +- 1.1), policies +0.025 +- 0.019 (sampled): in the right
       direction, not significant, so it is not the default. With the asymmetric default bounds, ``"bounds"`` lets
       a turn upward kick to +1.0 and a turn downward only to -0.2, so the average lags on every way down and not on
       the way up. Alone, ``"symmetric"`` did not measurably track closer on SmolLM2 (11.6% against 11.9% on hold
       over ten GPU seeds); with the level's integral (step 5) the two together do. Measured on
       SmolLM2 (seeds 1 and 2, held target): 0.5 brought the tracking error from 15.3% and 16.5% to 11.1% and 8.9%;
       1 gave 12.4% and 7.4% (0.5 is the default: it leaves half of the momentum's smoothing of the noisy law).
    7. **Release-first anneal** (``anneal_min``, off by default): while the target falls, the lower bound is
       ``max(c_min, anneal_min)`` (the integral and the law alike; this bound does not grow). An anneal then lowers
       entropy mostly by releasing the bonus and letting the policy gradient's own pull on entropy do the rest,
       instead of with a penalty: a penalty's gradient is "sharpen whatever the policy samples now", blind to the
       reward, and on SmolLM2 a coefficient of -0.5 already makes it as large as the policy gradient. With the
       default ``c_min`` (-0.1) it matters only for a lower ``c_min``; measured on SmolLM2 with ``c_min=-0.5`` and
       ``anneal_min=-0.1``, it did not recover the accuracy the held phase's penalties cost (docs: benchmarks, the
       penalty bound).

    Before the first update the coefficient is ``initial`` (0: no bonus until a measurement). Non-finite
    measurements or targets are skipped (counted in ``skipped``) and leave every state unchanged.
    """

    COMPENSATION_CLIPS = ("symmetric", "bounds", "hold_symmetric")  # how far the applied coefficient may go (step 6)
    TARGET_LOOKAHEADS = ("horizon", "step")  # which step's target the prediction is compared with (step 2)
    INTEGRAL_ERRORS = ("prediction", "level")  # what the integral sums (step 5)
    INTEGRAL_SCALES = ("none", "signal")  # whether the integral follows the signal fraction (step 5)
    ANTIWINDUPS = ("conditional", "upper")  # at which bounds the integral stops (step 5)
    # what the integral does with an error beyond integral_clip (step 5): "skip_overshoot" skips only an error
    # below -integral_clip (the level far above the target) and clips one above +integral_clip
    INTEGRAL_BEYONDS = ("clip", "skip", "skip_overshoot")
    SIGNAL_SMOOTHING = 0.1  # weight of the newest step in the running signal fraction
    SIGNAL_FLOOR = 0.05  # the signal fraction below which the integral is not scaled down further
    BOUND_GROWTH = 1.5  # factor by which a bound grows after `bound_patience` steps of being pushed past
    NOISE_SMOOTHING = 0.1  # weight of the newest squared innovation in the running noise estimate

    def __init__(self, kp: float = 0.25, ki: float = 0.03, kff: float = 2.0, c_min: float = -0.1,
                 c_max: float = 0.5, horizon: float = 6.0, level_smoothing: float = 0.4,
                 trend_smoothing: float = 0.2, initial: float = 0.0, bound_limit: float | None = 1.0,
                 bound_patience: int = 10, adapt_gain: bool = True, authority: float = 1.0,
                 momentum: float = 0.9, momentum_compensation: float = 0.5, noise_reference: float = 0.25,
                 anneal_min: float | None = None, compensation_clip: str = "symmetric",
                 integral_error: str = "level", pull_gain: float = 0.0, pull_smoothing: float = 0.3,
                 target_lookahead: str = "horizon", integral_scale: str = "none", antiwindup: str = "conditional",
                 integral_clip: float = 1.0, integral_beyond: str = "clip", lower_ki_fraction: float = 0.0):
        if not (isinstance(lower_ki_fraction, (int, float)) and not isinstance(lower_ki_fraction, bool)
                and 0.0 <= lower_ki_fraction <= 1.0):
            raise ValueError(f"entropy_bonus_lower_ki_fraction must be a number in [0, 1], got "
                             f"{lower_ki_fraction!r}.")
        self.lower_ki_fraction = float(lower_ki_fraction)
        if integral_beyond not in self.INTEGRAL_BEYONDS:
            raise ValueError(f"entropy_bonus_integral_beyond must be one of {self.INTEGRAL_BEYONDS}, got "
                             f"{integral_beyond!r}.")
        self.integral_beyond = integral_beyond
        if not (isinstance(integral_clip, (int, float)) and not isinstance(integral_clip, bool)
                and 0.0 < integral_clip <= 1.0):
            raise ValueError(f"entropy_bonus_integral_clip must be a number in (0, 1], got {integral_clip!r}.")
        self.integral_clip = float(integral_clip)
        if antiwindup not in self.ANTIWINDUPS:
            raise ValueError(f"entropy_bonus_antiwindup must be one of {self.ANTIWINDUPS}, got {antiwindup!r}.")
        self.antiwindup = antiwindup
        if integral_scale not in self.INTEGRAL_SCALES:
            raise ValueError(f"entropy_bonus_integral_scale must be one of {self.INTEGRAL_SCALES}, got "
                             f"{integral_scale!r}.")
        self.integral_scale = integral_scale
        self.signal: float | None = None  # the smoothed signal fraction (note_signal), None before any
        if target_lookahead not in self.TARGET_LOOKAHEADS:
            raise ValueError(f"entropy_bonus_target_lookahead must be one of {self.TARGET_LOOKAHEADS}, got "
                             f"{target_lookahead!r}.")
        self.target_lookahead = target_lookahead
        if compensation_clip not in self.COMPENSATION_CLIPS:
            raise ValueError(f"entropy_bonus_compensation_clip must be one of {self.COMPENSATION_CLIPS}, got "
                             f"{compensation_clip!r}.")
        self.compensation_clip = compensation_clip
        if integral_error not in self.INTEGRAL_ERRORS:
            raise ValueError(f"entropy_bonus_integral_error must be one of {self.INTEGRAL_ERRORS}, got "
                             f"{integral_error!r}.")
        self.integral_error = integral_error
        for name, v in (("kp", kp), ("ki", ki), ("kff", kff), ("horizon", horizon)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"entropy_bonus_{name} must be a finite number >= 0, got {v!r}.")
        if not (isinstance(pull_gain, (int, float)) and math.isfinite(pull_gain) and pull_gain >= 0):
            raise ValueError(f"entropy_bonus_pull_gain must be a finite number >= 0, got {pull_gain!r}.")
        self.pull_gain = float(pull_gain)
        for name, v in (("level_smoothing", level_smoothing), ("trend_smoothing", trend_smoothing),
                        ("pull_smoothing", pull_smoothing)):
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
        if anneal_min is not None and not (isinstance(anneal_min, (int, float)) and math.isfinite(anneal_min)
                                           and anneal_min <= 0.0):
            raise ValueError(f"entropy_bonus_anneal_min must be a finite number <= 0 or None, got {anneal_min!r}.")
        self.anneal_min = None if anneal_min is None else float(anneal_min)
        self.falling = False  # whether the last update's target fell ("hold_symmetric" keeps the kick in the bounds)
        self.annealing = False  # falling, with anneal_min set: the anneal bound applied
        self.kp, self.ki, self.kff = float(kp), float(ki), float(kff)
        self.c_min, self.c_max = float(c_min), float(c_max)
        self.bound_limit, self.bound_patience = limit, int(bound_patience)
        self.pushed = 0  # consecutive updates whose output was clipped at a bound with the error pushing further
        self.horizon = float(horizon)
        self.level_smoothing, self.trend_smoothing = float(level_smoothing), float(trend_smoothing)
        self.pull_smoothing = float(pull_smoothing)
        self.pull_cov: float | None = None  # smoothed sums of entropy_pull_sums (step 4's pull feed-forward)
        self.pull_var: float | None = None
        self.pull_count: float | None = None  # smoothed token count of the sums (their means: Var / count)
        self.pull_term = 0.0  # the pull feed-forward of the last update
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

    @property
    def gain_scale(self) -> float:
        """Factor applied to ``kp``, ``ki`` and ``kff``: ``authority / estimated authority`` with ``adapt_gain``, else
        1."""
        if not self.adapt_gain:
            return 1.0
        return min(self.authority.gain_scale, self.noise_cap)

    @property
    def varentropy(self) -> float | None:
        """The token mean of ``(log p + H)^2`` (the smoothed pull sums), an estimate of the policy's varentropy
        ``Var_{a~pi}(log pi(a))``, by which a bonus moves entropy in the natural-gradient model (``dH = eta * c *
        Var``); ``None`` before a pull with its token count. Logged, not acted on: as an authority (``Var / H``
        scaling the gains) it cut the gains where SmolLM2's entropy dipped, since a sharp policy's ``Var / H`` is
        large (docs: benchmarks, the pull)."""
        if self.pull_var is None or not self.pull_count:
            return None
        return self.pull_var / self.pull_count

    @property
    def noise(self) -> float:
        """The filter's relative innovation noise: root of the running mean of ``((H - H_pred) / H_pred)^2``, with
        ``H_pred`` the filter's one-step prediction and ``H`` the step's own reading (:meth:`note_step_reading`,
        else the measurement the law acts on); starts at ``noise_reference``."""
        return math.sqrt(self.noise_var)

    def note_step_reading(self, reading: float) -> None:
        """The step's own entropy reading, where the law acts on a steadier estimate of the same quantity
        (``entropy_measurement="generation_batch"``): the next :meth:`update` measures the noise cap's noise on it.

        Why: a steadier input is not a steadier plant. On SmolLM2 the generation-batch estimate is 2.5-3x steadier
        than the step's reading, so a noise cap read on it let the gain scale rise 1.5-3x (on an authority estimate
        that feedback biases low), and the loop swung again (0.66 to 1.11 nats on a held 0.95; docs: benchmarks,
        the generation-batch measurement). Read on the step's reading, the cap lets the gains rise only where the
        policy's per-step entropy itself is measured cleanly."""
        self.step_reading = float(reading) if math.isfinite(reading) else None

    @property
    def noise_cap(self) -> float:
        """Upper limit on the gain scale: ``max(1, noise_reference / noise)``. Raising the gains above the reference
        passes more measurement noise into the coefficient; the reference gains were chosen at the noise of the
        SmolLM2 testbed's per-step measurement (~0.25), so they are raised only as far as the measurement is
        cleaner than that (the tiny testbed: ~0.05, up to 5x). Lowering the gains is never limited."""
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
        # a jump of the target (a one-step anneal) is not a slope: the term is held within the bounds
        scale = self.gain_scale
        low = self.low_bound(slope)
        self.feedforward = min(self.c_max, max(self.c_min, scale * self.kff * slope / max(target, 1e-6)))
        pull = self.pull_coefficient
        self.pull_term = 0.0 if pull is None else min(self.c_max, max(low, self.pull_gain * pull))
        self.raw = self.integral + scale * self.kp * self.error + self.feedforward + self.pull_term
        self.law = min(self.c_max, max(low, self.raw))
        pushing_past = self._pushes_past_a_bound(self.error, low)
        summed = self.error  # what the integral sums (step 5)
        if self.integral_error == "level":
            summed = _clipped_relative_error(next_target, self.level)
        if self.integral_beyond == "skip" and abs(summed) > self.integral_clip:
            summed = 0.0  # a transient far from the target says nothing about the balancing coefficient
        if self.integral_beyond == "skip_overshoot" and summed < -self.integral_clip:
            summed = 0.0  # the same, for an overshoot only: a collapse below the target is still summed
        summed = min(self.integral_clip, max(-self.integral_clip, summed))
        share = self._integral_share(summed, low)
        if share > 0.0:
            self.integral = min(self.c_max, max(low, self.integral + share * scale * self.ki * summed))
        else:
            self.integral = max(low, self.integral)  # the anneal's bound applies to the integral as well
        # the anneal's bound is a choice, not a sign that the knob's scale is too small: it does not grow
        self._grow_bounds(pushing_past and not (self.annealing and self.error < 0))
        self.value = self._compensate(self.law, low)
        self._applied(self.value)
        return self.value

    def target_ahead(self, target: float, slope: float) -> float:
        """The target the predicted entropy is compared with (step 2 of the class docstring): ``horizon`` steps
        ahead along the target's slope, within a factor 2 of ``target`` (``"horizon"``), or one step ahead
        (``"step"``)."""
        if self.target_lookahead == "step":
            return max(target + slope, 1e-6)
        ahead = target + max(self.horizon, 1.0) * slope
        return max(min(2.0 * target, max(0.5 * target, ahead)), 1e-6)

    def note_pull(self, cov: float, var: float, count: float | None = None) -> None:
        """The step's two pull sums (:func:`~trl_entropy.scheduling.measurement.entropy_pull_sums`, global): each
        is smoothed (weight ``pull_smoothing`` on the newest), and their ratio is :attr:`pull_coefficient`.
        Non-finite values or a ``var`` that is not positive are ignored."""
        if not (math.isfinite(cov) and math.isfinite(var) and var > 0):
            return
        counted = count is not None and math.isfinite(count) and count > 0
        if self.pull_cov is None or self.pull_var is None:
            self.pull_cov, self.pull_var = float(cov), float(var)
            self.pull_count = float(count) if counted else None
            return
        w = self.pull_smoothing
        self.pull_cov = (1.0 - w) * self.pull_cov + w * float(cov)
        self.pull_var = (1.0 - w) * self.pull_var + w * float(var)
        if counted:
            self.pull_count = float(count) if self.pull_count is None else (1.0 - w) * self.pull_count + w * count

    def note_signal(self, fraction: float) -> None:
        """The step's signal fraction (global): the share of its tokens with a non-zero advantage
        (:func:`~trl_entropy.scheduling.measurement.signal_token_count`). It is smoothed (weight
        ``SIGNAL_SMOOTHING`` on the newest step; logged as ``entropy_control/bonus_signal_fraction``); with
        ``integral_scale="signal"`` the integral is then multiplied by the smoothed fraction's ratio to its previous
        value (each floored at ``SIGNAL_FLOOR``), within the bounds (step 5 of the class docstring). A value that
        is not finite or lies outside [0, 1] is ignored."""
        if not (isinstance(fraction, (int, float)) and math.isfinite(fraction) and 0.0 <= fraction <= 1.0):
            return
        previous = self.signal
        w = self.SIGNAL_SMOOTHING
        self.signal = float(fraction) if previous is None else (1.0 - w) * previous + w * float(fraction)
        if self.integral_scale == "signal" and previous is not None:
            ratio = max(self.signal, self.SIGNAL_FLOOR) / max(previous, self.SIGNAL_FLOOR)
            self.integral = min(self.c_max, max(self.c_min, self.integral * ratio))

    @property
    def pull_coefficient(self) -> float | None:
        """The coefficient that balances the policy gradient's pull on entropy, estimated from the smoothed sums of
        :meth:`note_pull` (``cov / var``); ``None`` before any."""
        if self.pull_cov is None or self.pull_var is None:
            return None
        return pull_coefficient(self.pull_cov, self.pull_var)

    def _pushes_past_a_bound(self, error: float, low: float) -> bool:
        """Whether the law's unclipped output sits at a bound (``c_max``, or ``low``) with ``error`` asking to go
        further (conditional integration, and the bounds' growth)."""
        return (self.raw >= self.c_max and error > 0) or (self.raw <= low and error < 0)

    def _integral_share(self, error: float, low: float) -> float:
        """The share of its update the integral takes (step 5 of the class docstring): 0 while the output sits at
        the upper bound with ``error`` pushing further; at the lower bound so pushed, 1 with ``"upper"`` (held
        within the bound) and ``lower_ki_fraction`` with ``"conditional"`` (0 by default: it stops there too);
        elsewhere 1."""
        if self.raw >= self.c_max and error > 0:
            return 0.0
        if self.raw <= low and error < 0:
            return 1.0 if self.antiwindup == "upper" else self.lower_ki_fraction
        return 1.0

    def low_bound(self, slope: float) -> float:
        """The coefficient's lower bound for an update whose target moved by ``slope``: ``c_min``, or, with
        ``anneal_min`` set and the target falling, ``max(c_min, anneal_min)`` (step 7 of the class docstring).
        Sets :attr:`falling` and :attr:`annealing`."""
        self.falling = slope < 0.0
        self.annealing = self.anneal_min is not None and self.falling
        return max(self.c_min, self.anneal_min) if self.annealing else self.c_min

    def _compensate(self, law: float, low: float) -> float:
        """The coefficient to apply so that the optimizer's momentum average of it moves toward ``law`` without its
        lag (step 6 of the class docstring).

        Adam's first moment after this step is ``(beta * m + (1 - beta) * c) / (1 - beta^t)``; setting that to
        ``law`` gives ``c_full = ((1 - beta^t) * law - beta * m) / (1 - beta)``. The applied coefficient is
        ``law + compensation * (c_full - law)``, held within ``+-2 * max(c_max, -low)`` (``"symmetric"``) or
        within twice the bounds in effect (``"bounds"``; ``low``: the lower one), or the first while the target
        holds or rises and the second while it falls (``"hold_symmetric"``). Either way it lies between
        ``law`` and ``c_full``, so the average lands between its previous value and ``law``."""
        if self.compensation <= 0.0 or self.momentum <= 0.0:
            return law
        beta, t = self.momentum, self.moment_steps + 1
        # c_full - law = beta * ((1 - beta^(t-1)) * law - m) / (1 - beta): 0 when the average already holds `law`
        gap = (1.0 - beta ** (t - 1)) * law - self.authority.u
        if abs(gap) <= 1e-12:  # a held coefficient stays exactly itself (no rounding drift)
            return law
        c = law + self.compensation * beta * gap / (1.0 - beta)
        if self.compensation_clip == "symmetric" or (self.compensation_clip == "hold_symmetric" and not self.falling):
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
        """+1 when the last output was clipped at ``c_max`` with entropy below its target and that bound can grow no
        more (``bound_limit``), -1 likewise at ``c_min``, else 0."""
        top = self.c_max if self.bound_limit is None else self.bound_limit
        bottom = self.c_min if self.bound_limit is None else -self.bound_limit
        if self.raw >= self.c_max >= top and self.error > 0:
            return 1
        if self.raw <= self.c_min <= bottom and self.error < 0:
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
            "pull_cov": self.pull_cov,
            "pull_var": self.pull_var,
            "pull_term": self.pull_term,
            "pull_count": self.pull_count,
            "signal": self.signal,
            "authority": self.authority.state_dict(),
            "config": {"kp": self.kp, "ki": self.ki, "kff": self.kff, "c_min": self.c_min, "c_max": self.c_max,
                       "horizon": self.horizon, "level_smoothing": self.level_smoothing,
                       "trend_smoothing": self.trend_smoothing, "adapt_gain": self.adapt_gain,
                       "authority": self.authority.prior, "momentum": self.authority.momentum,
                       "momentum_compensation": self.compensation, "noise_reference": self.noise_reference,
                       "anneal_min": self.anneal_min, "compensation_clip": self.compensation_clip,
                       "integral_error": self.integral_error, "pull_gain": self.pull_gain,
                       "pull_smoothing": self.pull_smoothing, "target_lookahead": self.target_lookahead,
                       "integral_scale": self.integral_scale, "antiwindup": self.antiwindup,
                       "integral_clip": self.integral_clip, "integral_beyond": self.integral_beyond,
                       "lower_ki_fraction": self.lower_ki_fraction},
        }

    def load_state_dict(self, state: dict) -> None:
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
        self.pull_cov = None if state.get("pull_cov") is None else float(state["pull_cov"])
        self.pull_var = None if state.get("pull_var") is None else float(state["pull_var"])
        self.pull_term = float(state.get("pull_term", 0.0))
        self.pull_count = None if state.get("pull_count") is None else float(state["pull_count"])
        self.signal = None if state.get("signal") is None else float(state["signal"])
        if "authority" in state:
            self.authority.load_state_dict(state["authority"])


def _clipped_relative_error(target: float, value: float) -> float:
    """``(target - value) / target``, clipped to [-1, 1] (step 2 of the bonus's law)."""
    return min(1.0, max(-1.0, (target - value) / target))


def _limit_push(direction: int, value: float, low: float, high: float) -> int:
    if direction > 0 and value >= high:
        return 1
    if direction < 0 and value <= low:
        return -1
    return 0


class SaturationMonitor:
    """Tells when a feedback control can no longer close its error: for ``window`` consecutive updates its knob
    has sat at a limit while the error kept asking to go further the same way (``push``: +1 or -1, 0 when the knob
    is not at a limit or not pushed into it).

    A saturated control is at its full authority: the target lies outside what this knob can reach on this model,
    task and learning rate. :meth:`update` returns whether the control is saturated after this step; ``events``
    counts the times it became saturated.
    """

    def __init__(self, window: int = 20):
        if window < 1:
            raise ValueError(f"saturation_window must be >= 1, got {window}.")
        self.window = int(window)
        self.push = 0
        self.count = 0
        self.events = 0

    @property
    def saturated(self) -> bool:
        """Whether the last ``window`` updates all pushed into a limit in the same direction."""
        return self.count >= self.window

    def update(self, push: int) -> bool:
        """Record one optimizer step's ``push`` (a control's ``limit_push``: +1, -1 or 0) and return
        :attr:`saturated`. A push of the other sign, or 0, starts the count again."""
        was = self.saturated
        push = _sign(push)
        self.count = 0 if push == 0 else (self.count + 1 if push == self.push else 1)
        self.push = push
        if self.saturated and not was:
            self.events += 1
        return self.saturated

    def state_dict(self) -> dict:
        return {"push": self.push, "count": self.count, "events": self.events}

    def load_state_dict(self, state: dict) -> None:
        self.push = int(state.get("push", 0))
        self.count = int(state.get("count", 0))
        self.events = int(state.get("events", 0))
