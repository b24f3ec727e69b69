"""The base of every entropy control, the registry and the helpers the built-in controls share."""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import sys
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import torch

from ..citations import BIBTEX
from ..losses.loss_path import TokenBatch  # noqa: F401  (re-exported: what a token-hook control sees)
from ..losses.policy_loss import TokenHooks
from ..scheduling.controllers import AdaptiveClipController, LambdaStepController


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
    * ``uses_signal_fraction``: the trainer counts each optimizer step's tokens with a non-zero advantage over its
      loss forwards (no extra pass) and passes the global share to :meth:`note_signal`.
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
    uses_signal_fraction: bool = False  # implements note_signal (the step's share of tokens with a non-zero advantage)
    additive_loss_term: bool = False  # token_hooks only add a term (adjust_*): TRL's own loss plus that term
    needs_step_plan: bool = False  # implements plan_window (selection decided once per optimizer step, globally)
    uses_trl_adaptive_entropy: bool = False  # the control is TRL's use_adaptive_entropy (set by the config)
    card_text: str = ""  # one paragraph for the model card ("" = the class docstring's first paragraph)
    config_prefixes: tuple[str, ...] = ()  # config fields listed on the model card
    citations: tuple[str, ...] = ()  # keys of trl_entropy.citations.BIBTEX or of `bibtex`
    bibtex: dict[str, str] = {}  # a control's own BibTeX entries, by key (never mutated)
    # The control's settings: a dataclass of fields with defaults and help. A built-in control's group is composed
    # into GRPOEntropyConfig (its fields are config fields); a control registered outside the package gets its
    # values from the config's ``entropy_control_settings`` (a dict, or JSON on the command line).
    settings_class: type | None = None
    # Settings the control once had and no longer has: name -> (what the control does now, as that setting's value;
    # the git tag of the last commit that had it). Setting one is an error that says so (GRPOEntropyConfig, recipes,
    # command-line flags).
    removed_settings: dict[str, tuple[Any, str]] = {}
    demo_description: str = ""  # the demo's one line ("" = not in the demo's list)
    demo_overrides: dict[str, dict[str, Any]] = {}  # testbed name -> config overrides the demo uses there
    # The docs' methods table (docs/methods/index.md, built by trl_entropy.controls.methods_table): the page under
    # docs/methods/ and the row's cells (method, knob, acts on, follows a target); () = from the other attributes.
    docs_page: str = ""
    docs_row: tuple[str, str, str, str] = ()

    def __init__(self, args):
        self.args = args
        self.settings = type(self).settings_from(args)

    @classmethod
    def settings_from(cls, args):
        """The control's settings (an instance of ``settings_class``, or ``None`` without one): a field the config
        has is read from the config, any other from ``args.entropy_control_settings``."""
        if cls.settings_class is None:
            return None
        given = parse_control_settings(getattr(args, "entropy_control_settings", None))
        own = {f.name for f in dataclasses.fields(cls.settings_class) if f.init}
        unknown = sorted(set(given) - own)
        if unknown:
            raise ValueError(
                f"entropy_control_settings has {unknown}, which entropy_control={cls.name!r} does not declare; its "
                f"settings ({cls.settings_class.__qualname__}) are {sorted(own)}."
            )
        values = {n: getattr(args, n) for n in own if n in getattr(args, "__dataclass_fields__", {})}
        values.update(given)
        try:
            return cls.settings_class(**values)
        except TypeError as err:
            raise ValueError(f"entropy_control_settings for entropy_control={cls.name!r}: {err}") from None

    @classmethod
    def validate_settings(cls, args) -> None:
        """Checks of the control's settings, run by ``GRPOEntropyConfig`` only when this control is chosen (the
        feedback bonus's also with ``entropy_bonus_assist=True``); raise ``ValueError`` naming the field. Default:
        build the settings (see :meth:`settings_from`) and call their ``validate(args)`` where they define one."""
        settings = cls.settings_from(args)
        check = getattr(settings, "validate", None)
        if callable(check):
            check(args)

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

    def note_signal(self, fraction: float) -> None:
        """With ``uses_signal_fraction``, called just before :meth:`observe` with the step's global signal fraction:
        the share of its tokens with a non-zero advantage
        (:func:`~trl_entropy.scheduling.measurement.signal_token_count`; NaN where it was not counted on every
        micro-batch). Default: ignored."""

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


