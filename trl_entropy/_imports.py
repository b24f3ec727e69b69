"""Importing a user's own code by name, as `trl grpo` finds it: a reward function (`--reward_funcs my_rewards.f`), a
module that registers a control (`--entropy_control_module my_control`) or an answer extractor (`answer_extractor`).
One helper for the command line, the `grpo` script, the reward registry and the config. Imports nothing of the
package and nothing heavy (the demo's command line calls it before torch is loaded).
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

__all__ = ["CONTROL_MODULE_FLAGS", "flag_values", "import_callable", "import_user_module"]

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


def import_callable(path: str, what: str):
    """The function that ``path`` (``package.module:function`` or ``package.module.function``) names: a reward function
    (``--reward_funcs my_rewards.f``), an answer extractor (``answer_extractor``). The module is found as
    :func:`import_user_module` finds it. A bad path, a missing module or function, or a name that is not callable is
    a ``ValueError`` that begins with ``what`` and ``path`` and says which."""
    module_name, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"{what} {path!r}: write an import path as 'package.module:function' or "
                         "'package.module.function'.")
    module = import_user_module(module_name, f"{what} {path!r}")
    func = getattr(module, attr, None)
    if func is None:
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        hint = f" (its functions: {', '.join(found[:12])}{', ...' if len(found) > 12 else ''})" if found else ""
        raise ValueError(f"{what} {path!r}: module {module_name!r} has no {attr!r}{hint}.")
    if not callable(func):
        raise ValueError(f"{what} {path!r}: {module_name}.{attr} is a {type(func).__name__}, not a function.")
    return func


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
