"""Model cards for models trained with `GRPOEntropyTrainer`: method, parameters, schedule, outcome, citations.

The template is ``trl_entropy/model_cards/template.md`` (shipped with the package); :func:`render_model_card` fills it
from a trainer, and ``GRPOEntropyTrainer.create_model_card`` writes the result to ``output_dir/README.md``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from importlib import resources

from ._paths import is_hub_model_id
from ._trl_private import model_name_or_path
from .citations import BIBTEX
from .metrics import (FINAL_REWARD_DEFINITION, OUT_OF_BAND_DEFINITION, TRACKING_ERROR_DEFINITION, final_reward,
                      logged_tracking)

__all__ = ["render_model_card", "write_model_card", "resolve_base_model", "is_hub_model_id", "method_info",
           "METHOD_INFO", "BIBTEX"]


NO_CONTROL_INFO = ("plain GRPO (no entropy control).", (), ())


def method_info(control: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """``(description, config-field prefixes, citation keys)`` of ``entropy_control=control`` for the card.

    Read from the registered class (``card_text``, ``config_prefixes``, ``citations``; see
    :class:`trl_entropy.controls.EntropyControl`), so a control registered outside the package is described by its own
    attributes. An unregistered name is described by its name alone.
    """
    if control == "none":
        return NO_CONTROL_INFO
    from .controls import CONTROL_REGISTRY  # here: controls imports this module when a control is registered

    cls = CONTROL_REGISTRY.get(control)
    if cls is None:
        return (control, (), ())
    return cls.method_text(), tuple(cls.config_prefixes), tuple(cls.citations)


def _bibtex(control: str) -> dict[str, str]:
    """The BibTeX entries the card may cite for ``control``: ours, and the registered class's own ``bibtex``."""
    from .controls import CONTROL_REGISTRY

    own = getattr(CONTROL_REGISTRY.get(control), "bibtex", None) or {}
    return {**BIBTEX, **own}


def __getattr__(name):
    # METHOD_INFO: control -> method_info(control) for "none" and every registered control, a live view of the
    # registry (kept for code that read the former dict); built on first use, so this module imports no control.
    if name == "METHOD_INFO":
        from .controls._base import RegistryMapping

        return RegistryMapping(method_info, first=("none",))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# A plain TRL GRPOTrainer with use_adaptive_entropy=True (e.g. driven by EntropyScheduleCallback).
TRL_ADAPTIVE_ENTROPY_INFO = (
    "TRL's adaptive entropy coefficient (`use_adaptive_entropy`, Skywork-OR1): the coefficient `entropy_coef` of an "
    "entropy bonus moves by `entropy_coef_delta` each optimizer step so the entropy tracks `entropy_target`.",
    ("entropy_coef", "entropy_target"),
    ("he2025",),
)

SCHEDULE_FORMULAS = {
    "constant": "H(t) = {start}",
    "linear": "H(t) = {start} + ({end} − {start})·p",
    "cosine": "H(t) = {end} + ({start} − {end})·(1 + cos(π·p))/2",
    "wsd": "H(t) = {start} while p < 1 − r, then decays linearly to {end} over the last fraction r = {ratio} of "
           "training (warmup–stable–anneal)",
}


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if callable(v):  # a callable entropy_schedule: its name, not "<function <lambda> at 0x...>"
        from .scheduling.schedules import schedule_label

        return schedule_label(v)
    return str(v)


def _table(rows, header=("parameter", "value")) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| `{k}` | {_fmt(v)} |" for k, v in rows]
    return "\n".join(lines)


# Always in the card's main table of settings (when the run has them): which control, and the target it followed.
ESSENTIAL_SETTINGS = ("entropy_control", "entropy_schedule", "entropy_schedule_start", "entropy_schedule_end")


def _field_defaults(args) -> dict:
    """``{field: default}`` of the config's dataclass (TRL's and this package's), for the fields that have one."""
    if not dataclasses.is_dataclass(args):
        return {}
    out = {}
    for f in dataclasses.fields(args):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _differs(value, default) -> bool:
    try:
        return bool(value != default)
    except Exception:  # values that do not compare to a plain bool (arrays): list them
        return True


