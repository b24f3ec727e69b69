"""The benchmarks' run caches: JSON lines, one finished run a line, in ``benchmarks/results/``.

A cache whose name ends in ``.gz`` is gzip-compressed (every cache the docs read: ``benchmarks/results/*.jsonl.gz``);
appending a run adds a gzip member, which keeps the file one valid gzip stream, so an interrupted study resumes as
before. Any other name is plain JSON lines (a scratch cache, a test's). Readers and writers go through
:func:`read_rows` and :func:`append_row`, so either form works everywhere.

Also here, so that two studies share them without importing each other: the payoff studies' cache files, and what a
run records of the code that made it (:func:`provenance`). Commit a study's cache once, when the study is done (or at
its registered stops), not run by run: each commit of a large file stays in the repository's history.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# The payoff studies' caches (docs/payoff.md): study 1 (and 2, 5-7) on the tiny testbed, study 9's constant levels,
# and the SmolLM2 studies 3 and 4 (benchmarks/payoff_smollm2.py).
PAYOFF_TINY = os.path.join(RESULTS_DIR, "payoff_tiny.jsonl.gz")
PAYOFF_TINY_LEVELS = os.path.join(RESULTS_DIR, "payoff_tiny_levels.jsonl.gz")
PAYOFF_SMOLLM2 = {"3": os.path.join(RESULTS_DIR, "payoff_smollm2.jsonl.gz"),
                  "4": os.path.join(RESULTS_DIR, "payoff_smollm2_lr1e-5.jsonl.gz")}

# The key under which a run records the code that made it.
MADE_WITH = "made_with"


def _open(path: str, mode: str):
    if path.endswith(".gz"):
        return gzip.open(path, mode + "t", encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def read_rows(path: str | None) -> list[dict]:
    """The runs cached in ``path``, in the order they were appended; ``[]`` for no path or a missing file."""
    if not path or not os.path.exists(path):
        return []
    with _open(path, "r") as f:
        return [json.loads(line) for line in f if line.strip()]


def append_row(path: str, row: dict) -> None:
    """Append one run to the cache ``path`` (created with its folder if missing)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with _open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def _git_commit() -> str | None:
    """The repository's commit, ``+`` where the working tree differs from it; ``None`` outside a git checkout."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "trl_entropy",
                                "benchmarks"], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+" if dirty else "") if commit else None


def provenance(settings: dict | None = None) -> dict:
    """What a run records of the code that made it: the package's version, the git commit (``+``: with uncommitted
    changes to the package or the benchmarks) and ``settings``, the run's own (JSON-able)."""
    from trl_entropy._version import __version__

    out = {"trl_entropy": __version__, "commit": _git_commit()}
    if settings is not None:
        out["settings"] = json.loads(json.dumps(settings, sort_keys=True, default=str))
    return out


def made_with_line(rows: list[dict]) -> str:
    """One line saying which code made ``rows``: each package version and commit with its number of runs, and the
    runs cached before runs recorded it."""
    counts: dict[str, int] = {}
    for row in rows:
        made = row.get(MADE_WITH)
        name = (f"trl-entropy {made.get('trl_entropy')} at {made.get('commit') or 'an unknown commit'}" if made
                else "an unrecorded version (cached before runs recorded it)")
        counts[name] = counts.get(name, 0) + 1
    return "Runs made with: " + "; ".join(f"{name}: {n}" for name, n in sorted(counts.items())) + "."
