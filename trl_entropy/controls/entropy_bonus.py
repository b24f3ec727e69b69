"""The feedback entropy bonus (this package's recommendation): `entropy_control="entropy_bonus"`, and its assist
beside a paper's control (`entropy_bonus_assist=True`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..scheduling.controllers import EntropyBonusController, SaturationMonitor
from ._base import ControllerControl, EntropyControl, check_choice, check_int, check_range, is_number, register_control


@dataclass
class EntropyBonusSettings:
    r"""
    Settings of the feedback entropy bonus (`entropy_control="entropy_bonus"`; also `entropy_bonus_assist`).

    The loss is TRL's `L_policy - c * H` with a signed coefficient `c` (a bonus above 0, a penalty below) moved every
    optimizer step by `trl_entropy.scheduling.EntropyBonusController`: the measured entropy is filtered (level and
    trend) and predicted `entropy_bonus_horizon` steps ahead; `c = clip(I + kp * e + kff * slope, min, max)` with the
    relative error `e = (target - predicted) / target` clipped to [-1, 1], the target's relative slope per step, and
    an integral `I += ki * e_I` that stops at the bounds (anti-windup), `e_I` the filtered level's own relative error.
    `entropy_coef` is the initial coefficient. What each setting was measured against: `docs/benchmarks.md`.
    `entropy_control="trl_adaptive"` is TRL's own rule (`use_adaptive_entropy`, set for you) with its
    `entropy_target` driven by the schedule.

    Parameters:
        entropy_bonus_kp (`float`, *optional*, defaults to `0.25`):
            Proportional gain: coefficient per unit of relative entropy error, at the reference authority
            `entropy_bonus_authority`; >= 0.
        entropy_bonus_ki (`float`, *optional*, defaults to `0.03`):
            Integral gain: coefficient added per optimizer step per unit of relative error (at the reference
            authority); >= 0.
        entropy_bonus_kff (`float`, *optional*, defaults to `2.0`):
            Feed-forward gain on the target's relative change per step (an anneal lowers the coefficient before an
            error builds up); >= 0.
        entropy_bonus_min (`float`, *optional*, defaults to `-0.5`):
            Lower bound of the coefficient (an entropy penalty); <= 0. As large as `entropy_bonus_max`, so that a
            task that drives the entropy up is held too; no penalty acts while the measured entropy is below the
            target.
        entropy_bonus_max (`float`, *optional*, defaults to `0.5`):
            Upper bound of the coefficient; >= 0.
        entropy_bonus_bound_limit (`float`, *optional*, defaults to `1.0`):
            The most either bound may grow to: when the coefficient has sat at a bound with the error pushing further
            for `entropy_bonus_bound_patience` steps, that bound grows by 1.5x (the knob's scale, learned online).
            Set it to the bounds' size to keep them fixed.
        entropy_bonus_bound_patience (`int`, *optional*, defaults to `2`):
            Steps at a bound, pushed further, before it grows; >= 1.
        entropy_bonus_horizon (`float`, *optional*, defaults to `6.0`):
            Optimizer steps ahead at which the filtered entropy is predicted from its trend; >= 0 (0: the filtered
            level).
        entropy_bonus_level_smoothing (`float`, *optional*, defaults to `0.4`):
            Weight of the newest measurement in the filtered level, in (0, 1] (1: no filtering).
        entropy_bonus_trend_smoothing (`float`, *optional*, defaults to `0.2`):
            Weight of the newest level change in the filtered trend, in (0, 1].
        entropy_bonus_adapt_gain (`bool`, *optional*, defaults to `True`):
            Scale `kp`, `ki` and `kff` by `entropy_bonus_authority / g`, where `g` is the knob's authority estimated
            online (relative entropy change per step per unit of coefficient, by recursive least squares on the
            measured entropy and the coefficients applied through the optimizer's momentum), held within 5x of the
            reference. The best gains are inversely proportional to `g`, which differs between models, tasks and
            learning rates. The gains rise above the reference only as far as the measurement is cleaner than the
            reference noise (0.25 relative per step): `scale <= max(1, 0.25 / noise)`. The scale is then multiplied by a
            factor calibrated by the error's persistence (x1.15 a step while an error larger than the filtered
            level's noise keeps its sign and the prediction does not close it, x0.5 when it changes sign, within
            [0.25, 8]), so that the gains fit the loop's own speed and delay. Logged as
            `entropy_control/bonus_authority`, `entropy_control/bonus_gain_scale` (the product) and
            `entropy_control/bonus_noise`.
        entropy_bonus_authority (`float`, *optional*, defaults to `1.0`):
            Reference authority `g` at which the gains are given, and the estimate's starting value; > 0.
        entropy_bonus_momentum_compensation (`float`, *optional*, defaults to `0.5`):
            Fraction of the optimizer's first-moment lag that the applied coefficient cancels, in [0, 1]. A loss
            coefficient reaches the weights through Adam's gradient average (`adam_beta1`, ~10 steps at 0.9); with
            1 the applied coefficient is chosen so that this average equals the law's output at once (it moves
            more than the law's output). The law's output is logged as `entropy_control/bonus_law`.
        entropy_bonus_compensation_clip (`str`, *optional*, defaults to `"symmetric"`):
            How far the applied (momentum-compensated) coefficient may move: `"symmetric"` within `+-2 *
            max(entropy_bonus_max, -entropy_bonus_min)`, as far down as up, or `"bounds"` within twice each bound
            (what `recipes/entropy_bonus_smollm2_wsd_tight.yaml` sets). Either way the optimizer's average of it
            stays within the bounds.
        entropy_bonus_assist (`bool`, *optional*, defaults to `False`):
            With a target-following paper control (`adaptive_clip`, `entrocraft`, `positive_reweight` with the
            `"entropy"` schedule, `entropic`): the paper's knob acts first; when it has sat at a limit with the error
            pushing the same way for `entropy_bonus_assist_window` steps, the feedback bonus takes the remainder.
            While the knob is off its limits as long, the bonus's integral shrinks 5% a step; it hands back (its
            coefficient decays) once that integral no longer holds entropy the way it was called for. Logged as
            `entropy_control/assist_active` and `entropy_control/entropy_coef`.
        entropy_bonus_assist_window (`int`, *optional*, defaults to `5`):
            Steps at a limit before the bonus takes over, and off the limits before it starts handing back; >= 1.
    """

    entropy_bonus_kp: float = field(
        default=0.25,
        metadata={"help": "Entropy bonus: proportional gain, coefficient per unit of relative entropy error at the "
                  "reference authority; >= 0, default 0.25."},
    )
    entropy_bonus_ki: float = field(
        default=0.03,
        metadata={"help": "Entropy bonus: integral gain per optimizer step, coefficient per unit of relative error; "
                  ">= 0, default 0.03."},
    )
    entropy_bonus_kff: float = field(
        default=2.0,
        metadata={"help": "Entropy bonus: feed-forward gain on the target's relative slope per step (an anneal moves "
                  "the coefficient before an error builds up); >= 0, default 2."},
    )
    entropy_bonus_min: float = field(
        default=-0.5,
        metadata={"help": "Entropy bonus: lower bound of the coefficient (negative: an entropy penalty); <= 0, default "
                  "-0.5; no penalty acts while the entropy is below its target."},
    )
    entropy_bonus_max: float = field(
        default=0.5,
        metadata={"help": "Entropy bonus: upper bound of the coefficient; >= 0, default 0.5."},
    )
    entropy_bonus_bound_limit: float = field(
        default=1.0,
        metadata={"help": "Entropy bonus: the most either bound may grow to when the error keeps pushing past it; >= "
                  "the size of entropy_bonus_min and entropy_bonus_max, default 1."},
    )
    entropy_bonus_bound_patience: int = field(
        default=2,
        metadata={"help": "Entropy bonus: steps in a row the coefficient must sit at a bound, pushed further, before "
                  "that bound grows by 1.5x (up to entropy_bonus_bound_limit); >= 1, default 2."},
    )
    entropy_bonus_horizon: float = field(
        default=6.0,
        metadata={"help": "Entropy bonus: optimizer steps ahead at which the filtered entropy is predicted from its "
                  "trend (brakes before an overshoot); >= 0, default 6, 0 = feed back the filtered level."},
    )
    entropy_bonus_level_smoothing: float = field(
        default=0.4,
        metadata={"help": "Entropy bonus: weight of the newest measurement in the filtered level, in (0, 1], default "
                  "0.4."},
    )
    entropy_bonus_trend_smoothing: float = field(
        default=0.2,
        metadata={"help": "Entropy bonus: weight of the newest level change in the filtered trend, in (0, 1], default "
                  "0.2."},
    )
    entropy_bonus_adapt_gain: bool = field(
        default=True,
        metadata={"help": "Entropy bonus: scale kp, ki and kff by entropy_bonus_authority / g, with g the knob's "
                  "authority estimated online (held within 5x of the reference; raised above 1 only as far as the "
                  "measurement is cleaner than 0.25 relative noise per step); default True."},
    )
    entropy_bonus_authority: float = field(
        default=1.0,
        metadata={"help": "Entropy bonus: reference authority (relative entropy change per step per unit of "
                  "coefficient) at which the gains are given, and the online estimate's start; > 0, default 1."},
    )
    entropy_bonus_momentum_compensation: float = field(
        default=0.5,
        metadata={"help": "Entropy bonus: fraction of the optimizer's first-moment lag (Adam's beta1) the applied "
                  "coefficient cancels, in [0, 1], default 0.5 (1: the momentum average of the coefficient follows "
                  "the law without lag; 0: the law's output is applied as it is)."},
    )
    entropy_bonus_compensation_clip: str = field(
        default="symmetric",
        metadata={"help": "Entropy bonus: how far the momentum-compensated coefficient may move: 'symmetric' (the "
                  "default: within +-2 * max(entropy_bonus_max, -entropy_bonus_min), as far down as up) or 'bounds' "
                  "(within twice each bound). The optimizer's average stays within the bounds either way.",
                  "choices": list(EntropyBonusController.COMPENSATION_CLIPS)},
    )
    entropy_bonus_assist: bool = field(
        default=False,
        metadata={"help": "Give a target-following paper control (adaptive_clip, entrocraft, positive_reweight, "
                  "entropic) the feedback entropy bonus as a second actuator, used only while the paper's knob is "
                  "saturated."},
    )
    entropy_bonus_assist_window: int = field(
        default=5,
        metadata={"help": "Entropy bonus assist: optimizer steps the paper's knob must sit at a limit before the bonus "
                  "takes over, and off its limits before the bonus starts handing back; >= 1."},
    )


def _bonus_controller(args, initial: float = 0.0) -> EntropyBonusController:
    return EntropyBonusController(
        kp=args.entropy_bonus_kp,
        ki=args.entropy_bonus_ki,
        kff=args.entropy_bonus_kff,
        c_min=args.entropy_bonus_min,
        c_max=args.entropy_bonus_max,
        bound_limit=args.entropy_bonus_bound_limit,
        bound_patience=args.entropy_bonus_bound_patience,
        horizon=args.entropy_bonus_horizon,
        level_smoothing=args.entropy_bonus_level_smoothing,
        trend_smoothing=args.entropy_bonus_trend_smoothing,
        initial=initial,
        adapt_gain=args.entropy_bonus_adapt_gain,
        authority=args.entropy_bonus_authority,
        momentum=_optimizer_momentum(args),
        momentum_compensation=args.entropy_bonus_momentum_compensation,
        compensation_clip=args.entropy_bonus_compensation_clip,
    )


def _optimizer_momentum(args) -> float:
    """The first-moment momentum through which a loss coefficient reaches the weights: Adam's ``beta1`` for the
    Adam family (Transformers' default optimizers), 0 for plain SGD and Adafactor."""
    optim = str(getattr(args, "optim", "adamw_torch")).lower()
    if "sgd" in optim or "adafactor" in optim:
        return 0.0
    return float(getattr(args, "adam_beta1", 0.9))


def _set_coefficient(trainer, value: float) -> None:
    """Apply the coefficient ``value`` from the next micro-batch on: TRL's own ``- value * H``."""
    from .._trl_private import set_entropy_coefficient

    set_entropy_coefficient(trainer, value)


@register_control("entropy_bonus")
class EntropyBonusControl(ControllerControl):
    """A signed entropy coefficient under feedback (:class:`~trl_entropy.scheduling.EntropyBonusController`): the
    loss is TRL's ``L_policy - c * H`` with ``c`` moved every optimizer step so that entropy follows the schedule; a
    negative ``c`` is a penalty, so an anneal is driven down, not waited for. TRL's own loss applies it (no fork)."""

    follows_target = True
    knob_name = "entropy_coef"
    uses_signal_fraction = True  # the step's signal fraction is smoothed and logged
    card_text = ("feedback entropy bonus (trl-entropy): the loss is TRL's `L_policy − c·H` with a signed coefficient "
                 "`c` (a penalty when negative) moved each optimizer step by a filtered, predictive PI law with "
                 "feed-forward from the target's slope, bounded and with anti-windup, its gains scaled by the "
                 "knob's authority estimated online (capped by the measurement's noise), and half of the optimizer "
                 "momentum's lag cancelled in the applied coefficient.")
    config_prefixes = ("entropy_bonus_", "entropy_coef")
    citations = ("he2025",)
    settings_class = EntropyBonusSettings
    removed_settings = {name: (value, "pre-law-cut") for name, value in {
        "entropy_bonus_anneal_min": None, "entropy_bonus_integral_error": "level", "entropy_bonus_pull_gain": 0.0,
        "entropy_bonus_pull_smoothing": 0.3, "entropy_bonus_target_lookahead": "horizon",
        "entropy_bonus_penalty_scope": "all", "entropy_bonus_integral_scale": "none",
        "entropy_bonus_antiwindup": "conditional", "entropy_bonus_integral_clip": 1.0,
        "entropy_bonus_integral_beyond": "clip", "entropy_bonus_lower_ki_fraction": 0.0}.items()}
    demo_description = "feedback entropy bonus: a signed coefficient under PI + feed-forward control (this package)"
    docs_page = "entropy-bonus.md"
    docs_row = ('feedback entropy bonus: a signed coefficient (bonus or penalty) under a filtered, predictive PI law with feed-forward, momentum compensation and a gain calibrated by the persistence of its error (this package; the recommendation for following a schedule)',
                '`entropy_coef`: law within [−0.5, 0.5] (each bound growing to 1 in size; no penalty below the target), applied within ±2× the larger bound',
                'every update',
                'yes')

    @classmethod
    def validate_settings(cls, args):
        """The bonus's fields: checked when it is the control, and with ``entropy_bonus_assist=True``."""
        for name in ("entropy_bonus_kp", "entropy_bonus_ki", "entropy_bonus_kff", "entropy_bonus_horizon"):
            check_range(args, name, 0.0, math.inf)
        check_range(args, "entropy_bonus_min", -math.inf, 0.0)
        check_range(args, "entropy_bonus_max", 0.0, math.inf)
        authority = args.entropy_bonus_authority
        if not (is_number(authority) and authority > 0):
            raise ValueError(f"entropy_bonus_authority must be a finite number > 0, got {authority!r}.")
        check_range(args, "entropy_bonus_momentum_compensation", 0.0, 1.0)
        check_choice(args, "entropy_bonus_compensation_clip", EntropyBonusController.COMPENSATION_CLIPS)
        check_range(args, "entropy_bonus_level_smoothing", 0.0, 1.0, low_open=True)
        check_range(args, "entropy_bonus_trend_smoothing", 0.0, 1.0, low_open=True)
        size = max(-args.entropy_bonus_min, args.entropy_bonus_max)
        limit = args.entropy_bonus_bound_limit
        if not is_number(limit) or limit < size:
            raise ValueError(
                f"entropy_bonus_bound_limit must be a finite number >= max(-entropy_bonus_min, entropy_bonus_max) = "
                f"{size}, got {limit!r}."
            )
        check_int(args, "entropy_bonus_bound_patience", 1)
        check_int(args, "entropy_bonus_assist_window", 1)

    @classmethod
    def validate(cls, args):
        if args.use_adaptive_entropy:
            raise ValueError(
                "entropy_control='entropy_bonus' moves entropy_coef itself; use_adaptive_entropy=True would run "
                "TRL's rule on the same coefficient. Turn use_adaptive_entropy off, or use "
                "entropy_control='trl_adaptive' for TRL's rule."
            )
        if not (args.entropy_bonus_min <= args.entropy_coef <= args.entropy_bonus_max):
            raise ValueError(
                f"entropy_coef (the initial coefficient of entropy_control='entropy_bonus', {args.entropy_coef}) "
                f"must lie in [entropy_bonus_min, entropy_bonus_max] = [{args.entropy_bonus_min}, "
                f"{args.entropy_bonus_max}]."
            )

    def __init__(self, args):
        super().__init__(args)
        self.controller = _bonus_controller(args, initial=float(args.entropy_coef))

    def apply(self, trainer) -> None:
        _set_coefficient(trainer, self.controller.value)

    def note_step_reading(self, reading):
        self.controller.note_step_reading(reading)

    def note_signal(self, fraction):
        self.controller.note_signal(fraction)

    def observe(self, measured, target):
        if target is not None:
            self.controller.update(measured, target)

    def metrics(self):
        c = self.controller
        out = {"bonus_integral": c.integral, "bonus_feedforward": c.feedforward,
               "bonus_authority": c.authority.estimate, "bonus_gain_scale": c.gain_scale, "bonus_law": c.law,
               "bonus_noise": c.noise, "bonus_averaged": c.averaged}
        if c.predicted is not None:
            out["bonus_predicted_entropy"] = c.predicted
        out.update(_signal_metrics(c))
        return out


def _signal_metrics(c: EntropyBonusController) -> dict[str, float]:
    """``bonus_signal_fraction``: the smoothed share of tokens with a non-zero advantage (once measured)."""
    return {} if c.signal is None else {"bonus_signal_fraction": c.signal}



class AssistedControl:
    """A paper's control with the feedback entropy bonus as a second actuator (``entropy_bonus_assist=True``).

    The paper's knob acts first. When it has sat at a limit of its range with the error pushing the same way for
    ``entropy_bonus_assist_window`` optimizer steps in a row (the saturation test of the trainer's monitor, on a
    shorter window), the bonus takes the remainder: its controller runs on the same measured entropy and target.
    While the bonus acts and the paper's knob has been off its limits for as many steps, the bonus hands the load
    back gradually: its integral (the coefficient it holds against the policy's own pull on entropy) shrinks by
    ``HANDBACK_BLEED`` per step, so the paper's knob, if it can, takes up the error this leaves; if it cannot, it
    returns to its limit, the bleed stops and the bonus's integral grows back. The bonus hands back once it has
    been idle for ``entropy_bonus_assist_window`` steps in a row with the knob still off its limits: its integral no
    longer holds the direction it was called for (``called_for``: +1 to raise the entropy, -1 to lower it; below
    ``HANDBACK_LEVEL`` times its bound in that direction) and its law's output is small (within ``HANDBACK_QUIET``
    times its bound). Measured failures of looser rules, adaptive clip-higher on SmolLM2 (held target): the knob
    leaves its limit *because* the bonus has closed the error, or because the entropy overshoots; handing back then
    (on the knob's recovery alone, on the sign of the law's output, or on the integral alone, which an overshoot
    unwinds) let the entropy collapse again each time. After a hand-back the bonus's coefficient and integral shrink
    by ``HANDBACK_DECAY`` per step. While the paper's knob acts alone, the bonus controller's filter keeps tracking
    the entropy, so a hand-over starts from the present level and trend.

    Every hook of the paper's control is delegated unchanged; ``entropy_control/assist_active`` (1: the bonus acts)
    and ``entropy_control/entropy_coef`` are logged every step.
    """

    HANDBACK_DECAY = 0.8
    HANDBACK_BLEED = 0.95
    HANDBACK_LEVEL = 0.02
    HANDBACK_QUIET = 0.2
    _own = ("inner", "bonus", "monitor", "recovered", "active", "window", "handovers", "called_for", "idle")

    def __init__(self, inner: EntropyControl, args):
        self.inner = inner
        self.bonus = _bonus_controller(args)
        self.window = int(args.entropy_bonus_assist_window)
        self.monitor = SaturationMonitor(self.window)
        self.recovered = 0
        self.active = False
        self.handovers = 0
        self.called_for = 0
        self.idle = 0  # consecutive acting steps with the knob recovered and the bonus idle (see the docstring)

    def __getattr__(self, name):  # every hook and attribute the wrapper does not define: the paper's control
        return getattr(self.__dict__["inner"], name)

    def __setattr__(self, name, value):
        if name in self._own:
            object.__setattr__(self, name, value)
        else:
            setattr(self.inner, name, value)

    def apply(self, trainer) -> None:
        self.inner.apply(trainer)
        _set_coefficient(trainer, self.bonus.value)

    uses_signal_fraction = True  # the assist's bonus gets the signal fraction too

    def note_step_reading(self, reading):
        self.inner.note_step_reading(reading)
        self.bonus.note_step_reading(reading)

    def note_signal(self, fraction):
        self.inner.note_signal(fraction)
        self.bonus.note_signal(fraction)

    def observe(self, measured, target):
        self.inner.observe(measured, target)
        if target is None:
            return
        push = self.inner.limit_push
        saturated = self.monitor.update(push)
        self.recovered = self.recovered + 1 if push == 0 else 0
        if not self.active and saturated:
            self.active = True
            self.handovers += 1
            self.called_for = 0
            self.idle = 0
        elif self.active and self.recovered >= self.window and self._holding() <= 0 and self.idle >= self.window:
            self.active = False
        if self.active:
            self.bonus.update(measured, target)
            if self.called_for == 0:  # the direction of the law's first (filtered) output after the hand-over
                law = self.bonus.law
                self.called_for = (law > 0) - (law < 0) or (1 if target > measured else -1)
            if self.recovered >= self.window:
                self.bonus.integral *= self.HANDBACK_BLEED
            quiet = abs(self.bonus.law) <= self.HANDBACK_QUIET * max(self.bonus.c_max, -self.bonus.c_min)
            idle = self.recovered >= self.window and self._holding() <= 0 and quiet
            self.idle = self.idle + 1 if idle else 0
        else:
            self.bonus.decay(self.HANDBACK_DECAY)
            self.bonus.track(measured, target)

    def _holding(self) -> float:
        """How far the bonus's integral still holds the direction it was called for, in units of its bound, less
        ``HANDBACK_LEVEL`` (> 0: it still carries load)."""
        bound = self.bonus.c_max if self.called_for > 0 else -self.bonus.c_min
        return self.called_for * self.bonus.integral / max(bound, 1e-12) - self.HANDBACK_LEVEL

    @property
    def limit_push(self) -> int:
        """Saturated only when both actuators are: the paper's knob, and the bonus once it acts."""
        return self.bonus.limit_push if self.active else self.inner.limit_push

    def metrics(self):
        out = dict(self.inner.metrics())
        out.update({"assist_active": float(self.active), "entropy_coef": self.bonus.value})
        out.update(_signal_metrics(self.bonus))
        return out

    def state_dict(self):
        return {"inner": self.inner.state_dict(), "bonus": self.bonus.state_dict(),
                "monitor": self.monitor.state_dict(), "recovered": self.recovered, "active": self.active,
                "handovers": self.handovers, "called_for": self.called_for, "idle": self.idle}

    def load_state_dict(self, state):
        self.inner.load_state_dict(state["inner"])
        self.bonus.load_state_dict(state["bonus"])
        self.monitor.load_state_dict(state["monitor"])
        self.recovered = int(state["recovered"])
        self.active = bool(state["active"])
        self.handovers = int(state.get("handovers", 0))
        held = self.bonus.integral  # states saved before the rule existed: the direction the bonus holds now
        self.called_for = int(state.get("called_for", (held > 0) - (held < 0) if self.active else 0))
        self.idle = int(state.get("idle", 0))
