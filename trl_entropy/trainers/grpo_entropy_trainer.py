"""`GRPOEntropyTrainer`: TRL's `GRPOTrainer` with entropy controls wired into TRL's own hooks.

This module contains wiring only; the math lives in `trl_entropy.scheduling` and `trl_entropy.losses`.

Hooks used (trl 1.16):
  * knob  (A): controls set attributes TRL's `_compute_loss` reads (e.g. `self.epsilon_high`), only at
    optimizer-step boundaries, so every micro-batch of one step sees the same value;
  * measure (D): the per-token entropies TRL already computes in its loss forward are captured (no extra pass), and
    (Σ entropy·mask, Σ mask) is accumulated over the micro-batches of the optimizer step;
  * control (E): at the step boundary the sums are all-reduced across processes, giving one measured entropy that is
    identical on every rank, and the control updates its knob for the next step;
  * schedule (F): `EntropyScheduleCallback.on_step_begin` sets the target of the step;
  * rollouts (B): after TRL computed the advantages of a generation batch, rollout controls (Entrocraft) return a
    keep-mask; rejected rollouts get a zero advantage and, with `entrocraft_normalizer="kept"`, leave TRL's loss
    mask through the `tool_mask` key TRL already multiplies into it (attention is untouched);
  * advantage weights (B, per step): per micro-batch, sign-dependent weights on the advantages (positive
    reweighting, W-REINFORCE), applied to a copy so buffered generation batches are never modified in place;
  * token hooks (C): controls that change the loss per token (Clip-Cov, KL-Cov, EntroPIC) make `_compute_loss`
    run `trl_entropy.losses.policy_loss.trainer_compute_loss` (TRL's forward, our loss, equal to TRL's with the hooks
    off) with the control's hooks; every other control keeps TRL's `_compute_loss` untouched. With
    `cov_scope="global"` the covariance selection is planned once per optimizer step, before its first micro-batch,
    from a no-grad forward over the step's buffered micro-batches (see `_plan_token_selection`); when the step is a
    single micro-batch per process, it is planned inside the loss forward instead, from the same log-probs, with no
    extra pass.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import math
import numbers
import os
import warnings

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer
from trl.trainer.utils import is_async_callable

from .._paths import check_model_path
from ..controls import RolloutContext, TokenBatch, build_control
from ..evaluation import EntropyPlotCallback, write_training_plots
from ..losses.covariance import wide_float_dtype
from ..losses.policy_loss import _as_2d_advantages, loss_mask, trainer_compute_loss
from ..scheduling.callbacks import EntropyScheduleCallback
from ..scheduling.controllers import SaturationMonitor
from ..scheduling.schedules import CALLABLE_SCHEDULE_PREFIX, CallableSchedule, make_schedule, schedule_label
from .grpo_entropy_config import GRPOEntropyConfig, parse_entropy_value

_INLINE_PLAN = "inline"  # the step is one micro-batch per process: select from the loss forward's own log-probs

__all__ = ["GRPOEntropyTrainer", "CONTROL_STATE_FILE"]

CONTROL_STATE_FILE = "entropy_control_state.json"
# Config fields the entropy target depends on (with max_steps): recorded in CONTROL_STATE_FILE, compared at resume.
_SCHEDULE_FIELDS = ("entropy_schedule", "entropy_schedule_start", "entropy_schedule_end",
                    "entropy_schedule_warmup_steps", "entropy_schedule_anneal_ratio")
METRIC_PREFIX = "entropy_control/"


_REWARD_EXPECTED = "a list of floats (or None for a completion it cannot score), one per completion"


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
    """The rewards a reward function returned for ``num_completions`` completions, as floats (None kept).

    Raises a ``TypeError`` naming the function, what it returned and what is expected when the output is not a
    sequence (a float, a dict, a string, a generator...) or holds something other than a real number or None (e.g.
    words, or numeric strings, which TRL cannot turn into a tensor), and a ``ValueError`` when its length is not one
    per completion. NaN and infinite values are returned as they are (the caller decides).
    """
    expected = f"{_REWARD_EXPECTED} ({num_completions} in this batch)"
    if not _is_reward_sequence(rewards):
        raise TypeError(f"Reward function {name!r} returned {_describe_value(rewards)}; expected {expected}.")
    values = list(rewards)
    if len(values) != num_completions:
        raise ValueError(
            f"Reward function {name!r} returned {len(values)} value(s) for {num_completions} completions; expected "
            f"{expected}."
        )
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
      batch and the start of its prompt.
    * An output that is not one real number (or None) per completion raises an error naming the function, what it
      returned and what is expected (:func:`check_reward_output`).
    * A NaN or infinite reward is replaced by ``None`` (TRL's "unscorable": excluded from the group baseline, zero
      advantage). Left alone, TRL would turn a group holding an infinite reward into zero advantages without a word.
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
        if not nan and not inf:
            return rewards
        return [None if r is not None and not math.isfinite(r) else r for r in values]

    return wrapped


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


def _clean_warning(message: str, category=RuntimeWarning) -> None:
    """Warn without the source line Python prints under a warning (which lands in the middle of a progress bar):
    one line, ``trl-entropy: <Category>: <message>``, still filtered and caught as any warning."""
    warnings.warn_explicit(message, category, filename="trl-entropy", lineno=0, module="trl_entropy")


def _resolve_entropy_value(value, initial: float | None) -> float | None:
    """A schedule start/end in nats: numbers as they are, "initial"-relative values times ``initial`` (``None`` while
    the initial entropy is unknown)."""
    parsed = parse_entropy_value(value)
    if parsed is None:
        return None
    kind, number = parsed
    if kind == "nats":
        return number
    return None if initial is None else number * initial


def _max_entropy(model) -> float | None:
    """log(vocabulary size): the largest per-token entropy the model's output distribution can have."""
    try:
        size = model.get_output_embeddings().weight.shape[0]
    except Exception:  # a model without output embeddings we can read: no check
        size = getattr(getattr(model, "config", None), "vocab_size", None)
    return math.log(size) if isinstance(size, int) and size > 1 else None


