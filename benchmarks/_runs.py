"""Shared plumbing of the benchmark scripts: one training run through the demo runner, cached in a JSONL file.

A long benchmark (hours on the SmolLM2 testbed) is a list of independent runs. Each finished run is appended to
``--results`` as one JSON line (gzip-compressed where the name ends in ``.gz``: ``benchmarks._cache``), keyed by (testbed and its settings, label, seed, steps, configuration); rerunning
the script skips the runs
already there, so an interrupted benchmark resumes where it stopped and the tables can be reprinted at no cost.

The key holds what a run was asked for, not the package's defaults it ran with. So each run also records
``package_defaults`` (the default of every field ``GRPOEntropyConfig`` adds to ``GRPOConfig``: controller gains,
bounds, windows); a cached run whose recorded defaults differ from today's is not served (it trains again, or is left
out with ``cached_only``) and the changed fields are printed; a field the run set itself does not count. Runs cached
before this record existed are served as they are.
"""

from __future__ import annotations

import json
import os
import statistics

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks._cache import append_row, read_rows  # noqa: E402
from trl_entropy.controls import CONTROL_REGISTRY  # noqa: E402  (after the environment above)


def package_defaults() -> dict:
    """The defaults of the fields ``GRPOEntropyConfig`` adds to TRL's ``GRPOConfig``, as JSON stores them."""
    import dataclasses

    from trl import GRPOConfig

    from trl_entropy import GRPOEntropyConfig

    trl_fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    out = {}
    for f in dataclasses.fields(GRPOEntropyConfig):
        if f.name in trl_fields:
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    out[AFTER_TAGS] = list(TAGS)
    return json.loads(json.dumps(out, sort_keys=True, default=str))


# The package's tags a run was recorded after (not a config field: `changed_defaults` does not compare it). A run
# recorded after `pre-law-cut` lacks the removed fields because they were gone, not because it predates them.
AFTER_TAGS = "_after_tags"
TAGS = ("pre-law-cut",)


# Config fields added after runs were cached, with the value that reproduces how those runs trained (a run recorded
# before a field existed ran as this value): such a run is still served while the field's default is that value.
FIELDS_ADDED = {"entropy_measurement": "step", "entropy_bonus_anneal_min": None,
                "entropy_bonus_compensation_clip": "bounds", "entropy_bonus_integral_error": "prediction",
                "entropy_bonus_pull_gain": 0.0, "entropy_bonus_pull_smoothing": 0.3,
                "entropy_bonus_target_lookahead": "step", "entropy_bonus_penalty_scope": "all",
                "entropy_bonus_integral_scale": "none", "entropy_bonus_antiwindup": "conditional",
                "entropy_bonus_integral_clip": 1.0,
                "entropy_bonus_integral_beyond": "clip", "entropy_bonus_lower_ki_fraction": 0.0}

# Config fields removed after runs were cached, with the value that trained as the package trains now (an option
# measured and dropped): a run that recorded this value is served; one that recorded another value is not.
# The bonus's variants removed after the git tag `pre-law-cut` (issue 51) are here at the values the law keeps; a run
# recorded before the tag that predates such a field counts as its FIELDS_ADDED value (entropy_bonus_target_lookahead
# "step", entropy_bonus_integral_error "prediction": such runs are not served as today's).
FIELDS_REMOVED: dict = {name: value for cls in CONTROL_REGISTRY.values()
                        for name, (value, _tag) in cls.removed_settings.items()}

# Fields that act only where the target moves: a change of their default leaves a run on a constant target (every
# logged target equal) as it was, so such a run is still served.
MOVING_TARGET_FIELDS = {"entropy_bonus_target_lookahead"}


def constant_target(row: dict) -> bool:
    """Whether the run's logged target never moved (``False`` when it logged none)."""
    targets = [t for t in row.get("target") or [] if t is not None]
    return bool(targets) and max(targets) == min(targets)


# The feedback bonus's own fields: they matter to a run only if it used the bonus's controller (the control itself,
# or a paper's control with the assist); a change of their defaults leaves every other run as it was.
BONUS_PREFIX = "entropy_bonus_"


