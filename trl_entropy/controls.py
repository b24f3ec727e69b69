"""Registry of entropy controls. One control = one small object that says which trainer hooks it uses.

Hooks (see docs/architecture.md):

* ``apply(trainer)``            (A, knob): set the knobs TRL reads (e.g. ``trainer.epsilon_high``) for the next step.
* ``observe(measured, target)`` (E, control): called once per optimizer step with the global measured entropy and
  the scheduled target, identical on every process; updates internal state.
* ``transform_rollouts(advantages, ctx)`` (B, rollouts): once per generation batch, after TRL computed the
  advantages; returns a :class:`RolloutDecision` (keep-mask and local counts). ``ctx`` carries the global
  pre-update rollout entropy, the target and the rollouts' global offset.
* ``advantage_weights(advantages, ctx)`` (B, per step): per micro-batch, multiplicative weights on the sequence
  advantages (equal to per-token weights, since the surrogate is linear in the advantage).
* ``token_hooks(...)``           (C, per token): per micro-batch, a :class:`~trl_entropy.losses.policy_loss.TokenHooks`
  for our own loss path (Clip-Cov, KL-Cov); only controls with ``uses_token_hooks`` switch the trainer to
  that path. A control whose hooks only add a term to the loss (``additive_loss_term``, EntroPIC) keeps TRL's
  ``_compute_loss``: the trainer adds the term from the log-probs of TRL's own loss forward. ``step_counts()``
  returns local counts the trainer sums across processes at each optimizer-step boundary and passes to
  ``step_metrics(totals)``.
* ``metrics()``                 extra scalars to log under ``entropy_control/``.
* ``state_dict()`` / ``load_state_dict()``: everything needed to resume exactly.

Controls never compute statistics across processes themselves: the trainer reduces them first.

The registry is the one list of controls: the config's choices (``GRPOEntropyConfig.entropy_control``), which ones
follow a target, the model card's text and citations and the demo's schedule all come from the registered classes'
attributes. A control written outside the package is a subclass of :class:`EntropyControl` registered with
:func:`register_control` (docs/write-your-own-control.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import math
import os
import sys
import warnings

import torch

from .losses import band_from_target, entrocraft_acceptance, entrocraft_sign, sign_weights
from .losses.covariance import (
    clip_cov_selection,
    kl_cov_selection,
    kl_cov_threshold,
    masked_sums,
    means_from_sums,
    ppo_clipped_tokens,
    selection_quota,
    token_covariance,
    wide_float_dtype,
)
from .citations import BIBTEX
from .losses.policy_loss import SUPPORTED_LOSS_TYPES, TokenHooks
from .losses.reweighting import positive_reweight_progression
from .scheduling.controllers import (
    AdaptiveClipController,
    EntropyBonusController,
    LambdaStepController,
    PIController,
    SaturationMonitor,
)

__all__ = [
    "EntropyControl",
    "AdaptiveClipControl",
    "EntrocraftControl",
    "PositiveReweightControl",
    "WReinforceControl",
    "ClipCovControl",
    "KLCovControl",
    "EntropicControl",
    "EntropyBonusControl",
    "TrlAdaptiveControl",
    "AssistedControl",
    "TokenBatch",
    "RolloutContext",
    "RolloutDecision",
    "CONTROL_REGISTRY",
    "register_control",
    "get_control_class",
    "build_control",
]


@dataclass
class RolloutContext:
    """What a control may know about a generation batch. Every field is identical on every process."""

    entropy: float | None  # global token-mean entropy of the rollouts before the update (None if not measured)
    target: float | None  # scheduled target of the current optimizer step
    step: int  # optimizer steps done
    total_steps: int
    global_offset: int  # index of this process's first rollout in the global generation batch
    global_size: int  # rollouts in the global generation batch
    seed: int


@dataclass
class RolloutDecision:
    keep: torch.Tensor | None = None  # (B_local,) bool, None = keep all
    counts: dict[str, float] = field(default_factory=dict)  # local counts, summed across processes by the trainer
    scalars: dict[str, float] = field(default_factory=dict)  # already-global values, logged as they are


class EntropyControl:
    """Base class of every entropy control. Subclass it and register the subclass with :func:`register_control`;
    ``GRPOEntropyConfig(entropy_control=<name>)`` then accepts it and ``GRPOEntropyTrainer`` runs it.

    Class attributes (read by the config, the trainer, the model card and the demo; the registry is the one place
    they are declared):

    * ``name``: the config value of ``entropy_control``, set by :func:`register_control`.
    * ``follows_target``: whether the control steers entropy toward the scheduled target. The config then requires
      ``entropy_schedule_start`` (and defaults ``entropy_schedule`` to ``"constant"``); the trainer logs the tracking
      error and watches for saturation. A control that does not follow a target still gets the target logged for
      reference when a schedule is given. :meth:`follows_target_for` may refine it from the config.
    * ``knob_name``: the name of the value :attr:`knob` returns, logged each optimizer step as
      ``entropy_control/<knob_name>`` (``None``: nothing logged). A knob named ``"entropy_coef"`` is TRL's entropy
      coefficient: such a control gets no ``entropy_bonus_assist`` on top.
    * ``uses_rollouts``, ``uses_advantage_weights``, ``uses_token_hooks``, ``needs_step_plan``: which hooks the
      trainer calls (see the module docstring).
    * ``uses_pull_sums``: the trainer sums :func:`~trl_entropy.scheduling.measurement.entropy_pull_sums` over
      each optimizer step's loss forwards (no extra pass) and passes the global sums to :meth:`note_pull`.
    * ``additive_loss_term`` (with ``uses_token_hooks``): the control's :class:`TokenHooks` only ever set the
      additive adjustment (``adjust_mask``, ``adjust_alpha``), never a per-token change of the surrogate. The trainer
      then keeps TRL's own ``_compute_loss`` and adds the term, computed from the log-probs of TRL's loss forward
      (no second forward; the loss and gradient equal those of our loss path).
    * ``uses_trl_adaptive_entropy``: the control is TRL's own adaptive entropy coefficient (the config sets
      ``use_adaptive_entropy=True`` for it).
    * ``card_text``: one paragraph for the model card's method section (default: the first paragraph of the class
      docstring).
    * ``config_prefixes``: prefixes of the config fields the model card lists as the method's parameters.
    * ``citations``: BibTeX keys, each in :data:`trl_entropy.citations.BIBTEX` or in the class's own ``bibtex``
      dict (key -> BibTeX entry), cited on the model card.

    A control may check its own config fields in the classmethod :meth:`validate`, called by ``GRPOEntropyConfig``
    after the shared checks when the control is chosen.
    """

    name: str = "base"
    follows_target: bool = False
    knob_name: str | None = None
    uses_rollouts: bool = False  # implements transform_rollouts
    uses_advantage_weights: bool = False  # implements advantage_weights
    uses_token_hooks: bool = False  # implements token_hooks (the trainer then computes the loss on our own path)
    uses_pull_sums: bool = False  # implements note_pull (the policy gradient's pull on entropy, per step)
    additive_loss_term: bool = False  # token_hooks only add a term (adjust_*): TRL's own loss plus that term
    needs_step_plan: bool = False  # implements plan_window (selection decided once per optimizer step, globally)
    uses_trl_adaptive_entropy: bool = False  # the control is TRL's use_adaptive_entropy (set by the config)
    card_text: str = ""  # one paragraph for the model card ("" = the class docstring's first paragraph)
    config_prefixes: tuple[str, ...] = ()  # config fields listed on the model card
    citations: tuple[str, ...] = ()  # keys of trl_entropy.citations.BIBTEX or of `bibtex`
    bibtex: dict[str, str] = {}  # a control's own BibTeX entries, by key (never mutated)

    def __init__(self, args):
        self.args = args

    @classmethod
    def follows_target_for(cls, args) -> bool:
        """Whether the control follows the target with this config (default: ``follows_target``)."""
        return bool(cls.follows_target)

    @classmethod
    def ignores_target_because(cls, args) -> str:
        """Why, with this config, the control does not follow a target (completes a sentence of the config's
        warning when a schedule is given anyway)."""
        return "it does not follow a target entropy"

    @classmethod
    def validate(cls, args) -> None:
        """Checks of this control's own config fields; raise ``ValueError`` naming the field. Called by
        ``GRPOEntropyConfig`` when this control is chosen, after the shared checks (``args`` is the config)."""

    @classmethod
    def method_text(cls) -> str:
        """The model card's paragraph: ``card_text``, else the class docstring's first paragraph."""
        if cls.card_text:
            return cls.card_text
        doc = (cls.__doc__ or "").strip()
        if doc and doc != (EntropyControl.__doc__ or "").strip():
            return " ".join(doc.split("\n\n", 1)[0].split())
        return f"`{cls.name}`, a control registered outside trl-entropy ({cls.__module__}.{cls.__qualname__})."

    def apply(self, trainer) -> None:
        """Push the current knob values into the trainer (called before each optimizer step's micro-batches)."""

    def observe(self, measured: float, target: float | None) -> None:
        """Update from one optimizer step's global measured entropy and its scheduled target."""

    def note_step_reading(self, reading: float) -> None:
        """With ``entropy_measurement="generation_batch"``, called just before :meth:`observe` with the step's own
        reading (``observe`` gets the generation-batch estimate). Default: ignored."""

    def note_pull(self, cov: float, var: float, count: float | None = None) -> None:
        """With ``uses_pull_sums``, called just before :meth:`observe` with the step's two global pull sums
        (:func:`~trl_entropy.scheduling.measurement.entropy_pull_sums`) and their token count. Default: ignored."""

    def note_signal(self, fraction: float) -> None:
        """With ``uses_pull_sums``, called just after :meth:`note_pull` with the step's global signal fraction: the
        share of its tokens with a non-zero advantage (:func:`~trl_entropy.scheduling.measurement.signal_token_count`;
        NaN where it was not counted on every micro-batch). Default: ignored."""

    @property
    def knob(self) -> float | None:
        return None

    @property
    def limit_push(self) -> int:
        """When the last update left the knob at a limit of its range with the error asking to go further that way
        (the control is at full authority), the way the entropy still has to move: +1 up (it is below its target),
        -1 down; else 0. Read by the trainer's saturation monitor."""
        return 0

    def transform_rollouts(self, advantages: torch.Tensor, ctx: RolloutContext) -> RolloutDecision:
        return RolloutDecision()

    def rollout_metrics(self, counts: dict[str, float]) -> dict[str, float]:
        """Turn globally summed counts into logged ratios."""
        return {}

    def advantage_weights(self, advantages: torch.Tensor, step: int, total_steps: int) -> torch.Tensor | None:
        return None

    def token_hooks(self, batch: "TokenBatch", planned: torch.Tensor | None = None) -> TokenHooks | None:
        return None

    def step_counts(self) -> dict[str, float]:
        """Local counts of the optimizer step that just ended (reset on read); the trainer sums them globally
        (keys starting with ``"max:"`` are reduced by maximum instead)."""
        return {}

    def step_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        return {}

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


CONTROL_REGISTRY: dict[str, type[EntropyControl]] = {}

# A warning from a control's `validate` points at the user's `GRPOEntropyConfig(...)` line: validate <-
# _validate_entropy_fields <- __post_init__ <- __init__ <- the caller.
_USER_STACKLEVEL = 5


def _check_declaration(name: str, cls) -> None:
    """A registered class's attributes have the types the config, the trainer and the model card read."""
    if not (isinstance(cls, type) and issubclass(cls, EntropyControl)):
        raise TypeError(f"register_control({name!r}) decorates a subclass of trl_entropy.EntropyControl, got {cls!r}.")
    where = f"register_control({name!r}) on {cls.__qualname__}"
    if not isinstance(cls.follows_target, bool):
        raise TypeError(f"{where}: follows_target must be True or False, got {cls.follows_target!r}.")
    if cls.knob_name is not None and (not isinstance(cls.knob_name, str) or not cls.knob_name):
        raise TypeError(f"{where}: knob_name must be a non-empty string or None, got {cls.knob_name!r}.")
    if not isinstance(cls.card_text, str):
        raise TypeError(f"{where}: card_text must be a string (one paragraph), got {cls.card_text!r}.")
    for attr in ("config_prefixes", "citations"):
        value = getattr(cls, attr)
        if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) and v for v in value):
            raise TypeError(f"{where}: {attr} must be a tuple of strings (e.g. ('my_prefix_',)), got {value!r}.")
    if not isinstance(cls.bibtex, dict) or not all(isinstance(v, str) for v in cls.bibtex.values()):
        raise TypeError(f"{where}: bibtex must be a dict of BibTeX entries (key -> string), got {cls.bibtex!r}.")
    unknown = [c for c in cls.citations if c not in BIBTEX and c not in cls.bibtex]
    if unknown:
        raise ValueError(f"{where}: citation key(s) {unknown} are neither in trl_entropy.citations.BIBTEX "
                         f"({sorted(BIBTEX)}) nor in the class's bibtex dict; add the entries there.")


