"""Pictures people would rather look at than read: measured entropy against its target, per method.

``entropy_curves_figure`` and ``pass_at_k_figure`` build the figures (detached ``matplotlib.figure.Figure`` objects,
nothing rendered); ``plot_entropy_curves`` and ``plot_pass_at_k`` write them as PNG files.
"""

from __future__ import annotations

from .._plotting import integer_step_axis, k_axis, line_style, new_figure, save_figure

__all__ = ["plot_entropy_curves", "plot_pass_at_k", "entropy_curves_figure", "pass_at_k_figure",
           "heldout_curves_figure", "plot_heldout_curves"]


def pass_at_k_figure(curves: dict[str, dict[int, float]], title: str = "pass@k on held-out problems"):
    """pass@k against k (log2 axis, one tick per k), one line per method."""
    fig, axes = new_figure(figsize=(6.4, 4.2))
    ax = axes[0, 0]
    all_ks = set()
    i = 0
    for method, values in curves.items():
        ks = sorted(values)
        all_ks.update(ks)
        if method == "base":  # the starting model: the reference the trained ones are read against
            ax.plot(ks, [values[k] for k in ks], marker="o", color="k", ls="--", label="starting model", lw=1.2)
            continue
        ax.plot(ks, [values[k] for k in ks], marker="o", color=f"C{i}", label=method, lw=1.4)
        i += 1
    if all_ks:
        k_axis(ax, all_ks)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_pass_at_k(curves: dict[str, dict[int, float]], path: str, title: str = "pass@k on held-out problems") -> str:
    """Write a PNG of pass@k against k (log2 axis), one line per method."""
    return save_figure(pass_at_k_figure(curves, title), path)


def entropy_curves_figure(curves: dict[str, dict[str, list]], title: str = "Policy entropy vs target"):
    """One panel per method (measured entropy, scheduled target, the knob on a twin axis) plus an overlay panel, and,
    where the runs logged them, a panel of every method's distinct answers per group on solved and unsolved groups.

    ``curves[method]`` has lists ``step``, ``measured`` and optionally ``target``, a knob (``knob``,
    ``knob_name``) and the series ``entropy_control/distinct_answers_solved`` / ``..._unsolved`` (one value per step,
    None where the step generated nothing). Short runs are drawn with markers and every step axis has whole-number
    ticks.
    """
    methods = list(curves)
    answer_keys = {"solved": "entropy_control/distinct_answers_solved",
                   "unsolved": "entropy_control/distinct_answers_unsolved"}
    has_answers = any(v is not None for c in curves.values() for k in answer_keys.values() for v in c.get(k) or [])
    n = len(methods) + 1 + has_answers
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = new_figure(rows, cols, figsize=(4.6 * cols, 3.4 * rows))
    axes = axes.flatten()
    overlay = axes[0]
    for i, method in enumerate(methods):
        c = curves[method]
        color = f"C{i}"
        style = line_style(len(c["step"]))
        overlay.plot(c["step"], c["measured"], color=color, label=method, lw=1.4, **style)
        ax = axes[i + 1]
        ax.plot(c["step"], c["measured"], color=color, lw=1.4, label="measured", **style)
        if c.get("target") and any(t is not None for t in c["target"]):
            ax.plot(c["step"], c["target"], color="k", ls="--", lw=1.2, label="target", **style)
        ax.set_title(method)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("entropy (nats/token)")
        if c.get("knob"):
            twin = ax.twinx()
            twin.plot(c["step"], c["knob"], color="gray", lw=0.8, alpha=0.7, label=c.get("knob_name", "knob"),
                      **style)
            twin.set_ylabel(c.get("knob_name", "knob"), color="gray")
            _readable_constant_axis(twin, c["knob"])
        integer_step_axis(ax)
        ax.legend(loc="best", fontsize=7, framealpha=0.6)
    first_target = next((curves[m] for m in methods if curves[m].get("target")), None)
    if first_target is not None:
        overlay.plot(first_target["step"], first_target["target"], color="k", ls="--", lw=1.2, label="target",
                     **line_style(len(first_target["step"])))
    overlay.set_title("all methods")
    overlay.set_xlabel("optimizer step")
    overlay.set_ylabel("entropy (nats/token)")
    integer_step_axis(overlay)
    if has_answers:
        _answers_panel(axes[len(methods) + 1], curves, answer_keys)
    for ax in axes[n:]:
        ax.axis("off")
    handles, labels = overlay.get_legend_handles_labels()
    if len(axes) > n:  # a spare panel holds the overlay's legend, so that it covers no curve
        axes[n].legend(handles, labels, loc="center", fontsize=8, title="all methods")
    else:
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    fig.suptitle(title)
    return fig


def _answers_panel(ax, curves, keys) -> None:
    """Distinct answers per group, each method in its color: unsolved groups solid, solved groups dashed."""
    for i, (method, c) in enumerate(curves.items()):
        for part, ls in (("unsolved", "-"), ("solved", "--")):
            pts = [(s, v) for s, v in zip(c["step"], c.get(keys[part]) or []) if v is not None]
            if pts:
                ax.plot([s for s, _ in pts], [v for _, v in pts], color=f"C{i}", ls=ls, lw=1.2,
                        **line_style(len(pts)))
    ax.set_title("distinct answers per group:\nunsolved (solid), solved (dashed)", fontsize=9)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("distinct answers")
    integer_step_axis(ax)


def _readable_constant_axis(ax, values) -> None:
    """A knob that never moved gets a range around its value (half of it, at least 0.05 each way) instead of
    matplotlib's ±4%, whose ticks (0.096 ... 0.104 for 0.1) suggest a movement that did not happen."""
    finite = [v for v in values if v is not None]
    if finite and max(finite) == min(finite):
        value = finite[0]
        half = max(abs(value) * 0.5, 0.05)
        ax.set_ylim(value - half, value + half)


def plot_entropy_curves(curves: dict[str, dict[str, list]], path: str, title: str = "Policy entropy vs target") -> str:
    """Write a PNG with one panel per method (measured entropy, scheduled target) plus an overlay panel."""
    return save_figure(entropy_curves_figure(curves, title), path)


def heldout_curves_figure(curves: dict[str, dict[str, list]], title: str = "Held-out pass@k during training"):
    """One panel per logged k (pass@1, pass@16): held-out pass@k against the optimizer step, one line per method.

    ``curves[method]`` has a list ``step`` and one list per key ``"pass@<k>"``; step 0 is the starting model.
    """
    keys = sorted({k for c in curves.values() for k in c if k.startswith("pass@")}, key=lambda k: int(k[5:]))
    fig, axes = new_figure(1, max(1, len(keys)), figsize=(5.2 * max(1, len(keys)), 3.8))
    for ax, key in zip(axes[0], keys):
        for i, (method, c) in enumerate(curves.items()):
            if key in c:
                ax.plot(c["step"], c[key], color=f"C{i}", label=method, lw=1.4, **line_style(len(c["step"])))
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(f"held-out {key}")
        ax.set_title(key)
        integer_step_axis(ax)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(title)
    return fig


def plot_heldout_curves(curves: dict[str, dict[str, list]], path: str,
                        title: str = "Held-out pass@k during training") -> str:
    """Write a PNG of :func:`heldout_curves_figure`."""
    return save_figure(heldout_curves_figure(curves, title), path)
