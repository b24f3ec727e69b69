"""Command line: `trl-entropy demo [--compare]`."""

from __future__ import annotations

import argparse
import os
import sys


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


def main(argv=None):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: trl-entropy demo [--compare] [--steps N] ...\n\ncommands:\n  demo   offline GRPO entropy-control "
              "demo on a tiny pretrained model (CPU, no network)")
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "demo":
        return _demo(rest)
    print(f"trl-entropy: unknown command {cmd!r} (known: demo)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