def _defined_in(cls) -> str | None:
    """The file that defines ``cls`` (``None`` for a class typed into an interactive session)."""
    return getattr(sys.modules.get(cls.__module__), "__file__", None)


def _same_definition(old, new) -> bool:
    """Whether ``new`` is ``old`` defined again: the same class name from the same module or the same file (a
    re-run notebook cell, a reloaded module, a script both run and imported)."""
    if old.__qualname__ != new.__qualname__:
        return False
    if old.__module__ == new.__module__:
        return True
    old_file, new_file = getattr(old, "_registered_from", None), _defined_in(new)
    return old_file is not None and new_file is not None and os.path.realpath(old_file) == os.path.realpath(new_file)


def register_control(name: str, *, replace: bool = False) -> Callable[[type[EntropyControl]], type[EntropyControl]]:
    """Class decorator: register an :class:`EntropyControl` subclass as ``entropy_control=name``.

    ``GRPOEntropyConfig`` then accepts the name, ``GRPOEntropyTrainer`` builds the class with the config, and the
    model card names it. A name that is already registered raises ``ValueError`` unless ``replace=True`` (defining the
    same class again, as re-running a module or a notebook cell does, replaces it silently).
    """
    if not isinstance(name, str) or not name or name != name.strip() or any(c.isspace() for c in name):
        raise ValueError(f"register_control: a control's name is a non-empty string without spaces, got {name!r}.")
    if name == "none":
        raise ValueError("register_control: 'none' is entropy_control's value for plain GRPO; choose another name.")

    def deco(cls):
        _check_declaration(name, cls)
        existing = CONTROL_REGISTRY.get(name)
        if existing is not None and not replace and not _same_definition(existing, cls):
            raise ValueError(
                f"entropy_control {name!r} is already registered, by {existing.__module__}.{existing.__qualname__}; "
                f"register {cls.__qualname__} under another name, or pass replace=True to register_control to "
                "replace it."
            )
        cls.name = name
        cls._registered_from = _defined_in(cls)
        CONTROL_REGISTRY[name] = cls
        return cls

    return deco


