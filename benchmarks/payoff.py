"""The payoff study: what a held or annealed entropy buys over plain GRPO on held-out problems (issue 50).

The rule (task, seeds, horizon, the recommended recipe, what counts as a gain) is written in ``docs/payoff.md``
before the runs. This script runs one (method, seed) at a time, appends each finished run to a JSON-lines cache
(a run already there is skipped, so an interrupted study resumes), and summarises the cache:

    python -m benchmarks.payoff run --methods grpo,dapo --seeds 0-9
    python -m benchmarks.payoff summary

Every run trains the ``tiny_headroom`` testbed (:mod:`trl_entropy.testbeds`) for the same number of optimizer steps
on the same prompts (the seed's), off-policy (``steps_per_generation=4``), and records:

* held-out pass@1 and pass@16 every ``--eval_every`` steps (:class:`trl_entropy.evaluation.PassAtKCallback`, 64
  problems, 16 samples each), so the learning curves show saturation and an anneal's effect;
* at the end, held-out pass@k for k = 1..64 (64 samples on each of 128 problems, the package's unbiased estimator),
  greedy accuracy, and both split by problems with and without a carry (where the taught error sits);
* the entropy of sampled completions on carry and no-carry problems: is the held entropy where exploration pays?
* per generation batch, the number of distinct answers in a group of completions of one prompt.

The base model is scored the same way (method ``base``, no training).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

from benchmarks._cache import MADE_WITH, PAYOFF_SMOLLM2, PAYOFF_TINY, PAYOFF_TINY_LEVELS, append_row, made_with_line
from benchmarks._cache import provenance, read_rows

RESULTS = PAYOFF_TINY
TESTBED = "tiny_headroom"
STEPS = 1000
EVAL_EVERY = 100
N_CURVE_PROBLEMS, N_CURVE_SAMPLES = 64, 16
N_FINAL_PROBLEMS, N_FINAL_SAMPLES = 128, 64
HELDOUT_SEED = 0  # one held-out set for every run, so runs pair problem by problem

_HOLD = dict(entropy_schedule="constant", entropy_schedule_start="initial")
_ANNEAL = dict(entropy_schedule_start="initial", entropy_schedule_end="0.5*initial")

# name -> (uses GRPOEntropyTrainer, config overrides). Chosen before the runs (docs/payoff.md).
METHODS: dict[str, tuple[bool, dict]] = {
    "grpo": (False, {}),
    "dapo": (False, {"epsilon_high": 0.28}),  # DAPO's static clip-higher
    "trl_hold": (True, {"entropy_control": "trl_adaptive", **_HOLD}),
    "bonus_hold": (True, {"entropy_control": "entropy_bonus", **_HOLD}),
    "bonus_wsd03": (True, {"entropy_control": "entropy_bonus", "entropy_schedule": "wsd",
                           "entropy_schedule_anneal_ratio": 0.3, **_ANNEAL}),  # the recommended recipe
    "bonus_wsd01": (True, {"entropy_control": "entropy_bonus", "entropy_schedule": "wsd",
                           "entropy_schedule_anneal_ratio": 0.1, **_ANNEAL}),
    "bonus_cosine": (True, {"entropy_control": "entropy_bonus", "entropy_schedule": "cosine", **_ANNEAL}),
    "entrocraft_linear_assist": (True, {"entropy_control": "entrocraft", "entropy_schedule": "linear",
                                        "entropy_bonus_assist": True, **_ANNEAL}),
    "kl_cov": (True, {"entropy_control": "kl_cov", "kl_cov_ratio": 0.1}),  # the ratio scaled as the demo does
    # Added before their runs, for the papers' claims (docs/payoff.md, "Addendum"): a second constant level, and
    # Entrocraft's three target shapes.
    "bonus_hold_half": (True, {"entropy_control": "entropy_bonus", "entropy_schedule": "constant",
                               "entropy_schedule_start": "0.5*initial"}),
    "entrocraft_hold_assist": (True, {"entropy_control": "entrocraft", "entropy_bonus_assist": True, **_HOLD}),
    "entrocraft_cosine_assist": (True, {"entropy_control": "entrocraft", "entropy_schedule": "cosine",
                                        "entropy_bonus_assist": True, **_ANNEAL}),
    # Study 2 (docs/payoff.md), registered after an interim readout of study 1: the same WSD, annealed to a tenth.
    "bonus_wsd03_deep": (True, {"entropy_control": "entropy_bonus", "entropy_schedule": "wsd",
                                "entropy_schedule_anneal_ratio": 0.3, "entropy_schedule_start": "initial",
                                "entropy_schedule_end": "0.1*initial"}),
    # Study 5 (docs/payoff.md), registered before its runs: the recipe, acting only on unsolved groups
    # (benchmarks/unsolved_bonus.py, trained by its own trainer: VARIANT_TRAINERS).
    "bonus_wsd03_unsolved": (True, {"entropy_control": "entropy_bonus", "entropy_schedule": "wsd",
                                    "entropy_schedule_anneal_ratio": 0.3, **_ANNEAL}),
    # Study 6 (docs/payoff.md), registered after study 5 stopped on SmolLM2, before its runs: study 5's variant as a
    # bonus only, never a penalty (its lower bound 0).
    "bonus_wsd03_unsolved_pos": (True, {"entropy_control": "entropy_bonus", "entropy_schedule": "wsd",
                                        "entropy_schedule_anneal_ratio": 0.3, "entropy_bonus_min": 0.0, **_ANNEAL}),
    # Study 7 (docs/payoff.md), registered after study 6, before its runs: study 6's variant acting on the unsolved
    # groups' entropy over the whole generation batch (the package's entropy_measurement="generation_batch").
    "bonus_wsd03_unsolved_pos_gb": (True, {"entropy_control": "entropy_bonus", "entropy_schedule": "wsd",
                                           "entropy_schedule_anneal_ratio": 0.3, "entropy_bonus_min": 0.0,
                                           "entropy_measurement": "generation_batch", **_ANNEAL}),
    # Study 9 (docs/payoff.md), registered before its runs: a third constant level, for Wang et al.'s optimum.
    "bonus_hold_quarter": (True, {"entropy_control": "entropy_bonus", "entropy_schedule": "constant",
                                  "entropy_schedule_start": "0.25*initial"}),
}
# Methods trained by a research subclass of GRPOEntropyTrainer (module path, class name).
VARIANT_TRAINERS = {"bonus_wsd03_unsolved": ("benchmarks.unsolved_bonus", "UnsolvedBonusTrainer"),
                    "bonus_wsd03_unsolved_pos": ("benchmarks.unsolved_bonus", "UnsolvedBonusTrainer"),
                    "bonus_wsd03_unsolved_pos_gb": ("benchmarks.unsolved_bonus", "UnsolvedBonusTrainer")}
RECOMMENDED = "bonus_wsd03"
# The trainer's answer metrics (docs/metrics.md, "Answer diversity") that train_method(log_answers=True) keeps.
LOGGED_ANSWER_METRICS = ("distinct_answers", "distinct_answers_solved", "distinct_answers_unsolved", "answer_entropy",
                         "answer_entropy_solved", "answer_entropy_unsolved", "solved_groups")


def _has_carry(prompt: str) -> bool:
    """Whether the query ``a+b=`` (the prompt's last line: a few-shot prefix comes before it) carries into the tens."""
    a, b = (int(x) for x in prompt.rsplit("\n", 1)[-1].rstrip("=").split("+"))
    return a % 10 + b % 10 >= 10


class _AnswerDiversity:
    """A TRL reward function that scores like ``reward`` and records, per call (one generation batch), the mean
    number of distinct answers among the ``group`` completions of each prompt (``extract``: a completion's answer;
    the tiny testbed's by default): :func:`trl_entropy.answer_diversity.mean_distinct_answers`, the definition of the
    trainer's ``entropy_control/distinct_answers``."""

    def __init__(self, reward, group: int, extract=None):
        self.reward, self.group, self.distinct, self.extract = reward, group, [], extract
        self.__name__ = getattr(reward, "__name__", "reward")

    def __call__(self, completions, answer, **kwargs):
        from trl_entropy.answer_diversity import mean_distinct_answers
        from trl_entropy.demo.testbed import extract_answer

        if "trainer_state" in kwargs:  # GRPOTrainer's rollouts; PassAtKCallback's scoring passes no trainer state
            got = [(self.extract or extract_answer)(c) for c in completions]
            self.distinct.append(mean_distinct_answers(got, self.group))
        return self.reward(completions, answer, **kwargs)


def training_distinct(record) -> list[float]:
    """The distinct-answers series of the training rollouts alone. The first runs' series also hold one entry per
    learning-curve evaluation (the callback scored through the same function): 25 generation batches of 4 steps,
    then one evaluation, ten times over; those entries are dropped here."""
    d = record.get("distinct_answers") or []
    per_eval = EVAL_EVERY // 4
    if len(d) == record["steps"] // 4 + record["steps"] // EVAL_EVERY:
        d = [x for i, x in enumerate(d) if (i + 1) % (per_eval + 1) != 0]
    return d


def final_evaluation(model, tokenizer, problems, max_new_tokens: int, seed: int = 0, n: int = N_FINAL_SAMPLES,
                     reward=None, answer_of=None) -> dict:
    """pass@k (k = 1..64, those <= ``n``), greedy accuracy, sampled entropy and distinct answers, overall and split
    by carry / no carry, from ``n`` samples per problem at temperature 1. ``reward``: the testbed's TRL reward (the
    tiny testbed's by default); ``answer_of``: a completion's answer, for the distinct answers (the text itself by
    default)."""
    from trl_entropy.answer_diversity import distinct_answers
    from trl_entropy.demo import testbed as tbm
    from trl_entropy.metrics import pass_at_k

    reward = reward or tbm.accuracy_reward
    answer_of = answer_of or (lambda text: text)
    texts, ents = tbm.sample_completions(model, tokenizer, problems, n_samples=n, temperature=1.0, seed=seed + 7,
                                         max_new_tokens=max_new_tokens, batch_size=512)
    correct = reward(texts, [p["answer"] for p in problems for _ in range(n)])
    counts = [int(sum(correct[i * n : (i + 1) * n])) for i in range(len(problems))]
    greedy_texts, _ = tbm.sample_completions(model, tokenizer, problems, n_samples=1, temperature=0.0,
                                             max_new_tokens=max_new_tokens, batch_size=512)
    greedy = reward(greedy_texts, [p["answer"] for p in problems])
    carry = [_has_carry(p["prompt"]) for p in problems]
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= n]
    out = {}
    for part, keep in (("all", [True] * len(problems)), ("carry", carry), ("no_carry", [not c for c in carry])):
        idx = [i for i, k in enumerate(keep) if k]
        if not idx:
            continue
        out[part] = {
            "n_problems": len(idx),
            "pass_at_k": {str(k): statistics.fmean(pass_at_k(n, counts[i], k) for i in idx) for k in ks},
            "greedy": statistics.fmean(greedy[i] for i in idx),
            "entropy": statistics.fmean(x for i in idx for j in range(n) for x in ents[i * n + j]),
            "distinct_answers": statistics.fmean(distinct_answers([answer_of(t) for t in texts[i * n : (i + 1) * n]])
                                                 for i in idx),
        }
    out["per_problem_correct"] = counts
    out["samples"] = n
    return out


