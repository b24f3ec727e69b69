"""`GRPOEntropyTrainer`: TRL's `GRPOTrainer` with entropy controls wired into TRL's own hooks.

Wiring only. The math lives in `trl_entropy.scheduling` and `trl_entropy.losses`; the training loss path (TRL's, TRL's
plus an additive term, or ours with token hooks) in `trl_entropy.losses.loss_path`, chosen when the trainer is built;
the entropy target in `trl_entropy.scheduling.targets`; the control state in checkpoints and the model card in
`trl_entropy.trainers.checkpoints`; the generic fault handling in `trl_entropy.trainers.faults`
(`FaultHandlingMixin`, inherited before `GRPOTrainer`). The hooks into TRL (knob, measure, control, schedule,
rollouts, advantage weights, token hooks) are described in docs/architecture.md; each TRL method overridden here or
there is listed, with the reason it exists, in `trl_entropy._trl_private.OVERRIDDEN_METHODS` (checked by
tests/test_trl_drift.py).
"""

from __future__ import annotations

import inspect
import math
import os
import warnings

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from .. import vllm_cpu
from .._paths import check_model_path
from .._trl_private import log_metric, model_name_or_path, output_dir_for_checkpoint
from ..controls import RolloutContext, build_control
from ..engines import warn_if_engine_dropped
from ..evaluation import EntropyPlotCallback
from ..losses.covariance import wide_float_dtype
from ..losses.loss_path import build_loss_path
from ..losses.policy_loss import loss_mask
from ..losses.rejection import reject_rollouts
from ..scheduling.callbacks import EntropyScheduleCallback
from ..scheduling.controllers import SaturationMonitor
from ..scheduling.measurement import (
    entropy_sums,
    generation_batch_entropy,
    global_mean_and_error,
    global_token_mean,
    measurement_standard_error,
    sequence_spread_sums,
    signal_token_count,
)
from ..scheduling.targets import (
    InitialEntropySchedule,
    build_schedule,
    check_targets_below_max_entropy,
    max_entropy,
    initial_entropy_metrics,
    warn_if_end_looks_like_a_fraction,
)
from .answers import AnswerDiversityMixin, outcome_entropy_sums
from .checkpoints import CONTROL_STATE_FILE, restore_control_state, write_card_and_pictures, write_control_state
from .faults import (  # noqa: F401  (check_reward_output, check_train_dataset: importable from here too)
    METRIC_PREFIX,
    FaultHandlingMixin,
    check_reward_output,
    check_train_dataset,
)
from .grpo_entropy_config import GRPOEntropyConfig
from .initial_entropy import precise_initial_entropy
from .passes import is_policy_forward, peft_active_adapter

__all__ = ["GRPOEntropyTrainer", "CONTROL_STATE_FILE"]


def _clean_warning(message: str, category=RuntimeWarning) -> None:
    """Warn without the source line Python prints under a warning (which lands in the middle of a progress bar):
    one line, ``trl-entropy: <Category>: <message>``, still filtered and caught as any warning."""
    warnings.warn_explicit(message, category, filename="trl-entropy", lineno=0, module="trl_entropy")