def get_control_class(name: str) -> type[EntropyControl]:
    """The class registered as ``entropy_control=name``; ``ValueError`` naming the registered ones otherwise."""
    if name not in CONTROL_REGISTRY:
        raise ValueError(f"entropy_control={name!r} has no registered implementation; known: {sorted(CONTROL_REGISTRY)}.")
    return CONTROL_REGISTRY[name]


class ControllerControl(EntropyControl):
    """A control whose state is one feedback controller (``self.controller``) and whose knob is its value.

    ``raises_entropy`` says which way a larger knob moves entropy (+1: up, as ``epsilon_high``; -1: down, as lambda
    and EntroPIC's alpha), so that :attr:`limit_push` reports the way entropy must move."""

    controller: AdaptiveClipController | LambdaStepController
    raises_entropy: int = 1

    @property
    def knob(self):
        return self.controller.value

    @property
    def limit_push(self) -> int:
        return self.controller.limit_push * self.raises_entropy

    def state_dict(self):
        return self.controller.state_dict()

    def load_state_dict(self, state):
        self.controller.load_state_dict(state)


@register_control("adaptive_clip")
class AdaptiveClipControl(ControllerControl):
    """Adaptive clip-higher (Wang et al.): moves ``epsilon_high`` by ±δ so entropy tracks the schedule."""

    follows_target = True
    knob_name = "epsilon_high"
    card_text = ("adaptive clip-higher (Entropy Scheduling, Wang et al. 2026, Algorithm 1): `epsilon_high` moves by "
                 "±δ each optimizer step so the windowed measured entropy tracks the target.")
    config_prefixes = ("adaptive_clip_", "epsilon")
    citations = ("wang2026",)

    @classmethod
    def validate(cls, args):
        if args.loss_type not in SUPPORTED_LOSS_TYPES:
            raise ValueError(
                f"entropy_control='adaptive_clip' moves the clip-higher bound, which loss_type={args.loss_type!r} "
                f"does not use in the same way; loss_type must be one of {list(SUPPORTED_LOSS_TYPES)}."
            )
        initial = args.epsilon_high if args.epsilon_high is not None else args.epsilon
        if not (args.adaptive_clip_min <= initial <= args.adaptive_clip_max):
            raise ValueError(
                f"epsilon_high (the initial value of adaptive clip, {initial}) must lie in "
                f"[adaptive_clip_min, adaptive_clip_max] = [{args.adaptive_clip_min}, {args.adaptive_clip_max}]."
            )
        if not args.is_off_policy:
            warnings.warn(
                "entropy_control='adaptive_clip' moves epsilon_high, but gradient_accumulation_steps is a multiple "
                "of steps_per_generation * num_iterations, so every update is on-policy (importance "
                "ratio exactly 1) and the clip bound changes nothing: the controller will not act. Train as the "
                "paper does, with several optimizer steps per generation batch (steps_per_generation > "
                "gradient_accumulation_steps, or num_iterations > 1).",
                UserWarning,
                stacklevel=_USER_STACKLEVEL,
            )

    def __init__(self, args):
        super().__init__(args)
        initial = args.epsilon_high if args.epsilon_high is not None else args.epsilon
        self.controller = AdaptiveClipController(
            initial=initial,
            delta=args.adaptive_clip_delta,
            window=args.adaptive_clip_window,
            c_min=args.adaptive_clip_min,
            c_max=args.adaptive_clip_max,
            warmup_steps=args.adaptive_clip_warmup_steps,
        )

    def apply(self, trainer) -> None:
        trainer.epsilon_high = self.controller.value

    def observe(self, measured, target):
        if target is not None:
            self.controller.update(measured, target)


