"""Every control under the engines CPU cannot run, on a GPU machine: one table.

    python -m benchmarks.gpu_engines --out benchmarks/results/gpu_engines.md     # GPU machine: every run below
    python -m benchmarks.gpu_engines --engines zero3 --controls entropy_bonus    # one engine, one control
    python -m benchmarks.gpu_engines --dry-run                                   # the plan and the launch commands
    python -m benchmarks.gpu_engines --cpu-smoke                                 # one worker on CPU, no engine

What runs (each a short `accelerate launch` of this file's worker, 2 processes where the machine has 2+ GPUs, else
1; a row of the table each; ``--engines`` and ``--controls`` choose a subset):

* every control (trl_entropy.CONTROL_REGISTRY, with benchmarks/gpu_check.py's settings) under DeepSpeed ZeRO-3 (all
  parameters partitioned) and under FSDP2 (recipes/accelerate/fsdp.yaml's settings), TRL's transformers generation;
* every control with ``use_vllm=True``, ``vllm_mode="colocate"``, under plain data parallelism;
* every control with ``vllm_mode="server"``, only where a second GPU exists: the server runs on the last GPU, started
  as TRL 1.16 recommends (``VLLM_SERVER_DEV_MODE=1 vllm serve MODEL --weight-transfer-config '{"backend": "nccl"}'
  --logprobs-mode processed_logprobs --max-logprobs -1``; TRL's ``trl vllm-serve`` is deprecated and only runs that),
  its output kept in ``--logs``/vllm-serve.log, and the trainer on the other GPUs connects to it. On one GPU the rows
  say "skipped" and the commands for a machine with two are printed (NCCL refuses two ranks on one device);
* the shipped GRPO recipes (recipes/*.yaml) on a 0.5B model (`--model`, default a randomly initialised
  Qwen2.5-0.5B-shaped model written to a temporary folder: nothing is downloaded), a few steps each, under ZeRO-3
  (``--no-recipes`` leaves them out; ``--controls`` does too).

What needs more GPUs than the machine has is not claimed: its rows are "skipped", and the commands a user with such a
machine runs are printed after the table. With one GPU, ZeRO-3 and FSDP2 run as one process: the rows show that the
engine starts and trains, not that ranks agree (the CPU stage checks that on 2 processes).

Each row: the engine the trainer saw (trl_entropy.engines.running_engine), whether every rank logged the same
``entropy_control/*`` values at every step, the measured entropy of the first and last step, seconds per step, the
peak GPU memory, or the error. What CPU CI covers already (ZeRO-2/3 with every control, 2 processes:
tests/test_deepspeed.py) is not repeated for its own sake: this script is for what needs CUDA (FSDP2 in accelerate,
vLLM, NCCL, bf16 kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ENGINES = ("zero3", "fsdp2", "vllm_colocate", "vllm_server")
#: TRL 1.16's settings for a server its trainers talk to (trl/scripts/vllm_serve.py, build_command): NCCL weight
#: transfer, log-probabilities after temperature and logit processing, no cap on returned log-probabilities.
VLLM_SERVE_FLAGS = ("--weight-transfer-config", '{"backend": "nccl"}', "--logprobs-mode", "processed_logprobs",
                    "--max-logprobs", "-1")


def controls() -> list[str]:
    from trl_entropy.controls import CONTROL_REGISTRY

    return sorted(CONTROL_REGISTRY)


def control_settings(name: str) -> dict:
    """The configuration of a registered control: benchmarks/gpu_check.py's (a target at 0.9 of the model's own
    starting entropy for a control that follows one)."""
    from benchmarks.gpu_check import control_configs

    settings = dict(control_configs()[name])
    settings.pop("entropy_control")
    return settings


def accelerate_config(kind: str, processes: int, folder: str, cpu: bool = False) -> str:
    """An accelerate config file: "zero3" (every parameter partitioned), "fsdp2" or "ddp"."""
    os.makedirs(folder, exist_ok=True)
    lines = ["compute_environment: LOCAL_MACHINE", "machine_rank: 0", "num_machines: 1",
             f"num_processes: {processes}", "rdzv_backend: static", "same_network: true",
             f"use_cpu: {'true' if cpu else 'false'}"]
    if kind != "zero3":  # with a DeepSpeed config file, the file says the precision (accelerate refuses both)
        lines.append("mixed_precision: " + ("'no'" if cpu else "bf16"))
    if kind == "zero3":
        ds = {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
              "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
              "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                    "stage3_gather_16bit_weights_on_model_save": True}}
        path = os.path.join(folder, "zero3.json")
        with open(path, "w") as f:
            json.dump(ds, f)
        lines += ["distributed_type: DEEPSPEED", "deepspeed_config:", f"  deepspeed_config_file: {path}",
                  "  zero3_init_flag: true"]
    elif kind == "fsdp2":
        lines += ["distributed_type: FSDP", "fsdp_config:", "  fsdp_version: 2",
                  "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP", "  fsdp_reshard_after_forward: true",
                  "  fsdp_state_dict_type: SHARDED_STATE_DICT", "  fsdp_cpu_ram_efficient_loading: true"]
    else:
        lines += ["distributed_type: " + ("MULTI_CPU" if cpu else "MULTI_GPU" if processes > 1 else "NO")]
    path = os.path.join(folder, f"{kind}.yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def write_model(folder: str, tiny: bool = False) -> str:
    """A randomly initialised Qwen2.5-0.5B-shaped model (or gpu_check's tiny shape) and a tokenizer, saved to
    ``folder`` (vLLM and TRL's reference model load from a folder)."""
    from benchmarks.gpu_check import QWEN05B, TINY, build_model, build_tokenizer

    shape = dict(TINY if tiny else QWEN05B)
    if tiny:
        shape["vocab_size"] = 512
    model = build_model(shape, "cpu", None)
    model.save_pretrained(folder)
    tok = build_tokenizer(shape["vocab_size"])
    tok.save_pretrained(folder)
    return folder


def load_tokenizer(folder: str):
    """The folder's tokenizer as saved: AutoTokenizer would pick Qwen2Tokenizer from the model_type, whose own
    pre-tokenizer turns the placeholder words into nothing (TRL sends vLLM token ids, so vLLM's choice is harmless)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(folder)


def plan(engines=ENGINES, names=None, recipes: bool = True) -> list[dict]:
    """The runs, in order: each engine with each control (``names``: a subset), then the recipes under ZeRO-3."""
    runs = []
    for engine in engines:
        for name in controls():
            if names is None or name in names:
                runs.append({"kind": "control", "engine": engine, "control": name})
    if recipes and "zero3" in engines:
        for recipe in sorted(os.listdir(os.path.join(ROOT, "recipes"))):
            if recipe.endswith(".yaml") and recipe != "testbed.yaml":
                runs.append({"kind": "recipe", "engine": "zero3", "recipe": os.path.join("recipes", recipe)})
    return runs


def needs_second_gpu(run: dict) -> bool:
    return run["engine"] == "vllm_server"


def vllm_serve_command(model: str, port: int, gpu_memory_utilization: float, host: str = "127.0.0.1") -> list[str]:
    """`vllm serve` (this interpreter's vLLM) as TRL 1.16 recommends for a server its trainers connect to; run it with
    ``VLLM_SERVER_DEV_MODE=1`` in the environment (its weight-transfer endpoints live behind vLLM's dev mode)."""
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model, "--host", host, "--port", str(port),
           "--gpu-memory-utilization", str(gpu_memory_utilization), *VLLM_SERVE_FLAGS]
    try:
        import importlib.metadata

        from packaging.version import Version

        if Version(importlib.metadata.version("vllm")) >= Version("0.30.0"):
            cmd.append("--enable-scale-out")  # what TRL adds from vLLM 0.30 on (its client's multimodal routes)
    except Exception:  # noqa: BLE001 - vLLM not installed here: the command as printed for a user
        pass
    return cmd


def user_commands(skipped: list[dict], model: str) -> list[str]:
    """What a user with a second GPU runs for the rows skipped here."""
    if not skipped:
        return []
    names = sorted({r["control"] for r in skipped if r.get("control")})
    serve = " ".join(["VLLM_SERVER_DEV_MODE=1 CUDA_VISIBLE_DEVICES=1 vllm serve", model, "--host 127.0.0.1 --port 8000",
                      "--gpu-memory-utilization 0.8", "--weight-transfer-config '{\"backend\": \"nccl\"}'",
                      "--logprobs-mode processed_logprobs --max-logprobs -1"])
    return [
        "# on a machine with 2+ GPUs, all of the skipped rows (this script starts the server on the last GPU):",
        f"python -m benchmarks.gpu_engines --engines vllm_server --controls {','.join(names)}",
        "# the server it starts there (by hand: then train on the other GPUs with --vllm_mode server",
        "# --vllm_server_host 127.0.0.1 --vllm_server_port 8000):",
        serve,
    ]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_command(run: dict, config: str, model: str, out: str, steps: int, server_port: int | None) -> list[str]:
    spec = dict(run, model=model, out=out, steps=steps, server_port=server_port)
    # this interpreter's accelerate, whether or not its environment's bin folder is on PATH
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", config, "--main_process_port", str(_free_port()),
            "-m", "benchmarks.gpu_engines", "--worker", json.dumps(spec)]


# ---------------------------------------------------------------------------------------------------- the worker
def worker(spec: dict) -> dict:
    """One training run inside `accelerate launch`; every rank writes ``out/rankR.json``."""
    import torch
    from datasets import Dataset

    from benchmarks.gpu_check import even_token_reward
    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
    from trl_entropy.engines import running_engine

    rank = int(os.environ.get("RANK", "0"))
    cuda = torch.cuda.is_available() and not spec.get("cpu")
    kw = dict(output_dir=spec["out"], max_steps=spec["steps"], seed=0, report_to="none", save_strategy="no",
              logging_steps=1, disable_tqdm=True, per_device_train_batch_size=8, num_generations=4,
              max_completion_length=spec.get("completion_length", 64), steps_per_generation=2, learning_rate=1e-6,
              bf16=cuda, use_cpu=not cuda, entropy_plots=False)
    if spec["kind"] == "recipe":
        import yaml

        with open(os.path.join(ROOT, spec["recipe"])) as f:
            recipe = yaml.safe_load(f)
        for key in ("model_name_or_path", "dataset_name", "dataset_config", "dataset_train_split", "output_dir",
                    "max_steps", "num_train_epochs", "report_to", "push_to_hub", "hub_model_id", "save_strategy",
                    "logging_steps", "per_device_train_batch_size", "gradient_accumulation_steps",
                    "num_generations", "max_completion_length", "steps_per_generation", "use_vllm", "vllm_mode",
                    "reward_funcs", "dataset_prompt_column"):
            recipe.pop(key, None)
        kw.update({k: v for k, v in recipe.items() if k in GRPOEntropyConfig.__dataclass_fields__})
    else:
        kw["entropy_control"] = spec["control"]
        kw.update(control_settings(spec["control"]))
    if spec["engine"].startswith("vllm"):
        kw.update(use_vllm=True, vllm_mode=spec["engine"].split("_", 1)[1])
        if kw["vllm_mode"] == "server":
            kw.update(vllm_server_host="127.0.0.1", vllm_server_port=spec["server_port"])
        else:
            kw.update(vllm_gpu_memory_utilization=0.3)
    args = GRPOEntropyConfig(**kw)
    g = torch.Generator().manual_seed(0)
    prompts = [" ".join(f"t{int(t)}" for t in torch.randint(2, 500, (16,), generator=g)) for _ in range(256)]
    trainer = GRPOEntropyTrainer(model=spec["model"], reward_funcs=even_token_reward, args=args,
                                 train_dataset=Dataset.from_dict({"prompt": prompts}),
                                 processing_class=load_tokenizer(spec["model"]))
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    metrics = [{k: v for k, v in h.items() if k.startswith("entropy_control/")} for h in trainer.state.log_history]
    measured = [m["entropy_control/measured"] for m in metrics if "entropy_control/measured" in m]
    row = {"engine_seen": running_engine(trainer.accelerator), "metrics": metrics, "measured": measured,
           "seconds_per_step": seconds / max(1, trainer.state.global_step),
           "peak_gib": (torch.cuda.max_memory_allocated() / 2**30) if cuda else None}
    os.makedirs(spec["out"], exist_ok=True)
    with open(os.path.join(spec["out"], f"rank{rank}.json"), "w") as f:
        json.dump(row, f)
    return row


# ---------------------------------------------------------------------------------------------------- the driver
def start_vllm_server(model: str, port: int, gpu: int, log_path: str) -> subprocess.Popen:
    """`vllm serve` (:func:`vllm_serve_command`) on GPU ``gpu``, its output in ``log_path``; waits until it answers
    its health check."""
    import urllib.request

    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu), VLLM_SERVER_DEV_MODE="1")
    log = open(log_path, "w")
    proc = subprocess.Popen(vllm_serve_command(model, port, 0.8), env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)

    def tail() -> str:
        log.flush()
        with open(log_path, errors="replace") as f:
            return "".join(f.readlines()[-5:]).strip()

    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited with {proc.returncode} (log: {log_path}): {tail()}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
            return proc
        except OSError:
            time.sleep(5)
    proc.kill()
    raise RuntimeError(f"vllm serve did not answer within 600 s (log: {log_path}): {tail()}")


