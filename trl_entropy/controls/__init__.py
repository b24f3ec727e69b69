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
attributes.

One module per control (``trl_entropy/controls/<name>.py``) holds its class, its settings (a dataclass of config
fields with their help, which ``GRPOEntropyConfig`` composes; checked by the class's ``validate_settings`` only when
the control is chosen), its citation, its card text, its demo settings and its row of the docs' methods table. Adding
a built-in control means one module here (named as the control), its import line below and one docs page. A control
written outside the package is a subclass of :class:`EntropyControl` registered with :func:`register_control`, with
settings of its own given as ``entropy_control_settings`` (docs/write-your-own-control.md).
"""

from __future__ import annotations

from ._base import (
    CONTROL_REGISTRY,
    ControllerControl,
    EntropyControl,
    RolloutContext,
    RolloutDecision,
    TokenBatch,
    TokenHookControl,
    get_control_class,
    methods_table,
    register_control,
)

# The built-in controls, one module each, in registration order: the order of the config's choices, the demo's
# methods and the docs' methods table (the recommendation first). Each module registers its control when imported.
from .entropy_bonus import AssistedControl, EntropyBonusControl, EntropyBonusSettings, _bonus_controller  # noqa: F401
from .trl_adaptive import TrlAdaptiveControl
from .adaptive_clip import AdaptiveClipControl, AdaptiveClipSettings
from .entrocraft import EntrocraftControl, EntrocraftSettings
from .positive_reweight import PositiveReweightControl, PositiveReweightSettings
from .w_reinforce import WReinforceControl, WReinforceSettings
from ._covariance import CovarianceSettings
from .clip_cov import ClipCovControl, ClipCovSettings
from .kl_cov import KLCovControl, KLCovSettings
from .entropic import EntropicControl, EntropicSettings

# The settings groups GRPOEntropyConfig composes, in registration order (Clip-Cov's and KL-Cov's share cov_scope,
# their common base). Read once, when the config class is built: a control registered later (outside the package)
# brings its settings through entropy_control_settings instead.
BUILTIN_SETTINGS = tuple(dict.fromkeys(cls.settings_class for cls in CONTROL_REGISTRY.values()
                                       if cls.settings_class is not None))

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
    "EntropyBonusSettings",
    "AdaptiveClipSettings",
    "EntrocraftSettings",
    "PositiveReweightSettings",
    "WReinforceSettings",
    "CovarianceSettings",
    "ClipCovSettings",
    "KLCovSettings",
    "EntropicSettings",
    "ControllerControl",
    "TokenHookControl",
    "TokenBatch",
    "RolloutContext",
    "RolloutDecision",
    "CONTROL_REGISTRY",
    "BUILTIN_SETTINGS",
    "register_control",
    "get_control_class",
    "build_control",
    "methods_table",
]


def build_control(args) -> EntropyControl | None:
    """The control object for ``args.entropy_control``, or ``None`` for ``"none"``."""
    name = getattr(args, "entropy_control", "none")
    if name == "none":
        return None
    control = get_control_class(name)(args)
    if getattr(args, "entropy_bonus_assist", False) and control.knob_name != "entropy_coef":
        return AssistedControl(control, args)
    return control