def _mix_seed(seed: int, counter: int) -> int:
    """A per-generation seed, identical on every process, different for every generation batch."""
    return (int(seed) * 1_000_003 + int(counter) * 7_919 + 12_345) % (2**63 - 1)


@register_control("entrocraft")
class EntrocraftControl(EntropyControl):
    """Entrocraft (Li et al. 2026): reject rollouts by advantage sign when entropy leaves a band around the target.

    Draws come from a generator seeded from (seed, generation counter), identical on every process; each process
    skips to its rollouts' global offset, so every rank decides as a single-process run over the same global batch.
    """

    follows_target = True
    uses_rollouts = True
    knob_name = "sign"
    card_text = ("Entrocraft rollout rejection (Li et al. 2026): when entropy leaves the band around the target, "
                 "rollouts are rejected by the sign of their advantage.")
    config_prefixes = ("entrocraft_",)
    citations = ("li2026",)

    @classmethod
    def validate(cls, args):
        if args.entrocraft_entropy_source == "scoring_pass" and not args.is_off_policy and not args.use_vllm:
            raise ValueError(
                "entrocraft_entropy_source='scoring_pass' needs the old-log-prob pass TRL runs only for off-policy "
                "updates or vLLM; use 'auto', 'extra_pass' or 'lagged', or train off-policy."
            )
        if args.entrocraft_normalizer == "kept" and args.loss_type == "dr_grpo":
            warnings.warn(
                "loss_type='dr_grpo' divides by a constant (batch size x max_completion_length); with "
                "entrocraft_normalizer='kept' rejected rollouts contribute nothing, but the constant normaliser does "
                "not shrink with them.",
                UserWarning,
                stacklevel=_USER_STACKLEVEL,
            )

    def __init__(self, args):
        super().__init__(args)
        self.generations = 0
        self.last_sign = 0

    def transform_rollouts(self, advantages, ctx):
        if ctx.entropy is None or ctx.target is None:
            return RolloutDecision()
        h_low, h_high = band_from_target(ctx.target, self.args.entrocraft_band)
        generator = torch.Generator(device="cpu").manual_seed(_mix_seed(ctx.seed, self.generations))
        self.generations += 1
        # Decide over the global batch (zeros outside this process's slice) and keep our slice: rollout i always
        # gets draw i, so every process decides exactly as a single-process run over the same global batch.
        local = advantages.detach().float().cpu().reshape(-1)
        global_adv = torch.zeros(ctx.global_size, dtype=local.dtype)
        global_adv[ctx.global_offset : ctx.global_offset + local.numel()] = local
        keep_global = entrocraft_acceptance(
            global_adv,
            ctx.entropy,
            h_low,
            h_high,
            self.args.entrocraft_gamma,
            mode=self.args.entrocraft_mode,
            generator=generator,
        )
        keep = keep_global[ctx.global_offset : ctx.global_offset + local.numel()]
        keep = keep.reshape(advantages.shape).to(advantages.device)
        m = entrocraft_sign(ctx.entropy, h_low, h_high)
        self.last_sign = m
        pos, neg = advantages > 0, advantages < 0
        counts = {
            "total": float(advantages.numel()),
            "kept": float(keep.sum()),
            "pos_total": float(pos.sum()),
            "pos_kept": float((keep & pos).sum()),
            "neg_total": float(neg.sum()),
            "neg_kept": float((keep & neg).sum()),
        }
        scalars = {"h_low": h_low, "h_high": h_high, "rollout_entropy": ctx.entropy}
        return RolloutDecision(keep=keep, counts=counts, scalars=scalars)

    def rollout_metrics(self, counts):
        def ratio(a, b):
            return counts[a] / counts[b] if counts[b] > 0 else float("nan")

        out = {
            "acceptance_rate": ratio("kept", "total"),
            "positive_kept_fraction": ratio("pos_kept", "pos_total"),
            "negative_kept_fraction": ratio("neg_kept", "neg_total"),
        }
        return out

    @property
    def knob(self):
        return float(self.last_sign)

    @property
    def limit_push(self) -> int:
        # Entrocraft's knob has one setting per side: outside the band it is at its extreme (all rollouts of one
        # advantage sign rejected in hard mode, nearly all with gamma = 10). m = +1 above the band: entropy must fall.
        return -int(self.last_sign)

    def state_dict(self):
        return {"generations": self.generations, "last_sign": self.last_sign}

    def load_state_dict(self, state):
        self.generations = int(state["generations"])
        self.last_sign = int(state.get("last_sign", 0))


