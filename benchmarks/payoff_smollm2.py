"""The payoff study on SmolLM2 (issue 50, studies 3 and 4): the tiny study's question on a real pretrained LLM.

The rules (task, seeds, horizon, stages, what counts as a gain, the futility stop) are written in ``docs/payoff.md``,
"Study 3" and "Study 4", before their runs; the two differ in the learning rate only (``STUDIES``). The methods and
the recommended recipe are the tiny study's (:mod:`benchmarks.payoff`). One (method, seed) at a time, each finished
run appended to the study's JSON-lines cache (a cached run is skipped):

    python -m benchmarks.payoff_smollm2 --study 4 run --methods base,grpo,bonus_wsd03 --seeds 0-4
    python -m benchmarks.payoff_smollm2 --study 4 report
    python -m benchmarks.payoff_smollm2 --study 4 figures

Every run trains ``smollm2_hard`` (SmolLM2-135M-Instruct, two-shot ``a+b`` with 10 <= a < 100 and b < 10) for the
same number of optimizer steps on the seed's prompts, off-policy (``steps_per_generation=4``), and records held-out
pass@1 and pass@16 every ``EVAL_EVERY`` steps, then pass@k (k = 1..32), greedy accuracy and the sampled entropy on the
held-out problems, split by problems with and without a carry into the tens.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time

from benchmarks._cache import PAYOFF_SMOLLM2, made_with_line
from benchmarks.payoff import (
    LABELS,
    METHODS,
    RECOMMENDED,
    _fmt,
    _load,
    final_evaluation as payoff_final_evaluation,
    paired,
    ringing,
    run_cached,
    _seeds,
    VARIANT,
    variant_lines,
    train_method,
)

TESTBED = "smollm2_hard"
STEPS = 60
EVAL_EVERY = 20
# study -> (learning rate, run cache). Study 3: issue 50's first SmolLM2 measurement's 5e-5 (stopped: every method
# wrecked the model there); study 4: the testbed's own 1e-5, the rate its tracking benchmarks ran at.
STUDIES = {"3": (5e-5, PAYOFF_SMOLLM2["3"]), "4": (1e-5, PAYOFF_SMOLLM2["4"])}
STUDY = "4"
N_FINAL_PROBLEMS, N_FINAL_SAMPLES = 64, 32
N_CURVE_PROBLEMS, N_CURVE_SAMPLES = 32, 16
BASE_SAMPLES = 64  # the starting model is scored with 64 samples, for the testbed's pass@64 criterion
HELDOUT_SEED = 0
PRIMARY = ["grpo", "dapo", "trl_hold", RECOMMENDED]
KS = [1, 2, 4, 8, 16, 32, 64]


def heldout_problems(tb) -> list[dict]:
    """The study's held-out problems: 64 of the testbed's 160, drawn once with ``HELDOUT_SEED``, in their order."""
    every = tb.heldout(10_000, 0)
    keep = sorted(random.Random(HELDOUT_SEED).sample(range(len(every)), N_FINAL_PROBLEMS))
    return [every[i] for i in keep]


def final_evaluation(model, tokenizer, problems, n: int, seed: int = 0) -> dict:
    """The tiny study's evaluation (:func:`benchmarks.payoff.final_evaluation`) with SmolLM2's reward and answers
    (the completion's first line), completions of at most 4 tokens and ``n`` samples per problem."""
    from trl_entropy.testbeds.addition import accuracy_reward, first_line

    return payoff_final_evaluation(model, tokenizer, problems, max_new_tokens=4, seed=seed, n=n,
                                   reward=accuracy_reward, answer_of=first_line)


def run_one(method: str, seed: int, steps: int = STEPS, workdir: str = "/tmp/payoff_smollm2",
            learning_rate: float = STUDIES[STUDY][0]) -> dict:
    """Train ``method`` with ``seed`` and return its record (``method="base"``: score the starting model)."""
    from trl_entropy.testbeds import get_testbed
    from trl_entropy.testbeds.addition import first_line

    tb = get_testbed(TESTBED)
    model, tokenizer = tb.load(False)
    heldout = heldout_problems(tb)
    t0 = time.perf_counter()
    record = {"method": method, "seed": seed, "steps": steps, "testbed": TESTBED, "learning_rate": learning_rate}
    if method != "base":
        model, fields = train_method(tb, method, seed, steps, EVAL_EVERY, heldout[:N_CURVE_PROBLEMS],
                                     N_CURVE_SAMPLES, workdir, overrides={"learning_rate": learning_rate},
                                     extract=first_line)
        record.update(fields)
    record["final"] = final_evaluation(model, tokenizer, heldout, BASE_SAMPLES if method == "base" else N_FINAL_SAMPLES)
    record["wall_s"] = time.perf_counter() - t0
    return record


def _pk(k, part="all"):
    return lambda r: r["final"][part]["pass_at_k"][k]


def report(records: list[dict]) -> str:
    """The table, the paired comparisons against plain GRPO, and the goal's verdict."""
    lines = ["| method | seeds | pass@1 | pass@16 | pass@32 | greedy | pass@16, carry | final H | distinct / 4 | "
             "track err | raw steps > ±30% off |", "|---|---|---|---|---|---|---|---|---|---|---|"]

    def ms(xs):
        if not xs:
            return "–"
        return f"{statistics.fmean(xs):.3f}" + (f" ± {statistics.stdev(xs):.3f}" if len(xs) > 1 else "")

    for m in ["base"] + list(METHODS):
        rs = [r for r in records if r["method"] == m]
        if not rs:
            continue
        f = [r["final"] for r in rs]
        distinct = [statistics.fmean(r["distinct_answers"][-3:]) for r in rs if r.get("distinct_answers")]
        cells = [ms([x["all"]["pass_at_k"][k] for x in f]) for k in ("1", "16", "32")]
        cells += [ms([x["all"]["greedy"] for x in f]), ms([x["carry"]["pass_at_k"]["16"] for x in f]),
                  ms([x["all"]["entropy"] for x in f]), f"{statistics.fmean(distinct):.2f}" if distinct else "–"]
        track = [r["tracking_error"] for r in rs if r.get("tracking_error") is not None]
        ring = [x for x in (ringing(r) for r in rs) if x is not None]
        cells += [f"{100 * statistics.fmean(track):.1f}%" if track else "–",
                  f"{100 * statistics.fmean(ring):.0f}%" if ring else "–"]
        lines.append(f"| {m} | {len(rs)} | " + " | ".join(cells) + " |")
    base = [r for r in records if r["method"] == "base"]
    if base:
        b = base[0]["final"]["all"]["pass_at_k"]
        lines += ["", f"Starting model ({BASE_SAMPLES} samples): pass@1 {b['1']:.3f}, pass@64 {b['64']:.3f} "
                  "(criteria: pass@1 <= 0.30, pass@64 >= 0.70)"]
    lines += ["", "Paired by seed, method minus plain GRPO (mean ± SE, seeds):", "",
              "| method | pass@1 | pass@16 | pass@32 | greedy |", "|---|---|---|---|---|"]
    for m in [x for x in METHODS if x != "grpo"]:
        cells = [_fmt(*paired(records, m, "grpo", key))
                 for key in (_pk("1"), _pk("16"), _pk("32"), lambda r: r["final"]["all"]["greedy"])]
        if cells[0] != "–":
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += ["", "Against DAPO's clip-higher, what most users run today (method minus `dapo`):", "",
              "| method | pass@1 | pass@16 | pass@32 | greedy |", "|---|---|---|---|---|"]
    for m in [x for x in METHODS if x not in ("grpo", "dapo")]:
        cells = [_fmt(*paired(records, m, "dapo", key))
                 for key in (_pk("1"), _pk("16"), _pk("32"), lambda r: r["final"]["all"]["greedy"])]
        if cells[0] != "–":
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
    d16, se16, n = paired(records, RECOMMENDED, "grpo", _pk("16"))
    d1, se1, _ = paired(records, RECOMMENDED, "grpo", _pk("1"))
    lines += ["", f"Goal, `{RECOMMENDED}` against `grpo` on {n} paired seeds:",
              f"- pass@16 {_fmt(d16, se16, n)}: " + ("met (> 2 SE)" if n > 1 and d16 > 2 * se16 else "not met"),
              f"- pass@1 {_fmt(d1, se1, n)}: " + ("met (above -1 SE)" if n > 1 and d1 > -se1 else "not met")]
    grpo = [r for r in records if r["method"] == "grpo"]
    if grpo:
        # the last third: the curve's pass@1 at 2/3 of the horizon against the final model's on the curve problems
        from trl_entropy.metrics import pass_at_k

        def last_third(r):
            c = dict(zip(r["curve"]["step"], r["curve"]["pass@1"]))
            end = statistics.fmean(pass_at_k(r["final"]["samples"], x, 1)
                                   for x in r["final"]["per_problem_correct"][:N_CURVE_PROBLEMS])
            return end - c[2 * STEPS // 3]
        rise = statistics.fmean(last_third(r) for r in grpo)
        lines.append(f"- plain GRPO's mean held-out pass@1 rose {rise:+.3f} over the last third "
                     + ("(plateaued: the stretch applies)" if rise <= 0.03 else "(still rising)"))
    lines += variant_lines(records, stretch=bool(grpo) and rise <= 0.03)
    return "\n".join(lines)


def figures(records: list[dict], out_dir: str, study: str = STUDY) -> list[str]:
    """pass@k of the final models, and the held-out learning curves, for the starting model and the primary methods."""
    from trl_entropy._plotting import k_axis, new_figure, save_figure
    from trl_entropy.metrics import pass_at_k

    by = {}
    for r in records:
        by.setdefault(r["method"], []).append(r)
    present = [m for m in ["base"] + PRIMARY + [VARIANT] if m in by]
    styles = {m: dict(color=f"C{i}") for i, m in enumerate(present)}
    styles.get("base", {}).update(color="k", ls="--")
    fig, axes = new_figure(1, 3, figsize=(16, 4))
    fig.suptitle(f"SmolLM2-135M on smollm2_hard, learning rate {STUDIES[study][0]:g} (payoff study {study})")
    for ax, part, title in ((axes[0, 0], "all", "all held-out problems"), (axes[0, 1], "carry", "with a carry")):
        every_k = set()
        for m in present:
            ks = sorted(int(k) for k in by[m][0]["final"][part]["pass_at_k"])
            ys = [statistics.fmean(r["final"][part]["pass_at_k"][str(k)] for r in by[m]) for k in ks]
            ax.plot(ks, ys, marker="o", ms=3, label=f"{LABELS[m]} ({len(by[m])})", **styles[m])
            every_k.update(ks)
        k_axis(ax, sorted(every_k))
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k")
        ax.set_title(f"Final pass@k, {title}")
    axes[0, 0].legend(fontsize=8)
    ax = axes[0, 2]
    for m in [x for x in present if x != "base"]:
        steps = [0] + by[m][0]["curve"]["step"]

        def at(r, i):
            if i == 0:  # the starting model on the curve's problems
                base = by["base"][0]["final"] if "base" in by else None
                return (statistics.fmean(pass_at_k(base["samples"], c, 1) for c in base["per_problem_correct"]
                                         [:N_CURVE_PROBLEMS]) if base else math.nan)
            return r["curve"]["pass@1"][i - 1]
        ys = [statistics.fmean(at(r, i) for r in by[m]) for i in range(len(steps))]
        ax.plot(steps, ys, marker="o", ms=3, label=LABELS[m], **styles[m])
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("held-out pass@1")
    ax.set_title("Held-out pass@1 during training (seed mean)")
    ax.legend(fontsize=8)
    return [save_figure(fig, os.path.join(out_dir, f"payoff_smollm2_study{study}.png"))]


def paired_figure(records: list[dict], method: str, out_path: str, against: str = "grpo") -> str | None:
    """One study's picture of ``method`` against ``against``, paired by seed: each seed's pass@1 and pass@16
    differences (the goal's corner shaded), and both methods' mean final pass@k."""
    from trl_entropy._plotting import k_axis, new_figure, save_figure

    by = {(r["method"], r["seed"]): r for r in records}
    seeds = sorted(s for (m, s) in by if m == method and (against, s) in by)
    if len(seeds) < 2:
        return None
    d1 = [_pk("1")(by[(method, s)]) - _pk("1")(by[(against, s)]) for s in seeds]
    d16 = [_pk("16")(by[(method, s)]) - _pk("16")(by[(against, s)]) for s in seeds]
    (m1, se1, _), (m16, se16, _) = (paired(records, method, against, _pk(k)) for k in ("1", "16"))
    fig, axes = new_figure(1, 2, figsize=(11, 4.2))
    fig.suptitle(f"{LABELS[method]} minus {LABELS[against]}, seeds {seeds[0]}-{seeds[-1]} ({len(seeds)} pairs)")
    ax = axes[0, 0]
    ax.axhline(0, color="k", lw=0.6)
    ax.axvline(0, color="k", lw=0.6)
    lo, hi = min(d1 + [-se1]) - 0.03, max(d1 + [0.0]) + 0.03
    ax.axhspan(2 * se16, max(d16 + [2 * se16]) + 0.03, xmin=(-se1 - lo) / (hi - lo), xmax=1, color="C2", alpha=0.12,
               label="where the mean must lie: pass@16 > 2 SE, pass@1 > -1 SE")
    ax.scatter(d1, d16, s=18, color="C0", label="one seed")
    ax.errorbar([m1], [m16], xerr=[se1], yerr=[se16], color="C3", marker="s", ms=6, capsize=4, label="mean ± SE")
    ax.set_xlim(lo, hi)
    ax.set(xlabel="pass@1 difference", ylabel="pass@16 difference", title="Each seed, paired")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for i, m in enumerate((against, method)):
        runs = [by[(m, s)] for s in seeds]
        ks = sorted(int(k) for k in runs[0]["final"]["all"]["pass_at_k"])
        ys = [statistics.fmean(r["final"]["all"]["pass_at_k"][str(k)] for r in runs) for k in ks]
        ax.plot(ks, ys, marker="o", ms=3, color=f"C{i}", label=LABELS[m])
    k_axis(ax, ks)
    ax.set(xlabel="k", ylabel="final held-out pass@k (seed mean)", title="Final pass@k")
    ax.legend(fontsize=7)
    return save_figure(fig, out_path)


def _cmd_report(a):
    records = [r for r in _load(a.results) if a.seeds is None or r["method"] == "base" or r["seed"] in _seeds(a.seeds)]
    print(made_with_line(records))
    print(report(records))


def _cmd_paired_figure(a):
    if a.method not in METHODS or a.method == "grpo":
        sys.exit(f"unknown method {a.method!r}; choose from {', '.join(m for m in METHODS if m != 'grpo')}")
    path = paired_figure([r for r in _load(a.results) if r["seed"] in _seeds(a.seeds)], a.method, a.out)
    if path is None:
        sys.exit(f"fewer than 2 of seeds {a.seeds} have both {a.method} and grpo cached in {a.results}: no picture")
    print("wrote", path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--study", choices=sorted(STUDIES), default=STUDY, help="3: lr 5e-5 (stopped), 4: lr 1e-5")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--methods", default="base,grpo")
    r.add_argument("--seeds", default="0")
    r.add_argument("--steps", type=int, default=STEPS)
    r.add_argument("--by_seed", action="store_true", help="every method of a seed, then the next seed")
    r.set_defaults(func=lambda a: run_cached(a.methods, a.seeds, a.results,
                                             lambda m, s: run_one(m, s, a.steps, learning_rate=a.learning_rate),
                                             base_seeds=[0], by_seed=a.by_seed))
    rp = sub.add_parser("report")
    rp.add_argument("--seeds", default=None, help="only these seeds (and the starting model), e.g. 200-215")
    rp.set_defaults(func=_cmd_report)
    f = sub.add_parser("figures")
    f.add_argument("--out_dir", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                     "docs", "img"))
    f.set_defaults(func=lambda a: [print("wrote", x) for x in figures(_load(a.results), a.out_dir, a.study)])
    pf = sub.add_parser("paired_figure", help="one method against plain GRPO, paired by seed, on a study's seeds")
    pf.add_argument("--method", required=True)
    pf.add_argument("--seeds", required=True)
    pf.add_argument("--out", required=True, help="the PNG to write")
    pf.set_defaults(func=_cmd_paired_figure)
    args = p.parse_args(argv)
    args.learning_rate, args.results = STUDIES[args.study]
    args.func(args)


if __name__ == "__main__":
    main()
