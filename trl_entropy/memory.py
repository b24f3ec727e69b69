"""Memory per GPU of a GRPO run, estimated from the model's size and shape, the engine and the dtype.

What a recipe needs from the hardware it names: docs/cli.md ("Recipes") shows the estimate of each shipped recipe, and
`tests/test_memory.py` fails when one exceeds its hardware. Pure arithmetic, in GB (10^9 bytes), for full fine-tuning
with AdamW; ``P`` parameters, ``b`` bytes per weight (2 in bfloat16, 4 in float32), ``N`` GPUs that shard:

============ ================== ====================================== ===========================================
engine       weights            gradients                              optimizer state
============ ================== ====================================== ===========================================
``single``   ``b P``            ``b P``                                ``2 b P`` (torch's AdamW keeps its two
                                                                       moments in the weights' dtype)
``ddp``      ``b P``            ``2 b P`` (the gradients and DDP's      ``2 b P``
                                bucket copy of them)
``zero1``    ``b P``            ``b P + 4 P / N`` (a float32 copy of    ``12 P / N`` (float32 master weights and
                                this GPU's partition for the step)      two float32 moments)
``zero2``    ``b P``            ``(b + 4) P / N``                      ``12 P / N``
``zero3``    ``b P / N``        ``(b + 4) P / N``                      ``12 P / N``
``fsdp``     ``4 P / N``        ``4 P / N``                            ``8 P / N`` (accelerate keeps FSDP's
             (accelerate                                               parameters in float32 under bf16 mixed
             upcasts to                                                precision)
             float32)
============ ================== ====================================== ===========================================

On top of those, each a stated allowance (:data:`ALLOWANCES`), not a measurement:

* **engine buffers**: DeepSpeed's buckets (ZeRO-1/2: reduce and all-gather buckets of 5·10^8 elements each in
  bfloat16, 2 GB), ZeRO-3's live gathered parameters (``stage3_max_live_parameters`` 10^9 in bfloat16, plus buckets:
  3 GB), FSDP's gathered unit and prefetch (2 GB);
* **reference model** (``beta > 0``): its weights in the model's dtype, sharded under ZeRO-3 and FSDP;
* **activations** of one micro-batch of ``per_device_train_batch_size`` sequences of ``prompt + completion`` tokens
  (``T`` tokens, bfloat16 or the model's dtype): with gradient checkpointing, each layer's input
  (``T × hidden × layers``) plus one layer recomputed with its gradients (``T × (10 hidden + 6 intermediate)``);
  without it, the second term for every layer; plus 2 GB for TRL's fused LM head (it projects to the vocabulary in
  tiles, never the whole ``T × vocabulary``) and the loss;
* **vLLM, colocated**: the share ``vllm_gpu_memory_utilization × capacity`` it takes when it starts. The share must
  hold vLLM's own bfloat16 copy of the weights (``2 P`` / tensor-parallel size), 2 GB for its activations and CUDA
  graphs, and the KV cache of at least one sequence of ``vllm_max_model_length`` tokens (the model's own context
  length when unset); a server on other GPUs takes nothing here;
* **fixed**: 4 GB for the CUDA context, NCCL and the allocator's fragmentation.

The estimate counts the base model's parameters as trained (full fine-tuning); LoRA would need far less. The entropy
controls add per-token vectors only (``benchmarks/gpu_check.py`` reports their peak memory against plain
``GRPOTrainer``).
"""

from __future__ import annotations

import dataclasses
import math
import re

__all__ = [
    "ALLOWANCES",
    "ENGINES",
    "GB",
    "MODEL_SHAPES",
    "PROMPT_TOKENS",
    "PROMPT_TOKENS_BY_DATASET",
    "Hardware",
    "MemoryEstimate",
    "ModelShape",
    "activation_gb",
    "engine_from_accelerate_config",
    "estimate",
    "estimate_recipe",
    "kv_cache_gb",
    "parse_hardware",
    "recipe_launch_config",
    "training_state_gb",
]

GB = 1e9
ENGINES = ("single", "ddp", "zero1", "zero2", "zero3", "fsdp")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