@register_control("positive_reweight")
class PositiveReweightControl(ControllerControl):
    """Positive-advantage reweighting (Jin et al.): tokens with A > 0 weighted by lambda, A <= 0 by 1."""

    uses_advantage_weights = True
    follows_target = True  # with the default "entropy" schedule; a fixed progression does not (follows_target_for)
    knob_name = "lambda"
    raises_entropy = -1  # more weight on positive-advantage tokens sharpens the policy
    card_text = ("positive-advantage reweighting (Jin et al. 2025): tokens with positive advantage are weighted by "
                 "λ ∈ [0, 1].")
    config_prefixes = ("positive_reweight_",)
    citations = ("jin2025",)

    @classmethod
    def follows_target_for(cls, args) -> bool:
        return args.positive_reweight_schedule == "entropy"

    @classmethod
    def ignores_target_because(cls, args) -> str:
        return f"positive_reweight_schedule={args.positive_reweight_schedule!r} is a fixed progression"

    @classmethod
    def validate(cls, args):
        if args.positive_reweight_schedule == "entropy":
            return
        feedback_only = args._fields_set("positive_reweight_lambda_init", "positive_reweight_step",
                                         "positive_reweight_kp")
        if feedback_only:
            warnings.warn(
                f"{', '.join(feedback_only)} {'is' if len(feedback_only) == 1 else 'are'} ignored: "
                f"positive_reweight_schedule={args.positive_reweight_schedule!r} is a fixed progression; "
                "they belong to the 'entropy' (feedback) schedule.",
                UserWarning,
                stacklevel=_USER_STACKLEVEL,
            )

    def __init__(self, args):
        super().__init__(args)
        self.kind = args.positive_reweight_schedule
        self.follows_target = self.kind == "entropy"
        self.controller = LambdaStepController(args.positive_reweight_lambda_init, args.positive_reweight_step,
                                               args.positive_reweight_kp)

    def advantage_weights(self, advantages, step, total_steps):
        if self.kind != "entropy":
            self.controller.value = positive_reweight_progression(
                self.kind, step, total_steps, num_epochs=self.args.positive_reweight_epochs
            )
        return sign_weights(advantages, self.controller.value, 1.0)

    def observe(self, measured, target):
        if self.kind == "entropy" and target is not None:
            self.controller.update(measured, target)


@register_control("w_reinforce")
class WReinforceControl(EntropyControl):
    """W-REINFORCE (Zhu et al.): positive-advantage rollouts weighted by a fixed lambda, negatives by 1.

    Acts on TRL's group-normalised advantages (the paper uses raw {0, 1} rewards without a baseline; on binary
    rewards the sign of the group-centred advantage is the sign of correctness, except in zero-std groups, which
    carry no gradient in either form).
    """

    uses_advantage_weights = True
    knob_name = "lambda"
    card_text = "W-REINFORCE (Zhu et al. 2025): positive-advantage samples weighted by a fixed λ."
    config_prefixes = ("w_reinforce_",)
    citations = ("zhu2025",)

    def advantage_weights(self, advantages, step, total_steps):
        return sign_weights(advantages, self.args.w_reinforce_lambda, 1.0)

    @property
    def knob(self):
        return self.args.w_reinforce_lambda


@dataclass
class TokenBatch:
    """What a token-hook control sees of one micro-batch (all detached).

    ``logps``/``old_logps`` (B, T) current and sampling-policy log-probs (``old_logps == logps`` on-policy);
    ``advantages`` (B, 1) or (B, T); ``mask`` (B, T) bool loss mask; ``epsilon_low``/``epsilon_high`` and
    ``importance_sampling_level`` as the trainer uses them for this micro-batch.
    """

    logps: torch.Tensor
    old_logps: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    importance_sampling_level: str = "token"


def _cat_batches(batches: list[TokenBatch]) -> TokenBatch:
    """Stack micro-batches of one generation batch (same T) along the batch dimension."""
    first = batches[0]
    adv = [b.advantages for b in batches]
    if len({a.shape[1] for a in adv}) > 1:  # mix of (B, 1) and (B, T): broadcast all to (B, T)
        adv = [a.expand_as(b.mask) for a, b in zip(adv, batches)]
    return TokenBatch(
        logps=torch.cat([b.logps for b in batches]),
        old_logps=torch.cat([b.old_logps for b in batches]),
        advantages=torch.cat(adv),
        mask=torch.cat([b.mask for b in batches]),
        epsilon_low=first.epsilon_low,
        epsilon_high=first.epsilon_high,
        importance_sampling_level=first.importance_sampling_level,
    )


