"""Worker for tests/test_multiprocess.py: PassAtKCallback inside a short training run under torchrun (gloo, CPU).

Each rank samples a strided share of the held-out problems; the reward depends only on the problem (a `label`
column), so the exact pass@k over *all* problems is known in advance and any rank missing from the reduction shows.
"""

import json
import os
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(__file__))

from conftest import count_ones_reward, tiny_args, tiny_dataset, tiny_model, tiny_tokenizer  # noqa: E402
from mp_worker import _exit_cleanly  # noqa: E402

from trl_entropy import GRPOEntropyTrainer  # noqa: E402
from trl_entropy.evaluation import PassAtKCallback  # noqa: E402

# 5 problems over 2 ranks: rank 0 gets problems 0, 2, 4 and rank 1 gets 1, 3 (unequal shares on purpose).
LABELS = [1, 1, 0, 0, 0]


def label_reward(prompts, completions, label=None, **kwargs):
    if label is None:  # the training reward (no label column in the training data)
        return count_ones_reward(completions)
    return [float(x) for x in label]


def main(out_dir):
    args = tiny_args(out_dir, max_steps=2, per_device_train_batch_size=8, steps_per_generation=2,
                     entropy_control="adaptive_clip", entropy_schedule_start=2.6)
    trainer = GRPOEntropyTrainer(model=tiny_model(), reward_funcs=label_reward, args=args,
                                 train_dataset=tiny_dataset(), processing_class=tiny_tokenizer())
    problems = [{"prompt": f"p{i}", "label": LABELS[i]} for i in range(len(LABELS))]
    cb = PassAtKCallback(trainer, problems, n=4, ks=(1, 4), every_n_steps=1, max_new_tokens=4)
    trainer.add_callback(cb)
    trainer.train()
    rank = trainer.accelerator.process_index
    evals = [{k: v for k, v in h.items() if k.startswith("eval/")} for h in trainer.state.log_history]
    evals = [e for e in evals if e]
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"world_size": trainer.accelerator.num_processes, "evals": evals, "losses": losses}, f)


if __name__ == "__main__":
    main(sys.argv[1])
    _exit_cleanly()
