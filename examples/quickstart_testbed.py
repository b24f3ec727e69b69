"""Offline quickstart: GRPO with a scheduled entropy target on the tiny CPU testbed (no network, no GPU).

    python examples/quickstart_testbed.py                  # 40 optimizer steps, a few seconds after pretraining
    python examples/quickstart_testbed.py --max_steps 200  # long enough to watch the entropy held, then annealed to half

The testbed is a character-level Qwen2 model built from code and pretrained in-process on 2-digit addition
(~15 s on 2 CPU cores the first time, then cached; `TRL_ENTROPY_CACHE` moves the cache). The feedback entropy
bonus (the package's recommendation: docs/choosing.md) moves a signed entropy coefficient so that the entropy follows
a warmup-stable-anneal target written relative to the model's own starting entropy; the run logs
`entropy_control/*` metrics and writes the pictures and the model card into `--output_dir`.
"""

import argparse

from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
from trl_entropy.demo import testbed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max_steps", type=int, default=40, help="optimizer steps (default: 40)")
    parser.add_argument("--output_dir", default="runs/quickstart", help="where the model, card and pictures go")
    args = parser.parse_args(argv)

    model, tokenizer = testbed.load_or_pretrain()
    train_dataset, _ = testbed.make_datasets()

    config = GRPOEntropyConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        entropy_control="entropy_bonus",  # a signed entropy coefficient under feedback (the recommendation)
        entropy_schedule="wsd",  # hold the start, then anneal
        entropy_schedule_start="initial",  # the model's own entropy, measured on the first batch
        entropy_schedule_end="0.5*initial",  # or numbers, in nats per completion token
        entropy_schedule_anneal_ratio=0.3,  # anneal over the last 30% of the steps
        **testbed.grpo_config_kwargs(),  # CPU-sized GRPO settings for the testbed (report_to="none")
    )
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=testbed.accuracy_reward, args=config,
                                 train_dataset=train_dataset, processing_class=tokenizer)
    trainer.train()
    trainer.save_model()  # weights, model card (README.md) and pictures

    last = [h for h in trainer.state.log_history if "entropy_control/measured" in h][-1]
    print(f"step {last['step']}: measured entropy {last['entropy_control/measured']:.3f} nats, "
          f"target {last['entropy_control/target']:.3f}, coefficient {last['entropy_control/entropy_coef']:+.3f}")
    print(f"model card: {args.output_dir}/README.md")


if __name__ == "__main__":
    main()