def _settings_text(args, params, method: str, package_version: str, trl_version: str) -> tuple[str, str]:
    """``(main table, collapsed full list)`` of the method's settings ``params`` (``(name, value)`` pairs).

    The main table holds what a reader needs to read the run: the control and its target schedule
    (:data:`ESSENTIAL_SETTINGS`), every setting that differs from its default, and the package versions whose
    defaults fix the rest; the full list follows in a collapsed ``<details>`` section."""
    if not params:
        return "No method parameters.", ""
    defaults = _field_defaults(args)
    if method == "use_adaptive_entropy":  # a plain TRL GRPOConfig: TRL's rule is the method
        main = [("use_adaptive_entropy", True)]
    else:
        main = [("entropy_control", method)] if method != "none" else []
    main += [(k, v) for k, v in params if k in ESSENTIAL_SETTINGS and k != "entropy_control" and v is not None]
    changed = [(k, v) for k, v in params if k not in ESSENTIAL_SETTINGS and k in defaults
               and _differs(getattr(args, k, v), defaults[k])]
    versions = [("trl-entropy", package_version), ("trl", trl_version)]
    if changed:
        names = ", ".join(f"`{k}` (default {_fmt(defaults[k])})" for k, _ in changed)
        note = (f"Changed from their defaults: {names}; every other setting of the method is at its default in "
                f"trl-entropy {package_version} and TRL {trl_version}.")
    else:
        note = (f"Every other setting of the method is at its default in trl-entropy {package_version} and TRL "
                f"{trl_version}.")
    details = (f"<details>\n<summary>All {len(params)} settings of the method, defaults included</summary>\n\n"
               f"{_table(params)}\n\n</details>")
    return _table(main + changed + versions) + "\n\n" + note, details


def _tracking_error_text(history) -> str:
    """The run's tracking error (:func:`trl_entropy.metrics.tracking_error`, the benchmarks' metric) and the share of
    its steps beyond ±30% of the target (:func:`trl_entropy.metrics.out_of_band_share`, the tracking suite's), on the
    steps where the control followed its target (:func:`trl_entropy.metrics.logged_tracking`), with their
    definitions; empty where no step was scored."""
    err, out, gap = logged_tracking(history)
    if not math.isfinite(err):
        return ""
    how = "" if gap <= 1 else f"; here from the logged means, one every {gap:g} steps"
    text = f" Tracking error: **{100 * err:.1f}%** ({TRACKING_ERROR_DEFINITION}{how})."
    if math.isfinite(out):
        text += f" Steps beyond ±30% of the target: **{100 * out:.0f}%** ({OUT_OF_BAND_DEFINITION}{how})."
    return text


def _schedule_text(args, initial: tuple = (None, None, 0)) -> str:
    """The target schedule's paragraph; ``initial``: the starting entropy, its standard error and the generation
    rounds aside that measured it (:func:`_initial_measurement`)."""
    initial_entropy, initial_entropy_se, initial_rounds = initial
    name = args.entropy_schedule
    if name is None:
        return "No target: this control does not follow an entropy schedule."
    if callable(name):
        return f"A user-supplied callable, `{_fmt(name)}`, gave the target as `fn(step, total_steps)`."
    start = _resolved(args.entropy_schedule_start, initial_entropy)
    end = _resolved(args.entropy_schedule_end, initial_entropy) if args.entropy_schedule_end is not None else start
    relative = [v for v in (args.entropy_schedule_start, args.entropy_schedule_end) if isinstance(v, str)]
    if relative:
        prefix = f"Targets given relative to the starting model's entropy ({', '.join(f'`{v}`' for v in relative)})"
        if initial_entropy is None:
            prefix += ", not measured: no training step ran. "
        else:
            where = "the first generation batch" + (f" and {initial_rounds} more generation round(s) on its prompts"
                                                    if initial_rounds else "")
            prefix += f", measured on {where}: **{initial_entropy:.4f}"
            prefix += (f" ± {initial_entropy_se:.4f}** nats (± its standard error, from the spread of the "
                       "completions). " if initial_entropy_se is not None else "** nats. ")
    else:
        prefix = ""
    return prefix + _schedule_formula_text(args, name, start, end)


