"""Command line: `trl-entropy demo [--compare]` and `trl-entropy grpo --config recipes/<name>.yaml`."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field


def _quiet_third_party():
    """Library deprecation chatter and weight-loading bars drown the demo's own output; our warnings stay on."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except Exception:  # pragma: no cover - transformers always present in practice
        pass


def _demo(argv):
    _quiet_third_party()
    from .demo.runner import DEFAULT_METHOD, METHODS, DemoSettings, run_demo

    p = argparse.ArgumentParser(prog="trl-entropy demo", description="Offline GRPO entropy-control demo on CPU.")
    p.add_argument("--compare", action="store_true", help="run plain GRPO and every available control side by side")
    p.add_argument("--methods", nargs="+", choices=sorted(METHODS), help="methods to run (overrides --compare)")
    p.add_argument("--steps", type=int, default=DemoSettings.steps, help="optimizer steps per method")
    p.add_argument("--schedule", default=DemoSettings.schedule, choices=["constant", "linear", "cosine", "wsd"])
    p.add_argument("--target-start", type=float, default=None,
                   help="target entropy at the start (default: the pretrained model's measured entropy)")
    p.add_argument("--target-end-ratio", type=float, default=DemoSettings.target_end_ratio)
    p.add_argument("--anneal-ratio", type=float, default=DemoSettings.anneal_ratio)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output-dir", default=DemoSettings.output_dir)
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error("--steps must be >= 1")
    methods = a.methods or (list(METHODS) if a.compare else [DEFAULT_METHOD])
    settings = DemoSettings(steps=a.steps, seed=a.seed, schedule=a.schedule, target_start=a.target_start,
                            target_end_ratio=a.target_end_ratio, anneal_ratio=a.anneal_ratio,
                            output_dir=a.output_dir, progress=not a.no_progress)
    run_demo(methods, settings)
    return 0


@dataclass
class ScriptArguments:
    """What `trl-entropy grpo` trains on; every `GRPOEntropyConfig` field is accepted too (YAML or command line)."""

    model_name_or_path: str = field(
        default="testbed",
        metadata={"help": "Hub id or local path of the policy, or 'testbed' for the offline testbed model."},
    )
    dataset_name: str = field(
        default="testbed", metadata={"help": "Hub id or local path of the dataset, or 'testbed' (offline)."}
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name."})
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    dataset_prompt_column: str = field(
        default="prompt", metadata={"help": "Column holding the prompt; renamed to 'prompt', which GRPOTrainer reads."}
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["testbed"],
        metadata={"help": "Reward functions: names from trl_entropy.rewards.REWARD_FUNCTIONS or 'module:function'."},
    )


def build_grpo_trainer(script_args: ScriptArguments, training_args):
    """The `GRPOEntropyTrainer` a recipe describes (model, dataset and rewards resolved by name)."""
    from .rewards import get_reward_function
    from .trainers import GRPOEntropyTrainer

    model, tokenizer = script_args.model_name_or_path, None
    if model == "testbed":
        from .demo import testbed

        model, tokenizer = testbed.load_or_pretrain(testbed.TestbedRecipe(), progress=False)
    if script_args.dataset_name == "testbed":
        from .demo import testbed

        train_dataset, _ = testbed.make_datasets(testbed.TestbedRecipe())
    else:
        from datasets import load_dataset

        train_dataset = load_dataset(script_args.dataset_name, script_args.dataset_config,
                                     split=script_args.dataset_train_split)
        if script_args.dataset_prompt_column != "prompt":
            train_dataset = train_dataset.rename_column(script_args.dataset_prompt_column, "prompt")
    rewards = [get_reward_function(name) for name in script_args.reward_funcs]
    return GRPOEntropyTrainer(model=model, reward_funcs=rewards, args=training_args, train_dataset=train_dataset,
                              processing_class=tokenizer)


def parse_grpo_args(argv):
    """(ScriptArguments, GRPOEntropyConfig) from `--config file.yaml` and/or command-line flags (TRL's TrlParser)."""
    from trl import TrlParser

    from .trainers import GRPOEntropyConfig

    parser = TrlParser((ScriptArguments, GRPOEntropyConfig), prog="trl-entropy grpo")
    return parser.parse_args_and_config(args=list(argv))


def _grpo(argv):
    script_args, training_args = parse_grpo_args(argv)
    trainer = build_grpo_trainer(script_args, training_args)
    trainer.train()
    trainer.save_model(training_args.output_dir)
    if training_args.push_to_hub:
        trainer.push_to_hub()
    return 0


USAGE = """usage: trl-entropy <command> [options]

commands:
  demo   offline GRPO entropy-control demo on a tiny pretrained model (CPU, no network)
         trl-entropy demo [--compare] [--steps N] ...
  grpo   train with GRPOEntropyTrainer from a recipe; any GRPOEntropyConfig field also works as a flag
         trl-entropy grpo --config recipes/testbed.yaml [--max_steps 10 ...]
         accelerate launch --config_file recipes/accelerate/ddp.yaml -m trl_entropy.cli grpo --config ..."""


def main(argv=None):
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "demo":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        return _demo(rest)
    if cmd == "grpo":
        return _grpo(rest)
    print(f"trl-entropy: unknown command {cmd!r} (known: demo, grpo)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