def train_method(tb, method: str, seed: int, steps: int, eval_every: int, curve_problems: list, curve_samples: int,
                 workdir: str, overrides=None, extract=None, log_answers: bool = False):
    """Train ``method`` with ``seed`` on the testbed ``tb`` (its GRPO settings, off-policy, ``overrides`` on top,
    then the method's own), taking held-out pass@1 and pass@16 on ``curve_problems`` every ``eval_every`` steps.
    Returns ``(trained model, record fields)``: entropy, target, reward, curve, distinct answers, tracking error.
    ``log_answers``: train with GRPOEntropyTrainer even without a control (plain GRPO's training is the same), with
    the testbed's answer extractor, and add ``logged``: the trainer's answer metrics from its log history (issue 64's
    check, ``benchmarks/diversity_check.py``)."""
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.evaluation import PassAtKCallback

    model, tokenizer = tb.load(False)
    ours, method_overrides = METHODS[method]
    train_ds, _ = tb.datasets(seed)
    kwargs = tb.grpo_config_kwargs(output_dir=os.path.join(workdir, f"{method}-{seed}"), max_steps=steps,
                                   seed=seed, steps_per_generation=4, disable_tqdm=True, **(overrides or {}))
    kwargs.update(method_overrides)
    if log_answers:
        ours = True
        kwargs["answer_extractor"] = tb.answer_extractor
    args = (GRPOEntropyConfig if ours else GRPOConfig)(**kwargs)
    reward = _AnswerDiversity(tb.reward, kwargs["num_generations"], extract)
    trainer_class = GRPOEntropyTrainer if ours else GRPOTrainer
    if method in VARIANT_TRAINERS:
        import importlib

        module, name = VARIANT_TRAINERS[method]
        trainer_class = getattr(importlib.import_module(module), name)
    trainer = trainer_class(model=model, reward_funcs=reward, args=args, train_dataset=train_ds,
                            processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(PassAtKCallback(trainer, curve_problems, n=curve_samples, ks=(1, 16),
                                         max_new_tokens=kwargs["max_completion_length"], every_n_steps=eval_every,
                                         at_train_end=False, seed=1234))
    trainer.train()
    hist = trainer.state.log_history
    rows = [h for h in hist if "loss" in h]
    evals = [h for h in hist if "eval/pass@1" in h]
    record = dict(
        entropy=[h.get("entropy_control/measured", h.get("entropy")) for h in rows],
        target=[h.get("entropy_control/target") for h in rows],
        reward=[h.get("reward") for h in rows],
        knob=[h.get("entropy_control/entropy_coef", h.get("entropy_control/epsilon_high")) for h in rows],
        curve={"step": [h["step"] for h in evals], "pass@1": [h["eval/pass@1"] for h in evals],
               "pass@16": [h["eval/pass@16"] for h in evals]},
        distinct_answers=reward.distinct,
    )
    if log_answers:  # per generation batch: the optimizer step it was logged at, and each answer metric there
        logged = [h for h in hist if "entropy_control/distinct_answers" in h]
        record["logged"] = {"step": [h["step"] for h in logged],
                            **{k: [h.get("entropy_control/" + k) for h in logged] for k in LOGGED_ANSWER_METRICS}}
    if hasattr(trainer, "unsolved_fraction"):  # study 5's variant: what it measured is the unsolved groups' entropy
        # None on a step without a reading of its own (it repeated the last one: held_reading)
        record["entropy"] = [None if h.get("entropy_control/held_reading") else h.get("entropy_control/measured")
                             for h in rows]
        record["entropy_all"] = [h.get("entropy") for h in rows]
        record["unsolved_fraction"] = trainer.unsolved_fraction
        record["held_steps"] = trainer.held_readings
        record["initial_entropy"] = trainer.initial_entropy  # the unsolved groups' starting entropy
        record["negative_coef_steps"] = sum(1 for h in rows if (h.get("entropy_control/entropy_coef") or 0) < 0)
        if any("entropy_control/measured_generation_batch" in h for h in rows):  # study 7: what the control acted on
            record["entropy_gb"] = [None if h.get("entropy_control/held_reading") else
                                    h.get("entropy_control/measured_generation_batch") for h in rows]
    if any(t is not None for t in record["target"]):
        from trl_entropy.metrics import tracking_error

        record["tracking_error"] = tracking_error(record["entropy"], record["target"])
        if "entropy_gb" in record:
            record["tracking_error_gb"] = tracking_error(record["entropy_gb"], record["target"])
    return trainer.model, record


def run_one(method: str, seed: int, steps: int = STEPS, eval_every: int = EVAL_EVERY, workdir: str = "/tmp/payoff"):
    """Train ``method`` with ``seed`` and return its record (``method="base"``: evaluate the starting model)."""
    from trl_entropy.testbeds import get_testbed

    tb = get_testbed(TESTBED)
    model, tokenizer = tb.load(False)
    heldout = tb.heldout(N_FINAL_PROBLEMS, HELDOUT_SEED)
    max_new = tb.grpo_config_kwargs()["max_completion_length"]
    t0 = time.perf_counter()
    record = {"method": method, "seed": seed, "steps": steps, "testbed": TESTBED}
    if method != "base":
        model, fields = train_method(tb, method, seed, steps, eval_every, heldout[:N_CURVE_PROBLEMS],
                                     N_CURVE_SAMPLES, workdir)
        record.update(fields)
    record["final"] = final_evaluation(model, tokenizer, heldout, max_new)
    record["wall_s"] = time.perf_counter() - t0
    return record


def _load(path=RESULTS) -> list[dict]:
    return read_rows(path)


def _seeds(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def run_cached(methods: str, seeds: str, results: str, run, base_seeds=None, by_seed: bool = False) -> None:
    """Run each (method, seed) that the JSON-lines cache ``results`` lacks with ``run(method, seed)``, appending each
    record as it ends (an interrupted study resumes). ``base_seeds``: the seeds of method ``base`` (default:
    ``seeds``). Method by method, or with ``by_seed`` seed by seed (every method of a seed, then the next seed).

    Each new record keeps the code that made it (``made_with``: the package's version, the git commit, the method's
    settings). A cached run is keyed by (method, seed) alone, so that a study reads the runs it registered; one made
    by another version of the package or with other settings is served as recorded, and said so."""
    done = {(r["method"], r["seed"]): r for r in _load(results)}
    names = methods.split(",")
    for method in names:
        if method != "base" and method not in METHODS:
            sys.exit(f"unknown method {method!r}; choose from base, {', '.join(METHODS)}")
    todo = [(m, s) for m in names for s in (base_seeds if m == "base" and base_seeds is not None else _seeds(seeds))]
    if by_seed:
        todo.sort(key=lambda ms: ms[1])  # stable: the methods keep their order within a seed
    now = provenance()
    stale = []
    for method, seed in todo:
        if (method, seed) in done:
            made = done[(method, seed)].get(MADE_WITH) or {}
            if made.get("trl_entropy") != now["trl_entropy"] or made.get("settings") != _settings(method):
                stale.append(f"{method} seed {seed} ({made.get('trl_entropy', 'version not recorded')})")
            continue
        record = run(method, seed)
        record[MADE_WITH] = provenance(_settings(method))
        append_row(results, record)
        fin = record["final"]["all"]
        ks = sorted(fin["pass_at_k"], key=int)
        cells = " ".join(f"pass@{k} {fin['pass_at_k'][k]:.3f}" for k in ("1", "16", ks[-1]))
        print(f"{method} seed {seed}: {cells}"
              + f" greedy {fin['greedy']:.3f} H {fin['entropy']:.3f} ({record['wall_s']:.0f} s)", flush=True)
    if stale:
        print(f"served from {results} as recorded, made by another version of trl-entropy than this one "
              f"({now['trl_entropy']}) or with other settings: {', '.join(stale)}. A new --results file runs them "
              "again.", flush=True)


def _settings(method: str) -> dict:
    """The settings a method's run records (``made_with``): its config overrides (``METHODS``)."""
    return {"method": method, "overrides": METHODS[method][1] if method in METHODS else None}


def cmd_run(args):
    run_cached(args.methods, args.seeds, args.results, lambda m, s: run_one(m, s, args.steps, args.eval_every),
               by_seed=args.by_seed)


def paired(records: list[dict], a: str, b: str, key) -> tuple[float, float, int]:
    """Mean and standard error of key(a) - key(b) over the seeds both have."""
    by = {(r["method"], r["seed"]): r for r in records}
    seeds = sorted({s for (m, s) in by if m == a} & {s for (m, s) in by if m == b})
    d = [key(by[(a, s)]) - key(by[(b, s)]) for s in seeds]
    if not d:
        return math.nan, math.nan, 0
    se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else math.nan
    return statistics.fmean(d), se, len(d)


def summary_table(records: list[dict]) -> str:
    methods = ["base"] + list(METHODS)
    lines = ["| method | seeds | pass@1 | pass@16 | pass@64 | greedy | pass@16, carry | final H | track err |",
             "|---|---|---|---|---|---|---|---|---|"]

    def ms(xs):
        if not xs:
            return "–"
        return f"{statistics.fmean(xs):.3f}" + (f" ± {statistics.stdev(xs):.3f}" if len(xs) > 1 else "")

    for m in methods:
        rs = [r for r in records if r["method"] == m]
        if not rs:
            continue
        f = [r["final"] for r in rs]
        te = [r["tracking_error"] for r in rs if r.get("tracking_error") is not None]
        lines.append(
            f"| {m} | {len(rs)} | {ms([x['all']['pass_at_k']['1'] for x in f])} | "
            f"{ms([x['all']['pass_at_k']['16'] for x in f])} | {ms([x['all']['pass_at_k']['64'] for x in f])} | "
            f"{ms([x['all']['greedy'] for x in f])} | {ms([x['carry']['pass_at_k']['16'] for x in f])} | "
            f"{ms([x['all']['entropy'] for x in f])} | "
            + (f"{100 * statistics.fmean(te):.1f}%" if te else "–") + " |")
    return "\n".join(lines)


def cmd_summary(args):
    records = _load(args.results)
    print(made_with_line(records))
    print(summary_table(records))
    print()
    for other in [m for m in METHODS if m != "grpo"]:
        for k in ("1", "16"):
            d, se, n = paired(records, other, "grpo", lambda r, k=k: r["final"]["all"]["pass_at_k"][k])
            if n:
                print(f"{other} - grpo, pass@{k}: {d:+.3f} ± {se:.3f} (paired SE, {n} seeds)")


PRIMARY = ["grpo", "dapo", "trl_hold", RECOMMENDED]
LABELS = {"base": "starting model", "grpo": "plain GRPO", "dapo": "DAPO clip-higher (0.28)",
          "trl_hold": "TRL's rule, hold", "bonus_hold": "bonus, hold", "bonus_hold_half": "bonus, hold at half",
          "bonus_hold_quarter": "bonus, hold at a quarter",
          "bonus_wsd03": "bonus, WSD 0.3 (recommended)", "bonus_wsd01": "bonus, WSD 0.1",
          "bonus_cosine": "bonus, cosine", "entrocraft_linear_assist": "Entrocraft linear + assist",
          "entrocraft_hold_assist": "Entrocraft fixed + assist", "entrocraft_cosine_assist": "Entrocraft cosine + assist",
          "kl_cov": "KL-Cov", "bonus_wsd03_deep": "bonus, WSD 0.3 to a tenth",
          "bonus_wsd03_unsolved": "bonus, WSD 0.3, unsolved groups only",
          "bonus_wsd03_unsolved_pos": "bonus (>= 0), WSD 0.3, unsolved groups only",
          "bonus_wsd03_unsolved_pos_gb": "bonus (>= 0), WSD 0.3, unsolved groups, generation-batch reading"}
VARIANT = "bonus_wsd03_unsolved"  # study 5
VARIANTS = {VARIANT: "Study 5", "bonus_wsd03_unsolved_pos": "Study 6", "bonus_wsd03_unsolved_pos_gb": "Study 7"}


def variant_lines(records: list[dict], stretch: bool = False) -> list[str]:
    """The verdicts of studies 5 and 6 (docs/payoff.md), one block per variant run."""
    return [line for variant in VARIANTS for line in _variant_lines(records, variant, stretch)]


def _variant_lines(records: list[dict], variant: str, stretch: bool) -> list[str]:
    """One variant against plain GRPO by its rule, against the recipe, how much of each generation batch its gate
    let in, and its coefficient. ``stretch``: plain GRPO plateaued, so the stretch applies."""
    runs = [r for r in records if r["method"] == variant]
    if not runs:
        return []
    d16, se16, n = paired(records, variant, "grpo", _final("16"))
    d1, se1, _ = paired(records, variant, "grpo", _final("1"))
    lines = ["", f"{VARIANTS[variant]}, `{variant}` against `grpo` on {n} paired seeds:",
             f"- pass@16 {_fmt(d16, se16, n)}: " + ("met (> 2 SE)" if n > 1 and d16 > 2 * se16 else "not met"),
             f"- pass@1 {_fmt(d1, se1, n)}: " + ("met (above -1 SE)" if n > 1 and d1 > -se1 else "not met")]
    if stretch:
        lines.append("- stretch, pass@1 by >= 2 SE: " + ("met" if n > 1 and d1 > 2 * se1 else "not met"))
    lines.append(f"- against `{RECOMMENDED}`: pass@1 {_fmt(*paired(records, variant, RECOMMENDED, _final('1')))}, "
                 f"pass@16 {_fmt(*paired(records, variant, RECOMMENDED, _final('16')))}")
    before = {"bonus_wsd03_unsolved_pos": VARIANT, "bonus_wsd03_unsolved_pos_gb": "bonus_wsd03_unsolved_pos"}.get(variant)
    if before and any(r["method"] == before for r in records):  # each study against the one it changes
        lines.append(f"- against `{before}`: pass@1 {_fmt(*paired(records, variant, before, _final('1')))}, "
                     f"pass@16 {_fmt(*paired(records, variant, before, _final('16')))}")
    for key, what in (("tracking_error", "the step's own reading"), ("tracking_error_gb", "what the control acted on, "
                                                                      "the generation batch's estimate")):
        errors = [r[key] for r in runs if r.get(key) is not None and math.isfinite(r[key])]
        if errors:
            lines.append(f"- tracking error on {what}: {100 * min(errors):.1f}-{100 * max(errors):.1f}% "
                         f"(mean {100 * statistics.fmean(errors):.1f}%)")
    knobs = [x for r in runs for x in r["knob"] if x is not None]
    if knobs:
        lines.append(f"- coefficient from {min(knobs):.3f} to {max(knobs):.3f} over the runs")
    share = [r["unsolved_fraction"] for r in runs if r.get("unsolved_fraction")]
    if share:
        third = max(1, min(len(s) for s in share) // 3)
        lines.append(f"- completions in unsolved groups: {statistics.fmean(statistics.fmean(s[:third]) for s in share):.2f}"
                     f" of a generation batch over the first third, "
                     f"{statistics.fmean(statistics.fmean(s[-third:]) for s in share):.2f} over the last; steps "
                     f"without a reading of their own {statistics.fmean(r.get('held_steps', 0) for r in runs):.0f}, "
                     f"with a negative coefficient (a penalty) "
                     f"{statistics.fmean(r.get('negative_coef_steps', 0) for r in runs):.0f}, of "
                     f"{runs[0]['steps']} (means)")
    return lines


def _mean_curve(runs, get):
    """Element-wise mean over runs of the lists ``get(run)`` (cut to the shortest)."""
    series = [get(r) for r in runs]
    n = min(len(x) for x in series)
    return [statistics.fmean(x[i] for x in series) for i in range(n)]


def cui_fit(record, fraction: float = 1 / 3) -> dict:
    """Cui et al.'s R = -a exp(H) + b fitted on (entropy, training reward) of the first ``fraction`` of the steps;
    its prediction of the final reward (at the run's final entropy) and of the ceiling (H = 0) against the run's
    mean reward over its last 10% of steps."""
    from trl_entropy.metrics import fit_entropy_performance

    pairs = [(h, r) for h, r in zip(record["entropy"], record["reward"]) if h is not None and r is not None]
    n_fit = max(3, int(fraction * len(pairs)))
    fit = fit_entropy_performance([h for h, _ in pairs[:n_fit]], [r for _, r in pairs[:n_fit]])
    tail = pairs[-max(1, len(pairs) // 10):]
    h_end = statistics.fmean(h for h, _ in tail)
    return {"a": fit.a, "b": fit.b, "ceiling": fit.ceiling, "predicted_final": fit.b - fit.a * math.exp(h_end),
            "final": statistics.fmean(r for _, r in tail), "final_entropy": h_end}


def figures(records: list[dict], out_dir: str) -> list[str]:
    """The study's pictures: pass@k, held-out learning curves, entropy and answer diversity, the papers' claims."""
    from trl_entropy._plotting import k_axis, new_figure, save_figure

    by = {}
    for r in records:
        by.setdefault(r["method"], []).append(r)
    present = [m for m in ["base"] + list(METHODS) if m in by]
    styles = {m: dict(color=f"C{i}") for i, m in enumerate(present)}
    styles.get("base", {}).update(color="k", ls="--")
    written = []

    def passk(m, part="all"):
        ks = sorted(int(k) for k in by[m][0]["final"][part]["pass_at_k"])
        return ks, [statistics.fmean(r["final"][part]["pass_at_k"][str(k)] for r in by[m]) for k in ks]

    # 1. pass@k of the final models
    fig, axes = new_figure(1, 2, figsize=(11, 4))
    for ax, part, title in ((axes[0, 0], "all", "all held-out problems"),
                            (axes[0, 1], "carry", "held-out problems with a carry")):
        for m in [x for x in present if x in ["base"] + PRIMARY]:
            ks, ys = passk(m, part)
            ax.plot(ks, ys, marker="o", ms=3, label=f"{LABELS[m]} ({len(by[m])})", **styles[m])
        k_axis(ax, ks)
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k")
        ax.set_title(f"Final pass@k, {title}")
    axes[0, 0].legend(fontsize=8)
    written.append(save_figure(fig, os.path.join(out_dir, "payoff_pass_at_k.png")))

    # 2. held-out learning curves
    fig, axes = new_figure(1, 2, figsize=(11, 4))
    base = by.get("base", [None])[0]
    for ax, key in ((axes[0, 0], "pass@1"), (axes[0, 1], "pass@16")):
        for m in [x for x in present if x in PRIMARY]:
            steps = by[m][0]["curve"]["step"]
            ys = _mean_curve(by[m], lambda r: r["curve"][key])
            if base is not None:  # step 0: the starting model on the curve's problems and samples
                pk = base["final"]["per_problem_correct"][:N_CURVE_PROBLEMS]
                from trl_entropy.metrics import pass_at_k

                k = int(key.split("@")[1])
                steps, ys = [0] + steps, [statistics.fmean(pass_at_k(N_FINAL_SAMPLES, c, k) for c in pk)] + ys
            ax.plot(steps, ys, marker="o", ms=3, label=LABELS[m], **styles[m])
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(f"held-out {key}")
        ax.set_title(f"Held-out {key} during training (mean over seeds)")
    axes[0, 0].legend(fontsize=8)
    written.append(save_figure(fig, os.path.join(out_dir, "payoff_curves.png")))

    # 3. entropy, and where it sits
    fig, axes = new_figure(1, 2, figsize=(11, 4))
    for m in [x for x in present if x in PRIMARY]:
        ys = _mean_curve(by[m], lambda r: [h if h is not None else math.nan for h in r["entropy"]])
        axes[0, 0].plot(range(1, len(ys) + 1), ys, lw=1, label=LABELS[m], **styles[m])
        d = _mean_curve(by[m], training_distinct)
        axes[0, 1].plot([4 * (i + 1) for i in range(len(d))], d, lw=1, label=LABELS[m], **styles[m])
    axes[0, 0].set_xlabel("optimizer step")
    axes[0, 0].set_ylabel("entropy (nats / token)")
    axes[0, 0].set_title("Training entropy (mean over seeds)")
    axes[0, 1].set_xlabel("optimizer step")
    axes[0, 1].set_ylabel("distinct answers in a group of 8")
    axes[0, 1].set_title("Answer diversity per prompt (training rollouts)")
    axes[0, 0].legend(fontsize=8)
    written.append(save_figure(fig, os.path.join(out_dir, "payoff_entropy.png")))

    # 4. the papers' claims, one panel each
    fig, axes = new_figure(2, 3, figsize=(15, 8))
    panels = axes.flatten()

    def curve_panel(ax, methods, title):
        for m in [x for x in methods if x in by]:
            ks, ys = passk(m)
            ax.plot(ks, ys, marker="o", ms=3, label=f"{LABELS[m]} ({len(by[m])})", **styles[m])
            k_axis(ax, ks)
        ax.set_xlabel("k")
        ax.set_ylabel("final pass@k")
        ax.set_title(title)
        ax.legend(fontsize=7)

    curve_panel(panels[0], ["grpo", "bonus_hold", "bonus_wsd03", "bonus_wsd01"],
                "Wang et al.: does annealing trade pass@k?")
    for m in [x for x in ("bonus_hold", "bonus_wsd03", "bonus_wsd01", "bonus_cosine") if x in by]:
        ys = _mean_curve(by[m], lambda r: r["curve"]["pass@1"])
        panels[1].plot(by[m][0]["curve"]["step"][: len(ys)], ys, marker="o", ms=3, label=LABELS[m], **styles[m])
    panels[1].axvline(0.7 * STEPS, color="grey", lw=0.8, ls=":")
    panels[1].set_xlabel("optimizer step")
    panels[1].set_ylabel("held-out pass@1")
    panels[1].set_title("Wang et al.: the anneal's rise (WSD 0.3 from the dotted line)")
    panels[1].legend(fontsize=7)
    curve_panel(panels[2], ["bonus_hold", "bonus_hold_half"], "Wang et al.: two constant levels")
    for m in [x for x in ("entrocraft_linear_assist", "entrocraft_cosine_assist", "entrocraft_hold_assist") if x in by]:
        err = _mean_curve(by[m], lambda r: [(h - t) / t if h is not None and t else math.nan
                                            for h, t in zip(r["entropy"], r["target"])])
        err = [statistics.fmean(err[max(0, i - 9) : i + 1]) for i in range(len(err))]  # MA10
        panels[3].plot(range(1, len(err) + 1), err, lw=1.0, label=LABELS[m], **styles[m])
    panels[3].axhline(0, color="k", lw=0.6)
    panels[3].set_xlabel("optimizer step")
    panels[3].set_ylabel("(H - target) / target, MA10")
    panels[3].set_title("Li et al.: Entrocraft's target shapes")
    panels[3].legend(fontsize=7)
    if "grpo" in by:
        fits = [cui_fit(r) for r in by["grpo"]]
        panels[4].scatter([f["final"] for f in fits], [f["predicted_final"] for f in fits], color="C1", s=18,
                          label="prediction at the final entropy")
        panels[4].scatter([f["final"] for f in fits], [f["ceiling"] for f in fits], color="C3", s=18, marker="x",
                          label="fitted ceiling b - a")
        lo = min(min(f["final"], f["predicted_final"], f["ceiling"]) for f in fits) - 0.02
        hi = max(max(f["final"], f["predicted_final"], f["ceiling"]) for f in fits) + 0.02
        panels[4].plot([lo, hi], [lo, hi], color="k", lw=0.8)
        panels[4].set_xlabel("final training reward (last 10% of steps)")
        panels[4].set_ylabel("predicted from the first third")
        panels[4].set_title("Cui et al.: R = -a exp(H) + b, plain GRPO")
        panels[4].legend(fontsize=7)
    panels[5].axis("off")
    written.append(save_figure(fig, os.path.join(out_dir, "payoff_claims.png")))
    return written


def _fmt(d, se, n):
    return f"{d:+.3f} ± {se:.3f} ({n})" if n > 1 else (f"{d:+.3f} (1)" if n else "–")


def _final(k, part="all"):
    return lambda r: r["final"][part]["pass_at_k"][k]


def ringing(record, band: float = 0.3) -> float | None:
    """Share of the steps after the first 20% whose raw entropy is more than ``band`` away from the target (relative)."""
    pairs = [(h, t) for h, t in zip(record.get("entropy", []), record.get("target", [])) if h is not None and t]
    if not pairs:
        return None
    pairs = pairs[int(0.2 * len(pairs)):]
    return sum(abs(h - t) / t > band for h, t in pairs) / len(pairs)


def claims(records: list[dict]) -> list[tuple[str, str, str]]:
    """(claim, measured, verdict) for the papers' claims, judged by the rules in docs/payoff.md."""
    by = {}
    for r in records:
        by.setdefault(r["method"], {})[r["seed"]] = r
    out = []

    def mean_of(m, key):
        rs = list(by.get(m, {}).values())
        return statistics.fmean(key(r) for r in rs) if rs else math.nan

    # 1. the pass@k trade-off
    if all(m in by for m in ("bonus_hold", "bonus_wsd03", "bonus_wsd01")):
        h1, h64 = mean_of("bonus_hold", _final("1")), mean_of("bonus_hold", _final("64"))
        a = {m: (mean_of(m, _final("1")), mean_of(m, _final("64"))) for m in ("bonus_wsd03", "bonus_wsd01")}
        ok = all(p1 > h1 and p64 < h64 for p1, p64 in a.values())
        text = (f"pass@1 / pass@64: hold {h1:.3f} / {h64:.3f}; "
                + "; ".join(f"{m} {p1:.3f} / {p64:.3f}" for m, (p1, p64) in a.items()))
        out.append(("Wang et al.: annealing trades large-k pass@k for small-k", text,
                    "holds" if ok else "does not hold"))
    # 2. the anneal's jump
    if "bonus_hold" in by and "bonus_wsd03" in by:
        def rise(r):
            c = dict(zip(r["curve"]["step"], r["curve"]["pass@1"]))
            return c[STEPS] - c[int(0.7 * STEPS)]
        d, se, n = paired(records, "bonus_wsd03", "bonus_hold", rise)
        out.append(("Wang et al.: the anneal gives a fast rise in pass@1",
                    f"pass@1 rise over steps 700-1000, anneal minus hold: {_fmt(d, se, n)}",
                    "holds" if n > 1 and d > 2 * se else "does not hold"))
    # 3. the constant level
    if "bonus_hold" in by and "bonus_hold_half" in by:
        d1, se1, n = paired(records, "bonus_hold_half", "bonus_hold", _final("1"))
        d16, se16, _ = paired(records, "bonus_hold_half", "bonus_hold", _final("16"))
        differ = n > 1 and (abs(d1) > 2 * se1 or abs(d16) > 2 * se16)
        out.append(("Wang et al.: an optimal constant level",
                    f"half minus initial level: pass@1 {_fmt(d1, se1, n)}, pass@16 {_fmt(d16, se16, n)}",
                    ("the levels differ; an optimum between them is not testable with two"
                     if differ else "not testable with two levels (they do not differ by > 2 SE)")))
    # 4. Entrocraft's shapes
    shapes = {"linear": "entrocraft_linear_assist", "cosine": "entrocraft_cosine_assist",
              "fixed": "entrocraft_hold_assist"}
    if all(m in by for m in shapes.values()):
        p16 = {k: mean_of(m, _final("16")) for k, m in shapes.items()}
        err = {k: mean_of(m, lambda r: r.get("tracking_error", math.nan)) for k, m in shapes.items()}
        ok = p16["linear"] == max(p16.values()) and err["fixed"] == max(err.values())
        out.append(("Li et al.: linear decay best, a fixed target least stable",
                    "pass@16 " + ", ".join(f"{k} {v:.3f}" for k, v in p16.items()) + "; tracking error "
                    + ", ".join(f"{k} {100 * v:.1f}%" for k, v in err.items()),
                    "holds" if ok else "does not hold"))
    # 5. Cui's fit
    grpo = list(by.get("grpo", {}).values())
    if grpo:
        fits = [cui_fit(r) for r in grpo]
        close = sum(abs(f["predicted_final"] - f["final"]) <= 0.05 for f in fits)
        errs = [f["predicted_final"] - f["final"] for f in fits]
        out.append(("Cui et al.: R = -a e^H + b from the first third predicts the final reward",
                    f"prediction minus final reward {statistics.fmean(errs):+.3f} (mean), within 0.05 on "
                    f"{close} of {len(fits)} seeds; fitted ceiling b - a {statistics.fmean(f['ceiling'] for f in fits):.3f}"
                    f" against final {statistics.fmean(f['final'] for f in fits):.3f}",
                    "holds" if close >= 0.8 * len(fits) else "does not hold"))
    return out


def report(records: list[dict]) -> str:
    """The results in markdown: the table, the paired comparisons, the goal's verdict, where the entropy sits,
    ringing, and the papers' claims."""
    lines = summary_table(records).splitlines()
    lines += ["", "Paired by seed, method minus plain GRPO (mean ± SE, seeds):", "",
              "| method | pass@1 | pass@16 | pass@64 | greedy |", "|---|---|---|---|---|"]
    for m in [x for x in METHODS if x != "grpo"]:
        cells = [_fmt(*paired(records, m, "grpo", key)) for key in
                 (_final("1"), _final("16"), _final("64"), lambda r: r["final"]["all"]["greedy"])]
        if cells[0] != "–":
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
    d16, se16, n = paired(records, RECOMMENDED, "grpo", _final("16"))
    d1, se1, _ = paired(records, RECOMMENDED, "grpo", _final("1"))
    grpo_curves = [r for r in records if r["method"] == "grpo"]
    lines += ["", f"Goal, `{RECOMMENDED}` against `grpo` on {n} paired seeds:",
              f"- pass@16 {_fmt(d16, se16, n)}: " + ("met (> 2 SE)" if n > 1 and d16 > 2 * se16 else "not met"),
              f"- pass@1 {_fmt(d1, se1, n)}: " + ("met (above -1 SE)" if n > 1 and d1 > -se1 else "not met")]
    if grpo_curves:
        c = _mean_curve(grpo_curves, lambda r: r["curve"]["pass@1"])
        steps = grpo_curves[0]["curve"]["step"]
        rise = c[steps.index(STEPS)] - c[steps.index(int(0.7 * STEPS))]
        lines.append(f"- plain GRPO's mean held-out pass@1 rose {rise:+.3f} from step 700 to 1,000 "
                     + ("(plateaued: the stretch applies)" if rise <= 0.03 else "(still rising)"))
    lines += ["", "Where the entropy sits (final models, 64 samples on each held-out problem):", "",
              "| method | entropy, carry problems | entropy, no-carry | distinct answers / 64, carry | "
              "distinct in a group of 8, last 100 steps | raw steps > ±30% off target |",
              "|---|---|---|---|---|---|"]
    for m in ["base"] + list(METHODS):
        rs = [r for r in records if r["method"] == m]
        if not rs:
            continue
        ring = [x for x in (ringing(r) for r in rs) if x is not None]
        distinct = [statistics.fmean(training_distinct(r)[-25:]) for r in rs if r.get("distinct_answers")]
        lines.append(f"| {m} | {statistics.fmean(r['final']['carry']['entropy'] for r in rs):.3f} | "
                     f"{statistics.fmean(r['final']['no_carry']['entropy'] for r in rs):.3f} | "
                     f"{statistics.fmean(r['final']['carry']['distinct_answers'] for r in rs):.1f} | "
                     + (f"{statistics.fmean(distinct):.2f}" if distinct else "–") + " | "
                     + (f"{100 * statistics.fmean(ring):.0f}%" if ring else "–") + " |")
    lines += variant_lines(records, stretch=bool(grpo_curves) and rise <= 0.03)
    verdicts = claims(records)
    if verdicts:
        lines += ["", "| claim | measured | verdict |", "|---|---|---|"]
        lines += [f"| {c} | {m} | {v} |" for c, m, v in verdicts]
    return "\n".join(lines)


def variant_figure(testbeds: list[tuple[str, list[dict]]], out_dir: str) -> str | None:
    """Study 5's picture, one row per testbed (name, records): final pass@k, held-out pass@1 during training, and the
    training entropy, of the starting model, plain GRPO, the recipe and the variant (seed means). The variant's
    entropy is drawn twice: over all completions, and over the unsolved groups' (what its controller holds)."""
    from trl_entropy._plotting import k_axis, new_figure, save_figure

    rows = [(name, recs) for name, recs in testbeds if any(r["method"] in VARIANTS for r in recs)]
    if not rows:
        return None
    shown = ["base", "grpo", RECOMMENDED, *VARIANTS]
    colors = {"base": "k", "grpo": "C0", RECOMMENDED: "C3", VARIANT: "C2", "bonus_wsd03_unsolved_pos": "C4",
              "bonus_wsd03_unsolved_pos_gb": "C5"}
    short = {"base": "starting model", "grpo": "plain GRPO", RECOMMENDED: "the recipe (bonus, WSD 0.3)",
             **{m: f"{VARIANTS[m].lower()}: {LABELS[m].replace('bonus', 'the recipe', 1)}" for m in VARIANTS}}
    below = dict(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    fig, axes = new_figure(len(rows), 3, figsize=(16, 6.2 * len(rows)))
    fig.suptitle("Studies 5-7: the recipe acting only on groups with no correct answer")
    for row, (name, recs) in enumerate(rows):
        by = {m: [r for r in recs if r["method"] == m] for m in shown}
        ax = axes[row, 0]
        for m in [x for x in shown if by[x]]:
            ks = sorted(int(k) for k in by[m][0]["final"]["all"]["pass_at_k"])
            ys = [statistics.fmean(r["final"]["all"]["pass_at_k"][str(k)] for r in by[m]) for k in ks]
            ax.plot(ks, ys, marker="o", ms=3, color=colors[m], ls="--" if m == "base" else "-",
                    label=short[m] if m == "base" else f"{short[m]} ({len(by[m])} seeds)")
            k_axis(ax, ks)
        ax.set(xlabel="k", ylabel="pass@k", title=f"{name}: final pass@k, held-out")
        ax.legend(**below)
        ax = axes[row, 1]
        for m in [x for x in shown[1:] if by[x]]:
            steps = by[m][0]["curve"]["step"]
            ys = [statistics.fmean(r["curve"]["pass@1"][i] for r in by[m]) for i in range(len(steps))]
            ax.plot(steps, ys, marker="o", ms=3, color=colors[m], label=short[m])
        ax.set(xlabel="optimizer step", ylabel="held-out pass@1", title=f"{name}: held-out pass@1 during training")
        ax.legend(**below)
        ax = axes[row, 2]

        def mean_series(runs, key):
            n = min(len(r[key]) for r in runs)
            out = []
            for i in range(n):
                vals = [r[key][i] for r in runs if r[key][i] is not None]
                out.append(statistics.fmean(vals) if vals else math.nan)
            return out
        for m in [x for x in shown[1:] if by[x]]:
            key = "entropy_all" if m in VARIANTS else "entropy"
            ax.plot(mean_series(by[m], key), color=colors[m], lw=1, label=f"{short[m].split(':')[0]}, all completions")
        for m in [x for x in VARIANTS if by[x]]:
            ax.plot(mean_series(by[m], "entropy"), color=colors[m], lw=1, ls=":",
                    label=f"{short[m].split(':')[0]}, unsolved groups (what it holds)")
        if by[VARIANT]:
            ax.plot(mean_series(by[VARIANT], "target"), color="0.5", lw=1, ls="--", label="target")
        ax.set(xlabel="optimizer step", ylabel="entropy (nats)", title=f"{name}: training entropy")
        ax.legend(**dict(below, ncol=2))
    return save_figure(fig, os.path.join(out_dir, "payoff_study5.png"))


# Study 9 (docs/payoff.md): three constant levels of the bonus, as fractions of the starting entropy. Its new runs
# have their own cache, so study 1's tables keep the seeds they were registered with.
LEVELS = {"bonus_hold_quarter": 0.25, "bonus_hold_half": 0.5, "bonus_hold": 1.0}
LEVELS_RESULTS = PAYOFF_TINY_LEVELS
LEVEL_KS = ("1", "16", "64")


def level_records(seeds: list[int], study1: str = RESULTS, study9: str = LEVELS_RESULTS) -> list[dict]:
    """Study 9's runs on ``seeds``: the three levels and plain GRPO (a reference), from study 1's cache and then its
    own. Only full runs of the testbed count (a shorter smoke run in a cache is left out); a (method, seed) found
    twice keeps its first run, with a warning."""
    by = {}
    for r in _load(study1) + _load(study9):
        if r["method"] not in (*LEVELS, "grpo") or r["seed"] not in seeds:
            continue
        if r.get("steps") != STEPS or r.get("testbed") != TESTBED:
            continue
        if (r["method"], r["seed"]) in by:
            print(f"warning: {r['method']} seed {r['seed']} is cached twice; the first run is kept", file=sys.stderr)
            continue
        by[(r["method"], r["seed"])] = r
    return list(by.values())


def _level_seeds(records: list[dict]) -> tuple[list[int], bool]:
    """The seeds every level has, and whether the levels have the same seeds (a study still running does not)."""
    sets = [{r["seed"] for r in records if r["method"] == m} for m in LEVELS]
    common = set.intersection(*sets)
    return sorted(common), all(x == common for x in sets)


def level_verdicts(records: list[dict]) -> dict:
    """Study 9's rule (docs/payoff.md), on the seeds all three levels have: the best level at each k, claim A (the
    middle level beats both others by > 2 paired SE at some k), claim B (the best level for pass@64 differs from
    the best for pass@1, each beating the other at its own k by > 2 paired SE; higher: holds, lower: does not hold),
    and the futility check (seeds 0-2: the middle level's mean is below another's at every k)."""
    seeds, complete = _level_seeds(records)
    records = [r for r in records if r["seed"] in seeds]

    def mean(m, k, among=None):
        xs = [_final(k)(r) for r in records if r["method"] == m and (among is None or r["seed"] in among)]
        return statistics.fmean(xs) if xs else math.nan

    out = {"seeds": seeds, "complete": complete}
    if not seeds:
        return out
    mid = "bonus_hold_half"
    out["best"] = {k: max(LEVELS, key=lambda m: (mean(m, k), -LEVELS[m])) for k in LEVEL_KS}  # a tie: the lower
    out["means"] = {m: {k: mean(m, k) for k in LEVEL_KS} for m in (*LEVELS, "grpo")}
    out["tracking_error"] = {m: statistics.fmean(r["tracking_error"] for r in records if r["method"] == m)
                             for m in LEVELS}
    interior = {}
    for k in LEVEL_KS:
        hi, lo = paired(records, mid, "bonus_hold", _final(k)), paired(records, mid, "bonus_hold_quarter", _final(k))
        interior[k] = (hi, lo, all(n > 1 and d > 2 * se for d, se, n in (hi, lo)))
    out["interior"] = interior
    out["claim_a"] = "holds" if any(v[2] for v in interior.values()) else "not shown between 0.25x and 1x"
    b1, b64 = out["best"]["1"], out["best"]["64"]
    out["claim_b"] = "not shown"
    if b1 != b64:
        at64, at1 = paired(records, b64, b1, _final("64")), paired(records, b1, b64, _final("1"))
        out["claim_b_diff"] = (at64, at1)
        if all(n > 1 and d > 2 * se for d, se, n in (at64, at1)):
            out["claim_b"] = "holds" if LEVELS[b64] > LEVELS[b1] else "does not hold"
    first = [s for s in seeds if s in (0, 1, 2)]
    out["futile"] = len(first) == 3 and all(
        mean(mid, k, first) < max(mean("bonus_hold", k, first), mean("bonus_hold_quarter", k, first))
        for k in LEVEL_KS)
    return out


def levels_report(records: list[dict]) -> str:
    """Study 9 in markdown: mean final pass@k per level (plain GRPO for reference), the middle level against each
    neighbour (paired), and the two claims' verdicts."""
    v = level_verdicts(records)
    if not v["seeds"]:
        return "No seed has all three levels yet."
    seeds = v["seeds"]
    lines = [f"Seeds {', '.join(map(str, seeds))}"
             + ("" if v["complete"] else " (the seeds all three levels have; INCOMPLETE: more are cached for some)")
             + ". Mean final pass@k:", "",
             "| level | runs | " + " | ".join(f"pass@{k}" for k in LEVEL_KS) + " | tracking error |",
             "|---|---|" + "---|" * len(LEVEL_KS) + "---|"]
    for m, means in v["means"].items():
        n = sum(r["method"] == m and r["seed"] in seeds for r in records)
        if not n:
            continue
        name = f"{LEVELS[m]:g}× (`{m}`)" if m in LEVELS else "plain GRPO (reference)"
        te = f"{100 * v['tracking_error'][m]:.1f}%" if m in LEVELS else "–"
        lines.append(f"| {name} | {n} | " + " | ".join(f"{means[k]:.3f}" for k in LEVEL_KS) + f" | {te} |")
    lines += ["", "Best level: " + ", ".join(f"pass@{k} {LEVELS[m]:g}×" for k, m in v["best"].items()), "",
              "| k | 0.5× minus 1× | 0.5× minus 0.25× | 0.5× best by > 2 SE |", "|---|---|---|---|"]
    for k, (hi, lo, ok) in v["interior"].items():
        lines.append(f"| {k} | {_fmt(*hi)} | {_fmt(*lo)} | {'yes' if ok else 'no'} |")
    lines += ["", f"- Claim A, an optimal constant level exists: **{v['claim_a']}**",
              f"- Claim B, the optimal level grows with k: **{v['claim_b']}**"]
    if "claim_b_diff" in v:
        at64, at1 = v["claim_b_diff"]
        lines[-1] += (f" (pass@64's best minus pass@1's, on pass@64: {_fmt(*at64)}; pass@1's best minus pass@64's, on"
                      f" pass@1: {_fmt(*at1)})")
    if set(seeds) >= {0, 1, 2}:
        lines.append(f"- Futility check, seeds 0-2: {'stop' if v['futile'] else 'go on'}")
    return "\n".join(lines)


def levels_figure(records: list[dict], out_dir: str) -> str | None:
    """Study 9's picture: final pass@k against the held level (plain GRPO dashed), and each level's training entropy
    against its target."""
    from trl_entropy._plotting import new_figure, save_figure

    present = [m for m in LEVELS if any(r["method"] == m for r in records)]
    if not present:
        return None
    seeds = _level_seeds(records)[0] if len(present) == len(LEVELS) else sorted({r["seed"] for r in records})
    records = [r for r in records if r["seed"] in seeds]
    fig, axes = new_figure(1, 2, figsize=(11, 4))
    ax = axes[0, 0]
    grpo = [r for r in records if r["method"] == "grpo"]
    for i, k in enumerate(("1", "4", "16", "64")):
        xs, ys, es = [], [], []
        for m in present:
            vals = [_final(k)(r) for r in records if r["method"] == m]
            xs.append(LEVELS[m])
            ys.append(statistics.fmean(vals))
            es.append(statistics.stdev(vals) / math.sqrt(len(vals)) if len(vals) > 1 else 0.0)
        ax.errorbar(xs, ys, yerr=es, marker="o", ms=4, capsize=3, color=f"C{i}", label=f"pass@{k}")
        if grpo:
            ax.axhline(statistics.fmean(_final(k)(r) for r in grpo), color=f"C{i}", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xticks([LEVELS[m] for m in present], [f"{LEVELS[m]:g}×" for m in present])
    ax.set(xlabel="held entropy, × the starting entropy", ylabel="final held-out pass@k (mean ± SE)",
           title="Constant levels (dashed: plain GRPO)")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for i, m in enumerate(present + (["grpo"] if grpo else [])):
        runs = [r for r in records if r["method"] == m]
        ys = _mean_curve(runs, lambda r: r["entropy"])
        ax.plot(range(1, len(ys) + 1), ys, lw=1, color=f"C{i + 4}", label=LABELS[m])
        if m in LEVELS:
            target = _mean_curve(runs, lambda r: [math.nan if t is None else t for t in r["target"]])
            ax.plot(range(1, len(target) + 1), target, lw=0.8, ls=":",
                    color=f"C{i + 4}")
    ax.set(xlabel="optimizer step", ylabel="training entropy (nats)", title="Entropy (dotted: targets)")
    ax.legend(fontsize=7)
    return save_figure(fig, os.path.join(out_dir, "payoff_levels.png"))


def cmd_levels(args):
    records = level_records(_seeds(args.seeds))
    print(made_with_line(records))
    print(levels_report(records))
    if args.out_dir:
        path = levels_figure(records, args.out_dir)
        if path:
            print("wrote", path)


def cmd_report(args):
    records = _load(args.results)
    print(made_with_line(records))
    print(report(records))


def cmd_figures(args):
    records = _load(args.results)
    for path in figures(records, args.out_dir):
        print("wrote", path)
    study5 = variant_figure([("tiny_headroom", records), ("smollm2_hard", _load(PAYOFF_SMOLLM2["4"]))], args.out_dir)
    if study5:
        print("wrote", study5)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--methods", default="base,grpo")
    r.add_argument("--seeds", default="0")
    r.add_argument("--steps", type=int, default=STEPS)
    r.add_argument("--eval_every", type=int, default=EVAL_EVERY)
    r.add_argument("--results", default=RESULTS)
    r.add_argument("--by_seed", action="store_true", help="every method of a seed, then the next seed")
    r.set_defaults(func=cmd_run)
    s = sub.add_parser("summary")
    s.add_argument("--results", default=RESULTS)
    s.set_defaults(func=cmd_summary)
    rp = sub.add_parser("report")
    rp.add_argument("--results", default=RESULTS)
    rp.set_defaults(func=cmd_report)
    lv = sub.add_parser("levels", help="study 9: three constant levels (docs/payoff.md)")
    lv.add_argument("--seeds", default="0-4")
    lv.add_argument("--out_dir", default="", help="also write payoff_levels.png here")
    lv.set_defaults(func=cmd_levels)
    f = sub.add_parser("figures")
    f.add_argument("--results", default=RESULTS)
    f.add_argument("--out_dir", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                     "docs", "img"))
    f.set_defaults(func=cmd_figures)
    args = p.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
