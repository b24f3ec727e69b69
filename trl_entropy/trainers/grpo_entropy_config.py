"""`GRPOEntropyConfig`: TRL's `GRPOConfig` plus the fields that make entropy a scheduled hyperparameter."""

from __future__ import annotations

import copy
import warnings
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from trl import GRPOConfig

from .._paths import is_hub_model_id
from ..controls import BUILTIN_SETTINGS
from ..controls._base import CONTROL_REGISTRY, is_number as _is_number
from ..controls._base import check_choice, did_you_mean, parse_control_settings, removed_setting
from ..controls._covariance import COV_SCOPES  # noqa: F401 (kept importable from here)
from ..controls.entrocraft import ENTROCRAFT_ENTROPY_SOURCES, ENTROCRAFT_MODES, ENTROCRAFT_NORMALIZERS  # noqa: F401
from ..controls.positive_reweight import POSITIVE_REWEIGHT_SCHEDULES  # noqa: F401
from ..losses.policy_loss import SUPPORTED_LOSS_TYPES
from ..scheduling.schedules import CALLABLE_SCHEDULE_PREFIX, INITIAL, parse_entropy_value, schedule_label
from ._config_groups import (
    COEFFICIENT_CONTROLS,
    ENTROPY_CONTROLS,
    ENTROPY_MEASUREMENTS,
    SCHEDULE_NAMES,
    TARGET_FOLLOWING_CONTROLS,
    _bool_field_names,
    _cpu_has_bf16_instructions,
    _InitSignature,
    _RunSettings,
    _ScheduleSettings,
    check_schedule_arity,
)
from .answers import AnswerSettings

__all__ = [
    "GRPOEntropyConfig",
    "ENTROPY_CONTROLS",
    "TARGET_FOLLOWING_CONTROLS",
    "COEFFICIENT_CONTROLS",
    "parse_entropy_value",
]


def _control_registry() -> dict:
    return CONTROL_REGISTRY


