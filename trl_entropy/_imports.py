"""Importing a user's own code by name, as `trl grpo` finds it: a reward function (`--reward_funcs my_rewards.f`) or
a module that registers a control (`--entropy_control_module my_control`). One helper for the command line, the
`grpo` script and the reward registry. Imports nothing of the package and nothing heavy (the demo's command line
calls it before torch is loaded).
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

__all__ = ["CONTROL_MODULE_FLAGS", "flag_values", "import_user_module"]

# The flag that names modules to import before the flags are parsed (`grpo` and `demo`), in both spellings.
CONTROL_MODULE_FLAGS = ("--entropy_control_module", "--entropy-control-module")


def import_user_module(name: str, what: str, error: type[Exception] = ValueError) -> ModuleType:
    """The module ``name``, looked for among the installed packages and then in the current folder (appended last,
    so that a file there shadows no installed package).

    A module that does not exist is an ``error`` (``ValueError`` unless the caller names its own type) that begins
    with ``what`` and says where it looked; an error inside the module itself, a missing dependency of its own
    included, propagates as it is, so that its traceback says which."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if name != missing and not name.startswith(missing + "."):
            raise
        raise error(f"{what}: there is no module {name!r} (looked among the installed packages and in {cwd}).") \
            from err


def flag_values(args: list[str], flags: tuple[str, ...]) -> list[str]:
    """The values given to any of ``flags`` in ``args``: ``--flag a b`` (up to the next flag) and ``--flag=a``,
    every occurrence, in order; read before the command line is parsed."""
    values, i = [], 0
    while i < len(args):
        arg = args[i]
        if arg in flags:
            i += 1
            while i < len(args) and not args[i].startswith("-"):
                values.append(args[i])
                i += 1
            continue
        if "=" in arg and arg.split("=", 1)[0] in flags:
            values.append(arg.split("=", 1)[1])
        i += 1
    return values
