"""Generic fault handling of `GRPOEntropyTrainer`: what happens when a reward function, the training set, a batch's
rewards or advantages, a Hub upload or a resume point is wrong (docs: faults). Nothing here depends on the entropy
controls; it would guard a plain `trl.GRPOTrainer` as well.

* functions: :func:`check_reward_output` (what a reward function returned), :func:`check_train_dataset` (the
  training set, before the model is loaded), the reward-function guard ``_guard_reward_function`` and the Hub error
  helpers;
* :class:`FaultHandlingMixin`: the methods that need the trainer (its counters, metrics, process group, upload
  futures). `GRPOEntropyTrainer` inherits from it before `trl.GRPOTrainer`, so its overrides of TRL's
  `_calculate_rewards` and transformers' `_push_from_checkpoint`, `_finish_current_push` and `init_hf_repo` sit
  between the two in the method resolution order and reach TRL's through ``super()`` (listed in
  `trl_entropy/_trl_private.py`, checked by `tests/test_trl_drift.py`).

What TRL 1.16's `_calculate_rewards` already does is left to it, not repeated here: a reward of None becomes NaN
(unscorable), a reward list of the wrong length raises a `ValueError` naming the function, and a completion no
reward function scored is logged as a warning ("All reward functions returned None ..."). docs/faults.md says which
checks are ours.

A mixin rather than functions taking the trainer: the overrides must be methods anyway, and the state they share
(``self._ec_*``) stays on the trainer where checkpoints, tests and the metrics already find it.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import warnings

import torch

from .._trl_private import is_async_callable, log_metric

__all__ = ["FaultHandlingMixin", "HubError", "check_reward_output", "check_train_dataset"]

METRIC_PREFIX = "entropy_control/"


_REWARD_EXPECTED = "a list of floats (or None for a completion it cannot score), one per completion"


class HubError(RuntimeError):
    """The Hub repo of a `push_to_hub` run cannot be created or reached. Its message says why and how to train
    without pushing; `trl-entropy grpo` prints it as one line and exits with status 1."""


def _describe_value(value) -> str:
    """A short description of what a reward function returned, for error messages."""
    if value is None:
        return "None"
    if isinstance(value, dict):
        keys = list(value)
        more = ", ..." if len(keys) > 5 else ""
        return f"a dict (keys {', '.join(map(repr, keys[:5]))}{more})"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"a {type(value).__name__} ({text})"


def _is_reward_sequence(value) -> bool:
    if isinstance(value, (list, tuple)):
        return True
    if isinstance(value, torch.Tensor) or type(value).__module__ == "numpy":
        return getattr(value, "ndim", None) == 1
    return False


def check_reward_output(name: str, rewards, num_completions: int) -> list[float | None]:
    """The rewards a reward function returned for a batch of ``num_completions`` completions, as floats (None kept).

    Raises a ``TypeError`` naming the function, what it returned and what is expected when the output is not a
    sequence (a float, a dict, a string, a generator...) or holds something other than a real number or None (e.g.
    words, or numeric strings, which TRL cannot turn into a tensor). The length is not checked here: TRL's
    `_calculate_rewards` raises a ``ValueError`` naming the function when it is not one per completion. NaN and
    infinite values are returned as they are (the caller decides).
    """
    expected = f"{_REWARD_EXPECTED} ({num_completions} in this batch)"
    if not _is_reward_sequence(rewards):
        raise TypeError(f"Reward function {name!r} returned {_describe_value(rewards)}; expected {expected}.")
    values = list(rewards)
    out: list[float | None] = []
    for i, r in enumerate(values):
        if r is None:
            out.append(None)
            continue
        if isinstance(r, torch.Tensor) and r.numel() == 1 and not r.is_complex():
            out.append(float(r))
            continue
        if isinstance(r, numbers.Real):
            out.append(float(r))
            continue
        hint = ""
        if isinstance(r, str):
            try:
                float(r)
                hint = " Convert numeric strings with float()."
            except ValueError:
                hint = " Map each completion to a number (e.g. 1.0 for correct, 0.0 for wrong)."
        raise TypeError(
            f"Reward function {name!r} returned {_describe_value(r)} for completion {i} of the batch; expected "
            f"{expected}.{hint}"
        )
    return out


def _guard_reward_function(reward_func, name: str, on_result=None, search: bool = False):
    """Wrap a synchronous reward function so that its faults are reported instead of silently training on them.

    * An exception is re-raised as a ``RuntimeError`` naming the function, the exception and the batch size (chained
      to the original exception). The function is not called again: re-running it costs as much as the batch did
      (sandboxed, remote or paid rewards). With ``search=True`` (the config's ``reward_error_search``) the batch is
      re-scored one completion at a time to find the first failing one, and the error also gives its index in the
      batch and the start of its prompt. A function that takes an argument no dataset column provides (``answer``
      where the column is ``solution``) gets a ``TypeError`` naming it and listing the dataset's columns instead.
    * An output that is not a sequence of real numbers (or None) raises a ``TypeError`` naming the function, what it
      returned and what is expected (:func:`check_reward_output`); TRL checks the length.
    * An infinite reward is replaced by NaN, which is what TRL makes of ``None`` ("unscorable": excluded from the
      group baseline, zero advantage); a NaN is left as it is. Left alone, TRL would turn a group holding an infinite
      reward into zero advantages without a word.
    * Every call reports ``on_result(name, nan_indices, inf_indices, none_indices)`` (the trainer warns with them).

    Model-based and async reward functions (async functions, partials of them and instances of a class whose
    ``__call__`` is async: TRL's ``is_async_callable``) are returned unchanged; TRL awaits them.
    """
    if isinstance(reward_func, torch.nn.Module) or not callable(reward_func) or is_async_callable(reward_func):
        return reward_func

    @functools.wraps(reward_func)
    def wrapped(prompts, completions, **kwargs):
        try:
            rewards = reward_func(prompts=prompts, completions=completions, **kwargs)
        except Exception as err:
            n = len(completions)
            missing = _missing_arguments(reward_func, kwargs) if isinstance(err, TypeError) else []
            if missing:  # an argument named after a column the dataset lacks: say which columns it has
                columns = ["prompt", *(k for k, v in kwargs.items() if isinstance(v, list) and len(v) == n
                                       and k not in _PER_COMPLETION_EXTRAS)]
                raise TypeError(
                    f"Reward function {name!r} takes the argument{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(map(repr, missing))}, which no column of the dataset provides: a reward "
                    f"function gets each column of the dataset by its name (the 'prompt' column as `prompts`), and "
                    f"this dataset's columns are {columns}. Rename the argument to the column that holds it, give it "
                    "a default, or add the column to the dataset."
                ) from err
            if not search:
                raise RuntimeError(
                    f"Reward function {name!r} raised {type(err).__name__} on a batch of {n} completion(s): {err}. "
                    "To find the failing completion, set reward_error_search=True (re-runs the function once per "
                    "completion of the failing batch)."
                ) from err
            index = _first_failing_index(reward_func, prompts, completions, kwargs)
            where = (f" (no single completion fails on its own: only the batch of {n} does)" if index is None else
                     f" on completion {index} of the batch of {n} (prompt {str(prompts[index])[:80]!r})")
            raise RuntimeError(f"Reward function {name!r} raised {type(err).__name__}{where}: {err}") from err
        values = check_reward_output(name, rewards, len(completions))
        nan = [i for i, r in enumerate(values) if r is not None and math.isnan(r)]
        inf = [i for i, r in enumerate(values) if r is not None and math.isinf(r)]
        if on_result is not None:
            on_result(name, nan, inf, [i for i, r in enumerate(values) if r is None])
        if not inf:
            return rewards
        return [math.nan if r is not None and math.isinf(r) else r for r in values]

    return wrapped


# What TRL passes a reward function per completion besides the dataset's columns (not columns: left out of the list)
_PER_COMPLETION_EXTRAS = ("completion_ids", "environments")


def _missing_arguments(reward_func, kwargs) -> list[str]:
    """The required parameters of ``reward_func`` that a call with ``prompts``, ``completions`` and ``kwargs`` (the
    dataset's columns and what TRL adds) does not give, in signature order; [] when its signature cannot be read."""
    import inspect

    try:
        params = inspect.signature(reward_func).parameters.values()
    except (TypeError, ValueError):
        return []
    given = {"prompts", "completions", *kwargs}
    return [p.name for p in params if p.default is inspect.Parameter.empty and p.name not in given
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


def _first_failing_index(reward_func, prompts, completions, kwargs) -> int | None:
    n = len(prompts)
    for i in range(n):
        one = {k: (v[i : i + 1] if isinstance(v, list) and len(v) == n else v) for k, v in kwargs.items()}
        try:
            reward_func(prompts=prompts[i : i + 1], completions=completions[i : i + 1], **one)
        except Exception:
            return i
    return None


def _column_names(dataset) -> list[str] | None:
    """The columns of a map-style or iterable dataset, when they can be known without iterating it."""
    names = getattr(dataset, "column_names", None)
    if isinstance(names, (list, tuple)):
        return list(names)
    if isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(dataset, "__getitem__"):
        return None
    try:
        first = dataset[0]
    except Exception:  # an exotic dataset: leave the check to TRL
        return None
    return list(first) if isinstance(first, dict) else None


def check_train_dataset(dataset, args) -> None:
    """Raise a ``ValueError`` for a training set GRPO cannot train on, before anything is loaded or generated.

    * A dataset dict (e.g. ``DatasetDict``) instead of one split.
    * A map-style dataset with fewer rows than one generation batch has distinct prompts,
      ``generation_batch_size / num_generations``: TRL's ``RepeatSampler`` drops an incomplete batch of prompts, so
      such a dataset gives no batch at all and ``train()`` returns after 0 steps. (Iterable datasets are not checked.)
    * No ``prompt`` column (where the columns are known without iterating): the error lists the columns.
    """
    if dataset is None:
        return
    if isinstance(dataset, dict):
        raise ValueError(
            f"train_dataset is a {type(dataset).__name__} with splits {list(dataset)}; pass one split, e.g. "
            f"train_dataset=dataset[{next(iter(dataset), 'train')!r}]."
        )
    iterable = isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(dataset, "__len__")
    if not iterable:
        rows = len(dataset)
        needed = args.generation_batch_size // args.num_generations
        if rows < needed:
            processes = args.generation_batch_size // (args.per_device_train_batch_size * args.steps_per_generation)
            have = "is empty" if rows == 0 else f"has {rows} row(s)"
            raise ValueError(
                f"train_dataset {have}, but one generation batch needs {needed} distinct prompts: "
                f"generation_batch_size / num_generations = {args.generation_batch_size} / {args.num_generations}, "
                f"with generation_batch_size = per_device_train_batch_size ({args.per_device_train_batch_size}) x "
                f"processes ({processes}) x steps_per_generation ({args.steps_per_generation}). TRL drops an "
                "incomplete batch of prompts, so training would stop after 0 steps. Add prompts, or lower "
                "per_device_train_batch_size or steps_per_generation (or raise num_generations)."
            )
    columns = _column_names(dataset)
    if columns is not None and "prompt" not in columns:
        raise ValueError(
            f"train_dataset has no 'prompt' column; its columns are {columns}. GRPO generates completions for the "
            "'prompt' column (a string, or a list of chat messages); rename the column that holds the prompts, e.g. "
            "dataset.rename_column('question', 'prompt'). Other columns are passed to the reward functions."
        )


def _hub_unreachable(err: BaseException) -> bool:
    """Whether ``err`` (or an exception it was raised from) says the Hub could not be reached: offline mode
    (``OfflineModeIsEnabled`` is a ``ConnectionError``), no connection, a timeout, an HTTP client's transport error."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, (ConnectionError, TimeoutError)):
            return True
        kind = type(err)
        if kind.__module__.split(".")[0].startswith(("httpx", "httpcore", "requests", "urllib3")) and any(
            word in kind.__name__ for word in ("Connect", "Timeout", "Network", "Transport", "Proxy")
        ):
            return True
        err = err.__cause__ or err.__context__
    return False


def _short_error(err: BaseException, limit: int = 200) -> str:
    text = " ".join(str(err).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class FaultHandlingMixin:
    """The trainer-side fault handling of `GRPOEntropyTrainer` (inherited before `trl.GRPOTrainer`).

    * rewards: every synchronous reward function is guarded (``_guard_reward_function``); NaN/inf rewards become
      unscorable with a warning; ``max_unscorable_batches`` consecutive training batches without any reward stop the
      run (``_calculate_rewards``, ``_check_unscorable``);
    * advantages: NaN/inf advantages become 0, with a warning and a counter (``_check_finite_advantages``, called by
      the trainer after TRL's ``_generate_and_score_completions``);
    * Hub: one short error when the repo cannot be created or reached (``init_hf_repo``), and a warning per checkpoint
      whose background upload failed (``_push_from_checkpoint``, ``_finish_current_push``);
    * resume: a warning when the checkpoint is inside a generation round (``_check_resume_round_boundary``).

    Call :meth:`_init_fault_handling` in ``__init__`` right after TRL's ``__init__`` (which sets ``reward_funcs``).
    """

    def _init_fault_handling(self, args) -> None:
        self._ec_nonfinite_rewards = 0  # global, over the run (training batches)
        self._ec_pending_nonfinite_rewards = 0  # this process, since the last generation batch was checked
        self._ec_nonfinite_advantages = 0
        self._ec_reward_faults: dict[str, tuple[int, int, int]] = {}  # this batch: name -> (#NaN, #inf, #None)
        self._ec_unscorable_streak = 0  # consecutive training generation batches with no reward at all
        self._ec_flat_streak = 0  # consecutive training generation batches in which every group's reward is constant
        self._ec_unscorable_batches = 0
        self._ec_pushes: list[tuple[str, list]] = []  # (checkpoint folder, its upload futures), not yet reported
        self.reward_funcs = [
            _guard_reward_function(f, n, self._on_reward_result, search=args.reward_error_search)
            for f, n in zip(self.reward_funcs, self.reward_func_names)
        ]

    # ------------------------------------------------------------------ rewards and advantages
    def _on_reward_result(self, name: str, nan: list[int], inf: list[int], none: list[int]) -> None:
        """Called by every guarded reward function call: remember its faults, warn about NaN/inf."""
        if nan or inf or none:
            self._ec_reward_faults[name] = (len(nan), len(inf), len(none))
        if not (nan or inf):
            return
        self._ec_pending_nonfinite_rewards += len(nan) + len(inf)
        what = " and ".join(
            f"{kind} for {len(idx)} completion(s) (first at index {idx[0]})"
            for kind, idx in (("NaN", nan), ("inf", inf))
            if idx
        )
        warnings.warn(
            f"Step {self.state.global_step}: reward function {name!r} returned {what} of the batch; these rewards are "
            "treated as unscorable (as None: excluded from the group baseline, advantage 0). Counted in "
            "entropy_control/nonfinite_rewards.",
            RuntimeWarning,
            stacklevel=2,
        )

    def _describe_reward_faults(self) -> str:
        parts = []
        for name, counts in self._ec_reward_faults.items():
            what = [f"{kind} for {n}" for kind, n in zip(("NaN", "inf", "None"), counts) if n]
            parts.append(f"{name!r} returned {' and '.join(what)}")
        return "; ".join(parts) if parts else "the reward functions returned NaN or None"

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._ec_reward_faults = {}
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._check_unscorable(rewards_per_func)
        self._check_reward_spread(rewards_per_func)
        return rewards_per_func

    FLAT_BATCHES_WARN = 3  # consecutive generation batches without any reward spread before the warning

    def _check_reward_spread(self, rewards_per_func: torch.Tensor) -> None:
        """Warn when, for `FLAT_BATCHES_WARN` training generation batches in a row, every group of `num_generations`
        completions got one and the same reward: every advantage is then 0 and the policy gradient vanishes, so an
        entropy control's own term is the only update (a reward function that never matches the completions' format
        looks exactly like this). Under TRL's `multi_objective_aggregation="normalize_then_sum"` the test is TRL's
        own: the weighted sum of each function's group-normalised rewards (`_has_policy_signal`). Warns once per such
        streak; `rewards_per_func` is global, so every process agrees."""
        if not self.model.training:
            return
        n = self.num_generations
        if n < 2 or rewards_per_func.size(0) % n:
            return
        aggregation = getattr(self, "multi_objective_aggregation", "sum_then_normalize")
        weights = self.reward_weights.to(rewards_per_func.device)
        if _has_policy_signal(rewards_per_func, weights, n, aggregation):
            self._ec_flat_streak = 0
            return
        self._ec_flat_streak += 1
        if self._ec_flat_streak != self.FLAT_BATCHES_WARN:
            return
        if aggregation == "normalize_then_sum":
            what = (f"the reward functions, each normalised within its group of {n} completions and weighted, summed "
                    "to 0 for every completion (each flat in every group, or cancelling)")
        else:
            groups = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1).view(-1, n)
            values = sorted({round(float(v), 4) for v in groups.nan_to_num(0.0)[:, 0].tolist()})
            shown = ", ".join(str(v) for v in values[:5]) + (", ..." if len(values) > 5 else "")
            what = f"every group of {n} completions got the same reward (group rewards: {shown})"
        control = getattr(self.args, "entropy_control", "none")
        only = ("" if control == "none" else
                f" With entropy_control={control!r} the entropy control's own term is then the only update.")
        warnings.warn(
            f"Step {self.state.global_step}: in {self._ec_flat_streak} generation batches in a row {what}, so every "
            f"advantage is 0 and there is no policy gradient.{only} Check that the reward function can score these "
            "completions (their format, the answer column it reads), or whether the task is already solved or out "
            "of reach for this model.",
            RuntimeWarning,
            stacklevel=2,
        )

    def _check_unscorable(self, rewards_per_func: torch.Tensor) -> None:
        """Count training generation batches in which no completion got a reward, warn at each, and stop after
        `max_unscorable_batches` of them in a row (TRL warns about each completion no reward function scored, and
        trains on). `rewards_per_func` is TRL's gathered (global) reward matrix, so every process reaches the same
        decision."""
        if not self.model.training:
            return
        if not bool(torch.isnan(rewards_per_func).all()):
            self._ec_unscorable_streak = 0
            return
        step = self.state.global_step
        why = self._describe_reward_faults()
        self._ec_unscorable_streak += 1
        self._ec_unscorable_batches += 1
        log_metric(self, METRIC_PREFIX + "unscorable_batches", float(self._ec_unscorable_batches))
        limit = self.args.max_unscorable_batches
        streak = self._ec_unscorable_streak
        if limit is not None and streak >= limit:
            raise RuntimeError(
                f"Step {step}: no completion of the last {streak} generation batches got a reward ({why}), so "
                f"every advantage was 0 and training on them gave no policy gradient. Stopping: "
                f"max_unscorable_batches={limit}. Check the reward functions (a reward of None or NaN means 'cannot "
                "score'), or raise max_unscorable_batches (None never stops)."
            )
        stop = "" if limit is None else f"; the run stops at max_unscorable_batches={limit} in a row"
        warnings.warn(
            f"Step {step}: no completion of this generation batch got a reward ({why}): every advantage is 0, so "
            f"training on it gives no policy gradient. {streak} such batch(es) in a row{stop}. Counted in "
            "entropy_control/unscorable_batches.",
            RuntimeWarning,
            stacklevel=2,
        )

    def _check_finite_advantages(self, output):
        """Rollouts whose advantage is NaN/inf (e.g. an infinite reward) get advantage 0, with a warning and a
        counter, so they neither poison the loss nor reach a controller. Also logs the NaN/inf rewards the reward
        functions returned for this batch. Both counts are summed over processes (every rank passes here in lockstep),
        so every rank logs the same numbers; evaluation batches are not counted."""
        pending, self._ec_pending_nonfinite_rewards = self._ec_pending_nonfinite_rewards, 0
        if not self.model.training:
            return output
        advantages = output["advantages"]
        bad = ~torch.isfinite(advantages)
        if bad.dim() > 1:
            bad = bad.any(dim=-1)
        local = torch.stack([bad.sum().float(), torch.tensor(float(pending), device=bad.device)])
        count, rewards = (int(v) for v in self.accelerator.reduce(local, "sum").tolist())
        if rewards:
            self._ec_nonfinite_rewards += rewards
            log_metric(self, METRIC_PREFIX + "nonfinite_rewards", float(self._ec_nonfinite_rewards))
        if count == 0:
            return output
        self._ec_nonfinite_advantages += count
        warnings.warn(
            f"Step {self.state.global_step}: {count} rollout(s) have a non-finite advantage (NaN or inf: check the "
            "reward functions); they get advantage 0 and contribute no gradient. Counted in "
            "entropy_control/nonfinite_advantages.",
            RuntimeWarning,
            stacklevel=2,
        )
        log_metric(self, METRIC_PREFIX + "nonfinite_advantages", float(self._ec_nonfinite_advantages))
        output["advantages"] = torch.where(torch.isfinite(advantages), advantages, torch.zeros_like(advantages))
        return output

    # ------------------------------------------------------------------ Hub uploads
    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        # The Trainer pushes from inside _save_checkpoint (the trainer has written the checkpoint's control state
        # before calling this): report the uploads that failed since the last save, then keep this checkpoint's jobs.
        self._report_failed_pushes()
        before = self._current_push_jobs()
        super()._push_from_checkpoint(checkpoint_folder)
        # The Trainer uploads in the background (futures of `upload_folder(run_as_future=True)`) and never looks at
        # their outcome: keep this checkpoint's jobs, and warn when one of them failed (_report_failed_pushes).
        jobs = [job for job in self._current_push_jobs() if not any(job is old for old in before)]
        if jobs:
            self._ec_pushes.append((checkpoint_folder, jobs))

    def _current_push_jobs(self) -> list:
        push = getattr(self, "push_in_progress", None)  # transformers' PushInProgress, set by init_hf_repo
        return list(getattr(push, "jobs", None) or [])

    def _finish_current_push(self) -> None:
        # Called at the end of train() (after waiting for the uploads in flight) and by push_to_hub().
        super()._finish_current_push()
        self._report_failed_pushes()

    def _report_failed_pushes(self) -> None:
        """One ``RuntimeWarning`` per checkpoint whose background Hub upload has finished with an error (checked at
        each save and at the end of training). The checkpoint stays on disk; training goes on."""
        pending = []
        for folder, jobs in getattr(self, "_ec_pushes", []):
            if not all(job.done() for job in jobs):
                pending.append((folder, jobs))
                continue
            errors = [job.exception() for job in jobs if not job.cancelled() and job.exception() is not None]
            if not errors:
                continue
            repo = self.hub_model_id or self.args.hub_model_id
            many = f" ({len(errors)} of its {len(jobs)} uploads failed; the first)" if len(errors) > 1 else ""
            warnings.warn(
                f"The Hub upload of checkpoint {folder} to {repo!r} failed{many}: {_short_error(errors[0])}. The "
                f"checkpoint is kept on disk at {folder} and training goes on. Upload it later, e.g. "
                f"`hf upload {repo} {folder} {os.path.basename(folder)}`.",
                RuntimeWarning,
                stacklevel=2,
            )
        self._ec_pushes = pending

    def init_hf_repo(self, token: str | None = None, private: bool | None = None) -> None:
        """transformers' `init_hf_repo` (called when the trainer is built with `push_to_hub=True`), with one short
        error instead of a long traceback when the Hub repo cannot be created or reached."""
        try:
            super().init_hf_repo(token=token, private=private)
        except Exception as err:
            repo = self.args.hub_model_id or os.path.basename(os.path.abspath(self.args.output_dir))
            out = self.args.output_dir
            later = (f"To train without pushing, set push_to_hub=False: checkpoints and the final model are saved in "
                     f"output_dir ({out}); upload them later with `hf upload {repo} {out}` (huggingface_hub's CLI, "
                     "formerly `huggingface-cli upload`).")
            # at construction with push_to_hub=True, or from push_to_hub() in a run built without it
            where = "push_to_hub=True, but" if self.args.push_to_hub else "push_to_hub():"
            if _hub_unreachable(err):
                why = (f"{where} the Hugging Face Hub is unreachable ({_short_error(err)}), so the repo {repo!r} "
                       "cannot be created or opened.")
            else:
                why = (f"{where} the Hub repo {repo!r} could not be created or opened ({_short_error(err)}). Check "
                       "hub_model_id and the token (`hf auth login`, HF_TOKEN or hub_token).")
            raise HubError(f"{why} {later}") from err

    # ------------------------------------------------------------------ resume
    def _check_resume_round_boundary(self, checkpoint) -> None:
        """Warn when the checkpoint's step is inside a generation round: TRL generates a fresh batch on resume, so
        the interrupted round is not continued and the resume is not exact."""
        ga = self.args.gradient_accumulation_steps
        micro = self.args.steps_per_generation * self.num_iterations  # micro-batches per generation round
        round_steps = micro // math.gcd(micro, ga)  # optimizer steps from one shared boundary to the next
        step = self.state.global_step
        if round_steps <= 1 or step % round_steps == 0:
            return
        warnings.warn(
            f"Resuming from {checkpoint} at step {step}, which is not a generation-round boundary: a round of "
            f"steps_per_generation x num_iterations = {self.args.steps_per_generation} x {self.num_iterations} "
            f"micro-batches and an optimizer step of gradient_accumulation_steps = {ga} micro-batches end together "
            f"every {round_steps} optimizer steps. "
            "TRL generates a fresh batch on resume instead of finishing the interrupted round, so the resumed run "
            "trains on other completions than an uninterrupted one would: the resume is not exact. Checkpoints at "
            f"multiples of {round_steps} steps resume exactly: use a save_steps that is a multiple of {round_steps}.",
            UserWarning,
            stacklevel=2,
        )


def _spread(values: torch.Tensor) -> torch.Tensor:
    """Per row, the largest minus the smallest non-NaN value (-inf for a row of NaN only)."""
    missing = torch.isnan(values)
    return values.masked_fill(missing, -math.inf).amax(dim=-1) - values.masked_fill(missing, math.inf).amin(dim=-1)


def _has_policy_signal(rewards_per_func: torch.Tensor, weights: torch.Tensor, n: int, aggregation: str) -> bool:
    """Whether TRL's advantages for this reward matrix (rows: completions, groups of ``n`` in a row; columns: reward
    functions, NaN where one gave no reward) can be non-zero, for its ``multi_objective_aggregation``:

    * ``"sum_then_normalize"``: the weighted sum (NaN for a completion no function scored) differs within some group;
    * ``"normalize_then_sum"``: each function is normalised within its group first, so the weighted sum of those
      normalised rewards must differ from 0 somewhere (two functions that vary but cancel in the raw sum still carry a
      signal here, and two that cancel after normalisation carry none).
    """
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    if aggregation == "normalize_then_sum":
        grouped = rewards_per_func.view(-1, n, rewards_per_func.size(1))
        count = (~torch.isnan(grouped)).sum(dim=1, keepdim=True).clamp(min=1)
        mean = torch.nanmean(grouped, dim=1, keepdim=True)
        std = ((grouped - mean).pow(2).nansum(dim=1, keepdim=True) / (count - 1).clamp(min=1)).sqrt()
        normalised = ((grouped - mean) / (std + 1e-4)).view(-1, rewards_per_func.size(1))
        combined = (normalised * weights.unsqueeze(0)).nansum(dim=1)
        combined = combined[~unscorable]
        return bool((combined.abs() > 1e-6).any())
    combined = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    combined[unscorable] = torch.nan  # an unscorable completion is no part of the spread (as TRL)
    return bool((_spread(combined.view(-1, n)) > 1e-6).any())
