"""Worker for tests/test_deepspeed.py: GRPOEntropyTrainer runs under `accelerate launch` (DeepSpeed ZeRO-2/3, or a
config accelerate turns into plain data parallelism), 2 CPU processes.

    accelerate launch --config_file CFG ds_worker.py controls NAME[,NAME...] OUT_DIR [--resume]
    accelerate launch --config_file CFG ds_worker.py uneven OUT_DIR

``controls``: each named control of conftest.CONTROL_CONFIGS in turn (4 steps, as tests/mp_worker.py); writes
``OUT_DIR/NAME/rankR.json`` with the rows and metrics of every step, the engine as the trainer saw it (accelerate's
distributed type, the ZeRO stage, whether the parameters were partitioned) and how often the model card was rendered
on this rank. With ``--resume`` the run saves at step 2 and a second trainer resumes from that checkpoint; its rows
and metrics are written too.

``uneven``: the cases where ranks do different work, each under its own watchdog (faulthandler: a hang dumps every
thread's stack and ends the process): a rank whose rollouts are all rejected (entrocraft), zero-std groups on one
rank only (several controls), pass@k over problem counts that differ per rank (one rank with none), with the weights
gathered for generation and without. Writes ``OUT_DIR/CASE/rankR.json``.
"""

import faulthandler
import json
import math
import os
import sys
import traceback
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(__file__))

from conftest import (  # noqa: E402
    CONTROL_CONFIGS,
    count_ones_reward,
    record_windows,
    tiny_args,
    tiny_dataset,
    tiny_model,
    tiny_model_or_path,
    tiny_tokenizer,
)
from mp_worker import Recorder, _exit_cleanly  # noqa: E402
import torch  # noqa: E402

import trl_entropy.evaluation  # noqa: E402
import trl_entropy.model_card  # noqa: E402
import trl_entropy.trainers.grpo_entropy_trainer  # noqa: E402
from trl_entropy import GRPOEntropyTrainer  # noqa: E402
from trl_entropy.engines import running_engine  # noqa: E402
from trl_entropy.evaluation import PassAtKCallback  # noqa: E402

RANK = int(os.environ.get("RANK", "0"))
CASE_TIMEOUT = float(os.environ.get("DS_WORKER_CASE_TIMEOUT", "240"))

# every model card rendered on this rank (the trainer renders it on the main process only)
CARDS = []
_render = trl_entropy.model_card.render_model_card


def _counting_render(*args, **kwargs):
    CARDS.append(kwargs.get("output_dir"))
    return _render(*args, **kwargs)


trl_entropy.model_card.render_model_card = _counting_render

# every time this rank wrote the pictures (EntropyPlotCallback and the trainer's card, main process only)
PICTURES = []
_plots = trl_entropy.evaluation.write_training_plots


def _counting_plots(*args, **kwargs):
    PICTURES.append(1)
    return _plots(*args, **kwargs)


trl_entropy.evaluation.write_training_plots = _counting_plots
trl_entropy.trainers.grpo_entropy_trainer.write_training_plots = _counting_plots