def _initial_measurement(trainer, history) -> tuple[float | None, float | None, int]:
    """``(initial entropy, its standard error, generation rounds aside)``: the trainer's ``initial_entropy`` and
    ``initial_entropy_se``, else the logged ``entropy_control/initial_entropy_se`` (a run resumed from a checkpoint
    keeps its log history; None where never logged), and the logged ``entropy_control/initial_entropy_rounds`` (0
    where not logged)."""
    se = getattr(trainer, "initial_entropy_se", None)
    if not (isinstance(se, (int, float)) and math.isfinite(se)):
        se = (_history_values(history, "entropy_control/initial_entropy_se") or [None])[0]
    rounds = (_history_values(history, "entropy_control/initial_entropy_rounds") or [0])[0]
    return getattr(trainer, "initial_entropy", None), se, int(rounds)


def _resolved(value, initial_entropy):
    if isinstance(value, str):
        from .scheduling.schedules import parse_entropy_value

        fraction = parse_entropy_value(value)[1]
        return value if initial_entropy is None else fraction * initial_entropy
    return value


def _schedule_formula_text(args, name, start, end) -> str:
    formula = SCHEDULE_FORMULAS[name].format(start=_fmt(start), end=_fmt(end), ratio=_fmt(args.entropy_schedule_anneal_ratio))
    warm = args.entropy_schedule_warmup_steps
    return (f"`{name}` schedule (nats per completion token): {formula}, where p ∈ [0, 1] is the fraction of training "
            f"done after {warm} warm-up step(s) that hold {_fmt(start)}.")


def _plain_trl_schedule_text(targets) -> str:
    """The schedule section for a plain TRL ``GRPOConfig`` (no trl-entropy schedule fields)."""
    if targets:
        return ("A `trl_entropy.EntropyScheduleCallback` set the target each optimizer step (logged as "
                "`entropy_control/target`).")
    return "No target: the run followed no entropy schedule."


def _history_values(history, key):
    return [h[key] for h in history if key in h and isinstance(h[key], (int, float)) and math.isfinite(h[key])]


# The answer-diversity rows of the card (docs/metrics.md, "Answer diversity"): (metric, what the row says).
ANSWER_ROWS = (("distinct_answers_solved", "distinct answers, solved groups"),
               ("distinct_answers_unsolved", "distinct answers, unsolved groups"),
               ("answer_entropy_solved", "answer entropy (nats), solved groups"),
               ("answer_entropy_unsolved", "answer entropy (nats), unsolved groups"),
               ("measured_solved", "token entropy (nats), solved groups"),
               ("measured_unsolved", "token entropy (nats), unsolved groups"),
               ("solved_groups", "share of solved groups"))


def _answer_diversity_text(history, group: int | None) -> str:
    """The table of the answer-diversity metrics at the start and the end of training (each the mean of the first
    and of the last 10% of its logged values, the final reward's definition); empty where none was logged."""
    rows = []
    for key, label in ANSWER_ROWS:
        values = _history_values(history, f"entropy_control/{key}")
        if values:
            rows.append(f"| {label} | {final_reward(values[::-1]):.3f} | {final_reward(values):.3f} |")
    if not rows:
        return ""
    which = f"the {group} completions of one prompt" if group else "the completions of one prompt"
    return (f"\n\nAnswer diversity in a group ({which}; *solved*: the group holds a fully rewarded completion), "
            "logged as `entropy_control/distinct_answers` and the rest. Start and end: the mean of the first and of "
            "the last 10% of the logged values.\n\n| per group | start | end |\n|---|---|---|\n" + "\n".join(rows))


# A snapshot folder of the Hugging Face cache: .../models--owner--name/snapshots/<revision>
_CACHE_SNAPSHOT = re.compile(r"models--(?P<repo>[^/\\]+)[/\\]snapshots[/\\][^/\\]+[/\\]?$")