class _InitialEntropySchedule(CallableSchedule):
    """Stands in for a schedule whose start or end is relative to the initial entropy until that is measured:
    returns ``None`` (no target) before :meth:`resolve`, then the resolved schedule's values."""

    def __init__(self):
        self.schedule = None
        self.fn = self
        self.phase_fn = None
        self.warmup_steps = 0

    @property
    def resolved(self) -> bool:
        return self.schedule is not None

    def resolve(self, schedule) -> None:
        self.schedule = schedule

    def __call__(self, step: int, total_steps: int) -> float | None:
        return None if self.schedule is None else self.schedule(step, total_steps)

    def phase(self, step: int, total_steps: int) -> str | None:
        return None if self.schedule is None else self.schedule.phase(step, total_steps)

    def __getattr__(self, name):
        schedule = self.__dict__.get("schedule")
        if schedule is None:
            raise AttributeError(f"{name!r}: the schedule is not resolved yet (it waits for the initial entropy)")
        return getattr(schedule, name)


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


class _DropTrlAllNoneWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "All reward functions returned None" not in str(record.msg)


@contextlib.contextmanager
def _without_trl_all_none_warning():
    """Hide TRL's "All reward functions returned None" (also printed for NaN rewards) while TRL scores a batch."""
    trl_logger = logging.getLogger(GRPOTrainer.__module__)
    drop = _DropTrlAllNoneWarning()
    trl_logger.addFilter(drop)
    try:
        yield
    finally:
        trl_logger.removeFilter(drop)


