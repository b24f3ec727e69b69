"""Telling a local model folder from a Hub id, so that a mistyped folder is reported as one.

`from_pretrained("./models/qwen")` on a folder that does not exist does not say so: transformers takes the string for
a Hub id and answers "Repo id must be in the form 'repo_name' or 'namespace/repo_name'" or "Repo id must use
alphanumeric chars", which sends the user looking in the wrong place. `check_model_path` says "no such folder" first.
Imports nothing heavy, so the command line and the trainer can both call it before loading anything.
"""

from __future__ import annotations

import os
import re

__all__ = ["check_model_path", "is_hub_model_id", "looks_like_path"]

# A Hub repo id (huggingface_hub's rule): 'name' or 'namespace/name' of letters, digits, '_', '-' and '.', each part
# neither starting nor ending with '-' or '.', and no '--' or '..'
_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
_HUB_ID = re.compile(rf"^{_PART}(?:/{_PART})?$")


def _separators() -> tuple[str, ...]:
    return tuple(s for s in {"/", os.sep, os.altsep} if s)


def is_hub_model_id(name) -> bool:
    """Whether ``name`` reads as a Hub model id (``"name"`` or ``"owner/name"``, huggingface_hub's rule), not as a
    local path: the package's one Hub-id check (the config, the model card and the path checks use it)."""
    return (isinstance(name, str) and bool(_HUB_ID.match(name)) and ".." not in name and "--" not in name
            and len(name.split("/")[-1]) <= 96)



def looks_like_path(name: str) -> bool:
    """Whether `name` is meant as a local path rather than a Hub id.

    A path: `.` or `..`; anything starting with `/`, `./`, `../` or `~`; an absolute path; a name with a separator
    that cannot be a Hub id (`a/b/c`, `runs/x/`); or `first/second` where `first` is a folder here (`runs/my-run` next
    to `runs/`). Not a path: a bare name (`gpt2`) or `namespace/name` with no local folder `namespace` (a Hub id).
    """
    if name in (".", "..") or name.startswith("~") or os.path.isabs(name):
        return True
    separators = _separators()
    if name.startswith(tuple(prefix + s for prefix in (".", "..") for s in separators)):
        return True
    if not any(s in name for s in separators):
        return False
    if not is_hub_model_id(name.replace(os.sep, "/")):
        return True
    first = re.split("|".join(re.escape(s) for s in separators), name, maxsplit=1)[0]
    return os.path.isdir(first)


def _in_hub_cache(repo_id: str) -> bool:
    """Whether the Hub cache holds `repo_id` (no network): then `namespace/name` is the Hub model, not a typo."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # a malformed id or an unusual cache: not cached
        return False


def check_model_path(model, flag: str | None = None):
    """`model` unchanged, or the expanded folder it names; raises if it names a local folder that does not exist.

    Args:
        model: what `from_pretrained` (or `GRPOTrainer(model=...)`) would get: a Hub id, a local folder, a
            `PreTrainedModel` (returned as it is) or an `os.PathLike`.
        flag: the option or argument that gave it (`"--model_name_or_path"`, `"model"`), named in the error.

    Returns:
        `model` itself when it is not a path (a Hub id, a model object); otherwise the folder, with `~` expanded
        (transformers does not expand it).

    Raises:
        FileNotFoundError: "no such folder: ..." when `model` looks like a path (see `looks_like_path`) and is not
            there, instead of transformers' "Repo id must be in the form 'repo_name'".
        NotADirectoryError: when it names a file: `from_pretrained` needs the folder holding `config.json`.
    """
    if not isinstance(model, (str, os.PathLike)):
        return model
    name = os.fspath(model)
    if not looks_like_path(name):
        return model
    path = os.path.expanduser(name)
    if os.path.isdir(path):
        return path
    where = f"{flag}: " if flag else ""
    if os.path.exists(path):
        raise NotADirectoryError(f"{where}{name} is a file, not a folder: give the folder that holds the model's "
                                 "config.json and weights.")
    hub_shaped = is_hub_model_id(name)
    if hub_shaped and _in_hub_cache(name):
        return model
    shown = name if os.path.abspath(path) == name else f"{name} ({os.path.abspath(path)})"
    why = ""
    if hub_shaped:  # 'runs/x' next to a folder 'runs': read as a path, and say why
        first = name.split("/", 1)[0]
        why = f"; read as a local path because ./{first} is a folder (run elsewhere to load the Hub repo {name!r})"
    raise FileNotFoundError(f"{where}no such folder: {shown}{why}. Give an existing folder that holds the model "
                            "(config.json and weights) or a Hub id such as 'Qwen/Qwen2.5-0.5B'.")


def save_model_folder(model, tokenizer, root: str, name: str, marker: str, marker_payload: dict) -> str:
    """Save ``model`` and ``tokenizer`` as the cache entry ``root/name`` and return its path.

    The entry is written to a temporary folder, completed by the file ``marker`` (``marker_payload`` as JSON) and
    renamed into place, so a concurrent reader (another rank, another process) never sees a half-written entry: an
    entry is complete when it has its marker. A stale entry without one is replaced; a complete one that a concurrent
    writer put there first is kept.
    """
    import json
    import shutil
    import tempfile

    path = os.path.join(root, name)
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=root)
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the entry should read like any other cache folder
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        with open(os.path.join(tmp, marker), "w") as f:
            json.dump(marker_payload, f, indent=2, sort_keys=True)
        if os.path.isdir(path) and not os.path.exists(os.path.join(path, marker)):
            shutil.rmtree(path, ignore_errors=True)  # a stale, incomplete entry
        try:
            os.rename(tmp, path)
        except OSError:
            if not os.path.exists(os.path.join(path, marker)):  # not a concurrent writer that won the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path
