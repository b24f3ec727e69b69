"""The offline demo: GRPO on a testbed with and without entropy control, side by side.

Every method trains the same pretrained testbed model (``DemoSettings.testbed``: the tiny character-level model, or
SmolLM2-135M-Instruct, see :mod:`trl_entropy.testbeds`) on the same prompts with the same seed, in the off-policy
setting the papers use (several optimizer steps per generation batch, so clip bounds act). The report
(:func:`format_table`) says first what the control did: the tracking error of the scheduled target (the benchmarks'
metric, :func:`trl_entropy.metrics.tracking_error`: MA10 relative error after the first 20% of steps), the final
entropy, the final training reward (:func:`trl_entropy.metrics.final_reward`, the model card's) and the median
optimizer-step time; then the held-out accuracy, pass@k (:data:`HELDOUT_DEFINITION`: one evaluation,
:func:`pass_at_k_curve`, for the table, the learning curves and the starting model), and one line on what the trade
means.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import textwrap
import time
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

from ..controls import CONTROL_REGISTRY
from ..controls._base import RegistryMapping
from ..metrics import FINAL_REWARD_DEFINITION, TRACKING_ERROR_DEFINITION, final_reward, tracking_error
from . import testbed

__all__ = ["DemoSettings", "METHODS", "run_method", "run_demo", "format_table"]


@dataclass
class DemoSettings:
    steps: int | None = None  # None: the testbed's demo_steps (tiny 300, smollm2 100)
    seed: int = 0
    schedule: str = "wsd"
    target_start: float | None = None  # None: the pretrained model's measured entropy
    target_end_ratio: float = 0.5  # end = ratio * start
    anneal_ratio: float = 0.3
    steps_per_generation: int = 4
    # the held-out evaluation (HELDOUT_DEFINITION): this many held-out problems, this many samples each
    pass_at_k_n: int = 16  # samples per problem for pass@k (k = 1, 2, 4, ..., n)
    pass_at_k_problems: int = 64
    output_dir: str = "demo_out"
    progress: bool = True
    recipe: testbed.TestbedRecipe = field(default_factory=testbed.TestbedRecipe)
    extra: dict[str, Any] = field(default_factory=dict)
    testbed: str = "tiny"  # a name of trl_entropy.testbeds.TESTBEDS
    # held-out pass@1 and pass@16 every this many steps (the learning curves); None: the testbed's (tiny_headroom 100)
    curve_every: int | None = None
    include_base: bool = False  # also score the starting model (held-out pass@k): the reference row
    # keep each run's trained weights in its folder, next to its model card; None: yes for the tiny testbed
    # (~0.3 MB a run), no for SmolLM2 (~540 MB a run: the card then says that the folder holds no weights)
    save_models: bool | None = None

    @property
    def keeps_models(self) -> bool:
        return self.save_models if self.save_models is not None else self.testbed.startswith("tiny")

    def get_testbed(self):
        from ..testbeds import get_testbed

        return get_testbed(self.testbed, self.recipe)

    @property
    def total_steps(self) -> int:
        return self.steps if self.steps is not None else self.get_testbed().demo_steps


def _demo_method(name: str) -> tuple[bool, dict, str]:
    """(uses GRPOEntropyTrainer, config overrides, description) of a demo method. A control's line is its
    ``demo_description`` (default: its card text); ``demo_overrides`` adds config settings per testbed (see
    :func:`run_method`)."""
    if name == "grpo":
        return (False, {}, "plain TRL GRPOTrainer")
    cls = CONTROL_REGISTRY[name]
    return (True, {"entropy_control": name}, cls.demo_description or cls.method_text())


# name -> _demo_method(name): plain GRPO, then every registered control in registration order, a live view of the
# registry (trl_entropy.controls.CONTROL_REGISTRY), so a control registered outside the package is a method too.
METHODS = RegistryMapping(_demo_method, first=("grpo",))
DEFAULT_METHOD = "entropy_bonus"  # the recommended control (docs: choosing)


class _Progress(TrainerCallback):
    def __init__(self, desc: str, enabled: bool):
        self.desc, self.enabled, self.bar = desc, enabled, None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=state.max_steps, desc=self.desc, leave=True, dynamic_ncols=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is not None and logs:
            shown = {k.split("/")[-1]: round(v, 3) for k, v in logs.items()
                     if k in ("entropy", "reward", "entropy_control/target", "entropy_control/entropy_coef")}
            self.bar.set_postfix(shown, refresh=False)

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(1)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()


def _schedule_kwargs(settings: DemoSettings, start: float) -> dict:
    return dict(
        entropy_schedule=settings.schedule,
        entropy_schedule_start=start,
        entropy_schedule_end=start * settings.target_end_ratio,
        entropy_schedule_anneal_ratio=settings.anneal_ratio,
    )


class _PolicyEvaluations(TrainerCallback):
    """:func:`policy_evaluation` of the policy at the end of each optimizer step in ``steps`` (the policy a run
    stopped there would publish). The evaluation restores the global RNG state and the model's mode, so the
    training run is the same with or without it."""

    def __init__(self, steps, tb, tokenizer, max_new_tokens, seed: int):
        self.steps, self.tb, self.tokenizer = set(steps), tb, tokenizer
        self.max_new_tokens, self.seed, self.results = max_new_tokens, seed, {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step in self.steps and model is not None:
            self.results[state.global_step] = policy_evaluation(model, self.tokenizer, self.tb, self.max_new_tokens,
                                                                self.seed)


class _HeldOutCurve(TrainerCallback):
    """The held-out learning curve: ``evaluate(model)`` (:func:`pass_at_k_curve`, the table's evaluation, with the
    same problems and seed) every ``every`` optimizer steps, logged as ``eval/pass@k`` for the model card and its
    pictures. The last step is left to the evaluation after training, which the curve then ends with."""

    def __init__(self, trainer, evaluate, every: int):
        self.trainer, self.evaluate, self.every, self.points = trainer, evaluate, every, {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0 and state.global_step < state.max_steps:
            from ..evaluation import _log_aside

            self.points[state.global_step] = self.evaluate(self.trainer.model)
            _log_aside(self.trainer, {f"eval/pass@{k}": v for k, v in self.points[state.global_step].items()})


# The answer-diversity metrics the demo reports (docs/metrics.md, "Answer diversity"), as the trainer logs them.
ANSWER_METRICS = tuple(f"entropy_control/{k}" for k in (
    "distinct_answers", "distinct_answers_solved", "distinct_answers_unsolved", "answer_entropy",
    "answer_entropy_solved", "answer_entropy_unsolved", "solved_groups", "measured_solved", "measured_unsolved"))


class _AnswerRecorder:
    """Plain TRL GRPOTrainer's answer-diversity metrics, for the demo's baseline: a reward function that scores like
    ``reward`` and, for each training generation batch (one process: the whole batch), logs the group metrics of
    :func:`trl_entropy.answer_diversity.answer_diversity` into the trainer's metrics under the names
    ``GRPOEntropyTrainer`` logs them (answers by ``extract``; solved: a reward of 1.0, the testbeds' full score).
    The token entropy split needs the trainer's loss forward: not recorded here."""

    def __init__(self, reward, extract, group: int):
        self.reward, self.extract, self.group, self.trainer = reward, extract, group, None
        self.__name__ = getattr(reward, "__name__", "reward")

    def __call__(self, completions, **kwargs):
        from .._trl_private import log_metric
        from ..answer_diversity import answer_diversity, solved_groups

        rewards = self.reward(completions, **kwargs)
        if self.trainer is not None and "trainer_state" in kwargs and len(completions) % self.group == 0:
            scores = [math.nan if r is None else float(r) for r in rewards]
            solved = solved_groups(scores, self.group, 1.0)
            for key, value in answer_diversity([self.extract(c) for c in completions], solved, self.group).items():
                log_metric(self.trainer, f"entropy_control/{key}", value)
        return rewards


def _answer_extractor(tb, tokenizer):
    """The testbed's answer extractor, or the trainer's default (the text, stripped of whitespace and eos)."""
    import functools

    from .._imports import import_callable
    from ..trainers.answers import completion_answer

    if tb.answer_extractor:
        return import_callable(tb.answer_extractor, "answer_extractor")
    return functools.partial(completion_answer, eos_token=getattr(tokenizer, "eos_token", None))


def run_method(name: str, settings: DemoSettings, target_start: float, train_ds, test_problems,
               spec: tuple[bool, dict, str] | None = None, evaluate: bool = True, final_eval: bool = False,
               eval_at: tuple[int, ...] = ()) -> dict:
    """Train one method on the settings' testbed and return its curves and summary numbers.

    ``spec`` = ``(uses GRPOEntropyTrainer, config overrides, description)`` runs a configuration that is not in
    :data:`METHODS` under the label ``name`` (the benchmarks use this); ``evaluate=False`` skips the held-out
    accuracy, pass@k and the model card; ``final_eval=True`` adds :func:`policy_evaluation` of the trained model
    (key ``final_eval``); ``eval_at`` evaluates the policy the same way at the end of those optimizer steps (key
    ``step_evals``, by step).
    """
    from trl import GRPOConfig, GRPOTrainer

    from ..scheduling.callbacks import EntropyScheduleCallback
    from ..trainers import GRPOEntropyConfig, GRPOEntropyTrainer

    tb = settings.get_testbed()
    ours, overrides, description = spec if spec is not None else METHODS[name]
    overrides = dict(overrides)
    here = dict(CONTROL_REGISTRY[name].demo_overrides.get(tb.name, {})) if spec is None and name in CONTROL_REGISTRY \
        else {}
    here.update(tb.method_overrides.get(name, {}) if spec is None else {})
    if here:
        overrides.update(here)
        description += " (" + ", ".join(f"{k}={v}" for k, v in here.items()) + " here)"
    model, tokenizer = tb.load(settings.progress)
    base = dict(tb.grpo_config_kwargs())
    base.update(
        output_dir=os.path.join(settings.output_dir, "runs", name),
        max_steps=settings.total_steps,
        seed=settings.seed,
        steps_per_generation=settings.steps_per_generation,
        save_strategy="no",
        report_to="none",
        logging_steps=1,
        disable_tqdm=True,
    )
    base.update(overrides)
    base.update(settings.extra.get(name, {}))
    schedule = _schedule_kwargs(settings, target_start)
    if ours:
        control = CONTROL_REGISTRY.get(base.get("entropy_control", "none"))  # None for "none"
        uses_schedule = control is not None and control.follows_target  # the registered class says so
        if "entropy_schedule" in overrides:  # the spec brings its own target (e.g. a knob held at an extreme)
            uses_schedule = False
        if tb.base_model:
            base.setdefault("model_card_base_model", tb.base_model)
        if tb.answer_extractor:
            base.setdefault("answer_extractor", tb.answer_extractor)
        args = GRPOEntropyConfig(**base, **(schedule if uses_schedule else {}))
        trainer_cls = GRPOEntropyTrainer
    else:
        args = GRPOConfig(**base)
        trainer_cls = GRPOTrainer
    # plain TRL: its answer diversity recorded from the reward function's view (GRPOEntropyTrainer logs its own)
    reward = tb.reward if ours else _AnswerRecorder(tb.reward, _answer_extractor(tb, tokenizer), args.num_generations)
    trainer = trainer_cls(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=train_ds,
        processing_class=tokenizer,
    )
    if not ours:
        reward.trainer = trainer
    if overrides.get("use_adaptive_entropy"):
        from ..scheduling.schedules import make_schedule

        sched = make_schedule(schedule["entropy_schedule"], start=schedule["entropy_schedule_start"],
                              end=schedule["entropy_schedule_end"],
                              anneal_ratio=schedule["entropy_schedule_anneal_ratio"])
        trainer.add_callback(EntropyScheduleCallback(sched, trainer=trainer))
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # the table and the progress bar say it better than raw log dicts
    trainer.add_callback(_Progress(name, settings.progress))
    max_new = base.get("max_completion_length")

    def heldout(policy) -> dict[int, float]:  # the one held-out evaluation (HELDOUT_DEFINITION)
        return pass_at_k_curve(policy, tokenizer, test_problems[: settings.pass_at_k_problems], n=settings.pass_at_k_n,
                               seed=settings.seed, reward=tb.reward, max_new_tokens=max_new)

    curve = None
    curve_every = settings.curve_every or tb.curve_every
    if curve_every and evaluate:
        start_point = heldout(trainer.model)  # step 0: the starting model, as the table's "starting model" row
        curve = _HeldOutCurve(trainer, heldout, curve_every)
        trainer.add_callback(curve)
    step_evals = None
    if eval_at:
        step_evals = _PolicyEvaluations(eval_at, tb, tokenizer, base.get("max_completion_length"), settings.seed)
        trainer.add_callback(step_evals)
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    rows = [h for h in trainer.state.log_history if "loss" in h and "step" in h]
    steps = [h["step"] for h in rows]
    measured = [h.get("entropy_control/measured", h.get("entropy")) for h in rows]
    target = [h.get("entropy_control/target") for h in rows]
    if all(t is None for t in target):  # plain GRPO: compare against the same schedule it does not follow
        from ..scheduling.schedules import make_schedule

        sched = make_schedule(schedule["entropy_schedule"], start=schedule["entropy_schedule_start"],
                              end=schedule["entropy_schedule_end"],
                              anneal_ratio=schedule["entropy_schedule_anneal_ratio"])
        target = [sched(s - 1, settings.total_steps) for s in steps]
    control = getattr(trainer, "entropy_control", None)
    knob_name = control.knob_name if control is not None else ("entropy_coef" if name == "trl_adaptive_entropy"
                                                                  else None)
    knob_key = f"entropy_control/{knob_name}" if control is not None else knob_name
    knob = [h.get(knob_key) for h in rows] if knob_name else []
    rewards = [h.get("reward") for h in rows if h.get("reward") is not None]  # one per generation batch
    tail = max(1, len(rewards) // 10)  # final H: the mean over this many last steps (as the docs' tables took it)
    step_times = [h["step_time"] for h in rows if "step_time" in h]
    pass_k, curve_points = {}, None
    if evaluate:
        pass_k = heldout(trainer.model)
        if curve is not None:  # the curve ends with the table's numbers
            points = [(0, start_point), *sorted(curve.points.items()), (trainer.state.global_step, pass_k)]
            curve_points = {"step": [s for s, _ in points],
                            **{f"pass@{k}": [p[k] for _, p in points] for k in (1, settings.pass_at_k_n)}}
        # every run's folder gets its model card and pictures, as a user's run would have them (pass@k included);
        # the plain TRL trainers (grpo, trl_adaptive_entropy) get them through write_model_card
        from ..evaluation import _log_aside
        from ..model_card import write_model_card

        _log_aside(trainer, {f"eval/pass@{k}": v for k, v in pass_k.items()})
        card_name = f"testbed-{name}" if tb.name == "tiny" else f"{tb.name}-{name}"
        if settings.keeps_models:  # first the weights, so that the card's "Use" section loads what is there
            trainer.save_model()
        if ours:
            trainer.create_model_card(model_name=card_name)
        else:
            write_model_card(trainer, model_name=card_name, base_model=tb.base_model)
    final = policy_evaluation(trainer.model, tokenizer, tb, base.get("max_completion_length"), settings.seed) \
        if final_eval else None
    extra_keys = ("clip_ratio/high_mean", "clip_ratio/low_mean", "clip_ratio/region_mean", "completions/mean_length",
                  "frac_reward_zero_std", "entropy_control/assist_active", "entropy_control/bonus_gain_scale",
                  "entropy_control/measured_generation_batch", "entropy_control/bonus_integral",
                  "entropy_control/bonus_law", "entropy_control/bonus_signal_fraction")
    return {
        "method": name,
        "description": description,
        "testbed": tb.name,
        "seed": settings.seed,
        "step": steps,
        "measured": measured,
        "target": target,
        "knob": knob,
        "knob_name": knob_name,
        "reward": [h.get("reward") for h in rows],
        "final_reward": final_reward(h.get("reward") for h in rows),  # the model card's (metrics.final_reward)
        "pass_at_k": pass_k,
        **({"curve": curve_points} if curve_points is not None else {}),
        **({"final_eval": final} if final is not None else {}),
        **({"step_evals": step_evals.results} if step_evals is not None else {}),
        "tracking_error": tracking_error(measured, target),  # the benchmarks' MA10 error after the first 20%
        "final_entropy": sum(measured[-tail:]) / tail if measured else float("nan"),
        "median_step_time": statistics.median(step_times) if step_times else float("nan"),
        "wall_time": wall,
        "step_time": [h.get("step_time") for h in rows],
        **{key: [h.get(key) for h in rows] for key in extra_keys + ANSWER_METRICS},
        # each answer metric's final value, as the final reward's (metrics.final_reward: the last 10% of the values)
        "final_answers": {key.split("/", 1)[1]: final_reward(h.get(key) for h in rows) for key in ANSWER_METRICS},
    }


def policy_evaluation(model, tokenizer, tb, max_new_tokens=None, seed: int = 0, n_samples: int = 16,
                      max_problems: int = 256) -> dict:
    """The policy's accuracy on the testbed's distinct problems (at most ``max_problems`` per split; every one on
    the SmolLM2 testbeds' default task: 163 train, 37 test), split by train/test.

    ``sampled``: mean reward of ``n_samples`` completions per problem at temperature 1 (what the training reward
    estimates, from ~16x more completions than two generation batches); ``greedy``: one greedy completion per
    problem (what the policy knows, whatever its entropy). Keys ``{train,test}_{sampled,greedy}`` and ``n_train``,
    ``n_test`` (distinct problems).
    """
    train_ds, _ = tb.datasets(0)
    train = list({r["prompt"]: dict(r) for r in train_ds}.values())[:max_problems]
    test = [dict(r) for r in tb.heldout(max_problems, seed)]
    out = {"n_train": len(train), "n_test": len(test), "n_samples": n_samples}
    for split, problems in (("train", train), ("test", test)):
        out[f"{split}_sampled"] = testbed.evaluate_accuracy(model, tokenizer, problems, n_samples=n_samples,
                                                            temperature=1.0, seed=seed + 11, batch_size=128,
                                                            max_new_tokens=max_new_tokens, reward=tb.reward)
        out[f"{split}_greedy"] = testbed.evaluate_accuracy(model, tokenizer, problems, n_samples=1, temperature=0.0,
                                                           batch_size=128, max_new_tokens=max_new_tokens,
                                                           reward=tb.reward)
    return out


def pass_at_k_curve(model, tokenizer, problems, n: int = 16, seed: int = 0, reward=None,
                    max_new_tokens: int | None = None) -> dict[int, float]:
    """Unbiased pass@k for k = 1, 2, 4, ..., n: ``n`` samples per problem at temperature 1, averaged over problems
    (correct = ``reward`` 1.0, default: the tiny testbed's exact match)."""
    from ..metrics import pass_at_k

    texts, _ = testbed.sample_completions(model, tokenizer, problems, n_samples=n, temperature=1.0, seed=seed + 7,
                                          max_new_tokens=max_new_tokens)
    answers = [p["answer"] for p in problems for _ in range(n)]
    correct = (reward or testbed.accuracy_reward)(texts, answers)
    counts = [int(sum(correct[i * n : (i + 1) * n])) for i in range(len(problems))]
    ks = [2**j for j in range(n.bit_length()) if 2**j <= n]
    return {k: sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks}


STEP_TIME_NOTE = (
    "step ms, vs grpo: median optimizer-step time of a single run per method, the runs taken one after another on a "
    "machine that may be busy; a rough indication, not a measured overhead (for that: python -m benchmarks.overhead, "
    "which interleaves repeated runs)."
)


TRACK_ERR_NOTE = f"track err: the tracking error, {TRACKING_ERROR_DEFINITION} (the benchmarks' metric)."

FINAL_REWARD_NOTE = f"final reward: {FINAL_REWARD_DEFINITION}, as on each run's model card."

ANSWERS_NOTE = ("answers: distinct answers in a group (the completions of one prompt); solv/unsolv: the same over the "
                "groups with a fully rewarded completion and over those without (entropy_control/distinct_answers, "
                "docs/metrics.md); each the mean of the last 10% of the generation batches, as the final reward.")

# The demo's one held-out accuracy: every held-out number it prints or draws (table, starting model, learning curves,
# model cards) is this evaluation, pass_at_k_curve, with the same problems and seed.
HELDOUT_DEFINITION = ("held-out accuracy = pass@1: the share of correct answers among {n} samples (temperature 1) on "
                      "each of {problems} held-out problems; pass@k: the chance that k of those samples hold a "
                      "correct answer")

PAYOFF_PAGE = "docs/payoff.md"  # when entropy control pays: the line under the held-out table links it


def _fill(text: str, width: int) -> str:
    return textwrap.fill(text, width=max(width, 80), subsequent_indent="  ", break_on_hyphens=False)


def format_control_table(results: list[dict], baseline: str = "grpo") -> str:
    """What the control did: each run's tracking error of the target (what the package is for), final entropy, final
    training reward and step time, with :data:`TRACK_ERR_NOTE`, :data:`FINAL_REWARD_NOTE` and :data:`STEP_TIME_NOTE`
    under it. The starting model's row (``method="base"``) is left out: it did not train."""
    runs = [r for r in results if r["method"] != "base"]
    base_time = next((r["median_step_time"] for r in runs if r["method"] == baseline), None)
    header = (f"{'method':<22} {'track err':>9} {'final H':>8} {'answers':>8} {'solv/unsolv':>11} {'final reward':>12} "
              f"{'step ms*':>8} {'vs ' + baseline + '*':>8}")
    target = next((r["target"] for r in runs if r.get("target")), None)
    title = "What the control did: how closely each run held the entropy target"
    if target and target[0] is not None and target[-1] is not None:
        title += f" ({target[0]:.3f} -> {target[-1]:.3f} nats)"
    lines = [title + ":", header, "-" * len(header)]
    for r in runs:
        # without the baseline among the runs (e.g. one method) there is nothing to compare with: a dash, not "nanx"
        ratio = f"{r['median_step_time'] / base_time:>7.2f}x" if base_time else f"{'–':>8}"
        lines.append(f"{r['method']:<22} {100 * r['tracking_error']:>8.1f}% {r['final_entropy']:>8.3f} "
                     f"{_answer_cells(r)} {r['final_reward']:>12.3f} {1000 * r['median_step_time']:>8.1f} {ratio}")
    untargeted = [r["method"] for r in runs if not _follows_target(r["method"])]
    notes = [TRACK_ERR_NOTE
             + (f" {', '.join(untargeted)} follow{'s' if len(untargeted) == 1 else ''} no target: "
                "scored against the same schedule." if untargeted else ""),
             ANSWERS_NOTE, FINAL_REWARD_NOTE, "* " + STEP_TIME_NOTE]
    return "\n".join(lines + [_fill(n, len(header)) for n in notes])


def _answer_cells(r: dict) -> str:
    """The row's ``answers`` and ``solv/unsolv`` cells (a dash where the run has no value, e.g. a cached run)."""
    final = r.get("final_answers") or {}

    def fmt(key):
        value = final.get(key)
        return "–" if value is None or not math.isfinite(value) else f"{value:.1f}"

    split = f"{fmt('distinct_answers_solved')}/{fmt('distinct_answers_unsolved')}"
    return f"{fmt('distinct_answers'):>8} {split:>11}"


def _follows_target(method: str) -> bool:
    cls = CONTROL_REGISTRY.get(method)
    return bool(cls is not None and cls.follows_target)


def format_heldout_table(results: list[dict], n_problems: int | None = None) -> str:
    """Held-out accuracy, one definition (:data:`HELDOUT_DEFINITION`, named once above the table): pass@k for k = 1,
    2, 4, ..., n of every run, and of the starting model (``method="base"``) where it was scored."""
    ks = sorted({k for r in results for k in r.get("pass_at_k", {})})
    if not ks:
        return ""
    header = f"{'method':<22} " + " ".join(f"{'pass@' + str(k):>8}" for k in ks)
    definition = HELDOUT_DEFINITION.format(n=ks[-1], problems=n_problems if n_problems is not None else "the")
    lines = [_fill(definition[0].upper() + definition[1:] + ":", len(header)), header, "-" * len(header)]
    for r in results:
        label = "starting model" if r["method"] == "base" else r["method"]
        lines.append(f"{label:<22} " + " ".join(f"{r.get('pass_at_k', {}).get(k, float('nan')):>8.3f}" for k in ks))
    return "\n".join(lines)


def trade_line(results: list[dict], baseline: str = "grpo", method: str | None = None) -> str:
    """One line on what the trade means: ``method`` (default: the recommended control if it ran, else the first
    other run) against ``baseline`` on final entropy, pass@1 and pass@n, and where the payoff page is. Empty
    without both runs' pass@k."""
    by = {r["method"]: r for r in results if r.get("pass_at_k")}
    if baseline not in by:
        return ""
    others = [m for m in by if m not in (baseline, "base")]
    method = method or (DEFAULT_METHOD if DEFAULT_METHOD in others else (others[0] if others else None))
    if method not in by:
        return ""
    b, m = by[baseline], by[method]
    n = max(set(b["pass_at_k"]) & set(m["pass_at_k"]))
    d1 = m["pass_at_k"][1] - b["pass_at_k"][1]
    dn = m["pass_at_k"][n] - b["pass_at_k"][n]
    gap = m["final_entropy"] - b["final_entropy"]
    shape = ("wider (more entropy)" if gap > 0.005 else "narrower (less entropy)" if gap < -0.005
             else "as wide (the same entropy)")
    if d1 <= 0 and dn <= 0:
        verdict = f"{shape}, not better: pass@1 {d1:+.3f}, pass@{n} {dn:+.3f}"
    elif d1 <= 0:
        verdict = f"{shape}: it traded pass@1 ({d1:+.3f}) for pass@{n} ({dn:+.3f}), not a better model"
    elif dn <= 0:
        verdict = f"{shape}: it traded pass@{n} ({dn:+.3f}) for pass@1 ({d1:+.3f})"
    else:
        verdict = f"{shape} and better on both: pass@1 {d1:+.3f}, pass@{n} {dn:+.3f}"
    return (f"What the trade means: against {baseline}, {method}'s model is {verdict} (one seed, at this scale). "
            f"When entropy control pays, and how to find out on your task: {PAYOFF_PAGE}.")


def format_table(results: list[dict], baseline: str = "grpo", n_problems: int | None = None) -> str:
    """The demo's report: first what the control did (:func:`format_control_table`), then the held-out accuracy
    (:func:`format_heldout_table`, ``n_problems`` held-out problems) and one line on what the trade means
    (:func:`trade_line`), each where the results hold what it needs."""
    parts = [format_control_table(results, baseline), format_heldout_table(results, n_problems),
             _fill(trade_line(results, baseline), 100)]
    return "\n\n".join(p for p in parts if p)


def starting_entropy(model, tokenizer, problems, seed: int = 0, max_new_tokens: int | None = None) -> float:
    """The starting model's token-mean entropy on ~256 sampled completions of the first 64 ``problems`` (the
    quantity ``entropy_control/measured`` reports during training): the demo's default target start."""
    problems = problems[:64]
    n = max(4, 256 // max(1, len(problems)))
    return testbed.completion_entropy(model, tokenizer, problems, n_samples=n, seed=seed,
                                      max_new_tokens=max_new_tokens)


def score_starting_model(model, tokenizer, settings: DemoSettings, test_problems, start_entropy: float) -> dict:
    """The starting model's row (``method="base"``): pass@k as the trained runs get it (:data:`HELDOUT_DEFINITION`:
    the same problems, samples and seed, so it is the learning curves' step 0)."""
    tb = settings.get_testbed()
    max_new = tb.grpo_config_kwargs().get("max_completion_length")
    pass_k = pass_at_k_curve(model, tokenizer, test_problems[: settings.pass_at_k_problems], n=settings.pass_at_k_n,
                             seed=settings.seed, reward=tb.reward, max_new_tokens=max_new)
    return {"method": "base", "description": "the starting model, not trained", "pass_at_k": pass_k,
            "final_entropy": start_entropy}


def run_demo(methods: list[str], settings: DemoSettings) -> list[dict]:
    """Run each method, print the table, write entropy_curves.png, metrics.jsonl and summary.json (and, where the
    testbed takes learning curves, heldout_curves.png; with ``include_base``, the starting model's row first)."""
    from .plots import plot_entropy_curves, plot_heldout_curves, plot_pass_at_k

    os.makedirs(settings.output_dir, exist_ok=True)
    tb = settings.get_testbed()
    model, tokenizer = tb.load(settings.progress)
    train_ds, _ = tb.datasets(settings.seed)
    test_problems = tb.heldout(settings.pass_at_k_problems, settings.seed)  # the held-out set (HELDOUT_DEFINITION)
    start = settings.target_start
    if start is None:
        start = starting_entropy(model, tokenizer, test_problems, settings.seed,
                                 max_new_tokens=tb.grpo_config_kwargs().get("max_completion_length"))
    start = round(float(start), 4)
    if not math.isfinite(start) or start <= 0:
        raise ValueError(f"target start entropy must be > 0, got {start}")
    print(f"Target: {settings.schedule} schedule from {start:.3f} to {start * settings.target_end_ratio:.3f} nats "
          f"(anneal ratio {settings.anneal_ratio}), {settings.total_steps} optimizer steps on the {tb.name} testbed, "
          f"steps_per_generation={settings.steps_per_generation} (off-policy).")
    base = score_starting_model(model, tokenizer, settings, test_problems, start) if settings.include_base else None
    results = []
    for name in methods:
        results.append(run_method(name, settings, start, train_ds, test_problems))
    with open(os.path.join(settings.output_dir, "metrics.jsonl"), "w") as f:
        for r in results:
            for i, step in enumerate(r["step"]):
                row = {"method": r["method"], "step": step, "entropy": r["measured"][i], "target": r["target"][i],
                       "reward": r["reward"][i]}
                if r["knob"]:
                    row[r["knob_name"]] = r["knob"][i]
                f.write(json.dumps(row) + "\n")
    summary = [{k: v for k, v in r.items() if not isinstance(v, list)} for r in ([base] if base else []) + results]
    with open(os.path.join(settings.output_dir, "summary.json"), "w") as f:
        json.dump({"target_start": start, "testbed": tb.name,
                   "settings": {k: v for k, v in settings.__dict__.items() if k != "recipe"},
                   # the pretraining recipe of a model built here (the tiny one); a pretrained testbed has none
                   "recipe": dict(tb.recipe.__dict__) if tb.recipe is not None else None,
                   "step_time_note": STEP_TIME_NOTE, "tracking_error_definition": TRACKING_ERROR_DEFINITION,
                   "final_reward_definition": FINAL_REWARD_DEFINITION,
                   "heldout_definition": HELDOUT_DEFINITION.format(n=settings.pass_at_k_n,
                                                                   problems=len(test_problems)),
                   "results": summary}, f, indent=2)
    png = plot_entropy_curves({r["method"]: r for r in results}, os.path.join(settings.output_dir,
                                                                                "entropy_curves.png"))
    shown = ([base] if base else []) + results
    pass_png = plot_pass_at_k({r["method"]: r["pass_at_k"] for r in shown},
                              os.path.join(settings.output_dir, "pass_at_k.png"))
    curves = {r["method"]: r["curve"] for r in results if r.get("curve")}
    if curves:
        curves_png = plot_heldout_curves(curves, os.path.join(settings.output_dir, "heldout_curves.png"))
        pass_png = f"{pass_png}, {curves_png}"
    print()
    print(format_table(shown, n_problems=len(test_problems)))
    print()
    print(wrote_line(settings, [r["method"] for r in results], [png, pass_png]))
    return results


def wrote_line(settings: DemoSettings, methods: list[str], pictures: list[str]) -> str:
    """The demo's closing line: every run's folder (its model card and pictures, and its model where
    ``settings.keeps_models``), then the comparison's pictures, metrics.jsonl and summary.json."""
    runs = os.path.join(settings.output_dir, "runs", "<method>") + os.sep
    kept = ("model, model card and pictures" if settings.keeps_models
            else "model card and pictures (no weights: --save_models keeps them)")
    return (f"Wrote {runs} (each run's {kept}: {', '.join(methods)}), {', '.join(pictures)}, "
            f"{os.path.join(settings.output_dir, 'metrics.jsonl')}, {os.path.join(settings.output_dir, 'summary.json')}")
