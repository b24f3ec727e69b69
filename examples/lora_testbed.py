"""LoRA: train a low-rank adapter instead of the whole policy, on the offline testbed (CPU, no network).

    python examples/lora_testbed.py [--max_steps 40] [--output_dir runs/lora]

`GRPOEntropyTrainer` takes TRL's `peft_config` argument unchanged: the base weights stay frozen, only the adapter
trains, and every entropy control works the same way (tested for each control). On a real model, point
`target_modules` at its attention/MLP projections (e.g. "all-linear") and raise `r`.
"""

import argparse

from peft import LoraConfig

from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer
from trl_entropy.demo import testbed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max_steps", type=int, default=40, help="optimizer steps (default: 40)")
    parser.add_argument("--output_dir", default="runs/lora", help="where the adapter and the model card go")
    args = parser.parse_args(argv)

    model, tokenizer = testbed.load_or_pretrain()
    train_dataset, _ = testbed.make_datasets()

    config = GRPOEntropyConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        entropy_control="entrocraft",  # rollout rejection by advantage sign (Li et al. 2026)
        entropy_schedule="linear",
        entropy_schedule_start=0.8,
        entropy_schedule_end=0.5,
        steps_per_generation=4,
        **testbed.grpo_config_kwargs(learning_rate=1e-3),  # adapters usually take a larger learning rate
    )
    peft_config = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
                             task_type="CAUSAL_LM")
    trainer = GRPOEntropyTrainer(model=model, reward_funcs=testbed.accuracy_reward, args=config,
                                 train_dataset=train_dataset, processing_class=tokenizer, peft_config=peft_config)
    trainer.model.print_trainable_parameters()
    trainer.train()
    trainer.save_model()  # saves the adapter (adapter_config.json, adapter weights) and the model card

    last = [h for h in trainer.state.log_history if "entropy_control/measured" in h][-1]
    print(f"step {last['step']}: measured entropy {last['entropy_control/measured']:.3f} nats, "
          f"target {last['entropy_control/target']:.3f}")


if __name__ == "__main__":
    main()