#: The stated allowances, in GB (module docstring).
ALLOWANCES = {
    "buffers": {"single": 0.0, "ddp": 0.0, "zero1": 2.0, "zero2": 2.0, "zero3": 3.0, "fsdp": 2.0},
    "lm_head_and_loss": 2.0,
    "vllm_working": 2.0,
    "fixed": 4.0,
}
#: Prompt tokens assumed per sequence when a recipe sets no ``vllm_max_model_length`` (TRL 1.16 has no prompt limit).
PROMPT_TOKENS = 1024
#: Prompt tokens of the testbeds' datasets, upper bounds (tests/test_memory.py checks them against the prompts).
PROMPT_TOKENS_BY_DATASET = {"testbed": 16, "smollm2_addition": 64, "smollm2_addition_hard": 64}


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a model: its parameter count and the sizes that set activations and KV cache."""

    params: float
    hidden_size: int
    num_layers: int
    intermediate_size: int
    num_kv_heads: int
    head_dim: int
    max_positions: int


#: The models the shipped recipes name (their configs on the Hub; parameters counted with the embeddings).
MODEL_SHAPES = {
    "Qwen/Qwen2.5-7B": ModelShape(7.62e9, 3584, 28, 18944, 4, 128, 131072),
    "Qwen/Qwen2.5-Math-7B": ModelShape(7.62e9, 3584, 28, 18944, 4, 128, 4096),
    "Qwen/Qwen3-4B-Base": ModelShape(4.02e9, 2560, 36, 9728, 8, 128, 32768),
    "smollm2": ModelShape(1.35e8, 576, 30, 1536, 3, 64, 8192),  # SmolLM2-135M-Instruct (trl_entropy.testbeds)
    # the tiny testbed models (trl_entropy.demo.testbed): well under 10^6 parameters, counted as 10^6
    "testbed": ModelShape(1e6, 64, 2, 128, 2, 16, 64),
    "testbed_headroom": ModelShape(1e6, 64, 2, 128, 2, 16, 64),
}


@dataclasses.dataclass(frozen=True)
class Hardware:
    """``gpus`` devices of ``gb_each`` GB (``gpus == 0``: a CPU machine with ``gb_each`` GB of memory)."""

    gpus: int
    gb_each: float

    def __str__(self) -> str:
        return f"{self.gpus} GPUs, {self.gb_each:g} GB each" if self.gpus else f"CPU, {self.gb_each:g} GB memory"


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Per device, in GB. ``vllm`` is the share colocated vLLM takes (0 without it); ``kv_tokens`` the tokens its KV
    cache holds after its weights and working allowance (None without vLLM)."""

    engine: str
    weights: float
    gradients: float
    optimizer: float
    buffers: float
    reference: float
    activations: float
    vllm: float
    fixed: float
    capacity: float
    kv_tokens: int | None = None
    kv_tokens_needed: int | None = None

    @property
    def training(self) -> float:
        """Weights, gradients and optimizer state."""
        return self.weights + self.gradients + self.optimizer

    @property
    def total(self) -> float:
        return (self.training + self.buffers + self.reference + self.activations + self.vllm + self.fixed)

    @property
    def fits(self) -> bool:
        """Within capacity, and (colocated vLLM) the share holds at least one full-length sequence's KV cache."""
        kv_ok = self.kv_tokens is None or self.kv_tokens >= (self.kv_tokens_needed or 0)
        return self.total <= self.capacity and kv_ok

    def problems(self) -> list[str]:
        out = []
        if self.total > self.capacity:
            out.append(f"needs {self.total:.1f} GB per device, {self.capacity:g} GB there ({self.summary()})")
        if self.kv_tokens is not None and self.kv_tokens < (self.kv_tokens_needed or 0):
            out.append(f"vLLM's share ({self.vllm:.1f} GB) leaves KV cache for {self.kv_tokens} tokens, fewer than one "
                       f"sequence of {self.kv_tokens_needed}: raise vllm_gpu_memory_utilization or set a smaller "
                       "vllm_max_model_length")
        return out

    def summary(self) -> str:
        parts = [f"weights+grads+optimizer {self.training:.1f}", f"buffers {self.buffers:.1f}"]
        if self.reference:
            parts.append(f"reference {self.reference:.1f}")
        parts.append(f"activations {self.activations:.1f}")
        if self.vllm:
            parts.append(f"vLLM {self.vllm:.1f}")
        parts.append(f"fixed {self.fixed:.1f}")
        return ", ".join(parts)


def _bytes(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}: name the dtype the model is loaded in.")
    return DTYPE_BYTES[dtype]


def _check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(ENGINES)}.")


