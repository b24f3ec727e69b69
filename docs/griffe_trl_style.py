"""Griffe extension for the API reference (mkdocs.yml registers it): TRL-style parameter types become plain types.

The package documents parameters the way TRL does::

    Parameters:
        entropy_schedule_anneal_ratio (`float`, *optional*, defaults to `0.1`):
            For `"wsd"`: ...

Griffe's Google-style parser takes everything between the parentheses as the type, so the API pages showed
`` `float`, *optional*, defaults to `0.1` `` in their type column. This extension rewrites such item headers before
any docstring is parsed, in the Parameters / Args / Other Parameters / Attributes sections only, to the plain Google
form ``entropy_schedule_anneal_ratio (float):``: backticks go, `` `a` or `b` `` becomes ``a | b`` (so that griffe
parses it into an expression and links known types), and ``*optional*`` and ``defaults to X`` leave the type. The
default is not lost: the table's "Default" column shows the signature's default (the dataclass field's), which
tests/test_docs.py checks against the docstring's ``defaults to``.

The docstrings themselves stay in TRL's style (a project rule); only griffe's copy of them is rewritten, so any parser
or option that mkdocstrings applies later sees clean headers. Without griffe (e.g. a test environment without the
``docs`` extra) the module still imports: `plain_type` and `rewrite_docstring` are plain string functions.
"""

from __future__ import annotations

import re
from typing import Any

try:
    from griffe import Extension
except ImportError:  # the string functions below do not need griffe
    Extension = object

__all__ = ["TRLStyleTypes", "plain_type", "rewrite_docstring"]

# Google section titles whose items read `name (type): description` (griffe's names for them, lower case).
ITEM_SECTIONS = frozenset({
    "args", "arguments", "params", "parameters",
    "keyword args", "keyword arguments", "other args", "other arguments", "other params", "other parameters",
    "attributes",
})
_TITLE = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?)\s*:\s*$")
# Griffe splits an item at its first colon, so a type never holds one: `name (type): description`.
_ITEM = re.compile(r"^(?P<name>\s*\*{0,2}\w+)\s*\((?P<type>[^:]*)\)(?P<rest>\s*:.*)$")
_OPTIONAL = re.compile(r"[*_]{0,2}optional[*_]{0,2}", re.IGNORECASE)
_DEFAULT = re.compile(r"defaults?\s+to\s+(?P<value>.+)", re.IGNORECASE | re.DOTALL)
_CODE_SPAN = re.compile(r"`([^`]+)`")


def _top_level_parts(text: str) -> list[str]:
    """`text` split at the commas outside code spans and brackets, each part stripped, empty parts dropped."""
    parts, start, depth, in_code = [], 0, 0, False
    for i, char in enumerate(text):
        if char == "`":
            in_code = not in_code
        elif in_code:
            continue
        elif char in "[({":
            depth += 1
        elif char in "])}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def _unquote(text: str) -> str:
    """`text` without the backticks of the code span(s) around it: `` `int` `` -> ``int``."""
    return _CODE_SPAN.sub(r"\1", text).strip()


def is_trl_style(type_text: str) -> bool:
    """Whether an item's parenthesized text is TRL's markdown (code spans, *optional*) rather than a plain type."""
    return "`" in type_text or any(_OPTIONAL.fullmatch(part) for part in _top_level_parts(type_text))


def plain_type(type_text: str) -> tuple[str, str | None]:
    """The plain type and the stated default of TRL's ``(`float`, *optional*, defaults to `0.1`)`` text.

    ``"`float`, *optional*, defaults to `0.1`"`` -> ``("float", "0.1")``; ``"`str` or `None`, *optional*"`` ->
    ``("str | None", None)``; ``"*optional*"`` -> ``("", None)`` (no type given: griffe then takes the signature's).
    """
    kinds, default = [], None
    for part in _top_level_parts(type_text):
        if _OPTIONAL.fullmatch(part):
            continue
        if match := _DEFAULT.fullmatch(part):
            default = _unquote(match.group("value"))
            continue
        kinds.append(part)
    text = ", ".join(kinds)
    alternatives = re.split(r"\s+or\s+", text)
    if len(alternatives) > 1 and all(_CODE_SPAN.fullmatch(a.strip()) for a in alternatives):
        return " | ".join(_unquote(a) for a in alternatives), default
    return _unquote(text), default


def rewrite_docstring(text: str) -> str:
    """`text` (a cleaned docstring) with the TRL-style item headers of its parameter/attribute sections in the plain
    Google form: ``name (`float`, *optional*, defaults to `0.1`): ...`` -> ``name (float): ...``. Anything else,
    descriptions included, is left as written (the number of lines too, so griffe's line numbers stay right)."""
    lines = text.split("\n")
    section_indent = item_indent = None  # indents of the current item section's title and of its items
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if section_indent is not None and indent <= section_indent:
            section_indent = None  # dedented: the section is over
        title = _TITLE.match(line)
        if title:
            if title.group(1).lower() in ITEM_SECTIONS:
                section_indent, item_indent = indent, None
            continue
        if section_indent is None:
            continue
        if item_indent is None:
            item_indent = indent  # the first item sets the items' indent; deeper lines are descriptions
        if indent != item_indent:
            continue
        item = _ITEM.match(line)
        if item and is_trl_style(item.group("type")):
            kind, _ = plain_type(item.group("type"))
            name = item.group("name").rstrip()
            lines[i] = f"{name} ({kind}){item.group('rest')}" if kind else f"{name}{item.group('rest')}"
    return "\n".join(lines)


class TRLStyleTypes(Extension):
    """Rewrite each docstring's TRL-style parameter types (`rewrite_docstring`) as soon as griffe creates its object,
    before mkdocstrings (or anything else) parses it."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        docstring = getattr(obj, "docstring", None)
        if docstring is not None and docstring.value:
            docstring.value = rewrite_docstring(docstring.value)
