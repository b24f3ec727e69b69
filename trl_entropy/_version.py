"""The installed distribution's version, read from its metadata (``pyproject.toml``'s ``version``): one source.

A leaf, so that modules that print the version (the model card) need not import the package's root.
"""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("trl-entropy")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
