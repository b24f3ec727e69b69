"""`GRPOEntropyTrainer`: TRL's `GRPOTrainer` with entropy controls wired into TRL's own hooks.

This module contains wiring only; the math lives in `trl_entropy.scheduling` and `trl_entropy.losses`, the generic
fault handling (reward outputs, unscorable batches, non-finite advantages, the training set, Hub uploads, resume
points) in `trl_entropy.trainers.faults` (`FaultHandlingMixin`, inherited before `GRPOTrainer`), the entropy target
from the config in `trl_entropy.scheduling.targets`. Each TRL method overridden here or there, with the reason it
exists, is listed in one place: `trl_entropy._trl_private.OVERRIDDEN_METHODS` (shown as a table in
docs/architecture.md, checked by tests/test_trl_drift.py).

Hooks used (trl 1.16):
  * knob  (A): controls set attributes TRL's `_compute_loss` reads (e.g. `self.epsilon_high`), only at
    optimizer-step boundaries, so every micro-batch of one step sees the same value;
  * measure (D): the per-token entropies TRL already computes in its loss forward are captured (no extra pass), and
    (Σ entropy·mask, Σ mask) is accumulated over the micro-batches of the optimizer step; with
    `entropy_measurement="generation_batch"` also Σ H_gen·mask, where H_gen (each token's entropy at generation)
    comes from TRL's old-log-prob pass and rides in the generation batch as `ec_generation_entropies`;
  * control (E): at the step boundary the sums are all-reduced across processes, giving one measured entropy that is
    identical on every rank, and the control updates its knob for the next step;
  * schedule (F): `EntropyScheduleCallback.on_step_begin` sets the target of the step;
  * rollouts (B): after TRL computed the advantages of a generation batch, rollout controls (Entrocraft) return a
    keep-mask; rejected rollouts get a zero advantage and, with `entrocraft_normalizer="kept"`, leave TRL's loss
    mask through the `tool_mask` key TRL already multiplies into it (attention is untouched);
  * advantage weights (B, per step): per micro-batch, sign-dependent weights on the advantages (positive
    reweighting, W-REINFORCE), applied to a copy so buffered generation batches are never modified in place;
  * token hooks (C), one loss path chosen when the trainer is built: controls that change the loss per token
    (Clip-Cov, KL-Cov) make `_compute_loss` run `trl_entropy.losses.policy_loss.trainer_compute_loss` (TRL's forward, our loss, equal to TRL's with the hooks
    off) with the control's hooks; the settings that path lacks are refused in `__init__`. A control whose hooks only
    add a term (`additive_loss_term`: EntroPIC) keeps TRL's `_compute_loss` and adds the term from the log-probs of
    TRL's loss forward (`_additive_compute_loss`); every other control keeps TRL's `_compute_loss` untouched. With
    `cov_scope="global"` the covariance selection is planned once per optimizer step, before its first micro-batch,
    from a no-grad forward over the step's buffered micro-batches (see `_plan_token_selection`); when the step is a
    single micro-batch per process, it is planned inside the loss forward instead, from the same log-probs, with no
    extra pass.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import warnings

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from .. import vllm_cpu
from .._paths import check_model_path
from .._trl_private import (
    buffered_inputs,
    log_metric,
    micro_step,
    model_name_or_path,
    output_dir_for_checkpoint,
)
from ..controls import RolloutContext, TokenBatch, build_control
from ..engines import warn_if_engine_dropped
from ..evaluation import EntropyPlotCallback, write_training_plots
from ..losses.covariance import wide_float_dtype
from ..losses.policy_loss import (
    _as_2d_advantages,
    additive_hooks_loss,
    check_trainer_supported,
    loss_mask,
    trainer_compute_loss,
)
from ..scheduling.callbacks import EntropyScheduleCallback
from ..scheduling.controllers import SaturationMonitor
from ..scheduling.measurement import (
    entropy_pull_sums,
    entropy_sums,
    generation_batch_entropy,
    policy_token_weights,
    signal_token_count,
)
from ..scheduling.targets import (
    InitialEntropySchedule,
    build_schedule,
    check_targets_below_max_entropy,
    max_entropy,
    schedule_record,
    warn_if_end_looks_like_a_fraction,
    warn_if_schedule_changed,
)
from .faults import (  # noqa: F401  (check_reward_output, check_train_dataset: importable from here too)
    METRIC_PREFIX,
    FaultHandlingMixin,
    check_reward_output,
    check_train_dataset,
)
from .grpo_entropy_config import GRPOEntropyConfig

_INLINE_PLAN = "inline"  # the step is one micro-batch per process: select from the loss forward's own log-probs

__all__ = ["GRPOEntropyTrainer", "CONTROL_STATE_FILE"]

CONTROL_STATE_FILE = "entropy_control_state.json"


def _clean_warning(message: str, category=RuntimeWarning) -> None:
    """Warn without the source line Python prints under a warning (which lands in the middle of a progress bar):
    one line, ``trl-entropy: <Category>: <message>``, still filtered and caught as any warning."""
    warnings.warn_explicit(message, category, filename="trl-entropy", lineno=0, module="trl_entropy")


class GRPOEntropyTrainer(FaultHandlingMixin, GRPOTrainer):
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

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: GRPOEntropyConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        reward_processing_classes=None,
        callbacks=None,
        optimizers=(None, None),
        quantization_config=None,
        peft_config=None,
        tools=None,
        rollout_func=None,
        environment_factory=None,
    ):
        """The arguments of `trl.GRPOTrainer`, in its order (TRL 1.16), with `args` a `GRPOEntropyConfig`."""
        kwargs = dict(train_dataset=train_dataset, eval_dataset=eval_dataset, processing_class=processing_class,
                      reward_processing_classes=reward_processing_classes, callbacks=callbacks, optimizers=optimizers,
                      quantization_config=quantization_config, peft_config=peft_config, tools=tools,
                      rollout_func=rollout_func, environment_factory=environment_factory)
        pargs = ()
        if isinstance(model, (str, os.PathLike)):
            # "no such folder: ..." for a mistyped local folder, not transformers' "Repo id must be in the form"
            model = check_model_path(model, "model")
        if args is None:
            model_name = model if isinstance(model, str) else model_name_or_path(model.config)
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
        cpu_colocate = vllm_cpu.wants_cpu_colocate(args)  # colocated vLLM on CPU: trl_entropy/vllm_cpu.py
        if cpu_colocate and args.vllm_enable_sleep_mode:
            raise ValueError("vllm_enable_sleep_mode=True is not available with vLLM on CPU (vLLM sleeps on CUDA, ROCm "
                             "and XPU only): set it to False.")
        # vLLM's "auto" dtype would run a float32 policy in bfloat16 on CPU: start the engine in the policy's dtype
        engine = (vllm_cpu.engine_arguments(dtype=lambda: vllm_cpu.policy_dtype_name(getattr(self, "model", None)))
                  if cpu_colocate else contextlib.nullcontext())
        with engine:
            super().__init__(model, reward_funcs, args, *pargs, **kwargs)
        warn_if_engine_dropped(self.accelerator, args)  # e.g. an FSDP config with use_cpu: true runs plain DDP
        if cpu_colocate:
            vllm_cpu.patch_colocate_weight_sync(self)  # TRL's sync fails on vLLM's CPU backend
        if self.use_vllm:
            self._ec_stop_vllm_at_every_eos()
        self._init_fault_handling(args)  # guarded reward functions, fault counters (trainers/faults.py)
        self.entropy_control = build_control(args)
        # (Σ H·mask, Σ mask, Σ H_gen·mask, Σ mask where H_gen is known, the two pull sums, Σ mask where A != 0,
        # Σ mask where the last three were counted) over this step's micro-batches
        self._ec_window: torch.Tensor | None = None
        self._ec_pull = (0.0, 0.0, 0.0)  # the last step's global pull sums (entropy_pull_sums) and token count
        self._ec_signal = math.nan  # the last step's global signal fraction (signal_token_count / tokens)
        self._ec_generation_entropy: float | None = None  # the buffered generation batch's mean H_gen (global)
        self._ec_capture = False
        self._ec_captured_entropies: torch.Tensor | None = None
        self._ec_capture_logps = False  # armed by _additive_compute_loss for TRL's loss forward only
        self._ec_captured_logps: torch.Tensor | None = None  # that forward's log-probs, with their gradient
        self._ec_captured_pull_logps: torch.Tensor | None = None  # the loss forward's log-probs, detached
        self._ec_score_capture = False  # armed per generation until the policy's old-log-prob pass has been read
        self._ec_policy_adapter = None  # PEFT: the adapter active while generating (the policy's)
        self._ec_scoring_entropies: torch.Tensor | None = None
        self._ec_all_rejected = 0
        self._ec_saturation = SaturationMonitor(getattr(args, "saturation_window", 20))
        self._ec_warned_saturation = False
        self.entropy_target: float | None = None
        self.entropy_phase: str | None = None
        self.last_measured_entropy: float | None = None
        self.entropy_schedule = None
        self.initial_entropy: float | None = None  # measured on the first generation batch when the schedule needs it
        self._ec_schedule_callback = None
        self.max_entropy = max_entropy(self.model)
        if self.entropy_control is not None and args.entropy_schedule is not None:
            check_targets_below_max_entropy(args, self.max_entropy)
            if args.schedule_needs_initial_entropy:
                self.entropy_schedule = InitialEntropySchedule()  # resolved at the first generation batch
            else:
                self.entropy_schedule = build_schedule(args, None)
            self._ec_schedule_callback = EntropyScheduleCallback(self.entropy_schedule, trainer=self)
            self.add_callback(self._ec_schedule_callback)
        self._ec_plan: dict[int, torch.Tensor] = {}  # micro-batch index (TRL's micro_step) -> planned selection
        self._ec_micro_in_step = 0  # micro-batches of the current optimizer step already computed
        self._ec_warned_split_window = False
        self.entropy_plot_callback = None
        if getattr(args, "entropy_plots", False):
            self.entropy_plot_callback = EntropyPlotCallback()
            self.add_callback(self.entropy_plot_callback)
        if getattr(args, "entropy_measurement", "step") == "generation_batch":
            self._check_generation_batch_measurement()
        # The training loss path, chosen once here (evaluation always takes TRL's), by the name of the method that
        # computes it: None for TRL's `_compute_loss` (no control, or one without token hooks), TRL's loss plus the
        # control's term (`additive_loss_term`: EntroPIC), or our loss path with the control's token hooks.
        self._ec_loss_path: str | None = None
        if self.entropy_control is not None:
            self.entropy_control.rank = self.accelerator.process_index
            self.entropy_control.apply(self)
            if self.entropy_control.uses_token_hooks:
                if getattr(self.entropy_control, "additive_loss_term", False):
                    self._ec_loss_path = "_additive_compute_loss"
                else:
                    # The settings our loss path lacks (e.g. the MoE router auxiliary loss, which depends on the
                    # model, or a loss_type set on the config after it was validated) fail here, not at the first
                    # loss step after the model has generated. Multimodal inputs are only known per batch:
                    # trainer_compute_loss checks again.
                    check_trainer_supported(self)
                    self._ec_loss_path = "_hooked_compute_loss"

    def _ec_stop_vllm_at_every_eos(self) -> None:
        """vLLM ends a completion at the eos ids of the model folder's generation_config.json, TRL's transformers path
        at every id of the model's generation config in memory (``self.eos_token_ids``; e.g. a newline the testbeds
        add): hand vLLM the missing ones as ``stop_token_ids``, so both paths end completions at the same tokens.
        The dict is copied: ``args.generation_kwargs`` stays as the user gave it."""
        generation = self.vllm_generation
        given = dict(generation.generation_kwargs or {})
        stop = list(given.get("stop_token_ids") or [])
        stop += [i for i in self.eos_token_ids if i is not None and i not in stop]
        if stop:
            generation.generation_kwargs = {**given, "stop_token_ids": stop}

    # ------------------------------------------------------------------ schedule (F)
    def set_entropy_target(self, target: float | None, phase: str | None = None) -> None:
        """Called by `EntropyScheduleCallback` at the start of every optimizer step (``None``: no target yet, the
        schedule waits for the initial entropy). Where TRL's adaptive coefficient runs (`trl_adaptive`, or
        `allow_trl_adaptive_entropy`), its `args.entropy_target` follows the schedule too."""
        self.entropy_target = None if target is None else float(target)
        self.entropy_phase = phase
        if target is not None and getattr(self.args, "use_adaptive_entropy", False):
            self.args.entropy_target = float(target)

    def _resolve_initial_entropy(self, output) -> None:
        """At the first training generation batch, when the schedule is relative to the starting entropy: measure
        the token-mean entropy of the whole batch under the current policy (one no-grad forward, summed over
        processes, so every rank resolves the same value), build the schedule and set this step's target."""
        if not isinstance(self.entropy_schedule, InitialEntropySchedule) or self.entropy_schedule.resolved:
            return
        if not self.model.training:
            return
        mask = loss_mask(output)
        # Entrocraft's scoring pass may already hold this batch's entropies: use them (no second forward) and leave
        # them in place for the rollout control, which reads them next.
        captured = self._ec_scoring_entropies
        entropy = self._rollout_entropy(output, mask, "extra_pass" if captured is None else "scoring_pass")
        self._ec_scoring_entropies = captured
        if entropy is None:
            warnings.warn(
                f"Step {self.state.global_step}: the initial entropy could not be measured on this generation batch "
                "(no completion tokens, or not finite); the schedule waits for the next one.",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        self._set_initial_entropy(entropy)
        log_metric(self, METRIC_PREFIX + "initial_entropy", entropy)

    def _set_initial_entropy(self, entropy: float) -> None:
        check_targets_below_max_entropy(self.args, self.max_entropy, entropy)
        self.initial_entropy = float(entropy)
        warn_if_end_looks_like_a_fraction(self.args, self.initial_entropy)
        self.entropy_schedule.resolve(build_schedule(self.args, self.initial_entropy))
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
            self._ec_captured_pull_logps = logps.detach()  # for the pull sums (used only with uses_pull_sums)
        if self._ec_capture_logps:  # TRL's loss forward (its only forward): keep the log-probs with their gradient
            self._ec_capture_logps = False
            self._ec_captured_logps = logps
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

    def _check_generation_batch_measurement(self) -> None:
        """Say once, at construction, where entropy_measurement="generation_batch" changes nothing."""
        if self.entropy_control is None:
            why = "no entropy_control is set, so nothing acts on a measured entropy"
        elif not self._trl_runs_scoring_pass():
            why = (f"each optimizer step covers whole generation batches here (gradient_accumulation_steps="
                   f"{self.args.gradient_accumulation_steps} is a multiple of steps_per_generation="
                   f"{self.args.steps_per_generation} x num_iterations={self.num_iterations}), so the step's own "
                   "reading already is the batch's")
        else:
            return
        warnings.warn(f'entropy_measurement="generation_batch" acts as "step": {why}.', UserWarning, stacklevel=3)

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

    def _pairs_generation_entropy(self) -> bool:
        """Whether this generation batch's per-token entropies at generation are kept for
        ``entropy_measurement="generation_batch"`` (only where TRL runs its old-log-prob forward: otherwise an
        optimizer step covers whole generation batches and its own reading is the batch's)."""
        return (self.entropy_control is not None and self.model.training
                and getattr(self.args, "entropy_measurement", "step") == "generation_batch"
                and self._trl_runs_scoring_pass())

    def _attach_generation_entropies(self, output) -> None:
        """Put the captured per-token entropies at generation into the batch (``ec_generation_entropies``: TRL's
        shuffle and split carry it to each optimizer step with its rows) and record the batch's global mean."""
        entropies = self._ec_scoring_entropies
        mask = loss_mask(output)
        # every rank reaches the reduction, with zeros where it has nothing to pair; a rank without them leaves its
        # steps unpaired, and an unpaired step (summed over ranks) falls back to the step's own reading everywhere
        usable = entropies is not None and entropies.shape == mask.shape
        if usable:
            output["ec_generation_entropies"] = entropies
            sums = entropy_sums(entropies, mask)[:2]
        else:
            sums = torch.zeros(2, device=mask.device)
        totals = self.accelerator.reduce(sums, "sum")
        count = float(totals[1])
        value = float(totals[0]) / count if count > 0 else float("nan")
        self._ec_generation_entropy = value if math.isfinite(value) else None

    def _generate_and_score_completions(self, inputs):
        control = self.entropy_control
        paired = self._pairs_generation_entropy()
        rollouts = control is not None and control.uses_rollouts and self.model.training
        if not rollouts and not paired:
            output = self._check_finite_advantages(super()._generate_and_score_completions(inputs))
            self._resolve_initial_entropy(output)
            return output
        source = self._rollout_entropy_source() if rollouts else None
        self._ec_scoring_entropies = None
        # Armed only when TRL runs the policy's old-log-prob pass (the same condition as TRL's); it comes before the
        # reference pass, and the first policy forward disarms it. Without it, "scoring_pass" falls back to an extra
        # pass in `_rollout_entropy`.
        self._ec_policy_adapter = self._peft_policy_adapter()
        self._ec_score_capture = (paired or source == "scoring_pass") and self._trl_runs_scoring_pass()
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._ec_score_capture = False
        output = self._check_finite_advantages(output)
        if paired:
            self._attach_generation_entropies(output)
        self._resolve_initial_entropy(output)
        if not rollouts:
            self._ec_scoring_entropies = None
            return output
        mask = loss_mask(output)
        entropy = self._rollout_entropy(output, mask, source)
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
        output["ec_entropy_mask"] = mask  # all rollouts, for the measured entropy of the update
        if decision.keep is not None:
            self._apply_keep(output, decision.keep, mask)
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
        for key, value in decision.scalars.items():
            log_metric(self, METRIC_PREFIX + key, value)
        if not decision.counts:
            return
        totals = self._reduce_step_counts(decision.counts)
        for key, value in self.entropy_control.rollout_metrics(totals).items():
            log_metric(self, METRIC_PREFIX + key, value)
        if totals.get("total", 0) > 0 and totals.get("kept", 1) == 0:
            self._ec_all_rejected += 1
            warnings.warn(
                f"Step {self.state.global_step}: every rollout of the generation batch was rejected; this batch "
                "contributes no policy gradient (the loss stays finite). Counted in entropy_control/all_rejected.",
                RuntimeWarning,
                stacklevel=2,
            )
        log_metric(self, METRIC_PREFIX + "all_rejected", float(self._ec_all_rejected))

    # ------------------------------------------------------------------ advantage weights (B, per step)
    def _prepare_inputs(self, generation_batch):
        inputs = super()._prepare_inputs(generation_batch)
        if self.entropy_control is None or not self.model.training:
            return inputs
        if self.entropy_control.needs_step_plan and micro_step(self) not in self._ec_plan:
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
        start = micro_step(self)
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
            mb = buffered_inputs(self)[j % spg]
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
        planned = self._ec_plan.get(micro_step(self)) if control.needs_step_plan else None
        if control.needs_step_plan and planned is None:
            raise RuntimeError(f"no planned token selection for micro-batch {micro_step(self)} (cov_scope='global').")

        def hooks_fn(logps, old, advantages, mask, entropies):
            batch = self._token_batch(logps, old, advantages, mask)  # detached values of this loss forward
            selection = planned
            if planned is _INLINE_PLAN:  # every process is here once this step, in lockstep
                selection = self._plan_window([batch])[0]
            return control.token_hooks(batch, planned=selection)

        return trainer_compute_loss(self, model, inputs, hooks_fn)

    def _additive_compute_loss(self, model, inputs):
        """TRL's own `_compute_loss` plus the control's additive term (`additive_loss_term`, EntroPIC), computed from
        the log-probs of TRL's loss forward, captured with their gradient: no second forward, and the loss and
        gradient of `trainer_compute_loss` with the same hooks (tests/test_token_controls.py)."""
        self._ec_capture_logps = True
        try:
            loss = super()._compute_loss(model, inputs)
            logps = self._ec_captured_logps
        finally:
            self._ec_capture_logps = False
            self._ec_captured_logps = None
        if logps is None:
            raise RuntimeError("TRL's _compute_loss ran no forward through _get_per_token_logps_and_entropies.")
        mask = loss_mask(inputs)
        with torch.no_grad():
            hooks = self.entropy_control.token_hooks(
                self._token_batch(logps.detach(), inputs.get("old_per_token_logps"), inputs["advantages"], mask)
            )
        term = additive_hooks_loss(
            logps,
            inputs,
            hooks,
            importance_sampling_level=self.importance_sampling_level,
            gradient_accumulation_steps=getattr(self, "current_gradient_accumulation_steps", 1),
            training=True,
        )
        return loss if term is None else loss + term

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
        path = self._ec_loss_path if training else None  # chosen in __init__
        try:
            loss = super()._compute_loss(model, inputs) if path is None else getattr(self, path)(model, inputs)
        finally:
            self._ec_capture = False
        if training:
            self._ec_micro_in_step += 1
            entropies, self._ec_captured_entropies = self._ec_captured_entropies, None
            logps, self._ec_captured_pull_logps = self._ec_captured_pull_logps, None
            if entropies is not None:
                mask = inputs.get("ec_entropy_mask")
                if mask is None:
                    mask = inputs["completion_mask"]
                    if "tool_mask" in inputs:
                        mask = mask * inputs["tool_mask"]
                pull = None
                if getattr(control, "uses_pull_sums", False) and logps is not None and logps.shape == mask.shape:
                    weights = policy_token_weights(mask, self.loss_type, self.args.max_completion_length)
                    pull = torch.cat([entropy_pull_sums(logps, entropies, inputs["advantages"], mask, weights),
                                      signal_token_count(inputs["advantages"], mask).reshape(1),
                                      mask.float().sum().reshape(1)])
                self._accumulate_entropy(entropies, mask, inputs.get("ec_generation_entropies"), pull)
            if self.accelerator.sync_gradients:
                self._on_optimizer_step_boundary()
        return loss

    def _accumulate_entropy(self, entropies: torch.Tensor, mask: torch.Tensor, generation=None, pull=None) -> None:
        """Add one micro-batch to the step's sums: `entropy_sums` (4) then `entropy_pull_sums` (2),
        `signal_token_count` and the tokens it counted over (zeros when ``pull`` is None), one vector so that the
        step takes one collective."""
        stats = entropy_sums(entropies, mask, generation)
        stats = torch.cat([stats, torch.zeros(4, dtype=stats.dtype, device=stats.device) if pull is None
                           else pull.to(device=stats.device, dtype=stats.dtype)])
        self._ec_window = stats if self._ec_window is None else self._ec_window + stats

    def _reduce_window(self) -> tuple[float, float, float | None]:
        """All-reduce this step's sums (`_accumulate_entropy`); returns (measured entropy, token count, the
        generation-batch estimate or ``None``), global, and keeps the global pull sums and token count in `_ec_pull`
        and the signal fraction in `_ec_signal`."""
        window = self._ec_window
        if window is None:
            window = torch.zeros(8, device=self.accelerator.device)
        self._ec_window = None
        totals = self.accelerator.reduce(window, reduction="sum").tolist()  # one device-to-host copy
        count = float(totals[1])
        measured = float(totals[0]) / count if count > 0 else float("nan")
        self._ec_pull = (float(totals[4]), float(totals[5]), count)
        # the signal fraction only where every micro-batch counted it (a partial count would read as a low one)
        self._ec_signal = float(totals[6]) / count if count > 0 and abs(totals[7] - count) <= 1e-6 * count else math.nan
        return measured, count, generation_batch_entropy(self._ec_generation_entropy, totals[:4])

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
        measured, count, batch_estimate = self._reduce_window()
        control = self.entropy_control
        if control is not None and control.uses_token_hooks:
            totals = self._reduce_step_counts(control.step_counts())
            for key, value in control.step_metrics(totals).items():
                log_metric(self, METRIC_PREFIX + key, value)
        if not math.isfinite(measured):
            why = "no completion tokens" if count == 0 else "a non-finite entropy"
            warnings.warn(
                f"Step {self.state.global_step}: the measured entropy is undefined ({why}); the entropy control "
                "skips this step and keeps its knob.",
                RuntimeWarning,
                stacklevel=2,
            )
            log_metric(self, METRIC_PREFIX + "skipped_steps", 1.0)
            return
        self.last_measured_entropy = measured
        log_metric(self, METRIC_PREFIX + "measured", measured)
        acted_on = measured  # what the control observes: the step's reading, or the generation-batch estimate
        if batch_estimate is not None:
            acted_on = batch_estimate
            log_metric(self, METRIC_PREFIX + "measured_generation_batch", batch_estimate)
        control = self.entropy_control
        if control is None:
            return
        target = self.entropy_target
        if control.knob_name is not None:
            log_metric(self, METRIC_PREFIX + control.knob_name, control.knob)  # the value used during this step
        if target is not None:
            log_metric(self, METRIC_PREFIX + "target", target)
            if control.follows_target:  # a control that ignores the target has no tracking error, only a reference
                log_metric(self, METRIC_PREFIX + "tracking_error", measured - target)
                log_metric(self, METRIC_PREFIX + "relative_tracking_error", abs(measured - target) / max(target, 1e-8))
        if batch_estimate is not None:
            control.note_step_reading(measured)  # e.g. the bonus's noise cap reads the step's own noise
        if getattr(control, "uses_pull_sums", False):
            control.note_pull(*self._ec_pull)  # the same global sums on every rank
            control.note_signal(self._ec_signal)
        control.observe(acted_on, target)
        for key, value in control.metrics().items():
            log_metric(self, METRIC_PREFIX + key, value)
        if target is not None and control.follows_target:
            self._check_saturation(control, acted_on, target)
        control.apply(self)

    def _check_saturation(self, control, measured: float, target: float) -> None:
        """Log `entropy_control/saturated` and warn the first time the control's knob stays at a limit while the
        error keeps its sign for `saturation_window` steps (the target is out of the knob's reach)."""
        saturated = self._ec_saturation.update(control.limit_push)
        log_metric(self, METRIC_PREFIX + "saturated", float(saturated))
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
            folder = os.path.join(
                output_dir_for_checkpoint(self, trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            self._write_control_state(folder)

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        # The Trainer pushes from inside _save_checkpoint: write the controller state first, so that the checkpoint
        # is complete on disk (and uploaded whole with hub_strategy="checkpoint") even if the upload fails. The
        # upload's failures are tracked by FaultHandlingMixin._push_from_checkpoint (super()).
        self._write_control_state(checkpoint_folder)
        super()._push_from_checkpoint(checkpoint_folder)

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
            # compared at resume: a change moves the target
            "schedule": schedule_record(self.args, self.state.max_steps),
        }
        tmp = os.path.join(folder, CONTROL_STATE_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(payload, f, indent=2)
        os.replace(tmp, os.path.join(folder, CONTROL_STATE_FILE))

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
        warn_if_schedule_changed(checkpoint, payload.get("schedule"), schedule_record(self.args, self.state.max_steps))
        self.entropy_control.load_state_dict(payload["state"])
        self._ec_saturation.load_state_dict(payload.get("saturation", {}))
        self._ec_warned_saturation = self._ec_saturation.events > 0
        self.last_measured_entropy = payload.get("last_measured_entropy")
        initial = payload.get("initial_entropy")
        if initial is not None and isinstance(self.entropy_schedule, InitialEntropySchedule):
            self._set_initial_entropy(float(initial))  # the value the run started from, not a new measurement
        self.entropy_control.apply(self)