def _adapter_config(model):
    """The active PEFT adapter's config of ``model`` (a ``PeftModel``, or a transformers model with an adapter
    loaded), else None."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not configs:
        return None
    active = getattr(model, "active_adapter", None)
    active = active[0] if isinstance(active, (list, tuple)) and active else active
    return configs.get(active) or next(iter(configs.values()))


def resolve_base_model(trainer, base_model: str | None = None) -> tuple[str | None, str | None]:
    """``(hub_id, local_path)`` of the model the run started from, for the card's ``base_model``.

    The name is ``base_model`` if given, else the adapter's ``base_model_name_or_path`` (PEFT), else the model
    config's ``_name_or_path``. A name that reads as a Hub id and is not a local folder is the Hub id. For a local
    folder the Hub id is, in this order: ``args.model_card_base_model`` (``GRPOEntropyConfig``), or the repository
    of a Hugging Face cache snapshot (``.../models--owner--name/snapshots/<rev>``); else None (the card then names
    the local path and has no ``base_model``). ``args.model_card_base_model`` also overrides a detected Hub id.
    """
    configured = getattr(trainer.args, "model_card_base_model", None)
    if base_model and is_hub_model_id(base_model) and not os.path.exists(base_model):
        return base_model, None
    model = trainer.model
    adapter = _adapter_config(model)
    name = (base_model or getattr(adapter, "base_model_name_or_path", None)
            or model_name_or_path(getattr(model, "config", None)) or None)
    name = str(name) if name else None
    local = name if name and (os.path.exists(name) or not is_hub_model_id(name)) else None
    cached = _CACHE_SNAPSHOT.search(local) if local else None
    hub = configured or (name if name and not local else None) or (cached["repo"].replace("--", "/", 1) if cached
                                                                   else None)
    return hub, local


def _adapter_kind(adapter) -> str:
    """"LoRA" for a LoRA adapter's config, else its PEFT type as PEFT names it (e.g. "IA3")."""
    kind = getattr(getattr(adapter, "peft_type", None), "value", None) or "PEFT"
    return {"LORA": "LoRA", "ADALORA": "AdaLoRA"}.get(str(kind), str(kind))


def _adapter_facts(adapter) -> list[tuple[str, object]]:
    facts = [("peft_type", getattr(getattr(adapter, "peft_type", None), "value", getattr(adapter, "peft_type", None)))]
    for name in ("r", "lora_alpha", "lora_dropout", "target_modules", "task_type"):
        value = getattr(adapter, name, None)
        if isinstance(value, (set, frozenset, list, tuple)):
            value = ", ".join(sorted(map(str, value)))
        if value is not None:
            facts.append((name, value))
    return facts


def _usage_text(where: str, hub: str | None, local: str | None, adapter) -> str:
    if adapter is None:
        return ("```python\nfrom transformers import pipeline\n\n"
                f'generator = pipeline("text-generation", model="{where}")\n```')
    kind = _adapter_kind(adapter)
    base = hub or local or "<base model>"
    return (f"This repository holds a {kind} adapter only: load its base model, then the adapter "
            "([PEFT](https://github.com/huggingface/peft)):\n\n"
            "```python\nfrom peft import PeftModel\nfrom transformers import AutoModelForCausalLM\n\n"
            f'base = AutoModelForCausalLM.from_pretrained("{base}")\n'
            f'model = PeftModel.from_pretrained(base, "{where}")\n'
            "model = model.merge_and_unload()  # optional: one plain transformers model\n```")


def _no_weights_note(folder: str) -> str:
    """A line for the "Use" section when ``folder`` holds no saved model yet (empty when it does)."""
    from peft.utils import SAFETENSORS_WEIGHTS_NAME as ADAPTER_SAFE, WEIGHTS_NAME as ADAPTER_BIN
    from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME

    # the file names save_model() writes: full model (single file or sharded index) or a PEFT adapter
    names = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME, ADAPTER_SAFE, ADAPTER_BIN)
    if any(os.path.exists(os.path.join(folder, f)) for f in names):
        return ""
    return (f"\n\n`{folder}` held no model weights when this card was written: save them there first "
            f"(`trainer.save_model(\"{folder}\")`; `trl-entropy demo --save_models` does so for every run).")


def _epsilon_high_text(args) -> str:
    """TRL clips the ratio at 1 + epsilon_high and uses `epsilon` when `epsilon_high` is None: show the value used."""
    if getattr(args, "epsilon_high", None) is not None:
        return _fmt(args.epsilon_high)
    return f"{_fmt(args.epsilon)} (unset; TRL uses `epsilon`)"