def uses_bonus_controller(overrides: dict) -> bool:
    return overrides.get("entropy_control") == "entropy_bonus" or bool(overrides.get("entropy_bonus_assist"))


def run_overrides(row: dict) -> dict:
    """The config overrides a cached run was asked for (the second element of its spec, from its key)."""
    try:
        spec = json.loads(row["key"])[4][0]
    except (KeyError, IndexError, TypeError, ValueError):
        return {}
    return spec[1] if isinstance(spec, list) and len(spec) > 1 and isinstance(spec[1], dict) else {}


def changed_defaults(row: dict, current: dict, overridden=()) -> dict:
    """``{field: (recorded, current)}`` for the defaults that changed since ``row`` ran, leaving out the fields the
    run set itself (``overridden``), the bonus's own fields for a run that did not use its controller, and the
    ``MOVING_TARGET_FIELDS`` for a run on a constant target; empty for rows cached before defaults were recorded. A
    field the row predates counts as its ``FIELDS_ADDED`` value; a field removed since counts as no change when the run
    recorded its ``FIELDS_REMOVED`` value."""
    recorded = row.get("package_defaults")
    if recorded is None:
        return {}
    before_cut = "pre-law-cut" not in (recorded.get(AFTER_TAGS) or ())
    recorded = {**{k: v for k, v in FIELDS_ADDED.items() if k in current or (before_cut and k in FIELDS_REMOVED)},
                **recorded}
    recorded = {k: v for k, v in recorded.items()
                if not (k not in current and k in FIELDS_REMOVED and v == FIELDS_REMOVED[k])}
    bonus = "key" not in row or uses_bonus_controller(run_overrides(row))
    return {k: (recorded.get(k), current.get(k)) for k in sorted(set(recorded) | set(current))
            if k not in overridden and k != AFTER_TAGS and recorded.get(k) != current.get(k)
            and (bonus or not k.startswith(BONUS_PREFIX))
            and not (k in MOVING_TARGET_FIELDS and constant_target(row))}


def run_key(testbed: str, label: str, seed: int, steps: int, spec) -> str:
    return json.dumps([testbed, label, seed, steps, spec], sort_keys=True, default=str)


def load_results(path: str | None) -> dict[str, dict]:
    """The runs cached in ``path`` (gzip JSON lines where the name ends in ``.gz``) by their key; a key cached twice
    serves its last run."""
    return {row["key"]: row for row in read_rows(path)}


def on_gpu(tb) -> bool:
    """Whether the testbed trains on the GPU (``TRL_ENTROPY_TESTBED_DEVICE=cuda``: its config's ``use_cpu`` is False)."""
    return tb.grpo_config_kwargs().get("use_cpu") is False


