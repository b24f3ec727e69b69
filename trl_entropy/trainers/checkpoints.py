"""What `GRPOEntropyTrainer` writes to disk besides TRL's files: the control's state and the run's counters in every
checkpoint (restored on resume), and the model card with its pictures.

Why not transformers' stateful callbacks (`ExportableState`, saved in `trainer_state.json`): transformers restores
them only when `restore_callback_states_from_checkpoint=True` (off by default), by building a new callback from JSON
arguments and attributes, with no way to reach the trainer, the control's knob on it, or the resolved schedule. Resume
must be exact by default, so the state is a file of its own next to TRL's, read in `_load_optimizer_and_scheduler`.
"""

from __future__ import annotations

import json
import os
import warnings

from ..scheduling.targets import InitialEntropySchedule, schedule_record, warn_if_schedule_changed

__all__ = ["CONTROL_STATE_FILE", "COUNTERS", "restore_control_state", "write_card_and_pictures", "write_control_state"]

CONTROL_STATE_FILE = "entropy_control_state.json"

# The run's counters, logged as running totals, that a resume continues (every control, "none" included): whole
# generation batches rejected, non-finite rewards and advantages, generation batches without any reward, and the
# streaks that stop the run or warn.
COUNTERS = ("_ec_all_rejected", "_ec_nonfinite_rewards", "_ec_nonfinite_advantages", "_ec_unscorable_batches",
            "_ec_unscorable_streak", "_ec_flat_streak")


def write_control_state(trainer, folder: str) -> None:
    """`entropy_control_state.json` into a checkpoint folder: the run's counters (`COUNTERS`) and, with a control,
    its state, the step's target and phase, the last measured and the initial entropy, the saturation monitor and
    the schedule (compared at resume)."""
    if not trainer.args.should_save or not os.path.isdir(folder):
        return
    control = trainer.entropy_control
    payload = {
        "entropy_control": control.name if control is not None else "none",
        "global_step": trainer.state.global_step,
        "counters": {name: int(getattr(trainer, name, 0)) for name in COUNTERS},
    }
    if control is not None:
        payload.update(_control_payload(trainer))
    tmp = os.path.join(folder, CONTROL_STATE_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2)
    os.replace(tmp, os.path.join(folder, CONTROL_STATE_FILE))


def _control_payload(trainer) -> dict:
    """The control's part of the checkpoint's state."""
    return {
        "target": trainer.entropy_target,
        "phase": trainer.entropy_phase,
        "last_measured_entropy": trainer.last_measured_entropy,
        "initial_entropy": trainer.initial_entropy,
        "saturation": trainer._ec_saturation.state_dict(),
        "state": trainer.entropy_control.state_dict(),
        # compared at resume: a change moves the target
        "schedule": schedule_record(trainer.args, trainer.state.max_steps),
    }


def restore_control_state(trainer, checkpoint: str) -> None:
    """Read a checkpoint's control state back into the trainer (a warning where the file is missing; an error where
    it was written by another control)."""
    path = os.path.join(checkpoint, CONTROL_STATE_FILE)
    payload = {}
    if os.path.exists(path):
        with open(path) as f:
            payload = json.load(f)
    saved = payload.get("entropy_control", "none")
    current = trainer.entropy_control.name if trainer.entropy_control is not None else "none"
    if saved != current and saved != "none":
        raise ValueError(
            f"The checkpoint {checkpoint} was written with entropy_control={saved!r}, but this run uses "
            f"entropy_control={current!r}. Resume with the same control, or start a new run."
        )
    for name, value in payload.get("counters", {}).items():  # a checkpoint written before they were kept has none
        if name in COUNTERS:
            setattr(trainer, name, int(value))
    if trainer.entropy_control is None:
        return
    if saved == "none":  # no file, or a checkpoint of plain GRPO
        what = f"has no {CONTROL_STATE_FILE}" if not payload else "was written by plain GRPO"
        warnings.warn(
            f"Resuming from {checkpoint}, which {what}: the entropy control {trainer.entropy_control.name!r} starts "
            "from its initial state.",
            UserWarning,
            stacklevel=3,
        )
        return
    # the warning points at the trainer's _load_optimizer_and_scheduler, as before this function was split out
    current = schedule_record(trainer.args, trainer.state.max_steps)
    warn_if_schedule_changed(checkpoint, payload.get("schedule"), current, stacklevel=2)
    trainer.entropy_control.load_state_dict(payload["state"])
    trainer._ec_saturation.load_state_dict(payload.get("saturation", {}))
    trainer._ec_warned_saturation = trainer._ec_saturation.events > 0
    trainer.last_measured_entropy = payload.get("last_measured_entropy")
    initial = payload.get("initial_entropy")
    if initial is not None and isinstance(trainer.entropy_schedule, InitialEntropySchedule):
        trainer._set_initial_entropy(float(initial))  # the value the run started from, not a new measurement
    trainer.entropy_control.apply(trainer)


def write_card_and_pictures(trainer, folder: str, model_name: str | None = None) -> None:
    """Pictures (if `entropy_plots`) and README.md into `folder`; main process only; never raises on I/O."""
    if not trainer.is_world_process_zero():
        return
    from ..evaluation import write_training_plots
    from ..model_card import render_model_card

    try:
        os.makedirs(folder, exist_ok=True)
        if getattr(trainer.args, "entropy_plots", False):
            try:
                write_training_plots(trainer.state.log_history, folder)
            except ImportError:
                pass  # matplotlib missing: the card simply has no picture
        card = render_model_card(trainer, model_name=model_name, output_dir=folder)
        tmp = os.path.join(folder, "README.md.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(card)
        os.replace(tmp, os.path.join(folder, "README.md"))
    except OSError as err:
        warnings.warn(f"Could not write the model card into {folder}: {err}", RuntimeWarning, stacklevel=2)
