"""The project's web addresses, in one place in code.

``pyproject.toml`` (``[project.urls]``) declares them for the package metadata; :func:`project_urls` reads that
metadata when the installed distribution has it, and falls back to the constants below for a source checkout or an
install made before the addresses existed. A test keeps the constants equal to ``pyproject.toml``.
"""

from __future__ import annotations

__all__ = ["REPOSITORY_URL", "DOCUMENTATION_URL", "ISSUES_URL", "project_urls"]

REPOSITORY_URL = "https://github.com/trl-entropy/trl-entropy"
DOCUMENTATION_URL = "https://trl-entropy.github.io/trl-entropy"
ISSUES_URL = "https://github.com/trl-entropy/trl-entropy/issues"

_DEFAULTS = {"Repository": REPOSITORY_URL, "Documentation": DOCUMENTATION_URL, "Issues": ISSUES_URL}


def project_urls() -> dict[str, str]:
    """``{"Repository": ..., "Documentation": ..., "Issues": ...}``: the installed package's metadata where it
    declares them, else the constants of this module."""
    from importlib import metadata

    urls = dict(_DEFAULTS)
    try:
        entries = metadata.metadata("trl-entropy").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        entries = []
    for entry in entries:  # "Label, https://..."
        label, _, url = entry.partition(",")
        if label.strip() in urls and url.strip():
            urls[label.strip()] = url.strip()
    return urls
