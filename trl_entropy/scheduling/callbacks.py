"""TrainerCallbacks that drive target-entropy schedules."""

from __future__ import annotations

from transformers import TrainerCallback

from .._trl_private import has_metrics, log_metric
from .schedules import make_schedule

__all__ = ["EntropyScheduleCallback"]


class EntropyScheduleCallback(TrainerCallback):
    """Sets the scheduled target entropy at the start of every optimizer step.

    With a :class:`~trl_entropy.GRPOEntropyTrainer` the target goes to the trainer's active control (the trainer
    adds this callback itself). On a plain TRL ``GRPOTrainer`` it sets ``args.entropy_target``, the target of TRL's
    own adaptive entropy coefficient (``use_adaptive_entropy=True``), which TRL reads at every optimizer step: a
    scheduled Skywork-OR1 coefficient with no other change. Pass ``trainer=`` to also log
    ``entropy_control/target`` through the trainer's metrics::

        trainer.add_callback(EntropyScheduleCallback("cosine", trainer=trainer, start=0.6, end=0.2))

    Args:
        schedule: a schedule object, a callable ``fn(step, total_steps)``, or a schedule name (with ``start`` etc.).
        trainer: the trainer; optional for plain TRL trainers (then nothing is logged).
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
        if hasattr(self.trainer, "set_entropy_target"):
            self.trainer.set_entropy_target(self.target, self.phase)
            return
        args.entropy_target = self.target
        if has_metrics(self.trainer):  # a plain TRL trainer: log the target next to TRL's own "entropy"
            log_metric(self.trainer, "entropy_control/target", self.target)
