"""Worker for tests/test_multiprocess.py: short GRPOEntropyTrainer runs under torchrun (gloo, CPU).

    torchrun ... mp_worker.py CONTROL[,CONTROL...] OUT_DIR

Runs each named control in turn in one launch (starting two processes and importing TRL costs more than a 4-step
run: one launch for every control keeps the suite short) and writes, per control and rank, ``OUT_DIR/CONTROL/rank
R.json``: the control's state, the knob and the logged entropy_control metrics after every optimizer step, what the
rank's reward function scored (answers and rewards per generation batch), or the error that ended that control's run
(the other controls still run).
"""

import json
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
    tiny_model_or_path,
    tiny_tokenizer,
)
import torch  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from trl_entropy import GRPOEntropyTrainer  # noqa: E402

CONTROLS = CONTROL_CONFIGS


class RewardLog:
    """`count_ones_reward`, recording what this rank scored in each training generation batch: its completions'
    answers (by the trainer's answer extractor) and rewards, in its own order."""

    __name__ = "count_ones_reward"

    def __init__(self):
        self.trainer = None
        self.batches = []

    def __call__(self, completions, **kwargs):
        rewards = count_ones_reward(completions)
        if "trainer_state" in kwargs:
            self.batches.append({"answers": [self.trainer.answer_extractor(c) for c in completions],
                                 "rewards": rewards})
        return rewards


class Recorder(TrainerCallback):
    def __init__(self):
        self.trainer = None
        self.rows = []

    def on_step_end(self, args, state, control, **kwargs):
        t = self.trainer
        self.rows.append({
            "step": state.global_step,
            "epsilon_high": t.epsilon_high,
            "state": t.entropy_control.state_dict(),
            "measured": t.last_measured_entropy,
            "target": t.entropy_target,
        })


def run_one(name, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    args = tiny_args(out_dir, max_steps=4, per_device_train_batch_size=8, steps_per_generation=2,
                     learning_rate=1e-2, **CONTROLS[name])
    # with a KL reference (beta > 0) the model is passed by folder: transformers writes it on rank 0 only (the process
    # group is up once the config exists), the other rank waits for it
    model = tiny_model_or_path(CONTROLS[name], os.path.join(out_dir, "tiny-model"))
    if isinstance(model, str) and torch.distributed.is_initialized():
        torch.distributed.barrier()
    reward = RewardLog()
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=reward, args=args,
                                 train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    reward.trainer = trainer
    rec = Recorder()
    rec.trainer = trainer
    trainer.add_callback(rec)
    # this rank's own (sum of entropy, token count) of every optimizer step, as it enters the all-reduce
    local_windows = record_windows(trainer)
    trainer.train()
    rank = trainer.accelerator.process_index
    metrics = [{k: v for k, v in h.items() if k.startswith("entropy_control/")} for h in trainer.state.log_history]
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"world_size": trainer.accelerator.num_processes, "rows": rec.rows, "metrics": metrics,
                   "local_windows": local_windows, "scored": reward.batches,
                   "num_generations": trainer.num_generations}, f)


def _exit_cleanly() -> None:
    """Leave without running C++ destructors.

    On a loaded machine, gloo's background threads occasionally abort the interpreter at exit ("terminate called
    without an active exception", SIGABRT) after the run itself has finished. The results are on disk by now: wait until
    every rank has written them, then exit directly.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(names, out_dir):
    for name in names.split(","):
        folder = os.path.join(out_dir, name)
        try:
            run_one(name, folder)
        except Exception:  # recorded for the test of this control; the next control still runs
            rank = int(os.environ.get("RANK", "0"))
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
                json.dump({"error": traceback.format_exc()}, f)
            if torch.distributed.is_initialized():
                torch.distributed.barrier()  # the other rank may still be inside its run: meet before the next one


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    _exit_cleanly()