def require_cuda(what: str) -> None:
    """Refuse GPU work where no CUDA device is: TRL would fall back to the CPU and the result be cached as a GPU one."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"{what} is asked for on the GPU (--device cuda, TRL_ENTROPY_TESTBED_DEVICE=cuda) but no "
                           "CUDA device is available; cached GPU rows can still be read here with --cached_only.")


def cached_run(results: dict, path: str | None, *, testbed: str, label: str, seed: int, steps: int, spec,
               target_start: float | None = None, schedule: str = "constant", end_ratio: float = 1.0,
               anneal_ratio: float = 0.3, method: str | None = None, output_dir: str = "/tmp/trl_entropy_bench",
               cached_only: bool = False, final_eval: bool = False, as_recorded: bool = False,
               eval_at: tuple[int, ...] = ()):
    """Train ``spec`` (``(ours, overrides, description)``, or None for the demo method ``method``) once, or return
    the cached result. The result is the demo runner's dict (curves per step), without evaluation. With
    ``cached_only`` a run missing from the cache returns None instead of training. ``final_eval=True`` also
    evaluates the trained policy (``runner.policy_evaluation``, result key ``final_eval``); such runs are cached
    under their own key (the same training, evaluated). ``as_recorded`` serves a cached run whose package defaults
    have changed since it ran (a reprint of an earlier measurement), naming what changed. ``eval_at`` also evaluates
    the policy at the end of those optimizer steps (``runner.run_method``'s key ``step_evals``), under a key of its
    own."""
    from trl_entropy.demo import runner

    settings = runner.DemoSettings(steps=steps, seed=seed, schedule=schedule, target_end_ratio=end_ratio,
                                   anneal_ratio=anneal_ratio, output_dir=output_dir, progress=False, testbed=testbed)
    tb = settings.get_testbed()
    # the testbed's settings are part of the key: a change of its defaults (e.g. the learning rate) reruns
    key = run_key(testbed, label, seed, steps,
                  [spec, method, target_start, schedule, end_ratio, anneal_ratio, tb.grpo_config_kwargs()]
                  + (["final_eval:v1"] if final_eval else []) + ([f"eval_at:{list(eval_at)}"] if eval_at else []))
    defaults = package_defaults()
    if key in results:
        overrides = spec[1] if isinstance(spec, (list, tuple)) and len(spec) > 1 and isinstance(spec[1], dict) else {}
        changed = changed_defaults(results[key], defaults, overridden=set(overrides))
        if not changed:
            return results[key]
        what = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items())
        if as_recorded:
            print(f"cached run {label!r} (seed {seed}) ran with other package defaults, served as recorded: {what}",
                  flush=True)
            return results[key]
        print(f"cached run {label!r} (seed {seed}) ran with other package defaults, not served: {what}", flush=True)
    if cached_only:
        return None
    if on_gpu(tb):
        require_cuda(f"run {label!r} (seed {seed})")
    train_ds, _ = tb.datasets(0)
    start = target_start if target_start is not None else 1.0
    r = runner.run_method(method or label, settings, start, train_ds, [], spec=spec, evaluate=False,
                          final_eval=final_eval, eval_at=eval_at)
    r = {k: v for k, v in r.items() if k not in ("pass_at_k",)}
    r.update(key=key, label=label, package_defaults=defaults)
    if path:
        append_row(path, r)
    results[key] = r
    return r


def coefficient_stats(run: dict) -> dict | None:
    """The signed entropy coefficient's statistics over a run whose knob is ``entropy_coef`` (else ``None``):
    ``mean c``, ``|c|`` (its mean magnitude: control effort), ``|dc|`` (its mean step-to-step change: chatter) and
    ``penalty share`` (the fraction of steps with ``c < 0``)."""
    if run.get("knob_name") != "entropy_coef":
        return None
    signed = [v for v in run.get("knob") or [] if v is not None]
    if not signed:
        return None
    steps = list(zip(signed, signed[1:]))
    return {
        "mean c": sum(signed) / len(signed),
        "|c|": sum(abs(v) for v in signed) / len(signed),
        "|dc|": sum(abs(b - a) for a, b in steps) / len(steps) if steps else 0.0,
        "penalty share": sum(v < 0 for v in signed) / len(signed),
    }


def second_half_reward(run: dict) -> float | None:
    """Mean of the logged rewards over the second half of the run's steps (TRL logs one per scored generation
    batch): a steadier reading than the last two batches."""
    rewards = run.get("reward") or []
    steps = run.get("step") or list(range(1, len(rewards) + 1))  # rows without steps: one reward per step
    half = [x for s, x in zip(steps, rewards) if x is not None and s > max(steps, default=0) / 2]
    return sum(half) / len(half) if half else None


def window_mean(values, center: int, half: int = 5) -> float:
    window = [v for v in values[max(0, center - half): center + half] if v is not None]
    return sum(window) / len(window) if window else float("nan")


def moving_average(values, window: int = 10) -> list:
    """Trailing moving average (the first ``window - 1`` points average what exists so far): the package's
    :func:`trl_entropy.metrics.moving_average`, on which the tracking error is defined."""
    from trl_entropy.metrics import moving_average as package_moving_average

    return package_moving_average(values, window)


def mean_sd(values, digits: int = 3) -> str:
    values = [v for v in values if v is not None and v == v]
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"