class GRPOEntropyTrainer(AnswerDiversityMixin, FaultHandlingMixin, GRPOTrainer):
    """GRPO with a schedulable policy entropy. Takes the same arguments as `trl.GRPOTrainer`.

    With `args.entropy_control="none"` it trains exactly as `GRPOTrainer` (same losses and weights for the same
    seed); it only adds metrics (`entropy_control/measured`, its error, the answers' diversity). With a control it
    logs each step `entropy_control/target`, `entropy_control/measured`, the knob (e.g. `entropy_control/epsilon_high`);
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
        answer_extractor=None,
    ):
        """`trl.GRPOTrainer`'s arguments in its order (TRL 1.16), `args` a `GRPOEntropyConfig`; `answer_extractor`:
        a function completion -> hashable answer for the answer-diversity metrics (trainers/answers.py)."""
        kwargs = dict(train_dataset=train_dataset, eval_dataset=eval_dataset, processing_class=processing_class,
                      reward_processing_classes=reward_processing_classes, callbacks=callbacks, optimizers=optimizers,
                      quantization_config=quantization_config, peft_config=peft_config, tools=tools,
                      rollout_func=rollout_func, environment_factory=environment_factory)
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
            bound = inspect.signature(GRPOTrainer.__init__).bind(self, model, reward_funcs, args, **kwargs)
        except TypeError:
            bound = None  # GRPOTrainer raises its own error for the arguments
        if bound is not None:
            check_train_dataset(bound.arguments.get("train_dataset"), args)  # before the model is loaded
        with vllm_cpu.engine_for(self, args):  # colocated vLLM on CPU: trl_entropy/vllm_cpu.py
            super().__init__(model, reward_funcs, args, **kwargs)
        warn_if_engine_dropped(self.accelerator, args)  # e.g. an FSDP config with use_cpu: true runs plain DDP
        if vllm_cpu.wants_cpu_colocate(args):
            vllm_cpu.patch_colocate_weight_sync(self)  # TRL's sync fails on vLLM's CPU backend
        if self.use_vllm:
            vllm_cpu.stop_at_every_eos(self)
        self._init_fault_handling(args)  # guarded reward functions, fault counters (trainers/faults.py)
        self._init_answer_metrics(args, answer_extractor)  # trainers/answers.py
        self.entropy_control = build_control(args)
        # this step's sums over its micro-batches, one vector (their layout: _accumulate_entropy)
        self._ec_window: torch.Tensor | None = None
        self._ec_measured_se: float | None = None  # the step reading's standard error (measurement_standard_error)
        self._ec_signal = math.nan  # the last step's global signal fraction (signal_token_count / tokens)
        self._ec_generation_entropy: float | None = None  # the buffered generation batch's mean H_gen (global)
        self._ec_capture = False
        self._ec_captured_entropies: torch.Tensor | None = None
        self._ec_score_capture = False  # armed per generation until the policy's old-log-prob pass has been read
        self._ec_policy_adapter = None  # PEFT: the adapter active while generating (the policy's)
        self._ec_scoring_entropies: torch.Tensor | None = None
        self._ec_all_rejected = 0
        self._ec_saving_checkpoint = False  # inside _save_checkpoint: the card is written already
        self._ec_saturation = SaturationMonitor(getattr(args, "saturation_window", 3))
        self._ec_warned_saturation = False
        self.entropy_target: float | None = None
        self.entropy_phase: str | None = None
        self.last_measured_entropy: float | None = None
        self.entropy_schedule = None
        self.initial_entropy: float | None = None  # measured on the first generation batch when the schedule needs it
        self.initial_entropy_se, self._ec_rollout_se = None, (None, 0.0)  # its standard error
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
        self.entropy_plot_callback = None
        if getattr(args, "entropy_plots", False):
            self.entropy_plot_callback = EntropyPlotCallback()
            self.add_callback(self.entropy_plot_callback)
        if getattr(args, "entropy_measurement", "step") == "generation_batch":
            self._check_generation_batch_measurement()
        if self.entropy_control is not None:
            self.entropy_control.rank = self.accelerator.process_index
            self.entropy_control.apply(self)
        # The training loss path, chosen once here (evaluation always takes TRL's): trl_entropy/losses/loss_path.py
        self._ec_loss = build_loss_path(self)

    # ------------------------------------------------------------------ schedule (F)
    def set_entropy_target(self, target: float | None, phase: str | None = None) -> None:
        """Called by `EntropyScheduleCallback` at the start of every optimizer step (``None``: no target yet, the
        schedule waits for the initial entropy). Where TRL's adaptive coefficient runs (`trl_adaptive`, or
        `allow_trl_adaptive_entropy`), its `args.entropy_target` follows the schedule too."""
        self.entropy_target = None if target is None else float(target)
        self.entropy_phase = phase
        if target is not None and getattr(self.args, "use_adaptive_entropy", False):
            self.args.entropy_target = float(target)

    def _resolve_initial_entropy(self, output, inputs=None) -> None:
        """At the first training generation batch, when the schedule is relative to the starting entropy: measure
        the token-mean entropy of the whole batch under the current policy (one no-grad forward, summed over
        processes, so every rank resolves the same value), to a stated precision (`precise_initial_entropy`: more
        rounds aside on the batch's prompts while needed), build the schedule and set this step's target."""
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
            warnings.warn(f"Step {self.state.global_step}: the initial entropy could not be measured on this "
                          "generation batch (no completion tokens, or not finite); the schedule waits for the next.",
                          RuntimeWarning, stacklevel=2)
            return
        entropy, self.initial_entropy_se, rounds = precise_initial_entropy(self, inputs, entropy, *self._ec_rollout_se)
        self._set_initial_entropy(entropy)
        for key, value in initial_entropy_metrics(entropy, self.initial_entropy_se, rounds).items():
            log_metric(self, METRIC_PREFIX + key, value)

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
        if self._ec_score_capture and is_policy_forward(self, model, self._ec_policy_adapter):
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
        self._ec_loss.saw_forward(logps)  # the additive path keeps its loss forward's log-probs, with their gradient
        return logps, entropies, aux

    def _trl_compute_loss(self, model, inputs):
        """TRL's own `_compute_loss`, for the loss path (trl_entropy/losses/loss_path.py)."""
        return super()._compute_loss(model, inputs)

    def _trl_logps_and_entropies(self, *args, **kwargs):
        """TRL's own `_get_per_token_logps_and_entropies`, without this trainer's entropy capture."""
        return super()._get_per_token_logps_and_entropies(*args, **kwargs)

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
        self._ec_generation_entropy = global_token_mean(entropies if usable else None, mask, self.accelerator.reduce)

    def _generate_and_score_completions(self, inputs):
        control = self.entropy_control
        paired = self._pairs_generation_entropy()
        rollouts = control is not None and control.uses_rollouts and self.model.training
        if not rollouts and not paired:
            output = self._check_finite_advantages(super()._generate_and_score_completions(inputs))
            self._resolve_initial_entropy(output, inputs)
            return output
        source = self._rollout_entropy_source() if rollouts else None
        self._ec_scoring_entropies = None
        # Armed only when TRL runs the policy's old-log-prob pass (the same condition as TRL's); it comes before the
        # reference pass, and the first policy forward disarms it. Without it, "scoring_pass" falls back to an extra
        # pass in `_rollout_entropy`.
        self._ec_policy_adapter = peft_active_adapter(self)
        self._ec_score_capture = (paired or source == "scoring_pass") and self._trl_runs_scoring_pass()
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._ec_score_capture = False
        output = self._check_finite_advantages(output)
        if paired:
            self._attach_generation_entropies(output)
        self._resolve_initial_entropy(output, inputs)
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
        entropy, *self._ec_rollout_se = global_mean_and_error(entropies, loss_mask, self.accelerator.reduce)
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
        kept_tokens = reject_rollouts(output, keep, loss_mask, getattr(self.args, "entrocraft_normalizer", "kept"))
        if kept_tokens is not None:  # the kept rollouts' tokens normalise the loss
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
        self._ec_loss.before_micro_batch()
        return self._transform_micro_batch(inputs)

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
            loss = self._ec_loss.compute(model, inputs) if training else super()._compute_loss(model, inputs)
        finally:
            self._ec_capture = False
        if training:
            entropies, self._ec_captured_entropies = self._ec_captured_entropies, None
            if entropies is not None:
                mask = inputs.get("ec_entropy_mask")
                mask = loss_mask(inputs) if mask is None else mask
                signal = None
                if getattr(control, "uses_signal_fraction", False):  # the control is told the step's signal fraction
                    signal = torch.stack([signal_token_count(inputs["advantages"], mask), mask.float().sum()])
                self._accumulate_entropy(entropies, mask, inputs.get("ec_generation_entropies"), signal,
                                         solved=inputs.get("ec_group_solved"))
            if self.accelerator.sync_gradients:
                self._on_optimizer_step_boundary()
        return loss

    def _accumulate_entropy(self, entropies, mask, generation=None, signal=None, solved=None) -> None:
        """Add one micro-batch to the step's sums, one vector so that the step takes one collective: `entropy_sums`
        (4), ``signal`` (`signal_token_count` and its token count; zeros when None), `sequence_spread_sums` (4),
        `outcome_entropy_sums` (4, by the rows' ``solved`` flags: trainers/answers.py)."""
        stats = entropy_sums(entropies, mask, generation)
        parts = (torch.zeros(2) if signal is None else signal, sequence_spread_sums(entropies, mask),
                 outcome_entropy_sums(entropies, mask, solved))
        stats = torch.cat([stats, *(part.to(device=stats.device, dtype=stats.dtype) for part in parts)])
        self._ec_window = stats if self._ec_window is None else self._ec_window + stats

    def _reduce_window(self) -> tuple[float, float, float | None]:
        """All-reduce this step's sums (`_accumulate_entropy`); returns (measured entropy, token count, the
        generation-batch estimate or ``None``), global, and keeps the signal fraction in `_ec_signal`."""
        window = self._ec_window
        if window is None:
            window = torch.zeros(14, device=self.accelerator.device)
        self._ec_window = None
        totals = self.accelerator.reduce(window, reduction="sum").tolist()  # one device-to-host copy
        count = float(totals[1])
        measured = float(totals[0]) / count if count > 0 else float("nan")
        # the signal fraction only where every micro-batch counted it (a partial count would read as a low one)
        self._ec_signal = float(totals[4]) / count if count > 0 and abs(totals[5] - count) <= 1e-6 * count else math.nan
        self._ec_measured_se = measurement_standard_error(measured, count, totals[6:10])
        self._log_outcome_entropy(totals[10:14])  # trainers/answers.py: the token entropy of solved, unsolved groups
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
        self._ec_loss.end_step()
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
        if self._ec_measured_se is not None:
            log_metric(self, METRIC_PREFIX + "measured_se", self._ec_measured_se)
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
        if getattr(control, "uses_signal_fraction", False):
            control.note_signal(self._ec_signal)  # the same global fraction on every rank
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
            _clean_warning(self._ec_saturation.message(self.state.global_step, control.name, control.knob_name,
                                                       control.knob, measured, target), RuntimeWarning)

    # ------------------------------------------------------------------ model card, pictures, Hub
    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None, tags=None):
        """Writes trl-entropy's model card (method, parameters, schedule, outcome, pictures, citations) to
        `output_dir/README.md`; called by `push_to_hub` (and by TRL's checkpoint save, where `_save_checkpoint` has
        just written them: not again)."""
        if self._ec_saving_checkpoint:
            return
        write_card_and_pictures(self, self.args.output_dir, model_name=model_name)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call=_internal_call)
        if not _internal_call:  # a user's save_model(): the folder gets the card and pictures too
            write_card_and_pictures(self, output_dir or self.args.output_dir)

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, model, trial):
        if self.args.should_save:
            # before the Trainer's checkpoint push, which uploads output_dir: card and pictures go with every save,
            # once (the model card TRL's own _save_checkpoint asks for, through create_model_card, is this one)
            name = self.args.hub_model_id.split("/")[-1] if self.args.hub_model_id else None
            write_card_and_pictures(self, self.args.output_dir, model_name=name)
        self._ec_saving_checkpoint = True
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._ec_saving_checkpoint = False
        if self.args.should_save:
            folder = os.path.join(
                output_dir_for_checkpoint(self, trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            write_control_state(self, folder)

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        # The Trainer pushes from inside _save_checkpoint: write the controller state first, so that the checkpoint
        # is complete on disk (and uploaded whole with hub_strategy="checkpoint") even if the upload fails. The
        # upload's failures are tracked by FaultHandlingMixin._push_from_checkpoint (super()).
        write_control_state(self, checkpoint_folder)
        super()._push_from_checkpoint(checkpoint_folder)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        self._check_resume_round_boundary(checkpoint)
        restore_control_state(self, checkpoint)
