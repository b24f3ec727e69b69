"""`GRPOEntropyTrainer`: TRL's `GRPOTrainer` with entropy controls wired into TRL's own hooks.

This module contains wiring only; the math lives in `trl_entropy.scheduling` and `trl_entropy.losses`.

Hooks used (trl 1.16):
  * knob  (A): controls set attributes TRL's `_compute_loss` reads (e.g. `self.epsilon_high`), only at
    optimizer-step boundaries, so every micro-batch of one step sees the same value;
  * measure (D): the per-token entropies TRL already computes in its loss forward are captured (no extra pass), and
    (Σ entropy·mask, Σ mask) is accumulated over the micro-batches of the optimizer step;
  * control (E): at the step boundary the sums are all-reduced across processes, giving one measured entropy that is
    identical on every rank, and the control updates its knob for the next step;
  * schedule (F): `EntropyScheduleCallback.on_step_begin` sets the target of the step.
"""

from __future__ import annotations

import json
import math
import os
import warnings

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from ..controls import build_control
from ..scheduling.callbacks import EntropyScheduleCallback
from ..scheduling.schedules import make_schedule
from .grpo_entropy_config import GRPOEntropyConfig

__all__ = ["GRPOEntropyTrainer", "CONTROL_STATE_FILE"]

CONTROL_STATE_FILE = "entropy_control_state.json"
METRIC_PREFIX = "entropy_control/"


class GRPOEntropyTrainer(GRPOTrainer):
    """GRPO with a schedulable policy entropy. Takes the same arguments as `trl.GRPOTrainer`.

    With `args.entropy_control="none"` it trains exactly as `GRPOTrainer` (same losses and weights for the same
    seed); it only adds the `entropy_control/measured` metric. With a control, it also logs, each optimizer step,
    `entropy_control/target`, `entropy_control/measured`, the control's knob (e.g. `entropy_control/epsilon_high`),
    `entropy_control/tracking_error` (measured − target) and `entropy_control/relative_tracking_error`.
    """

    _tag_names = ["trl", "grpo", "trl-entropy"]

    def __init__(self, model, reward_funcs, args: GRPOEntropyConfig | None = None, *pargs, **kwargs):
        if args is None:
            model_name = model if isinstance(model, str) else model.config._name_or_path
            args = GRPOEntropyConfig(f"{model_name.split('/')[-1]}-GRPO-entropy")
        elif not isinstance(args, GRPOEntropyConfig):
            raise TypeError(
                f"args must be a GRPOEntropyConfig, got {type(args).__name__}. Build it with the same fields: "
                "GRPOEntropyConfig(**your_grpo_config.to_dict()) works for a plain GRPOConfig."
            )
        super().__init__(model, reward_funcs, args, *pargs, **kwargs)
        self.entropy_control = build_control(args)
        self._ec_window: torch.Tensor | None = None  # (Σ entropy·mask, Σ mask) over this step's micro-batches
        self._ec_capture = False
        self._ec_captured_entropies: torch.Tensor | None = None
        self.entropy_target: float | None = None
        self.entropy_phase: str | None = None
        self.last_measured_entropy: float | None = None
        self.entropy_schedule = None
        if self.entropy_control is not None:
            self.entropy_schedule = make_schedule(
                args.entropy_schedule,
                start=args.entropy_schedule_start,
                end=args.entropy_schedule_end,
                warmup_steps=args.entropy_schedule_warmup_steps,
                anneal_ratio=args.entropy_schedule_anneal_ratio,
            )
            self.add_callback(EntropyScheduleCallback(self.entropy_schedule, trainer=self))
            self.entropy_control.apply(self)

    # ------------------------------------------------------------------ schedule (F)
    def set_entropy_target(self, target: float, phase: str | None = None) -> None:
        """Called by `EntropyScheduleCallback` at the start of every optimizer step."""
        self.entropy_target = float(target)
        self.entropy_phase = phase

    # ------------------------------------------------------------------ measure (D)
    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._ec_capture and entropies is not None:
            self._ec_captured_entropies = entropies.detach()
        return logps, entropies, aux

    def _compute_loss(self, model, inputs):
        training = self.model.training
        self._ec_capture = training
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._ec_capture = False
        if training:
            entropies, self._ec_captured_entropies = self._ec_captured_entropies, None
            if entropies is not None:
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

    # ------------------------------------------------------------------ control (E)
    def _on_optimizer_step_boundary(self) -> None:
        measured, count = self._reduce_window()
        metrics = self._metrics["train"]
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
            metrics[METRIC_PREFIX + "tracking_error"].append(measured - target)
            metrics[METRIC_PREFIX + "relative_tracking_error"].append(abs(measured - target) / max(target, 1e-8))
        control.observe(measured, target)
        for key, value in control.metrics().items():
            metrics[METRIC_PREFIX + key].append(value)
        control.apply(self)

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.entropy_control is None or not self.args.should_save:
            return
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        payload = {
            "entropy_control": self.entropy_control.name,
            "global_step": self.state.global_step,
            "target": self.entropy_target,
            "phase": self.entropy_phase,
            "last_measured_entropy": self.last_measured_entropy,
            "state": self.entropy_control.state_dict(),
        }
        with open(os.path.join(folder, CONTROL_STATE_FILE), "w") as f:
            json.dump(payload, f, indent=2)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
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
        self.entropy_control.load_state_dict(payload["state"])
        self.last_measured_entropy = payload.get("last_measured_entropy")
        self.entropy_control.apply(self)