class TokenHookControl(EntropyControl):
    """Base of the controls that change the per-token loss. Counts selected and valid tokens per step."""

    uses_token_hooks = True

    def __init__(self, args):
        super().__init__(args)
        self._selected = 0.0
        self._valid = 0.0

    def _count(self, selected: torch.Tensor, mask: torch.Tensor) -> None:
        self._selected += float((selected & mask).sum())
        self._valid += float(mask.sum())

    def step_counts(self):
        counts = {"selected": self._selected, "valid": self._valid}
        self._selected = self._valid = 0.0
        return counts

    def step_metrics(self, totals):
        valid = totals.get("valid", 0.0)
        return {
            "selected_tokens": totals.get("selected", 0.0),
            "selected_fraction": totals["selected"] / valid if valid > 0 else 0.0,
        }


class CovarianceControl(TokenHookControl):
    """Shared machinery of Clip-Cov and KL-Cov (Cui et al. 2025): covariance, scope, quota.

    Scope (``args.cov_scope``):

    * ``"local"`` -- as verl: means, quota and selection per micro-batch and per process, from the log-probs of the
      loss forward itself.
    * ``"global"`` -- once per optimizer step, over all completion tokens of the step's micro-batches on all
      processes: the trainer runs one extra no-grad forward of the current policy over the step's micro-batches (the
      parameters do not change within a step, so these are the log-probs the loss sees), and calls
      :meth:`plan_window`, which all-reduces the (sum, count) for the means, takes the quota from the global valid
      count, and selects globally (KL-Cov: exact global top-k through a threshold from the gathered per-process top-k
      values; Clip-Cov: one uniform draw over the global candidate list from a generator seeded identically on every
      process). The result is the same on every process and does not depend on the micro-batch size.

    ``ratio == 0`` selects nothing (deliberate: the reference's ``max(1, int(ratio * n))`` would still select one
    token per micro-batch; 0 is our "switched off").
    """

    needs_step_plan = False
    ratio_name = ""
    on_policy_reduces_to = "almost nothing"  # what the control amounts to with the importance ratio at 1

    @classmethod
    def validate(cls, args):
        if not args.is_off_policy:
            warnings.warn(
                f"entropy_control={cls.name!r} with fully on-policy updates (one optimizer step per "
                f"generation batch, num_iterations=1): the importance ratio is 1, so it reduces to "
                f"{cls.on_policy_reduces_to}. Train as the authors do, with several optimizer steps per generation "
                "batch (steps_per_generation > gradient_accumulation_steps, or num_iterations > 1).",
                UserWarning,
                stacklevel=_USER_STACKLEVEL,
            )

    def __init__(self, args):
        super().__init__(args)
        self.scope = getattr(args, "cov_scope", "global")
        self.needs_step_plan = self.scope == "global"
        self.draws = 0  # generator counter, identical on every process (global) / per process (local)
        self.rank = 0
        self._cov_stats: torch.Tensor | None = None  # (sum, count, max) over the step's valid tokens, on the device

    def _observe_covariance(self, cov: torch.Tensor, mask: torch.Tensor) -> None:
        """Accumulate the step's covariance diagnostics on the device (read, with one sync, at the step's end)."""
        if mask.numel() == 0:
            return
        cov = cov.detach().to(wide_float_dtype(cov.device))
        stats = torch.stack([torch.where(mask, cov, 0.0).sum(), mask.sum().to(cov.dtype),
                             torch.where(mask, cov, -math.inf).max()])
        if self._cov_stats is not None:
            stats = torch.cat([self._cov_stats[:2] + stats[:2], torch.maximum(self._cov_stats[2:], stats[2:])])
        self._cov_stats = stats

    def step_counts(self):
        counts = super().step_counts()
        cov_sum, cov_count, cov_max = (0.0, 0.0, -math.inf) if self._cov_stats is None else self._cov_stats.tolist()
        self._cov_stats = None
        counts.update({"cov_sum": cov_sum, "cov_count": cov_count, "max:cov_max": cov_max})
        return counts

    def step_metrics(self, totals):
        out = super().step_metrics(totals)
        if totals.get("cov_count", 0.0) > 0:  # no valid token this step: nothing to report (never NaN)
            out["covariance_mean"] = totals["cov_sum"] / totals["cov_count"]
            out["covariance_max"] = totals["max:cov_max"]
        return out

    @property
    def ratio(self) -> float:
        return float(getattr(self.args, self.ratio_name))

    def quota(self, n_valid: int) -> int:
        return 0 if self.ratio == 0.0 else selection_quota(self.ratio, n_valid)

    def _generator(self, rank: int = 0) -> torch.Generator:
        seed = _mix_seed(int(self.args.seed) + 104_729 * rank, self.draws)
        self.draws += 1
        return torch.Generator(device="cpu").manual_seed(seed)

    # one subclass method: the selection, given covariance and (local or global) quota
    def select(self, cov, batch: TokenBatch, k: int, *, offset=None, total=None, generator=None, gather=None):
        raise NotImplementedError

    def candidate_mask(self, batch: TokenBatch) -> torch.Tensor:
        return batch.mask

    def token_hooks(self, batch, planned=None):
        if planned is None:  # local scope: per micro-batch, from this forward's log-probs
            cov = token_covariance(batch.logps, batch.advantages, batch.mask)
            self._observe_covariance(cov, batch.mask)
            k = min(self.quota(int(batch.mask.sum())), int(batch.mask.sum()))
            selected = self.select(cov, batch, k, generator=self._generator(self.rank))
        else:
            selected = planned.to(batch.mask.device) & batch.mask
        self._count(selected, batch.mask)
        return self.hooks_from(selected)

    def hooks_from(self, selected: torch.Tensor) -> TokenHooks:
        raise NotImplementedError

    def plan_window(self, batches: list[TokenBatch], reduce_sum, gather) -> list[torch.Tensor]:
        """Global selection over the micro-batches of one optimizer step (all processes call this together).

        Args:
            batches: this process's micro-batches of the step (same T), log-probs of the current policy.
            reduce_sum: ``tensor -> tensor`` summed over processes. gather: ``tensor -> tensor`` concatenated over
                processes along dim 0 (same shape on every process).

        Returns:
            one (B, T) bool selection per micro-batch.
        """
        batch = _cat_batches(batches)
        mask = batch.mask
        sums_dtype = wide_float_dtype(batch.logps.device)
        sums = reduce_sum(masked_sums(batch.logps, batch.advantages, mask, dtype=sums_dtype))
        stats = means_from_sums(sums)
        cov = token_covariance(batch.logps, batch.advantages, mask, stats=stats)
        self._observe_covariance(cov, mask)
        k = self.quota(int(round(float(sums[2]))))
        selected = self.select(cov, batch, k, gather=gather, generator=self._generator(0))
        return list(torch.split(selected, [b.mask.shape[0] for b in batches]))