class _RegistryView:
    """What the registry's live views share: the names ``first`` (such as ``"none"``) and then every registered
    control (``CONTROL_REGISTRY``) that ``keep(cls)`` keeps, in registration order, read at each use, so that a control
    registered later, outside the package, is in every view."""

    def __init__(self, keep=None, first: tuple[str, ...] = ()):
        self._keep = keep
        self._first = tuple(first)

    def _names(self) -> tuple[str, ...]:
        return self._first + tuple(n for n, cls in CONTROL_REGISTRY.items() if self._keep is None or self._keep(cls))

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


class RegisteredControls(_RegistryView, Sequence):
    """The registered control names as a read-only sequence, optionally those whose class ``keep`` keeps; with
    ``"none"`` first when ``with_none``. It is what ``ENTROPY_CONTROLS`` & co. are, so that a control registered outside
    the package (with ``trl_entropy.register_control``) is a valid ``entropy_control`` everywhere, the command line's
    choices included."""

    def __init__(self, keep=None, with_none: bool = False):
        super().__init__(keep, ("none",) if with_none else ())

    def __getitem__(self, index):
        return self._names()[index]

    def __eq__(self, other) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, (Sequence, tuple, list)) else NotImplemented

    __hash__ = None


class RegistryMapping(_RegistryView, Mapping):
    """The names ``first`` and every registered control, each mapped to ``value(name)``: a read-only mapping (the
    demo's methods, the model card's method information)."""

    def __init__(self, value, first: tuple[str, ...] = ()):
        super().__init__(first=first)
        self._value = value

    def __getitem__(self, name):
        if name not in self._names():
            raise KeyError(name)
        return self._value(name)


def methods_table() -> str:
    """The docs' methods table (markdown): plain GRPO, then every registered control in registration order, each
    row from its class's ``docs_page`` and ``docs_row`` (or, for a control without them, from its card text, knob and
    ``follows_target``). docs/methods/index.md holds it between ``<!-- methods-table -->`` markers; a test checks
    that it is this table."""
    lines = ["| `entropy_control` | method | knob | acts on | follows a target |", "|---|---|---|---|---|",
             "| `none` | plain GRPO (TRL) | – | – | – |"]
    for name, cls in CONTROL_REGISTRY.items():
        label = f"[`{name}`]({cls.docs_page})" if cls.docs_page else f"`{name}`"
        row = tuple(cls.docs_row) or (cls.method_text(), f"`{cls.knob_name}`" if cls.knob_name else "–", "–",
                                      "yes" if cls.follows_target else "no")
        lines.append("| " + " | ".join((label,) + row) + " |")
    return "\n".join(lines)


def removed_setting(name: str) -> str | None:
    """What to tell a user who set ``name``, a setting a registered control no longer has (``None``: not one)."""
    for control, cls in CONTROL_REGISTRY.items():
        if name in cls.removed_settings:
            value, tag = cls.removed_settings[name]
            return (f"{name} was removed from entropy_control={control!r} (CHANGELOG.md says why); the control now "
                    f"acts as {name}={value!r} did. To reproduce a run that set it, install trl-entropy at the git tag "
                    f"{tag!r}")
    return None


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


def _mix_seed(seed: int, counter: int) -> int:
    """A per-generation seed, identical on every process, different for every generation batch."""
    return (int(seed) * 1_000_003 + int(counter) * 7_919 + 12_345) % (2**63 - 1)


def parse_control_settings(value) -> dict[str, Any]:
    """``entropy_control_settings`` as a dict: ``None`` is empty, a string is read as a JSON object."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"entropy_control_settings must be a JSON object, got {value!r}: {err}.") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"entropy_control_settings must be a dict of setting name -> value, got {value!r}.")
    return dict(value)


# Checks the built-in settings groups share: each raises a ValueError naming the field.
def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def did_you_mean(value, choices) -> str:
    """`` Did you mean 'x'?`` for the choice closest to a mistyped ``value`` (hyphens and case forgiven), or ``""``."""
    if not isinstance(value, str):
        return ""
    names = [c for c in choices if isinstance(c, str)]
    exact = [c for c in names if c.lower() == value.lower().replace("-", "_").replace(" ", "_")]
    close = exact or difflib.get_close_matches(value.lower(), names, n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def check_choice(args, name: str, choices) -> None:
    value = getattr(args, name)
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}.{did_you_mean(value, choices)}")


def check_range(args, name: str, low: float, high: float, low_open: bool = False) -> None:
    value = getattr(args, name)
    ok = is_number(value) and (value > low if low_open else value >= low) and value <= high
    if not ok:
        interval = f"{'(' if low_open else '['}{low}, {high}]"
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}.")


def check_int(args, name: str, minimum: int) -> None:
    value = getattr(args, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