class GRPOEntropyTrainer(GRPOTrainer):
    """GRPO with a schedulable policy entropy. Takes the same arguments as `trl.GRPOTrainer`.

    With `args.entropy_control="none"` it trains exactly as `GRPOTrainer` (same losses and weights for the same
    seed); it only adds the `entropy_control/measured` metric. With a control, it also logs, each optimizer step,
    `entropy_control/target`, `entropy_control/measured` and the control's knob (e.g. `entropy_control/epsilon_high`);
    for a control that follows the target, also `entropy_control/tracking_error` (measured − target) and
    `entropy_control/relative_tracking_error` (a control that ignores the target, e.g. `clip_cov`, logs the target
    for reference only).

    Two entropy metrics, which can disagree:

    * `entropy_control/measured`: the mean per-token entropy (nats) of the policy in the loss forward, over every
      completion token of the optimizer step (all micro-batches, all processes, Σ H·mask / Σ mask) and every rollout,
      including rollouts a rollout control rejected (Entrocraft). This is the entropy the controls observe
      (Entrocraft's pre-update rollout entropy also covers every rollout), and the one the model card, the pictures
      and `EntropyPerformanceFitCallback` report.
    * `entropy` (TRL's own): the same per-token entropy, but over TRL's loss mask and averaged per micro-batch. With
      `entropy_control="entrocraft"` and `entrocraft_normalizer="kept"` rejected rollouts leave that mask, so it
      covers the kept rollouts only; with several micro-batches per optimizer step it is a mean of micro-batch
      means. It equals `entropy_control/measured` when nothing is rejected and a step is one micro-batch.
    """

    _tag_names = ["trl", "grpo", "trl-entropy"]
    # cov_scope="global" with one micro-batch per optimizer step: take the selection from the loss forward's log-probs
    # (the same values the extra no-grad forward would compute) instead of running that forward. Off only in tests.
    _inline_single_micro_batch_plan = True

    def __init__(self, model, reward_funcs, args: GRPOEntropyConfig | None = None, *pargs, **kwargs):
        if isinstance(model, (str, os.PathLike)):
            # "no such folder: ..." for a mistyped local folder, not transformers' "Repo id must be in the form"
            model = check_model_path(model, "model")
        if args is None:
            model_name = model if isinstance(model, str) else model.config._name_or_path
            args = GRPOEntropyConfig(f"{model_name.split('/')[-1]}-GRPO-entropy")
        elif not isinstance(args, GRPOEntropyConfig):
            raise TypeError(
                f"args must be a GRPOEntropyConfig, got {type(args).__name__}. Build it with the same fields: "
                "GRPOEntropyConfig(**your_grpo_config.to_dict()) works for a plain GRPOConfig."
            )
        try:
            bound = inspect.signature(GRPOTrainer.__init__).bind(self, model, reward_funcs, args, *pargs, **kwargs)
        except TypeError:
            bound = None  # GRPOTrainer raises its own error for the arguments
        if bound is not None:
            check_train_dataset(bound.arguments.get("train_dataset"), args)  # before the model is loaded
        super().__init__(model, reward_funcs, args, *pargs, **kwargs)
        self._ec_nonfinite_rewards = 0  # global, over the run (training batches)
        self._ec_pending_nonfinite_rewards = 0  # this process, since the last generation batch was checked
        self._ec_nonfinite_advantages = 0
        self._ec_reward_faults: dict[str, tuple[int, int, int]] = {}  # this batch: name -> (#NaN, #inf, #None)
        self._ec_unscorable_streak = 0  # consecutive training generation batches with no reward at all
        self._ec_unscorable_batches = 0
        self.reward_funcs = [
            _guard_reward_function(f, n, self._on_reward_result, search=args.reward_error_search)
            for f, n in zip(self.reward_funcs, self.reward_func_names)
        ]
        self.entropy_control = build_control(args)
        self._ec_window: torch.Tensor | None = None  # (Σ entropy·mask, Σ mask) over this step's micro-batches
        self._ec_capture = False
        self._ec_captured_entropies: torch.Tensor | None = None
        self._ec_score_capture = False  # armed per generation until the policy's old-log-prob pass has been read
        self._ec_policy_adapter = None  # PEFT: the adapter active while generating (the policy's)
        self._ec_scoring_entropies: torch.Tensor | None = None
        self._ec_all_rejected = 0
        self._ec_pushes: list[tuple[str, list]] = []  # (checkpoint folder, its upload futures), not yet reported
        self._ec_saturation = SaturationMonitor(getattr(args, "saturation_window", 20))
        self._ec_warned_saturation = False
        self.entropy_target: float | None = None
        self.entropy_phase: str | None = None
        self.last_measured_entropy: float | None = None
        self.entropy_schedule = None
        self.initial_entropy: float | None = None  # measured on the first generation batch when the schedule needs it
        self._ec_schedule_callback = None
        self.max_entropy = _max_entropy(self.model)
        if self.entropy_control is not None and args.entropy_schedule is not None:
            self._check_targets_below_max_entropy()
            if args.schedule_needs_initial_entropy:
                self.entropy_schedule = _InitialEntropySchedule()  # resolved at the first generation batch
            else:
                self.entropy_schedule = self._build_schedule(None)
            self._ec_schedule_callback = EntropyScheduleCallback(self.entropy_schedule, trainer=self)
            self.add_callback(self._ec_schedule_callback)
        self._ec_plan: dict[int, torch.Tensor] = {}  # micro-batch index (self._step) -> planned selection
        self._ec_micro_in_step = 0  # micro-batches of the current optimizer step already computed
        self._ec_warned_split_window = False
        self.entropy_plot_callback = None
        if getattr(args, "entropy_plots", False):
            self.entropy_plot_callback = EntropyPlotCallback()
            self.add_callback(self.entropy_plot_callback)
        if self.entropy_control is not None:
            self.entropy_control.rank = self.accelerator.process_index
            self.entropy_control.apply(self)

    # ------------------------------------------------------------------ schedule (F)
    def set_entropy_target(self, target: float | None, phase: str | None = None) -> None:
        """Called by `EntropyScheduleCallback` at the start of every optimizer step (``None``: no target yet, the
        schedule waits for the initial entropy). Where TRL's adaptive coefficient runs (`trl_adaptive`, or
        `allow_trl_adaptive_entropy`), its `args.entropy_target` follows the schedule too."""
        self.entropy_target = None if target is None else float(target)
        self.entropy_phase = phase
        if target is not None and getattr(self.args, "use_adaptive_entropy", False):
            self.args.entropy_target = float(target)

    def _build_schedule(self, initial: float | None):
        """The schedule of the config, with start/end given relative to ``initial`` resolved to nats."""
        args = self.args
        return make_schedule(
            args.entropy_schedule,
            start=_resolve_entropy_value(args.entropy_schedule_start, initial),
            end=_resolve_entropy_value(args.entropy_schedule_end, initial),
            warmup_steps=args.entropy_schedule_warmup_steps,
            anneal_ratio=args.entropy_schedule_anneal_ratio,
        )

    def _check_targets_below_max_entropy(self, initial: float | None = None) -> None:
        """Refuse a target above log(vocabulary size), the largest entropy a token distribution can have."""
        if self.max_entropy is None:
            return
        for name in ("entropy_schedule_start", "entropy_schedule_end"):
            raw = getattr(self.args, name)
            value = _resolve_entropy_value(raw, initial)
            if value is not None and value > self.max_entropy:
                measured = "" if not isinstance(raw, str) else f" ({raw} with an initial entropy of {initial:.4f})"
                raise ValueError(
                    f"{name} = {value:g} nats{measured} is above the largest entropy this model can have, "
                    f"log(vocabulary size) = {self.max_entropy:.3f} nats: no control can reach it. Choose a target "
                    f"below {self.max_entropy:.3f} (entropy is in nats per completion token)."
                )

    def _resolve_initial_entropy(self, output) -> None:
        """At the first training generation batch, when the schedule is relative to the starting entropy: measure
        the token-mean entropy of the whole batch under the current policy (one no-grad forward, summed over
        processes, so every rank resolves the same value), build the schedule and set this step's target."""
        if not isinstance(self.entropy_schedule, _InitialEntropySchedule) or self.entropy_schedule.resolved:
            return
        if not self.model.training:
            return
        loss_mask = output["completion_mask"]
        if "tool_mask" in output:
            loss_mask = loss_mask * output["tool_mask"]
        entropy = self._rollout_entropy(output, loss_mask, "extra_pass")
        if entropy is None:
            warnings.warn(
                f"Step {self.state.global_step}: the initial entropy could not be measured on this generation batch "
                "(no completion tokens, or not finite); the schedule waits for the next one.",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        self._set_initial_entropy(entropy)
        self._metrics["train"][METRIC_PREFIX + "initial_entropy"].append(entropy)

    def _set_initial_entropy(self, entropy: float) -> None:
        self._check_targets_below_max_entropy(entropy)
        self.initial_entropy = float(entropy)
        self.entropy_schedule.resolve(self._build_schedule(self.initial_entropy))
        if self._ec_schedule_callback is not None and self.state.max_steps:
            self._ec_schedule_callback.on_step_begin(self.args, self.state, None)

    # ------------------------------------------------------------------ measure (D)
    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        model = args[0] if args else kwargs.get("model")
        if self._ec_score_capture and self._is_policy_forward(model):
            # TRL's old-log-prob pass (the policy's first forward of the generation): take the entropy from the same
            # forward. Disarmed at once, so the reference pass that follows with beta > 0 (or any later forward)
            # never writes the captured entropies.
            # TRL private: `_generate_and_score_completions` passes `self.model` for the old log-probs, then
            # `self.ref_model` (or `self.model` under `use_adapter`) for the reference, in that order.
            self._ec_score_capture = False
            kwargs["compute_entropy"] = True
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            self._ec_scoring_entropies = entropies.detach()
            return logps, None, aux  # TRL asked for no entropy here
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._ec_capture and entropies is not None:
            self._ec_captured_entropies = entropies.detach()
        return logps, entropies, aux

    def _peft_policy_adapter(self):
        """The PEFT model's active adapter (``None`` without PEFT), read before TRL's passes: the policy's."""
        from accelerate.utils import is_peft_model

        unwrapped = self.accelerator.unwrap_model(self.model)
        return unwrapped.active_adapter if is_peft_model(unwrapped) else None

    def _is_policy_forward(self, model) -> bool:
        """Whether a `_get_per_token_logps_and_entropies` call inside TRL's `_generate_and_score_completions` runs
        the policy being trained rather than TRL's KL reference (beta > 0). Without PEFT the reference is a separate
        `self.ref_model`; with PEFT it is `self.model` itself inside TRL's `use_adapter(...)`, which either disables
        the adapters (`disable_adapter()`) or activates an adapter named "ref" (re-training an existing adapter)."""
        from accelerate.utils import is_peft_model

        if model is None or model is not self.model or (self.ref_model is not None and model is self.ref_model):
            return False
        unwrapped = self.accelerator.unwrap_model(self.model)
        if not is_peft_model(unwrapped):
            return True
        if not getattr(unwrapped, "has_active_enabled_adapter", True):  # inside `disable_adapter()`
            return False
        return unwrapped.active_adapter == self._ec_policy_adapter  # not the "ref" adapter

    # ------------------------------------------------------------------ rollouts (B)
    def _trl_runs_scoring_pass(self) -> bool:
        generate_every = self.args.steps_per_generation * self.num_iterations
        return self.args.gradient_accumulation_steps % generate_every != 0 or (
            self.use_vllm and self.vllm_importance_sampling_correction
        )

    def _rollout_entropy_source(self) -> str:
        source = getattr(self.args, "entrocraft_entropy_source", "auto")
        if source == "auto":
            return "scoring_pass" if self._trl_runs_scoring_pass() else "lagged"
        return source

    def _generate_and_score_completions(self, inputs):
        control = self.entropy_control
        if control is None or not control.uses_rollouts or not self.model.training:
            output = self._check_finite_advantages(super()._generate_and_score_completions(inputs))
            self._resolve_initial_entropy(output)
            return output
        source = self._rollout_entropy_source()
        self._ec_scoring_entropies = None
        # Armed only when TRL runs the policy's old-log-prob pass (the same condition as TRL's); it comes before the
        # reference pass, and the first policy forward disarms it. Without it, "scoring_pass" falls back to an extra
        # pass in `_rollout_entropy`.
        self._ec_policy_adapter = self._peft_policy_adapter()
        self._ec_score_capture = source == "scoring_pass" and self._trl_runs_scoring_pass()
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._ec_score_capture = False
        output = self._check_finite_advantages(output)
        self._resolve_initial_entropy(output)
        loss_mask = output["completion_mask"]
        if "tool_mask" in output:
            loss_mask = loss_mask * output["tool_mask"]
        entropy = self._rollout_entropy(output, loss_mask, source)
        advantages = output["advantages"]
        local = advantages.shape[0]
        ctx = RolloutContext(
            entropy=entropy,
            target=self.entropy_target,
            step=self.state.global_step,
            total_steps=self.state.max_steps,
            global_offset=self.accelerator.process_index * local,
            global_size=local * self.accelerator.num_processes,
            seed=self.args.seed,
        )
        decision = control.transform_rollouts(advantages, ctx)
        output["ec_entropy_mask"] = loss_mask  # all rollouts, for the measured entropy of the update
        if decision.keep is not None:
            self._apply_keep(output, decision.keep, loss_mask)
        self._log_rollout_decision(decision)
        return output

    def _rollout_entropy(self, output, loss_mask, source) -> float | None:
        """Global token-mean entropy of the rollouts under the pre-update policy."""
        if source == "lagged" and self.last_measured_entropy is not None:
            return self.last_measured_entropy
        entropies = self._ec_scoring_entropies if source == "scoring_pass" else None
        self._ec_scoring_entropies = None
        if entropies is None:  # "extra_pass", or "lagged" before the first measurement
            prompt_completion_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
            attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
            with torch.no_grad():
                _, entropies, _ = super()._get_per_token_logps_and_entropies(
                    self.model,
                    prompt_completion_ids,
                    attention_mask,
                    output["completion_ids"].size(1),
                    batch_size=self.args.per_device_train_batch_size,
                    compute_entropy=True,
                )
        mask = loss_mask.to(entropies.dtype)
        totals = self.accelerator.reduce(torch.stack([(entropies * mask).sum(), mask.sum()]).float(), "sum")
        count = float(totals[1])
        entropy = float(totals[0]) / count if count > 0 else None
        if entropy is not None and not math.isfinite(entropy):
            warnings.warn(
                f"Step {self.state.global_step}: the rollout entropy is not finite; the rollout control keeps every "
                "rollout of this generation batch.",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        return entropy

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
            "treated as unscorable (None: excluded from the group baseline, advantage 0). Counted in "
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
        with _without_trl_all_none_warning():  # it says "returned None" for NaN too; the check below says which
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._check_unscorable(rewards_per_func)
        return rewards_per_func

    def _check_unscorable(self, rewards_per_func: torch.Tensor) -> None:
        """Warn about completions no reward function scored; stop after `max_unscorable_batches` consecutive training
        generation batches in which none was scored. `rewards_per_func` is TRL's gathered (global) reward matrix, so
        every process reaches the same decision."""
        unscorable = torch.isnan(rewards_per_func).all(dim=1)
        count, total = int(unscorable.sum()), unscorable.numel()
        training = self.model.training
        if count < total and training:
            self._ec_unscorable_streak = 0
        if count == 0:
            return
        step = self.state.global_step
        why = self._describe_reward_faults()
        if count < total or not training:
            warnings.warn(
                f"Step {step}: {count} of {total} completions got no reward from any reward function ({why}); they "
                "are unscorable: left out of their group's baseline, advantage 0.",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        self._ec_unscorable_streak += 1
        self._ec_unscorable_batches += 1
        self._metrics["train"][METRIC_PREFIX + "unscorable_batches"].append(float(self._ec_unscorable_batches))
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
            self._metrics["train"][METRIC_PREFIX + "nonfinite_rewards"].append(float(self._ec_nonfinite_rewards))
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
        self._metrics["train"][METRIC_PREFIX + "nonfinite_advantages"].append(float(self._ec_nonfinite_advantages))
        output["advantages"] = torch.where(torch.isfinite(advantages), advantages, torch.zeros_like(advantages))
        return output

    def _apply_keep(self, output, keep, loss_mask) -> None:
        keep_f = keep.to(output["advantages"].dtype)
        output["advantages"] = output["advantages"] * (keep_f if output["advantages"].dim() == 1 else keep_f[:, None])
        if getattr(self.args, "entrocraft_normalizer", "kept") != "kept":
            return
        row_keep = keep.to(output["completion_mask"].dtype)[:, None]
        tool_mask = output.get("tool_mask")
        output["tool_mask"] = row_keep.expand_as(output["completion_mask"]) if tool_mask is None else tool_mask * row_keep
        output["ec_keep"] = keep_f
        kept_tokens = (loss_mask * row_keep).sum()
        output["num_items_in_batch"] = self.accelerator.gather(kept_tokens).sum()

    def _log_rollout_decision(self, decision) -> None:
        metrics = self._metrics["train"]
        for key, value in decision.scalars.items():
            metrics[METRIC_PREFIX + key].append(value)
        if not decision.counts:
            return
        totals = self._reduce_step_counts(decision.counts)
        for key, value in self.entropy_control.rollout_metrics(totals).items():
            metrics[METRIC_PREFIX + key].append(value)
        if totals.get("total", 0) > 0 and totals.get("kept", 1) == 0:
            self._ec_all_rejected += 1
            warnings.warn(
                f"Step {self.state.global_step}: every rollout of the generation batch was rejected; this batch "
                "contributes no policy gradient (the loss stays finite). Counted in entropy_control/all_rejected.",
                RuntimeWarning,
                stacklevel=2,
            )
        metrics[METRIC_PREFIX + "all_rejected"].append(float(self._ec_all_rejected))

    # ------------------------------------------------------------------ advantage weights (B, per step)
    def _prepare_inputs(self, generation_batch):
        inputs = super()._prepare_inputs(generation_batch)
        if self.entropy_control is None or not self.model.training:
            return inputs
        if self.entropy_control.needs_step_plan and self._step not in self._ec_plan:
            self._plan_token_selection()
        return self._transform_micro_batch(inputs)

    # ------------------------------------------------------------------ token hooks (C)
    def _token_batch(self, logps, old, advantages, mask) -> TokenBatch:
        return TokenBatch(
            logps=logps,
            old_logps=logps if old is None else old,
            advantages=_as_2d_advantages(advantages),
            mask=mask > 0,
            epsilon_low=self.epsilon_low,
            epsilon_high=self.epsilon_high,
            importance_sampling_level=self.importance_sampling_level,
        )

    @torch.no_grad()
    def _plan_token_selection(self) -> None:
        """Global scope: decide the selection of the current optimizer step's micro-batches at its first one.

        The window is the micro-batches from this one to the end of the optimizer step, cut at the end of the current
        generation batch (later ones are not generated yet). With TRL's defaults and whenever
        `steps_per_generation * num_iterations` is a multiple of `gradient_accumulation_steps` the window is the
        whole optimizer step. The current policy's log-probs come from one no-grad forward per micro-batch (the
        parameters do not change within a step), so the selection is what the loss forward would see, and equal on
        every process. A window of one micro-batch (e.g. `gradient_accumulation_steps=1`) runs no extra forward: it is
        marked inline and selected inside the loss forward from that forward's own log-probs (same values).
        """
        self._ec_plan = {}
        ga = getattr(self, "current_gradient_accumulation_steps", None) or self.args.gradient_accumulation_steps
        spg = self.args.steps_per_generation
        generate_every = spg * self.num_iterations
        start = self._step
        end = min(start + max(1, ga - self._ec_micro_in_step), (start // generate_every + 1) * generate_every)
        if end - start < ga and not self._ec_warned_split_window:
            self._ec_warned_split_window = True
            warnings.warn(
                f"cov_scope='global': an optimizer step ({ga} micro-batches) spans more than one generation batch "
                f"(steps_per_generation * num_iterations = {generate_every}); the selection is global over each "
                "generation batch's part of the step instead of the whole step.",
                UserWarning,
                stacklevel=2,
            )
        indices = list(range(start, end))
        if len(indices) == 1 and self._inline_single_micro_batch_plan:
            self._ec_plan = {start: _INLINE_PLAN}
            return
        batches = []
        for j in indices:
            mb = self._buffered_inputs[j % spg]
            completion_ids = mb["completion_ids"]
            input_ids = torch.cat([mb["prompt_ids"], completion_ids], dim=1)
            attention_mask = torch.cat([mb["prompt_mask"], mb["completion_mask"]], dim=1)
            logps, _, _ = super()._get_per_token_logps_and_entropies(
                self.model, input_ids, attention_mask, completion_ids.size(1),
                batch_size=self.args.per_device_train_batch_size,
            )
            batches.append(self._token_batch(logps, mb.get("old_per_token_logps"), mb["advantages"], loss_mask(mb)))
        self._ec_plan = dict(zip(indices, self._plan_window(batches)))

    def _plan_window(self, batches: list[TokenBatch]) -> list[torch.Tensor]:
        """The control's global selection over `batches`, with this trainer's cross-process sum and gather."""
        acc = self.accelerator
        return self.entropy_control.plan_window(batches, lambda t: acc.reduce(t, reduction="sum"), acc.gather)

    def _hooked_compute_loss(self, model, inputs):
        control = self.entropy_control
        planned = self._ec_plan.get(self._step) if control.needs_step_plan else None
        if control.needs_step_plan and planned is None:
            raise RuntimeError(f"no planned token selection for micro-batch {self._step} (cov_scope='global').")

        def hooks_fn(logps, old, advantages, mask, entropies):
            batch = self._token_batch(logps, old, advantages, mask)  # detached values of this loss forward
            selection = planned
            if planned is _INLINE_PLAN:  # every process is here once this step, in lockstep
                selection = self._plan_window([batch])[0]
            return control.token_hooks(batch, planned=selection)

        return trainer_compute_loss(self, model, inputs, hooks_fn)

    def _transform_micro_batch(self, inputs):
        """Per-step advantage weights and the 'grpo' kept-rows normaliser, on a copy of the micro-batch."""
        control = self.entropy_control
        advantages = inputs["advantages"]
        scale = None
        if control.uses_advantage_weights:
            scale = control.advantage_weights(advantages, self.state.global_step, self.state.max_steps)
        keep = inputs.get("ec_keep")
        if keep is not None and self.loss_type == "grpo":
            # loss_type="grpo" averages per-sequence losses over all rows of the micro-batch; divide by the kept
            # rows instead, so rejected rollouts leave the normaliser (the policy term is linear in A).
            factor = keep.numel() / keep.sum().clamp(min=1.0)
            scale = factor if scale is None else scale * factor
        if scale is None:
            return inputs
        inputs = dict(inputs)  # never modify the buffered generation batch in place (num_iterations > 1 reuses it)
        inputs["advantages"] = advantages * scale
        return inputs

    def _compute_loss(self, model, inputs):
        training = self.model.training
        self._ec_capture = training
        control = self.entropy_control
        try:
            if training and control is not None and control.uses_token_hooks:
                loss = self._hooked_compute_loss(model, inputs)
            else:
                loss = super()._compute_loss(model, inputs)
        finally:
            self._ec_capture = False
        if training:
            self._ec_micro_in_step += 1
            entropies, self._ec_captured_entropies = self._ec_captured_entropies, None
            if entropies is not None:
                mask = inputs.get("ec_entropy_mask")
                if mask is None:
                    mask = inputs["completion_mask"]
                    if "tool_mask" in inputs:
                        mask = mask * inputs["tool_mask"]
                self._accumulate_entropy(entropies, mask)
            if self.accelerator.sync_gradients:
                self._on_optimizer_step_boundary()
        return loss

    def _accumulate_entropy(self, entropies: torch.Tensor, mask: torch.Tensor) -> None:
        mask = mask.to(entropies.dtype)
        stats = torch.stack([(entropies * mask).sum(), mask.sum()]).float()
        self._ec_window = stats if self._ec_window is None else self._ec_window + stats

    def _reduce_window(self) -> tuple[float, float]:
        """All-reduce this step's (Σ entropy·mask, Σ mask); returns (measured entropy, token count), global."""
        window = self._ec_window
        if window is None:
            window = torch.zeros(2, device=self.accelerator.device)
        self._ec_window = None
        totals = self.accelerator.reduce(window, reduction="sum")
        count = float(totals[1].item())
        measured = float(totals[0].item()) / count if count > 0 else float("nan")
        return measured, count

    def _reduce_step_counts(self, counts: dict[str, float]) -> dict[str, float]:
        """Sum a control's per-step counts over processes; keys starting with ``"max:"`` take the maximum.

        One gather of every rank's counts (one collective per step), then the sum or max per key, the same on every
        rank."""
        acc = self.accelerator
        names = sorted(counts)
        local = torch.tensor([counts[k] for k in names], dtype=wide_float_dtype(acc.device), device=acc.device)
        rows = acc.gather(local).view(acc.num_processes, len(names))
        return {k: float(rows[:, i].max() if k.startswith("max:") else rows[:, i].sum()) for i, k in enumerate(names)}

    # ------------------------------------------------------------------ control (E)
    def _on_optimizer_step_boundary(self) -> None:
        self._ec_micro_in_step = 0
        self._ec_plan = {}
        measured, count = self._reduce_window()
        metrics = self._metrics["train"]
        control = self.entropy_control
        if control is not None and control.uses_token_hooks:
            totals = self._reduce_step_counts(control.step_counts())
            for key, value in control.step_metrics(totals).items():
                metrics[METRIC_PREFIX + key].append(value)
        if not math.isfinite(measured):
            why = "no completion tokens" if count == 0 else "a non-finite entropy"
            warnings.warn(
                f"Step {self.state.global_step}: the measured entropy is undefined ({why}); the entropy control "
                "skips this step and keeps its knob.",
                RuntimeWarning,
                stacklevel=2,
            )
            metrics[METRIC_PREFIX + "skipped_steps"].append(1.0)
            return
        self.last_measured_entropy = measured
        metrics[METRIC_PREFIX + "measured"].append(measured)
        control = self.entropy_control
        if control is None:
            return
        target = self.entropy_target
        if control.knob_name is not None:
            metrics[METRIC_PREFIX + control.knob_name].append(control.knob)  # the value used during this step
        if target is not None:
            metrics[METRIC_PREFIX + "target"].append(target)
            if control.follows_target:  # a control that ignores the target has no tracking error, only a reference
                metrics[METRIC_PREFIX + "tracking_error"].append(measured - target)
                metrics[METRIC_PREFIX + "relative_tracking_error"].append(abs(measured - target) / max(target, 1e-8))
        control.observe(measured, target)
        for key, value in control.metrics().items():
            metrics[METRIC_PREFIX + key].append(value)
        if target is not None and control.follows_target:
            self._check_saturation(control, measured, target)
        control.apply(self)

    def _check_saturation(self, control, measured: float, target: float) -> None:
        """Log `entropy_control/saturated` and warn the first time the control's knob stays at a limit while the
        error keeps its sign for `saturation_window` steps (the target is out of the knob's reach)."""
        saturated = self._ec_saturation.update(control.limit_push)
        self._metrics["train"][METRIC_PREFIX + "saturated"].append(float(saturated))
        if saturated and not self._ec_warned_saturation:
            self._ec_warned_saturation = True
            side = "below" if control.limit_push > 0 else "above"
            knob = f"its knob {control.knob_name} = {control.knob:g}" if control.knob_name else "its knob"
            _clean_warning(
                f"Step {self.state.global_step}: entropy_control={control.name!r} is saturated: for "
                f"{self._ec_saturation.window} steps {knob} has sat at a limit of its range while the entropy stayed "
                f"{side} its target ({measured:.3f} vs {target:.3f} nats). The target is beyond what this control can "
                "reach with this model, task and learning rate: widen the knob's range where it has one, choose a "
                "reachable target, or use a control with more authority (docs: testbeds, 'Knob authority'). Logged as "
                "entropy_control/saturated.",
                RuntimeWarning,
            )

    # ------------------------------------------------------------------ model card, pictures, Hub
    def _write_card_and_pictures(self, folder: str, model_name: str | None = None) -> None:
        """Pictures (if `entropy_plots`) and README.md into `folder`; main process only; never raises on I/O."""
        if not self.is_world_process_zero():
            return
        from ..model_card import render_model_card

        try:
            os.makedirs(folder, exist_ok=True)
            if getattr(self.args, "entropy_plots", False):
                try:
                    write_training_plots(self.state.log_history, folder)
                except ImportError:
                    pass  # matplotlib missing: the card simply has no picture
            card = render_model_card(self, model_name=model_name, output_dir=folder)
            tmp = os.path.join(folder, "README.md.tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(card)
            os.replace(tmp, os.path.join(folder, "README.md"))
        except OSError as err:
            warnings.warn(f"Could not write the model card into {folder}: {err}", RuntimeWarning, stacklevel=2)

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None, tags=None):
        """Writes trl-entropy's model card (method, parameters, schedule, outcome, pictures, citations) to
        `output_dir/README.md`; called by `push_to_hub`."""
        self._write_card_and_pictures(self.args.output_dir, model_name=model_name)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call=_internal_call)
        if not _internal_call:  # a user's save_model(): the folder gets the card and pictures too
            self._write_card_and_pictures(output_dir or self.args.output_dir)

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, model, trial):
        if self.args.should_save:
            # before the Trainer's checkpoint push, which uploads output_dir: card and pictures go with every save
            self._write_card_and_pictures(self.args.output_dir)
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            self._write_control_state(folder)

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        # The Trainer pushes from inside _save_checkpoint: write the controller state first, so that the checkpoint
        # is complete on disk (and uploaded whole with hub_strategy="checkpoint") even if the upload fails.
        self._write_control_state(checkpoint_folder)
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
            raise RuntimeError(f"{why} {later}") from err

    def _write_control_state(self, folder: str) -> None:
        if self.entropy_control is None or not self.args.should_save or not os.path.isdir(folder):
            return
        payload = {
            "entropy_control": self.entropy_control.name,
            "global_step": self.state.global_step,
            "target": self.entropy_target,
            "phase": self.entropy_phase,
            "last_measured_entropy": self.last_measured_entropy,
            "initial_entropy": self.initial_entropy,
            "saturation": self._ec_saturation.state_dict(),
            "state": self.entropy_control.state_dict(),
            "schedule": self._schedule_record(),  # compared at resume: a change moves the target
        }
        tmp = os.path.join(folder, CONTROL_STATE_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(payload, f, indent=2)
        os.replace(tmp, os.path.join(folder, CONTROL_STATE_FILE))

    def _schedule_record(self) -> dict:
        """What the entropy target depends on besides the step: the schedule fields and the run's total steps (a
        callable schedule by its readable name, as the saved config keeps it)."""
        args = self.args
        schedule = args.entropy_schedule
        if callable(schedule):
            schedule = CALLABLE_SCHEDULE_PREFIX + schedule_label(schedule)
        record = {name: getattr(args, name) for name in _SCHEDULE_FIELDS}
        record["entropy_schedule"] = schedule
        record["max_steps"] = self.state.max_steps
        return record

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

    def _check_resume_schedule(self, checkpoint, saved: dict | None) -> None:
        """Warn, naming each one, when a schedule field or max_steps differs from the run that wrote the checkpoint
        (checkpoints written before these were recorded are not checked)."""
        if not isinstance(saved, dict):
            return
        current = self._schedule_record()
        changed = [f"{name}: {saved[name]!r} → {current[name]!r}"
                   for name in current if name in saved and saved[name] != current[name]]
        if not changed:
            return
        warnings.warn(
            f"Resuming from {checkpoint} with {'; '.join(changed)} (checkpoint → this run). The target is computed "
            "from the step, the schedule fields and max_steps, so from here on it follows the new values and the run "
            "does not continue the schedule it started with. Resume with the checkpoint's values to continue it.",
            UserWarning,
            stacklevel=2,
        )

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        self._check_resume_round_boundary(checkpoint)
        path = os.path.join(checkpoint, CONTROL_STATE_FILE)
        if not os.path.exists(path):
            if self.entropy_control is not None:
                warnings.warn(
                    f"Resuming from {checkpoint}, which has no {CONTROL_STATE_FILE}: the entropy control "
                    f"{self.entropy_control.name!r} starts from its initial state.",
                    UserWarning,
                    stacklevel=2,
                )
            return
        with open(path) as f:
            payload = json.load(f)
        saved = payload.get("entropy_control")
        current = self.entropy_control.name if self.entropy_control is not None else "none"
        if saved != current:
            raise ValueError(
                f"The checkpoint {checkpoint} was written with entropy_control={saved!r}, but this run uses "
                f"entropy_control={current!r}. Resume with the same control, or start a new run."
            )
        self._check_resume_schedule(checkpoint, payload.get("schedule"))
        self.entropy_control.load_state_dict(payload["state"])
        self._ec_saturation.load_state_dict(payload.get("saturation", {}))
        self._ec_warned_saturation = self._ec_saturation.events > 0
        self.last_measured_entropy = payload.get("last_measured_entropy")
        initial = payload.get("initial_entropy")
        if initial is not None and isinstance(self.entropy_schedule, _InitialEntropySchedule):
            self._set_initial_entropy(float(initial))  # the value the run started from, not a new measurement
        self.entropy_control.apply(self)