def summarise(run: dict, out: str, processes: int, error: str | None) -> dict:
    row = {"run": run.get("control") or run.get("recipe"), "engine": run["engine"], "processes": processes}
    if error:
        lines = [ln.strip() for ln in error.strip().splitlines() if ln.strip().strip("=-")]
        raised = [ln for ln in lines if "Error" in ln or "Exception" in ln] or lines or ["(no output)"]
        return dict(row, status="error: " + raised[-1][:160])
    ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(processes)]
    agree = all(r["metrics"] == ranks[0]["metrics"] for r in ranks)
    first = ranks[0]
    return dict(row, status="ok" if agree else "ranks disagree", engine_seen=first["engine_seen"],
                entropy_first=first["measured"][0] if first["measured"] else None,
                entropy_last=first["measured"][-1] if first["measured"] else None,
                seconds_per_step=first["seconds_per_step"], peak_gib=first["peak_gib"])


def table(rows: list[dict]) -> str:
    head = ["run", "engine", "processes", "engine_seen", "status", "entropy_first", "entropy_last",
            "seconds_per_step", "peak_gib", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.get(k) for k in head]
        lines.append("| " + " | ".join(f"{c:.4g}" if isinstance(c, float) else ("" if c is None else str(c))
                                       for c in cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--dry-run", action="store_true", help="print the plan and the launch commands, run nothing")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="run one control's worker on CPU without an engine (the code path up to where CUDA is needed)")
    p.add_argument("--launch", action="store_true",
                   help="with --cpu-smoke: `accelerate launch` under ZeRO-3 on 2 CPU processes (needs deepspeed)")
    p.add_argument("--model", help="a model folder (default: a random Qwen2.5-0.5B-shaped model, written here)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--engines", default=",".join(ENGINES), help=f"a subset of {','.join(ENGINES)}")
    p.add_argument("--controls", default=None, help="a subset of the registered controls, comma-separated (leaves out "
                   "the recipes)")
    p.add_argument("--no-recipes", dest="recipes", action="store_false", help="leave out the recipes' ZeRO-3 runs")
    p.add_argument("--logs", default=os.path.join(ROOT, "runs", "gpu_engines"),
                   help="where the vLLM server's log is kept (vllm-serve.log)")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "gpu_engines.md"))
    a = p.parse_args(argv)
    engines = [e for e in a.engines.split(",") if e]
    bad = sorted(set(engines) - set(ENGINES))
    names = None if a.controls is None else [n for n in a.controls.split(",") if n]
    unknown = sorted(set(names or ()) - set(controls()))
    if bad or unknown:
        print(f"gpu_engines: unknown {'engines ' + str(bad) if bad else ''}{' and ' if bad and unknown else ''}"
              f"{'controls ' + str(unknown) if unknown else ''}; engines: {', '.join(ENGINES)}; controls: "
              f"{', '.join(controls())}", file=sys.stderr)
        return 2
    if a.worker:
        worker(json.loads(a.worker))
        return 0
    work = tempfile.mkdtemp(prefix="gpu_engines-")
    if a.cpu_smoke:
        model = write_model(os.path.join(work, "model"), tiny=True)
        out = os.path.join(work, "smoke")
        spec = {"kind": "control", "engine": "none", "control": "entropy_bonus", "model": model, "out": out,
                "steps": 2, "cpu": True, "completion_length": 8}
        if a.launch:  # the driver's own path: its ZeRO-3 config, `accelerate launch`, 2 CPU processes
            spec["engine"] = "zero3"
            config = accelerate_config("zero3", 2, os.path.join(work, "configs"), cpu=True)
            cmd = launch_command(spec, config, model, out, 2, None)
            env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
            proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
            rows = [summarise(spec, out, 2, proc.stderr if proc.returncode else None)]
        else:
            worker(spec)
            rows = [summarise(dict(spec, engine="none (CPU smoke)"), out, 1, None)]
        print(table(rows))
        shutil.rmtree(work, ignore_errors=True)
        return 0 if rows[0]["status"] == "ok" and rows[0].get("entropy_first") is not None else 1
    import torch

    gpus = torch.cuda.device_count()
    runs = plan(engines, names, recipes=a.recipes and names is None)
    skipped = [r for r in runs if needs_second_gpu(r) and gpus < 2]
    if a.dry_run:
        processes = max(1, min(2, gpus))
        for run in runs:
            kind = {"zero3": "zero3", "fsdp2": "fsdp2"}.get(run["engine"], "ddp")
            cmd = launch_command(run, os.path.join(work, "configs", f"{kind}.yaml"), a.model or "<random 0.5B>",
                                 os.path.join(work, "<run>"), a.steps, 8000 if run["engine"] == "vllm_server" else None)
            note = "  (skipped here: needs a second GPU)" if run in skipped else ""
            print(" ".join(cmd[:6]), "...", json.dumps(run) + note)
        print(f"{len(runs)} runs ({len(skipped)} skipped here); {gpus} GPU(s) here; processes per run: {processes}")
        for line in user_commands(skipped, a.model or "<model folder>"):
            print(line)
        shutil.rmtree(work, ignore_errors=True)
        return 0
    if gpus == 0:
        print("gpu_engines: no CUDA device here; use --dry-run or --cpu-smoke on CPU.", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
        return 2
    model = a.model or write_model(os.path.join(work, "model"))
    rows = []
    server = None
    log_path = os.path.join(a.logs, "vllm-serve.log")
    try:
        for i, run in enumerate(runs):
            name = run.get("control") or run.get("recipe")
            if run in skipped:
                rows.append({"run": name, "engine": run["engine"], "processes": 0, "status": "skipped",
                             "note": f"needs a second GPU ({gpus} here): the commands are below the table"})
                print(table(rows[-1:]).splitlines()[-1], flush=True)
                continue
            server_port = None
            train_gpus = gpus
            if run["engine"] == "vllm_server":
                if server is None:
                    server_port = _free_port()
                    print(f"starting vllm serve on GPU {gpus - 1}, log: {log_path}", flush=True)
                    server = (start_vllm_server(model, server_port, gpus - 1, log_path), server_port)
                server_port = server[1]
                train_gpus = gpus - 1
            processes = max(1, min(2, train_gpus))
            kind = {"zero3": "zero3", "fsdp2": "fsdp2"}.get(run["engine"], "ddp")
            config = accelerate_config(kind, processes, os.path.join(work, "configs"))
            out = os.path.join(work, f"run{i}")
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(str(g) for g in range(train_gpus)))
            proc = subprocess.run(launch_command(run, config, model, out, a.steps, server_port), env=env, cwd=ROOT,
                                  capture_output=True, text=True, timeout=1800)
            row = summarise(run, out, processes, proc.stderr if proc.returncode else None)
            if processes == 1 and run["engine"] in ("zero3", "fsdp2"):
                row["note"] = "1 process: the engine trains; ranks agreeing is not shown"
            rows.append(row)
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        if server is not None:
            server[0].kill()
        shutil.rmtree(work, ignore_errors=True)
    text = table(rows)
    commands = user_commands(skipped, "<model folder>")
    if commands:
        text += "\n\nNot run here (needs a second GPU):\n\n```bash\n" + "\n".join(commands) + "\n```"
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(f"# benchmarks.gpu_engines, {gpus} GPU(s): {torch.cuda.get_device_name(0)}\n\n{text}\n")
    print(text)
    return 0 if all(r["status"] in ("ok", "skipped") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
