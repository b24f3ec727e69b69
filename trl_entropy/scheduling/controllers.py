"""Feedback controllers with explicit, serialisable state.

A controller sees one (measured, target) pair per optimizer step — both already global statistics, identical on
every process — and returns the knob value for the next step. It never touches a trainer. The feedback entropy
bonus's law lives in :mod:`.bonus` (imported here too, where it was defined before).
"""

from __future__ import annotations

import math
from collections import deque

from .bonus import AuthorityEstimator, EntropyBonusController  # noqa: F401  (their home before the split)

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

    def __init__(self, window: int = 3):
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

    def message(self, step: int, control: str, knob: str | None, value: float, measured: float, target: float) -> str:
        """The warning of a control that became saturated (``knob``: its name, ``value``: where it sits)."""
        side = "below" if self.push > 0 else "above"
        way = "raise" if self.push > 0 else "lower"
        shown = f"its knob {knob} = {value:g}" if knob else "its knob"
        if knob == "entropy_coef":  # the feedback bonus: its reach is its bound
            widen = ("raise entropy_bonus_bound_limit (the largest size the coefficient's bounds may grow to)" +
                     (", or entropy_bonus_min's size" if self.push < 0 else ""))
        else:
            widen = ("widen the knob's range where it has one, or set entropy_bonus_assist=True so that the feedback "
                     "bonus takes the remainder")
        return (f"Step {step}: entropy_control={control!r} is saturated: for {self.window} steps {shown} has sat at "
                f"the limit of its reach while the entropy stayed {side} its target ({measured:.3f} vs "
                f"{target:.3f} nats): this control cannot {way} the entropy further with this model, task and "
                f"learning rate. To reach the target, {widen}; or choose a target {'lower' if self.push > 0 else 'higher'}"
                " than this one. Logged as entropy_control/saturated.")

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