def _own_settings(control: str, args) -> list[tuple[str, object]]:
    """The settings of a control registered outside the package (its ``settings_class`` fields that are not config
    fields, from ``entropy_control_settings`` or their defaults), as (name, value) for the card's parameters."""
    import dataclasses

    from .controls import CONTROL_REGISTRY

    cls = CONTROL_REGISTRY.get(control)
    if cls is None or cls.settings_class is None:
        return []
    settings = cls.settings_from(args)
    config_fields = getattr(args, "__dataclass_fields__", {})
    return [(f.name, getattr(settings, f.name)) for f in dataclasses.fields(settings) if f.name not in config_fields]


def _param_text(args, name: str):
    return _epsilon_high_text(args) if name == "epsilon_high" else getattr(args, name)


def _knob_text(trainer, history) -> str:
    """The knob the control moved: its initial value, its range over the logged steps and its final value."""
    control = getattr(trainer, "entropy_control", None)
    args = trainer.args
    if control is not None and control.knob_name is not None:
        name, key, final = control.knob_name, "entropy_control/" + control.knob_name, control.knob
    elif control is None and getattr(args, "use_adaptive_entropy", False):
        name, key, final = "entropy_coef", "entropy_coef", getattr(trainer, "entropy_coef", None)
    else:
        return ""
    values = _history_values(history, key)
    if name == "epsilon_high":
        initial = _epsilon_high_text(args)
    else:
        initial = _fmt(values[0]) if values else None
    parts = []
    if initial is not None:
        parts.append(f"started at {initial}")
    if values:
        low, high = min(values), max(values)
        parts.append(f"held {_fmt(low)} over the {len(values)} logged step(s)" if low == high else
                     f"ranged over [{_fmt(low)}, {_fmt(high)}] in the {len(values)} logged step(s)")
    if final is not None:
        parts.append(f"ended at **{_fmt(float(final))}** (after the last update)")
    return f"**Knob** `{name}`: " + ", ".join(parts) + "." if parts else ""


def _steps_where(history, key) -> list[int]:
    return [int(h["step"]) for h in history if h.get(key) == 1.0 and "step" in h]


