"""Several processes with `accelerate launch` (data parallel), on the offline testbed.

CPU, two processes (gloo), no GPU or network needed (accelerate's multi-process launcher is torchrun; without a GPU
the processes run on CPU; `torchrun --nproc_per_node 2 examples/accelerate_launch.py` is the same):

    accelerate launch --multi_gpu --num_processes 2 examples/accelerate_launch.py --max_steps 20

GPU machine, one process per GPU, with one of the shipped launch configs (DDP; FSDP2 and DeepSpeed ZeRO-2/3 configs
are in recipes/accelerate/ too; pass `--num_processes` with your GPU count). Not run here (no GPU was available):

    accelerate launch --config_file recipes/accelerate/ddp.yaml examples/accelerate_launch.py

The script also runs as a single process with plain `python examples/accelerate_launch.py`. Every process computes the
same measured entropy (sums and token counts are reduced across processes) and every control takes the same
decision on every rank; the main process pretrains the testbed model first so the others read it from the cache.
"""

import argparse

from accelerate import PartialState

from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
from trl_entropy.demo import testbed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max_steps", type=int, default=40, help="optimizer steps (default: 40)")
    parser.add_argument("--output_dir", default="runs/accelerate", help="where the model and the model card go")
    args = parser.parse_args(argv)

    state = PartialState()
    with state.main_process_first():  # pretrain once (main process), the other ranks then load the cache
        model, tokenizer = testbed.load_or_pretrain(progress=state.is_main_process)
    train_dataset, _ = testbed.make_datasets()

    kwargs = testbed.grpo_config_kwargs()
    kwargs["use_cpu"] = not state.device.type == "cuda"  # the testbed's settings pin CPU; let GPUs be used
    config = GRPOEntropyConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        entropy_control="kl_cov",  # KL-Cov (Cui et al. 2025), global covariance scope: one selection per step
        kl_cov_ratio=0.1,  # testbed-sized ratio: the paper's 2e-3 selects one token of ~250 per step here
        steps_per_generation=4,
        **kwargs,
    )
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=testbed.accuracy_reward, args=config,
                                 train_dataset=train_dataset, processing_class=tokenizer)
    trainer.train()
    trainer.save_model()

    if state.is_main_process:
        last = [h for h in trainer.state.log_history if "entropy_control/measured" in h][-1]
        print(f"{state.num_processes} process(es), step {last['step']}: measured entropy "
              f"{last['entropy_control/measured']:.3f} nats, {last['entropy_control/selected_tokens']:.0f} tokens "
              "selected by KL-Cov in the last step")


if __name__ == "__main__":
    main()
