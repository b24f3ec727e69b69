"""Small drawing helpers shared by the training pictures (``evaluation.py``) and the demo's (``demo/plots.py``).

Figures are built as ``matplotlib.figure.Figure`` objects, not through ``pyplot``: nothing is registered with a GUI
backend, the user's backend is left alone (no ``matplotlib.use``), a figure needs no closing, and a test can inspect
one (its lines, markers, tick locators) without rendering it. Needs matplotlib (``pip install trl-entropy[plot]``).
"""

from __future__ import annotations

import os
import uuid

__all__ = ["MARKER_MAX_POINTS", "line_style", "new_figure", "integer_step_axis", "k_axis", "save_figure"]

# A series with at most this many points is drawn with markers: a line through one point has zero length and is
# invisible, and a handful of points read better as points. Longer series are plain lines.
MARKER_MAX_POINTS = 30


def line_style(n_points: int) -> dict:
    """Keyword arguments for ``ax.plot`` of a series of ``n_points`` points: markers when the series is short."""
    return {"marker": "o", "markersize": 4} if n_points <= MARKER_MAX_POINTS else {}


def new_figure(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] = (6.4, 3.8)):
    """A detached ``Figure`` (no pyplot) and its axes as a 2-D array."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def integer_step_axis(ax) -> None:
    """Ticks of the x axis (optimizer steps) at whole numbers only, also when the run has a single step."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def k_axis(ax, ks) -> None:
    """A log2 x axis for pass@k with one labelled tick per evaluated k (1, 2, 4, ...) and no others."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    ks = sorted({int(k) for k in ks})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ks))
    ax.xaxis.set_major_formatter(FixedFormatter([str(k) for k in ks]))
    ax.xaxis.set_minor_locator(NullLocator())
    if len(ks) == 1:  # a log axis around a single value: keep the point in the middle
        ax.set_xlim(ks[0] / 2, ks[0] * 2)


def save_figure(fig, path: str, dpi: int = 110) -> str:
    """Write ``fig`` to ``path`` (PNG) through a temporary file of its own, so a half-written picture is never left
    behind and two writers of the same path (two runs given one ``output_dir``) never take each other's file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    titled = bool(fig.get_suptitle()) if hasattr(fig, "get_suptitle") else getattr(fig, "_suptitle", None) is not None
    legend_below = any(getattr(legend, "_loc", None) == 8 for legend in fig.legends)  # 8: "lower center"
    fig.tight_layout(rect=(0, 0.06 if legend_below else 0, 1, 0.96 if titled else 1))  # room for the title
    tmp = f"{path}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp.png"  # created by savefig: the usual permissions
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path