def engine_info(trainer) -> dict:
    """The engine as this process runs it; `partitioned`: the number of parameters of which this process holds only
    a shard (ZeRO-3: `ds_numel` > the local numel)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    params = list(model.parameters())
    partitioned = sum(1 for p in params if hasattr(p, "ds_numel") and p.numel() < p.ds_numel)
    partitioned += sum(1 for p in params if hasattr(p, "to_local") and p.to_local().numel() < p.numel())  # FSDP2
    plugin = trainer.accelerator.state.deepspeed_plugin
    return {"engine": running_engine(trainer.accelerator),
            "distributed_type": str(trainer.accelerator.distributed_type),
            "zero_stage": getattr(plugin, "zero_stage", None), "partitioned": partitioned, "parameters": len(params),
            "max_entropy": trainer.max_entropy, "wrapped": type(trainer.model_wrapped).__name__,
            "bf16": bool(trainer.args.bf16), "ds_bf16": (plugin.deepspeed_config.get("bf16") if plugin else None),
            "dtype": str(params[0].dtype)}


def _write(folder, payload):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"rank{RANK}.json"), "w") as f:
        json.dump(payload, f)


def _metrics(trainer):
    rows = []
    for h in trainer.state.log_history:
        row = {k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in h.items()
               if k.startswith("entropy_control/")}
        if row:
            rows.append([h.get("step"), row])
    return rows


def _train(name, out_dir, reward=count_ones_reward, resume_from=None, setup=None, **overrides):
    if FORCE_FSDP2:
        setup = _chain(force_fsdp2, setup)
    # float32 (GRPOConfig's bf16 default would keep bf16 weights under DeepSpeed and fp32 ones under DDP's autocast: a
    # different optimizer arithmetic, which the comparison with DDP would then measure instead of the engine)
    kw = dict(max_steps=4, per_device_train_batch_size=8, steps_per_generation=2, learning_rate=1e-2, bf16=False,
              **CONTROL_CONFIGS.get(name, {}))
    kw.update(overrides)
    args = tiny_args(out_dir, **kw)
    model = tiny_model_or_path(kw, os.path.join(os.path.dirname(out_dir), "tiny-model"))
    if isinstance(model, str) and torch.distributed.is_initialized():
        torch.distributed.barrier()  # rank 0 writes the folder, the other rank waits for it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = GRPOEntropyTrainer(model=model, reward_funcs=reward, args=args, train_dataset=tiny_dataset(),
                                     processing_class=tiny_tokenizer())
    # whether lm_head's weight was already a shard when the trainer read log(vocabulary) from it (a model loaded from
    # a folder under zero3_init_flag: true is partitioned as it is built)
    head = trainer.model.get_output_embeddings().weight
    sharded_at_start = hasattr(head, "ds_numel") and head.numel() < head.ds_numel
    if setup is not None:
        setup(trainer)
    rec = Recorder()
    rec.trainer = trainer
    trainer.add_callback(rec)
    local_windows = record_windows(trainer)
    trainer.train(resume_from_checkpoint=resume_from)
    return trainer, {"rows": rec.rows, "metrics": _metrics(trainer), "local_windows": local_windows,
                     "world_size": trainer.accelerator.num_processes,
                     "engine": dict(engine_info(trainer), sharded_at_start=sharded_at_start),
                     "warnings": [str(w.message) for w in caught if w.filename == "trl-entropy"]}


FORCE_FSDP2 = "--force-fsdp2" in sys.argv


def force_fsdp2(trainer):
    """Put accelerate's FSDP2 plugin back on a built trainer, before train() prepares the model.

    accelerate 1.15 drops FSDP on CPU (its state enables it for GPU-type devices only; the run would be plain data
    parallel), but torch's fully_shard runs on gloo. With the plugin (built from the launch's FSDP_* environment,
    as on a GPU) on the state, accelerate's prepare shards the model with fully_shard. Test-only."""
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    from trl.distributed import DistributedBackend

    state = trainer.accelerator.state
    state.fsdp_plugin = FullyShardedDataParallelPlugin()
    state.distributed_type = DistributedType.FSDP
    trainer.is_fsdp_enabled = True
    trainer._dist = DistributedBackend(trainer.accelerator)  # TRL's view of the engine (generation, weight sync)


def _chain(first, then):
    def both(trainer):
        first(trainer)
        if then is not None:
            then(trainer)

    return both


def run_controls(names, out_dir, resume):
    for name in names.split(","):
        folder = os.path.join(out_dir, name)
        try:
            extra = dict(save_strategy="steps", save_steps=2) if resume else {}
            CARDS.clear()
            trainer, result = _train(name, os.path.join(folder, "run"), **extra)
            result["cards"] = len(CARDS)
            result["state"] = trainer.entropy_control.state_dict()
            if resume:
                del trainer
                ckpt = os.path.join(folder, "run", "checkpoint-2")
                resumed, again = _train(name, os.path.join(folder, "run"), resume_from=ckpt, **extra)
                result["resumed"] = {"metrics": again["metrics"], "state": resumed.entropy_control.state_dict(),
                                     "target": resumed.entropy_target, "epsilon_high": resumed.epsilon_high}
            _write(folder, result)
        except Exception:  # recorded for this control's test; the next control still runs
            _write(folder, {"error": traceback.format_exc()})
            if torch.distributed.is_initialized():
                torch.distributed.barrier()


