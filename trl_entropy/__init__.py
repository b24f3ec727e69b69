"""trl-entropy: policy entropy as a schedulable training hyperparameter for GRPO in Hugging Face TRL."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ._version import __version__

# The public names load on first access (PEP 562), so that `import trl_entropy.cli` (and `trl-entropy --help`) does
# not pull in torch, transformers and TRL. `from trl_entropy import GRPOEntropyConfig` works as before.
_LAZY = {
    "GRPOEntropyConfig": ".trainers",
    "GRPOEntropyTrainer": ".trainers",
    "EntropyScheduleCallback": ".scheduling",
    "make_schedule": ".scheduling",
    "PassAtKCallback": ".evaluation",
    "EntropyPerformanceFitCallback": ".evaluation",
    "EntropyPlotCallback": ".evaluation",
    "AnnealingCurriculumCallback": ".scheduling",
    "EntropyControl": ".controls",
    "register_control": ".controls",
}

__all__ = [
    "GRPOEntropyConfig",
    "GRPOEntropyTrainer",
    "EntropyScheduleCallback",
    "make_schedule",
    "PassAtKCallback",
    "EntropyPerformanceFitCallback",
    "EntropyPlotCallback",
    "AnnealingCurriculumCallback",
    "EntropyControl",
    "register_control",
    "__version__",
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names come from __getattr__
    from .controls import EntropyControl, register_control
    from .evaluation import EntropyPerformanceFitCallback, EntropyPlotCallback, PassAtKCallback
    from .scheduling import AnnealingCurriculumCallback, EntropyScheduleCallback, make_schedule
    from .trainers import GRPOEntropyConfig, GRPOEntropyTrainer


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # later lookups skip __getattr__
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
