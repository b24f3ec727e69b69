"""Send the `entropy_control/*` metrics to TensorBoard, Trackio or Weights & Biases (TRL's `report_to`).

    pip install tensorboard
    python examples/logging_backends.py --report_to tensorboard [--max_steps 40]   # offline
    tensorboard --logdir runs/logging                                            # then open the dashboard

The metrics go through TRL's own logging, so every backend the `transformers` Trainer supports receives them next
to TRL's (`reward`, `entropy`, `clip_ratio/...`). The other two backends, not run offline here:

    # Trackio (pip install trackio): logs locally by default; `project` names the run group, and
    # `trackio_space_id="user/space"` would also sync to a Hugging Face Space (needs the Hub).
    python examples/logging_backends.py --report_to trackio

    # Weights & Biases (pip install wandb; `wandb login`, or WANDB_MODE=offline to log to disk only).
    WANDB_PROJECT=trl-entropy python examples/logging_backends.py --report_to wandb
"""

import argparse

from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
from trl_entropy.demo import testbed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report_to", default="tensorboard", choices=["tensorboard", "trackio", "wandb", "none"],
                        help="logging backend (default: tensorboard)")
    parser.add_argument("--max_steps", type=int, default=40, help="optimizer steps (default: 40)")
    parser.add_argument("--output_dir", default="runs/logging",
                        help="run folder; TensorBoard writes its event files under <output_dir>/runs/")
    args = parser.parse_args(argv)

    model, tokenizer = testbed.load_or_pretrain()
    train_dataset, _ = testbed.make_datasets()

    kwargs = testbed.grpo_config_kwargs()
    kwargs.update(report_to=args.report_to, run_name="testbed-entrocraft")
    if args.report_to == "trackio":
        kwargs["project"] = "trl-entropy"  # Trackio's project (a local database unless trackio_space_id is set)
    config = GRPOEntropyConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        entropy_control="entrocraft",
        entropy_schedule="cosine",
        entropy_schedule_start=0.8,
        entropy_schedule_end=0.5,
        steps_per_generation=4,
        entropy_plots=False,  # the dashboard shows the curves; no PNG pictures
        **kwargs,
    )
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=testbed.accuracy_reward, args=config,
                                 train_dataset=train_dataset, processing_class=tokenizer)
    trainer.train()
    logged = sorted(k for h in trainer.state.log_history for k in h if k.startswith("entropy_control/"))
    print(f"logged to {args.report_to}: " + ", ".join(dict.fromkeys(logged)))


if __name__ == "__main__":
    main()