def zero_std_on_rank_one(completions, **kwargs):
    """count_ones on rank 0; a constant on rank 1, so every group there has zero reward std (zero advantages)."""
    if RANK == 1:
        return [0.0] * len(completions)
    return count_ones_reward(completions)


# 5 problems over 2 ranks: rank 0 samples problems 0, 2, 4 and rank 1 problems 1, 3; with 1 problem rank 1 has none
LABELS = [1, 1, 0, 0, 0]


def label_reward(prompts, completions, label=None, **kwargs):
    if label is None:  # the training reward (no label column in the training data)
        return count_ones_reward(completions)
    return [float(x) for x in label]


def _case(name, out_dir, fn):
    """Run one uneven case under its own watchdog and write its result (or error)."""
    folder = os.path.join(out_dir, name)
    faulthandler.dump_traceback_later(CASE_TIMEOUT, exit=True)
    try:
        _write(folder, fn(folder))
    except Exception:
        _write(folder, {"error": traceback.format_exc()})
    finally:
        faulthandler.cancel_dump_traceback_later()
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def run_uneven(out_dir):
    def all_rejected(folder):
        # hard mode, target far below the entropy (m = +1): only A > 0 is kept; rank 1's advantages are all zero
        local_kept = []  # this rank's (kept, total) rollouts at each generation batch

        def record_keep(trainer):
            apply_keep = trainer._apply_keep

            def recording(output, keep, loss_mask):
                local_kept.append([int(keep.sum()), int(keep.numel())])
                return apply_keep(output, keep, loss_mask)

            trainer._apply_keep = recording

        _, result = _train("entrocraft", folder, reward=zero_std_on_rank_one, setup=record_keep, max_steps=2,
                           entropy_schedule_start=1.0, entrocraft_mode="hard")
        result["local_kept"] = local_kept
        return result

    def zero_std(folder):
        out = {}
        for name in ("adaptive_clip", "positive_reweight", "w_reinforce", "kl_cov", "clip_cov", "entropic",
                     "entropy_bonus", "trl_adaptive"):
            _, result = _train(name, os.path.join(folder, name), reward=zero_std_on_rank_one, max_steps=2)
            out[name] = result
        return out

    def pass_at_k(folder):
        out = {}
        for gather in (True,) if FORCE_FSDP2 else (True, False):  # ds3_gather_for_generation: ZeRO-3 only
            for count in (5, 1):
                key = f"gather={gather},problems={count}"
                args = tiny_args(os.path.join(folder, key), max_steps=2, per_device_train_batch_size=8,
                                 steps_per_generation=2, entropy_control="adaptive_clip", entropy_schedule_start=2.6,
                                 ds3_gather_for_generation=gather, entropy_plots=gather and count == 5, bf16=False,
                                 save_strategy="steps", save_steps=2)
                CARDS.clear()
                PICTURES.clear()
                trainer = GRPOEntropyTrainer(model=tiny_model(), reward_funcs=label_reward, args=args,
                                             train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
                if FORCE_FSDP2:
                    force_fsdp2(trainer)
                problems = [{"prompt": f"p{i}", "label": LABELS[i]} for i in range(count)]
                # batch_size 4: rank 0 makes more generate() calls than rank 1 (3 vs 2 problems, 1 vs 0)
                cb = PassAtKCallback(trainer, problems, n=4, ks=(1, 4), every_n_steps=1, max_new_tokens=4,
                                     batch_size=4)
                trainer.add_callback(cb)
                trainer.train()
                evals = [{k: v for k, v in h.items() if k.startswith("eval/")} for h in trainer.state.log_history]
                out[key] = {"evals": [e for e in evals if e], "cards": len(CARDS), "pictures": len(PICTURES),
                            "files": sorted(os.listdir(args.output_dir)), "engine": engine_info(trainer)}
        return out

    only = os.environ.get("DS_WORKER_CASES")  # e.g. "pass_at_k": only these cases (to rerun one by hand)
    for name, fn in (("all_rejected", all_rejected), ("zero_std", zero_std), ("pass_at_k", pass_at_k)):
        if not only or name in only.split(","):
            _case(name, out_dir, fn)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "controls":
        run_controls(sys.argv[2], sys.argv[3], resume="--resume" in sys.argv[4:])
    elif mode == "uneven":
        run_uneven(sys.argv[2])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    _exit_cleanly()