@register_control("kl_cov")
class KLCovControl(CovarianceControl):
    """KL-Cov (Cui et al. 2025): the top-k tokens by covariance get ``-A r + coef |logp - old|``, unclipped."""

    ratio_name = "kl_cov_ratio"
    knob_name = None
    on_policy_reduces_to = "plain (unclipped) policy gradient"
    card_text = ("KL-Cov (Cui et al. 2025): the tokens with the highest log-prob/advantage covariance get a KL penalty "
                 "instead of the PPO clip.")
    config_prefixes = ("kl_cov_", "cov_scope")
    citations = ("cui2025",)

    def select(self, cov, batch, k, *, offset=None, total=None, generator=None, gather=None):
        mask = batch.mask
        if gather is None:
            return kl_cov_selection(cov, mask, self.ratio, k=k)
        if k == 0:
            return torch.zeros_like(mask)
        # exact global top-k: every process contributes its own top-k values (the global top-k lies in their union)
        values = cov[mask]
        m = min(k, values.numel())
        wide = wide_float_dtype(cov.device)
        local = torch.full((k,), -math.inf, dtype=wide, device=cov.device)
        if m > 0:
            local[:m] = torch.topk(values.to(wide), m, largest=True, sorted=True).values
        gathered = gather(local)
        gathered = gathered[torch.isfinite(gathered)]
        threshold = kl_cov_threshold(gathered, k)
        return mask & (cov.to(wide) >= threshold)

    def hooks_from(self, selected):
        return TokenHooks(kl_cov_mask=selected, kl_cov_coef=float(self.args.kl_cov_coef))

    def state_dict(self):
        return {"draws": self.draws}

    def load_state_dict(self, state):
        self.draws = int(state.get("draws", 0))


@register_control("clip_cov")
class ClipCovControl(CovarianceControl):
    """Clip-Cov (Cui et al. 2025): a random few tokens with ``lb < cov < ub`` contribute no gradient.

    Tokens the PPO clip already cuts (``clip_by_origin`` in the reference) are not candidates; the quota counts all
    valid tokens, as in the reference.
    """

    ratio_name = "clip_cov_ratio"
    card_text = ("Clip-Cov (Cui et al. 2025): a few tokens with high log-prob/advantage covariance are detached from "
                 "the gradient.")
    config_prefixes = ("clip_cov_", "cov_scope")
    citations = ("cui2025",)

    def select(self, cov, batch, k, *, offset=None, total=None, generator=None, gather=None):
        clipped = ppo_clipped_tokens(
            batch.logps,
            batch.old_logps,
            batch.advantages,
            batch.mask,
            batch.epsilon_low,
            batch.epsilon_high,
            batch.importance_sampling_level,
        )
        candidates_mask = batch.mask & ~clipped
        lb, ub = float(self.args.clip_cov_lb), float(self.args.clip_cov_ub)
        if gather is None:
            return clip_cov_selection(cov, candidates_mask, self.ratio, lb, ub, generator, k=k)
        n_local = (candidates_mask & (cov > lb) & (cov < ub)).sum()
        counts = gather(n_local.reshape(1).to(torch.int64)).cpu().tolist()
        rank = int(getattr(self, "rank", 0))
        return clip_cov_selection(
            cov,
            candidates_mask,
            self.ratio,
            lb,
            ub,
            generator,
            k=k,
            candidate_offset=int(sum(counts[:rank])),
            total_candidates=int(sum(counts)),
        )

    def hooks_from(self, selected):
        return TokenHooks(detach_mask=selected)

    def state_dict(self):
        return {"draws": self.draws}

    def load_state_dict(self, state):
        self.draws = int(state.get("draws", 0))


