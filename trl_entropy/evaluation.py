"""Evaluation callbacks: pass@k on held-out problems, the entropy -> performance fit, and pictures.

All three are ordinary ``transformers.TrainerCallback`` objects, usable with ``GRPOEntropyTrainer`` and with a plain
``trl.GRPOTrainer``:

* :class:`PassAtKCallback` samples ``n`` completions per held-out problem, scores them with the trainer's first
  reward function and logs ``eval/mean@n`` and ``eval/pass@k`` (unbiased estimator, :func:`~trl_entropy.metrics.pass_at_k`);
* :class:`EntropyPerformanceFitCallback` refits R = -a * exp(H) + b (Cui et al.) as evaluations arrive and logs
  ``entropy_control/predicted_ceiling`` (= b - a, the score predicted at zero entropy);
* :class:`EntropyPlotCallback` writes PNGs (entropy vs target, the knob, reward, pass@k) into ``output_dir`` at every
  save and at the end of training. ``GRPOEntropyTrainer`` adds it by default (``entropy_plots=True``).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence

import torch
from transformers import TrainerCallback

from .losses.covariance import wide_float_dtype
from .metrics import fit_entropy_performance, logged_tracking, pass_at_k

__all__ = [
    "PassAtKCallback",
    "EntropyPerformanceFitCallback",
    "EntropyPlotCallback",
    "training_figures",
    "write_training_plots",
]


def _log_aside(trainer, values: dict[str, float]) -> None:
    """``trainer.log(values)`` without disturbing the training step's own logging.

    The model is put in eval mode so TRL's ``log`` neither flushes nor averages the training metrics into this
    entry, and the Trainer's ``should_log`` flag (which ``on_log`` resets) is restored, so the step's loss is still
    logged when this runs from ``on_step_end``.
    """
    model = trainer.model
    was_training = model.training
    should_log = trainer.control.should_log
    model.eval()
    try:
        trainer.log(dict(values))
    finally:
        model.train(was_training)
        trainer.control.should_log = should_log


def _rows(problems) -> list[dict]:
    if hasattr(problems, "to_list"):  # datasets.Dataset
        problems = problems.to_list()
    rows = [dict(p) for p in problems]
    if not rows or any("prompt" not in p for p in rows):
        raise ValueError("problems must be a non-empty list (or Dataset) of rows with a 'prompt' column.")
    return rows


class PassAtKCallback(TrainerCallback):
    """Logs ``eval/mean@n`` and ``eval/pass@k`` of the trainer's model on held-out problems.

    Args:
        trainer: the trainer whose model, processing class and first reward function are used.
        problems: rows (list of dicts or a ``datasets.Dataset``) with a ``prompt`` column; every other column is
            passed to the reward function, as GRPOTrainer does.
        n: completions sampled per problem. ks: the k of pass@k (each <= n).
        temperature: sampling temperature. threshold: a completion is correct when its reward is >= threshold.
        max_new_tokens: defaults to ``args.max_completion_length``.
        every_n_steps: also evaluate every this many optimizer steps (None: only on ``trainer.evaluate()`` and, with
            ``at_train_end``, once at the end of training).
        seed: sampling seed; the training RNG state is saved and restored around the evaluation, so evaluating does
            not change the training run.
        at_train_begin: also evaluate the starting model, logged at step 0, so that the learning curves and the
            model card's pass@k picture show this model next to the one it started from.

    With several processes each rank samples a strided share of the problems and the sums are reduced, so every
    rank logs the same numbers. Results of the last evaluation are kept in ``self.last``.
    """

    def __init__(self, trainer, problems, n: int = 16, ks: Sequence[int] = (1, 2, 4, 8, 16), temperature: float = 1.0,
                 threshold: float = 1.0, max_new_tokens: int | None = None, every_n_steps: int | None = None,
                 at_train_end: bool = True, seed: int = 0, batch_size: int = 64, at_train_begin: bool = False):
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}.")
        ks = sorted({int(k) for k in ks})
        if not ks or ks[0] < 1 or ks[-1] > n:
            raise ValueError(f"ks must be integers in [1, n={n}], got {list(ks)}.")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}.")
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(f"every_n_steps must be >= 1 or None, got {every_n_steps}.")
        self.trainer = trainer
        self.problems = _rows(problems)
        self.n, self.ks, self.temperature, self.threshold = n, ks, temperature, threshold
        self.max_new_tokens, self.every_n_steps, self.at_train_end = max_new_tokens, every_n_steps, at_train_end
        self.at_train_begin = at_train_begin
        self.seed, self.batch_size = seed, batch_size
        self.last: dict[str, float] | None = None
        self._last_step: int | None = None

    # ------------------------------------------------------------------ hooks
    def on_train_begin(self, args, state, control, **kwargs):
        if self.at_train_begin and state.global_step == 0:  # the starting model (not again on a resume)
            self.evaluate_and_log()

    def on_step_end(self, args, state, control, **kwargs):
        if self.every_n_steps and state.global_step % self.every_n_steps == 0:
            self.evaluate_and_log()

    def on_evaluate(self, args, state, control, **kwargs):
        self.evaluate_and_log()

    def on_train_end(self, args, state, control, **kwargs):
        if self.at_train_end:
            self.evaluate_and_log()

    # ------------------------------------------------------------------ work
    def evaluate_and_log(self) -> dict[str, float]:
        trainer = self.trainer
        step = trainer.state.global_step
        if self._last_step == step and self.last is not None:  # e.g. every_n_steps hit on the last step
            return self.last
        results = self.evaluate()
        self._last_step = step
        _log_aside(trainer, results)
        return results

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        trainer = self.trainer
        acc = trainer.accelerator
        rank, world = acc.process_index, acc.num_processes
        mine = self.problems[rank::world]
        counts = self._correct_counts(mine)  # also with no problem here: the other ranks may need this one's part
        sums = [sum(c / self.n for c in counts)] + [sum(pass_at_k(self.n, c, k) for c in counts) for k in self.ks]
        local = torch.tensor(sums + [float(len(counts))], dtype=wide_float_dtype(acc.device), device=acc.device)
        totals = acc.reduce(local, "sum")
        totals = totals.tolist()
        m = max(totals[-1], 1.0)
        results = {f"eval/mean@{self.n}": totals[0] / m}
        results.update({f"eval/pass@{k}": totals[1 + i] / m for i, k in enumerate(self.ks)})
        self.last = results
        return results

    def _correct_counts(self, problems: list[dict]) -> list[int]:
        from .engines import generation_model

        trainer = self.trainer
        tok = trainer.processing_class
        max_new = self.max_new_tokens or trainer.args.max_completion_length
        conversational = isinstance(self.problems[0]["prompt"], list)

        def text(p):
            return (tok.apply_chat_template(p["prompt"], tokenize=False, add_generation_prompt=True) if conversational
                    else p["prompt"])

        texts = [text(p) for p in problems]
        expanded = [i for i in range(len(problems)) for _ in range(self.n)]
        # Under sharded weights (generation_model's `synced`) every rank runs as many generate() calls as rank 0, which
        # holds the most problems (the strided split): a rank with fewer runs throw-away batches on a problem's prompt.
        world = trainer.accelerator.num_processes
        most = -(-len(self.problems[0::world]) * self.n // self.batch_size)
        completions: list[str] = []
        completion_ids: list[list[int]] = []
        with generation_model(trainer) as (model, synced):
            calls = most if synced else -(-len(expanded) // self.batch_size)
            was_training = model.training
            model.eval()
            device = next(model.parameters()).device
            try:
                with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                    torch.manual_seed(self.seed)
                    for call in range(calls):
                        start = call * self.batch_size
                        batch = [texts[i] for i in expanded[start : start + self.batch_size]]
                        keep = len(batch)
                        if not batch:  # a throw-away call, only for the other ranks' collectives
                            batch = [text(self.problems[0])]
                        enc = tok(batch, return_tensors="pt", padding=True, padding_side="left",
                                  add_special_tokens=False)
                        enc = {k: v.to(device) for k, v in enc.items()}
                        # synced_gpus explicitly: transformers turns it on by itself under ZeRO-3, also where the
                        # weights are gathered and the ranks run different numbers of calls (a collective mismatch)
                        out = model.generate(**enc, do_sample=True, temperature=self.temperature, top_k=0, top_p=1.0,
                                             max_new_tokens=max_new, pad_token_id=tok.pad_token_id,
                                             eos_token_id=tok.eos_token_id, synced_gpus=synced)
                        for row in out[:keep, enc["input_ids"].shape[1]:].tolist():
                            if tok.eos_token_id in row:
                                row = row[: row.index(tok.eos_token_id) + 1]
                            completion_ids.append(row)
                            completions.append(tok.decode(row, skip_special_tokens=True))
            finally:
                model.train(was_training)
        if not problems:
            return []
        rewards = self._score(problems, expanded, completions, completion_ids)
        counts = [0] * len(problems)
        for i, r in zip(expanded, rewards):
            if r is not None and not math.isnan(r) and r >= self.threshold:
                counts[i] += 1
        return counts

    def _score(self, problems, expanded, completions, completion_ids) -> list[float]:
        reward_func = self.trainer.reward_funcs[0]
        if isinstance(reward_func, torch.nn.Module):
            raise NotImplementedError("PassAtKCallback scores with a reward *function*; the first one is a model.")
        prompts = [problems[i]["prompt"] for i in expanded]
        if isinstance(prompts[0], list):
            completions = [[{"role": "assistant", "content": c}] for c in completions]
        columns = {k: [problems[i][k] for i in expanded] for k in problems[0] if k != "prompt"}
        return list(reward_func(prompts=prompts, completions=completions, completion_ids=completion_ids, **columns))


class EntropyPerformanceFitCallback(TrainerCallback):
    """Refits R = -a * exp(H) + b to (entropy, score) pairs as evaluations are logged (Cui et al. §2.4).

    Each time a log contains ``score_key`` (e.g. ``eval/mean@16`` from :class:`PassAtKCallback`), the pair
    (current measured entropy, score) is recorded; the entropy is ``trainer.last_measured_entropy`` when the trainer
    has one (``GRPOEntropyTrainer``), else the latest ``entropy`` in the log history. With ``min_points`` pairs or more
    (and distinct entropies) it refits and logs ``entropy_control/predicted_ceiling`` (b - a),
    ``entropy_control/fit_a``, ``entropy_control/fit_b`` and ``entropy_control/fit_rmse``; the fit is in ``self.fit``.
    """

    def __init__(self, trainer=None, score_key: str = "eval/mean@16", min_points: int = 3):
        if min_points < 3:
            raise ValueError(f"min_points must be >= 3 (two parameters and an error), got {min_points}.")
        self.trainer, self.score_key, self.min_points = trainer, score_key, min_points
        self.points: list[tuple[float, float]] = []
        self.fit = None

    def _entropy(self, state) -> float | None:
        measured = getattr(self.trainer, "last_measured_entropy", None) if self.trainer is not None else None
        if measured is not None:
            return float(measured)
        for h in reversed(state.log_history):
            for key in ("entropy_control/measured", "entropy"):
                if key in h and math.isfinite(h[key]):
                    return float(h[key])
        return None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or self.score_key not in logs:
            return
        entropy = self._entropy(state)
        if entropy is None:
            return
        self.points.append((entropy, float(logs[self.score_key])))
        entropies = [h for h, _ in self.points]
        if len(self.points) < self.min_points or max(entropies) - min(entropies) < 1e-9:
            return
        self.fit = fit_entropy_performance(entropies, [s for _, s in self.points])
        out = {
            "entropy_control/predicted_ceiling": self.fit.ceiling,
            "entropy_control/fit_a": self.fit.a,
            "entropy_control/fit_b": self.fit.b,
            "entropy_control/fit_rmse": self.fit.rmse,
        }
        if self.trainer is not None:
            _log_aside(self.trainer, out)


_KNOBS = ("epsilon_high", "lambda", "sign", "alpha", "selected_tokens", "entropy_coef")


def _series(history, key):
    pts = [(h["step"], h[key]) for h in history if key in h and "step" in h and h[key] is not None]
    pts = [(s, v) for s, v in pts if isinstance(v, (int, float)) and math.isfinite(v)]
    return [s for s, _ in pts], [v for _, v in pts]


def training_figures(log_history: list[dict]) -> dict:
    """The training pictures of ``log_history`` as ``{file name: matplotlib Figure}``, without writing anything.

    ``entropy_curves.png`` (the entropy the control acts on, ``entropy_control/measured``, else TRL's ``entropy``,
    against the target, titled with the run's tracking error and share of steps beyond ±30% where the control followed
    it, :func:`trl_entropy.metrics.logged_tracking`; below it, where logged, the distinct answers per group on solved
    and unsolved groups), ``entropy_knob.png`` (the knob(s) a control moved), ``reward.png``, ``pass_at_k.png``
    (the last few pass@k evaluations, and the starting model's where it was evaluated at step 0) and
    ``heldout_curves.png`` (held-out pass@k against the step, from two evaluations on); each only when the history
    holds its series. Short series are drawn with
    markers (a single logged step is a visible point), and step axes have whole-number ticks.
    """
    from ._plotting import integer_step_axis, k_axis, line_style, new_figure

    figures = {}
    steps, measured = _series(log_history, "entropy_control/measured")
    if not steps:
        steps, measured = _series(log_history, "entropy")
    if steps:
        answers = [(label, *_series(log_history, f"entropy_control/distinct_answers_{part}"))
                   for part, label in (("solved", "solved groups"), ("unsolved", "unsolved groups"))]
        answers = [(label, s, v) for label, s, v in answers if s]
        fig, axes = new_figure(2 if answers else 1, 1, figsize=(6.4, 6.6 if answers else 3.8))
        ax = axes[0, 0]
        ax.plot(steps, measured, label="measured entropy", lw=1.5, **line_style(len(steps)))
        t_steps, target = _series(log_history, "entropy_control/target")
        if t_steps:
            ax.plot(t_steps, target, "--", color="k", label="target", lw=1.2, **line_style(len(t_steps)))
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("entropy (nats / token)")
        err, out, _ = logged_tracking(log_history)  # the card's figures, where the control followed a target
        title = "Policy entropy vs target"
        if math.isfinite(err) and math.isfinite(out):
            title += f"\ntracking error {100 * err:.1f}%, {100 * out:.0f}% of steps beyond ±30%"
        ax.set_title(title)
        integer_step_axis(ax)
        ax.legend()
        if answers:  # the answers' diversity (issue 64): is the entropy exploration, and where does it sit?
            ax = axes[1, 0]
            for (label, s, v), color in zip(answers, ("C2", "C3")):
                ax.plot(s, v, color=color, label=label, lw=1.2, **line_style(len(s)))
            ax.set_xlabel("optimizer step")
            ax.set_ylabel("distinct answers per group")
            ax.set_title("Answer diversity (solved: a fully rewarded answer in the group)")
            integer_step_axis(ax)
            ax.legend()
        figures["entropy_curves.png"] = fig
    knobs = [(k, *_series(log_history, f"entropy_control/{k}")) for k in _KNOBS]
    knobs = [(k, s, v) for k, s, v in knobs if s]
    if not any(k == "entropy_coef" for k, _, _ in knobs):
        # TRL's own `entropy_coef` metric: the coefficient of plain GRPO's bonus or of TRL's adaptive rule. Where a
        # control logs `entropy_control/entropy_coef` (the bonus, TRL's rule as a control, the assist) that panel is
        # the same knob, signed even where TRL applies 0 (a scoped penalty): drawn once, from the control's series.
        steps_coef, coef = _series(log_history, "entropy_coef")
        if steps_coef:
            knobs.append(("entropy_coef", steps_coef, coef))
    if knobs:
        fig, axes = new_figure(len(knobs), 1, figsize=(6.4, 2.4 * len(knobs)))
        for ax, (k, s, v) in zip(axes[:, 0], knobs):
            ax.plot(s, v, color="C1", lw=1.4, **line_style(len(s)))
            ax.set_ylabel(k)
            integer_step_axis(ax)
        axes[-1, 0].set_xlabel("optimizer step")
        axes[0, 0].set_title("Knob moved by the entropy control")
        figures["entropy_knob.png"] = fig
    r_steps, reward = _series(log_history, "reward")
    if r_steps:
        fig, axes = new_figure(figsize=(6.4, 3.4))
        ax = axes[0, 0]
        ax.plot(r_steps, reward, color="C2", lw=1.2, **line_style(len(r_steps)))
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("mean reward")
        ax.set_title("Training reward")
        integer_step_axis(ax)
        figures["reward.png"] = fig
    evals = [h for h in log_history if any(k.startswith("eval/pass@") for k in h)]
    if evals:
        fig, axes = new_figure(figsize=(6.4, 3.8))
        ax = axes[0, 0]
        all_ks = set()
        start = evals[0] if evals[0].get("step") == 0 and len(evals) > 1 else None  # the starting model
        shown = [h for h in evals[-5:] if h is not start]
        for i, h in enumerate(([start] if start else []) + shown):
            ks = sorted(int(k.split("@")[1]) for k in h if k.startswith("eval/pass@"))
            all_ks.update(ks)
            if h is start:
                ax.plot(ks, [h[f"eval/pass@{k}"] for k in ks], marker="o", color="k", ls="--", lw=1.2,
                        label="starting model")
                continue
            j = i - (start is not None)  # the last few evaluations, oldest lightest
            ax.plot(ks, [h[f"eval/pass@{k}"] for k in ks], marker="o", alpha=0.35 + 0.65 * (j + 1) / len(shown),
                    label=f"step {h.get('step')}")
        k_axis(ax, all_ks)
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k")
        ax.set_ylim(0, 1.02)
        ax.set_title("pass@k on held-out problems")
        ax.legend()
        figures["pass_at_k.png"] = fig
    steps = sorted({h.get("step") for h in evals if h.get("step") is not None})
    if len(steps) > 1:  # learning curves: held-out pass@k against the step
        ks = sorted({int(k.split("@")[1]) for h in evals for k in h if k.startswith("eval/pass@")})
        ks = ks if len(ks) <= 3 else [ks[0], ks[len(ks) // 2], ks[-1]]
        fig, axes = new_figure(figsize=(6.4, 3.8))
        ax = axes[0, 0]
        for k in ks:
            s_k, v_k = _series(evals, f"eval/pass@{k}")
            ax.plot(s_k, v_k, label=f"pass@{k}", lw=1.4, **line_style(len(s_k)))
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("held-out pass@k")
        ax.set_ylim(0, 1.02)
        ax.set_title("Held-out pass@k during training")
        integer_step_axis(ax)
        ax.legend()
        figures["heldout_curves.png"] = fig
    return figures


def write_training_plots(log_history: list[dict], output_dir: str) -> list[str]:
    """Write the pictures of :func:`training_figures` (what the history holds) into ``output_dir``.

    Returns the paths written. Needs matplotlib (``pip install trl-entropy[plot]``).
    """
    from ._plotting import save_figure

    os.makedirs(output_dir, exist_ok=True)
    return [save_figure(fig, os.path.join(output_dir, name)) for name, fig in training_figures(log_history).items()]


class EntropyPlotCallback(TrainerCallback):
    """Refreshes the training pictures in ``output_dir`` (default ``args.output_dir``) at each save and at the end.

    Only the main process writes. Without matplotlib it warns once and does nothing.
    """

    def __init__(self, output_dir: str | None = None):
        self.output_dir = output_dir
        self.written: list[str] = []
        self._warned = False

    def _write(self, args, state):
        if not state.is_world_process_zero:
            return
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            if not self._warned:
                warnings.warn("EntropyPlotCallback needs matplotlib (pip install 'trl-entropy[plot]'); no pictures "
                              "are written.", UserWarning, stacklevel=2)
                self._warned = True
            return
        try:
            self.written = write_training_plots(state.log_history, self.output_dir or args.output_dir)
        except OSError as e:  # the run has trained: a picture that cannot be written must not end it
            warnings.warn(f"EntropyPlotCallback could not write the training pictures: {e}", UserWarning,
                          stacklevel=2)

    def on_save(self, args, state, control, **kwargs):
        self._write(args, state)

    def on_train_end(self, args, state, control, **kwargs):
        self._write(args, state)
