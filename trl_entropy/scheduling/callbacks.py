"""TrainerCallbacks that drive target-entropy schedules."""

from __future__ import annotations

from transformers import TrainerCallback

from .schedules import make_schedule

__all__ = ["EntropyScheduleCallback"]


class EntropyScheduleCallback(TrainerCallback):
    """Sets the scheduled target entropy at the start of every optimizer step.

    With a :class:`~trl_entropy.GRPOEntropyTrainer` (``trainer=...``) the target goes to the trainer's active
    control and is logged as ``entropy_control/target``. On a plain TRL ``GRPOTrainer`` (no ``trainer``), it sets
    ``args.entropy_target``, the target of TRL's own adaptive entropy coefficient (``use_adaptive_entropy=True``),
    which TRL reads at every optimizer step — a scheduled Skywork-OR1 coefficient with no other change.

    Args:
        schedule: a schedule object, a callable ``fn(step, total_steps)``, or a schedule name (with ``start`` etc.).
        trainer: optional ``GRPOEntropyTrainer`` that receives the target via ``set_entropy_target``.
    """

    def __init__(self, schedule, trainer=None, **schedule_kwargs):
        self.schedule = make_schedule(schedule, **schedule_kwargs) if isinstance(schedule, str) else make_schedule(schedule)
        self.trainer = trainer
        self.target: float | None = None
        self.phase: str | None = None

    def current(self, state) -> float:
        return self.schedule(state.global_step, state.max_steps)

    def on_train_begin(self, args, state, control, **kwargs):
        self._set(args, state)

    def on_step_begin(self, args, state, control, **kwargs):
        self._set(args, state)

    def _set(self, args, state):
        if not state.max_steps:
            return
        self.target = self.current(state)
        self.phase = self.schedule.phase(state.global_step, state.max_steps)
        if self.trainer is not None:
            self.trainer.set_entropy_target(self.target, self.phase)
        else:
            args.entropy_target = self.target

    def on_log(self, args, state, control, logs=None, **kwargs):
        # For plain trainers, make the target visible next to TRL's own "entropy" in the logs.
        if self.trainer is None and logs is not None and self.target is not None and "loss" in logs:
            logs["entropy_control/target"] = self.target