@dataclass
class GRPOEntropyConfig(*reversed(BUILTIN_SETTINGS), AnswerSettings, _RunSettings, _ScheduleSettings, GRPOConfig):
    r"""
    Configuration for [`GRPOEntropyTrainer`]: every field of TRL's `GRPOConfig`, plus the entropy controls below.
    With `entropy_control="none"` (the default) training is exactly TRL's GRPO.

    > Entropy control

    Parameters:
        entropy_control (`str`, *optional*, defaults to `"none"`):
            Which entropy control to run. `"none"`: plain GRPO. `"entropy_bonus"`: a signed entropy coefficient under
            feedback (recommended to follow a schedule). `"trl_adaptive"`: TRL's adaptive entropy coefficient
            with its target driven by the schedule. `"adaptive_clip"`: adaptive clip-higher of Wang et al.
            (Entropy Scheduling), which moves `epsilon_high` so that the measured entropy tracks the scheduled target.
            `"clip_cov"` / `"kl_cov"`: Clip-Cov / KL-Cov of Cui et al. `"entrocraft"`: rollout rejection of Li et al.
            `"positive_reweight"`, `"w_reinforce"`: advantage-sign reweighting. `"entropic"`: EntroPIC's PI
            controller (Yang et al.). `clip_cov`, `kl_cov` and `entropic` compute the loss on trl_entropy's own loss
            path (equal to TRL's when they select nothing); it supports loss types grpo, bnpo, dr_grpo, dapo, luspo.
            Any name registered with `trl_entropy.register_control` is accepted too (see "Write your own control"
            in the docs); `trl_entropy.controls.CONTROL_REGISTRY` holds them all.
        entropy_schedule (`str`, *optional*):
            Shape of the target entropy curve: `"constant"`, `"linear"`, `"cosine"` or `"wsd"`
            (warmup-stable-anneal). Defaults to `"constant"` when a target-following control is chosen. Must stay
            unset when `entropy_control="none"`. Controls that do not follow a target (`clip_cov`, `kl_cov`,
            `w_reinforce`, `positive_reweight` with a fixed progression) accept a schedule with a warning: its target
            is logged as `entropy_control/target` for reference only, without a tracking error. In Python a
            callable `fn(step, total_steps) -> float` is accepted too (a lambda, a function, a `functools.partial`,
            a schedule object); `step` runs from 0 to `total_steps - 1`. The trainer uses the callable itself, but
            it is not stored: checkpoints (`training_args.bin`), `to_dict()` and `to_json_string()` hold the
            placeholder `"callable:<name>"` instead (e.g. `"callable:lambda (train.py:12)"`), so saving works for
            any callable; to resume from a checkpoint, build the config with the same callable again.
        entropy_schedule_start (`float` or `str`, *optional*):
            Target entropy (nats, mean per completion token) at the start of training. Required by target-following
            controls. `"initial"` is the starting model's own entropy, measured on the first generation batch (one
            no-grad forward, summed over processes), and `"0.9*initial"` a fraction of it; the resolved value is
            logged as `entropy_control/initial_entropy`, kept in checkpoints and written into the model card.
            A target above log(vocabulary size), the largest entropy possible, is refused.
        entropy_schedule_end (`float` or `str`, *optional*):
            Target entropy on the last optimizer step, in nats or as a fraction of the initial entropy
            (`"0.5*initial"`; a bare number is always nats, and beside a relative start a bare end of at most 1
            warns once the start is measured, in case a fraction was meant). Required by `"linear"`, `"cosine"`
            and `"wsd"`; for `"wsd"` it must be <= `entropy_schedule_start` (the anneal goes down). `"constant"`
            ignores it (with a warning when it differs from the start).
        entropy_schedule_warmup_steps (`int`, *optional*, defaults to `0`):
            Optimizer steps during which the target is held at `entropy_schedule_start` before the shape begins.
        entropy_schedule_anneal_ratio (`float`, *optional*, defaults to `0.1`):
            For `"wsd"`: fraction of training, in (0, 1], spent annealing from start to end at the end of training.
        saturation_window (`int`, *optional*, defaults to `3`):
            A target-following control is *saturated* when, for this many optimizer steps in a row, its knob has sat
            at a limit of its range (e.g. `epsilon_high` at `adaptive_clip_max`, lambda at 0, Entrocraft outside its
            band) while the error kept asking to go further the same way: the target lies beyond what the knob can
            reach here. Logged every step as `entropy_control/saturated` (1 or 0); the first time, a warning says so.
        entropy_measurement (`str`, *optional*, defaults to `"step"`):
            The entropy a control acts on, once per optimizer step. `"step"`: the token-mean entropy of the step's
            own completions under the current policy (with `steps_per_generation` k > 1, a 1/k share of the
            generation batch, so the reading varies with which completions the step drew). `"generation_batch"`:
            the current policy's entropy on the whole generation batch, estimated from the step's tokens as
            `H_gen(batch) * sum(H_now) / sum(H_gen)`, where `H_gen` is each token's entropy under the policy that
            generated it, taken from the old-log-prob forward TRL already runs for off-policy updates (no extra
            forward). The ratio cancels the spread between completions and keeps the policy's change. Where TRL
            runs no such forward (an optimizer step covers whole generation batches), it equals `"step"`. Logged as
            `entropy_control/measured_generation_batch`; `entropy_control/measured` stays the step's own reading.

    > Other settings

    Parameters:
        allow_trl_adaptive_entropy (`bool`, *optional*, defaults to `False`):
            Opt-in to run an entropy control together with TRL's own adaptive entropy coefficient
            (`use_adaptive_entropy=True`). Two controllers acting on one quantity usually fight; this must be explicit.
        entropy_plots (`bool`, *optional*, defaults to `True`):
            Write `entropy_curves.png` (measured entropy vs target), `entropy_knob.png`, `reward.png` and, when pass@k
            was evaluated, `pass_at_k.png` into `output_dir` at every save (before a Hub upload) and at the end of
            training. Needs matplotlib; skipped with a warning without it.
        model_card_base_model (`str` or `None`, *optional*, defaults to `None`):
            Hub model id written as `base_model` on the model card (e.g. `"HuggingFaceTB/SmolLM2-135M-Instruct"`), for
            a model loaded from a local folder, whose own name is a path the Hub cannot link. Unset, the card takes
            the model's `_name_or_path` when it is a Hub id, or the repository of a Hugging Face cache snapshot
            folder, and otherwise names the local folder without a `base_model`.
        max_unscorable_batches (`int` or `None`, *optional*, defaults to `3`):
            A generation batch in which no completion got a reward (every reward function returned None or NaN for
            every completion) trains at zero advantage: no policy gradient. Each one warns; this many in a
            row stop training with an error naming the reward functions. Counted in generation batches: one per
            optimizer step with TRL's defaults, one per `steps_per_generation * num_iterations` micro-batches in
            general. `None` never stops (it still warns). Applies to every `entropy_control`, `"none"` included.
        reward_error_search (`bool`, *optional*, defaults to `False`):
            When a reward function raises, the error names the function, the exception and the batch size. With
            `True`, it also re-runs the function on one completion at a time to find the first failing one and names
            its index and prompt: up to one extra call per completion of the batch, which is costly for sandboxed,
            remote or paid reward functions. Async reward functions are never re-run.
        entropy_control_settings (`dict` or `str`, *optional*):
            Settings of a control registered outside the package that declares a `settings_class` (a dataclass):
            a dict of its field names and values, or the same as a JSON object on the command line
            (`--entropy_control_settings '{"my_gain": 0.5}'`). Only the chosen control's settings are read; the
            built-in controls' settings are the fields of their own groups below.

    Each built-in control's own settings are a group of fields, documented with the control (its module in
    `trl_entropy.controls`): `EntropyBonusSettings`, `AdaptiveClipSettings`, `EntrocraftSettings`,
    `PositiveReweightSettings`, `WReinforceSettings`, `CovarianceSettings`, `ClipCovSettings`, `KLCovSettings`,
    `EntropicSettings`. Every field is a field of this config (and of `trl-entropy grpo`); a group's fields are
    checked only when its control is chosen. The answer-diversity metrics' fields (`answer_extractor`,
    `answer_full_reward`, every run) are `AnswerSettings`, documented in `trl_entropy.trainers.answers`.

    Clip-Cov and KL-Cov act through the importance ratio: fully on-policy (one optimizer step per generation batch,
    `num_iterations=1`) KL-Cov reduces to plain policy gradient and Clip-Cov only drops a few tokens' gradient; the
    config warns. Train off-policy: `gradient_accumulation_steps` not a multiple of `steps_per_generation *
    num_iterations` (with the default `gradient_accumulation_steps=1`: `steps_per_generation > 1` or
    `num_iterations > 1`).

    Note: a clip bound only changes the gradient when the importance ratio differs from 1, that is on off-policy
    updates, i.e. when `gradient_accumulation_steps` is not a multiple of `steps_per_generation * num_iterations`
    (e.g. `steps_per_generation=4` with `gradient_accumulation_steps=1`, or `num_iterations=2`). With TRL's defaults
    (one optimizer step per generation batch) `epsilon_high` has no effect and the trainer warns.
    """

    entropy_control_settings: dict | str | None = field(
        default=None,
        metadata={"help": "Settings of a control registered outside the package (its settings_class), as a JSON "
                          "object, e.g. '{\"my_gain\": 0.5}'."},
    )

    # `__new__` below would otherwise be what `inspect.signature`, `help()` and IDEs show: show each class's own
    # dataclass `__init__` (every field), a subclass's included.
    __signature__ = _InitSignature()

    def __new__(cls, *args, **kwargs):
        # a setting a control no longer has: say so, and where it still is, instead of "unexpected keyword argument"
        removed = [message for message in map(removed_setting, kwargs) if message]
        if removed:
            raise TypeError("; ".join(removed) + ".")
        return super().__new__(cls)

    def __post_init__(self):
        self._validate_bool_fields()  # before GRPOConfig acts on a truthy string such as "no"
        control_cls = _control_registry().get(self.entropy_control)
        if control_cls is not None and control_cls.uses_trl_adaptive_entropy:
            self.use_adaptive_entropy = True  # TRL's rule is the control; its target comes from the schedule
        super().__post_init__()
        self._validate_entropy_fields()
        self._validate_model_card_fields()
        self._warn_unused_control_fields()
        self._check_replaced_trl_fields()
        self._warn_bf16_on_cpu()

    def _warn_bf16_on_cpu(self) -> None:
        """A warning for ``bf16=True`` with ``use_cpu=True`` on a CPU without bfloat16 instructions.

        TRL's ``GRPOConfig`` turns ``bf16`` on by default, and on a CPU that is bfloat16 autocast. Measured here (2
        cores, AMD EPYC with AVX2 and no bfloat16 instructions, SmolLM2-135M, 8 completions of 12 tokens a step):
        98 s a step against 7-16 s with ``bf16=False``. A CPU whose flags list ``avx512_bf16`` or ``amx_bf16`` is
        not warned about; where the flags cannot be read (no ``/proc/cpuinfo``), the warning says so."""
        if not (self.bf16 and self.use_cpu):
            return
        has_units = _cpu_has_bf16_instructions()
        if has_units:
            return
        which = ("this CPU lists no bfloat16 instructions (avx512_bf16, amx_bf16)" if has_units is False
                 else "if this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16)")
        warnings.warn(
            f"bf16=True with use_cpu=True trains under bfloat16 autocast on the CPU, and {which}: that is far slower "
            "than float32 (measured on SmolLM2-135M, 2 cores: 98 s a step against 7-16 s). TRL's GRPOConfig turns "
            "bf16 on by default; pass bf16=False (--bf16 false) to train in float32.",
            UserWarning,
            stacklevel=4,
        )

    def _used_config_prefixes(self) -> tuple[str, ...]:
        """The field prefixes of the controls this run uses: the running control's (the registry's
        ``config_prefixes``), and the feedback bonus's with ``entropy_bonus_assist=True``."""
        registry = _control_registry()
        active = registry.get(self.entropy_control)
        used = tuple(active.config_prefixes) if active is not None else ()
        if self.entropy_bonus_assist:
            used += tuple(registry["entropy_bonus"].config_prefixes)
        return used

    def _warn_unused_control_fields(self) -> None:
        """One warning naming every field of another control set away from its default: it has no effect on this run.

        A field belongs to a control through the control's ``config_prefixes`` (the registry); the running control's
        prefixes, and the feedback bonus's with ``entropy_bonus_assist=True``, count as used. Only this config's own
        fields are checked (GRPOConfig's, such as ``epsilon_high`` or ``entropy_coef``, act without any control).
        """
        registry = _control_registry()
        used = self._used_config_prefixes()
        trl_fields = {f.name for f in fields(GRPOConfig)}
        unused: dict[tuple[str, ...], list[str]] = {}  # owning controls -> their fields set here
        for f in fields(self):
            if f.name in trl_fields or f.name == "entropy_bonus_assist" or (used and f.name.startswith(used)):
                continue
            if f.default is MISSING or getattr(self, f.name) == f.default:
                continue
            owners = tuple(name for name, cls in registry.items() if cls.config_prefixes
                           and f.name.startswith(tuple(cls.config_prefixes)))
            if owners:
                unused.setdefault(owners, []).append(f.name)
        if not unused:
            return
        parts = [f"{', '.join(names)} (entropy_control={' or '.join(map(repr, owners))})"
                 for owners, names in unused.items()]
        hint = ""
        if any("entropy_bonus" in owners for owners in unused) and self._can_take_assist():
            hint = " To give this control the feedback bonus as a second actuator, set entropy_bonus_assist=True."
        warnings.warn(
            f"{'; '.join(parts)} set, but entropy_control={self.entropy_control!r} does not use "
            f"{'it' if sum(len(v) for v in unused.values()) == 1 else 'them'}: no effect on this run.{hint}",
            UserWarning,
            stacklevel=4,
        )

    def _check_replaced_trl_fields(self) -> None:
        """A warning for each of TRL's own entropy fields set away from its default that the chosen control replaces
        (so the value would otherwise be dropped without a word), and a ``ValueError`` where the combination
        contradicts itself. Plain GRPO (``entropy_control="none"``) is TRL's and is left alone.

        What each control does with TRL's fields (trl 1.16):

        * ``entropy_target`` is read by TRL's adaptive coefficient only (``use_adaptive_entropy``). Where that rule
          runs with a schedule (``trl_adaptive``, or ``allow_trl_adaptive_entropy``), the trainer writes the scheduled
          target into it every optimizer step; where it does not run, nothing reads it. Either way the value given is
          unused while a control runs, except for TRL's rule beside a control without a schedule.
        * ``entropy_coef_delta``, ``entropy_coef_min``, ``entropy_coef_max``: TRL's adaptive rule's step and bounds,
          unused without it (``entropy_bonus`` has its own law and bounds, ``entropy_bonus_min/max``).
        * ``entropy_coef`` is the initial coefficient of ``entropy_bonus`` and ``trl_adaptive``, and a static bonus
          beside the other controls; with ``entropy_bonus_assist=True`` the assist sets the coefficient from the
          first step on (starting at 0), so a static value never applies.
        * ``use_adaptive_entropy`` with a control other than ``trl_adaptive`` is refused in ``_validate_entropy_fields``
          (unless ``allow_trl_adaptive_entropy``).
        * ``top_entropy_quantile < 1``: TRL's adaptive rule measures the entropy of the top-quantile tokens only (the
          tokens that train), while a schedule's target, ``"initial"``, ``entropy_control/measured`` and the tracking
          error are the mean over every completion token. With TRL's rule following the schedule the two differ by
          construction: refused.
        """
        control = self.entropy_control
        if control == "none":
            return
        trl_rule = bool(self.use_adaptive_entropy)  # TRL's adaptive coefficient runs (trl_adaptive sets it)
        scheduled = self.entropy_schedule is not None
        who = f"entropy_control={control!r}"
        if trl_rule and scheduled and self.top_entropy_quantile < 1.0:
            raise ValueError(
                f"top_entropy_quantile={self.top_entropy_quantile} with {who} and TRL's adaptive entropy coefficient "
                "following the schedule: TRL's rule measures the entropy of the top-quantile tokens only, but the "
                "scheduled target (and 'initial', entropy_control/measured, the tracking error) is the mean over every "
                "completion token, so the rule would hold a different quantity at the target than the one reported. "
                "Set top_entropy_quantile=1.0, or use entropy_control='entropy_bonus', which measures every token."
            )
        if self._fields_set("entropy_target") and (scheduled or not trl_rule):
            start = (f" (entropy_schedule_start={self.entropy_schedule_start!r})"
                     if self.entropy_schedule_start is not None else "")
            if trl_rule:
                instead = (f"the trainer overwrites it every optimizer step with the schedule's target{start}, which "
                           "TRL's adaptive coefficient follows")
            elif self._control_follows_target():
                instead = ("it is the target of TRL's adaptive coefficient (use_adaptive_entropy), which does not run "
                           f"here; the control follows the schedule's target{start}")
            else:
                instead = ("it is the target of TRL's adaptive coefficient (use_adaptive_entropy), which does not run "
                           "here, and this control follows no target")
            warnings.warn(
                f"entropy_target={self.entropy_target} set with {who}: {instead}, so entropy_target has no effect on "
                "this run. Give the target as entropy_schedule_start (and entropy_schedule_end).",
                UserWarning,
                stacklevel=4,
            )
        bounds = self._fields_set("entropy_coef_delta", "entropy_coef_min", "entropy_coef_max")
        if bounds and not trl_rule:
            names = ", ".join(f"{n}={getattr(self, n)}" for n in bounds)
            if control == "entropy_bonus":
                instead = (f"{who} moves the coefficient by its own law within [entropy_bonus_min, "
                           f"entropy_bonus_max] = [{self.entropy_bonus_min}, {self.entropy_bonus_max}]")
            else:
                instead = f"{who} does not run TRL's adaptive entropy coefficient (use_adaptive_entropy=False)"
            warnings.warn(
                f"{names} set: {'it is a setting' if len(bounds) == 1 else 'they are settings'} of TRL's adaptive "
                f"entropy coefficient, and {instead}, so {'it has' if len(bounds) == 1 else 'they have'} no effect "
                "on this run.",
                UserWarning,
                stacklevel=4,
            )
        if self.entropy_bonus_assist and self._fields_set("entropy_coef"):
            warnings.warn(
                f"entropy_coef={self.entropy_coef} set with {who} and entropy_bonus_assist=True: the assist's feedback "
                "bonus sets the entropy coefficient from the first optimizer step on (starting at 0, and 0 while the "
                f"control's own knob copes), so the static coefficient {self.entropy_coef} has no effect on this run.",
                UserWarning,
                stacklevel=4,
            )

    def _control_follows_target(self) -> bool:
        control_cls = _control_registry().get(self.entropy_control)
        return control_cls is not None and control_cls.follows_target_for(self)

    def _can_take_assist(self) -> bool:
        """Whether ``entropy_bonus_assist=True`` is allowed with this control: a target-following paper control
        (following its target with this config) whose knob is not the entropy coefficient."""
        control_cls = _control_registry().get(self.entropy_control)
        return (self.entropy_control in TARGET_FOLLOWING_CONTROLS and self.entropy_control not in COEFFICIENT_CONTROLS
                and control_cls.follows_target_for(self))

    def _validate_model_card_fields(self) -> None:
        if self.model_card_base_model is not None and not is_hub_model_id(self.model_card_base_model):
            raise ValueError(
                "model_card_base_model must be a Hugging Face Hub model id such as 'owner/name' (letters, digits, "
                f"'-', '_', '.'), not a local path; got {self.model_card_base_model!r}."
            )

    # ------------------------------------------------------------------ serialisation
    # A callable entropy_schedule (often a lambda or a local function) cannot be pickled or written as JSON. The
    # live config keeps it (the trainer calls it); every stored or logged copy gets a readable placeholder instead.
    def _schedule_placeholder(self) -> str | None:
        schedule = self.__dict__.get("entropy_schedule")
        return CALLABLE_SCHEDULE_PREFIX + schedule_label(schedule) if callable(schedule) else None

    def __getstate__(self):
        state = self.__dict__.copy()
        placeholder = self._schedule_placeholder()
        if placeholder is not None:  # pickling (torch.save of training_args.bin): store the name, not the callable
            state["entropy_schedule"] = placeholder
        return state

    def __copy__(self):
        new = self.__class__.__new__(self.__class__)
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo):
        # copy.deepcopy would go through __getstate__ and lose the callable: copy the fields, share the callable.
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            keep = key == "entropy_schedule" and callable(value)
            new.__dict__[key] = value if keep else copy.deepcopy(value, memo)
        return new

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        placeholder = self._schedule_placeholder()
        if placeholder is not None:
            d["entropy_schedule"] = placeholder
        return d

    # ------------------------------------------------------------------ validation
    def _validate_bool_fields(self) -> None:
        """Boolean fields must hold booleans: a string such as "no" or "false" is truthy and would turn them on.

        Fields of this class must be `True`/`False`; inherited (TRL / transformers) boolean fields reject strings.
        """
        inherited = GRPOConfig.__dataclass_fields__
        for name in _bool_field_names(type(self)):
            value = getattr(self, name)
            own = name not in inherited
            if isinstance(value, str) or (own and not isinstance(value, bool)):
                raise ValueError(f"{name} must be True or False, got {value!r} ({type(value).__name__}).")

    def _fields_set(self, *names: str) -> list[str]:
        """Those of ``names`` whose value differs from the field's default."""
        return [n for n in names if getattr(self, n) != self.__dataclass_fields__[n].default]

    def _validate_entropy_fields(self) -> None:
        if self.entropy_control not in ENTROPY_CONTROLS:
            raise ValueError(
                f"entropy_control must be one of {list(ENTROPY_CONTROLS)}, got {self.entropy_control!r}."
                f"{did_you_mean(self.entropy_control, ENTROPY_CONTROLS)} A control of your own must be registered "
                "(trl_entropy.register_control) before the config is built."
            )
        control = self.entropy_control
        control_cls = _control_registry().get(control)  # None for "none"
        follows_target = control_cls is not None and control_cls.follows_target_for(self)
        schedule_fields_set = self._fields_set("entropy_schedule", "entropy_schedule_start", "entropy_schedule_end",
                                               "entropy_schedule_warmup_steps", "entropy_schedule_anneal_ratio")
        if control == "none" and schedule_fields_set:
            raise ValueError(
                f"{', '.join(schedule_fields_set)} {'is' if len(schedule_fields_set) == 1 else 'are'} set but "
                "entropy_control='none': nothing would follow the schedule. Choose an entropy_control (the recommended "
                "one is 'entropy_bonus'), or attach trl_entropy.EntropyScheduleCallback to drive TRL's own "
                "use_adaptive_entropy target."
            )
        if self.entropy_schedule is not None and not callable(self.entropy_schedule):
            if isinstance(self.entropy_schedule, str) and self.entropy_schedule.startswith(CALLABLE_SCHEDULE_PREFIX):
                raise ValueError(
                    f"entropy_schedule={self.entropy_schedule!r} is the placeholder a saved config keeps for a "
                    "callable schedule (callables are not stored in checkpoints or logged configs); pass the same "
                    "callable again as entropy_schedule."
                )
            if self.entropy_schedule not in SCHEDULE_NAMES:
                raise ValueError(
                    f"entropy_schedule must be one of {list(SCHEDULE_NAMES)} or a callable, got "
                    f"{self.entropy_schedule!r}."
                )
        elif callable(self.entropy_schedule):
            check_schedule_arity(self.entropy_schedule)
        schedule_defaulted = self.entropy_schedule is None
        if follows_target:
            if self.entropy_schedule is None:
                self.entropy_schedule = "constant"
            if self.entropy_schedule_start is None and not callable(self.entropy_schedule):
                hint = (f" (entropy_target, TRL's target for its adaptive coefficient, is not this control's target: "
                        f"pass entropy_schedule_start={self.entropy_target} instead.)"
                        if self._fields_set("entropy_target") else "")
                raise ValueError(
                    f"entropy_schedule_start must be set for entropy_control={control!r}: a target entropy in nats "
                    f"(>= 0), 'initial' (the starting model's own entropy) or a fraction of it such as '0.9*initial'."
                    + hint
                )
        elif schedule_fields_set and control != "none":
            if self.entropy_schedule is None and self.entropy_schedule_start is not None:
                self.entropy_schedule = "constant"
            why = control_cls.ignores_target_because(self)
            warnings.warn(
                f"entropy_control={control!r} with {', '.join(schedule_fields_set)}: {why}, so the schedule does not "
                "steer it. When a schedule is built, its target is logged as entropy_control/target for reference "
                "only (no tracking error). Controls that follow a target: "
                f"{list(TARGET_FOLLOWING_CONTROLS)}.",
                UserWarning,
                stacklevel=3,
            )
            if isinstance(self.entropy_schedule, str) and self.entropy_schedule_start is None:
                raise ValueError(
                    f"entropy_schedule={self.entropy_schedule!r} needs entropy_schedule_start (a target entropy in "
                    "nats, >= 0)."
                )
        for name in ("entropy_schedule_start", "entropy_schedule_end"):
            value = getattr(self, name)
            try:
                parsed = parse_entropy_value(value)
            except ValueError as err:
                raise ValueError(f"{name} {err}") from None
            if parsed is None:
                continue
            kind, number = parsed
            if number < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}.")
            if kind == "nats":
                setattr(self, name, number)  # "0.8" from the command line is 0.8
            else:
                setattr(self, name, INITIAL if number == 1.0 else f"{number:g}*{INITIAL}")
        self._validate_assist()
        if not isinstance(self.entropy_schedule_warmup_steps, int) or self.entropy_schedule_warmup_steps < 0:
            raise ValueError(
                f"entropy_schedule_warmup_steps must be an integer >= 0, got {self.entropy_schedule_warmup_steps!r}."
            )
        if self.max_steps > 0 and self.entropy_schedule_warmup_steps >= self.max_steps:
            raise ValueError(
                f"entropy_schedule_warmup_steps ({self.entropy_schedule_warmup_steps}) must be < max_steps "
                f"({self.max_steps}): the schedule would never leave its warm-up."
            )
        ratio = self.entropy_schedule_anneal_ratio
        if not _is_number(ratio) or not (0.0 < ratio <= 1.0):
            raise ValueError(f"entropy_schedule_anneal_ratio must be in (0, 1], got {ratio!r}.")
        self._validate_schedule_shape(schedule_defaulted)

        check_choice(self, "entropy_measurement", ENTROPY_MEASUREMENTS)
        if isinstance(self.saturation_window, bool) or not isinstance(self.saturation_window, int) \
                or self.saturation_window < 1:
            raise ValueError(f"saturation_window must be an integer >= 1, got {self.saturation_window!r}.")

        limit = self.max_unscorable_batches
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise ValueError(f"max_unscorable_batches must be an integer >= 1 or None, got {limit!r}.")

        # The chosen control's own settings, and only its (the feedback bonus's too when it assists); then its checks
        # of how they fit the rest of the config.
        self._check_control_settings_field(control_cls)
        if control_cls is not None:
            control_cls.validate_settings(self)
        if self.entropy_bonus_assist and control != "entropy_bonus":
            _control_registry()["entropy_bonus"].validate_settings(self)
        if control_cls is not None and control_cls.uses_token_hooks:  # shared by every control with token hooks
            # On trl_entropy's own loss path (Clip-Cov, KL-Cov) these are what the path implements; EntroPIC adds its
            # term to TRL's own loss (additive_loss_term) but keeps the same limits, the settings it is tested in.
            additive = getattr(control_cls, "additive_loss_term", False)
            where = ("adds a term built on the PPO importance ratio to TRL's loss, implemented for" if additive else
                     "changes the per-token loss on trl_entropy's own loss path, which implements")
            if self.loss_type not in SUPPORTED_LOSS_TYPES:
                raise ValueError(
                    f"entropy_control={self.entropy_control!r} {where} loss_type in {list(SUPPORTED_LOSS_TYPES)}; got "
                    f"loss_type={self.loss_type!r}."
                )
            if self.use_adaptive_entropy:
                raise ValueError(
                    f"entropy_control={self.entropy_control!r} and TRL's use_adaptive_entropy would run two "
                    "controllers on the same entropy; turn use_adaptive_entropy off (a static entropy_coef works)."
                    if additive else
                    f"entropy_control={self.entropy_control!r} runs trl_entropy's own loss path, which does not "
                    "implement TRL's use_adaptive_entropy; turn it off (a static entropy_coef works)."
                )

        if control_cls is not None:
            control_cls.validate(self)  # the chosen control's own checks (trl_entropy.controls)

        if (control_cls is not None and not control_cls.uses_trl_adaptive_entropy and self.use_adaptive_entropy
                and not self.allow_trl_adaptive_entropy):
            raise ValueError(
                f"use_adaptive_entropy=True (TRL's adaptive entropy coefficient) together with "
                f"entropy_control={self.entropy_control!r} runs two controllers on the same entropy. Set "
                "allow_trl_adaptive_entropy=True to do it anyway, or use one of them."
            )

    @property
    def schedule_needs_initial_entropy(self) -> bool:
        """Whether the schedule's start or end is given relative to the starting model's measured entropy."""
        return any(isinstance(v, str) for v in (self.entropy_schedule_start, self.entropy_schedule_end))

    def _validate_assist(self) -> None:
        """``entropy_bonus_assist=True`` needs a paper control that can take the bonus as a second actuator."""
        control = self.entropy_control
        if self.entropy_bonus_assist:
            if not self._can_take_assist():
                assistable = [c for c in TARGET_FOLLOWING_CONTROLS if c not in COEFFICIENT_CONTROLS]
                fixed = control in assistable  # an assistable control that does not follow its target here
                raise ValueError(
                    f"entropy_bonus_assist=True needs a target-following paper control, one of {assistable} (with "
                    f"positive_reweight_schedule='entropy'); got entropy_control={control!r}"
                    + (" with a fixed progression." if fixed else ".")
                    + (" Its knob already is the entropy coefficient." if control in COEFFICIENT_CONTROLS else "")
                )
            if self.use_adaptive_entropy:
                raise ValueError(
                    "entropy_bonus_assist=True moves entropy_coef; it cannot run with use_adaptive_entropy=True "
                    "(TRL's rule on the same coefficient)."
                )

    def _validate_schedule_shape(self, schedule_defaulted: bool) -> None:
        """A named schedule's start/end must describe the curve its name promises."""
        name, start, end = self.entropy_schedule, self.entropy_schedule_start, self.entropy_schedule_end
        if not isinstance(name, str):
            return
        if isinstance(start, str) or isinstance(end, str):  # relative to the initial entropy: compare fractions
            start_kind, start = parse_entropy_value(start) if start is not None else (None, None)
            end_kind, end = parse_entropy_value(end) if end is not None else (None, None)
            if start_kind != end_kind and end is not None:  # one in nats, one relative: compared once measured
                start = None
        if name in ("linear", "cosine", "wsd") and end is None:
            raise ValueError(
                f"entropy_schedule={name!r} needs entropy_schedule_end (the target of the last step); without it the "
                "target would stay at entropy_schedule_start all along. Set entropy_schedule_end (>= 0), or use "
                "entropy_schedule='constant'."
            )
        if name == "wsd" and start is not None and end > start:
            raise ValueError(
                f"entropy_schedule='wsd' (warmup-stable-anneal) anneals the target down, but entropy_schedule_end "
                f"({end}) > entropy_schedule_start ({start}): the 'anneal' would raise it. Swap the two values, or "
                "use entropy_schedule='linear' or 'cosine' for a rising target."
            )
        if name == "constant" and end is not None and start is not None and end != start:
            default = " (the default when entropy_schedule is unset)" if schedule_defaulted else ""
            warnings.warn(
                f"entropy_schedule_end ({end}) is ignored: entropy_schedule is 'constant'{default}, so the target "
                f"stays at entropy_schedule_start ({start}). Set entropy_schedule to 'linear', 'cosine' or 'wsd' to "
                "move it to entropy_schedule_end.",
                UserWarning,
                stacklevel=4,
            )

    def _check_control_settings_field(self, control_cls) -> None:
        """``entropy_control_settings`` belongs to a control registered outside the package with settings of its
        own (a ``settings_class`` whose fields are not the config's): refused for any other."""
        given = parse_control_settings(self.entropy_control_settings)
        if not given:
            return
        own = control_cls is not None and control_cls.settings_class is not None and any(
            f.name not in self.__dataclass_fields__ for f in fields(control_cls.settings_class))
        if not own:
            raise ValueError(
                f"entropy_control_settings={self.entropy_control_settings!r} set, but entropy_control="
                f"{self.entropy_control!r} declares no settings of its own (a built-in control's settings are config "
                "fields: set them directly)."
            )

    @property
    def is_off_policy(self) -> bool:
        """Whether some optimizer steps use rollouts generated before the previous update (ratio can differ from 1).

        vLLM sampling also makes the ratio differ from 1 (sampler/trainer mismatch), but only marginally.
        """
        # The same condition TRL uses to decide whether it needs old log-probs (grpo_trainer, trl 1.16).
        generate_every = self.steps_per_generation * self.num_iterations
        return self.gradient_accumulation_steps % generate_every != 0