def training_state_gb(params: float, engine: str, gpus: int, dtype: str = "bfloat16",
                      moments_dtype: str | None = None) -> tuple[float, float, float]:
    """``(weights, gradients, optimizer state)`` per GPU in GB for AdamW full fine-tuning (module docstring's table).
    ``moments_dtype`` (single and ddp only): the dtype of AdamW's two moments, the weights' by default (torch's AdamW);
    ``"float32"`` counts them as optimizers with float32 state keep them."""
    _check_engine(engine)
    if gpus < 1:
        raise ValueError(f"gpus must be at least 1, got {gpus}.")
    b = _bytes(dtype)
    m = _bytes(moments_dtype or dtype)
    n = gpus
    if engine in ("single", "ddp"):
        grads = b * params * (2 if engine == "ddp" else 1)
        return b * params / GB, grads / GB, 2 * m * params / GB
    if engine == "fsdp":
        return 4 * params / n / GB, 4 * params / n / GB, 8 * params / n / GB
    weights = b * params / (n if engine == "zero3" else 1)
    grads = b * params + 4 * params / n if engine == "zero1" else (b + 4) * params / n
    return weights / GB, grads / GB, 12 * params / n / GB


def activation_gb(shape: ModelShape, tokens: int, dtype: str = "bfloat16", gradient_checkpointing: bool = True) -> float:
    """Activations of one micro-batch of ``tokens`` tokens in GB (module docstring), the LM head's allowance included."""
    b = _bytes(dtype)
    layer = tokens * (10 * shape.hidden_size + 6 * shape.intermediate_size) * b
    if gradient_checkpointing:
        kept = tokens * shape.hidden_size * shape.num_layers * b + layer
    else:
        kept = layer * shape.num_layers
    return kept / GB + ALLOWANCES["lm_head_and_loss"]


def kv_cache_gb(shape: ModelShape, tokens: int) -> float:
    """vLLM's bfloat16 KV cache for ``tokens`` tokens in GB: keys and values of every layer's KV heads."""
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * 2 * tokens / GB


def estimate(shape: ModelShape, *, engine: str, gpus: int, capacity_gb: float, dtype: str = "bfloat16",
             per_device_batch: int = 1, sequence_tokens: int = PROMPT_TOKENS + 512,
             gradient_checkpointing: bool = True, reference_model: bool = False, vllm_share: float | None = None,
             vllm_max_model_len: int | None = None, vllm_tensor_parallel: int = 1,
             moments_dtype: str | None = None) -> MemoryEstimate:
    """The per-device estimate of one run (module docstring). ``gpus``: the processes that shard (all of them, over
    every machine); ``vllm_share``: colocated vLLM's ``vllm_gpu_memory_utilization`` (None: no vLLM on these
    devices)."""
    weights, grads, optimizer = training_state_gb(shape.params, engine, gpus, dtype, moments_dtype)
    b = _bytes(dtype)
    reference = 0.0
    if reference_model:
        reference = b * shape.params / (gpus if engine in ("zero3", "fsdp") else 1) / GB
    activations = activation_gb(shape, per_device_batch * sequence_tokens, dtype, gradient_checkpointing)
    vllm, kv_tokens, kv_needed = 0.0, None, None
    if vllm_share is not None:
        if not 0 < vllm_share < 1:
            raise ValueError(f"vllm_gpu_memory_utilization must be in (0, 1), got {vllm_share}.")
        vllm = vllm_share * capacity_gb
        free = vllm - 2 * shape.params / vllm_tensor_parallel / GB - ALLOWANCES["vllm_working"]
        per_token = kv_cache_gb(shape, 1) / vllm_tensor_parallel
        kv_tokens = max(0, math.floor(free / per_token))
        kv_needed = vllm_max_model_len or shape.max_positions
    return MemoryEstimate(engine=engine, weights=weights, gradients=grads, optimizer=optimizer,
                          buffers=ALLOWANCES["buffers"][engine], reference=reference, activations=activations,
                          vllm=vllm, fixed=ALLOWANCES["fixed"], capacity=capacity_gb, kv_tokens=kv_tokens,
                          kv_tokens_needed=kv_needed)


# ---------------------------------------------------------------------------------------------------- recipes
_HARDWARE = re.compile(r"^#\s*hardware:\s*(?:(\d+)\s+GPUs?,\s*([\d.]+)\s*GB each|CPU,\s*([\d.]+)\s*GB memory)",
                       re.MULTILINE | re.IGNORECASE)
