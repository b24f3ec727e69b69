"""Pictures people would rather look at than read: measured entropy against its target, per method."""

from __future__ import annotations

import os

__all__ = ["plot_entropy_curves", "plot_pass_at_k"]


def plot_pass_at_k(curves: dict[str, dict[int, float]], path: str, title: str = "pass@k on held-out problems") -> str:
    """Write a PNG of pass@k against k (log2 axis), one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, (method, values) in enumerate(curves.items()):
        ks = sorted(values)
        ax.plot(ks, [values[k] for k in ks], marker="o", color=f"C{i}", label=method, lw=1.4)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_entropy_curves(curves: dict[str, dict[str, list]], path: str, title: str = "Policy entropy vs target") -> str:
    """Write a PNG with one panel per method (measured entropy, scheduled target) plus an overlay panel.

    ``curves[method]`` has lists ``step``, ``measured`` and optionally ``target`` and a knob (``knob``, ``knob_name``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(curves)
    n = len(methods) + 1
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    axes = axes.flatten()
    overlay = axes[0]
    for i, method in enumerate(methods):
        c = curves[method]
        color = f"C{i}"
        overlay.plot(c["step"], c["measured"], color=color, label=method, lw=1.4)
        ax = axes[i + 1]
        ax.plot(c["step"], c["measured"], color=color, lw=1.4, label="measured")
        if c.get("target") and any(t is not None for t in c["target"]):
            ax.plot(c["step"], c["target"], color="k", ls="--", lw=1.2, label="target")
        ax.set_title(method)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("entropy (nats/token)")
        if c.get("knob"):
            twin = ax.twinx()
            twin.plot(c["step"], c["knob"], color="gray", lw=0.8, alpha=0.7, label=c.get("knob_name", "knob"))
            twin.set_ylabel(c.get("knob_name", "knob"), color="gray")
        ax.legend(loc="upper right", fontsize=8)
    first_target = next((curves[m] for m in methods if curves[m].get("target")), None)
    if first_target is not None:
        overlay.plot(first_target["step"], first_target["target"], color="k", ls="--", lw=1.2, label="target")
    overlay.set_title("all methods")
    overlay.set_xlabel("optimizer step")
    overlay.set_ylabel("entropy (nats/token)")
    overlay.legend(fontsize=8)
    for ax in axes[n:]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