def _ranges(steps: list[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"``."""
    parts, start = [], None
    for i, s in enumerate(steps):
        if start is None:
            start = s
        if i + 1 == len(steps) or steps[i + 1] != s + 1:
            parts.append(str(start) if start == s else f"{start}-{s}")
            start = None
    return ", ".join(parts)


def _saturation_text(history) -> str:
    steps = _steps_where(history, "entropy_control/saturated")
    if not steps:
        return ""
    return (f" The control was **saturated** (its knob at a limit with the error keeping its sign: the target was out "
            f"of its reach) on {len(steps)} optimizer step(s): {_ranges(steps)}.")


def _assist_text(history) -> str:
    if not any("entropy_control/assist_active" in h for h in history):
        return ""
    steps = _steps_where(history, "entropy_control/assist_active")
    if not steps:
        return " The entropy bonus assist never acted (the paper's knob was never saturated long enough)."
    return f" The entropy bonus assist acted on {len(steps)} optimizer step(s): {_ranges(steps)}."


def _dataset_text(dataset) -> str:
    """A short description of the training dataset for the card: its name when it has one, its size and columns."""
    if dataset is None:
        return "–"
    info = getattr(dataset, "info", None)
    name = getattr(info, "dataset_name", None) or getattr(info, "builder_name", None)
    parts = [f"`{name}`"] if name else []
    try:
        parts.append(f"{len(dataset)} rows")
    except TypeError:
        parts.append("an iterable dataset")
    columns = getattr(dataset, "column_names", None)
    if columns:
        parts.append("columns " + ", ".join(f"`{c}`" for c in columns))
    return ", ".join(parts)


def render_model_card(trainer, model_name: str | None = None, base_model: str | None = None,
                      picture: str | None = "entropy_curves.png", output_dir: str | None = None) -> str:
    """The model card of ``trainer``'s run as Markdown (``picture``: a file in ``output_dir`` to embed, if present)."""
    import trl

    from ._version import __version__
    from .urls import project_urls

    args = trainer.args
    control = getattr(args, "entropy_control", "none")
    description, prefixes, cites = method_info(control)
    bibtex = _bibtex(control)
    if control == "none" and getattr(args, "use_adaptive_entropy", False):
        description, prefixes, cites = TRL_ADAPTIVE_ENTROPY_INFO
        method = "use_adaptive_entropy"
    else:
        method = control
    if getattr(args, "entropy_bonus_assist", False):  # the feedback bonus as a second actuator
        description += (" With `entropy_bonus_assist`, the feedback entropy bonus took over while this knob was "
                        "saturated, and handed back when it recovered.")
        prefixes = (*prefixes, "entropy_bonus_", "entropy_coef")
    params = [(f, _param_text(args, f)) for f in sorted(vars(args)) if any(f.startswith(p) for p in prefixes)]
    params += _own_settings(control, args)
    if getattr(args, "entropy_schedule", None) is not None:
        params += [(f, getattr(args, f)) for f in ("entropy_schedule", "entropy_schedule_start", "entropy_schedule_end",
                                                   "entropy_schedule_warmup_steps", "entropy_schedule_anneal_ratio")]
    if control != "none":  # what the control acted on
        params.append(("entropy_measurement", getattr(args, "entropy_measurement", "step")))
    history = trainer.state.log_history
    measured = _history_values(history, "entropy_control/measured") or _history_values(history, "entropy")
    targets = _history_values(history, "entropy_control/target")
    if measured:
        result = f"After {trainer.state.global_step} optimizer steps the measured entropy was **{measured[-1]:.4f}** nats"
        result += f" against a target of **{targets[-1]:.4f}**." if targets else "."
        result += _tracking_error_text(history)
        rewards = _history_values(history, "reward")
        if rewards:  # the demo's table prints the same number: one definition (metrics.final_reward)
            result += f" Final training reward: **{final_reward(rewards):.3f}**, {FINAL_REWARD_DEFINITION}."
        result += _saturation_text(history) + _assist_text(history)
        result += _answer_diversity_text(history, getattr(args, "num_generations", None))
    else:
        result = "No training steps were logged."
    folder = output_dir or args.output_dir
    pass_rows = [h for h in history if any(k.startswith("eval/pass@") for k in h)]
    if pass_rows:
        last = pass_rows[-1]
        ks = sorted(int(k.split("@")[1]) for k in last if k.startswith("eval/pass@"))
        pass_table = (f"pass@k on held-out problems (step {last.get('step')}):\n\n| k | " + " | ".join(map(str, ks))
                      + " |\n|---|" + "---|" * len(ks) + "\n| pass@k | "
                      + " | ".join(f"{last[f'eval/pass@{k}']:.3f}" for k in ks) + " |")
        first = pass_rows[0]
        if first.get("step") == 0 and len(pass_rows) > 1:  # the starting model, evaluated the same way
            pass_table += "\n| starting model | " + " | ".join(
                f"{first[f'eval/pass@{k}']:.3f}" if f"eval/pass@{k}" in first else "–" for k in ks) + " |"
        for name, alt in (("pass_at_k.png", "pass@k on held-out problems"),
                          ("heldout_curves.png", "Held-out pass@k during training")):
            if os.path.exists(os.path.join(folder, name)):
                pass_table += f"\n\n![{alt}]({name})"
    else:
        pass_table = "pass@k was not evaluated."
    # every picture written next to the card is shown on it (evaluation.training_figures names them); the knob's
    # under the knob's line, pass@k's with their table
    shown = ([(picture, "Measured entropy vs target")] if picture else []) + [("reward.png", "Training reward")]
    entropy_picture = "\n\n".join(f"![{alt}]({name})" for name, alt in shown
                                    if os.path.exists(os.path.join(folder, name)))
    knob_description = _knob_text(trainer, history)
    if os.path.exists(os.path.join(folder, "entropy_knob.png")):
        knob_description += "\n\n![Knob moved by the entropy control](entropy_knob.png)"
    hub_base, local_base = resolve_base_model(trainer, base_model)
    if hub_base:
        base = f"**{hub_base}** (from a local copy)" if local_base else f"**{hub_base}**"
    else:
        base = f"a local model (`{local_base}`)" if local_base else "an unnamed model"
    adapter = _adapter_config(trainer.model)
    adapter_kind = _adapter_kind(adapter) if adapter is not None else None
    tags = ["trl", "grpo", "trl-entropy", "entropy-control"] + ([control] if control != "none" else [])
    tags += [str(adapter_kind).lower()] if adapter is not None else []
    header = [f"base_model: {hub_base}"] if hub_base else []
    library = "peft" if adapter is not None else "transformers"
    yaml_header = "\n".join(header + [f"library_name: {library}", "tags:"] + [f"- {t}" for t in tags])
    where = getattr(trainer, "hub_model_id", None) or getattr(args, "hub_model_id", None) or folder
    usage = _usage_text(where, hub_base, local_base, adapter)
    if where == folder:  # a local folder, not a Hub repository: say so if the weights are not there (yet)
        usage += _no_weights_note(folder)
    if adapter is not None:
        usage += "\n\n" + _table(_adapter_facts(adapter), header=("adapter", "value"))
    training = [("train_dataset", _dataset_text(getattr(trainer, "train_dataset", None))),
                ("reward_funcs", ", ".join(f"`{n}`" for n in getattr(trainer, "reward_func_names", [])) or "–"),
                ("max_steps", trainer.state.max_steps), ("learning_rate", args.learning_rate),
                ("num_generations", args.num_generations), ("steps_per_generation", args.steps_per_generation),
                ("num_iterations", args.num_iterations), ("loss_type", args.loss_type), ("beta", args.beta),
                ("epsilon", args.epsilon), ("epsilon_high", _epsilon_high_text(args)),
                ("max_completion_length", args.max_completion_length), ("temperature", args.temperature)]
    parameter_table, parameter_details = _settings_text(args, params, method, __version__, trl.__version__)
    citations = "\n\n".join(f"```bibtex\n{bibtex[c]}\n```" for c in dict.fromkeys((*cites, "trl_entropy", "trl"))
                              if c in bibtex)
    urls = project_urls()
    template = resources.files("trl_entropy").joinpath("model_cards/template.md").read_text(encoding="utf-8")
    return template.format(
        yaml_header=yaml_header,
        model_name=model_name or os.path.basename(os.path.normpath(folder)),
        model_kind=f"This {adapter_kind} adapter was" if adapter is not None else "This model was",
        base_model=base,
        trl_version=trl.__version__,
        package_version=__version__,
        repository_url=urls["Repository"],
        documentation_url=urls["Documentation"],
        usage=usage,
        entropy_control=method,
        method_description=description,
        parameter_table=parameter_table,
        parameter_details=parameter_details,
        knob_description=knob_description,
        schedule_description=(_schedule_text(args, _initial_measurement(trainer, history))
                              if hasattr(args, "entropy_schedule")
                              else _plain_trl_schedule_text(targets)),
        result_description=result,
        pass_at_k_table=pass_table,
        entropy_picture=entropy_picture,
        training_table=_table(training),
        citations=citations,
    )


def write_model_card(trainer, folder: str | None = None, model_name: str | None = None, pictures: bool = True,
                     base_model: str | None = None) -> str:
    """Write the training pictures (when ``pictures`` and matplotlib is installed) and this card as ``README.md``
    into ``folder`` (default ``args.output_dir``). Works for any GRPO trainer, also a plain TRL ``GRPOTrainer``
    (``GRPOEntropyTrainer`` does this itself at every save); ``base_model`` as in :func:`render_model_card`.
    Returns the card's path."""
    folder = folder or trainer.args.output_dir
    os.makedirs(folder, exist_ok=True)
    if pictures:
        from .evaluation import write_training_plots

        try:
            write_training_plots(trainer.state.log_history, folder)
        except ImportError:
            pass  # no matplotlib: the card simply has no picture
    path = os.path.join(folder, "README.md")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(render_model_card(trainer, model_name=model_name, base_model=base_model, output_dir=folder))
    os.replace(path + ".tmp", path)
    return path