_LAUNCH = re.compile(r"accelerate launch\s+--config_file\s+(\S+\.yaml)")


def parse_hardware(text: str) -> Hardware | None:
    """The ``# hardware: 8 GPUs, 80 GB each`` (or ``# hardware: CPU, 16 GB memory``) line of a recipe's header."""
    m = _HARDWARE.search(text)
    if m is None:
        return None
    if m.group(1):
        return Hardware(int(m.group(1)), float(m.group(2)))
    return Hardware(0, float(m.group(3)))


def recipe_launch_config(text: str) -> str | None:
    """The accelerate config a recipe's header launches with (``accelerate launch --config_file X``), None for a
    recipe run as one process (``trl-entropy grpo --config ...``)."""
    m = _LAUNCH.search(text)
    return m.group(1) if m else None


def engine_from_accelerate_config(config: dict | None) -> tuple[str, int]:
    """``(engine, processes)`` of a loaded accelerate config (None: one process)."""
    if config is None:
        return "single", 1
    kind = str(config.get("distributed_type", "NO")).upper()
    processes = int(config.get("num_processes", 1))
    if kind == "DEEPSPEED":
        stage = int((config.get("deepspeed_config") or {}).get("zero_stage", 0))
        if stage not in (1, 2, 3):
            raise ValueError(f"DeepSpeed zero_stage {stage} is not estimated: use 1, 2 or 3.")
        return f"zero{stage}", processes
    if kind == "FSDP":
        return "fsdp", processes
    if kind in ("MULTI_GPU", "MULTI_CPU"):
        return "ddp", processes
    return "single", 1


def estimate_recipe(recipe: dict, launch: dict | None, hardware: Hardware) -> MemoryEstimate:
    """A recipe's estimate on its named hardware: ``recipe`` its loaded YAML, ``launch`` its loaded accelerate config
    (None for one process). TRL 1.16's defaults fill what the recipe does not set (dtype float32, gradient
    checkpointing on, ``max_completion_length`` 512, ``beta`` 0, ``vllm_gpu_memory_utilization`` 0.3). Sequences are
    ``vllm_max_model_length`` tokens long where set (vLLM caps prompt + completion there), else the dataset's prompt
    bound (:data:`PROMPT_TOKENS_BY_DATASET`, :data:`PROMPT_TOKENS` for any other) plus ``max_completion_length``."""
    model = recipe.get("model_name_or_path")
    if model not in MODEL_SHAPES:
        raise ValueError(f"no shape for the model {model!r}: add it to trl_entropy.memory.MODEL_SHAPES (its parameter "
                         "count and config sizes).")
    shape = MODEL_SHAPES[model]
    engine, processes = engine_from_accelerate_config(launch)
    on_gpu = not recipe.get("use_cpu", False)
    if on_gpu and hardware.gpus < 1:
        raise ValueError("the recipe trains on GPUs but its hardware line names a CPU machine.")
    if on_gpu and processes > hardware.gpus * max(1, int((launch or {}).get("num_machines", 1))):
        raise ValueError(f"the launch config starts {processes} processes, more than the {hardware.gpus} GPUs named.")
    dtype = recipe.get("dtype") or "float32"
    if dtype == "auto":
        raise ValueError("dtype: auto cannot be estimated: name the dtype (bfloat16 for bf16 training).")
    completion = int(recipe.get("max_completion_length", 512))
    prompt = PROMPT_TOKENS_BY_DATASET.get(recipe.get("dataset_name"), PROMPT_TOKENS)
    sequence = int(recipe.get("vllm_max_model_length") or (prompt + completion))
    colocated = bool(recipe.get("use_vllm")) and recipe.get("vllm_mode", "colocate") == "colocate"
    return estimate(
        shape, engine=engine, gpus=processes, capacity_gb=hardware.gb_each, dtype=dtype,
        per_device_batch=int(recipe.get("per_device_train_batch_size", 8)), sequence_tokens=sequence,
        gradient_checkpointing=bool(recipe.get("gradient_checkpointing", True)),
        reference_model=float(recipe.get("beta", 0.0)) > 0,
        vllm_share=float(recipe.get("vllm_gpu_memory_utilization", 0.3)) if colocated else None,
        vllm_max_model_len=recipe.get("vllm_max_model_length"),
        vllm_tensor_parallel=int(recipe.get("vllm_tensor_parallel_size", 1)),
    )
