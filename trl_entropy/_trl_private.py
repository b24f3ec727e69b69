"""Every read or write of a private TRL name by trl-entropy's trainer, in one place.

TRL 1.16's `GRPOTrainer` keeps some of its state in private attributes that the entropy controls must set. A TRL
upgrade that renames them is this file's work; `tests/test_trl_drift.py` checks that each name still exists.

Two inventories, for that upgrade:

* :data:`OVERRIDDEN_METHODS`: the methods of `trl.GRPOTrainer` (and its bases `_BaseTrainer`, `transformers.Trainer`)
  that `GRPOEntropyTrainer` overrides;
* :data:`USED_PRIVATE_NAMES`: every private method or attribute of TRL or transformers that the package calls, reads,
  writes or replaces (the `_ec_` attributes and the private helpers defined in `trl_entropy` are ours, not listed).

`tests/test_trl_drift.py` checks them against the installed TRL: each name still exists, each method keeps the
parameters recorded for it (and the class that defines it), each private instance attribute is still set by the
`__init__` recorded for it, `GRPOEntropyTrainer` overrides nothing that is not listed, and the package uses no private
TRL/transformers name that is not listed. It also fingerprints `GRPOTrainer._compute_loss`, which
`trl_entropy/losses/policy_loss.py` mirrors. After a TRL upgrade, fix what it names, then re-record its values with
``TRL_ENTROPY_RECORD_DRIFT=1 pytest tests/test_trl_drift.py`` (or ``python tests/test_trl_drift.py``).
"""

from __future__ import annotations

__all__ = [
    "OVERRIDDEN_METHODS",
    "PRIVATE_ATTRIBUTES",
    "USED_PRIVATE_NAMES",
    "entropy_bonus_enabled",
    "set_entropy_coefficient",
]

# Instance attributes of trl.GRPOTrainer that trl-entropy reads or writes (set in GRPOTrainer.__init__).
PRIVATE_ATTRIBUTES = ("_entropy_bonus_enabled",)

#: Methods of trl.GRPOTrainer (or of a base: TRL's `_BaseTrainer`, transformers' `Trainer`) that GRPOEntropyTrainer
#: (trl_entropy/trainers/grpo_entropy_trainer.py) or the mixin it inherits before GRPOTrainer (FaultHandlingMixin,
#: trl_entropy/trainers/faults.py) overrides. Each override calls the base method through `super()`, so it depends on
#: the base's parameters (recorded in tests/test_trl_drift.py) as well as on its existence.
OVERRIDDEN_METHODS = (
    "__init__",  # GRPOTrainer: binds GRPOTrainer.__init__'s signature to check train_dataset before the model loads
    "_get_per_token_logps_and_entropies",  # GRPOTrainer: captures the loss forward's and the scoring pass's entropies
    "_generate_and_score_completions",  # GRPOTrainer: rollout controls (Entrocraft), non-finite advantages
    "_calculate_rewards",  # GRPOTrainer (in faults.py): unscorable-batch checks around TRL's reward computation
    "_prepare_inputs",  # GRPOTrainer: per-micro-batch advantage weights and the global token plan (cov_scope)
    "_compute_loss",  # GRPOTrainer: token hooks (policy_loss.trainer_compute_loss) and the per-step entropy window
    "_save_checkpoint",  # GRPOTrainer (over Trainer): model card and entropy_control_state.json in each checkpoint
    "_push_from_checkpoint",  # transformers Trainer: control state before the upload; faults.py keeps the futures
    "_finish_current_push",  # transformers Trainer (faults.py): after waiting for the uploads, warns about failed ones
    "init_hf_repo",  # transformers Trainer (faults.py): one short error when the Hub repo cannot be created or reached
    "_load_optimizer_and_scheduler",  # GRPOTrainer (over Trainer): restores the control state on resume
    "create_model_card",  # TRL _BaseTrainer: trl-entropy's model card instead of TRL's
    "save_model",  # transformers Trainer: card and pictures; passes Trainer's private `_internal_call` parameter
)

#: Every private method or attribute of TRL or transformers that trl_entropy calls, reads, writes or replaces.
USED_PRIVATE_NAMES = (
    # -- methods of trl.GRPOTrainer
    "_compute_loss",  # overridden + super() in trainers/grpo_entropy_trainer.py; mirrored by losses/policy_loss.py
    "_get_per_token_logps_and_entropies",  # losses/policy_loss.py trainer_compute_loss; grpo_entropy_trainer.py
    "_generate_and_score_completions",  # overridden + super() in grpo_entropy_trainer.py (called by _prepare_inputs)
    "_calculate_rewards",  # overridden + super() in trainers/faults.py (FaultHandlingMixin)
    "_prepare_inputs",  # overridden + super() in grpo_entropy_trainer.py
    "_get_train_sampler",  # replaced on the trainer instance by scheduling/curriculum.py (attach: its own sampler)
    # -- methods of transformers.Trainer (GRPOTrainer overrides some of them)
    "_save_checkpoint",  # overridden + super() in grpo_entropy_trainer.py
    "_push_from_checkpoint",  # overridden + super() in grpo_entropy_trainer.py and faults.py (Trainer._save_checkpoint)
    "_finish_current_push",  # overridden + super() in faults.py (end of train(), push_to_hub())
    "_load_optimizer_and_scheduler",  # overridden + super() in grpo_entropy_trainer.py
    "_get_output_dir",  # called in grpo_entropy_trainer.py _save_checkpoint, for the checkpoint folder
    # -- instance attributes set in GRPOTrainer.__init__
    "_metrics",  # appended to: grpo_entropy_trainer.py, faults.py, policy_loss.py, callbacks.py, curriculum.py
    "_step",  # TRL's micro-batch counter, read in grpo_entropy_trainer.py (token plan, _hooked_compute_loss)
    "_buffered_inputs",  # read in grpo_entropy_trainer.py _plan_token_selection; set to None in curriculum.py
    "_entropy_bonus_enabled",  # set and read here, for controls.py and losses/policy_loss.py (TRL's entropy term)
    # -- class attributes
    "_tag_names",  # TRL _BaseTrainer/GRPOTrainer model-card tags; overridden by GRPOEntropyTrainer._tag_names
    # -- transformers.PretrainedConfig
    "_name_or_path",  # model.config's: grpo_entropy_trainer.py __init__ (default output_dir name) and model_card.py
)


def set_entropy_coefficient(trainer, value: float) -> None:
    """Make TRL's loss apply ``- value * H`` from the next micro-batch on, whatever the sign of ``value``.

    TRL adds its entropy term (with gradient through the entropies) only when ``_entropy_bonus_enabled``, which its
    ``__init__`` fixes from the config (``entropy_coef != 0 or use_adaptive_entropy``); a control that moves the
    coefficient from 0 must switch it on. Without ``use_adaptive_entropy`` TRL applies ``self.entropy_coef`` as is
    (no gating), so a negative value is a penalty.
    """
    trainer.entropy_coef = float(value)
    trainer._entropy_bonus_enabled = True


def entropy_bonus_enabled(trainer) -> bool:
    return bool(getattr(trainer, "_entropy_bonus_enabled", False))
