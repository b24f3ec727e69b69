"""Which distributed engine a run asked for and which one it got; generation from sharded weights.

accelerate decides the engine from the environment ``accelerate launch`` writes from its config file
(``ACCELERATE_USE_DEEPSPEED``, ``ACCELERATE_USE_FSDP``) or from the training arguments (``deepspeed``, ``fsdp``). It
can drop the request without a word: accelerate 1.15 enables FSDP only on GPU-type devices, so an FSDP config with
``use_cpu: true`` runs plain multi-CPU data parallelism (every process holds every parameter).
:func:`warn_if_engine_dropped` says so when the trainer starts.

:func:`generation_model` is how the package's own generation (:class:`~trl_entropy.evaluation.PassAtKCallback`)
reads the weights: under DeepSpeed ZeRO-3 each process holds a shard of every parameter, and a forward pass gathers
the rest from the other processes, so every process must run the same forward passes or the run hangs.
"""

from __future__ import annotations

import contextlib
import os
import warnings

__all__ = ["requested_engine", "running_engine", "warn_if_engine_dropped", "generation_model"]


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "false").strip().lower() in ("1", "true", "yes")


def requested_engine(args=None) -> str | None:
    """"DeepSpeed" or "FSDP" when the launch (``accelerate launch``'s environment) or the training arguments asked for
    one, else ``None``."""
    if _env_flag("ACCELERATE_USE_DEEPSPEED") or getattr(args, "deepspeed", None):
        return "DeepSpeed"
    if _env_flag("ACCELERATE_USE_FSDP") or getattr(args, "fsdp", None):
        return "FSDP"
    return None


def running_engine(accelerator) -> str:
    """The engine this process runs, in words: "DeepSpeed ZeRO-<stage>", "FSDP<version>", or accelerate's
    distributed type for plain data parallelism ("MULTI_CPU", "MULTI_GPU", "NO", ...)."""
    from accelerate.utils import DistributedType

    kind = accelerator.distributed_type
    if kind == DistributedType.DEEPSPEED:
        plugin = accelerator.state.deepspeed_plugin
        return f"DeepSpeed ZeRO-{getattr(plugin, 'zero_stage', '?')}"
    if kind == DistributedType.FSDP:
        plugin = getattr(accelerator.state, "fsdp_plugin", None)
        return f"FSDP{getattr(plugin, 'fsdp_version', '')}"
    return str(getattr(kind, "value", kind))


def zero_stage(accelerator) -> int:
    """The DeepSpeed ZeRO stage of this run (0 without DeepSpeed)."""
    from accelerate.utils import DistributedType

    if accelerator.distributed_type != DistributedType.DEEPSPEED:
        return 0
    return int(getattr(accelerator.state.deepspeed_plugin, "zero_stage", 0) or 0)


def is_fsdp(accelerator) -> bool:
    """FSDP runs: accelerate's distributed type, or its FSDP plugin on the state (what prepares the model)."""
    from accelerate.utils import DistributedType

    return (accelerator.distributed_type == DistributedType.FSDP
            or getattr(accelerator.state, "fsdp_plugin", None) is not None)


def warn_if_engine_dropped(accelerator, args=None) -> str | None:
    """Warn when the launch asked for DeepSpeed or FSDP and this run is neither (plain data parallelism or a single
    process). Returns the warning's text, or ``None``."""
    asked = requested_engine(args)
    running = running_engine(accelerator)
    if asked is None or running.startswith(asked):
        return None
    cpu = " (accelerate 1.15 enables FSDP on GPU-type devices only; use_cpu: true drops it)" if asked == "FSDP" else ""
    message = (f"The launch asked for {asked}, but this run is plain data parallel (accelerate's distributed_type="
               f"{running}){cpu}: every process holds every parameter, none is sharded. Check the accelerate config "
               "(distributed_type, use_cpu) and that the engine is installed.")
    warnings.warn_explicit(message, UserWarning, filename="trl-entropy", lineno=0, module="trl_entropy")
    return message


@contextlib.contextmanager
def generation_model(trainer):
    """The trainer's model, ready for ``generate`` on this process: yields ``(model, synced)``.

    * ZeRO-3: with ``ds3_gather_for_generation=True`` (TRL's default) the full weights are gathered for the block
      (``trl.models.unwrap_model_for_generation``), else every forward pass gathers shards from the other processes.
      Either way a forward pass still takes part in collectives (DeepSpeed 0.19.8's start-of-forward hook checks its
      step with the other ranks, gathered or not): ``synced`` is ``True``.
    * FSDP: every forward pass gathers shards; ``synced`` is ``True``.
    * Otherwise (DDP, one process) the unwrapped model; ``synced`` is ``False``.

    With ``synced`` (and more than one process) the caller must run the same number of ``generate`` calls on every
    process, each with ``synced_gpus=True``, so that a process with fewer prompts, or whose sequences all ended,
    keeps taking part. Every process must enter the block (gathering is a collective), also one with nothing to
    generate.
    """
    accelerator = trainer.accelerator
    stage = zero_stage(accelerator)
    world = accelerator.num_processes
    if stage == 3:
        from trl.models import unwrap_model_for_generation

        gather = bool(getattr(trainer.args, "ds3_gather_for_generation", True))
        with unwrap_model_for_generation(trainer.model_wrapped, accelerator,
                                         gather_deepspeed3_params=gather) as model:
            yield model, world > 1
        return
    yield accelerator.unwrap_model(trainer.model), (is_fsdp(accelerator) and world > 1)