@register_control("entropic")
class EntropicControl(TokenHookControl, ControllerControl):
    """EntroPIC (Yang et al. 2025): a PI controller sets alpha from the global measured entropy each optimizer
    step; the loss gets ``alpha * mean_hp(-r |A|)`` over the tokens with probability above
    ``entropic_high_prob_threshold`` (the reference's additive term, its own normaliser, unclipped ratio)."""

    follows_target = True
    knob_name = "alpha"
    additive_loss_term = True  # TRL's _compute_loss + alpha * term, from TRL's loss forward (not our loss path)
    raises_entropy = -1  # alpha > 0 sharpens confident tokens
    card_text = "EntroPIC (Yang et al. 2025): a PI controller on entropy reweights high-probability tokens."
    config_prefixes = ("entropic_",)
    citations = ("yang2025",)

    def __init__(self, args):
        super().__init__(args)
        self.controller = PIController(kp=args.entropic_kp, ki=args.entropic_ki)
        self.log_threshold = math.log(float(args.entropic_high_prob_threshold))

    def observe(self, measured, target):
        if target is not None:
            self.controller.update(measured, target)

    def token_hooks(self, batch, planned=None):
        high_prob = batch.mask & (batch.logps > self.log_threshold)
        self._count(high_prob, batch.mask)
        return TokenHooks(adjust_mask=high_prob, adjust_alpha=self.controller.value)

    def metrics(self):
        return {"pi_integral": self.controller.integral}



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
    from ._trl_private import set_entropy_coefficient

    set_entropy_coefficient(trainer, value)


@register_control("entropy_bonus")
class EntropyBonusControl(ControllerControl):
    """A signed entropy coefficient under feedback (:class:`~trl_entropy.scheduling.EntropyBonusController`): the
    loss is TRL's ``L_policy - c * H`` with ``c`` moved every optimizer step so that entropy follows the schedule; a
    negative ``c`` is a penalty, so an anneal is driven down, not waited for. TRL's own loss applies it (no fork)."""

    follows_target = True
    knob_name = "entropy_coef"
    uses_pull_sums = True  # the pull's estimate and the signal fraction are logged
    card_text = ("feedback entropy bonus (trl-entropy): the loss is TRL's `L_policy − c·H` with a signed coefficient "
                 "`c` (a penalty when negative) moved each optimizer step by a filtered, predictive PI law with "
                 "feed-forward from the target's slope, bounded and with anti-windup, its gains scaled by the "
                 "knob's authority estimated online (capped by the measurement's noise), and half of the optimizer "
                 "momentum's lag cancelled in the applied coefficient.")
    config_prefixes = ("entropy_bonus_", "entropy_coef")
    citations = ("he2025",)

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

    def note_pull(self, cov, var, count=None):
        self.controller.note_pull(cov, var, count)

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
        out.update(_pull_metrics(c))
        return out


def _pull_metrics(c: EntropyBonusController) -> dict[str, float]:
    """``bonus_pull``: the coefficient that balances the policy gradient's pull on entropy (once measured);
    ``bonus_varentropy``: the token mean of ``(log p + H)^2``; ``bonus_signal_fraction``: the smoothed share of
    tokens with a non-zero advantage."""
    pull = c.pull_coefficient
    out = {} if pull is None else {"bonus_pull": pull}
    if c.varentropy is not None:
        out["bonus_varentropy"] = c.varentropy
    if c.signal is not None:
        out["bonus_signal_fraction"] = c.signal
    return out


@register_control("trl_adaptive")
class TrlAdaptiveControl(EntropyControl):
    """TRL's own adaptive entropy coefficient (``use_adaptive_entropy``, Skywork-OR1's rule) with its target driven
    by the schedule: the trainer writes each step's target into ``args.entropy_target``, which TRL reads; TRL moves
    ``entropy_coef`` by ``entropy_coef_delta`` within ``[entropy_coef_min, entropy_coef_max]`` and applies it only
    while entropy is at or below the target. Nothing of TRL's rule is reimplemented here."""

    follows_target = True
    knob_name = "entropy_coef"
    uses_trl_adaptive_entropy = True
    card_text = ("TRL's adaptive entropy coefficient (`use_adaptive_entropy`, Skywork-OR1) as a control: "
                 "`entropy_coef` moves by `entropy_coef_delta` each optimizer step, its `entropy_target` driven by "
                 "the schedule.")
    config_prefixes = ("entropy_coef",)
    citations = ("he2025",)

    def __init__(self, args):
        super().__init__(args)
        self._trainer = None
        self._last_direction = 0

    def apply(self, trainer) -> None:
        self._trainer = trainer

    def observe(self, measured, target):
        if target is not None:
            self._last_direction = 1 if measured <= target else -1  # TRL's comparison

    @property
    def knob(self):
        return None if self._trainer is None else float(self._trainer.entropy_coef)

    @property
    def limit_push(self) -> int:
        if self._trainer is None:
            return 0
        return _limit_push_at(self._last_direction, float(self._trainer.entropy_coef),
                              float(self.args.entropy_coef_min), float(self.args.entropy_coef_max))

    def state_dict(self):
        return {"last_direction": self._last_direction}  # TRL saves its coefficient itself

    def load_state_dict(self, state):
        self._last_direction = int(state.get("last_direction", 0))


def _limit_push_at(direction: int, value: float, low: float, high: float) -> int:
    if direction > 0 and value >= high:
        return 1
    if direction < 0 and value <= low:
        return -1
    return 0


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

    uses_pull_sums = True  # the assist's bonus gets the pull's estimate too

    def note_step_reading(self, reading):
        self.inner.note_step_reading(reading)
        self.bonus.note_step_reading(reading)

    def note_pull(self, cov, var, count=None):
        self.inner.note_pull(cov, var, count)
        self.bonus.note_pull(cov, var, count)

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
        out.update(_pull_metrics(self.bonus))
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


def build_control(args) -> EntropyControl | None:
    """The control object for ``args.entropy_control``, or ``None`` for ``"none"``."""
    name = getattr(args, "entropy_control", "none")
    if name == "none":
        return None
    control = get_control_class(name)(args)
    if getattr(args, "entropy_bonus_assist", False) and control.knob_name != "entropy_coef":
        return AssistedControl(control, args)
    return control
